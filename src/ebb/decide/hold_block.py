"""Reconciles proven holds, many at once: Ebb's block path for a simulator whose fleet is steady.

Most of Ebb's reconciles are holds (all but ~250 of 86,400 on a day of ServeGen counts): the comeback
floor keeps the fleet where it is and nothing asks for more. The fluid simulator reconciles once a
simulated second, so over 58 days the policy's Python per reconcile, not the queueing model, is the
run's cost. :func:`hold_ticks` takes a block of reconciles (one fine sample each, the fleet
unchanged throughout) and answers how many leading ones are **provably** plain holds — the answer
``decide`` would have returned, nothing recorded — leaving the policy's state exactly as that many
``decide`` calls would (the engine resumes with ``decide`` at the first unproven one).

It works only through the policy's public API (:class:`~ebb.decide.ebb_rules.EbbConfig`: its settings
and its :class:`~ebb.decide.ebb_state.EbbState`), applying each rule's block twin, which sits beside the
one-tick rule ``decide`` applies (:mod:`ebb.decide.ebb_state`, :mod:`ebb.decide.ebb_rules`,
:mod:`ebb.decide.comeback`, :func:`~ebb.decide.semantics.calm_weight`). What is proven, per reconcile:

* **No surge**: no persistent queue (an unqueued sample within ``queue_surge_s`` of every tick,
  :meth:`~EbbState.queue_quiet`); no completion's TTFT past the surge limit or the SLO, so no late
  requests (:func:`~ebb.decide.ebb_rules.calm_window`, :func:`~ebb.decide.ebb_rules.late_rows`).
* **No scale-up, no scale-down** (:func:`~ebb.decide.hold_proof.held_prefix`), no reconcile at the
  burst threshold (the burst memory learns from ``decide`` only) and none once a recurrence holds
  capacity for its next burst (:mod:`ebb.decide.recurrence`).
* **State**: the need tracker takes the block's samples at once
  (:meth:`~ebb.decide.need.NeedTracker.ingest_seconds`), the rest of the ingest is
  :meth:`~EbbState.ingest_held`. The need tracker is restored and fed again when the block stops early.

Pure: arrays in, an int out, the policy's state updated; no I/O. Cost: ~100 numpy calls per
block (~1–2 ms on the reference machine), whatever its length; Python per tick only for the rises'
sorted insertions and the rare one-by-one pass.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from ebb.decide.ebb_rules import EbbConfig, calm_window, late_rows
from ebb.decide.ebb_state import EbbState
from ebb.decide.hold_proof import held_prefix
from ebb.decide.latency import TTFT
from ebb.decide.served import served_demand
from ebb.model.observation import FineSignals

__all__ = ["hold_ticks", "holds_possible"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


def holds_possible(pol: EbbConfig) -> bool:
    """Whether a block could prove any hold now: no detected period sets the floor (its phase rise
    is not bounded) and the latency window is calm (:func:`~ebb.decide.ebb_rules.calm_window`)."""
    # with an asleep tier the floor reads a second bound the blocks do not mirror: decide ticks one by one
    return pol.state.wake_bound is None and not pol.state.bound.period_found and calm_window(pol)


def hold_ticks(pol: EbbConfig, ticks_s: FloatArray, fine: FineSignals, spec: int, ready_replicas: int) -> int:
    """How many leading reconciles at ``ticks_s`` are provably holds; the policy's state advanced
    through them (see the module docstring). 0 when the block does not qualify."""
    st = pol.state
    ticks = np.asarray(ticks_s, dtype=np.float64)
    ends = _row_ends(st, ticks, fine)
    if ends is None:
        return 0
    demand = served_demand(fine.prefill_replicas, fine.slot_replicas, ready_replicas)
    # A recurrence holding capacity from some time on is decide's to apply (a scale-up, a floor).
    limit = min(_signal_limit(pol, fine, ends),
                int(np.searchsorted(ticks, st.bursts.hold_from(float(ticks[0])), side="left")))
    if limit == 0:
        return 0
    ticks, demand, ends = ticks[:limit], demand[:limit], ends[:limit]
    queued = np.asarray(fine.queued[:limit], dtype=np.float64)
    w = np.asarray(fine.done_weight[:int(ends[-1])], dtype=np.float64)
    # Per tick, what _nansum of its rows' weights gives (at most two rows: the same sum).
    done = np.bincount(np.repeat(np.arange(limit), _per_tick(ends)), weights=np.where(np.isnan(w), 0.0, w),
                       minlength=limit).astype(np.float64)
    before = st.need.snapshot()
    needs, reading = st.need.ingest_seconds(ticks, demand, queued, done)
    cap = max(ready_replicas, 1) * st.capacity
    l1 = st.l1.lone_quantiles(demand)  # the L1 P99: its window holds this sample only
    rows_ttft = np.maximum.reduceat(np.asarray(fine.done_ttft_ms[:int(ends[-1])], dtype=np.float64),
                                    np.concatenate(([0], ends[:-1])))  # every tick has a row (_signal_limit)
    ttft_peak = np.maximum(np.maximum.accumulate(rows_ttft), st.latency.peak(TTFT))
    held = held_prefix(pol, ticks, needs, st.window_needs(ticks, needs), l1, cap, spec, ttft_peak)
    if held == 0:
        st.need.restore(before)
        return 0
    if held < limit:
        st.need.restore(before)
        needs, reading = st.need.ingest_seconds(ticks[:held], demand[:held], queued[:held], done[:held])
    st.ingest_held(ticks[:held], demand[:held], queued[:held], needs[:held], ends[:held], fine)
    outgrown = np.flatnonzero(needs[:held] > cap)  # decide's test of each tick's own need (its cycle peak)
    if len(outgrown):
        st.last_outgrown_t = float(ticks[int(outgrown[-1])])
    st.reading = reading
    return held


def _row_ends(st: EbbState, ticks: FloatArray, fine: FineSignals) -> IntArray | None:
    """Per tick, the end of its completions in ``fine`` (rows timed at their tick, ≤ 2 a tick, every
    row a TTFT); None when the block does not have the shape the proof needs."""
    n = len(ticks)
    if st.first_t is None or n == 0:
        return None
    if len(fine.t_s) != n or not np.array_equal(fine.t_s, ticks) or not bool((ticks[1:] - ticks[:-1] >= 1.0).all()):
        return None  # one sample per tick, at it, ticks ≥ 1 s apart: the 1 s L1 window holds that sample only
    if not float(ticks[0]) > st.need.last_t:
        return None
    rows = len(fine.done_t_s)
    if not (len(fine.done_weight) == len(fine.done_ttft_ms) == len(fine.done_e2e_ms) == rows
            and len(fine.done_wait_ms) in (0, rows)):
        return None
    ends = np.searchsorted(fine.done_t_s, ticks, side="right").astype(np.int64)
    if int(ends[-1]) != rows or not bool((_per_tick(ends) <= 2).all()):
        return None
    if rows and not bool(np.isfinite(fine.done_ttft_ms).all()):
        return None
    return ends


def _per_tick(ends: IntArray) -> IntArray:
    """Completion rows per tick from their cumulative ends (``np.diff(ends, prepend=0)``, one call less)."""
    return np.asarray(ends - np.concatenate(([0], ends[:-1])), dtype=np.int64)


def _signal_limit(pol: EbbConfig, fine: FineSignals, ends: IntArray) -> int:
    """Leading ticks with no persistent queue, completions at every tick and none late or breaching."""
    if not calm_window(pol):
        return 0
    ok = (_per_tick(ends) > 0) & pol.state.queue_quiet(fine.t_s, fine.queued > 0)
    rows = int(ends[-1])
    if rows:
        bad_row = late_rows(pol, fine, rows)
        if bad_row.any():
            first_bad = int(np.flatnonzero(bad_row)[0])
            ok[int(np.searchsorted(ends, first_bad, side="right")):] = False
    return len(ok) if ok.all() else int(np.argmin(ok))
