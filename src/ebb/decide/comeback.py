"""The scale-down risk bound: remove capacity only if it can come back before demand needs it.

Capacity removed now returns ``horizon_s`` later at the earliest (cold start + one decision
period + the fast path's detection). A scale-down to ``c`` replica units is safe when the risk
that the need (:mod:`ebb.decide.need`) rises above ``c`` within the horizon is below a budget.

The risk is estimated from the workload's own recent history, one need value per second:

* ``level(τ)`` = mean need over the ``level_s`` seconds ending at ``τ`` (the slow level);
* ``rise(τ)`` = max need over ``(τ, τ + horizon]`` − ``level(τ)``, for every second ``τ`` of the
  last ``memory_s`` whose horizon is complete;
* ``risk(c)`` = the share of those rises larger than ``c − level(now)``; the **floor** at budget
  ``β`` is ``level(now) + quantile_{1−β}(rise)``: the least capacity whose estimated risk is ≤ β.


Rises are measured from the level, not in ratio to it, because bursts on real traces arrive from
near-idle levels (73 % of the Azure code trace's seconds are empty): a ratio would shrink the
burst the bound expects exactly when the fleet is smallest. Where the traffic is periodic, a
forecast (:mod:`ebb.decide.forecast`) adds what the history says is coming.

Cost: O(1) amortised per recorded second (a monotonic deque for the window maximum, running sums
for the level) plus one insertion into a sorted copy of the rises (a ``memmove`` of at most
``memory_s`` floats); a floor query reads its quantile from that copy and takes the rises' mean and
standard deviation in one fused pass (numpy's own reductions, so bit for bit ``r.mean()`` and ``r.std()``).
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections import deque
from dataclasses import dataclass

import numpy as np

from ebb.decide.forecast import PeriodicRises

__all__ = ["ComebackBound", "ComebackEstimate", "FloorAfter"]

_EULER = 0.5772156649015329
_GUMBEL_SCALE = math.sqrt(6.0) / math.pi  # Gumbel scale = std × √6 / π


@dataclass(frozen=True)
class ComebackEstimate:
    """What one floor query found (what ``ebb explain`` shows for a scale-down)."""

    horizon_s: float
    """Time for removed capacity to come back (s): cold start + decision period + detection."""
    budget: float
    """The risk the profile accepts (probability)."""
    level_replicas: float
    """Mean need over the last ``level_s`` (replica units)."""
    rise_replicas: float
    """The (1 − budget) quantile of the need's rise over a horizon (replica units)."""
    floor_replicas: float
    """``level + rise``: the least capacity whose estimated risk is within the budget."""
    samples: int
    """Rises the estimate rests on (one per second of history with a complete horizon)."""
    period_s: float = math.nan
    """The period the rises recur with (:mod:`ebb.decide.forecast`); NaN when none is detected."""
    periods: int = 0
    """Past periods the phase rise rests on (0 without a period: the quantile is used)."""


class ComebackBound:
    """Per-second need history and the risk bound over it (see the module docstring)."""

    def __init__(self, horizon_s: float, *, memory_s: float = 3600.0, level_s: float = 60.0,
                 period_s: float = 1.0, tail: bool = True, level_peak: bool = False,
                 periodic: bool = True) -> None:
        if not (horizon_s > 0 and memory_s > horizon_s and level_s > 0 and period_s > 0):
            raise ValueError(f"need 0 < horizon_s < memory_s, level_s > 0, period_s > 0; got horizon_s={horizon_s!r}, "
                             f"memory_s={memory_s!r}, level_s={level_s!r}, period_s={period_s!r}")
        self.horizon_s = float(horizon_s)
        self.tail = tail
        self._period_s = float(period_s)
        self.periodic = PeriodicRises(horizon_s) if periodic else None
        self.level_peak = level_peak
        self._lvl_max: deque[tuple[int, float]] = deque()
        self.memory_s = float(memory_s)
        self._h = max(1, int(math.ceil(horizon_s / period_s)))
        self._lvl_n = max(1, int(round(level_s / period_s)))
        cap = max(1, int(math.ceil(memory_s / period_s)))
        self._rises = np.zeros(cap)
        self._n_rises = 0  # rises written so far (ring position = count % cap)
        # The ring's rises in ascending order: the k-th smallest is one index, not a partition per query.
        self._sorted: list[float] = []
        self._levels: deque[float] = deque()  # level at each recent index, oldest first, aligned with _pending
        self._pending: deque[int] = deque()  # indices whose horizon is not complete yet
        self._maxq: deque[tuple[int, float]] = deque()  # monotonic (index, need) for the window maximum
        self._lvl_win: deque[float] = deque()
        self._mem: deque[float] = deque()  # the needs of the last memory_s, for their mean
        self._mem_sum = 0.0
        self._lvl_sum = 0.0
        self._i = -1
        self.level = 0.0

    @property
    def mean_need(self) -> float:
        """Mean need over the memory (replica units; 0 before the first record)."""
        return max(self._mem_sum / len(self._mem), 0.0) if self._mem else 0.0

    @property
    def samples(self) -> int:
        """Rises with a complete horizon in memory."""
        return min(self._n_rises, len(self._rises))

    def record(self, need_replicas: float) -> None:
        """Append one period's need (replica units; NaN or negative counts as 0)."""
        v = _recorded(need_replicas)
        self._i += 1
        i = self._i
        self._lvl_win.append(v)
        self._lvl_sum += v
        self._mem.append(v)
        self._mem_sum += v
        if len(self._mem) > len(self._rises):
            self._mem_sum -= self._mem.popleft()
        if len(self._lvl_win) > self._lvl_n:
            self._lvl_sum -= self._lvl_win.popleft()
        if self.level_peak:
            self.level = _slide_max(self._lvl_max, i, v, self._lvl_n)
        else:
            self.level = max(self._lvl_sum / len(self._lvl_win), 0.0)
        ahead = _slide_max(self._maxq, i, v, self._h)  # the maximum over the last h values (i-h+1 .. i)
        # The record h periods back now has its whole forward horizon (i-h+1 .. i).
        self._pending.append(i)
        self._levels.append(self.level)
        if len(self._pending) > self._h:
            tau = self._pending.popleft()
            lvl = self._levels.popleft()
            if tau >= self._lvl_n - 1:  # a level over a whole window only: no start-up transient
                rise = ahead - lvl
                slot = self._n_rises % len(self._rises)
                if self._n_rises >= len(self._rises):
                    del self._sorted[bisect.bisect_left(self._sorted, float(self._rises[slot]))]
                bisect.insort(self._sorted, rise)
                self._rises[slot] = rise
                self._n_rises += 1
                if self.periodic is not None:
                    self.periodic.record(tau * self._period_s, rise)

    def recent_peak(self, periods: int) -> float:
        """The largest need of the last ``periods`` records (0 before any)."""
        if not self._mem:
            return 0.0
        return max(itertools.islice(reversed(self._mem), max(periods, 1)))

    def needs(self) -> list[float]:
        """The needs recorded over the memory, oldest first."""
        return list(self._mem)

    def replay(self, needs: list[float]) -> None:
        """Record ``needs`` in order (a bound rebuilt with another horizon takes its predecessor's)."""
        for v in needs:
            self.record(v)

    def rises(self) -> np.ndarray:
        """The rises in memory (replica units), in no particular order."""
        return self._rises[:self.samples]

    def floor(self, budget: float) -> ComebackEstimate:
        """The least capacity (replica units) whose estimated risk is ≤ ``budget``; NaN rise and
        floor before any rise is complete (the caller must not scale down on no evidence)."""
        n = self.samples
        if n == 0:
            return ComebackEstimate(self.horizon_s, budget, self.level, math.nan, math.nan, 0)
        k = min(n - 1, int(math.ceil((1.0 - budget) * n)) - 1)
        rise = self._sorted[max(k, 0)]  # the value np.partition(rises, k)[k] names
        if self.tail and 0.0 < budget < 1.0:
            # Gumbel quantile of the horizon maxima (method of moments): extrapolates past the
            # largest rise seen while the memory holds fewer than 1/budget independent horizons.
            z = -math.log(-math.log1p(-budget)) - _EULER
            mean, std = _mean_std(self._rises[:n])
            rise = max(rise, mean + _GUMBEL_SCALE * z * std)
        period, periods = math.nan, 0
        if self.periodic is not None:
            now = self._i * self._period_s
            if self.periodic.detect(now) is not None:
                phase, periods = self.periodic.phase_rise(now)
                if periods >= self.periodic.min_periods:
                    # Periodic rises: the rise due at this phase of the past periods replaces the
                    # quantile of all phases (which would hold the burst's capacity in between).
                    rise, period = phase, float(self.periodic.period_s or math.nan)
                else:
                    periods = 0
        rise = max(rise, 0.0)
        return ComebackEstimate(self.horizon_s, budget, self.level, rise, self.level + rise, n, period, periods)

    @property
    def period_found(self) -> bool:
        """Whether the last period search found one (the phase rise then sets the floor)."""
        return self.periodic is not None and self.periodic.period_s is not None

    def next_rise(self, need_replicas: float) -> tuple[float, float | None] | None:
        """What ``record(need_replicas)`` would do to the rises, without recording: ``(added,
        overwritten)`` — the rise it completes and the oldest rise it pushes out of a full ring
        (None while the ring has room) — or None when it completes no rise."""
        if not (len(self._pending) + 1 > self._h and self._pending[0] >= self._lvl_n - 1):
            return None
        ahead = _peek_slide_max(self._maxq, self._i + 1, _recorded(need_replicas), self._h)
        full = self._n_rises >= len(self._rises)
        old = float(self._rises[self._n_rises % len(self._rises)]) if full else None
        return ahead - self._levels[0], old

    def mean_need_after(self, need_replicas: float) -> float:
        """:attr:`mean_need` right after ``record(need_replicas)``, without recording (its operations)."""
        return _mean_after(self._mem, self._mem_sum, _recorded(need_replicas), len(self._rises))

    def _level_after(self, v: float, i: int) -> float:
        """The level the record of ``v`` at index ``i`` would compute (the next index)."""
        if self.level_peak:
            return _peek_slide_max(self._lvl_max, i, v, self._lvl_n)
        return _mean_after(self._lvl_win, self._lvl_sum, v, self._lvl_n)

    def risk(self, capacity_replicas: float) -> float:
        """Estimated probability that the need exceeds ``capacity`` within the horizon: the share of
        rises above ``capacity − level``, or the Gumbel tail's when that is larger (NaN without history)."""
        n = self.samples
        if n == 0:
            return math.nan
        r = self._rises[:n]
        x = capacity_replicas - self.level
        share = float(np.count_nonzero(r > x + 1e-9 * max(1.0, abs(x)))) / len(r)  # floor − level round-trips
        if not self.tail:
            return share
        mean, std = _mean_std(r)
        sigma = _GUMBEL_SCALE * std
        if sigma <= 0:
            return share
        mu = mean - _EULER * sigma
        return max(share, -math.expm1(-math.exp(-(x - mu) / sigma)))


class FloorAfter:
    """Lower bounds of the comeback floor record by record, for a run of records where no period
    sets the floor (:mod:`ebb.decide.hold_block` proves holds with them).

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
            self._mean, self._m2 = _mean_m2(bound._rises[:n])
        self._gumbel = (_GUMBEL_SCALE * (-math.log(-math.log1p(-budget)) - _EULER)
                        if bound.tail and 0.0 < budget < 1.0 else None)
        self._pending: tuple[float, float | None] | None = None

    def bound(self, need_replicas: float) -> float | None:
        """A lower bound of ``floor(budget).floor_replicas`` right after ``record(need_replicas)``;
        NaN when that floor is NaN (no rise yet); None when a period could set it."""
        b = self._b
        periodic = b.periodic
        if periodic is not None and (b.period_found or (b._i + 1) * b._period_s >= periodic.next_detect_s):
            return None
        v = _recorded(need_replicas)
        level = b._level_after(v, b._i + 1)
        change = self._pending = b.next_rise(v)
        n = min(b._n_rises + (1 if change is not None else 0), len(b._rises))
        if n == 0:
            return math.nan
        k = max(min(n - 1, int(math.ceil((1.0 - self._budget) * n)) - 1), 0)
        rise = _kth_after(b._sorted, k, change)
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


def _kth_after(ordered: list[float], k: int, change: tuple[float, float | None] | None) -> float:
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


def _slide_max(window: deque[tuple[int, float]], i: int, v: float, n: int) -> float:
    """Push value ``v`` at index ``i`` into a monotonic deque of the last ``n`` values and return
    their maximum: amortised O(1) per value."""
    while window and window[-1][1] <= v:
        window.pop()
    window.append((i, v))
    while window[0][0] <= i - n:
        window.popleft()
    return window[0][1]


def _mean_std(r: np.ndarray) -> tuple[float, float]:
    """``(float(r.mean()), float(r.std()))`` of a non-empty 1-D float64 array, bit for bit, in one
    sum less: numpy's ``_var`` divides the same pairwise sum by ``n`` for the mean, squares the
    deviations and sums them again; this repeats exactly those steps and shares the first sum."""
    mean, m2 = _mean_m2(r)
    return mean, math.sqrt(m2 / len(r))


def _mean_m2(r: np.ndarray) -> tuple[float, float]:
    """The mean and the sum of squared deviations of a non-empty array, by numpy's pairwise sums."""
    mean = np.add.reduce(r) / len(r)
    d = r - mean
    return float(mean), float(np.add.reduce(d * d))


def _recorded(need_replicas: float) -> float:
    """The value :meth:`ComebackBound.record` keeps for a need: NaN or not positive counts as 0."""
    return need_replicas if need_replicas > 0 and math.isfinite(need_replicas) else 0.0


def _peek_slide_max(window: deque[tuple[int, float]], i: int, v: float, n: int) -> float:
    """What :func:`_slide_max` would answer for ``v`` at index ``i``, without pushing it: only the
    front can expire (indices in the window are past ``i − 1 − n``), and the next entry is the
    largest after it."""
    rest = -math.inf
    if window:
        rest = window[0][1] if window[0][0] > i - n else (window[1][1] if len(window) > 1 else -math.inf)
    return v if v >= rest else rest


def _mean_after(window: deque[float], total: float, v: float, cap: int) -> float:
    """The mean a record computes over ``window`` (running sum ``total``) after appending ``v`` and
    dropping the oldest past ``cap`` values: the same additions in the same order."""
    total += v
    n = len(window) + 1
    if n > cap:
        total -= window[0]
        n -= 1
    return max(total / n, 0.0)
