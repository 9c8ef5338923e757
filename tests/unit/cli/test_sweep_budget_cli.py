"""``ebb sweep --max-run-min``: a sweep counted past its budget is refused before any job runs."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

import ebb.sim.sweep_floor as sweep_floor_mod
from ebb.cli.main import app
from ebb.errors import ConfigError
from ebb.sim.sweep import SweepJob
from ebb.sim.sweep_floor import sweep_floor_s


def spec_file(tmp_path: Path, knobs: str) -> Path:
    spec = tmp_path / "sweep.yaml"
    spec.write_text(f"scenarios: [azure-conv]\npolicies: [static, hpa]\nknobs: {{{knobs}}}\n")
    return spec


def test_a_sweep_counted_past_the_budget_is_refused_before_any_job_runs(tmp_path: Path) -> None:
    spec = spec_file(tmp_path, "load_scale: 3000")  # ~60 M requests per job: its floor alone is minutes
    out = tmp_path / "r.json"
    res = CliRunner().invoke(app, ["sweep", str(spec), "--serial", "--max-run-min", "1", "--out", str(out)])
    assert isinstance(res.exception, ConfigError), res.output  # the CLI's main prints it as one line, exit 2
    text = str(res.exception)
    assert text.startswith(f"{spec}: this sweep would take too long: 2 jobs in this process, expected ≥ ")
    assert "past --max-run-min 1 (fix: " in text and "minutes knob" in text and "\n" not in text
    assert "[1/2]" not in res.stderr and not out.exists()


def test_a_small_sweep_says_its_counted_floor_and_runs(tmp_path: Path) -> None:
    spec = spec_file(tmp_path, "minutes: 1, peak_replicas: 2")
    res = CliRunner().invoke(app, ["sweep", str(spec), "--serial", "--out", str(tmp_path / "r.json")])
    assert res.exit_code == 0, res.output
    assert "2 jobs in this process; expected ≥ " in res.stderr and "(counted, not measured)" in res.stderr
    assert "[2/2]" in res.stderr


def test_a_negative_budget_is_refused(tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["sweep", str(spec_file(tmp_path, "minutes: 1")), "--max-run-min", "-1"])
    assert res.exit_code == 2 and "--max-run-min -1" in res.output


def job(policy: str, kind: str = "trace", cold: int = 60) -> SweepJob:
    return SweepJob("azure-conv", kind, policy, (("cold_start_s", cold),), 0, "auto",  # type: ignore[arg-type]
                    "bundled:azure-conv")


def test_the_floor_prices_each_workload_once_shares_it_among_workers_and_skips_cluster_jobs(
        monkeypatch: pytest.MonkeyPatch) -> None:
    priced: list[SweepJob] = []

    def floor(j: SweepJob, load_trace: object) -> float | None:
        if j.kind == "cluster":
            return None
        priced.append(j)
        return {60: 10.0, 120: 30.0}[int(dict(j.knobs)["cold_start_s"])]

    monkeypatch.setattr(sweep_floor_mod, "job_floor_s", floor)
    jobs = [job("static"), job("hpa"), job("static", cold=120), job("hpa", cold=120), job("ebb", kind="cluster")]
    total, uncounted = sweep_floor_s(jobs, lambda path: None, workers=2)  # type: ignore[arg-type,return-value]
    assert len(priced) == 2 and uncounted == 1
    assert total == 40.0  # (10 + 10 + 30 + 30) / 2 workers
    assert sweep_floor_s(jobs, lambda path: None, workers=100)[0] == 30.0  # at least the longest job
