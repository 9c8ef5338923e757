"""`ebb simulate` says how long it will take before it starts, and how far it is while it runs."""

from __future__ import annotations

import io
import re
import time
from types import SimpleNamespace

import pytest
from rich.console import Console

import ebb.cli.progress as progress_module
from ebb.cli.progress import StepProgress, refuse_over_budget
from ebb.errors import ConfigError
from ebb.sim.estimate import CALIBRATING, ORACLE, Phase, RunEstimate


def _estimate(*phases: tuple[str, float], fidelity: str = "request", measured_share: float = 0.02) -> RunEstimate:
    calibrating = any(key == CALIBRATING for key, _ in phases)
    return RunEstimate(100_000, 1800.0, sum(1 for key, _ in phases if key.startswith("simulating")),
                       tuple(Phase(key, 1, s) for key, s in phases), measured_share, 2.0, calibrating, fidelity)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """A fake monotonic clock for the progress module: the test says how long each step took."""
    now = [1000.0]
    monkeypatch.setattr(progress_module, "time", SimpleNamespace(monotonic=lambda: now[0]))
    return now


def _quiet(est: RunEstimate) -> StepProgress:
    return StepProgress(Console(file=io.StringIO(), force_terminal=False), est, enabled=False)


def test_off_a_terminal_each_step_and_a_heartbeat_are_plain_lines_with_percent_and_time_left() -> None:
    out = io.StringIO()
    console = Console(file=io.StringIO(), force_terminal=False)
    est = _estimate((CALIBRATING, 1.0), (ORACLE, 1.0), ("simulating hpa", 0.1), ("simulating ebb", 0.1))
    with StepProgress(console, est, stream=out, heartbeat_s=0.05) as progress:
        progress("calibrating: load for an oracle peak of 20 replicas")
        progress("oracle: searching the cheapest schedule that meets the SLO")
        progress("simulating hpa")
        time.sleep(0.2)
        progress("simulating ebb")
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("ebb simulate: step 1/4 (0 % done)") and "calibrating" in lines[0]
    assert any(re.match(r"ebb simulate: step 3/4 \(\d+ % done\), .* left: simulating hpa", ln) for ln in lines)
    assert any("still simulating hpa" in ln for ln in lines), lines
    assert lines[-1].startswith("ebb simulate: step 4/4 (")


def test_a_phase_past_its_estimate_is_never_said_to_have_0_s_left(clock: list[float]) -> None:
    out = io.StringIO()
    est = _estimate((CALIBRATING, 10.0), ("simulating hpa", 5.0))
    progress = StepProgress(Console(file=io.StringIO(), force_terminal=False), est, stream=out)
    progress("calibrating: load for an oracle peak of 20 replicas")
    clock[0] += 60.0  # six times its 10 s estimate, and still calibrating
    # The overrun phase needs a quarter of its 60 s again; hpa keeps its own measured 5 s.
    assert progress.left_s() == 0.25 * 60.0 + 5.0
    progress("still calibrating: load for an oracle peak of 20 replicas")  # a line within the phase
    last = out.getvalue().splitlines()[-1]
    assert "1 min elapsed, ≈ 20 s left: still calibrating" in last and "≈ 0 s left" not in out.getvalue()


def test_time_left_scales_the_phases_ahead_by_how_fast_their_family_ran(clock: list[float]) -> None:
    est = _estimate((CALIBRATING, 10.0), (CALIBRATING, 5.0), (CALIBRATING, 5.0), (ORACLE, 5.0),
                    ("simulating hpa", 4.0))
    progress = _quiet(est)
    assert progress.left_s() == 29.0  # nothing started: the estimate
    progress("calibrating: load for an oracle peak of 20 replicas")
    clock[0] += 20.0  # the first round took twice its estimate
    progress("calibrating: load x52.8 for a peak of 20 replicas")
    # This round, the third and the oracle's search at twice theirs; hpa at its own measurement.
    assert progress.left_s() == 2 * (5.0 + 5.0 + 5.0) + 4.0
    clock[0] += 10.0
    progress("oracle: searching the cheapest schedule that meets the SLO")  # the third round never ran
    assert progress.left_s() == 2 * 5.0 + 4.0


def test_a_calibration_round_more_than_planned_is_expected_to_take_as_long_as_the_last(clock: list[float]) -> None:
    progress = _quiet(_estimate((CALIBRATING, 8.0), (CALIBRATING, 4.0), ("simulating hpa", 1.0)))
    for took_s in (8.0, 4.0):  # two rounds, each as long as estimated
        progress("calibrating: load x1.5 for a peak of 20 replicas")
        clock[0] += took_s
    progress("calibrating: load x1.4 for a peak of 20 replicas")  # a third, not planned
    assert progress.left_s() == 4.0 + 1.0


def test_the_calibrated_load_replaces_the_estimate_of_the_phases_not_started(clock: list[float]) -> None:
    est = _estimate((CALIBRATING, 10.0), (ORACLE, 5.0), ("simulating hpa", 4.0))
    progress = _quiet(est)
    progress("calibrating: load for an oracle peak of 20 replicas")
    progress.revise(est.rescaled(3 * est.requests, 6.0))
    assert progress.left_s() == 10.0 + 3 * (5.0 + 4.0)


def test_a_policy_run_past_5_percent_of_its_span_is_extrapolated_from_its_own_pace(clock: list[float]) -> None:
    # Measured at 480 s on a slow first slice; the run itself is at 10 % after 12 s (120 s in all).
    progress = _quiet(_estimate((ORACLE, 5.0), ("simulating ebb", 480.0), ("simulating hpa", 10.0)))
    progress("oracle: searching the cheapest schedule that meets the SLO")
    clock[0] += 5.0
    progress("simulating ebb")
    clock[0] += 3.0
    progress.within(0.04)  # too little of the span to judge by: the estimate stands
    assert progress.left_s() == 480.0 - 3.0 + 10.0
    clock[0] += 9.0
    progress.within(0.10)
    assert progress.left_s() == 12.0 * 0.9 / 0.1 + 10.0
    progress.within(0.05)  # never backwards
    assert progress.left_s() == 12.0 * 0.9 / 0.1 + 10.0
    progress("simulating hpa")  # the next run starts from its own measured estimate, not ebb's pace
    assert progress.left_s() == 10.0


def test_a_run_over_the_budget_is_refused_with_its_estimate_and_the_flags_that_shrink_it() -> None:
    slow = _estimate((ORACLE, 2400.0), ("simulating hpa", 600.0))
    with pytest.raises(ConfigError) as exc:
        refuse_over_budget(slow, 30.0, fluid_possible=True)
    msg = str(exc.value)
    assert "expected ≈ 50 min (measured on 2 % of the trace), past --max-run-min 30" in msg
    assert all(f in msg for f in ("--window-s", "--fidelity fluid", "a smaller --load-scale"))
    fluid = _estimate((ORACLE, 2400.0), fidelity="fluid")
    with pytest.raises(ConfigError, match="a smaller --load-scale") as exc:
        refuse_over_budget(fluid, 30.0, fluid_possible=True)
    assert "--fidelity fluid" not in str(exc.value)  # already fluid
    calibrated = _estimate((CALIBRATING, 4000.0))
    with pytest.raises(ConfigError, match="a smaller --peak-replicas"):
        refuse_over_budget(calibrated, 30.0, fluid_possible=False)
    refuse_over_budget(slow, 60.0, fluid_possible=True)  # within an hour's budget
    refuse_over_budget(slow, 0.0, fluid_possible=True)  # 0: no limit
