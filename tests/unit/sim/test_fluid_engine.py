"""The fluid (bin-level) engine: conservation, overload, fleet lifecycle, agreement in the easy cases."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from ebb.model.decision import Decision
from ebb.model.ids import TraceName
from ebb.model.spans import NO_SPANS, Spans
from ebb.model.trace import RequestTrace
from ebb.sim.fleet import FleetLog
from ebb.sim.fluid_engine import FluidDemand, FluidOutcome, simulate_fluid
from ebb.sim.fluid_scoring import score_fluid
from ebb.sim.policy import Observation, Pipeline
from ebb.testing.policies import FixedPolicy, RecordingPolicy, StepPolicy, answer
from ebb.sim.request_engine import simulate_requests
from ebb.sim.scoring import score_requests
from ebb.sim.settings import ClusterSettings, SimSettings

COLD_S = 5.0
SETTINGS = SimSettings(cluster=ClusterSettings(cold_start_s=COLD_S))


def _poisson(rate: float, duration_s: float, seed: int = 0) -> RequestTrace:
    rng = np.random.default_rng(seed)
    n = rng.poisson(rate * duration_s)
    return RequestTrace(TraceName("poisson"), np.sort(rng.uniform(0.0, duration_s, n)),
                        rng.integers(50, 2000, n), rng.integers(1, 300, n))


def _demand(trace: RequestTrace, bin_s: float = 1.0) -> FluidDemand:
    nb = int(np.ceil(trace.duration_s / bin_s)) + 1
    counts = np.bincount((trace.arrival_s / bin_s).astype(np.int64), minlength=nb).astype(np.float64)
    return FluidDemand("poisson", bin_s, counts, np.sort(trace.tokens_in.astype(np.float64)),
                       np.sort(trace.tokens_out.astype(np.float64)))


def _constant(rate: float, duration_s: int, bin_s: float = 1.0) -> FluidDemand:
    trace = _poisson(rate, float(duration_s))
    counts = np.full(int(duration_s / bin_s), rate * bin_s)
    d = _demand(trace)
    return FluidDemand("constant", bin_s, counts, d.tokens_in_sample, d.tokens_out_sample)


def _run(demand: FluidDemand, policy: object, settings: SimSettings = SETTINGS) -> tuple[FluidOutcome, FleetLog]:
    return simulate_fluid(demand, policy, settings)  # type: ignore[arg-type]


@pytest.mark.parametrize(("rate", "replicas", "horizon_s"), [(50.0, 4, 3600.0), (150.0, 2, 3600.0),
                                                            (400.0, 2, 0.0)])
def test_every_second_arrivals_equal_completions_plus_requests_in_flight(rate: float, replicas: int,
                                                                         horizon_s: float) -> None:
    demand = _constant(rate, 60)
    settings = SimSettings(cluster=ClusterSettings(cold_start_s=COLD_S), drain_horizon_s=horizon_s)
    # A window longer than the run: each observation holds the cumulative totals since t=0.
    policy = RecordingPolicy(replicas, Pipeline(1, 10**6))
    out, _ = _run(demand, policy, settings)
    checked = 0
    for o in policy.seen[1:]:
        s = int(o.t_s)
        if s > len(demand.counts):
            break  # the pipelines' per-second signals end one second after the last bin
        assert o.total_qps is not None and o.total_inflight is not None and o.pods
        qps = o.pods[0].qps
        assert qps is not None
        arrived = o.total_qps * s
        completed = qps * s * replicas  # per-replica completions × the (constant) ready count
        assert arrived == pytest.approx(completed + o.total_inflight, abs=1e-6 * max(1.0, arrived))
        checked += 1
    assert checked >= 59
    assert 0.0 <= out.dropped <= demand.requests + 1e-6


def test_nothing_is_dropped_and_nothing_violates_with_ample_replicas() -> None:
    demand = _demand(_poisson(50.0, 120.0))
    out, _ = _run(demand, FixedPolicy(8))
    assert out.dropped < 2e-6
    assert float(out.violations.sum()) < 1e-6 * demand.requests


def test_requests_left_when_the_drain_horizon_ends_are_dropped() -> None:
    demand = _constant(400.0, 30)
    settings = SimSettings(cluster=ClusterSettings(cold_start_s=COLD_S), drain_horizon_s=0.0)
    out, _ = _run(demand, FixedPolicy(1), settings)
    assert out.dropped > 100.0


def test_the_violation_rate_stays_within_100_percent_when_requests_are_also_dropped() -> None:
    demand = _constant(400.0, 30)
    settings = SimSettings(cluster=ClusterSettings(cold_start_s=COLD_S), drain_horizon_s=0.0)
    out, fleet = _run(demand, FixedPolicy(1), settings)
    card = score_fluid("fixed", demand, out, fleet, settings, wall_s=0.0).scorecard
    assert out.dropped > 100.0 and float(out.violations.sum()) > 0.5 * demand.requests
    assert 50.0 < card.slo_violation_pct <= 100.0
    assert card.slo_violations <= card.requests


def test_violations_rise_as_replicas_become_too_few() -> None:
    demand = _demand(_poisson(150.0, 120.0))
    pct = []
    for n in (8, 4, 2, 1):
        out, _ = _run(demand, FixedPolicy(n))
        pct.append(100.0 * (float(out.violations.sum()) + out.dropped) / demand.requests)
    assert pct[0] < 0.1
    assert all(a <= b + 1e-9 for a, b in zip(pct, pct[1:])), pct
    assert pct[-1] > 50.0


def test_violations_never_exceed_arrivals_in_any_bin() -> None:
    demand = _demand(_poisson(300.0, 60.0))
    out, _ = _run(demand, FixedPolicy(2))
    assert np.all(out.violations >= 0.0)
    assert np.all(out.violations <= demand.counts + 1e-9)


def test_a_replica_added_at_t_is_billed_from_t_and_ready_after_the_cold_start() -> None:
    demand = _constant(30.0, 60)
    _, fleet = _run(demand, StepPolicy(((0.0, 1), (10.0, 3))))
    assert fleet.scale_ups == 1
    for log in fleet.replicas[1:]:
        assert log.requested_s == 10.0
        assert log.ready_s == 10.0 + COLD_S


def test_ready_replicas_track_the_cold_start_in_what_the_policy_sees() -> None:
    demand = _constant(30.0, 40)

    @dataclass
    class UpAt10(RecordingPolicy):
        def decide(self, obs: Observation, *, spans: Spans = NO_SPANS) -> Decision:
            self.seen.append(obs)
            return answer(obs, 1 if obs.t_s < 10.0 else 2, self.spec)

    policy = UpAt10(1, Pipeline(1, 1))
    _run(demand, policy)
    ready = {o.t_s: o.ready_replicas for o in policy.seen}
    assert ready[14.0] == 1
    assert ready[15.0] == 2
    assert all(o.spec_replicas == 2 for o in policy.seen if o.t_s > 10.0)


def test_a_scale_down_drains_a_ready_replica_and_stops_it_later() -> None:
    demand = _constant(60.0, 60)
    _, fleet = _run(demand, StepPolicy(((0.0, 3), (20.0, 1))))
    assert fleet.scale_downs == 1
    drained = [r for r in fleet.replicas if r.stopped_s < fleet.end_s]
    assert len(drained) == 2
    assert {int(r.replica) for r in drained} == {1, 2}  # the newest ones
    for r in drained:
        assert r.stopped_s >= 20.0
    assert fleet.replicas[0].stopped_s == fleet.end_s


def test_a_scale_down_removes_cold_starting_replicas_first() -> None:
    demand = _constant(20.0, 30)
    _, fleet = _run(demand, StepPolicy(((0.0, 2), (5.0, 4), (7.0, 2))))
    assert [np.isnan(r.ready_s) for r in fleet.replicas] == [False, False, True, True]
    assert [r.stopped_s for r in fleet.replicas[2:]] == [7.0, 7.0]
    assert [r.stopped_s for r in fleet.replicas[:2]] == [fleet.end_s, fleet.end_s]


def test_two_fluid_runs_are_identical() -> None:
    demand = _demand(_poisson(120.0, 90.0, seed=5))
    policy = StepPolicy(((0.0, 2), (20.0, 5), (50.0, 2)))
    a, fa = _run(demand, policy)
    b, fb = _run(demand, policy)
    np.testing.assert_array_equal(a.violations, b.violations)
    np.testing.assert_array_equal(a.ttft_base_s, b.ttft_base_s)
    assert a.dropped == b.dropped
    assert repr(fa) == repr(fb)


@pytest.mark.parametrize(("replicas", "overloaded"), [(8, False), (12, False), (1, True), (2, True)])
def test_fluid_and_request_engines_agree_on_a_poisson_trace_for_a_static_fleet(replicas: int,
                                                                                overloaded: bool) -> None:
    trace = _poisson(100.0, 120.0, seed=11)
    demand = _demand(trace)
    policy = FixedPolicy(replicas)
    out, fleet = simulate_requests(trace, policy, SETTINGS)
    req = score_requests("fixed", trace, out, fleet, SETTINGS, wall_s=0.0).scorecard
    fout, ffleet = _run(demand, policy)
    flu = score_fluid("fixed", demand, fout, ffleet, SETTINGS, wall_s=0.0).scorecard
    assert flu.requests == req.requests
    if overloaded:
        assert req.slo_violation_pct > 10.0
        assert flu.slo_violation_pct > 10.0
    else:
        assert req.slo_violation_pct < 0.1
        assert flu.slo_violation_pct < 0.1
        assert flu.gpu_hours == pytest.approx(req.gpu_hours, rel=0.1)
