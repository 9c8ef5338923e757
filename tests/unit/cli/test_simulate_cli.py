"""``ebb simulate`` from the command line: scorecard JSON, HTML report, clear errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from ebb.cli.main import app

REQUIRED_KEYS = {
    "policy", "requests", "gpu_hours", "cost_usd", "slo_violations", "slo_violation_pct", "ttft_p50_ms",
    "ttft_p99_ms", "e2e_p50_ms", "e2e_p99_ms", "scale_ups", "scale_downs", "dropped_requests",
}


def _ebb(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", "from ebb.cli.main import main; main()", *args],
                          capture_output=True, text=True, timeout=300)


def test_simulate_on_the_bundled_trace_writes_the_scorecard_json_and_a_report(tmp_path: Path) -> None:
    out, rep = tmp_path / "s.json", tmp_path / "r.html"
    res = CliRunner().invoke(app, ["simulate", "--trace", "azure-conv", "--peak-replicas", "6", "--quiet",
                                   "--policy", "hpa:target=0.5,hpa:target=0.8,keda:threshold=40,static,oracle",
                                   "--json", str(out), "--report", str(rep)])
    assert res.exit_code == 0, res.output
    cards = json.loads(out.read_text())
    assert [c["policy"] for c in cards] == ["hpa:target=0.5", "hpa:target=0.8", "keda:threshold=40", "static",
                                            "oracle"]
    for c in cards:
        assert REQUIRED_KEYS <= set(c)
        assert c["dropped_requests"] == 0
    html = rep.read_text()
    assert html.startswith("<!DOCTYPE html>") and "keda:threshold=40" in html
    assert "oracle" in res.output
    # HPA settings are in the run: the table and the report compare the others with the HPA frontier.
    assert "vs HPA" in res.output and "frontier" in res.output and "GPU-hours against the HPA frontier" in html


def test_simulate_runs_a_count_series_in_fluid_mode(tmp_path: Path) -> None:
    counts = tmp_path / "counts.txt"
    counts.write_text("# bin_s=1\n" + "\n".join(str(3 + (i // 300) % 5) for i in range(3600)) + "\n")
    out = tmp_path / "s.json"
    res = CliRunner().invoke(app, ["simulate", "--trace", str(counts), "--peak-replicas", "4", "--quiet",
                                   "--policy", "hpa,oracle", "--json", str(out)])
    assert res.exit_code == 0, res.output
    cards = json.loads(out.read_text())
    assert {c["fidelity"] for c in cards} == {"fluid"}


def test_a_malformed_trace_exits_2_naming_the_file_and_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.9799600,10,5\n"
                   "2023-11-16 18:17:04.1000000,-3,5\n")
    res = _ebb("simulate", "--trace", str(bad), "--quiet")
    assert res.returncode == 2
    assert "bad.csv:3" in res.stderr and "Traceback" not in res.stderr


def test_an_unknown_policy_exits_2_listing_the_known_ones() -> None:
    res = _ebb("simulate", "--policy", "hpa,karpenter", "--quiet")
    assert res.returncode == 2
    assert "unknown policy 'karpenter'" in res.stderr and "oracle" in res.stderr


def test_an_empty_trace_file_exits_2_with_a_fix(tmp_path: Path) -> None:
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    res = _ebb("simulate", "--trace", str(empty), "--quiet")
    assert res.returncode == 2
    assert "empty.csv" in res.stderr


def test_simulate_help_lists_every_policy_with_its_knobs() -> None:
    from ebb.sim.policies import KNOWN_POLICIES, POLICY_HELP

    out = CliRunner().invoke(app, ["simulate", "--help"], env={"COLUMNS": "200"}).output
    for name in KNOWN_POLICIES:
        assert f"{name:<10} {POLICY_HELP[name][:40]}" in out, name


def test_simulate_runs_the_llm_serving_peers_with_inline_knobs(tmp_path: Path) -> None:
    out = tmp_path / "peers.json"
    res = CliRunner().invoke(app, ["simulate", "--policy", "kpa:target=8,ray:target=4,keda-vllm,wva:actuator=direct,"
                                   "dynamo:predictor=constant,aibrix,static", "--fidelity", "fluid",
                                   "--peak-replicas", "6", "--ledger", "", "--quiet", "--json", str(out)])
    assert res.exit_code == 0, res.output
    cards = json.loads(out.read_text(encoding="utf-8"))
    cards = cards["scorecards"] if isinstance(cards, dict) else cards
    assert [c["policy"] for c in cards][:3] == ["kpa:target=8", "ray:target=4", "keda-vllm"]
    assert all(c["gpu_hours"] > 0 for c in cards)


def test_an_asleep_tier_splits_the_gpu_hours_and_the_report_says_which_are_billed(tmp_path: Path) -> None:
    counts = tmp_path / "counts.txt"  # 4-minute waves: the lulls are where replicas sleep
    counts.write_text("# bin_s=1\n" + "\n".join(str(40 if (i // 240) % 2 == 0 else 4) for i in range(1800)) + "\n")
    out, rep = tmp_path / "s.json", tmp_path / "r.html"
    res = CliRunner().invoke(app, ["simulate", "--trace", str(counts), "--peak-replicas", "8", "--quiet",
                                   "--cold-start-s", "20", "--policy", "ebb,static,static-sleep",
                                   "--tier", "asleep:wake_s=2,max=8", "--json", str(out), "--report", str(rep)],
                             env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    cards = {c["policy"]: c for c in json.loads(out.read_text())}
    assert cards["ebb"]["asleep_gpu_hours"] > 0 and cards["ebb"]["wakeups"] > 0
    assert "asleep_gpu_hours" not in cards["static"]  # a peer never sleeps
    assert "asleep GPU-h" in res.output and "a sleeping replica holds its GPU" in res.output
    assert "asleep:wake_s=2,max=8,ttl_s=1800" in rep.read_text()
    assert cards["ebb"]["failed_wakes"] == 0 and "failed wakes" in res.output


def test_tier_faults_turn_every_wake_into_a_cold_start_and_the_scorecard_counts_them(tmp_path: Path) -> None:
    counts = tmp_path / "counts.txt"
    counts.write_text("# bin_s=1\n" + "\n".join(str(40 if (i // 240) % 2 == 0 else 4) for i in range(1800)) + "\n")
    out, rep = tmp_path / "s.json", tmp_path / "r.html"
    res = CliRunner().invoke(app, ["simulate", "--trace", str(counts), "--peak-replicas", "8", "--quiet",
                                   "--cold-start-s", "20", "--policy", "ebb,static",
                                   "--tier", "asleep:wake_s=2,max=8,fail=1", "--json", str(out), "--report", str(rep)],
                             env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    ebb = {c["policy"]: c for c in json.loads(out.read_text())}["ebb"]
    assert ebb["failed_wakes"] == ebb["wakeups"] > 0
    assert "failed wakes" in res.output and "fail=1.0" in rep.read_text()


def test_a_tier_that_cannot_work_exits_2_with_one_line() -> None:
    res = _ebb("simulate", "--tier", "asleep:wake=2", "--quiet")
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert "--tier" in res.stderr and "wake_s=2" in res.stderr and len(res.stderr.strip().splitlines()) == 1
