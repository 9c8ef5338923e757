"""The asleep tier's decision rules for one workload, and beside each the same rule over a fleet.

With an asleep tier (:mod:`ebb.config.tiers`) Ebb lets part of the floor a cold start needs sleep,
wakes the sleepers it counted on at a scale-up, and releases those it no longer counts on. These are
the three rules. :class:`~ebb.decide.policy.EbbPolicy` applies the one-workload functions
(``_tiered``, ``_awoken``, ``asleep_wanted``), and :class:`~ebb.decide.fleet_policy.FleetEbb` applies
their twins to N workloads at once. A twin does the same integer operations element-wise and is
tested equal to its scalar rule (``tests/unit/decide/test_tier_rules.py``):

=======================  ==========================  =================================================
one workload             a fleet                     the rule
=======================  ==========================  =================================================
:func:`tier_floor`       :func:`tier_floors`         of the cold floor, up to ``sleep_max`` may sleep
                                                     while the running ones hold the need and the
                                                     floor at the wake horizon
:func:`awoken`           :func:`awoken_many`         a scale-up wakes every sleeper the cold floor
                                                     counted on, at once
:func:`asleep_kept`      :func:`asleep_kept_many`    the sleepers to keep: what the cold floor holds
                                                     beyond the running replicas (a reserve: the
                                                     tier's max, until the TTL)
:func:`reserve_awake`    :func:`reserve_awake_many`  with a reserve, H × the sized need stays running
:func:`learned_wake_s`   (none: FleetEbb runs in     the wake time counted on: raised to the slowest
                         the cluster simulator,      wake the actuator measured, never lowered
                         whose wakes are exact)
=======================  ==========================  =================================================

In the fleet twins a workload without a tier, or without a cold floor yet, is marked by
``cold_floor`` < 0 (the scalar rules' None), and "no opinion" is -1. Pure: no I/O, no state.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

__all__ = ["LEARN_MARGIN", "NO_FLOOR", "asleep_kept", "asleep_kept_many", "awoken", "awoken_many", "learned_wake_s",
           "reserve_awake", "reserve_awake_many", "tier_floor", "tier_floors"]

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

LEARN_MARGIN = 0.1
"""A measured wake raises the wake time counted on only when it is more than 10 % (and 0.1 s) slower:
the wake bound restarts on a change, so jitter must not restart it."""

NO_FLOOR = -1
"""In the fleet twins: no cold floor yet, or no tier (the scalar rules' None); also "no opinion"."""


# -- the floor with a tier ---------------------------------------------------------------------------
def tier_floor(floor: int, wake_at: int, sized: int, reachable: int, sleep_max: int,
               min_replicas: int, max_replicas: int) -> int:
    """The floor with an asleep tier. Of the ``floor`` replicas a cold start's rules hold, or of the
    ``reachable`` ones (running or asleep) when fewer, up to ``sleep_max`` may sleep. The running
    replicas hold the need now (``sized``) and the comeback floor at the wake horizon (``wake_at``),
    within ``[min_replicas, max_replicas]`` as every hold floor is. The result is never above ``floor``."""
    tiered = min(max_replicas, max(min_replicas, wake_at, 0, max(sized, min(floor, reachable) - sleep_max)))
    return floor if tiered >= floor else tiered


def tier_floors(floor: IntArray, wake_at: IntArray, sized: IntArray, reachable: IntArray, sleep_max: IntArray,
                min_replicas: IntArray, max_replicas: IntArray, on: BoolArray) -> IntArray:
    """:func:`tier_floor` element-wise where ``on`` (a tier, and a floor at its wake horizon), else ``floor``."""
    held = np.maximum(sized, np.minimum(floor, reachable) - sleep_max)
    tiered = np.minimum(max_replicas, np.maximum(np.maximum(min_replicas, wake_at), np.maximum(held, 0)))
    return np.asarray(np.where(on & (tiered < floor), tiered, floor), dtype=np.int64)


# -- waking ------------------------------------------------------------------------------------------
def awoken(want: int, spec: int, asleep: int, cold_floor: int | None, max_replicas: int,
           reserve: bool = False) -> int:
    """A scale-up to ``want`` with ``asleep`` sleepers at hand wakes every one the last cold floor
    counted on, at once (up to ``max_replicas``); with a ``reserve``, every sleeper. A wake is the
    first answer to a burst: it costs seconds of GPUs that are held anyway, and one replica a tick
    would leave the burst queueing. ``want`` unchanged without a sleeper, or without a cold floor
    and a reserve."""
    if not asleep or (cold_floor is None and not reserve):
        return want
    counted = spec + asleep if reserve or cold_floor is None else min(spec + asleep, cold_floor)
    return min(max_replicas, max(want, counted))


def awoken_many(want: IntArray, spec: IntArray, asleep: IntArray, cold_floor: IntArray,
                max_replicas: IntArray, reserve: BoolArray | None = None) -> IntArray:
    """:func:`awoken` element-wise; ``cold_floor`` < 0 is None; ``reserve`` None is all False."""
    res = np.zeros(len(want), dtype=np.bool_) if reserve is None else reserve
    counted = np.where(res, spec + asleep, np.minimum(spec + asleep, cold_floor))
    woken = np.minimum(max_replicas, np.maximum(want, counted))
    return np.asarray(np.where((asleep != 0) & ((cold_floor >= 0) | res), woken, want), dtype=np.int64)


def reserve_awake(sized: int, headroom: float, max_replicas: int) -> int:
    """With a reserve asleep, the replicas kept running: ``ceil(headroom × sized)`` (at most
    ``max_replicas``), so a burst up to ``headroom``× the sized need is served while sleepers wake."""
    return min(max_replicas, math.ceil(headroom * sized - 1e-9))


def reserve_awake_many(sized: IntArray, headroom: FloatArray, max_replicas: IntArray) -> IntArray:
    """:func:`reserve_awake` element-wise (``headroom`` NaN: no reserve, 0)."""
    h = np.nan_to_num(headroom, nan=0.0)
    return np.asarray(np.minimum(max_replicas, np.ceil(h * sized - 1e-9)).astype(np.int64), dtype=np.int64)


# -- keeping sleepers --------------------------------------------------------------------------------
def asleep_kept(cold_floor: int | None, running: int, reserve_max: int | None = None) -> int | None:
    """Sleepers to keep beside ``running`` replicas: what the last cold floor holds beyond them;
    with a reserve, ``reserve_max`` (the tier's max: the TTL alone releases them); None before any
    cold floor without a reserve (the tier's TTL decides)."""
    if reserve_max is not None:
        return reserve_max
    return None if cold_floor is None else max(0, cold_floor - running)


def asleep_kept_many(cold_floor: IntArray, running: IntArray, reserve_max: IntArray | None = None) -> IntArray:
    """:func:`asleep_kept` element-wise; ``cold_floor`` < 0 is None, and None is :data:`NO_FLOOR`;
    ``reserve_max`` < 0 (or None) is no reserve."""
    kept = np.where(cold_floor >= 0, np.maximum(0, cold_floor - running), NO_FLOOR)
    if reserve_max is not None:
        kept = np.where(reserve_max >= 0, reserve_max, kept)
    return np.asarray(kept, dtype=np.int64)


# -- learning the wake time --------------------------------------------------------------------------
def learned_wake_s(counted_s: float, seen_s: float | None) -> float:
    """The wake time to count on: ``counted_s`` (the tier's ``wake_s``, or what was learned before),
    raised to ``seen_s`` (the slowest wake the actuator measured) when that is more than
    :data:`LEARN_MARGIN` (and 0.1 s) slower; never lowered, so one fast wake never shortens the
    horizon a slow one taught. ``seen_s`` None, NaN or not positive: unchanged."""
    if seen_s is None or not seen_s > 0 or seen_s != seen_s:
        return counted_s
    return seen_s if seen_s > counted_s * (1.0 + LEARN_MARGIN) and seen_s > counted_s + 0.1 else counted_s
