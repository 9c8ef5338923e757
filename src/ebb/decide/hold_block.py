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

* **No surge**: no sample queues (a persistent queue needs every recent sample queued); no
  completion's TTFT past the surge limit or the SLO (the window's and the block's), so no late
  requests; no breach joins the long window and its weight was under the threshold.
* **No scale-up**: the need — each sample's, from :meth:`~ebb.decide.need.NeedTracker.ingest_seconds`
  (bit for bit the one-sample path), its max over the sizing window — sized up stays within the
  fleet, or within the hysteresis while no burst is on (the burst timer runs as ``decide`` runs it,
  on the L1 demand: the sketch's value of the one sample in the 1 s window).
* **No scale-down wanted**: the hold floor — a lower bound of the comeback floor after this
  second's record (:class:`~ebb.decide.comeback.FloorAfter`: the level and the rises' quantile
  exactly, the Gumbel tail within 1e-7), the floor the latency surges taught (at the need's mean
  after that record), or the sized need — reaches the fleet; or the last scale-down is too recent
  for another (``decide`` then holds before weighing any veto). Unproven (the block stops) when a
  detected period, or a period search due at that record, could set the floor.
* **State**: every second's need is recorded in the comeback bound, the weight takes its damped
  step toward the base (every completion's TTFT within the SLO, so the P99 too), the latency
  window gets each second's completions and trims (:meth:`~ebb.decide.latency.LatencyWindow.add_ticks`),
  and the L1 window, queue history, recent needs and the newest signal and busy times end as the
  last second leaves them. The need tracker is restored and fed again when the block stops early.

Pure: arrays in, an int out, the policy's own state updated; no I/O. Cost: O(samples × windows)
numpy per block plus ~16 µs of Python per reconcile (the bound's record ~7, its floor bound ~5).
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from ebb.decide.comeback import FloorAfter
from ebb.decide.latency import TTFT
from ebb.decide.policy import _LONG_MIN_WEIGHT, EbbPolicy, served_demand
from ebb.model.observation import FineSignals


__all__ = ["hold_ticks"]

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
    done = np.bincount(np.repeat(np.arange(limit), np.diff(ends, prepend=0)), weights=np.where(np.isnan(w), 0.0, w),
                       minlength=limit).astype(np.float64)
    before = pol._need.snapshot()
    needs, reading = pol._need.ingest_seconds(ticks, demand, queued, done)
    cap = max(ready_replicas, 1) * pol._capacity
    mapping = pol._l1.mapping
    l1 = mapping.bin_values()[mapping.bin_index(demand)[0]]  # the L1 P99: its window holds this sample only
    held = _hold_prefix(pol, ticks, needs, l1, cap, spec)
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
    if len(fine.t_s) != n or not np.array_equal(fine.t_s, ticks) or not bool((np.diff(ticks) >= 1.0).all()):
        return None  # one sample per tick, at it, ticks ≥ 1 s apart: the 1 s L1 window holds that sample only
    if not float(ticks[0]) > pol._need._last_t:
        return None
    rows = len(fine.done_t_s)
    if not (len(fine.done_weight) == len(fine.done_ttft_ms) == len(fine.done_e2e_ms) == rows
            and len(fine.done_wait_ms) in (0, rows)):
        return None
    ends = np.searchsorted(fine.done_t_s, ticks, side="right").astype(np.int64)
    if int(ends[-1]) != rows or not bool((np.diff(ends, prepend=0) <= 2).all()):
        return None
    if rows and not bool(np.isfinite(fine.done_ttft_ms).all()):
        return None
    return ends


def _signal_limit(pol: EbbPolicy, fine: FineSignals, ends: npt.NDArray[np.int64]) -> int:
    """Leading ticks with no queue, completions at every tick and none late or breaching."""
    p = pol.profile
    ttft_cap = min(p.surge_margin * pol.slo_ttft_ms, pol.slo_ttft_ms)
    if pol._lat.peak(TTFT) > ttft_cap or pol._lat.long_breach_weight >= _LONG_MIN_WEIGHT - _LONG_MARGIN:
        return 0
    ok = (np.asarray(fine.queued, dtype=np.float64) <= 0.0) & (np.diff(ends, prepend=0) > 0)
    rows = int(ends[-1])
    if rows:
        bad_row = (fine.done_ttft_ms > ttft_cap) | ~(fine.done_e2e_ms <= pol.slo_e2e_ms)
        if bad_row.any():
            first_bad = int(np.flatnonzero(bad_row)[0])
            ok[int(np.searchsorted(ends, first_bad, side="right")):] = False
    return len(ok) if ok.all() else int(np.argmin(ok))


def _hold_prefix(pol: EbbPolicy, ticks: FloatArray, needs: FloatArray, l1: FloatArray, cap: float,
                 spec: int) -> int:
    """Leading ticks whose sizing neither grows the fleet nor lets it shrink; each one's need is
    recorded in the comeback bound, the burst timer and the weight stepped, as ``decide`` does."""
    p = pol.profile
    over_since = pol._over_since
    burst_at = p.burst_fraction * cap
    sizing = p.sizing_window_s
    recent = list(pol._recent_need)
    weight, base, damping = pol._weight, pol.workload_class.base_weight, 1.0 + pol.workload_class.alpha
    grow_past = spec * (1.0 + p.up_hysteresis)
    size_unit, floor_unit = p.target_util * pol._capacity, p.down_util * pol._capacity  # _replicas' divisors
    ceil = math.ceil
    after = FloorAfter(pol._bound, p.budget)
    settle_s = p.down_interval_horizons * pol._bound.horizon_s  # within it, a wanted scale-down holds
    held = 0
    for t, need_k, d in zip(ticks.tolist(), needs.tolist(), l1.tolist(), strict=True):
        over = (t if over_since is None else over_since) if d >= burst_at else None
        burst = over is not None and (t - over) >= 0.2 or d >= cap
        recent.append((t, need_k))
        while recent and recent[0][0] <= t - sizing:
            del recent[0]
        need = max(v for _, v in recent)
        sized = ceil(need / size_unit - 1e-9)
        need_now = min(pol.max_replicas, max(pol.min_replicas, sized))
        if need_now > spec and (burst or need_now > grow_past):
            break
        v = need_k if need_k > 0.0 else 0.0  # the cycle's peak: max(0.0, need)
        floor = after.bound(v)
        if floor is None:
            break
        if not math.isnan(floor) and t - pol._last_down >= settle_s:
            floor_r = ceil(floor / floor_unit - 1e-9)
            learned = pol._learned_floor_at(t, pol._bound.mean_need_after(v))  # the floor after the record
            if min(pol.max_replicas, max(pol.min_replicas, floor_r, sized, learned)) < spec:
                break
        after.record(v)
        # recalibrate_weight's damped step with the P99 within the SLO: the base weight is the target.
        weight = weight + (base - weight) / damping
        over_since = over
        held += 1
    pol._weight, pol._over_since = weight, over_since
    return held


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

