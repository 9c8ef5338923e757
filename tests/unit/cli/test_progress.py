"""`ebb simulate` says how long it will take before it starts, and how far it is while it runs."""

from __future__ import annotations

import io
import re
import time
from types import SimpleNamespace

import pytest
from rich.console import Console

import ebb.cli.progress as progress_module
from ebb.cli.progress import ORACLE_RUNS, StepProgress, estimate_run


def test_the_estimate_grows_with_requests_span_and_policies_and_ebb_costs_more_per_second_in_request_fidelity() -> None:
    base = estimate_run(100_000, 3600.0, "request", ["hpa"])
    assert base.runs == 1 + ORACLE_RUNS and base.expected_s > 0
    assert estimate_run(200_000, 3600.0, "request", ["hpa"]).expected_s > base.expected_s
    assert estimate_run(100_000, 3600.0, "request", ["hpa", "keda"]).expected_s > base.expected_s
    assert estimate_run(100_000, 3600.0, "request", ["ebb"]).expected_s > base.expected_s
    assert estimate_run(100_000, 3600.0, "request", ["hpa"], load_scale=2.0).requests == 200_000
    # 58 days of per-second counts in fluid: minutes, not hours.
    fluid = estimate_run(50_000_000, 58 * 86_400.0, "fluid", ["hpa", "ebb"])
    assert 60 < fluid.expected_s < 3600


def test_the_estimate_line_says_requests_span_policies_and_when_calibration_comes_later() -> None:
    line = estimate_run(10_108, 1800.0, "request", ["hpa", "static"], calibrated_later=True).line()
    assert line.startswith("10,108 requests over 30 min before load calibration; 2 policies + the oracle's search")
    assert "expected ≈ " in line


def test_off_a_terminal_each_step_and_a_heartbeat_are_plain_lines_with_percent_and_time_left() -> None:
    out = io.StringIO()
    console = Console(file=io.StringIO(), force_terminal=False)
    with StepProgress(console, 3, 10.0, stream=out, heartbeat_s=0.05) as progress:
        progress("calibrating: load for an oracle peak of 20 replicas")
        progress("oracle: searching the cheapest schedule that meets the SLO")
        progress("simulating hpa")
        time.sleep(0.2)
        progress("simulating ebb")
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("ebb simulate: step 1/3 (0 % done)") and "calibrating" in lines[0]
    assert any(re.match(r"ebb simulate: step 2/3 \(33 % done\), .* left: simulating hpa", ln) for ln in lines)
    assert any("still simulating hpa" in ln for ln in lines), lines
    assert lines[-1].startswith("ebb simulate: step 3/3 (67 % done)")


def test_time_left_comes_from_the_steps_done_once_one_is_done_else_from_the_estimate(
        monkeypatch: pytest.MonkeyPatch) -> None:
    now = [1000.0]  # a fake monotonic clock: the test says how long each step took
    monkeypatch.setattr(progress_module, "time", SimpleNamespace(monotonic=lambda: now[0]))
    console = Console(file=io.StringIO(), force_terminal=False)
    progress = StepProgress(console, 4, 100.0, enabled=False)
    now[0] += 0.5
    assert progress.left_s() == 99.5  # nothing done yet: the estimate less the time spent
    progress("oracle: searching")
    now[0] += 2.0
    progress("simulating hpa")  # one step done, 2.5 s after the start
    assert progress.left_s() == 7.5  # three more steps as quick as the first, not the 100 s estimate
