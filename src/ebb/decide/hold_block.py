"""Reconciles proven holds, many at once: Ebb's block path for a simulator whose fleet is steady.

Most of Ebb's reconciles are holds (all but ~250 of 86,400 on a day of ServeGen counts): the comeback
floor keeps the fleet where it is and nothing asks for more. The fluid simulator reconciles once a
simulated second, so over 58 days the policy's Python per reconcile, not the queueing model, is the
run's cost. :func:`hold_ticks` takes a block of reconciles (one fine sample each, the fleet
unchanged throughout) and answers how many leading ones are **provably** plain holds — the answer
``decide`` would have returned, nothing recorded — leaving the policy's state exactly as that many
``decide`` calls would (the engine resumes with ``decide`` at the first unproven one).

What is proven, per reconcile, and how (the same float operations as ``decide`` wherever a value is
carried on):

* **No surge**: no persistent queue (an unqueued sample within ``queue_surge_s`` of every tick); no
  completion's TTFT past the surge limit or the SLO (the window's and the block's), so no late
  requests; no breach joins the long window and its weight was under the threshold.
* **No scale-up, no scale-down** (:func:`~ebb.decide.hold_proof.held_prefix`): the need sized up
  stays within the fleet, or within the hysteresis while no burst is on; a lower bound of the hold
  floor (the comeback floor, the learned floor, the sized need) reaches the fleet — or the last
  scale-down is too recent for another, or the scale-down it would want is vetoed with the last
  veto's reasons again (a repeated veto holds and records nothing). A period search due in the
  block runs there; a period found stops it (its phase rise is not bounded).
* **State**: every second's need is recorded in the comeback bound (computed ahead and committed
  at once, :mod:`ebb.decide.comeback_ahead`), the weight takes its damped step toward the base
  (every completion's TTFT within the SLO, so the P99 too), the need tracker's costs and the
  latency window's long counts take their running sums in the loop's order
  (:mod:`ebb.decide.running`), and the L1 window, queue history, recent needs and the newest signal
  and busy times end as the last second leaves them. The need tracker is restored and fed again
  when the block stops early.

Pure: arrays in, an int out, the policy's own state updated; no I/O. Cost: ~100 numpy calls per
block (~1–2 ms on the reference machine), whatever its length; Python per tick only for the rises'
sorted insertions and the rare one-by-one pass.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from ebb.decide.hold_proof import held_prefix
from ebb.decide.latency import TTFT
from ebb.decide.policy import _LONG_MIN_WEIGHT, EbbPolicy, served_demand
from ebb.model.observation import FineSignals


__all__ = ["hold_ticks", "window_allows_holds"]

FloatArray = npt.NDArray[np.float64]
_NS = 1_000_000_000
_LONG_MARGIN = 1e-6
"""Slack under the long window's breach threshold: its running sum is rounded on every change."""


def hold_ticks(pol: EbbPolicy, ticks_s: FloatArray, fine: FineSignals, spec: int, ready_replicas: int) -> int:
    """How many leading reconciles at ``ticks_s`` are provably holds; the policy's state advanced
    through them (see the module docstring). 0 when the block does not qualify."""
    ticks = np.asarray(ticks_s, dtype=np.float64)
    ends = _row_ends(pol, ticks, fine)
    if ends is None:
        return 0
    demand = served_demand(fine.prefill_replicas, fine.slot_replicas, ready_replicas)
    limit = _signal_limit(pol, fine, ends)
    if limit == 0:
        return 0
    ticks, demand, ends = ticks[:limit], demand[:limit], ends[:limit]
    queued = np.asarray(fine.queued[:limit], dtype=np.float64)
    w = np.asarray(fine.done_weight[:int(ends[-1])], dtype=np.float64)
    # Per tick, what _nansum of its rows' weights gives (at most two rows: the same sum).
    done = np.bincount(np.repeat(np.arange(limit), _per_tick(ends)), weights=np.where(np.isnan(w), 0.0, w),
                       minlength=limit).astype(np.float64)
    before = pol._need.snapshot()
    needs, reading = pol._need.ingest_seconds(ticks, demand, queued, done)
    cap = max(ready_replicas, 1) * pol._capacity
    mapping = pol._l1.mapping
    l1 = mapping.bin_values()[mapping.bin_index(demand)[0]]  # the L1 P99: its window holds this sample only
    rows_ttft = np.maximum.reduceat(np.asarray(fine.done_ttft_ms[:int(ends[-1])], dtype=np.float64),
                                    np.concatenate(([0], ends[:-1])))  # every tick has a row (_signal_limit)
    ttft_peak = np.maximum(np.maximum.accumulate(rows_ttft), pol._lat.peak(TTFT))
    held = held_prefix(pol, ticks, needs, l1, cap, spec, ttft_peak)
    if held == 0:
        pol._need.restore(before)
        return 0
    if held < limit:
        pol._need.restore(before)
        needs, reading = pol._need.ingest_seconds(ticks[:held], demand[:held], queued[:held], done[:held])
    _commit(pol, ticks[:held], demand[:held], queued[:held], needs[:held], ends[:held], fine)
    pol._reading = reading
    return held


def _row_ends(pol: EbbPolicy, ticks: FloatArray, fine: FineSignals) -> npt.NDArray[np.int64] | None:
    """Per tick, the end of its completions in ``fine`` (rows timed at their tick, ≤ 2 a tick, every
    row a TTFT); None when the block does not have the shape the proof needs."""
    n = len(ticks)
    if pol._first_t is None or n == 0:
        return None
    if len(fine.t_s) != n or not np.array_equal(fine.t_s, ticks) or not bool((ticks[1:] - ticks[:-1] >= 1.0).all()):
        return None  # one sample per tick, at it, ticks ≥ 1 s apart: the 1 s L1 window holds that sample only
    if not float(ticks[0]) > pol._need._last_t:
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


def _per_tick(ends: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """Completion rows per tick from their cumulative ends (``np.diff(ends, prepend=0)``, one call less)."""
    return np.asarray(ends - np.concatenate(([0], ends[:-1])), dtype=np.int64)


def _signal_limit(pol: EbbPolicy, fine: FineSignals, ends: npt.NDArray[np.int64]) -> int:
    """Leading ticks with no persistent queue, completions at every tick and none late or breaching."""
    if not window_allows_holds(pol):
        return 0
    p = pol.profile
    ttft_cap = min(p.surge_margin * pol.slo_ttft_ms, pol.slo_ttft_ms)
    ok = (_per_tick(ends) > 0) & _no_queue_surge(pol, fine.t_s, fine.queued > 0)
    rows = int(ends[-1])
    if rows:
        bad_row = (fine.done_ttft_ms > ttft_cap) | ~(fine.done_e2e_ms <= pol.slo_e2e_ms)
        if bad_row.any():
            first_bad = int(np.flatnonzero(bad_row)[0])
            ok[int(np.searchsorted(ends, first_bad, side="right")):] = False
    return len(ok) if ok.all() else int(np.argmin(ok))


def window_allows_holds(pol: EbbPolicy) -> bool:
    """Whether the latency window lets a block start: no completion in it past the surge limit or
    the SLO, and the long window's breaches under their threshold (less the rounding slack)."""
    p = pol.profile
    ttft_cap = min(p.surge_margin * pol.slo_ttft_ms, pol.slo_ttft_ms)
    return not (pol._lat.peak(TTFT) > ttft_cap or pol._lat.long_breach_weight >= _LONG_MIN_WEIGHT - _LONG_MARGIN)


def _no_queue_surge(pol: EbbPolicy, t_s: FloatArray, queued: npt.NDArray[np.bool_]) -> npt.NDArray[np.bool_]:
    """Per tick, whether the queue history after it holds an unqueued sample within ``queue_surge_s``
    (so ``_persistent_queue``, which needs every sample of that span queued, is False)."""
    unqueued_before = next((t for t, q in reversed(pol._queue_hist) if not q), -math.inf)
    last = np.maximum(np.maximum.accumulate(np.where(queued, -math.inf, t_s)), unqueued_before)
    return np.asarray(last > t_s - pol.profile.queue_surge_s, dtype=bool)


def _commit(pol: EbbPolicy, ticks: FloatArray, demand: FloatArray, queued: FloatArray, needs: FloatArray,
            ends: npt.NDArray[np.int64], fine: FineSignals) -> None:
    """The rest of ``_ingest``'s state for the held ticks, as their last one leaves it."""
    last = len(ticks) - 1
    t_last = float(ticks[last])
    pol._served_now = float(demand[last])
    pol._l1.ingest(demand[last:], (ticks[last:] * _NS).astype(np.int64))
    pol._l1.quantile(0.99, int(t_last * _NS))
    t_list = ticks.tolist()
    pol._queue_hist.extend(zip(t_list, (queued > 0).tolist(), strict=True))
    pol._recent_need.extend(zip(t_list, needs.tolist(), strict=True))
    pol._last_signal_t = max(pol._last_signal_t, t_last)
    busy = (demand > 0) | (queued > 0)
    if busy.any():
        pol._last_busy_t = max(pol._last_busy_t, float(ticks[np.flatnonzero(busy)[-1]]))
    rows = int(ends[last])
    wait = fine.done_wait_ms[:rows] if len(fine.done_wait_ms) else np.full(rows, np.nan)
    pol._lat.add_ticks(t_list, ends.tolist(), fine.done_t_s[:rows], fine.done_ttft_ms[:rows],
                       fine.done_e2e_ms[:rows], fine.done_weight[:rows], wait)
    pol._trim(t_last)

