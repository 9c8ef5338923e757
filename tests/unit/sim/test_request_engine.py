"""The request-level engine: every request served, fleet lifecycle rules, routing, pipelines."""

from __future__ import annotations

import numpy as np
import pytest

from ebb.model.ids import TraceName
from ebb.model.trace import RequestTrace
from ebb.sim.fleet import FleetLog
from ebb.model.latency import LatencyModel
from ebb.sim.policy import Pipeline
from ebb.testing.policies import FixedPolicy, RecordingPolicy, StepPolicy
from ebb.sim.request_engine import RequestOutcome, simulate_requests
from ebb.sim.settings import ClusterSettings, SimSettings

COLD_S = 5.0
SETTINGS = SimSettings(cluster=ClusterSettings(cold_start_s=COLD_S))


def _trace(arrival: np.ndarray, seed: int = 0, *, tin: tuple[int, int] = (50, 2000),
           tout: tuple[int, int] = (1, 300)) -> RequestTrace:
    rng = np.random.default_rng(seed)
    n = len(arrival)
    return RequestTrace(TraceName("synthetic"), np.sort(np.asarray(arrival, dtype=np.float64)),
                        rng.integers(tin[0], tin[1], n), rng.integers(tout[0], tout[1], n))


def _poisson(rate: float, duration_s: float, seed: int = 0) -> RequestTrace:
    rng = np.random.default_rng(seed)
    return _trace(rng.uniform(0.0, duration_s, rng.poisson(rate * duration_s)), seed + 1)


def _bursty(seed: int = 0) -> RequestTrace:
    rng = np.random.default_rng(seed)
    parts = [rng.uniform(0.0, 60.0, 600)] + [b + rng.uniform(0.0, 0.5, 400) for b in (10.0, 30.0, 50.0)]
    return _trace(np.concatenate(parts), seed + 1)


def _run(trace: RequestTrace, policy: object, settings: SimSettings = SETTINGS) -> tuple[RequestOutcome, FleetLog]:
    return simulate_requests(trace, policy, settings)  # type: ignore[arg-type]


_POLICIES = {
    "static": FixedPolicy(3),
    "scale-up": StepPolicy(((0.0, 1), (10.0, 4))),
    "scale-down": StepPolicy(((0.0, 4), (10.0, 1))),
    "up-then-down": StepPolicy(((0.0, 2), (5.0, 6), (8.0, 3), (20.0, 1))),
}


@pytest.mark.parametrize("name", sorted(_POLICIES))
def test_no_request_is_dropped_and_each_finishes_after_its_prefill(name: str) -> None:
    trace = _poisson(60.0, 30.0)
    out, fleet = _run(trace, _POLICIES[name])
    assert np.all(np.isfinite(out.finish_s)) and np.all(np.isfinite(out.first_token_s))
    prefill_s = SETTINGS.cluster.latency.prefill_ms(trace.tokens_in) / 1000.0
    assert np.all(out.first_token_s - trace.arrival_s >= prefill_s - 1e-9)
    assert np.all(out.finish_s >= out.first_token_s)
    assert np.all(out.replica >= 0) and np.all(out.replica < len(fleet.replicas))
    assert fleet.end_s == pytest.approx(max(float(out.finish_s.max()), trace.duration_s))


def test_a_scale_down_drains_the_newest_replicas_and_stops_them_after_their_last_request() -> None:
    trace = _poisson(80.0, 30.0)
    out, fleet = _run(trace, StepPolicy(((0.0, 3), (10.0, 1))))
    assert fleet.scale_downs == 1
    for rid in (1, 2):
        mine = out.replica == rid
        assert mine.any(), f"replica {rid} served nothing before the scale-down"
        assert np.all(np.isfinite(out.finish_s[mine]))  # its in-flight requests still finish
        log = fleet.replicas[rid]
        assert log.stopped_s >= 10.0
        assert log.stopped_s >= float(out.finish_s[mine].max()) - 1e-12
        # Draining: nothing new is admitted after the scale-down.
        assert not np.any(out.first_token_s[mine] - SETTINGS.cluster.latency.prefill_ms(trace.tokens_in[mine]) / 1000
                          > 10.0 + 1e-9)
    assert fleet.replicas[0].stopped_s == pytest.approx(fleet.end_s)
    assert np.all(out.replica[trace.arrival_s > 10.0] == 0)


def test_a_drained_replica_with_nothing_in_flight_stops_at_once() -> None:
    trace = _trace(np.array([0.1, 0.2, 30.0]))
    out, fleet = _run(trace, StepPolicy(((0.0, 2), (10.0, 1))))
    assert fleet.replicas[1].stopped_s == 10.0


def test_a_scale_down_removes_cold_starting_replicas_before_ready_ones() -> None:
    trace = _poisson(20.0, 20.0)
    out, fleet = _run(trace, StepPolicy(((0.0, 2), (5.0, 4), (7.0, 2))))
    assert [np.isnan(r.ready_s) for r in fleet.replicas] == [False, False, True, True]
    assert [r.stopped_s for r in fleet.replicas[2:]] == [7.0, 7.0]
    assert not np.any(np.isin(out.replica, [2, 3]))


def test_a_replica_added_at_t_is_ready_after_the_cold_start_and_serves_nothing_before() -> None:
    trace = _poisson(100.0, 30.0)
    out, fleet = _run(trace, StepPolicy(((0.0, 1), (10.0, 2))))
    added = fleet.replicas[1]
    assert added.requested_s == 10.0
    assert added.ready_s == 10.0 + COLD_S
    mine = out.replica == 1
    assert mine.any()
    prefill_s = SETTINGS.cluster.latency.prefill_ms(trace.tokens_in[mine]) / 1000.0
    assert np.all(out.first_token_s[mine] - prefill_s >= added.ready_s - 1e-9)


def test_an_overloaded_replica_queue_is_drained_by_the_replica_that_becomes_ready() -> None:
    lat = LatencyModel(max_batch=2)
    settings = SimSettings(cluster=ClusterSettings(cold_start_s=COLD_S, latency=lat))
    trace = _trace(np.linspace(0.0, 1.0, 40), tout=(2000, 2001))
    out, fleet = _run(trace, StepPolicy(((0.0, 1), (1.0, 2))), settings)
    mine = out.replica == 1
    assert mine.sum() >= 2
    first_admit = out.first_token_s[mine] - lat.prefill_ms(trace.tokens_in[mine]) / 1000.0
    assert float(first_admit.min()) == pytest.approx(1.0 + COLD_S)


def test_least_loaded_routing_balances_a_steady_stream_across_replicas() -> None:
    trace = _poisson(100.0, 60.0)
    out, _ = _run(trace, FixedPolicy(4))
    per = np.bincount(out.replica, minlength=4)
    assert per.min() >= 0.85 * per.mean()
    assert per.max() <= 1.15 * per.mean()


def test_an_idle_fleet_routes_every_request_to_the_oldest_replica() -> None:
    trace = _trace(np.arange(0.0, 20.0, 2.0), tout=(2, 3))
    out, _ = _run(trace, FixedPolicy(3))
    assert np.all(out.replica == 0)


def test_more_replicas_never_give_a_worse_p99_ttft_on_a_bursty_trace() -> None:
    trace = _bursty()
    p99 = []
    for n in (1, 2, 3, 4, 6, 8, 12):
        out, _ = _run(trace, FixedPolicy(n))
        p99.append(float(np.percentile(out.first_token_s - trace.arrival_s, 99)))
    assert all(a >= b for a, b in zip(p99, p99[1:])), p99
    assert p99[0] > 5 * p99[-1]


def test_two_runs_of_the_same_inputs_are_identical() -> None:
    trace = _bursty(3)
    policy = StepPolicy(((0.0, 2), (12.0, 5), (40.0, 2)))
    out1, fleet1 = _run(trace, policy)
    out2, fleet2 = _run(trace, policy)
    np.testing.assert_array_equal(out1.first_token_s, out2.first_token_s)
    np.testing.assert_array_equal(out1.finish_s, out2.finish_s)
    np.testing.assert_array_equal(out1.replica, out2.replica)
    assert repr(fleet1) == repr(fleet2)


def test_queueing_for_a_full_batch_raises_ttft() -> None:
    trace = _trace(np.linspace(0.0, 0.01, 10), tin=(100, 101), tout=(500, 501))
    small = SimSettings(cluster=ClusterSettings(latency=LatencyModel(max_batch=2)))
    big = SimSettings(cluster=ClusterSettings(latency=LatencyModel(max_batch=64)))
    out_small, _ = _run(trace, FixedPolicy(1), small)
    out_big, _ = _run(trace, FixedPolicy(1), big)
    ttft_small = out_small.first_token_s - trace.arrival_s
    ttft_big = out_big.first_token_s - trace.arrival_s
    # The first two take the slots at once; the rest wait for a whole decode (~2 s) or more.
    assert np.all(ttft_small[:2] < 0.02)
    assert np.all(ttft_small[2:] > 1.5)
    assert np.all(ttft_big < 0.1)
    assert np.all(np.isfinite(out_small.finish_s))


def test_an_observation_is_delayed_to_the_last_pipeline_sample() -> None:
    rng = np.random.default_rng(7)
    trace = _trace(np.concatenate([[0.5], 35.0 + rng.uniform(0.0, 60.0, 3000)]), tout=(50, 100))
    policy = RecordingPolicy(2, Pipeline(30, 30))
    _run(trace, policy)
    by_t = {o.t_s: o for o in policy.seen}
    first = by_t[30.0]
    # At 30 s the window is [0, 30]: one short request, then idle.
    assert first.total_qps == pytest.approx(1 / 30)
    for t in range(31, 60):
        o = by_t[float(t)]
        assert o.total_qps == first.total_qps
        assert [p.util_ratio for p in o.pods] == [p.util_ratio for p in first.pods]
        assert o.queued == first.queued
    later = by_t[60.0]
    assert later.total_qps is not None and later.total_qps > 10 * first.total_qps
    utils = [p.util_ratio for p in later.pods]
    assert all(u is not None and u > 0.1 for u in utils)
    for t in range(61, 90):
        assert [p.util_ratio for p in by_t[float(t)].pods] == utils


def test_an_observation_before_the_first_full_window_has_no_rate_yet() -> None:
    trace = _poisson(20.0, 10.0)
    policy = RecordingPolicy(1, Pipeline(30, 30))
    _run(trace, policy)
    assert policy.seen[0].t_s == 0.0 and policy.seen[0].spec_replicas == 0  # the initial-fleet question
    early = [o for o in policy.seen[1:] if o.t_s < 30.0]
    assert len(early) >= 5
    assert all(o.total_qps is None for o in early)
    assert all(o.spec_replicas == 1 and o.ready_replicas == 1 for o in early)


def test_the_initial_fleet_is_the_policys_first_answer_started_warm() -> None:
    trace = _poisson(10.0, 5.0)
    _, fleet = _run(trace, FixedPolicy(3))
    assert [(r.requested_s, r.ready_s) for r in fleet.replicas] == [(0.0, 0.0)] * 3
    assert fleet.scale_ups == 0 and fleet.scale_downs == 0


def test_initial_replicas_in_the_settings_override_the_policys_first_answer() -> None:
    trace = _poisson(10.0, 5.0)
    settings = SimSettings(cluster=ClusterSettings(cold_start_s=COLD_S, initial_replicas=2))
    _, fleet = _run(trace, FixedPolicy(2), settings)
    assert len(fleet.replicas) == 2


def test_a_run_reports_how_much_of_its_span_it_has_simulated_and_the_same_outcome() -> None:
    from ebb.sim.request_engine import PROGRESS_ARRIVALS

    trace = _poisson(20.0, 120.0)
    shares: list[float] = []
    out, fleet = simulate_requests(trace, FixedPolicy(4), SETTINGS, on_progress=shares.append)
    plain, plain_fleet = simulate_requests(trace, FixedPolicy(4), SETTINGS)
    assert len(shares) == len(trace.arrival_s) // PROGRESS_ARRIVALS >= 5
    assert all(0.0 < a <= b <= 1.0 for a, b in zip(shares, shares[1:], strict=False))
    assert shares[-1] > 0.8  # the last report is near the last arrival; the drain is short
    assert np.array_equal(out.first_token_s, plain.first_token_s) and fleet.decisions == plain_fleet.decisions
