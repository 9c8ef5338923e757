"""A comparison's run time is counted before anything runs, then measured on a slice of the trace (#35 item 3)."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import replace

import numpy as np
import pytest

import ebb.sim.compare as compare_module
from ebb.config.policy_specs import parse_policies
from ebb.model.ids import TraceName
from ebb.model.trace import CountSeries, RequestTrace
from ebb.sim.baselines.oracle import search_oracle, search_runs
from ebb.sim.estimate import CALIBRATING, CALIBRATION_ROUNDS, ORACLE, RunEstimate, measure, plan_run
from ebb.sim.policies import KNOWN_POLICIES
from ebb.sim.service_time import ServiceTimeModel
from ebb.sim.settings import SimSettings

SETTINGS = SimSettings()


def _one_per_second(seconds: int) -> RequestTrace:
    """A request at each whole second, ``seconds`` of them (the slice arithmetic is then exact)."""
    arrivals = np.arange(seconds, dtype=np.float64)
    tokens = np.full(seconds, 200, dtype=np.int64)
    return RequestTrace(TraceName("steady"), arrivals, tokens, tokens)


def _clock(step_s: float) -> Callable[[], float]:
    """A fake clock on which every simulation takes exactly ``step_s``."""
    ticks = itertools.count(step=step_s)
    return lambda: float(next(ticks))


def _phase(est: RunEstimate, key: str) -> float:
    return next(p.expected_s for p in est.phases if p.key == key)


def test_a_measured_phase_is_the_slice_time_times_the_work_ratio_times_its_simulations() -> None:
    trace = _one_per_second(20_000)
    plan = plan_run(trace, parse_policies("static,hpa", KNOWN_POLICIES), SETTINGS, fidelity="request")
    est = measure(plan, trace, SETTINGS, clock=_clock(0.5))
    # The slice: 2 % of the requests, i.e. the first 400 s (requests 0..399, last at 399 s).
    # static and the oracle's candidate are known ahead: the engine reconciles them only where they
    # change, so their work is their requests. The HPA reconciles every 15 s through the slice's
    # last completion (just past 399 s: the timeline's last bin ends at 400 s).
    known_ratio = 20_000 / 400
    hpa_ratio = (20_000 + 19_999 / 15) / (400 + 400 / 15)
    assert est.measured_share == pytest.approx(0.02)
    assert _phase(est, "simulating static") == pytest.approx(0.5 * known_ratio, rel=1e-3)
    assert _phase(est, "simulating hpa") == pytest.approx(0.5 * hpa_ratio, rel=1e-3)
    assert _phase(est, ORACLE) == pytest.approx(search_runs(near=False) * 0.5 * known_ratio, rel=1e-3)
    slower = measure(plan, trace, SETTINGS, clock=_clock(1.5))
    assert slower.expected_s == pytest.approx(3 * est.expected_s, rel=1e-3)


def test_a_slice_of_long_requests_counts_its_reconciles_until_they_finish() -> None:
    # Two bursts of 30 s jobs 6 h apart: the slice holds the first burst, all arriving in one second,
    # and the engine reconciles the HPA until the jobs finish — not over the 0 s of the arrivals alone
    # (which priced the whole run 15,000-fold the slice: 2 min 39 s said for 9 s taken).
    t = np.array([10.0] * 16 + [21_610.0] * 16)
    one = np.ones(32, dtype=np.int64)
    trace = RequestTrace(TraceName("bursts"), t, one, one, service_s=np.full(32, 30.0))
    settings = replace(SETTINGS, cluster=replace(SETTINGS.cluster, service=ServiceTimeModel()))
    plan = plan_run(trace, parse_policies("hpa", KNOWN_POLICIES), settings, fidelity="request")
    est = measure(plan, trace, settings, clock=_clock(0.5))
    whole = 32 + plan.span_s / 15
    longest = 0.5 * whole / (16 + 40 / 15)  # the slice ran at least until its jobs finished at 40 s
    assert 0.5 * whole / (16 + 120 / 15) <= _phase(est, "simulating hpa") <= longest


def test_a_peak_calibrated_run_is_planned_with_its_calibration_rounds_then_the_search_near_them() -> None:
    trace = _one_per_second(3_600)
    items = parse_policies("hpa,ebb", KNOWN_POLICIES)
    calibrated = plan_run(trace, items, SETTINGS, fidelity="request", peak_replicas=20).floor()
    assert [p.key for p in calibrated.phases] == [CALIBRATING] * CALIBRATION_ROUNDS + [
        ORACLE, "simulating hpa", "simulating ebb"]
    assert [p.runs for p in calibrated.phases[:CALIBRATION_ROUNDS + 1]] == [16, 5, 5, 5]
    scaled = plan_run(trace, items, SETTINGS, fidelity="request", load_scale=2.0).floor()
    assert [p.key for p in scaled.phases] == [ORACLE, "simulating hpa", "simulating ebb"]
    assert scaled.phases[0].runs == 16 and scaled.requests == 7_200


@pytest.mark.parametrize("near", [False, True])
def test_the_planned_oracle_candidates_are_the_ones_the_search_simulates(near: bool) -> None:
    rate = np.full(600, 3.0)
    tried: list[int] = []

    def meets_slo(schedule: np.ndarray) -> tuple[float, float]:
        tried.append(1)
        return float(schedule.sum()), 0.0

    search_oracle(rate, 60.0, meets_slo, near=(1.1, 10) if near else None)
    assert len(tried) == search_runs(near=near)


def test_a_billion_fold_load_is_counted_without_simulating_and_priced_past_the_default_30_minutes(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def no_simulation(*_args: object) -> None:
        raise AssertionError("a simulation ran")

    monkeypatch.setattr(compare_module, "simulate_requests", no_simulation)
    monkeypatch.setattr(compare_module, "simulate_fluid", no_simulation)
    trace = _one_per_second(1_800)
    items = parse_policies("hpa,static", KNOWN_POLICIES)
    requests = plan_run(trace, items, SETTINGS, fidelity="request", load_scale=1e9)
    assert requests.requests == 1_800 * 10**9 and requests.floor().expected_s > 30 * 60
    series = CountSeries(TraceName("counts"), np.ones(1_800, dtype=np.int64))
    fluid = plan_run(series, items, SETTINGS, fidelity="fluid", load_scale=1e9)
    assert fluid.fleet > 10**7 and fluid.floor().expected_s > 30 * 60  # fluid: the fleet is the cost
    # measure() gives the floor back rather than start a slice of a billion-fold fleet
    assert measure(fluid, series, SETTINGS).measured_share == 0.0


def test_once_the_calibration_finds_the_load_the_later_phases_scale_with_its_requests() -> None:
    trace = _one_per_second(3_600)
    plan = plan_run(trace, parse_policies("hpa", KNOWN_POLICIES), SETTINGS, fidelity="request", peak_replicas=20)
    est = plan.floor()
    found = est.rescaled(2 * est.requests, 2 * est.load_scale)
    assert _phase(found, "simulating hpa") == pytest.approx(2 * _phase(est, "simulating hpa"))
    assert found.phases[0] == est.phases[0]  # the calibration has already run
    assert not found.calibrating and "before calibration" in est.line() and "before" not in found.line()

