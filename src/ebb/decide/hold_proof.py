"""The hold proof over a block's reconciles: how many leading ones are plain holds, proven.

:func:`held_prefix` is :mod:`ebb.decide.hold_block`'s core. Given a block's per-tick cycle peaks and sizing
windows (from :meth:`~ebb.decide.need.NeedTracker.ingest_seconds` in the fluid engine, one sample a
tick; from a request stretch's plan, :mod:`ebb.decide.stretch_holds`) and L1 demand, it answers how many leading
reconciles ``decide`` would answer with a plain hold (nothing recorded), and leaves the comeback
bound, the weight and the burst timer as those ``decide`` calls would. Every test it makes is the
block twin of a rule ``decide`` applies (:mod:`ebb.decide.ebb_rules`, :mod:`ebb.decide.ebb_state`,
:mod:`ebb.decide.comeback`). Two passes:

* **At once** (numpy over the block): the burst timer's runs, the sizing window's maxima, the
  scale-up test, the comeback records computed ahead
  (:meth:`~ebb.decide.comeback.ComebackBound.records_ahead`) and a lower bound of the floor after
  each (:func:`~ebb.decide.comeback.floor_below`), the learned floor at the fewest shortfalls of the
  block, and — where a scale-down would be wanted — a repeated veto
  (:func:`~ebb.decide.ebb_rules.repeats_last_veto`). A period search due inside the block runs
  as the floor query after its record would; one that finds a period stops the block there.
* **One by one** from the first tick the bound leaves unproven, with the exact floor bound
  (:class:`~ebb.decide.comeback.FloorAfter`) — the bound's slack, not a hold's failure, stopped it.

Pure: arrays in, an int out, the policy's state updated; no I/O. Cost: ~30 numpy calls per block
plus ~1 µs of Python per new rise (its sorted insertion); the one-by-one pass ~16 µs a tick, run
on ~2 % of a day's ticks (ServeGen counts).
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from ebb.decide.comeback import FloorAfter, floor_below
from ebb.decide.ebb_rules import (
    EbbConfig,
    bounded,
    bounded_many,
    down_interval_s,
    grows,
    grows_many,
    hold_floor,
    hold_floors,
    repeats_last_veto,
)
from ebb.decide.ebb_state import burst_after
from ebb.decide.semantics import calm_weight

__all__ = ["held_prefix"]

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]


def held_prefix(pol: EbbConfig, ticks: FloatArray, peaks: FloatArray, window: FloatArray, l1: FloatArray,
                cap: float, spec: int, ttft_peak: FloatArray, calm: BoolArray | None = None) -> int:
    """Leading ticks whose sizing neither grows the fleet nor lets it shrink; each one's cycle peak
    (``peaks[k]``, the largest need since the previous tick) is recorded in the comeback bound, the
    burst timer and the weight stepped, as ``decide`` does. ``window[k]`` is the sizing window's
    need at tick ``k`` (:meth:`~ebb.decide.ebb_state.EbbState.window_needs_at`), ``l1[k]`` its L1 P99,
    ``ttft_peak[k]`` an upper bound of its TTFT P99 (NaN where the P99 is unknown, -inf where it
    reads 0); ``calm[k]`` whether ``decide`` steps the weight there (a TTFT P99 within the SLO: all
    ticks when None — an unknown P99 keeps the weight). All at once while a lower bound of the floor
    proves the holds, then one by one from the first tick it does not prove (the exact floor may still)."""
    steps = np.ones(len(ticks), dtype=bool) if calm is None else calm
    held, final = _held_at_once(pol, ticks, peaks, window, l1, cap, spec, ttft_peak)
    if not final:
        held += _held_one_by_one(pol, ticks[held:], peaks[held:], window[held:], l1[held:], cap, spec)
    # every TTFT within the SLO where the P99 is known: so the P99 (calm_window)
    pol.state.weight = calm_weight(pol.workload_class, pol.state.weight, int(np.count_nonzero(steps[:held])))
    return held


def _held_at_once(pol: EbbConfig, ticks: FloatArray, peaks: FloatArray, window: FloatArray, l1: FloatArray,
                  cap: float, spec: int, ttft_peak: FloatArray) -> tuple[int, bool]:
    """The leading holds that a vectorised lower bound of the floor proves, recorded, and whether the
    block's end or a tick that is no hold (a scale-up, a period that could set the floor) stopped it
    — False when only the bound's slack did (the exact floor decides from there)."""
    p, st = pol.profile, pol.state
    m = len(ticks)
    if not (np.isfinite(peaks).all() and np.isfinite(window).all() and np.isfinite(l1).all()):
        return 0, False
    over_t, hit, burst = st.burst_runs(ticks, l1, p.burst_fraction * cap, cap)
    sized = st.replicas_of(window, p.target_util)
    stops = grows_many(pol, bounded_many(pol, sized), spec, burst)
    b = st.bound
    ahead = b.records_ahead(peaks)
    floor = floor_below(b, ahead, p.budget)
    # NaN stays NaN: no rise, no floor. The history's floor at its own utilisation (EbbState.history_util).
    held_at = np.maximum(st.replicas_of(floor, p.down_util),
                         st.replicas_of(b.seen_below(ahead, p.budget), st.history_util(p)))
    kept = hold_floors(pol, held_at, st.learned_floor_below(float(ticks[-1]), ahead.mem_means), sized)
    proven = np.isnan(floor) | (ticks - st.last_down < down_interval_s(pol)) | (kept >= spec) | \
        repeats_last_veto(pol, ticks, burst, spec, ttft_peak)
    bad = stops | ~proven | b.period_found | st.bursts.over(ahead.values, ahead.mem_means)
    limit = int(np.argmax(bad)) if bad.any() else m
    held, binned = b.searches_through(ahead, limit)
    b.commit(ahead, 0, held, binned_until=binned)
    if held:
        st.set_burst_timer(over_t, hit, held - 1)
    return held, held == m or held < limit or bool(stops[held]) or b.period_found


def _held_one_by_one(pol: EbbConfig, ticks: FloatArray, peaks: FloatArray, window: FloatArray, l1: FloatArray,
                     cap: float, spec: int) -> int:
    """:func:`held_prefix`'s proof one tick at a time with the floor's exact lower bound
    (:class:`~ebb.decide.comeback.FloorAfter`)."""
    p, st = pol.profile, pol.state
    over_since = st.over_since
    burst_at = p.burst_fraction * cap
    after = FloorAfter(st.bound, p.budget)
    settle_s = down_interval_s(pol)  # within it, a wanted scale-down holds
    held = 0
    for t, peak_k, window_k, d in zip(ticks.tolist(), peaks.tolist(), window.tolist(), l1.tolist(), strict=True):
        over, burst = burst_after(over_since, t, d, burst_at, cap)
        sized = st.replicas(window_k, p.target_util)
        if grows(pol, bounded(pol, sized), spec, burst):
            break
        v = peak_k if peak_k > 0.0 else 0.0  # the cycle's peak: max(0.0, need)
        if st.bursts.over(np.array([v]), np.array([st.bound.mean_need_after(v)]))[0]:
            break  # the burst memory learns from decide only
        floor = after.bound(v)
        if floor is None:
            break
        if not math.isnan(floor) and t - st.last_down >= settle_s:
            learned = st.learned_floor_at(t, st.bound.mean_need_after(v))  # the floor after the record
            if hold_floor(pol, st.replicas(floor, p.down_util), learned, sized) < spec:
                break
        after.record(v)
        over_since = over
        held += 1
    st.over_since = over_since
    return held
