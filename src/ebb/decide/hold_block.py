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
from dataclasses import replace

import numpy as np
import numpy.typing as npt

from ebb.decide.comeback import _EULER, _GUMBEL_SCALE, ComebackBound, FloorAfter, _mean_m2
from ebb.decide.comeback_ahead import RecordsAhead, bin_rises, commit, records_ahead
from ebb.decide.latency import TTFT
from ebb.decide.policy import _LONG_MIN_WEIGHT, EbbPolicy, served_demand
from ebb.decide.semantics import WorkloadSignals, veto
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
    held = _hold_prefix(pol, ticks, needs, l1, cap, spec, ttft_peak)
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


def _hold_prefix(pol: EbbPolicy, ticks: FloatArray, needs: FloatArray, l1: FloatArray, cap: float,
                 spec: int, ttft_peak: FloatArray) -> int:
    """Leading ticks whose sizing neither grows the fleet nor lets it shrink; each one's need is
    recorded in the comeback bound, the burst timer and the weight stepped, as ``decide`` does.
    All at once while a lower bound of the floor proves the holds, then one by one from the first
    tick it does not prove (the exact floor may still)."""
    recent = list(pol._recent_need)
    held, final = _held_at_once(pol, ticks, needs, l1, cap, spec, recent, ttft_peak)
    if final:
        return held
    recent.extend(zip(ticks[:held].tolist(), needs[:held].tolist(), strict=True))
    return held + _held_one_by_one(pol, ticks[held:], needs[held:], l1[held:], cap, spec, recent)


def _held_at_once(pol: EbbPolicy, ticks: FloatArray, needs: FloatArray, l1: FloatArray, cap: float, spec: int,
                  recent: list[tuple[float, float]], ttft_peak: FloatArray) -> tuple[int, bool]:
    """The leading holds that a vectorised lower bound of the floor proves, recorded, and whether the
    block's end or a tick that is no hold (a scale-up, a period that could set the floor) stopped it
    — False when only the bound's slack did (the exact floor decides from there)."""
    p = pol.profile
    m = len(ticks)
    r_t = np.array([t for t, _ in recent], dtype=np.float64)
    r_v = np.array([v for _, v in recent], dtype=np.float64)
    if not (np.isfinite(needs).all() and np.isfinite(r_v).all() and np.isfinite(l1).all()):
        return 0, False
    over_t, hit = _burst_starts(pol._over_since, ticks, l1 >= p.burst_fraction * cap)
    burst = (hit & (ticks - over_t >= 0.2)) | (l1 >= cap)
    sized = np.ceil(_window_need(r_t, r_v, ticks, needs, p.sizing_window_s) / (p.target_util * pol._capacity) - 1e-9)
    need_now = np.minimum(pol.max_replicas, np.maximum(pol.min_replicas, sized))
    stops = (need_now > spec) & (burst | (need_now > spec * (1.0 + p.up_hysteresis)))
    b = pol._bound
    ahead = records_ahead(b, needs)
    floor = _floor_below(b, ahead, p.budget)
    floor_r = np.ceil(floor / (p.down_util * pol._capacity) - 1e-9)
    learned = _learned_below(pol, float(ticks[-1]), ahead.mem_means)
    kept = np.minimum(pol.max_replicas, np.maximum.reduce([np.full(m, float(pol.min_replicas)), floor_r, sized,
                                                           learned]))
    settle_s = p.down_interval_horizons * b.horizon_s
    proven = np.isnan(floor) | (ticks - pol._last_down < settle_s) | (kept >= spec) | \
        _vetoed_as_before(pol, ticks, burst, spec, ttft_peak)
    bad = stops | ~proven | b.period_found
    limit = int(np.argmax(bad)) if bad.any() else m
    held, binned = _through_searches(b, ahead, limit)
    commit(b, ahead, 0, held, binned_until=binned)
    weight, base, damping = pol._weight, pol.workload_class.base_weight, 1.0 + pol.workload_class.alpha
    for _ in range(held):
        weight = weight + (base - weight) / damping  # recalibrate_weight's damped step (P99 within the SLO)
    pol._weight = weight
    if held:
        pol._over_since = float(over_t[held - 1]) if hit[held - 1] else None
    return held, held == m or held < limit or bool(stops[held]) or b.period_found


def _through_searches(b: ComebackBound, ahead: RecordsAhead, limit: int) -> tuple[int, int]:
    """Run each period search due within the first ``limit`` records as the floor query after its
    record would: the rises up to that record into the period bins first (the search reads those
    only). Returns the records proven — ``limit``, or the record whose search found a period, where
    the block stops — and how many records' rises are binned.

    The state is what ``decide`` leaves: at the stopping record its floor query finds the search
    done (``detect`` answers the period found until ``redetect_s`` passed) and binning the same rise
    again changes nothing (it is the newest bin's, which keeps its maximum)."""
    periodic = b.periodic
    binned = held = 0
    while periodic is not None:
        index = ahead.first_index + np.arange(held, limit)
        # floor()'s ``now`` reaches the search's time, and the floor query gets past "no rise yet".
        due = np.flatnonzero((index * b._period_s >= periodic.next_detect_s) & (ahead.rises_after[held:limit] > 0))
        if not len(due):
            break
        j = held + int(due[0])
        bin_rises(b, ahead, binned, j + 1)
        binned = j + 1
        if periodic.detect((ahead.first_index + j) * b._period_s) is not None:
            return j, binned
        held = j + 1
    return limit, binned


def _vetoed_as_before(pol: EbbPolicy, ticks: FloatArray, burst: npt.NDArray[np.bool_], spec: int,
                      ttft_peak: FloatArray) -> npt.NDArray[np.bool_]:
    """Per tick, whether a scale-down wanted there is vetoed with the reasons of the last veto (a
    repeated veto: ``decide`` holds and records nothing, and a hold without one leaves the same
    state). The reasons a block can change are the warm-up, the cooldown and an active burst; the
    rest of ``veto``'s are fixed while samples are fresh (staleness 0) and every TTFT in the window
    is under the class's veto margin (checked per tick on the window's peak, an upper bound of the P99)."""
    m = len(ticks)
    last = pol._last_veto
    cls = pol.workload_class
    if not last or pol._first_t is None:
        return np.zeros(m, dtype=bool)
    p = pol.profile
    calm = WorkloadSignals(workload="serving", class_name=cls.name, replicas=spec, ready_replicas=spec,
                           latency_p99_ms=0.0, latency_p95_ms=math.nan, success_ratio=math.nan, burst_active=False,
                           utilisation_ratio=math.nan, staleness_s=0.0)
    fixed = [veto(cls, calm, pol.max_staleness_s), veto(cls, replace(calm, burst_active=True), pol.max_staleness_s)]
    same = np.zeros(8, dtype=bool)  # by warm-up (1), cooldown (2), burst (4): the key matches the last veto
    for code in range(8):
        key = (("warming up",) if code & 1 else ()) + (("cooldown",) if code & 2 else ()) + \
            tuple(v.split(":")[0] for v in fixed[code >> 2])
        same[code] = bool(key) and key == last
    warm = pol.warmup_s if pol.warmup_s is not None else p.warmup_horizons * pol._bound.horizon_s
    code = (((ticks - pol._first_t) < warm).astype(np.int64) + 2 * ((ticks - pol._last_up) < p.cooldown_horizons *
            pol._bound.horizon_s) + 4 * burst)
    ok = same[code]
    if cls.p99_latency_ms is not None:
        ok &= ttft_peak < cls.veto_margin * cls.p99_latency_ms
    return np.asarray(ok, dtype=bool)


def _burst_starts(over_since: float | None, ticks: FloatArray, hit: npt.NDArray[np.bool_]
                  ) -> tuple[FloatArray, npt.NDArray[np.bool_]]:
    """Per tick, when the L1 demand's current run at or above the burst level began (``decide``'s
    ``_over_since``: kept through the run, cleared below it), and whether it is in one."""
    m = len(ticks)
    before = np.concatenate(([over_since is not None], hit[:-1]))
    started = np.maximum.accumulate(np.where(hit & ~before, np.arange(m), -1))
    carried = over_since if over_since is not None else math.nan
    return np.where(started >= 0, ticks[np.maximum(started, 0)], carried), hit


def _window_need(r_t: FloatArray, r_v: FloatArray, ticks: FloatArray, needs: FloatArray, sizing_s: float) -> FloatArray:
    """Per tick, the largest need of the sizing window ending at it (the recent needs' times after
    ``t − sizing_s``, as the loop's trim keeps them)."""
    all_t = np.concatenate((r_t, ticks))
    all_v = np.concatenate((r_v, needs, [0.0]))
    lo = np.searchsorted(all_t, ticks - sizing_s, side="right")
    bounds = np.empty(2 * len(ticks), dtype=np.int64)
    bounds[0::2] = lo
    bounds[1::2] = len(r_t) + np.arange(1, len(ticks) + 1)
    return np.asarray(np.maximum.reduceat(all_v, bounds)[0::2], dtype=np.float64)


def _floor_below(b: ComebackBound, ahead: RecordsAhead, budget: float) -> FloatArray:
    """Per record ahead, a value the comeback floor after it is never below (NaN without rises):
    its level exactly, the rises' quantile no lower than the sorted rises' entry as many places down
    as rises were added, the Gumbel tail from shifted running moments less 1e-7 of its terms."""
    n = ahead.rises_after
    m = len(n)
    added = np.searchsorted(ahead.rise_at, np.arange(m), side="right")  # new rises up to each record
    k = np.maximum(np.minimum(n - 1, np.ceil((1.0 - budget) * n).astype(np.int64) - 1), 0)
    below = k - added
    ordered = b._sorted
    rise = np.array([ordered[j] if j >= 0 else -math.inf for j in below.tolist()], dtype=np.float64) \
        if len(ordered) else np.full(m, -math.inf)
    if b.tail and 0.0 < budget < 1.0:
        rise = np.maximum(rise, _gumbel_below(b, ahead, added, n, budget))
    return np.where(n > 0, ahead.levels + np.maximum(rise, 0.0), np.nan)


def _gumbel_below(b: ComebackBound, ahead: RecordsAhead, added: npt.NDArray[np.int64], n: npt.NDArray[np.int64],
                  budget: float) -> FloatArray:
    """The Gumbel tail's rise (``floor``'s ``mean + scale·z·std``) after each record, less a margin."""
    n0 = b.samples
    mean0, m2_0 = _mean_m2(b._rises[:n0]) if n0 else (0.0, 0.0)
    d_new = ahead.rises - mean0
    old = ahead.pushed_out
    d_old = np.where(np.isnan(old), 0.0, old - mean0)
    s1 = np.concatenate(([0.0], np.cumsum(d_new - d_old)))[added]
    s2 = np.concatenate(([m2_0], m2_0 + np.cumsum(d_new * d_new - d_old * d_old)))[added]
    nn = np.maximum(n, 1)
    mean = mean0 + s1 / nn
    std = np.sqrt(np.maximum(s2 / nn - (s1 / nn) ** 2, 0.0))
    tail = _GUMBEL_SCALE * (-math.log(-math.log1p(-budget)) - _EULER) * std
    return np.asarray(mean + tail - 1e-7 * (1.0 + np.abs(mean) + np.abs(tail)), dtype=np.float64)


def _learned_below(pol: EbbPolicy, t_last: float, mem_means: FloatArray) -> FloatArray:
    """A lower bound of the learned floor at each record's memory mean: the shortfalls still kept at
    the block's last tick (the fewest) at each mean."""
    cutoff = t_last - pol._bound.memory_s
    ratios = [r for ts, r in pol._shortfalls if not ts < cutoff]
    if not ratios:
        return np.zeros(len(mem_means))
    return np.ceil(max(ratios) * mem_means - 1e-9)


def _held_one_by_one(pol: EbbPolicy, ticks: FloatArray, needs: FloatArray, l1: FloatArray, cap: float, spec: int,
                     recent: list[tuple[float, float]]) -> int:
    """:func:`_hold_prefix`'s proof one tick at a time with the floor's exact lower bound
    (:class:`FloorAfter`); ``recent`` holds the sizing window's needs before the first tick."""
    p = pol.profile
    over_since = pol._over_since
    burst_at = p.burst_fraction * cap
    sizing = p.sizing_window_s
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

