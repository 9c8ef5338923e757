"""The hold proof over a block's reconciles: how many leading ones are plain holds, proven.

:func:`held_prefix` is :mod:`ebb.decide.hold_block`'s core. Given a block's per-second needs (from
:meth:`~ebb.decide.need.NeedTracker.ingest_seconds`) and L1 demand, it answers how many leading
reconciles ``decide`` would answer with a plain hold (nothing recorded), and leaves the comeback
bound, the weight and the burst timer as those ``decide`` calls would. Two passes:

* **At once** (numpy over the block): the burst timer's runs, the sizing window's maxima, the
  scale-up test, the comeback records computed ahead (:mod:`ebb.decide.comeback_ahead`) and a lower
  bound of the floor after each (its level exact; the rises' quantile no lower than the sorted
  rises' entry as many places down as rises were added; the Gumbel tail from shifted running
  moments less 1e-7), the learned floor at the fewest shortfalls of the block, and — where a
  scale-down would be wanted — a repeated veto (the warm-up, cooldown and burst reasons of the
  last veto, latency under the class's veto margin). A period search due inside the block runs
  as the floor query after its record would; one that finds a period stops the block there.
* **One by one** from the first tick the bound leaves unproven, with the exact floor bound
  (:class:`~ebb.decide.comeback.FloorAfter`) — the bound's slack, not a hold's failure, stopped it.

Pure: arrays in, an int out, the policy's state updated; no I/O. Cost: ~30 numpy calls per block
plus ~1 µs of Python per new rise (its sorted insertion); the one-by-one pass ~16 µs a tick, run
on ~2 % of a day's ticks (ServeGen counts).
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import numpy.typing as npt

from ebb.decide.comeback import _EULER, _GUMBEL_SCALE, ComebackBound, FloorAfter, _mean_m2
from ebb.decide.comeback_ahead import RecordsAhead, bin_rises, commit, records_ahead
from ebb.decide.policy import EbbPolicy
from ebb.decide.semantics import WorkloadSignals, veto

__all__ = ["held_prefix"]

FloatArray = npt.NDArray[np.float64]


def held_prefix(pol: EbbPolicy, ticks: FloatArray, needs: FloatArray, l1: FloatArray, cap: float,
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
    """:func:`held_prefix`'s proof one tick at a time with the floor's exact lower bound
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
