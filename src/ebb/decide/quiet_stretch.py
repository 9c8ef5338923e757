"""A quiet stretch, planned at once: Ebb's block path for a request simulator between two events.

On a long-service trace (requests of minutes, a few events a minute) the request engine's fleet
sits unchanged for tens of seconds at a time: no arrival, finish, first token or cold-start end,
so every 100 ms fine sample repeats the one before. Ebb still ran its fast path
(:meth:`~ebb.decide.policy.EbbPolicy.react`) nine times a second on them — a one-sample ingest of the
need tracker, the L1 window and the queue history each time — and that was two thirds of a 23-day
run. :func:`plan_stretch` takes the whole stretch's samples at once: the need tracker's needs,
lookahead bounds and costs for every sample in one vectorised pass
(:meth:`~ebb.decide.need.NeedTracker.plan`), the sizing window after each
(:meth:`~ebb.decide.ebb_state.EbbState.window_needs`), and ``react``'s test per sample —
``max(need over the sizing window, need ahead) > ready capacity`` and the replicas it would ask
past the target — so it knows how many leading samples ``react`` answers None to.

The reconciles in the stretch run ``decide`` as always: the engine calls :meth:`QuietStretch.take`
up to each reconcile's samples (the state exactly what the ``react`` and ``decide`` ingests of those
samples leave, :meth:`~ebb.decide.ebb_state.EbbState.ingest_planned`) and then ``decide`` with no new
samples — except the runs of them :meth:`QuietStretch.hold` proves plain holds at once
(:mod:`ebb.decide.stretch_holds`), which it skips. A decision that changes the fleet ends the
stretch; so does a change of the learned capacity (the test per sample read the old one).

Pure: arrays in, the policy's state advanced by :meth:`QuietStretch.take`; no I/O. Cost: ~40 numpy
calls per stretch and ~10 µs of Python per reconcile, against ~200 µs for nine ``react`` calls.
Tested equal to ``react`` and ``decide`` one sample at a time, end to end
(``tests/unit/sim/test_request_quiet_stretch.py``).
"""

from __future__ import annotations

import math
from bisect import bisect_right

import numpy as np

from ebb.decide.ebb_rules import EbbConfig
from ebb.decide.ebb_state import INT64_NS_S
from ebb.decide.served import served_demand
from ebb.decide.stretch_holds import StretchSamples, stretch_holds, stretch_samples

__all__ = ["QuietStretch", "plan_stretch"]

_MAX_MISSES = 6
"""Backoff cap: after this many proofs in a row held nothing, one is tried every 2^6 − 1 reconciles."""


class QuietStretch:
    """A planned stretch: :attr:`quiet` leading samples ``react`` answers None to, taken in order."""

    __slots__ = ("_capacity", "_fleet", "_misses", "_pol", "_samples", "_skips", "_taken", "quiet")

    def __init__(self, pol: EbbConfig, samples: StretchSamples, quiet: int, fleet: tuple[int, int]) -> None:
        self._pol, self._samples = pol, samples
        self._capacity = pol.state.capacity
        self._fleet = fleet  # (ready, spec) throughout
        self._taken = 0
        self._misses = self._skips = 0  # proofs in a row that held nothing; hold calls to refuse
        self.quiet = quiet
        """Leading samples ``react`` answers None to (the first that would scale up, or all)."""

    def take(self, stop: int) -> bool:
        """Ingest the samples before ``stop`` (at most :attr:`quiet`) not taken yet, as their ``react``
        calls — and ``decide``'s, for a reconcile's own sample — would; False, nothing taken, when
        the learned capacity moved since the plan (its test per sample is void: take no more)."""
        if stop > self.quiet or stop < self._taken:
            raise ValueError(f"stop {stop} outside [{self._taken}, {self.quiet}]")
        if self._pol.state.capacity != self._capacity:
            return False
        if stop > self._taken:
            smp = self._samples
            self._pol.state.ingest_planned(smp.plan, self._taken, stop, smp.demand, smp.queued)
            self._taken = stop
        return True

    def hold(self, ticks_s: list[float], cuts: list[int]) -> int:
        """How many leading reconciles at ``ticks_s`` (each deciding after the samples before
        ``cuts[k]``, the first one after the last reconcile served) are provably holds, their samples
        taken and the state as their ``decide`` calls leave it (:mod:`ebb.decide.stretch_holds`); 0,
        nothing taken, when none is or the plan is void."""
        n = bisect_right(cuts, self.quiet)  # those whose samples react stays quiet on
        if n == 0 or self._pol.state.capacity != self._capacity or not self._samples.l1_steady(ticks_s[0]):
            return 0  # not a miss: the L1 window settles within a second or two
        if self._skips:
            self._skips -= 1
            return 0
        ready, spec = self._fleet
        held = stretch_holds(self._pol, self._samples, self._taken, ticks_s[:n], cuts[:n], ready, spec)
        if held:
            self._taken = cuts[held - 1]
            self._misses = 0
        else:
            # The same reads that failed (an unknown latency beside a wanted scale-down) mostly fail
            # again a second later: retry after 1, 3, 7, … reconciles (at most 63), not at each.
            self._misses = min(self._misses + 1, _MAX_MISSES)
            self._skips = (1 << self._misses) - 1
        return held


def plan_stretch(pol: EbbConfig, t_s: list[float], reacts: list[bool], prefill: list[float],
                 slots: list[float], queued: list[float], ready: int, spec: int) -> QuietStretch | None:
    """The stretch of fine samples at ``t_s`` (increasing; no completion rows), each ``react``'s
    (``reacts[k]``) or a reconcile's own, in a fleet of ``spec`` replicas with ``ready`` ready
    throughout; None when it does not qualify (the policy has not reconciled yet, a time not past
    every sample it holds, a value the one-by-one path would skip as not a number) — the engine
    then serves the samples one by one."""
    st = pol.state
    n = len(t_s)
    if st.first_t is None or n == 0 or not (t_s[0] > st.need.last_t and t_s[0] > st.last_signal_t) or \
            not abs(t_s[-1]) < INT64_NS_S or not all(math.isfinite(v) for _, v in st.recent_need):
        return None
    t = np.asarray(t_s, dtype=np.float64)
    if not bool((t[1:] > t[:-1]).all()):
        return None
    demand = served_demand(np.asarray(prefill, dtype=np.float64), np.asarray(slots, dtype=np.float64), ready)
    if not bool(np.isfinite(demand).all()):
        return None
    plan = st.need.plan(t, demand, np.asarray(queued, dtype=np.float64), np.zeros(n))
    if not plan.finite:
        return None
    now = st.window_needs(t, plan.need)  # react's need_now after each sample's ingest
    size = np.where(plan.ahead > now, plan.ahead, now)  # max(need, ahead)
    want = np.minimum(st.replicas_of(size, pol.profile.target_util), float(pol.max_replicas))
    fires = np.asarray(reacts, dtype=bool) & (size > max(ready, 1) * st.capacity) & (want > spec)
    quiet = int(np.argmax(fires)) if bool(fires.any()) else n
    return QuietStretch(pol, stretch_samples(plan, demand, list(queued)), quiet, (ready, spec))
