"""``ebb.sim.sweep`` and ``ebb sweep``: spec parsing, stable job ids, grid expansion, backends agree."""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import json
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from ebb.cli.main import app
from ebb.cli.sweep import run_job
from ebb.errors import ConfigError, MissingExtraError
from ebb.sim.sweep import (
    BUNDLED_SCENARIOS,
    JobOutcome,
    KNOBS,
    SweepJob,
    canonical_json,
    expand_jobs,
    load_sweep_spec,
    pareto_ids,
    parse_sweep_spec,
    results_json,
    violation_pct,
)
from ebb.sim.sweep_backends import LocalPool, RayBackend, Serial, run_sweep
from ebb.sim.sweep import run_job as sim_run_job
from ebb.sources.traces import BUNDLED_TRACES
from ebb.sources.traces.scenario_series import TraceSeries

SMALL = """\
scenarios: [azure-conv]
policies: ["hpa:target=0.7", static]
knobs:
  cold_start_s: [20, 60]
  minutes: 2
  peak_replicas: 4
seed: 3
"""


def _spec(tmp_path: Path, text: str, name: str = "sweep.yaml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def _config_error(tmp_path: Path, text: str) -> str:
    with pytest.raises(ConfigError) as err:
        load_sweep_spec(_spec(tmp_path, text))
    msg = str(err.value)
    assert "\n" not in msg and str(tmp_path / "sweep.yaml") in msg
    return msg


# --- parsing and expansion -----------------------------------------------------------------------


def test_the_grid_is_scenarios_times_policies_times_the_knob_product(tmp_path: Path) -> None:
    (tmp_path / "counts.txt").write_text("# bin_s=1\n" + "3\n" * 120)
    spec = load_sweep_spec(_spec(tmp_path, """\
scenarios: [azure-conv, counts.txt]
policies: ["hpa:target=0.5,max=40", keda, ebb]
knobs:
  cold_start_s: [10, 30, 60, 120]
  slo_ttft_ms: [1000, 2000]
  minutes: 5
"""))
    assert spec.size == 2 * 3 * 4 * 2 * 1
    jobs = expand_jobs(spec)
    assert len(jobs) == spec.size == len({j.id for j in jobs})
    assert [j.id for j in jobs] == sorted(j.id for j in jobs)
    assert {j.policy for j in jobs} == {"hpa:target=0.5,max=40", "keda", "ebb"}
    counts = [j for j in jobs if j.scenario == "counts.txt"]
    assert len(counts) == 24 and all(j.kind == "trace" and j.path == str((tmp_path / "counts.txt").resolve())
                                     for j in counts)
    assert all(j.path == "bundled:azure-conv" for j in jobs if j.scenario == "azure-conv")
    # Knobs in canonical types, sorted by name; a bare value is a list of one.
    assert jobs[0].knobs[0][0] == "cold_start_s" and isinstance(jobs[0].knob("cold_start_s"), float)
    assert jobs[0].knob("minutes") == 5.0


def test_no_knobs_is_one_grid_point(tmp_path: Path) -> None:
    spec = load_sweep_spec(_spec(tmp_path, "scenarios: [azure-code]\npolicies: [static, oracle]\n"))
    assert spec.size == 2 and [j.knobs for j in expand_jobs(spec)] == [(), ()]


def test_job_ids_are_stable_across_folders_runs_and_spellings(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    text = "scenarios: [azure-conv]\npolicies: [hpa:target=0.7]\nknobs: {cold_start_s: [60], peak_replicas: 6}\n"
    ids_a = [j.id for j in expand_jobs(load_sweep_spec(_spec(a, text)))]
    ids_b = [j.id for j in expand_jobs(load_sweep_spec(_spec(b, text.replace("[60]", "[60.0]")
                                                             .replace("6}", "6.0}"))))]
    assert ids_a == ids_b
    job = expand_jobs(load_sweep_spec(_spec(a, text)))[0]
    assert job.canonical() == ('{"fidelity":"auto","kind":"trace","knobs":{"cold_start_s":60.0,"peak_replicas":6},'
                               '"policy":"hpa:target=0.7","scenario":"azure-conv","seed":0}')
    # The id is a pure function of that text: pinned, so a change of the scheme is deliberate.
    assert job.id == "ff7c2be98a46" == hashlib.sha256(job.canonical().encode()).hexdigest()[:12]
    assert SweepJob(**{**job.__dict__, "path": "/elsewhere"}).id == job.id
    assert SweepJob(**{**job.__dict__, "seed": 1}).id != job.id


def test_bundled_names_are_the_traces_the_loader_knows() -> None:
    assert BUNDLED_SCENARIOS == BUNDLED_TRACES


@pytest.mark.parametrize(("text", "where", "what"), [
    ("scenarios: [azure-conv]\npolicies: [static]\nknob: {}\n", "knob:", "unknown key"),
    ("policies: [static]\n", "scenarios:", "missing"),
    ("scenarios: [azure-conv]\npolicies: []\n", "policies:", "non-empty list"),
    ("scenarios: [azure-conv]\npolicies: [static]\nknobs: {cold_start: [1]}\n", "knobs.cold_start:", "unknown knob"),
    ("scenarios: [azure-conv]\npolicies: [static]\nknobs: {cold_start_s: [10, -1]}\n", "knobs.cold_start_s[1]:",
     "is not a number >= 0"),
    ("scenarios: [azure-conv]\npolicies: [static]\nknobs: {peak_replicas: [2.5]}\n", "knobs.peak_replicas[0]:",
     "not an integer"),
    ("scenarios: [azure-conv]\npolicies: [static]\nknobs: {minutes: [5, 5.0]}\n", "knobs.minutes[1]:", "twice"),
    ("scenarios: [azure-conv]\npolicies: [static]\nknobs: {minutes: []}\n", "knobs.minutes:", "empty list"),
    ("scenarios: [azure-conv]\npolicies: [static]\nknobs: {fault_after_s: 5}\n", "knobs.fault_after_s:",
     "fault_slowdown"),
    ("scenarios: [azure-conv]\npolicies: [static]\nknobs: [1]\n", "knobs:", "mapping"),
    ("scenarios: [azure-conv]\npolicies: [\"hpa,keda\"]\n", "policies[0]:", "names 2 policies"),
    ("scenarios: [azure-conv]\npolicies: [static, hpa, bogus]\n", "policies[2]:", "unknown policy 'bogus'"),
    ("scenarios: [azure-conv]\npolicies: [\"hpa:targt=0.5\"]\n", "policies[0]:", "unknown parameter 'targt'"),
    ("scenarios: [azure-conv]\npolicies: [static, static]\n", "policies[1]:", "twice"),
    ("scenarios: [azure-conv, nowhere.csv]\npolicies: [static]\n", "scenarios[1]:", "does not exist"),
    ("scenarios: [azure-conv]\npolicies: [static]\nseed: -1\n", "seed:", "non-negative integer"),
    ("scenarios: [azure-conv]\npolicies: [static]\nfidelity: exact\n", "fidelity:", "not a fidelity"),
    ("scenarios: [azure-conv]\npolicies: [static]\nknobs: {cold_start_s: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10],\n"
     "  hpa_sync_s: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10], scrape_interval_s: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10],\n"
     "  minutes: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]}\n", "knobs:", "more than 10,000"),
    ("scenarios: [azure-conv\npolicies: [static]\n", "line", "broken YAML"),
    ("- a\n- b\n", "<top>", "expected a mapping"),
])
def test_bad_specs_are_one_line_naming_the_file_and_key_path(tmp_path: Path, text: str, where: str,
                                                              what: str) -> None:
    msg = _config_error(tmp_path, text)
    assert where in msg and what in msg and "(fix:" in msg


def test_a_yaml_scenario_is_a_cluster_scenario_only_with_services(tmp_path: Path) -> None:
    (tmp_path / "cluster.yaml").write_text("services:\n  - name: chat\n")
    (tmp_path / "other.yaml").write_text("classes: []\n")
    spec = load_sweep_spec(_spec(tmp_path, "scenarios: [cluster.yaml]\npolicies: [static, \"hpa:target=0.5\"]\n"))
    assert {j.kind for j in expand_jobs(spec)} == {"cluster"}
    msg = _config_error(tmp_path, "scenarios: [other.yaml]\npolicies: [static]\n")
    assert "scenarios[0]:" in msg and "services:" in msg


# --- one job -------------------------------------------------------------------------------------


def _small_jobs(tmp_path: Path) -> list[SweepJob]:
    return expand_jobs(load_sweep_spec(_spec(tmp_path, SMALL)))


def test_run_job_is_deterministic_and_carries_no_wall_clock(tmp_path: Path) -> None:
    job = _small_jobs(tmp_path)[0]
    first, second = run_job(job), run_job(job)
    assert canonical_json(first) == canonical_json(second)
    assert "wall_s" not in first
    assert first["policy"] == job.policy and first["fidelity"] == "request" and first["gpu_hours"] > 0
    json.dumps(first, allow_nan=False)  # plain JSON: NaN became None


def test_a_cluster_job_goes_to_the_cluster_runner(tmp_path: Path) -> None:
    (tmp_path / "c.yaml").write_text("services: []\n")
    spec = load_sweep_spec(_spec(tmp_path, "scenarios: [c.yaml]\npolicies: [ebb]\nknobs: {writes_per_100ms: 3}\n"
                                           "seed: 7\n"))
    job = expand_jobs(spec)[0]
    calls: list[tuple[Any, ...]] = []

    def cluster_job(path: str, policy: str, knobs: Mapping[str, float], seed: int) -> dict[str, Any]:
        calls.append((path, policy, knobs, seed))
        return {"gpu_hours": 1.5, "slo_violation_pct": float("nan"), "wall_s": 0.3}

    def no_trace(path: str) -> Any:
        pytest.fail("a cluster job must not load a trace")

    assert sim_run_job(job, no_trace, cluster_job) == {"gpu_hours": 1.5, "slo_violation_pct": None}
    assert calls == [(str((tmp_path / "c.yaml").resolve()), "ebb", {"writes_per_100ms": 3.0}, 7)]
    with pytest.raises(ConfigError, match="cannot run cluster scenarios"):
        sim_run_job(job, no_trace)


def test_knobs_must_apply_to_every_scenario(tmp_path: Path) -> None:
    (tmp_path / "c.yaml").write_text("services: []\n")
    msg = _config_error(tmp_path, "scenarios: [azure-conv]\npolicies: [static]\nknobs: {duration_s: 60}\n")
    assert "knobs.duration_s:" in msg and "cluster scenarios only" in msg
    msg = _config_error(tmp_path, "scenarios: [c.yaml]\npolicies: [static]\nknobs: {cold_start_s: 60}\n")
    assert "knobs.cold_start_s:" in msg and "trace scenarios only" in msg
    msg = _config_error(tmp_path, "scenarios: [c.yaml, azure-conv]\npolicies: [static]\nknobs: {minutes: 5}\n")
    assert "separate specs" in msg


def test_warmup_s_is_a_knob_for_trace_and_cluster_scenarios_alike(tmp_path: Path) -> None:
    (tmp_path / "c.yaml").write_text("services: []\n")
    spec = load_sweep_spec(_spec(tmp_path, "scenarios: [c.yaml, azure-conv]\npolicies: [static]\n"
                                           "knobs: {warmup_s: [0, 60]}\n"))
    assert spec.size == 4 and dict(spec.knobs) == {"warmup_s": (0.0, 60.0)}
    msg = _config_error(tmp_path, "scenarios: [azure-conv]\npolicies: [static]\nknobs: {warmup_s: -5}\n")
    assert "knobs.warmup_s[0]:" in msg and ">= 0" in msg


def test_a_trace_job_with_a_warm_up_scores_after_it_and_says_so(tmp_path: Path) -> None:
    spec = load_sweep_spec(_spec(tmp_path, SMALL.replace("cold_start_s: [20, 60]", "warmup_s: [0, 60, 600]")))
    by_warmup = {job.knob("warmup_s"): job for job in expand_jobs(spec) if job.policy == "static"}
    plain, warm = run_job(by_warmup[0.0]), run_job(by_warmup[60.0])
    assert "warmup_s" not in plain and warm["warmup_s"] == 60.0 and warm["requests"] < plain["requests"]
    with pytest.raises(ConfigError, match="--warmup-s 600: the trace lasts"):  # minutes: 2 is 120 s
        run_job(by_warmup[600.0])


def test_violation_pct_reads_both_scorecards() -> None:
    assert violation_pct({"slo_violation_pct": 1.5}) == 1.5
    assert violation_pct({"violations_by_class": {"a": {"requests": 300.0, "violations": 3.0},
                                                  "b": {"requests": 100.0, "violations": 1.0}}}) == 1.0
    assert violation_pct({"slo_violation_pct": None}) is None


_NO_CLUSTER = (importlib.util.find_spec("ebb.sim.cluster") is None
               or importlib.util.find_spec("ebb.sim.cluster.run") is None
               or importlib.util.find_spec("ebb.sim.cluster.sweep_job") is None)


@pytest.mark.skipif(_NO_CLUSTER, reason="ebb.sim.cluster.run is not importable (the cluster simulator is not "
                                        "in this build)")
def test_a_real_cluster_scenario_runs_as_a_sweep_job(tmp_path: Path) -> None:
    run_mod = importlib.import_module("ebb.sim.cluster.run")
    assert {k for k, v in KNOBS.items() if v.applies in ("cluster", "any")} == set(run_mod.JOB_KNOBS)
    (tmp_path / "c.yaml").write_text("""\
name: tiny
duration_s: 600
zones: {zone-a: 8, zone-b: 8}
services:
  - {name: conv, namespace: shop, class: order-fulfilment, qos: Guaranteed, priority: 1000,
     arrivals: {bundled: azure-conv}, capacity_rps: 1.5, service_ms: 3000, slo_ms: 6000, max_replicas: 8}
""")
    spec = load_sweep_spec(_spec(tmp_path, "scenarios: [c.yaml]\npolicies: [ebb, \"hpa:target=0.7\"]\n"
                                           "knobs: {duration_s: [300, 600]}\n"))
    jobs = expand_jobs(spec)
    out = run_sweep(run_job, jobs, Serial())
    assert all(o.error is None for o in out), [o.error for o in out]
    again = run_sweep(run_job, jobs, Serial())
    assert results_json(out) == results_json(again)
    assert all(o.result is not None and "wall_s" not in o.result and violation_pct(o.result) is not None
               for o in out)
    assert pareto_ids(out)
    job = importlib.import_module("ebb.sim.cluster.sweep_job")
    warm = job.cluster_job(str(tmp_path / "c.yaml"), "hpa:target=0.7", {"warmup_s": 299.5}, 0, TraceSeries())
    assert warm["warmup_s"] == 300 and warm["duration_s"] == 600
    with pytest.raises(ConfigError, match=r"warmup_s 300: the trace lasts 300 s"):
        job.cluster_job(str(tmp_path / "c.yaml"), "hpa:target=0.7", {"warmup_s": 300, "duration_s": 300}, 0,
                        TraceSeries())


# --- backends ------------------------------------------------------------------------------------


def test_serial_and_the_process_pool_give_identical_results(tmp_path: Path) -> None:
    jobs = _small_jobs(tmp_path)
    assert len(jobs) == 4
    seen: list[str] = []
    serial = run_sweep(run_job, jobs, Serial())
    pool = run_sweep(run_job, jobs, LocalPool(2), on_done=lambda o: seen.append(o.job.id))
    assert sorted(seen) == [j.id for j in jobs]
    assert [o.job.id for o in pool] == [j.id for j in jobs]
    assert all(o.error is None for o in serial + pool)
    assert results_json(serial) == results_json(pool)
    assert [canonical_json(o.result) for o in serial] == [canonical_json(o.result) for o in pool]


def test_a_failing_job_is_one_line_by_id_and_the_others_still_run(tmp_path: Path) -> None:
    (tmp_path / "bad.csv").write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.97,-3,5\n")
    spec = load_sweep_spec(_spec(tmp_path, SMALL.replace("[azure-conv]", "[azure-conv, bad.csv]")))
    jobs = expand_jobs(spec)
    out = run_sweep(run_job, jobs, LocalPool(2))
    bad = [o for o in out if o.error is not None]
    assert {o.job.scenario for o in bad} == {"bad.csv"} and len(bad) == 4
    assert all("\n" not in (o.error or "") and "bad.csv" in (o.error or "") and "Traceback" not in (o.error or "")
               for o in bad)
    assert all(o.result is not None for o in out if o.job.scenario == "azure-conv")
    entries = json.loads(results_json(out))
    assert [e["id"] for e in entries] == sorted(j.id for j in jobs)
    assert all(e["scorecard"] is None and e["error"] for e in entries if e["scenario"] == "bad.csv")


def test_outcomes_come_back_sorted_by_id_whatever_the_completion_order(tmp_path: Path) -> None:
    jobs = _small_jobs(tmp_path)

    class Backwards:
        name = "backwards"

        def run(self, fn: Any, todo: Any, on_done: Any) -> list[JobOutcome]:
            return [JobOutcome(j, {"n": i}, None, 0.0) for i, j in enumerate(reversed(todo))]

    out = run_sweep(lambda j: {}, jobs, Backwards())
    assert [o.job.id for o in out] == sorted(j.id for j in jobs)


def test_ray_missing_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(MissingExtraError, match=r"pip install 'ebb\[ray\]'"):
        RayBackend("local", 2).run(run_job, _small_jobs(tmp_path), lambda o: None)
    with pytest.raises(ConfigError):
        RayBackend(" ")
    with pytest.raises(ConfigError):
        LocalPool(0)


def test_the_pareto_set_is_the_cheapest_per_violation_level_within_a_workload() -> None:
    def outcome(policy: str, minutes: float, viol: float, gpu: float | None) -> JobOutcome:
        job = SweepJob("azure-conv", "trace", policy, (("cold_start_s", 60.0), ("minutes", minutes)), 0, "auto",
                       "bundled:azure-conv")
        return JobOutcome(job, None if gpu is None else {"slo_violation_pct": viol, "gpu_hours": gpu}, None, 0.0)

    a, b, c, d = outcome("a", 5, 0.0, 3.0), outcome("b", 5, 1.0, 2.0), outcome("c", 5, 1.0, 2.5), outcome("d", 5, 2.0, 2.0)
    other = outcome("e", 10, 9.0, 9.0)  # another workload (minutes): its own group, on its own frontier
    failed = outcome("f", 5, 0.0, None)
    assert set(pareto_ids([a, b, c, d, other, failed])) == {a.job.id, b.job.id, other.job.id}


# --- the command ---------------------------------------------------------------------------------


def test_the_command_writes_sorted_results_and_an_80_column_table(tmp_path: Path) -> None:
    spec, out = _spec(tmp_path, SMALL), tmp_path / "res.json"
    res = CliRunner().invoke(app, ["sweep", str(spec), "--serial", "--out", str(out)])
    assert res.exit_code == 0, res.output
    entries = json.loads(out.read_text())
    assert [e["id"] for e in entries] == sorted(e["id"] for e in entries) and len(entries) == 4
    assert {e["policy"] for e in entries} == {"hpa:target=0.7", "static"}
    assert all(set(e) >= {"scenario", "policy", "knobs", "seed", "scorecard"} for e in entries)
    lines = res.stdout.splitlines()
    assert all(len(line) <= 80 for line in lines), max(lines, key=len)
    assert "Pareto set" in res.stdout and all(e["id"] in res.stdout for e in entries)
    assert "[4/4]" in res.stderr
    js = CliRunner().invoke(app, ["sweep", str(spec), "--serial", "--out", str(tmp_path / "b.json"), "-o", "json"])
    assert js.exit_code == 0 and json.loads(js.stdout) == entries


def test_the_command_exits_2_on_a_bad_spec_or_a_failed_job(tmp_path: Path) -> None:
    def ebb(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-c", "from ebb.cli.main import main; main()", *args],
                              capture_output=True, text=True, timeout=300, cwd=tmp_path)

    bad_spec = _spec(tmp_path, "scenarios: [azure-conv]\npolicies: [static]\nknobs: {cold_start_s: [-1]}\n", "x.yaml")
    res = ebb("sweep", str(bad_spec))
    assert res.returncode == 2 and "knobs.cold_start_s[0]" in res.stderr and "Traceback" not in res.stderr
    (tmp_path / "bad.csv").write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.97,-3,5\n")
    spec = _spec(tmp_path, "scenarios: [bad.csv]\npolicies: [static]\n", "y.yaml")
    res = ebb("sweep", str(spec), "--serial", "--out", "r.json")
    assert res.returncode == 2 and "Traceback" not in res.stderr
    job_id = json.loads((tmp_path / "r.json").read_text())[0]["id"]
    assert f"job {job_id} (bad.csv, static) failed: " in res.stderr
