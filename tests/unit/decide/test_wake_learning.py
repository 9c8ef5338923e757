"""The tier's wake time is learned upward from the wakes the actuator measured: a slower wake raises the
horizon the policy counts on, keeping what its wake memory learned; a faster one never lowers it."""

from __future__ import annotations

import dataclasses
import math

from hypothesis import given
from hypothesis import strategies as st

from ebb.decide.policy import EbbPolicy
from ebb.decide.profiles import EbbProfile
from ebb.decide.tier_rules import LEARN_MARGIN, learned_wake_s
from tests.unit.decide.test_ebb_policy import fine, observe, pod

times = st.floats(0.0, 600.0, allow_nan=False)


@given(counted=st.floats(0.01, 300.0), seen=st.one_of(st.none(), st.just(math.nan), times))
def test_the_learned_wake_is_never_below_what_was_counted_and_moves_only_past_the_margin(
        counted: float, seen: float | None) -> None:
    got = learned_wake_s(counted, seen)
    assert got >= counted
    assert got in (counted, seen)
    if got != counted:
        assert seen is not None and seen > counted * (1 + LEARN_MARGIN) and seen > counted + 0.1


@given(counted=st.floats(0.01, 300.0), seen=st.lists(times, max_size=8))
def test_learning_is_monotone_in_the_wakes_seen(counted: float, seen: list[float]) -> None:
    learned = [counted]
    for s in seen:
        learned.append(learned_wake_s(learned[-1], s))
    assert learned == sorted(learned)


def policy(wake_s: float | None) -> EbbPolicy:
    return EbbPolicy(EbbProfile(), slo_ttft_ms=800.0, slo_e2e_ms=20_000.0, max_replicas=12, initial=4,
                     wake_s=wake_s, sleep_max=0 if wake_s is None else 4)


def test_a_slower_wake_raises_the_wake_horizon_and_keeps_the_wake_memory() -> None:
    pol = policy(2.0)
    pods = [pod(i) for i in range(4)]
    for k in range(30):  # some wake-horizon history first
        pol.decide(observe(float(k + 1), pods, fine(float(k + 1), 1.0 + (k % 5) * 0.3)))
    assert pol.state.wake_bound is not None
    needs_before = pol.state.wake_bound.needs()
    horizon_before = pol.state.wake_bound.horizon_s
    pol.decide(dataclasses.replace(observe(31.0, pods, fine(31.0, 1.0)), wake_s_seen=6.5))
    assert pol.wake_s == 6.5 and pol.state.wake_bound.horizon_s > horizon_before
    assert pol.state.wake_bound.needs()[:len(needs_before)] == needs_before
    pol.decide(dataclasses.replace(observe(32.0, pods, fine(32.0, 1.0)), wake_s_seen=3.0))
    assert pol.wake_s == 6.5  # a faster wake never shortens what a slow one taught


def test_without_a_tier_a_measured_wake_changes_nothing() -> None:
    pol = policy(None)
    pods = [pod(i) for i in range(4)]
    pol.decide(dataclasses.replace(observe(1.0, pods, fine(1.0, 1.0)), wake_s_seen=9.0))
    assert pol.wake_s is None and pol.state.wake_bound is None
