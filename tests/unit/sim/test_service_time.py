"""The service-time model: slots × service time on the request engine's fleet (cold start, drain, scoring)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ebb.config.policy_specs import parse_policies
from ebb.errors import ConfigError
from ebb.model.ids import TraceName
from ebb.model.trace import RequestTrace
from ebb.model.trace_ops import scale_requests
from ebb.sim.compare import compare
from ebb.sim.fleet import FleetLog
from ebb.sim.policies import KNOWN_POLICIES
from ebb.sim.request_engine import RequestOutcome, simulate_requests
from ebb.sim.service_time import ServiceTimeModel, service_times
from ebb.sim.settings import ClusterSettings, SimSettings, SloSettings
from ebb.testing.policies import FixedPolicy, StepPolicy


def _settings(concurrency: int, median_s: float | None = None, p99_s: float | None = None,
              cold_start_s: float = 5.0) -> SimSettings:
    return SimSettings(cluster=ClusterSettings(cold_start_s=cold_start_s,
                                               service=ServiceTimeModel(concurrency, median_s, p99_s)))


def _even(rate: float, duration_s: float, service_s: float | None = None) -> RequestTrace:
    n = int(rate * duration_s)
    arrival = np.arange(n, dtype=np.float64) / rate
    zeros = np.zeros(n, dtype=np.int64)
    return RequestTrace(TraceName("even"), arrival, zeros, zeros.copy(),
                        service_s=None if service_s is None else np.full(n, service_s))


def _run(trace: RequestTrace, policy: object, s: SimSettings) -> tuple[RequestOutcome, FleetLog]:
    return simulate_requests(trace, policy, s)  # type: ignore[arg-type]


def test_below_c_over_s_requests_per_second_nobody_waits_and_each_takes_exactly_s() -> None:
    # S = 2 s, c = 4 slots: one replica serves 2 req/s; 1.9 req/s never finds every slot busy.
    trace = _even(1.9, 120.0, service_s=2.0)
    out, _ = _run(trace, FixedPolicy(1), _settings(4))
    np.testing.assert_allclose(out.first_token_s, trace.arrival_s)  # service starts on arrival
    np.testing.assert_allclose(out.finish_s - trace.arrival_s, 2.0)


def test_above_c_over_s_a_replica_completes_c_over_s_per_second_and_the_queue_grows() -> None:
    trace = _even(3.0, 120.0, service_s=2.0)
    out, _ = _run(trace, FixedPolicy(1), _settings(4))
    wait = out.first_token_s - trace.arrival_s
    assert wait[:4].max() == pytest.approx(0.0) and wait[-1] > 50.0  # queueing appears, and grows
    done_in_100s = int(np.sum(out.finish_s <= 100.0))
    assert done_in_100s == pytest.approx(100.0 * 4 / 2.0, abs=4)  # c / S = 2 requests per second
    # Two replicas double the capacity past the 3 req/s offered: no wait again.
    out2, _ = _run(trace, FixedPolicy(2), _settings(4))
    assert float((out2.first_token_s - trace.arrival_s).max()) == pytest.approx(0.0)


def test_the_fitted_lognormal_has_the_asked_median_and_p99() -> None:
    trace = _even(100.0, 400.0)
    s = service_times(trace, ServiceTimeModel(1, 2.0, 8.0), seed=0)
    assert np.median(s) == pytest.approx(2.0, rel=0.03)
    assert np.quantile(s, 0.99) == pytest.approx(8.0, rel=0.08)
    np.testing.assert_array_equal(s, service_times(trace, ServiceTimeModel(1, 2.0, 8.0), seed=0))
    assert not np.array_equal(s, service_times(trace, ServiceTimeModel(1, 2.0, 8.0), seed=1))
    assert np.all(service_times(trace, ServiceTimeModel(1, 3.0), seed=0) == 3.0)  # no p99: constant


def test_the_trace_column_wins_over_the_distribution_and_a_missing_one_is_refused() -> None:
    trace = _even(1.0, 10.0, service_s=0.5)
    assert np.all(service_times(trace, ServiceTimeModel(1, 9.0), seed=0) == 0.5)
    with pytest.raises(ValueError, match="no service-time column"):
        service_times(_even(1.0, 10.0), ServiceTimeModel(2), seed=0)


@pytest.mark.parametrize("bad", [{"concurrency": 0}, {"median_s": -1.0}, {"median_s": 2.0, "p99_s": 1.0},
                                 {"p99_s": 3.0}, {"median_s": math.inf}])
def test_a_bad_model_is_refused(bad: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        ServiceTimeModel(**bad)  # type: ignore[arg-type]


def test_a_scaled_up_replica_serves_only_after_its_cold_start_and_a_drained_one_finishes_its_work() -> None:
    trace = _even(4.0, 60.0, service_s=2.0)
    out, fleet = _run(trace, StepPolicy(((0.0, 1), (10.0, 3), (30.0, 1))), _settings(4, cold_start_s=5.0))
    for rid in (1, 2):
        mine = out.replica == rid
        assert mine.any() and float(out.first_token_s[mine].min()) >= 15.0 - 1e-9  # requested at 10 s, cold 5 s
        assert fleet.replicas[rid].stopped_s >= float(out.finish_s[mine].max()) - 1e-9  # drained, not cut
    assert np.all(np.isfinite(out.finish_s))


def test_an_injected_fault_slows_the_service_time() -> None:
    from ebb.sim.settings import FaultSettings

    trace = _even(1.0, 60.0, service_s=1.0)
    s = SimSettings(cluster=ClusterSettings(cold_start_s=1.0, service=ServiceTimeModel(4)),
                    fault=FaultSettings(3.0, 0.0))
    out, _ = _run(trace, StepPolicy(((0.0, 2), (10.0, 1))), s)
    e2e = out.finish_s - trace.arrival_s
    assert e2e[trace.arrival_s < 10.0].max() == pytest.approx(1.0)
    assert e2e[trace.arrival_s > 10.0].min() == pytest.approx(3.0)


@settings(max_examples=30, deadline=None, derandomize=True, database=None)
@given(conc=st.integers(1, 8), service=st.floats(0.05, 5.0), rate=st.floats(0.1, 20.0), replicas=st.integers(1, 4))
def test_every_request_finishes_no_sooner_than_its_service_time_and_slots_are_never_oversubscribed(
        conc: int, service: float, rate: float, replicas: int) -> None:
    trace = _even(rate, 30.0, service_s=service)
    if trace.requests == 0:
        return
    out, _ = _run(trace, FixedPolicy(replicas), _settings(conc))
    assert np.all(out.first_token_s >= trace.arrival_s - 1e-9)
    np.testing.assert_allclose(out.finish_s - out.first_token_s, service, rtol=1e-9, atol=1e-9)
    # At any service start, the replica runs at most ``conc`` requests (those started and not finished).
    for r in range(replicas):
        mine = np.flatnonzero(out.replica == r)
        st_, fin = out.first_token_s[mine], out.finish_s[mine]
        running = np.sum((st_[:, None] <= st_[None, :] + 1e-12) & (fin[:, None] > st_[None, :] + 1e-9), axis=0)
        assert running.max(initial=0) <= conc


def test_every_policy_runs_on_the_service_time_model_and_scales_copies_with_their_service_times() -> None:
    rng = np.random.default_rng(3)
    arrival = np.sort(rng.uniform(0.0, 240.0, 600))
    zeros = np.zeros(600, dtype=np.int64)
    trace = RequestTrace(TraceName("svc"), arrival, zeros, zeros.copy(), service_s=rng.uniform(0.5, 3.0, 600))
    scaled = scale_requests(trace, 2.0, seed=0)
    assert scaled.service_s is not None and sorted(scaled.service_s) == sorted(np.repeat(trace.service_s, 2))
    s = SimSettings(slo=SloSettings(1000.0, 10_000.0),
                    cluster=ClusterSettings(cold_start_s=10.0, service=ServiceTimeModel(4)))
    cmp = compare(trace, parse_policies(",".join(KNOWN_POLICIES), KNOWN_POLICIES), s, fidelity="request",
                  peak_replicas=3)
    assert {r.scorecard.policy for r in cmp.runs} >= {"hpa", "keda", "static", "ebb", "oracle"}
    assert all(r.scorecard.dropped_requests == 0 for r in cmp.runs)
    with pytest.raises(ConfigError, match="request fidelity only"):
        compare(trace, parse_policies("static", KNOWN_POLICIES), s, fidelity="fluid")
