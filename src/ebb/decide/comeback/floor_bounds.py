"""Lower bounds of the comeback floor ahead of its records: one record at a time, and a block at once.

A block of proven holds (:mod:`ebb.decide.hold_proof`) must show, before recording a run of needs,
that the floor :meth:`~ebb.decide.comeback.bound.ComebackBound.floor` would compute after each record
never lets the fleet shrink. Both bounds here mirror that one rule — its level, the rises' quantile
and the Gumbel tail — and are never above it:

* :func:`floor_below` — the whole block at once from :meth:`ComebackBound.records_ahead`: the level
  exactly; the rises' quantile no lower than the sorted rises' entry as many places down as rises
  were added; the Gumbel tail from shifted running moments, less 1e-7 of its terms;
* :class:`FloorAfter` — record by record, exact but for the tail's 1e-7 margin: the level the record
  computes, the exact quantile of the rises it leaves, the Gumbel tail from Welford-updated moments.
  It takes over from the first record :func:`floor_below` leaves unproven (~2 % of a day's ticks on
  ServeGen counts).

A detected period, or a period search due at a record, lets the phase rise replace the quantile:
:class:`FloorAfter` answers None there and the caller stops (:func:`floor_below` leaves searches to
:meth:`ComebackBound.searches_through`). Pure: no I/O.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from ebb.decide.comeback.bound import ComebackBound, RecordsAhead
from ebb.decide.comeback.streams import GUMBEL_SCALE, gumbel_z, mean_m2

__all__ = ["FloorAfter", "floor_below"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


def floor_below(bound: ComebackBound, ahead: RecordsAhead, budget: float) -> FloatArray:
    """Per record ahead, a value the comeback floor after it is never below (NaN without rises):
    its level exactly, the rises' quantile no lower than the sorted rises' entry as many places down
    as rises were added, the Gumbel tail from shifted running moments less 1e-7 of its terms."""
    n = ahead.rises_after
    m = len(n)
    added = np.searchsorted(ahead.rise_at, np.arange(m), side="right")  # new rises up to each record
    k = np.maximum(np.minimum(n - 1, np.ceil((1.0 - budget) * n).astype(np.int64) - 1), 0)
    below = k - added
    ordered = bound.sorted_rises
    rise = np.array([ordered[j] if j >= 0 else -math.inf for j in below.tolist()], dtype=np.float64) \
        if len(ordered) else np.full(m, -math.inf)
    if bound.tail and 0.0 < budget < 1.0:
        rise = np.maximum(rise, _gumbel_below(bound, ahead, added, n, budget))
    return np.where(n > 0, ahead.levels + np.maximum(rise, 0.0), np.nan)


def _gumbel_below(bound: ComebackBound, ahead: RecordsAhead, added: IntArray, n: IntArray,
                  budget: float) -> FloatArray:
    """The Gumbel tail's rise (``floor``'s ``mean + scale·z·std``) after each record, less a margin."""
    n0 = bound.samples
    mean0, m2_0 = mean_m2(bound.rises()) if n0 else (0.0, 0.0)
    d_new = ahead.rises - mean0
    old = ahead.pushed_out
    d_old = np.where(np.isnan(old), 0.0, old - mean0)
    s1 = np.concatenate(([0.0], np.cumsum(d_new - d_old)))[added]
    s2 = np.concatenate(([m2_0], m2_0 + np.cumsum(d_new * d_new - d_old * d_old)))[added]
    nn = np.maximum(n, 1)
    mean = mean0 + s1 / nn
    std = np.sqrt(np.maximum(s2 / nn - (s1 / nn) ** 2, 0.0))
    tail = GUMBEL_SCALE * gumbel_z(budget) * std
    return np.asarray(mean + tail - 1e-7 * (1.0 + np.abs(mean) + np.abs(tail)), dtype=np.float64)


class FloorAfter:
    """Lower bounds of the comeback floor record by record, for a run of records where no period
    sets the floor (:mod:`ebb.decide.hold_proof` proves holds with them).

    :meth:`bound` answers, for the next record, a value the floor then computed by
    ``floor(budget)`` is never below: the level the record computes (its operations), the exact
    quantile of the rises it leaves (the sorted rises with its added and pushed-out rise), and the
    Gumbel tail from running moments — mean and squared deviations taken exactly at the start and
    updated per rise (Welford's sliding update) — less a margin of 1e-7 of its terms (the moments'
    rounding differs from numpy's pairwise sums by ~1e-13 over a block). :meth:`record` records and
    moves the moments. A detected period, or a period search due at the record, makes the bound
    None: the phase rise could then replace the quantile."""

    __slots__ = ("_b", "_budget", "_gumbel", "_mean", "_m2", "_n", "_pending")

    def __init__(self, bound: ComebackBound, budget: float) -> None:
        self._b, self._budget = bound, budget
        n = bound.samples
        self._n = n
        self._mean, self._m2 = 0.0, 0.0
        if n:
            self._mean, self._m2 = mean_m2(bound.rises())
        self._gumbel = GUMBEL_SCALE * gumbel_z(budget) if bound.tail and 0.0 < budget < 1.0 else None
        self._pending: tuple[float, float | None] | None = None

    def bound(self, need_replicas: float) -> float | None:
        """A lower bound of ``floor(budget).floor_replicas`` right after ``record(need_replicas)``;
        NaN when that floor is NaN (no rise yet); None when a period could set it."""
        b = self._b
        periodic = b.periodic
        if periodic is not None and (b.period_found or (b.index + 1) * b.period_s >= periodic.next_detect_s):
            return None
        level = b.level_after(need_replicas)
        change = self._pending = b.next_rise(need_replicas)
        n = min(b.rises_written + (1 if change is not None else 0), b.ring_capacity)
        if n == 0:
            return math.nan
        k = max(min(n - 1, int(math.ceil((1.0 - self._budget) * n)) - 1), 0)
        rise = _kth_after(b.sorted_rises, k, change)
        if self._gumbel is not None:
            mean, m2 = self._moments(change)
            std = math.sqrt(max(m2, 0.0) / n)
            tail = self._gumbel * std
            rise = max(rise, mean + tail - 1e-7 * (1.0 + abs(mean) + abs(tail)))
        return level + max(rise, 0.0)

    def record(self, need_replicas: float) -> None:
        """Record in the bound (after :meth:`bound` for the same value) and move the moments."""
        change = self._pending if self._pending is not None else self._b.next_rise(need_replicas)
        self._b.record(need_replicas)
        if change is not None:
            self._mean, self._m2 = self._moments(change)
            self._n = self._b.samples
        self._pending = None

    def _moments(self, change: tuple[float, float | None] | None) -> tuple[float, float]:
        """(mean, squared deviations) after ``change`` (a rise added, one maybe pushed out)."""
        mean, m2, n = self._mean, self._m2, self._n
        if change is None:
            return mean, m2
        new, old = change
        if old is None:  # one more rise
            delta = new - mean
            mean2 = mean + delta / (n + 1)
            return mean2, m2 + delta * (new - mean2)
        mean2 = mean + (new - old) / n
        return mean2, m2 + (new - old) * (new - mean2 + old - mean)


def _kth_after(ordered: Sequence[float], k: int, change: tuple[float, float | None] | None) -> float:
    """The ``k``-th smallest of ``ordered`` after ``change`` (a value inserted as ``insort`` does,
    the one pushed out removed first as ``del ordered[bisect_left(...)]`` does), without building it."""
    if change is None:
        return ordered[k]
    new, old = change
    i_old = bisect.bisect_left(ordered, old) if old is not None else len(ordered)

    def without(j: int) -> float:  # ordered with position i_old removed
        return ordered[j] if j < i_old else ordered[j + 1]

    q = bisect.bisect_right(ordered, new)
    p = q - (1 if old is not None and i_old < q else 0)  # where insort puts ``new`` in the rest
    if k < p:
        return without(k)
    if k == p:
        return new
    return without(k - 1)
