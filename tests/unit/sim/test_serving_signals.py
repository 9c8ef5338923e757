"""The engine-style signals both engines report: running, waiting and KV usage per pod, and the
cumulative serving counters (requests, tokens, TTFT / ITL / queue-time sums, queue-time buckets)."""

from __future__ import annotations

import math

import numpy as np

from ebb.model.ids import TraceName
from ebb.model.observation import QUEUE_TIME_BOUNDS_S, ServingCounters
from ebb.model.trace import RequestTrace
from ebb.sim.fluid_engine import FluidDemand, simulate_fluid
from ebb.sim.policy import Pipeline
from ebb.sim.request_engine import simulate_requests
from ebb.sim.settings import ClusterSettings, SimSettings
from ebb.testing.policies import RecordingPolicy

SETTINGS = SimSettings(cluster=ClusterSettings(cold_start_s=5.0))


def _trace(rate: float, duration_s: float, seed: int = 0) -> RequestTrace:
    rng = np.random.default_rng(seed)
    n = rng.poisson(rate * duration_s)
    return RequestTrace(TraceName("poisson"), np.sort(rng.uniform(0.0, duration_s, n)),
                        rng.integers(50, 2000, n), rng.integers(2, 300, n))


def _serving_run(replicas: int, rate: float = 80.0) -> tuple[RequestTrace, RecordingPolicy, np.ndarray, np.ndarray]:
    trace = _trace(rate, 40.0)
    policy = RecordingPolicy(replicas, Pipeline(1, 1, serving=True))
    out, _ = simulate_requests(trace, policy, SETTINGS)
    return trace, policy, out.first_token_s, out.finish_s


def test_serving_counters_equal_the_sums_over_requests_finished_by_the_sample() -> None:
    trace, policy, first, finish = _serving_run(2)
    checked = 0
    for obs in policy.seen[1:]:
        sv = obs.serving
        assert sv is not None
        s = math.floor(obs.t_s)
        done = finish <= s
        assert sv.requests_total == int(done.sum())
        assert math.isclose(sv.prompt_tokens_total, float(trace.tokens_in[done].sum()))
        assert math.isclose(sv.generation_tokens_total, float(trace.tokens_out[done].sum()))
        assert math.isclose(sv.ttft_sum_s, float((first - trace.arrival_s)[done].sum()), rel_tol=1e-9, abs_tol=1e-9)
        assert math.isclose(sv.itl_sum_s, float((finish - first)[done].sum()), rel_tol=1e-9, abs_tol=1e-9)
        assert sv.itl_count == float((trace.tokens_out[done] - 1).sum())
        assert math.isclose(sv.e2e_sum_s, float((finish - trace.arrival_s)[done].sum()), rel_tol=1e-9, abs_tol=1e-9)
        checked += int(sv.requests_total > 0)
    assert checked > 10


def test_queue_time_buckets_are_cumulative_and_bounded_by_the_request_count() -> None:
    _, policy, _, _ = _serving_run(1, rate=120.0)  # one replica overloaded: requests queue
    last = policy.seen[-1].serving
    assert last is not None and len(last.queue_time_le) == len(QUEUE_TIME_BOUNDS_S)
    assert all(a <= b for a, b in zip(last.queue_time_le, last.queue_time_le[1:]))
    assert last.queue_time_le[-1] <= last.requests_total
    assert last.queue_time_sum_s > 0 and last.queue_time_le[0] < last.requests_total


def test_counters_only_grow_and_minus_gives_the_interval() -> None:
    _, policy, _, _ = _serving_run(2)
    series = [o.serving for o in policy.seen[1:] if o.serving is not None]
    for a, b in zip(series, series[1:]):
        d = b.minus(a)
        assert d.requests_total >= 0 and d.ttft_sum_s >= -1e-9 and d.itl_count >= 0
        assert all(v >= 0 for v in d.queue_time_le)
    whole = series[-1].minus(ServingCounters())
    assert whole == series[-1]
    assert math.isclose(whole.mean_isl, whole.prompt_tokens_total / whole.requests_total)


def test_a_reset_counter_counts_from_zero() -> None:
    assert ServingCounters(requests_total=3).minus(ServingCounters(requests_total=10)).requests_total == 3
    assert math.isnan(ServingCounters().mean_ttft_s)


def test_pods_report_running_waiting_and_kv_usage_like_an_engine() -> None:
    _, policy, _, _ = _serving_run(1, rate=120.0)
    saw_queue = False
    for obs in policy.seen[1:]:
        for p in obs.pods:
            assert p.running == p.inflight
            assert p.kv_usage_ratio is not None and 0.0 <= p.kv_usage_ratio <= 1.0
            assert p.waiting is not None and p.waiting >= 0.0
        ready = [p for p in obs.pods if p.ready_s is not None]
        if obs.queued and ready:
            saw_queue = True
            assert math.isclose(sum(p.waiting or 0.0 for p in ready), obs.queued)
    assert saw_queue


def test_without_the_serving_flag_no_counters_are_kept() -> None:
    policy = RecordingPolicy(2, Pipeline(1, 1))
    simulate_requests(_trace(40.0, 10.0), policy, SETTINGS)
    assert all(o.serving is None for o in policy.seen)


def test_the_fluid_engine_reports_the_same_names_and_agrees_with_the_request_engine() -> None:
    trace = _trace(40.0, 120.0)
    counts = np.bincount(trace.arrival_s.astype(np.int64), minlength=120).astype(np.float64)
    demand = FluidDemand("poisson", 1.0, counts, np.sort(trace.tokens_in.astype(np.float64)),
                         np.sort(trace.tokens_out.astype(np.float64)))
    fluid = RecordingPolicy(2, Pipeline(1, 1, serving=True))
    simulate_fluid(demand, fluid, SETTINGS)
    exact = RecordingPolicy(2, Pipeline(1, 1, serving=True))
    simulate_requests(trace, exact, SETTINGS)
    series = [o.serving for o in fluid.seen[1:] if o.serving is not None]
    assert all(b.requests_total >= a.requests_total for a, b in zip(series, series[1:]))
    f, r = series[-1], exact.seen[-1].serving
    assert r is not None
    assert math.isclose(f.requests_total, r.requests_total, rel_tol=0.05)
    assert math.isclose(f.mean_isl, r.mean_isl, rel_tol=0.05) and math.isclose(f.mean_osl, r.mean_osl, rel_tol=0.05)
    assert math.isclose(f.mean_itl_s, r.mean_itl_s, rel_tol=0.25)
    assert f.mean_ttft_s < 0.5 and r.mean_ttft_s < 0.5
    pods = [p for o in fluid.seen[1:] for p in o.pods]
    assert all(p.kv_usage_ratio is not None and 0.0 <= p.kv_usage_ratio <= 1.0 for p in pods)
    assert any((p.kv_usage_ratio or 0.0) > 0.0 for p in pods)
