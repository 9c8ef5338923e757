"""``ebb simulate --cluster``: a scenario of bundled traces runs end to end; a broken one exits 2 in one line."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

SCENARIO = """
name: bundled-pair
duration_s: 1200
zones: {a: 16, b: 16, c: 16}
quotas: [{namespace: shop, min_gpus: 6, max_gpus: 40}]
services:
  - {name: code, namespace: shop, class: order-fulfilment, arrivals: {bundled: azure-code},
     capacity_rps: 3, service_ms: 500, slo_ms: 2000, max_replicas: 12, cold_start_s: 30}
  - {name: conv, namespace: shop, class: order-fulfilment, arrivals: {bundled: azure-conv},
     capacity_rps: 1.5, service_ms: 3000, slo_ms: 6000, max_replicas: 12, cold_start_s: 30}
"""


def _ebb(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", "from ebb.cli.main import main; main()", *args],
                          capture_output=True, text=True, timeout=300, cwd=cwd, check=False)


def test_a_cluster_scenario_runs_and_writes_scorecards_report_and_ledger(tmp_path: Path) -> None:
    (tmp_path / "s.yaml").write_text(SCENARIO, encoding="utf-8")
    res = _ebb("simulate", "--cluster", "s.yaml", "--policy", "ebb,hpa:target=0.7,kpa", "--json", "out.json",
               "--report", "out.html", "--ledger", "l.sqlite", "--quiet", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    data = json.loads((tmp_path / "out.json").read_text())
    assert [r["policy"] for r in data["runs"]] == ["ebb", "hpa:target=0.7", "kpa"]
    ebb = data["runs"][0]
    assert ebb["services"] == 2 and ebb["max_writes_per_100ms"] <= 3 and ebb["quota_breach_s"] == 0
    assert ebb["max_zone_skew"] <= 1
    assert data["best_per_service_peer"]["gpu_hours_online"] > 0
    assert "best per-service peer" in res.stdout
    # The verdict comes first: Ebb against the best per-service peer, before the table.
    assert res.stdout.lstrip().startswith("Ebb: ") and "× the best per-service peer configuration" in res.stdout
    page = (tmp_path / "out.html").read_text()
    assert page.count("<svg") == 6 and "GPUs by zone" in page
    with sqlite3.connect(tmp_path / "l.sqlite") as db:
        tables = [r[0] for r in db.execute("select name from sqlite_master where type='table'")]
        assert tables  # the write batches went into the ledger


def test_a_broken_scenario_exits_2_with_one_line(tmp_path: Path) -> None:
    (tmp_path / "s.yaml").write_text(SCENARIO.replace("capacity_rps: 3", "capacity_rps: -3"), encoding="utf-8")
    res = _ebb("simulate", "--cluster", "s.yaml", "--quiet", cwd=tmp_path)
    assert res.returncode == 2
    assert "services[0].capacity_rps" in res.stderr and "Traceback" not in res.stderr


def test_hostile_scenarios_exit_2_with_one_line_naming_the_key(tmp_path: Path) -> None:
    bomb = SCENARIO + 'generate:\n  - {servegen: m, clients: 2, name: "x{i:>900000000}", class: order-fulfilment}\n'
    device = SCENARIO.replace("{bundled: azure-conv}", "{trace: /dev/zero}")
    for name, text, key in (("bomb.yaml", bomb, "generate[0].name"), ("dev.yaml", device, "services[1].arrivals.trace")):
        (tmp_path / name).write_text(text, encoding="utf-8")
        res = _ebb("simulate", "--cluster", name, "--policy", "ebb", "--quiet", cwd=tmp_path)
        assert res.returncode == 2 and res.stderr.count("\n") == 1, res.stderr
        assert f"{name}: {key}:" in res.stderr and "fix:" in res.stderr and "Traceback" not in res.stderr


def test_a_cluster_run_says_its_measured_estimate_and_time_left_as_policies_finish(tmp_path: Path) -> None:
    (tmp_path / "s.yaml").write_text(SCENARIO, encoding="utf-8")
    res = _ebb("simulate", "--cluster", "s.yaml", "--policy", "static,hpa:target=0.7", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "bundled-pair: 2 policies over 20 min: expected ≈ " in res.stdout
    assert "(measured on 5 % of the scenario)" in res.stdout
    assert "  static: done at " in res.stderr and " left" in res.stderr.split("static: done at")[1].splitlines()[0]


def test_a_cluster_run_past_its_budget_is_refused_in_one_line_before_any_policy_runs(tmp_path: Path) -> None:
    (tmp_path / "s.yaml").write_text(SCENARIO, encoding="utf-8")
    res = _ebb("simulate", "--cluster", "s.yaml", "--policy", "ebb,hpa:target=0.7", "--max-run-min", "0.0001",
               "--json", "out.json", cwd=tmp_path)
    assert res.returncode == 2
    line = res.stderr.strip()
    assert "\n" not in line and "Traceback" not in line
    assert line.startswith("error: this cluster run would take too long: bundled-pair: 2 policies over 20 min")
    assert "past --max-run-min 0.0001" in line and "fewer policies with --policy" in line
    assert "done at" not in res.stderr and not (tmp_path / "out.json").exists()
