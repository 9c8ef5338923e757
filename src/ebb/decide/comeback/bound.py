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

**Many records at once.** A block of proven holds (:mod:`ebb.decide.hold_block`) records up to a few
hundred needs in a row and wants, before committing any, what each record would leave behind.
:meth:`ComebackBound.records_ahead` computes that with numpy and :meth:`ComebackBound.commit` then
records a run of them, leaving the bound exactly as those :meth:`~ComebackBound.record` calls would
(the block twins sit beside :meth:`~ComebackBound.record`; equality is property-tested):

* running sums (the level's and the memory's) replay ``record``'s additions and removals in its
  order (:func:`~ebb.decide.comeback.streams.window_sums`), so every partial sum is the one it holds;
* window maxima (the horizon ahead, a peak level) are maxima of the same values: exact;
* a rise is ``ahead − level`` of the same two floats;
* the sorted rises take the same ``bisect`` deletions and insertions in the same order, and the
  period bins get, per 10 s bin, the maximum of that bin's rises (``record``'s running maximum of
  the same values; rises are never NaN nor −0.0).

Block cost: O(records × (horizon + level window)) numpy and ~1 µs of Python per completed rise (its
sorted insertion); no deque or ring of the memory is copied (only the records it pushes out are read).
"""

from __future__ import annotations

import bisect
import collections
import itertools
import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ebb.decide.comeback.streams import (
    EULER,
    GUMBEL_SCALE,
    gumbel_z,
    mean_after,
    mean_std,
    peek_slide_max,
    push,
    rebuild_max_deque,
    recorded,
    slide_max,
    tail,
    window_max,
    window_sums,
)
from ebb.decide.forecast import PeriodicRises

__all__ = ["HISTORY_ALPHA", "ComebackBound", "ComebackEstimate", "HistoryBound", "RecordsAhead"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


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


HISTORY_ALPHA = 0.05
"""One minus the confidence of :meth:`ComebackBound.history_bound`'s upper bound (95 %)."""


@dataclass(frozen=True)
class HistoryBound:
    """How much the comeback memory can tell (:meth:`ComebackBound.history_bound`).

    ``N`` independent horizons without a rise past the largest seen bound the chance of one by
    ``1 − 0.05^(1/N)`` at 95 % confidence (Clopper–Pearson with no exceedance; ≈ 3 / N, the rule of
    three): 4.9 % for the hour the default memory holds (59 horizons of 61 s), 0.1 % only after ~3,000
    horizons (51 h). A floor below the largest rise seen rests on a point estimate the history cannot
    bound within a budget smaller than this.
    """

    history_s: float
    """Seconds of history with a complete horizon (the rises' span)."""
    horizons: float
    """Independent horizons in that history (history / horizon)."""
    risk_bound: float
    """Upper 95 % bound on the chance that a horizon's rise exceeds the largest seen (1 without history)."""
    largest_rise_replicas: float
    """The largest rise seen (replica units; NaN without history)."""
    opening_need_replicas: float = 0.0
    """The largest need of the history's first ``level_s`` while it is in memory, else 0 (replica
    units). No rise is measured there (the level before the history is unknown), so a history that
    starts inside a burst shows that burst only here: :meth:`held_replicas` holds it."""

    def held_replicas(self, level_replicas: float) -> float:
        """What this history has shown necessary (replica units): ``level`` + the largest rise seen,
        and no lower than the need at the history's start while that is in memory."""
        return max(level_replicas + self.largest_rise_replicas, self.opening_need_replicas)


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
        self.period_s = float(period_s)
        """Seconds between two records (one decision period)."""
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
        self._opening = 0.0  # the largest need of the first _lvl_n records (see opening_need)
        self._opening_until = cap + self._lvl_n - 1  # the first record index past which none of them is in memory

    # -- what the bound holds -------------------------------------------------------------------
    @property
    def mean_need(self) -> float:
        """Mean need over the memory (replica units; 0 before the first record)."""
        return max(self._mem_sum / len(self._mem), 0.0) if self._mem else 0.0

    @property
    def samples(self) -> int:
        """Rises with a complete horizon in memory."""
        return min(self._n_rises, len(self._rises))

    @property
    def index(self) -> int:
        """The index of the newest record (−1 before the first)."""
        return self._i

    @property
    def rises_written(self) -> int:
        """Rises completed since the start (the ring's write position is this modulo its capacity)."""
        return self._n_rises

    @property
    def ring_capacity(self) -> int:
        """Rises the memory holds at most (one per record of ``memory_s``)."""
        return len(self._rises)

    @property
    def sorted_rises(self) -> Sequence[float]:
        """The rises in memory in ascending order (a read-only view: do not change it)."""
        return self._sorted

    def rises(self) -> np.ndarray:
        """The rises in memory (replica units), in no particular order."""
        return self._rises[:self.samples]

    @property
    def period_found(self) -> bool:
        """Whether the last period search found one (the phase rise then sets the floor)."""
        return self.periodic is not None and self.periodic.period_s is not None

    @property
    def opening_need(self) -> float:
        """The largest need of the first ``level_s`` recorded while any of those records is in memory,
        else 0 (replica units; :attr:`HistoryBound.opening_need_replicas`)."""
        return self._opening if self._i < self._opening_until else 0.0

    def recent_peak(self, periods: int) -> float:
        """The largest need of the last ``periods`` records (0 before any)."""
        if not self._mem:
            return 0.0
        return max(itertools.islice(reversed(self._mem), max(periods, 1)))

    def needs(self) -> list[float]:
        """The needs recorded over the memory, oldest first."""
        return list(self._mem)

    # -- one record -----------------------------------------------------------------------------
    def record(self, need_replicas: float) -> None:
        """Append one period's need (replica units; NaN or negative counts as 0)."""
        v = recorded(need_replicas)
        self._i += 1
        i = self._i
        if i < self._lvl_n:
            self._opening = max(self._opening, v)
        self._lvl_win.append(v)
        self._lvl_sum += v
        self._mem.append(v)
        self._mem_sum += v
        if len(self._mem) > len(self._rises):
            self._mem_sum -= self._mem.popleft()
        if len(self._lvl_win) > self._lvl_n:
            self._lvl_sum -= self._lvl_win.popleft()
        if self.level_peak:
            self.level = slide_max(self._lvl_max, i, v, self._lvl_n)
        else:
            self.level = max(self._lvl_sum / len(self._lvl_win), 0.0)
        ahead = slide_max(self._maxq, i, v, self._h)  # the maximum over the last h values (i-h+1 .. i)
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
                    self.periodic.record(tau * self.period_s, rise)

    def replay(self, needs: list[float]) -> None:
        """Record ``needs`` in order (a bound rebuilt with another horizon takes its predecessor's)."""
        for v in needs:
            self.record(v)

    def next_rise(self, need_replicas: float) -> tuple[float, float | None] | None:
        """What ``record(need_replicas)`` would do to the rises, without recording: ``(added,
        overwritten)`` — the rise it completes and the oldest rise it pushes out of a full ring
        (None while the ring has room) — or None when it completes no rise."""
        if not (len(self._pending) + 1 > self._h and self._pending[0] >= self._lvl_n - 1):
            return None
        ahead = peek_slide_max(self._maxq, self._i + 1, recorded(need_replicas), self._h)
        full = self._n_rises >= len(self._rises)
        old = float(self._rises[self._n_rises % len(self._rises)]) if full else None
        return ahead - self._levels[0], old

    def mean_need_after(self, need_replicas: float) -> float:
        """:attr:`mean_need` right after ``record(need_replicas)``, without recording (its operations)."""
        return mean_after(self._mem, self._mem_sum, recorded(need_replicas), len(self._rises))

    def level_after(self, need_replicas: float) -> float:
        """The level the next ``record(need_replicas)`` would compute, without recording."""
        v, i = recorded(need_replicas), self._i + 1
        if self.level_peak:
            return peek_slide_max(self._lvl_max, i, v, self._lvl_n)
        return mean_after(self._lvl_win, self._lvl_sum, v, self._lvl_n)

    # -- many records at once (beside ``record``) -------------------------------------------------
    def records_ahead(self, needs: FloatArray) -> RecordsAhead:
        """What ``record(v)`` for each of ``needs`` in turn would compute, without recording.
        At most the ring's capacity of records (a longer block would overwrite its own rises)."""
        cap = len(self._rises)
        m = len(needs)
        if m > cap:
            raise ValueError(f"records_ahead: {m} records exceed the ring of {cap}")
        x = np.asarray(needs, dtype=np.float64)
        v = np.where((x > 0.0) & (x < math.inf), x, 0.0)  # NaN fails both: recorded()'s rule
        i0 = self._i + 1
        mem_sums, mem_lens = window_sums(self._mem, self._mem_sum, v, cap)
        mem_means = np.maximum(mem_sums / mem_lens, 0.0)
        lvl_sums, lvl_lens = window_sums(self._lvl_win, self._lvl_sum, v, self._lvl_n)
        history = tail(self._mem, max(self._h, self._lvl_n if self.level_peak else 0) - 1)
        if self.level_peak:
            levels = window_max(history, v, self._lvl_n)
        else:
            levels = np.maximum(lvl_sums / lvl_lens, 0.0)
        ahead = window_max(history, v, self._h)
        # Record j (index i0 + j) completes the horizon of tau = i0 + j − h, whose level is the pending
        # deque's (tau before the block) or one computed above; only a level over a whole window counts.
        # Those records are a suffix of the block (tau grows with j).
        first = min(max(self._h - i0, self._h + self._lvl_n - 1 - i0, 0), m)
        rise_at = np.arange(first, m, dtype=np.int64)
        first_pending = i0 - len(self._levels)  # the pending deque's levels are those of its indices
        all_levels = np.concatenate((np.fromiter(self._levels, dtype=np.float64, count=len(self._levels)), levels))
        rises = ahead[first:] - all_levels[rise_at + (i0 - self._h - first_pending)]
        count = self._n_rises + np.arange(m - first, dtype=np.int64)
        pushed = np.where(count >= cap, self._rises[count % cap], np.nan)
        rises_after = np.minimum(self._n_rises + np.maximum(np.arange(1, m + 1) - first, 0), cap)
        return RecordsAhead(v, levels, lvl_sums, mem_sums, mem_means, rise_at, rises, pushed, rises_after, i0)

    def commit(self, ahead: RecordsAhead, start: int, stop: int, *, binned_until: int = 0) -> None:
        """Record ``ahead``'s values ``start`` … ``stop − 1`` (computed by :meth:`records_ahead` from
        this bound's state, the values before ``start`` committed since and nothing else recorded):
        the state those ``record`` calls leave. The rises of records before ``binned_until`` are
        already in the period bins (:meth:`bin_rises`) and are not binned again."""
        if stop <= start:
            return
        if self._i + 1 != ahead.first_index + start:
            raise ValueError("commit: the bound recorded other values since its records were computed ahead")
        cap = len(self._rises)
        vals = ahead.values[start:stop].tolist()
        last = stop - 1
        opening = ahead.values[start:max(start, min(stop, self._lvl_n - ahead.first_index))]
        if len(opening):
            self._opening = max(self._opening, float(opening.max()))
        push(self._mem, vals, cap)
        self._mem_sum = float(ahead.mem_sums[last])
        push(self._lvl_win, vals, self._lvl_n)
        self._lvl_sum = float(ahead.lvl_sums[last])
        i_last = ahead.first_index + last
        if self.level_peak:
            rebuild_max_deque(self._lvl_max, self._mem, i_last, self._lvl_n)
        rebuild_max_deque(self._maxq, self._mem, i_last, self._h)
        self.level = float(ahead.levels[last])
        # Pending horizons: the last min(index + 1, h) indices and their levels.
        push(self._levels, ahead.levels[start:stop].tolist(), self._h)
        self._pending = deque(range(max(0, i_last - len(self._levels) + 1), i_last + 1))
        lo, hi = np.searchsorted(ahead.rise_at, [start, stop])
        if hi > lo:
            self._ring_rises(ahead.rises[lo:hi], ahead.pushed_out[lo:hi])
        self.bin_rises(ahead, max(start, binned_until), stop)
        self._i = i_last

    def bin_rises(self, ahead: RecordsAhead, start: int, stop: int) -> None:
        """The period bins take the rises that records ``start`` … ``stop − 1`` complete, in order (per
        10 s bin its maximum: what ``record``'s running maximum of the same rises leaves)."""
        periodic = self.periodic
        lo, hi = np.searchsorted(ahead.rise_at, [start, stop])
        if periodic is None or hi <= lo:
            return
        tau_s = ((ahead.rise_at[lo:hi] + (ahead.first_index - self._h)) * self.period_s).tolist()
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

    def searches_through(self, ahead: RecordsAhead, limit: int) -> tuple[int, int]:
        """Run each period search due within the first ``limit`` records ahead as the floor query
        after its record would: the rises up to that record into the period bins first (the search
        reads those only). Returns the records cleared — ``limit``, or the record whose search found
        a period (where a block of holds stops) — and how many records' rises are binned.

        The state is what :meth:`floor` after each record leaves: at the stopping record its query
        finds the search done (``detect`` answers the period found until ``redetect_s`` passed) and
        binning the same rise again changes nothing (it is the newest bin's, which keeps its maximum)."""
        periodic = self.periodic
        binned = held = 0
        while periodic is not None:
            index = ahead.first_index + np.arange(held, limit)
            # floor()'s ``now`` reaches the search's time, and the floor query gets past "no rise yet".
            due = np.flatnonzero((index * self.period_s >= periodic.next_detect_s) & (ahead.rises_after[held:limit] > 0))
            if not len(due):
                break
            j = held + int(due[0])
            self.bin_rises(ahead, binned, j + 1)
            binned = j + 1
            if periodic.detect((ahead.first_index + j) * self.period_s) is not None:
                return j, binned
            held = j + 1
        return limit, binned

    def _ring_rises(self, rises: FloatArray, pushed: FloatArray) -> None:
        """The ring and the sorted rises take ``rises`` (each pushing out its ``pushed`` value, NaN for none)."""
        cap = len(self._rises)
        n0 = self._n_rises
        self._rises[(n0 + np.arange(len(rises))) % cap] = rises
        ordered = self._sorted
        insort, bisect_left = bisect.insort, bisect.bisect_left
        new = rises.tolist()
        for r, old in zip(new, pushed.tolist(), strict=True):
            if old == old:  # not NaN: the ring was full
                del ordered[bisect_left(ordered, old)]
            insort(ordered, r)
        self._n_rises = n0 + len(new)

    # -- queries ----------------------------------------------------------------------------------
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
            z = gumbel_z(budget)
            mean, std = mean_std(self._rises[:n])
            rise = max(rise, mean + GUMBEL_SCALE * z * std)
        period, periods = math.nan, 0
        if self.periodic is not None:
            now = self._i * self.period_s
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

    def history_bound(self) -> HistoryBound:
        """What the history can tell (:class:`HistoryBound`): its independent horizons and the
        one-sided 95 % upper confidence bound on the chance that a horizon's rise exceeds the largest
        one seen."""
        n = self.samples
        horizons = n / self._h
        bound = 1.0 - HISTORY_ALPHA ** (1.0 / horizons) if horizons > 0 else 1.0
        return HistoryBound(horizons * self.horizon_s, horizons, bound, self._sorted[-1] if n else math.nan,
                            self.opening_need)

    def seen_below(self, ahead: RecordsAhead, budget: float) -> FloatArray:
        """:meth:`history_bound`'s floor bounded from below after each record of ``ahead``: where the
        risk bound (for the rises then in memory) exceeds ``budget``, the level then plus the largest
        rise no record of ``ahead`` overwrites (new rises only raise it), and no lower than the opening
        need then; −inf elsewhere. The policy holds no lower than :meth:`HistoryBound.held_replicas`
        while its history cannot bound the risk."""
        horizons = ahead.rises_after.astype(np.float64) / self._h
        with np.errstate(divide="ignore"):
            risk = np.where(horizons > 0, 1.0 - HISTORY_ALPHA ** (1.0 / np.maximum(horizons, 1e-300)), 1.0)
        out = np.full(len(ahead.levels), -np.inf)
        applies = (risk > budget) & (ahead.rises_after > 0)
        if not applies.any():
            return out
        index = ahead.first_index + np.arange(len(ahead.values))
        opening = np.maximum(np.maximum.accumulate(np.where(index < self._lvl_n, ahead.values, 0.0)), self._opening)
        held = np.where(index < self._opening_until, opening, 0.0)
        gone = collections.Counter(v for v in ahead.pushed_out.tolist() if not math.isnan(v))
        for v in reversed(self._sorted):  # the largest rise still in the ring after every overwrite
            if gone[v] > 0:
                gone[v] -= 1
                continue
            held = np.maximum(held, ahead.levels + v)
            break
        return np.where(applies, held, -np.inf)

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
        mean, std = mean_std(r)
        sigma = GUMBEL_SCALE * std
        if sigma <= 0:
            return share
        mu = mean - EULER * sigma
        return max(share, -math.expm1(-math.exp(-(x - mu) / sigma)))
