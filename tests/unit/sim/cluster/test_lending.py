"""Cluster mode's asleep tier and lending: who sleeps, who wakes, what best-effort work borrows and pays."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from ebb.sim.cluster.engine import DRAIN_S, ClusterInputs, PolicyStep, simulate
from ebb.sim.cluster.lending import ClusterTiers, TierState
from tests.unit.sim.cluster.test_engine import inputs

ONE = np.ones(1, dtype=np.int64)


def tiers(n: int = 1, *, wake_s: float = 2.0, max_replicas: int = 8, ttl_s: float = 1800.0,
          fail: float = 0.0) -> ClusterTiers:
    return ClusterTiers(wake_s=np.full(n, wake_s), max_replicas=np.full(n, max_replicas, dtype=np.int64),
                        ttl_s=np.full(n, ttl_s), fail=np.full(n, fail))


def tiered(inp: ClusterInputs, **kw: float) -> ClusterInputs:
    return dataclasses.replace(inp, tiers=tiers(len(inp.names), **kw))  # type: ignore[arg-type]


def down_then_up(down_at: int, up_at: int, low: int, high: int):  # type: ignore[no-untyped-def]
    def policy(step: PolicyStep) -> tuple[np.ndarray, None]:
        t = step.t_s
        return np.full(len(step.ready), low if down_at <= t < up_at else high), None
    return policy


def keep_all() -> np.ndarray:
    return np.array([-1])


# -- the tier state alone -------------------------------------------------------------------------

def test_a_drained_replica_sleeps_only_while_its_service_has_room_under_max() -> None:
    state = TierState(tiers(max_replicas=2), services=1, zones=1, batch=0, drain_s=DRAIN_S)
    batch = np.zeros((0, 1), dtype=np.int64)
    for _ in range(3):
        state.drain_to_sleep(0, 0, 0)
    state.settle(DRAIN_S - 1, ONE, batch)
    assert state.asleep.sum() == 0 and state.held().sum() == 3  # still draining, GPUs held
    state.settle(DRAIN_S, ONE, batch)
    assert state.asleep.sum() == 2 and state.held().sum() == 2  # the third went


def test_sleepers_past_their_ttl_are_released_and_a_lent_gpu_stays_with_its_borrower() -> None:
    state = TierState(tiers(ttl_s=100), services=1, zones=1, batch=1, drain_s=DRAIN_S)
    batch = np.zeros((1, 1), dtype=np.int64)
    state.drain_to_sleep(0, 0, 0)
    state.settle(DRAIN_S, ONE, batch)
    assert state.lend(0, 5, ONE) == 1  # one sleeper, one GPU to lend
    state.settle(DRAIN_S + 100, ONE, batch)
    assert state.asleep.sum() == 0 and state.lent.sum() == 0 and batch.sum() == 1  # handed over, not preempted


def test_a_wake_on_a_lent_gpu_preempts_the_lowest_priority_borrower_and_waits_for_its_checkpoint() -> None:
    state = TierState(tiers(wake_s=2.0), services=1, zones=1, batch=2, drain_s=DRAIN_S)
    batch = np.zeros((2, 1), dtype=np.int64)
    for t in (0, 1):
        state.drain_to_sleep(t, 0, 0)
        state.settle(t + DRAIN_S, ONE, batch)
    assert state.lend(0, 1, ONE) == 1 and state.lend(1, 1, ONE) == 1
    ready, wakes, taken = state.wake(20, 0, 1, ONE, np.array([5, 1]), checkpoint_s=30)
    assert ready == [(0, 32)] and wakes[0].reclaimed_gpus == 1
    assert [(p.batch, p.gpus, p.cause) for p in taken] == [(1, 1, "reclaim")]  # priority 1 goes before 5


def test_an_unlent_sleeper_wakes_in_its_wake_time_rounded_up_to_whole_seconds() -> None:
    state = TierState(tiers(wake_s=0.3), services=1, zones=1, batch=0, drain_s=DRAIN_S)
    state.drain_to_sleep(0, 0, 0)
    state.settle(DRAIN_S, ONE, np.zeros((0, 1), dtype=np.int64))
    ready, wakes, taken = state.wake(30, 0, 3, ONE, np.zeros(0, dtype=np.int64), checkpoint_s=30)
    assert ready == [(0, 1)] and not taken and wakes[0].delay_s == 1.0


def test_failed_wakes_are_recorded_and_their_replicas_are_not_handed_back() -> None:
    state = TierState(tiers(fail=1.0), services=1, zones=1, batch=0, drain_s=DRAIN_S)
    state.drain_to_sleep(0, 0, 0)
    state.settle(DRAIN_S, ONE, np.zeros((0, 1), dtype=np.int64))
    ready, wakes, _ = state.wake(30, 0, 1, ONE, np.zeros(0, dtype=np.int64), checkpoint_s=0)
    assert ready == [] and math.isnan(wakes[0].delay_s) and state.asleep.sum() == 0


@settings(max_examples=60, deadline=None)
@given(ops=st.lists(st.tuples(st.sampled_from(["sleep", "lend", "back", "wake", "tick", "keep"]),
                              st.integers(0, 2), st.integers(0, 4)), max_size=60))
def test_lent_gpus_never_exceed_the_sleepers_gpus_in_any_zone(ops: list[tuple[str, int, int]]) -> None:
    gpus = np.array([1, 2], dtype=np.int64)
    state = TierState(tiers(2, max_replicas=3, ttl_s=40), services=2, zones=3, batch=2, drain_s=DRAIN_S)
    batch = np.zeros((2, 3), dtype=np.int64)
    t = 0
    for op, a, n in ops:
        if op == "sleep":
            state.drain_to_sleep(t, a % 2, a)
        elif op == "lend":
            state.lend(a % 2, n, gpus)
        elif op == "back":
            state.give_back(a % 2, n)
        elif op == "wake":
            state.wake(t, a % 2, n, gpus, np.array([0, 1]), checkpoint_s=5)
        elif op == "keep":
            state.keep(np.array([n % 2, -1]), gpus, batch)
        else:
            t += 1 + 5 * n
            state.settle(t, gpus, batch)
        assert (state.lendable(gpus) >= 0).all() and (state.lent >= 0).all() and (state.asleep >= 0).all()
        assert (state.asleep.sum(axis=1) <= 3).all()


# -- the engine with a tier -----------------------------------------------------------------------

def test_without_a_keep_answer_a_tiered_service_removes_replicas_as_before() -> None:
    plain = inputs(np.full((1, 120), 5), initial=6)
    policy = down_then_up(10, 80, 2, 6)
    before = simulate(plain, policy, write_limit_per_100ms=None)
    after = simulate(tiered(plain), policy, write_limit_per_100ms=None)  # a peer: keep_asleep None
    assert after.gpu_s.tolist() == before.gpu_s.tolist() and not after.wakes
    assert after.asleep_gpu_s.sum() == 0


def test_a_policy_that_keeps_sleepers_gets_them_back_in_the_wake_time_not_the_cold_start() -> None:
    inp = tiered(inputs(np.full((1, 120), 5), initial=6))  # cold start 20 s
    asked: list[tuple[float, int]] = []

    def policy(step: PolicyStep) -> tuple[np.ndarray, None]:
        asked.append((step.t_s, int(step.ready[0])))
        return np.full(1, 2 if 10 <= step.t_s < 80 else 6), None
    run = simulate(inp, policy, write_limit_per_100ms=None, keep_asleep=keep_all)
    assert len(run.wakes) == 4 and all(w.delay_s == 2.0 for w in run.wakes)
    ready_at = dict(asked)
    assert ready_at[82.0] == 6  # woken at 80, ready 2 s later (a cold start would take 20)
    assert run.asleep_gpu_s[0] > 0


def test_best_effort_work_borrows_sleepers_gpus_and_every_preemption_is_recorded() -> None:
    t = 200
    inp = tiered(inputs(np.full((1, t), 5), zone_gpus=2, initial=6, batch=np.full((1, t), 6.0)))
    inp = dataclasses.replace(inp, checkpoint_s=15, restart_gpu_s=60.0)
    run = simulate(inp, down_then_up(10, 120, 2, 6), write_limit_per_100ms=None, keep_asleep=keep_all)
    assert run.lent_gpu_s.sum() > 0  # the 4 sleepers' GPUs ran the job meanwhile
    assert run.preemptions == len(run.preemption_log) > 0
    assert {p.cause for p in run.preemption_log} == {"reclaim"}
    assert all(w.delay_s == 2 + 15 for w in run.wakes if w.reclaimed_gpus)
    assert run.batch_lost_gpu_s.sum() == 60.0 * sum(p.gpus for p in run.preemption_log)
    assert run.quota_breach_s == 0


def test_a_cold_replica_placed_on_borrowed_gpus_waits_for_the_checkpoint_and_is_recorded() -> None:
    t = 150
    # the shop's guaranteed min (6) covers the new replica, so it may preempt the lab's borrowed GPUs
    inp = dataclasses.replace(inputs(np.full((1, t), 5), zone_gpus=4, initial=2, batch=np.full((1, t), 12.0),
                                     quota_min=(6, 0)), checkpoint_s=10)
    seen: dict[float, int] = {}

    def policy(step: PolicyStep) -> tuple[np.ndarray, None]:
        seen[step.t_s] = int(step.ready[0])
        return np.array([3 if step.t_s >= 5 else 2]), None
    run = simulate(inp, policy, write_limit_per_100ms=None)
    assert [p.cause for p in run.preemption_log] == ["placement"]
    assert seen[5 + 20 + 10 - 1] == 2 and seen[5 + 20 + 10] == 3  # cold start 20 s + checkpoint 10 s
