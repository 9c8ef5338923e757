"""Many comeback records at once: what they would compute, then the records themselves, bit for bit.

:class:`~ebb.decide.comeback.ComebackBound` records one need a second, in Python (~7 µs each with
its deques, sorted rises and period bins). A block of proven holds (:mod:`ebb.decide.hold_block`)
records up to a few hundred needs in a row and wants, before committing any, what each record would
leave behind: the level, the memory's mean, the rise it completes and the one it pushes out of the
ring. :func:`records_ahead` computes all of those with numpy, and :func:`commit` then records a
run of them, leaving the bound exactly as those :meth:`~ComebackBound.record` calls would.

Exactness, value by value:

* running sums (the level's and the memory's) replay ``record``'s additions and removals in its
  order (:func:`~ebb.decide.running.running_sums`), so every partial sum is the one it holds;
* window maxima (the horizon ahead, a peak level) are maxima of the same values: exact;
* a rise is ``ahead − level`` of the same two floats;
* the sorted rises take the same ``bisect`` deletions and insertions in the same order, and the
  period bins get, per 10 s bin, the maximum of that bin's rises (``record``'s running maximum of
  the same values; rises are never NaN nor −0.0).

Cost: O(records × (horizon + level window)) numpy per block and ~1 µs of Python per completed rise
(its sorted insertion); no deque or ring of the memory is copied (only the records it pushes out
are read). Pure: no I/O.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections import deque
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from numpy.lib.stride_tricks import as_strided

from ebb.decide.comeback import ComebackBound
from ebb.decide.running import running_sums

__all__ = ["RecordsAhead", "bin_rises", "commit", "records_ahead"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class RecordsAhead:
    """What recording ``values`` one after another would compute (index ``j``: after record ``j``)."""

    values: FloatArray
    """The values kept (NaN or not positive as 0.0, as ``record`` keeps them)."""
    levels: FloatArray
    """The bound's level after each record."""
    lvl_sums: FloatArray
    """The level window's running sum after each record."""
    mem_sums: FloatArray
    """The memory's running sum after each record."""
    mem_means: FloatArray
    """:attr:`ComebackBound.mean_need` after each record."""
    rise_at: IntArray
    """The record (index into ``values``) that completes each new rise, ascending."""
    rises: FloatArray
    """The new rises, in order."""
    pushed_out: FloatArray
    """The ring value each new rise overwrites (NaN while the ring has room)."""
    rises_after: IntArray
    """Rises in memory after each record (``samples``)."""
    first_index: int
    """The bound's record index of ``values[0]``."""


def records_ahead(bound: ComebackBound, needs: FloatArray) -> RecordsAhead:
    """What ``bound.record(v)`` for each of ``needs`` in turn would compute, without recording.
    At most the ring's capacity of records (a longer block would overwrite its own rises)."""
    b = bound
    cap = len(b._rises)
    m = len(needs)
    if m > cap:
        raise ValueError(f"records_ahead: {m} records exceed the ring of {cap}")
    x = np.asarray(needs, dtype=np.float64)
    v = np.where((x > 0.0) & (x < math.inf), x, 0.0)  # NaN fails both
    i0 = b._i + 1
    mem_sums, mem_lens = _running_sums(b._mem, b._mem_sum, v, cap)
    mem_means = np.maximum(mem_sums / mem_lens, 0.0)
    lvl_sums, lvl_lens = _running_sums(b._lvl_win, b._lvl_sum, v, b._lvl_n)
    history = _tail(b._mem, max(b._h, b._lvl_n if b.level_peak else 0) - 1)
    if b.level_peak:
        levels = _window_max(history, v, b._lvl_n)
    else:
        levels = np.maximum(lvl_sums / lvl_lens, 0.0)
    ahead = _window_max(history, v, b._h)
    # Record j (index i0 + j) completes the horizon of tau = i0 + j − h, whose level is the pending
    # deque's (tau before the block) or one computed above; only a level over a whole window counts.
    # Those records are a suffix of the block (tau grows with j).
    first = min(max(b._h - i0, b._h + b._lvl_n - 1 - i0, 0), m)
    rise_at = np.arange(first, m, dtype=np.int64)
    first_pending = i0 - len(b._levels)  # the pending deque's levels are those of its indices
    all_levels = np.concatenate((np.fromiter(b._levels, dtype=np.float64, count=len(b._levels)), levels))
    rises = ahead[first:] - all_levels[rise_at + (i0 - b._h - first_pending)]
    count = b._n_rises + np.arange(m - first, dtype=np.int64)
    pushed = np.where(count >= cap, b._rises[count % cap], np.nan)
    rises_after = np.minimum(b._n_rises + np.maximum(np.arange(1, m + 1) - first, 0), cap)
    return RecordsAhead(v, levels, lvl_sums, mem_sums, mem_means, rise_at, rises, pushed,
                        rises_after, i0)


def commit(bound: ComebackBound, ahead: RecordsAhead, start: int, stop: int, *, binned_until: int = 0) -> None:
    """Record ``ahead``'s values ``start`` … ``stop − 1`` in ``bound`` (built by :func:`records_ahead`
    from this bound's state, the values before ``start`` committed since and nothing else recorded):
    the state those ``record`` calls leave. The rises of records before ``binned_until`` are
    already in the period bins (:func:`bin_rises`) and are not binned again."""
    b = bound
    if stop <= start:
        return
    if b._i + 1 != ahead.first_index + start:
        raise ValueError("commit: the bound recorded other values since its records were computed ahead")
    cap = len(b._rises)
    vals = ahead.values[start:stop].tolist()
    last = stop - 1
    _push(b._mem, vals, cap)
    b._mem_sum = float(ahead.mem_sums[last])
    _push(b._lvl_win, vals, b._lvl_n)
    b._lvl_sum = float(ahead.lvl_sums[last])
    i_last = ahead.first_index + last
    if b.level_peak:
        _rebuild_max_deque(b._lvl_max, b._mem, i_last, b._lvl_n)
    _rebuild_max_deque(b._maxq, b._mem, i_last, b._h)
    b.level = float(ahead.levels[last])
    # Pending horizons: the last min(index + 1, h) indices and their levels.
    _push(b._levels, ahead.levels[start:stop].tolist(), b._h)
    b._pending = deque(range(max(0, i_last - len(b._levels) + 1), i_last + 1))
    lo, hi = np.searchsorted(ahead.rise_at, [start, stop])
    if hi > lo:
        _ring_rises(b, ahead.rises[lo:hi], ahead.pushed_out[lo:hi])
    bin_rises(b, ahead, max(start, binned_until), stop)
    b._i = i_last


def bin_rises(bound: ComebackBound, ahead: RecordsAhead, start: int, stop: int) -> None:
    """The period bins take the rises that records ``start`` … ``stop − 1`` complete, in order (per
    10 s bin its maximum: what ``record``'s running maximum of the same rises leaves)."""
    periodic = bound.periodic
    lo, hi = np.searchsorted(ahead.rise_at, [start, stop])
    if periodic is None or hi <= lo:
        return
    tau_s = ((ahead.rise_at[lo:hi] + (ahead.first_index - bound._h)) * bound._period_s).tolist()
    rises = ahead.rises[lo:hi].tolist()
    bin_s = periodic.bin_s
    k = 0
    while k < len(tau_s):
        b = math.floor(tau_s[k] / bin_s)
        e = k + 1
        while e < len(tau_s) and math.floor(tau_s[e] / bin_s) == b:
            e += 1
        periodic.record(tau_s[k], max(rises[k:e]))
        k = e


def _ring_rises(b: ComebackBound, rises: FloatArray, pushed: FloatArray) -> None:
    """The ring and the sorted rises take ``rises`` (each pushing out its ``pushed`` value, NaN for none)."""
    cap = len(b._rises)
    n0 = b._n_rises
    b._rises[(n0 + np.arange(len(rises))) % cap] = rises
    ordered = b._sorted
    insort, bisect_left = bisect.insort, bisect.bisect_left
    new = rises.tolist()
    for r, old in zip(new, pushed.tolist(), strict=True):
        if old == old:  # not NaN: the ring was full
            del ordered[bisect_left(ordered, old)]
        insort(ordered, r)
    b._n_rises = n0 + len(new)


def _running_sums(window: deque[float], total: float, v: FloatArray, cap: int) -> tuple[FloatArray, IntArray]:
    """A running sum over ``window`` (at most ``cap`` values) after each value of ``v`` — add the
    value, then drop the oldest past ``cap``, as ``record`` does — and the window's lengths."""
    m = len(v)
    n0 = len(window)
    lens = n0 + np.arange(1, m + 1, dtype=np.int64)
    dropped_by = np.maximum(lens - cap, 0)  # the oldest values dropped by the end of each record
    n_drop = int(dropped_by[-1]) if m else 0
    older = np.fromiter(itertools.islice(window, n_drop), dtype=np.float64, count=min(n_drop, n0))
    return running_sums(total, v, np.concatenate((older, v[:n_drop - len(older)])), dropped_by), \
        np.minimum(lens, cap)


def _tail(window: deque[float], n: int) -> FloatArray:
    """The newest ``n`` values of ``window``, oldest first (fewer when it holds fewer)."""
    if n <= 0 or not window:
        return np.zeros(0)
    k = min(n, len(window))
    return np.fromiter(itertools.islice(reversed(window), k), dtype=np.float64, count=k)[::-1]


def _window_max(history: FloatArray, v: FloatArray, n: int) -> FloatArray:
    """Per value of ``v``, the maximum of it and the ``n − 1`` values before it (``history``, oldest
    first, then ``v``; fewer at the very start)."""
    m = len(v)
    if not m:
        return np.zeros(0)
    full = np.concatenate((np.full(n - 1, -math.inf), history[max(len(history) - (n - 1), 0):], v))[-(m + n - 1):]
    return np.asarray(as_strided(full, shape=(m, n), strides=(full.strides[0],) * 2, writeable=False).max(axis=1),
                      dtype=np.float64)


def _push(window: deque[float], values: list[float], cap: int) -> None:
    """Append ``values`` and drop the oldest past ``cap`` (what ``record`` does one at a time)."""
    window.extend(values)
    for _ in range(len(window) - cap):
        window.popleft()


def _rebuild_max_deque(window: deque[tuple[int, float]], recent: deque[float], i_last: int, n: int) -> None:
    """The monotonic deque ``_slide_max`` keeps after index ``i_last``: of the last ``n`` values, those
    larger than every later one (a later equal value pops an earlier one), with their indices."""
    tail = _tail(recent, n)
    keep = np.ones(len(tail), dtype=bool)
    if len(tail) > 1:
        later = np.maximum.accumulate(tail[::-1])[::-1]  # later[j] = max(tail[j:])
        keep[:-1] = tail[:-1] > later[1:]
    first = i_last - len(tail) + 1
    window.clear()
    window.extend(zip((first + np.flatnonzero(keep)).tolist(), tail[keep].tolist(), strict=True))
