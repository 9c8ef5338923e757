"""NeedTracker (ebb.decide.need): the replicas that keep queueing inside the slack, from 100 ms samples."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ebb.decide.need import WINDOWS_S, NeedTracker


def samples(t0: float, seconds: float, demand: float, queued: float = 0.0, dt: float = 0.1) -> tuple[np.ndarray, ...]:
    t = t0 + dt * np.arange(1, int(round(seconds / dt)) + 1)
    return t, np.full(len(t), demand), np.full(len(t), queued)


@pytest.mark.parametrize("slack_s", [1.0, 15.0])
def test_steady_demand_needs_that_many_replicas_however_long_the_slack(slack_s: float) -> None:
    nt = NeedTracker(slack_s=slack_s)
    need, reading = nt.ingest(*samples(0.0, 60.0, 5.0))
    # The longest window (32 s) of a steady 5 replicas sustained: 5, where 32 s over 32 s + the slack
    # would read 4.85 at a 1 s slack and 3.4 at a 15 s one (a long-service SLO's) — a fleet that size
    # falls behind for good.
    assert math.isclose(reading.need_replicas, 5.0, rel_tol=1e-9)
    # Sample times 0.1 apart in floats: a window's edge may take in one sample more (0.3 %).
    assert np.all(need <= 5.0 * 32.1 / 32.0 + 1e-9)


def test_a_short_spike_is_absorbed_by_the_slack_and_a_long_one_is_not() -> None:
    short = NeedTracker(slack_s=1.0)
    short.ingest(*samples(0.0, 30.0, 0.0))
    _, r = short.ingest(*samples(30.0, 0.1, 20.0))  # one 100 ms sample at 20 replicas
    assert math.isclose(r.need_replicas, 20.0 * 0.1 / 1.5)  # the 0.5 s window over 1.5 s
    long = NeedTracker(slack_s=1.0)
    long.ingest(*samples(0.0, 30.0, 0.0))
    _, r = long.ingest(*samples(30.0, 8.0, 20.0))
    assert math.isclose(r.need_replicas, max(20.0 * d / (d + 1.0) for d in WINDOWS_S if d <= 8.0))


def test_a_growing_queue_adds_its_work_at_the_cost_of_a_request() -> None:
    nt = NeedTracker(slack_s=1.0, cost_window_s=60.0)
    t, s, q = samples(0.0, 10.0, 2.0)
    done = np.full(1, 100.0)  # 100 requests finished over 20 replica-seconds of work: 0.2 each
    nt.ingest(t, s, q, done)
    assert math.isclose(nt.cost_replica_s, 0.2)
    # The fleet saturates at 2 while 50 requests pile up within a second: 10 replica-seconds arrived.
    t2 = 10.0 + 0.1 * np.arange(1, 11)
    _, r = nt.ingest(t2, np.full(10, 2.0), np.linspace(5.0, 50.0, 10))
    cost = nt.cost_replica_s  # the second's 2 replica-seconds joined the cost window: 22 / 100
    assert math.isclose(cost, 0.22) and math.isclose(r.backlog_replicas_s, 50 * cost)
    # The 1 s window: 2 replica-seconds served and 50 requests queued since its edge (at 0), over 2 s.
    assert math.isclose(r.need_replicas, (2.0 + 50 * cost) / 2.0)


def test_a_queue_that_was_already_there_is_not_new_demand() -> None:
    nt = NeedTracker(slack_s=1.0)
    t, s, _ = samples(0.0, 40.0, 2.0)
    nt.ingest(t, s, np.full(len(t), 30.0), np.full(1, 400.0))
    _, r = nt.ingest(*samples(40.0, 1.0, 2.0, queued=30.0))
    assert r.need_replicas <= 2.0 + 1e-9  # the same 30 queued: only what was served arrived


def test_samples_not_newer_than_the_last_one_are_dropped() -> None:
    nt = NeedTracker(slack_s=1.0)
    nt.ingest(*samples(0.0, 5.0, 1.0))
    need, r = nt.ingest(np.array([1.0, 2.0]), np.array([50.0, 50.0]), np.zeros(2))
    assert len(need) == 0 and r.need_replicas == 0.0


def test_nan_and_negative_samples_count_as_no_demand() -> None:
    nt = NeedTracker(slack_s=1.0)
    need, _ = nt.ingest(np.array([0.1, 0.2, 0.3]), np.array([np.nan, -4.0, np.inf]), np.array([np.nan, -1.0, 0.0]))
    assert np.all(need == 0.0)


@settings(max_examples=200)
@given(st.lists(st.tuples(st.floats(0.0, 50.0), st.floats(0.0, 500.0)), min_size=1, max_size=80),
       st.floats(0.1, 5.0))
def test_need_is_finite_non_negative_and_bounded_by_the_arrivals(rows: list[tuple[float, float]],
                                                                   slack: float) -> None:
    nt = NeedTracker(slack_s=slack)
    t = 0.1 * np.arange(1, len(rows) + 1)
    served = np.array([r[0] for r in rows])
    queued = np.array([r[1] for r in rows])
    need, r = nt.ingest(t, served, queued, np.full(1, 10.0))
    assert np.all(np.isfinite(need)) and np.all(need >= 0.0)
    cost = nt.cost_replica_s
    # No window holds more than everything served plus everything ever queued.
    assert np.all(need <= (served.sum() * 0.1 + queued.max() * cost) / slack + 1e-6)


def test_the_arrival_rate_is_the_smaller_of_the_last_two_samples_rates() -> None:
    nt = NeedTracker(slack_s=1.0)
    t, s, q = samples(0.0, 10.0, 2.0)
    nt.ingest(t, s, q, np.full(1, 100.0))  # 20 replica-seconds over 100 requests: 0.2 each
    cost = nt.cost_replica_s
    # A clump: 50 requests queue in one 100 ms sample, then none: one sample's rate is no trend.
    _, clump = nt.ingest(np.array([10.1, 10.2]), np.full(2, 2.0), np.array([50.0, 50.0]))
    assert math.isclose(clump.rate_replicas, 2.0)  # the second sample: served 2, queue unchanged
    # A burst: the queue grows by 50 in each of two samples — 2 served + 50 × cost per 0.1 s.
    _, burst = nt.ingest(np.array([10.3, 10.4]), np.full(2, 2.0), np.array([100.0, 150.0]))
    assert math.isclose(burst.rate_replicas, 2.0 + 50 * nt.cost_replica_s / 0.1, rel_tol=1e-9)
    assert cost > 0


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0.0, 50.0), min_size=1, max_size=40), st.lists(st.floats(0.0, 500.0), min_size=1, max_size=40))
def test_the_arrival_rate_is_finite_and_never_negative(demand: list[float], queued: list[float]) -> None:
    n = min(len(demand), len(queued))
    nt = NeedTracker(slack_s=1.0)
    _, r = nt.ingest(0.1 * np.arange(1, n + 1), np.array(demand[:n]), np.array(queued[:n]), np.ones(1))
    assert math.isfinite(r.rate_replicas) and r.rate_replicas >= 0.0


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.floats(0.01, 1.5), st.floats(0.0, 30.0), st.floats(0.0, 50.0), st.floats(0.0, 3.0)),
                min_size=3, max_size=60))
def test_samples_one_at_a_time_read_the_same_need_as_one_batch(rows: list[tuple[float, float, float, float]]) -> None:
    # One-sample ingests take the scalar path (the fluid simulator's bins); a batch the vectorised one.
    t = np.cumsum([r[0] for r in rows])
    served, queued = np.array([r[1] for r in rows]), np.array([r[2] for r in rows])
    batch, single = NeedTracker(slack_s=0.5), NeedTracker(slack_s=0.5)
    needs, last = batch.ingest(t, served, queued)
    one = []
    for k in range(len(t)):
        n, r = single.ingest(t[k:k + 1], served[k:k + 1], queued[k:k + 1])
        one.append(float(n[0]))
    assert np.allclose(one, needs, rtol=1e-9, atol=1e-9)
    for a, b in ((r.need_replicas, last.need_replicas), (r.rate_replicas, last.rate_replicas),
                 (r.ahead_replicas, last.ahead_replicas), (r.backlog_replicas_s, last.backlog_replicas_s)):
        assert math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)


_second = st.tuples(st.floats(0.05, 2.5), st.one_of(st.floats(0.0, 40.0), st.just(float("nan")), st.just(-1.0)),
                    st.one_of(st.just(0.0), st.floats(0.0, 500.0)), st.one_of(st.just(0.0), st.floats(0.0, 30.0)))


@settings(max_examples=150, deadline=None)
@given(st.lists(_second, min_size=0, max_size=50), st.lists(_second, min_size=1, max_size=70))
def test_a_block_of_seconds_reads_and_leaves_exactly_what_one_sample_ingests_do(
        before: list[tuple[float, float, float, float]], block: list[tuple[float, float, float, float]]) -> None:
    one, many = NeedTracker(0.5), NeedTracker(0.5)
    t = 0.0
    for gap, s, q, done in before:  # the same history in both
        t += gap
        for tracker in (one, many):
            tracker.ingest(np.array([t]), np.array([s]), np.array([q]), np.array([done]))
    times, needs, reading = [], [], None
    for gap, s, q, done in block:
        t += gap
        times.append(t)
        need, reading = one.ingest(np.array([t]), np.array([s]), np.array([q]), np.array([done]))
        needs.append(float(need[0]))
    cols = np.array([[s, q, d] for _, s, q, d in block]).T
    block_needs, block_reading = many.ingest_seconds(np.array(times), cols[0], cols[1], cols[2])
    # repr: bit-exact floats with NaN equal to itself.
    assert repr(block_needs.tolist()) == repr(needs) and repr(block_reading) == repr(reading)
    assert repr(many.snapshot()) == repr(one.snapshot())


@pytest.mark.parametrize("seed", range(6))
def test_a_long_block_ages_costs_out_of_their_window_exactly_as_one_sample_ingests_do(seed: int) -> None:
    # Minutes of seconds: the cost window (60 s) ages rows out of the history and of the block itself.
    rng = np.random.default_rng(seed)
    n_before, n_block = int(rng.integers(0, 150)), int(rng.integers(61, 400))
    gaps = rng.choice([0.5, 1.0, 1.0, 2.0, 7.5], size=n_before + n_block)
    t = np.cumsum(gaps)
    served = rng.gamma(1.0, 5.0, size=len(t)) * (rng.random(len(t)) < 0.8)
    queued = rng.gamma(0.5, 20.0, size=len(t)) * (rng.random(len(t)) < 0.3)
    done = rng.gamma(1.0, 3.0, size=len(t)) * (rng.random(len(t)) < 0.7)
    one, many = NeedTracker(0.5), NeedTracker(0.5)
    for k in range(n_before):
        for tracker in (one, many):
            tracker.ingest(t[k:k + 1], served[k:k + 1], queued[k:k + 1], done[k:k + 1])
    needs = [float(one.ingest(t[k:k + 1], served[k:k + 1], queued[k:k + 1], done[k:k + 1])[0][0])
             for k in range(n_before, len(t))]
    block_needs, _ = many.ingest_seconds(t[n_before:], served[n_before:], queued[n_before:], done[n_before:])
    assert repr(block_needs.tolist()) == repr(needs)
    assert repr(many.snapshot()) == repr(one.snapshot())


def test_a_restored_tracker_reads_as_if_the_block_never_came() -> None:
    tracker, fresh = NeedTracker(1.0), NeedTracker(1.0)
    for tr in (tracker, fresh):
        tr.ingest(np.arange(1.0, 11.0), np.full(10, 3.0), np.zeros(10), np.ones(10))
    state = tracker.snapshot()
    tracker.ingest_seconds(np.arange(11.0, 41.0), np.full(30, 9.0), np.full(30, 4.0), np.ones(30))
    tracker.restore(state)
    assert repr(tracker.snapshot()) == repr(fresh.snapshot())


def test_a_queued_long_job_needs_one_replica_not_its_work_squeezed_into_the_slack() -> None:
    # Long jobs, one a replica: 300 replica-seconds served per completion. Three queued jobs are three
    # replicas' worth within any deadline, where 900 replica-seconds over a 1 s slack would read as
    # hundreds of replicas.
    tracker = NeedTracker(1.0)
    t = np.arange(1.0, 41.0)
    served = np.full(len(t), 10.0)
    done = np.zeros(len(t))
    done[29] = 1.0  # one completion after 300 replica-seconds of work
    queued = np.where(t > 30.0, 3.0, 0.0)
    tracker.ingest(t[:30], served[:30], queued[:30], done[:30])
    assert tracker.cost_replica_s > 250.0  # the first sample counts 0.1 s
    need, reading = tracker.ingest(t[30:], served[30:], queued[30:])
    assert reading.backlog_replicas_s > 750.0
    assert float(need.max()) <= 10.0 + 3.0 + 1e-9


def test_a_long_job_queued_in_one_interval_is_read_as_work_due_within_its_deadline() -> None:
    # The same 300 replica-second jobs: one more queued within a 100 ms interval (twice in a row) is
    # 0.1 s + 1 s of slack of work due in that interval, not 300 replica-seconds — the sustained rate
    # stays near the fleet's, and the lookahead a few replicas above it.
    tracker = NeedTracker(1.0)
    t = np.arange(1.0, 31.0)
    done = np.zeros(len(t))
    done[29] = 1.0
    tracker.ingest(t, np.full(len(t), 10.0), np.zeros(len(t)), done)
    assert tracker.cost_replica_s > 250.0
    _, reading = tracker.ingest(np.array([30.1, 30.2]), np.full(2, 10.0), np.array([1.0, 2.0]))
    assert reading.rate_replicas == pytest.approx(10.0 + 1.1 / 0.1)
    assert reading.ahead_replicas < 10.0 + 2.0 + 1.0


_sample = st.tuples(st.floats(0.01, 1.5), st.one_of(st.floats(0.0, 40.0), st.just(float("nan")), st.just(-1.0)),
                    st.one_of(st.just(0.0), st.floats(0.0, 50.0)), st.one_of(st.just(0.0), st.floats(0.0, 3.0)))


@settings(max_examples=150, deadline=None)
@given(st.lists(_sample, min_size=0, max_size=60), st.lists(_sample, min_size=1, max_size=90),
       st.lists(st.integers(1, 30), min_size=1, max_size=10))
def test_a_plan_taken_in_any_pieces_reads_and_leaves_what_one_sample_ingests_do(
        before: list[tuple[float, float, float, float]], stretch: list[tuple[float, float, float, float]],
        pieces: list[int]) -> None:
    # The quiet-stretch path: every sample's need, lookahead, rate and cost planned at once, the state
    # then moved through any prefix in pieces — bit for bit the one-sample calls (repr: NaN equal to itself).
    one, planned = NeedTracker(0.5, lookahead_s=0.5), NeedTracker(0.5, lookahead_s=0.5)
    t = 0.0
    for gap, s, q, done in before:
        t += gap
        for tracker in (one, planned):
            tracker.ingest_sample(t, s, q, done)
    times, readings = [], []
    for gap, s, q, done in stretch:
        t += gap
        times.append(t)
        readings.append(one.ingest_sample(t, s, q, done))
    cols = np.array([[s, q, d] for _, s, q, d in stretch]).T
    plan = planned.plan(np.array(times), cols[0], cols[1], cols[2])
    if plan.finite:  # a NaN bound is the scalar max's to skip: the plan is not used then
        assert repr(plan.need.tolist()) == repr([r.need_replicas for r in readings])
        assert repr(plan.ahead.tolist()) == repr([r.ahead_replicas for r in readings])
        assert repr(plan.rate.tolist()) == repr([r.rate_replicas for r in readings])
    start, stop = 0, 0
    for size in pieces:
        stop = min(len(times), start + size)
        reading = planned.take(plan, start, stop)
        assert repr(reading) == repr(readings[stop - 1])
        start = stop
        if stop == len(times):
            break
    replay = NeedTracker(0.5, lookahead_s=0.5)  # the reference state after the same prefix
    t = 0.0
    for gap, s, q, done in before:
        t += gap
        replay.ingest_sample(t, s, q, done)
    for (_, s, q, done), tk in zip(stretch[:stop], times[:stop], strict=True):
        replay.ingest_sample(tk, s, q, done)
    assert repr(planned.snapshot()) == repr(replay.snapshot())
