"""``ebb simulate`` replays any GPU service's trace: a ServeGen chunk file and a request log with a
service-time column from ../shared, and refuses a bad column up front (exit 2, one line)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ebb.cli.main import app

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data"
POLICIES = {"hpa", "keda", "static", "ebb", "oracle"}


def _need(path: Path) -> Path:
    if not path.exists():
        pytest.skip(f"{path} is absent (the shared data folder is not beside the repository)")
    return path


def _simulate(tmp_path: Path, *args: str) -> tuple[list[dict[str, object]], str]:
    out = tmp_path / "cards.json"
    res = CliRunner().invoke(app, ["simulate", "--quiet", "--json", str(out), *args])
    assert res.exit_code == 0, res.output
    cards: list[dict[str, object]] = json.loads(out.read_text())
    return cards, res.output


def test_a_servegen_chunk_file_replays_with_a_fitted_service_time(tmp_path: Path) -> None:
    chunk = _need(SHARED / "traces" / "servegen" / "reason" / "deepseek-r1" / "chunk-35-trace.csv")
    cards, shown = _simulate(tmp_path, "--trace", str(chunk), "--service-median-s", "2", "--service-p99-s", "8",
                      "--concurrency", "4", "--window-s", "0:300", "--peak-replicas", "off",
                      "--slo-ttft-ms", "1000", "--slo-e2e-ms", "20000", "--cold-start-s", "30")
    assert {str(c["policy"]) for c in cards} == POLICIES
    assert all(int(str(c["requests"])) > 1000 and int(str(c["dropped_requests"])) == 0 for c in cards)
    assert "wait" in shown and "TTFT" not in shown  # the first latency is the queue wait here


def test_the_h200_request_log_replays_with_finished_minus_admitted(tmp_path: Path) -> None:
    log = _need(SHARED / "gpu" / "h200-serving" / "requests.csv")
    cards, _ = _simulate(tmp_path, "--trace", str(log), "--time-col", "arrival",
                      "--service-time-column", "finished-admitted", "--concurrency", "64", "--window-s", "0:90",
                      "--peak-replicas", "4", "--slo-ttft-ms", "5000", "--slo-e2e-ms", "30000", "--cold-start-s", "10")
    assert {str(c["policy"]) for c in cards} == POLICIES
    oracle = next(c for c in cards if c["policy"] == "oracle")
    assert float(str(oracle["slo_violation_pct"])) <= 0.1


def test_a_bad_service_time_column_exits_2_naming_the_flag_and_the_fix(tmp_path: Path) -> None:
    log = tmp_path / "diffusion.csv"
    log.write_text("ts,exec_time_seconds\n0.0,2.5\n1.0,3.0\n")
    res = subprocess.run([sys.executable, "-c", "from ebb.cli.main import main; main()", "simulate", "--quiet",
                          "--trace", str(log), "--time-col", "ts", "--service-time-column", "exec_s"],
                         capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == 2
    lines = [ln for ln in (res.stdout + res.stderr).splitlines() if ln.strip()]
    assert len(lines) == 1 and "--service-time-column 'exec_s'" in lines[0] and "fix:" in lines[0]
