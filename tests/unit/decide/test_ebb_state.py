"""Each rule a block of holds applies at once answers as the one-tick rule beside it (ebb.decide.ebb_state)."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from ebb.decide.comeback import ComebackBound
from ebb.decide.ebb_state import EbbState, burst_after
from ebb.decide.served import served_demand
from ebb.model.observation import FineSignals
from ebb.window.small import SmallWindow


def state(*, queue_surge_s: float = 5.0, sizing_window_s: float = 4.0, memory_s: float = 200.0) -> EbbState:
    return EbbState(bound=ComebackBound(7.0, memory_s=memory_s, level_s=5.0), slack_s=1.0, lookahead_s=0.5,
                    latency_window_s=30.0, slo_ttft_ms=2000.0, slo_e2e_ms=20000.0, long_window_s=600.0,
                    queue_surge_s=queue_surge_s, sizing_window_s=sizing_window_s, weight=0.65, cold_start_s=5.0)


def ticks_from(seed: int, n: int, t0: float = 100.0) -> np.ndarray:
    """Increasing tick times at least 1 s apart (whole seconds, as the fluid engine's reconciles)."""
    rng = np.random.default_rng(seed)
    return t0 + np.cumsum(rng.integers(1, 3, size=n)).astype(np.float64)


@settings(max_examples=120, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 60), st.floats(0.05, 0.9))
def test_a_quiet_queue_at_a_tick_means_no_persistent_queue_there(seed: int, n: int, p_queued: float) -> None:
    rng = np.random.default_rng(seed)
    s = state()
    for t in ticks_from(seed + 1, 8, t0=80.0):  # some history before the block
        s.queue_hist.append((float(t), bool(rng.random() < p_queued)))
        s.trim(float(t))
    ticks = ticks_from(seed, n)
    queued = rng.random(n) < p_queued
    quiet = s.queue_quiet(ticks, queued)
    for k, t in enumerate(ticks.tolist()):
        s.queue_hist.append((t, bool(queued[k])))
        s.trim(t)
        if quiet[k]:
            assert not s.persistent_queue(), k


def two_with_needs(seed: int, window_s: float) -> tuple[np.random.Generator, EbbState, EbbState]:
    """Two equal states whose sizing windows hold five needs before 100 s, and the generator after them."""
    rng = np.random.default_rng(seed)
    one, many = state(sizing_window_s=window_s), state(sizing_window_s=window_s)
    for t in ticks_from(seed + 1, 5, t0=80.0):
        v = float(rng.gamma(1.0, 3.0))
        for s in (one, many):
            s.recent_need.append((float(t), v))
            s.trim(float(t))
    return rng, one, many


@settings(max_examples=120, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 60), st.floats(1.0, 30.0))
def test_the_sizing_window_over_a_block_is_need_now_tick_by_tick(seed: int, n: int, window_s: float) -> None:
    rng, one, many = two_with_needs(seed, window_s)
    ticks = ticks_from(seed, n)
    needs = rng.gamma(0.8, 4.0, size=n)
    at_once = many.window_needs(ticks, needs)
    for k, t in enumerate(ticks.tolist()):
        one.recent_need.append((t, float(needs[k])))
        one.trim(t)
        assert at_once[k] == one.need_now()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(0.0, 1e4, allow_nan=False), min_size=1, max_size=40), st.floats(0.25, 1.0),
       st.floats(0.3, 1.0))
def test_replicas_of_many_demands_are_replicas_of_each(demand: list[float], capacity: float, util: float) -> None:
    s = state()
    s.capacity = capacity
    many = s.replicas_of(np.array(demand), util)
    assert [float(s.replicas(d, util)) for d in demand] == many.tolist()


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 80), st.booleans())
def test_the_burst_runs_of_a_block_are_the_timer_tick_by_tick(seed: int, n: int, running: bool) -> None:
    rng = np.random.default_rng(seed)
    s = state()
    s.over_since = 90.0 if running else None
    ticks = ticks_from(seed, n)
    cap = 6.0
    l1 = rng.choice([0.0, 2.0, 4.5, 5.0, 6.0, 9.0], size=n)
    over_t, hit, burst = s.burst_runs(ticks, l1, 0.8 * cap, cap)
    over = s.over_since
    for k, t in enumerate(ticks.tolist()):
        over, is_burst = burst_after(over, t, float(l1[k]), 0.8 * cap, cap)
        assert bool(burst[k]) == is_burst
        assert (over is None) == (not hit[k])
        if over is not None:
            assert over == over_t[k]
        s.set_burst_timer(over_t, hit, k)
        assert s.over_since == over


def test_the_burst_step_moves_the_timer_as_burst_after_says() -> None:
    s = state()
    assert not s.burst_step(1.0, 5.0, 4.0, 10.0) and s.over_since == 1.0
    assert not s.burst_step(1.1, 5.0, 4.0, 10.0)
    assert s.burst_step(1.25, 5.0, 4.0, 10.0)  # 200 ms at the burst level
    assert not s.burst_step(1.3, 3.0, 4.0, 10.0) and s.over_since is None
    assert s.burst_step(1.4, 10.0, 4.0, 10.0)  # at the ready capacity: at once


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 30))
def test_the_learned_floor_of_a_block_is_never_above_the_floor_at_each_tick(seed: int, n: int) -> None:
    rng = np.random.default_rng(seed)
    s = state(memory_s=60.0)
    for t in (10.0, 40.0, 70.0, 95.0):
        s.shortfalls.append((t, float(rng.uniform(0.5, 3.0))))
    ticks = ticks_from(seed, n)
    means = rng.gamma(1.0, 4.0, size=n)
    below = s.learned_floor_below(float(ticks[-1]), means)
    for k, t in enumerate(ticks.tolist()):
        assert below[k] <= s.learned_floor_at(t, float(means[k]))


def test_a_lone_sample_s_quantile_is_its_bin_s_value() -> None:
    values = np.array([0.0, 0.37, 1.0, 2.5, 17.3, 512.0])
    w = SmallWindow(buckets=10, bucket_ms=100.0)
    lone = w.lone_quantiles(values)
    for v, q in zip(values.tolist(), lone.tolist(), strict=True):
        one = SmallWindow(buckets=10, bucket_ms=100.0)
        one.ingest(np.array([v]), np.array([1_000_000_000], dtype=np.int64))
        assert one.quantile(0.99) == q


def _ingest_one_by_one(s: EbbState, ticks: np.ndarray, demand: np.ndarray, queued: np.ndarray,
                       ttft: np.ndarray) -> None:
    from ebb.model.observation import FineSignals

    for k, t in enumerate(ticks.tolist()):
        f = FineSignals(t_s=np.array([t]), prefill_replicas=np.array([demand[k]]), slot_replicas=np.zeros(1),
                        queued=np.array([queued[k]]), done_t_s=np.array([t, t]), done_ttft_ms=np.array([ttft[k]] * 2),
                        done_e2e_ms=np.array([4000.0, 4000.0]), done_weight=np.array([0.99, 0.01]),
                        done_wait_ms=np.array([10.0, 10.0]))
        s.ingest(f, 8, t)
        s.l1.quantile(0.99, int(t * 1_000_000_000))  # decide's query
        s.close_cycle(t, 8.0)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 40))
def test_a_held_block_s_ingest_leaves_the_state_of_its_ticks_one_by_one(seed: int, n: int) -> None:
    from ebb.model.observation import FineSignals

    rng = np.random.default_rng(seed)
    one, many = state(), state()
    warm = ticks_from(seed + 1, 6, t0=50.0)
    w_demand, w_queued = rng.gamma(1.0, 2.0, size=6), (rng.random(6) < 0.2).astype(float)
    for s in (one, many):
        _ingest_one_by_one(s, warm, w_demand, w_queued, np.full(6, 300.0))
    ticks = ticks_from(seed, n)
    demand, queued = rng.gamma(1.0, 2.0, size=n), (rng.random(n) < 0.2).astype(float)
    ttft = rng.uniform(100.0, 900.0, size=n)
    _ingest_one_by_one(one, ticks, demand, queued, ttft)
    needs, reading = many.need.ingest_seconds(ticks, demand, queued, np.ones(n))
    for v in needs.tolist():
        many.bound.record(v if v > 0.0 else 0.0)
    fine = FineSignals(t_s=ticks, prefill_replicas=demand, slot_replicas=np.zeros(n), queued=queued,
                       done_t_s=np.repeat(ticks, 2), done_ttft_ms=np.repeat(ttft, 2),
                       done_e2e_ms=np.full(2 * n, 4000.0), done_weight=np.tile([0.99, 0.01], n),
                       done_wait_ms=np.full(2 * n, 10.0))
    many.ingest_held(ticks, demand, queued, needs, 2 * np.arange(1, n + 1, dtype=np.int64), fine)
    many.reading = reading
    assert list(many.recent_need) == list(one.recent_need)
    assert list(many.queue_hist) == list(one.queue_hist)
    assert (many.served_now, many.last_signal_t, many.last_busy_t) == (one.served_now, one.last_signal_t,
                                                                      one.last_busy_t)
    assert many.reading == one.reading
    assert many.l1.quantile(0.99) == one.l1.quantile(0.99)
    assert many.latency.p99(0) == one.latency.p99(0) and many.latency.long_breach_weight == \
        one.latency.long_breach_weight
    assert many.bound.needs() == one.bound.needs()



def test_the_historys_floor_keeps_a_scale_ups_headroom_until_saturation_measures_the_replica() -> None:
    from ebb.decide.profiles import PROFILES

    prof = PROFILES["balanced"]
    s = state()
    assert not s.capacity_measured and s.history_util(prof) == prof.target_util  # the cost model's capacity
    s.served_now = 7.5
    s.learn_capacity(10)  # a saturated fleet of 10 served 7.5 replica units
    assert s.capacity_measured and s.capacity == 0.75 and s.history_util(prof) == prof.down_util
    assert s.replicas(15.0, s.history_util(prof)) == 20


class _ArraysOnly(EbbState):
    """An EbbState that ingests every sample through the array path (the reference for the scalar one)."""

    @staticmethod
    def _plain_sample(f: FineSignals) -> bool:
        return False


_ODD = st.sampled_from([0.0, -0.0, -1.0, math.nan, math.inf, 1e-12])


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.floats(-0.3, 0.25), st.one_of(st.floats(0.0, 12.0), _ODD),
                          st.one_of(st.floats(0.0, 40.0), _ODD), st.one_of(st.floats(0.0, 30.0), _ODD),
                          st.integers(0, 16)), min_size=1, max_size=120))
def test_a_sample_without_completions_leaves_what_the_array_path_leaves(
        steps: list[tuple[float, float, float, float, int]]) -> None:
    # An agent's 100 ms samples, most without completions, take the scalar path (~30 numpy calls
    # fewer); every field a decision reads must be what the array path leaves, bit for bit — out of
    # order and repeated times (dropped by the need tracker), NaN, inf, negative and signed-zero values.
    scalar, arrays = state(), _ArraysOnly(bound=ComebackBound(7.0, memory_s=200.0, level_s=5.0), slack_s=1.0,
                                          lookahead_s=0.5, latency_window_s=30.0, slo_ttft_ms=2000.0,
                                          slo_e2e_ms=20000.0, long_window_s=600.0, queue_surge_s=5.0,
                                          sizing_window_s=4.0, weight=0.65, cold_start_s=5.0)
    t = 50.0
    for dt, prefill, slots, queued, ready in steps:
        t = round(t + 0.1 + dt, 6) if dt > -0.25 else t  # mostly forward 100 ms, sometimes a repeat or a step back
        fine = FineSignals(np.array([t]), np.array([prefill]), np.array([slots]), np.array([queued]))
        for s in (scalar, arrays):
            s.ingest(fine, ready, t)
        # repr: NaN equal to NaN, -0.0 told from 0.0 (bit for bit, short of NaN payloads)
        assert repr(_fields(scalar)) == repr(_fields(arrays))
        a, b = scalar.l1.quantile(0.99, int(t * 1e9)), arrays.l1.quantile(0.99, int(t * 1e9))
        assert (math.isnan(a) and math.isnan(b)) or a == b


def _fields(s: EbbState) -> tuple[object, ...]:
    return (s.served_now, s.reading, s.cycle_peak, s.last_signal_t, s.last_busy_t, list(s.recent_need),
            list(s.queue_hist), s.need.snapshot(), s.need_now())


@settings(max_examples=120, deadline=None)
@given(st.lists(st.tuples(st.floats(0.01, 0.3), st.floats(0.0, 12.0), st.floats(0.0, 40.0), st.floats(0.0, 3.0)),
                min_size=0, max_size=40),
       st.lists(st.tuples(st.floats(0.01, 0.3), st.floats(0.0, 12.0), st.floats(0.0, 40.0),
                          st.sampled_from([0.0, 0.0, 1.0, 3.0])), min_size=1, max_size=80),
       st.lists(st.integers(1, 25), min_size=1, max_size=8), st.integers(1, 16))
def test_planned_samples_leave_what_their_one_sample_ingests_leave(
        before: list[tuple[float, float, float, float]], stretch: list[tuple[float, float, float, float]],
        pieces: list[int], ready: int) -> None:
    # A quiet stretch's samples (no completion rows) ingested from one plan, in pieces: every field a
    # decision reads is what one ingest per sample leaves, bit for bit — the L1 window's answers too.
    one, planned = state(), state()
    t = 50.0
    for gap, prefill, slots, queued in before:
        t += gap
        fine = FineSignals(np.array([t]), np.array([prefill]), np.array([slots]), np.array([queued]))
        for s in (one, planned):
            s.ingest(fine, ready, t)
    times = []
    for gap, _, _, _ in stretch:
        t += gap
        times.append(t)
    cols = np.array([[p, sl, q] for _, p, sl, q in stretch]).T
    demand = served_demand(cols[0], cols[1], ready)
    plan = planned.need.plan(np.array(times), demand, cols[2], np.zeros(len(times)))
    start = 0
    for size in pieces:
        stop = min(len(times), start + size)
        for k in range(start, stop):
            one.ingest(FineSignals(np.array([times[k]]), cols[0][k:k + 1], cols[1][k:k + 1], cols[2][k:k + 1]),
                       ready, times[k])
        planned.ingest_planned(plan, start, stop, demand.tolist(), cols[2].tolist())
        assert repr(_fields(planned)) == repr(_fields(one))
        ns = int(times[stop - 1] * 1e9)
        assert planned.l1.quantile(0.99, ns) == one.l1.quantile(0.99, ns)
        start = stop
        if stop == len(times):
            break


@settings(max_examples=120, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 40), st.floats(1.0, 30.0))
def test_the_sizing_window_at_each_reconcile_is_need_now_after_its_samples(seed: int, n: int,
                                                                           window_s: float) -> None:
    # Ten 100 ms samples a reconcile (a request stretch's), the window read at each reconcile just
    # after its own sample: window_needs_at against adding the samples and trimming at the reconcile.
    rng, one, many = two_with_needs(seed, window_s)
    ticks = ticks_from(seed, n)
    per = rng.integers(1, 11, size=n)  # samples before each reconcile
    t_s = np.concatenate([t - 0.1 * np.arange(k - 1, -1, -1) - 1e-7 for t, k in zip(ticks, per, strict=True)])
    needs = rng.gamma(0.8, 4.0, size=len(t_s))
    ends = np.cumsum(per)
    at_once = many.window_needs_at(t_s, needs, ticks, ends)
    lo = 0
    for k, t in enumerate(ticks.tolist()):
        for j in range(lo, int(ends[k])):
            one.recent_need.append((float(t_s[j]), float(needs[j])))
        lo = int(ends[k])
        one.trim(t)
        assert at_once[k] == one.need_now()
