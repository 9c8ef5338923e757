"""Running window maxima, sums and moments: one value at a time, and many at once, bit for bit.

The comeback bound (:mod:`ebb.decide.comeback.bound`) keeps its windows the way a loop does —
a monotonic deque for a window maximum, a running sum for a window mean, the moments of its rises.
A block of records committed at once must leave the same floats, so each many-at-once helper here
sits beside the one-at-a-time step it mirrors and performs the same operations in the same order:

* :func:`slide_max` / :func:`peek_slide_max` (one value) — :func:`window_max` (maxima of the same
  values: exact) and :func:`rebuild_max_deque` (the deque ``slide_max`` leaves);
* :func:`mean_after` (one value) — :func:`window_sums` (the running sum after each value, through
  :func:`~ebb.decide.running.running_sums`: the loop's additions and removals in its order);
* :func:`mean_m2` (numpy's pairwise sums, as ``r.mean()`` and ``r.std()`` take them).

Pure: no I/O, no clocks.
"""

from __future__ import annotations

import itertools
import math
from collections import deque

import numpy as np
import numpy.typing as npt
from numpy.lib.stride_tricks import as_strided

from ebb.decide.running import running_sums

__all__ = ["EULER", "GUMBEL_SCALE", "gumbel_z", "mean_after", "mean_m2", "mean_std", "peek_slide_max", "push",
           "rebuild_max_deque", "recorded", "slide_max", "tail", "window_max", "window_sums"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

EULER = 0.5772156649015329
GUMBEL_SCALE = math.sqrt(6.0) / math.pi
"""Gumbel scale = std × √6 / π (method of moments)."""


def gumbel_z(budget: float) -> float:
    """The Gumbel quantile ``1 − budget`` in standard units, less the mean's Euler constant: a floor's
    tail rise is ``mean + GUMBEL_SCALE · gumbel_z(budget) · std``."""
    return -math.log(-math.log1p(-budget)) - EULER


def recorded(need_replicas: float) -> float:
    """The value a comeback record keeps for a need: NaN or not positive counts as 0."""
    return need_replicas if need_replicas > 0 and math.isfinite(need_replicas) else 0.0


# -- window maximum: one value, many values ---------------------------------------------------------
def slide_max(window: deque[tuple[int, float]], i: int, v: float, n: int) -> float:
    """Push value ``v`` at index ``i`` into a monotonic deque of the last ``n`` values and return
    their maximum: amortised O(1) per value."""
    while window and window[-1][1] <= v:
        window.pop()
    window.append((i, v))
    while window[0][0] <= i - n:
        window.popleft()
    return window[0][1]


def peek_slide_max(window: deque[tuple[int, float]], i: int, v: float, n: int) -> float:
    """What :func:`slide_max` would answer for ``v`` at index ``i``, without pushing it: only the
    front can expire (indices in the window are past ``i − 1 − n``), and the next entry is the
    largest after it."""
    rest = -math.inf
    if window:
        rest = window[0][1] if window[0][0] > i - n else (window[1][1] if len(window) > 1 else -math.inf)
    return v if v >= rest else rest


def window_max(history: FloatArray, v: FloatArray, n: int) -> FloatArray:
    """Per value of ``v``, the maximum of it and the ``n − 1`` values before it (``history``, oldest
    first, then ``v``; fewer at the very start): what :func:`slide_max` answers value by value."""
    m = len(v)
    if not m:
        return np.zeros(0)
    full = np.concatenate((np.full(n - 1, -math.inf), history[max(len(history) - (n - 1), 0):], v))[-(m + n - 1):]
    return np.asarray(as_strided(full, shape=(m, n), strides=(full.strides[0],) * 2, writeable=False).max(axis=1),
                      dtype=np.float64)


def rebuild_max_deque(window: deque[tuple[int, float]], recent: deque[float], i_last: int, n: int) -> None:
    """The monotonic deque :func:`slide_max` keeps after index ``i_last``: of the last ``n`` values of
    ``recent``, those larger than every later one (a later equal value pops an earlier one), with
    their indices."""
    last = tail(recent, n)
    keep = np.ones(len(last), dtype=bool)
    if len(last) > 1:
        later = np.maximum.accumulate(last[::-1])[::-1]  # later[j] = max(last[j:])
        keep[:-1] = last[:-1] > later[1:]
    first = i_last - len(last) + 1
    window.clear()
    window.extend(zip((first + np.flatnonzero(keep)).tolist(), last[keep].tolist(), strict=True))


# -- window mean: one value, many values ------------------------------------------------------------
def mean_after(window: deque[float], total: float, v: float, cap: int) -> float:
    """The mean a record computes over ``window`` (running sum ``total``) after appending ``v`` and
    dropping the oldest past ``cap`` values: the same additions in the same order."""
    total += v
    n = len(window) + 1
    if n > cap:
        total -= window[0]
        n -= 1
    return max(total / n, 0.0)


def window_sums(window: deque[float], total: float, v: FloatArray, cap: int) -> tuple[FloatArray, IntArray]:
    """A running sum over ``window`` (at most ``cap`` values) after each value of ``v`` — add the
    value, then drop the oldest past ``cap``, as one record at a time does — and the window's lengths."""
    m = len(v)
    n0 = len(window)
    lens = n0 + np.arange(1, m + 1, dtype=np.int64)
    dropped_by = np.maximum(lens - cap, 0)  # the oldest values dropped by the end of each record
    n_drop = int(dropped_by[-1]) if m else 0
    older = np.fromiter(itertools.islice(window, n_drop), dtype=np.float64, count=min(n_drop, n0))
    return running_sums(total, v, np.concatenate((older, v[:n_drop - len(older)])), dropped_by), \
        np.minimum(lens, cap)


def push(window: deque[float], values: list[float], cap: int) -> None:
    """Append ``values`` and drop the oldest past ``cap`` (what records do one at a time)."""
    window.extend(values)
    for _ in range(len(window) - cap):
        window.popleft()


def tail(window: deque[float], n: int) -> FloatArray:
    """The newest ``n`` values of ``window``, oldest first (fewer when it holds fewer)."""
    if n <= 0 or not window:
        return np.zeros(0)
    k = min(n, len(window))
    return np.fromiter(itertools.islice(reversed(window), k), dtype=np.float64, count=k)[::-1]


# -- moments ----------------------------------------------------------------------------------------
def mean_std(r: npt.NDArray[np.float64]) -> tuple[float, float]:
    """``(float(r.mean()), float(r.std()))`` of a non-empty 1-D float64 array, bit for bit, in one
    sum less: numpy's ``_var`` divides the same pairwise sum by ``n`` for the mean, squares the
    deviations and sums them again; this repeats exactly those steps and shares the first sum."""
    mean, m2 = mean_m2(r)
    return mean, math.sqrt(m2 / len(r))


def mean_m2(r: npt.NDArray[np.float64]) -> tuple[float, float]:
    """The mean and the sum of squared deviations of a non-empty array, by numpy's pairwise sums."""
    mean = np.add.reduce(r) / len(r)
    d = r - mean
    return float(mean), float(np.add.reduce(d * d))
