"""L1 latency window: the completions of the last ``window_s`` seconds as columns, for P99s and lateness.

Completions arrive with every fine-signal batch (finish time, TTFT, end-to-end latency, a weight,
and the wait before the request's own prefill — NaN where the source cannot tell, and a row may
describe TTFT or end-to-end only, as an agent's sketches do). The window keeps them as numpy
columns: appending a batch and dropping what aged out cost O(batch + window) array copies, a
weighted quantile one sort of the window — never a Python loop per request (270 completions a
second on the Azure conversation trace).

Storage is a buffer with spare room at its end and a start index: a batch is written in place
(amortised O(batch); the buffer is compacted or doubled when full), and while finish times arrive in
order — the simulator's, an agent's sketches — forgetting aged rows moves the start index past a
prefix (one bisection) instead of copying the window through a mask. Rows out of order fall back
to the mask, which keeps the same rows in the same order.
"""

from __future__ import annotations

import itertools
import math
from collections import deque

import numpy as np
import numpy.typing as npt

from ebb.decide.running import running_sums

__all__ = ["LatencyWindow", "TTFT", "E2E", "WAIT"]

FloatArray = npt.NDArray[np.float64]

TTFT, E2E, WAIT = 0, 1, 2
"""Latency columns (milliseconds)."""
_FIRST_ROOM = 64


class LatencyWindow:
    """Weighted completions over the last ``window_s`` seconds."""

    def __init__(self, window_s: float, *, slo_ms: float = float("inf"), slo_e2e_ms: float = float("inf"),
                 long_window_s: float = 600.0) -> None:
        if not (window_s > 0 and long_window_s > 0 and slo_ms > 0):
            raise ValueError(f"window_s, long_window_s and slo_ms must be > 0, got {window_s!r}, "
                             f"{long_window_s!r}, {slo_ms!r}")
        self.window_s = float(window_s)
        self.slo_ms = float(slo_ms)
        self.slo_e2e_ms = float(slo_e2e_ms)
        self.long_window_s = float(long_window_s)
        # Per batch over the long window: (newest finish, TTFT rows' weight, attributable breaches' weight).
        self._long: deque[tuple[float, float, float]] = deque()
        self._long_rows = 0.0
        self._long_bad = 0.0

        # Rows [_lo, _hi) of the buffers are the window; _in_order: their finish times never decrease.
        self._tb = np.zeros(_FIRST_ROOM)
        self._wb = np.zeros(_FIRST_ROOM)
        self._msb = np.zeros((3, _FIRST_ROOM))
        self._lo = self._hi = 0
        self._in_order = True

    @property
    def _t(self) -> FloatArray:
        return self._tb[self._lo:self._hi]

    @property
    def _w(self) -> FloatArray:
        return self._wb[self._lo:self._hi]

    @property
    def _ms(self) -> FloatArray:
        return self._msb[:, self._lo:self._hi]

    def __len__(self) -> int:
        return self._hi - self._lo

    def _room(self, n: int) -> None:
        """Make room for ``n`` more rows at the end: compact to the front, doubling when half full."""
        if self._hi + n <= len(self._tb):
            return
        live = self._hi - self._lo
        size = len(self._tb)
        while live + n > size // 2:
            size *= 2
        tb, wb, msb = np.zeros(size), np.zeros(size), np.zeros((3, size))
        tb[:live], wb[:live], msb[:, :live] = self._t, self._w, self._ms
        self._tb, self._wb, self._msb, self._lo, self._hi = tb, wb, msb, 0, live

    def add(self, t_s: FloatArray, ttft_ms: FloatArray, e2e_ms: FloatArray, weight: FloatArray,
            wait_ms: FloatArray | None = None) -> None:
        """Append a batch (equal lengths; ``wait_ms`` of another length counts as unknown)."""
        n = len(t_s)
        if n == 0:
            return
        self._count(*self._append(t_s, ttft_ms, e2e_ms, weight, wait_ms))

    def add_ticks(self, ticks_s: list[float], ends: list[int], t_s: FloatArray, ttft_ms: FloatArray,
                  e2e_ms: FloatArray, weight: FloatArray, wait_ms: FloatArray) -> None:
        """What ``add(rows of tick k)`` then ``trim(ticks_s[k])`` for each tick in order leave, for
        rows ``ends[k-1]:ends[k]`` of tick ``k`` (``ends`` cumulative, one per tick): the same rows
        in the same order, and the long window's batches counted and forgotten tick by tick (their
        running sums in the same float order). Rows go into the buffer at once."""
        t_new, block, w = self._append(t_s, ttft_ms, e2e_ms, weight, wait_ms)
        if not self._count_ticks(ticks_s, ends, t_new, block, w):
            lo = 0
            for tick, hi in zip(ticks_s, ends, strict=True):
                if hi > lo:
                    self._count(t_new[lo:hi], block[:, lo:hi], w[lo:hi])
                self._forget_long(tick)
                lo = hi
        if ticks_s:
            self.trim(ticks_s[-1])

    def _count_ticks(self, ticks_s: list[float], ends: list[int], t_new: FloatArray, block: FloatArray,
                     w: FloatArray) -> bool:
        """:meth:`add_ticks`' counting, vectorised, for ticks of one or two rows with the long
        window's batches and the new rows' times in order (the fluid engine's); False, counting
        nothing, otherwise. Per tick the sums :func:`_counts_of_two` makes, then the batches kept,
        their running sums (:func:`~ebb.decide.running.running_sums`: the loop's float order) and the
        ones each tick forgets."""
        n = len(ticks_s)
        e = np.asarray(ends, dtype=np.int64)
        per = e - np.concatenate(([0], e[:-1]))
        if n == 0 or not bool((per <= 2).all()):
            return False
        cut = np.asarray(ticks_s, dtype=np.float64) - self.long_window_s
        # Only the old batches that the last tick's cut could forget are read (the rest stay put).
        old_list = list(itertools.takewhile(lambda b: b[0] < cut[-1], self._long))
        old = np.array(old_list, dtype=np.float64).reshape(len(old_list), 3)
        all_old = len(old_list) == len(self._long)
        first = np.concatenate(([0], e[:-1]))
        two = per == 2
        a, b = np.minimum(first, max(len(t_new) - 1, 0)), np.minimum(first + 1, max(len(t_new) - 1, 0))
        ttft, e2e, wait = block[TTFT], block[E2E], block[WAIT]
        own = np.where(np.isnan(wait), 0.0, ttft - wait)
        late = ((ttft > self.slo_ms) & (own <= self.slo_ms)) | ((e2e > self.slo_e2e_ms) & ~(ttft > self.slo_ms))
        has = ~np.isnan(ttft)
        if len(t_new):
            total = np.where((per >= 1) & has[a], 0.0 + w[a], 0.0)
            total = np.where(two & has[b], total + w[b], total)
            bad = np.where((per >= 1) & late[a], 0.0 + w[a], 0.0)
            bad = np.where(two & late[b], bad + w[b], bad)
            ta, tb = t_new[a], t_new[b]
            newest = np.where(two, np.where(np.isnan(ta) | np.isnan(tb), np.nan, np.where(tb > ta, tb, ta)), ta)
        else:
            total = bad = newest = np.zeros(n)
        kept = (per > 0) & ((bad > 0) | (total > 0))
        # A batch past the read ones is at or after every cut: nothing after it is forgotten.
        times = np.concatenate((old[:, 0], newest[kept] if all_old else [math.inf]))
        if np.isnan(times).any() or not bool((times[1:] >= times[:-1]).all()):
            return False  # forgetting is a prefix only when the batches are in time order
        # By tick k: the batches that exist (old + kept so far), those older than its cut forgotten.
        exist = len(old) + (np.cumsum(kept) if all_old else 0)
        gone = np.maximum.accumulate(np.minimum(np.searchsorted(times, cut, side="left"), exist))
        batches = np.concatenate((old, np.stack((newest, total, bad), axis=1)[kept]))
        n_gone = int(gone[-1])
        rows = running_sums(self._long_rows, np.where(kept, total, 0.0), batches[:n_gone, 1], gone)
        bads = running_sums(self._long_bad, np.where(kept, bad, 0.0), batches[:n_gone, 2], gone)
        long = self._long
        for _ in range(min(n_gone, len(old_list))):
            long.popleft()
        long.extend(map(tuple, batches[len(old_list):].tolist()))
        for _ in range(n_gone - len(old_list)):
            long.popleft()
        self._long_rows, self._long_bad = float(rows[-1]), float(bads[-1])
        return True

    def _append(self, t_s: FloatArray, ttft_ms: FloatArray, e2e_ms: FloatArray, weight: FloatArray,
                wait_ms: FloatArray | None) -> tuple[FloatArray, FloatArray, FloatArray]:
        """Write ``n`` rows at the buffer's end; their time, (3, n) latency block and weight views."""
        n = len(t_s)
        wait = wait_ms if wait_ms is not None and len(wait_ms) == n else np.full(n, np.nan)
        self._room(n)
        lo, hi = self._hi, self._hi + n
        t_new = self._tb[lo:hi]
        t_new[:] = t_s
        self._wb[lo:hi] = weight
        block = self._msb[:, lo:hi]
        block[TTFT], block[E2E], block[WAIT] = ttft_ms, e2e_ms, wait
        if self._in_order and n:
            self._in_order = bool((lo == self._lo or self._tb[lo - 1] <= t_new[0]) and
                                  (n == 1 or (t_new[1:] >= t_new[:-1]).all()))
        self._hi = hi
        return t_new, block, self._wb[lo:hi]

    def _count(self, t_new: FloatArray, block: FloatArray, w: FloatArray) -> None:
        """One batch into the long window: its TTFT rows' weight and its breaches' weight.

        Breaches: TTFT past the SLO by waiting, or end-to-end past its SLO (a decode stretched by a
        crowded fleet; a row with a TTFT breach is not counted twice). Sources report the two as
        separate rows, often in separate batches (the simulator at the first token and at the
        end): a batch of end-to-end rows only still brings its breaches."""
        if len(t_new) <= 2:  # the fluid engine's two weighted rows a bin: Python floats, the same sums
            newest, total, bad = _counts_of_two(t_new.tolist(), block.tolist(), w.tolist(), self.slo_ms,
                                                self.slo_e2e_ms)
        else:
            rows = ~np.isnan(block[TTFT])
            bad = 0.0  # the sum over no rows: most batches have no row past either SLO
            if (block[TTFT] > self.slo_ms).any() or (block[E2E] > self.slo_e2e_ms).any():
                late = _attributable(block[TTFT], block[WAIT], self.slo_ms)
                slow = (block[E2E] > self.slo_e2e_ms) & ~(block[TTFT] > self.slo_ms)
                bad = float(w[late | slow].sum())
            total = float(w[rows].sum())
            newest = float(t_new.max())
        if bad > 0 or total > 0:
            self._long.append((newest, total, bad))
            self._long_rows += total
            self._long_bad += bad

    def _forget_long(self, now_s: float) -> None:
        while self._long and self._long[0][0] < now_s - self.long_window_s:
            _, total, bad = self._long.popleft()
            self._long_rows -= total
            self._long_bad -= bad

    def trim(self, now_s: float) -> None:
        """Forget completions older than ``now − window_s`` (their counts after ``long_window_s``)."""
        self._forget_long(now_s)
        if self._hi == self._lo:
            return
        cut = now_s - self.window_s
        if self._in_order:
            # Rows older than the cut are a prefix (NaN-free times: NaN would sort nowhere).
            self._lo += int(self._t.searchsorted(cut, side="left"))
            return
        if self._t.min() < cut:
            keep = self._t >= cut
            live = int(keep.sum())
            self._tb[:live], self._wb[:live], self._msb[:, :live] = self._t[keep], self._w[keep], self._ms[:, keep]
            self._lo, self._hi = 0, live
            self._in_order = bool(live < 2 or (self._tb[1:live] >= self._tb[:live - 1]).all())

    @property
    def long_breach_weight(self) -> float:
        """The breaches' weight over the long window (what :meth:`long_breaches` compares)."""
        return self._long_bad

    def peak(self, col: int) -> float:
        """The largest value (ms) of column ``col`` in the window; -inf when no row describes it."""
        v = self._ms[col]
        return float(np.nanmax(v)) if len(v) and not np.isnan(v).all() else -math.inf

    def newest_s(self, col: int) -> float:
        """The finish time (s) of the newest row of column ``col`` in the window; -inf when no row
        describes it. A later :meth:`trim` at ``now`` keeps a row of it iff ``newest_s() ≥ now − window_s``."""
        v = self._ms[col]
        rows = ~np.isnan(v)
        return float(self._t[rows].max()) if rows.any() else -math.inf

    def p99(self, col: int, since_s: float | None = None) -> float:
        """Weighted P99 (ms) of column ``col`` (rows after ``since_s`` only, when given); NaN when
        no row describes it."""
        v, w = self._col(col, since_s)
        if len(v) == 0:
            return float("nan")
        # Array methods, not the np.* wrappers: the same kernels with fewer Python frames (asked 3× a second).
        order = v.argsort(kind="stable")
        cw = w[order].cumsum()
        k = int(cw.searchsorted(0.99 * cw[-1]))
        return float(v[order[min(k, len(order) - 1)]])

    def breaches(self, limit_ms: float, *, min_weight: float, share: float, since_s: float = -np.inf) -> bool:
        """Whether, over the window (completions after ``since_s`` only), the ones past ``limit_ms``
        TTFT that waiting made late (:func:`_attributable`) weigh at least ``min_weight`` and over
        ``share`` of all TTFT rows."""
        if min_weight > 0 and not (self._ms[TTFT] > limit_ms).any():
            return False  # no row past the limit weighs 0 < min_weight (one comparison, most seconds)
        keep = self._t > since_s
        ttft, wait, w = self._ms[TTFT][keep], self._ms[WAIT][keep], self._w[keep]
        rows = ~np.isnan(ttft)
        if not rows.any():
            return False
        over = float(w[_attributable(ttft, wait, limit_ms)].sum())
        return over >= min_weight and over > share * float(w[rows].sum())

    def forget_breaches(self) -> None:
        """Drop the long window's counts: the fleet grew, and breaches on the old fleet are answered."""
        self._long.clear()
        self._long_rows = self._long_bad = 0.0

    def long_breaches(self, *, min_weight: float, share: float) -> bool:
        """The same test over ``long_window_s`` at the SLO, end-to-end breaches included (counts kept
        per batch, O(1) to ask): a breach rate too low to show in the short window that still eats
        the SLO's budget."""
        return self._long_bad >= min_weight and self._long_bad > share * max(self._long_rows, 1e-12)

    def _col(self, col: int, since_s: float | None) -> tuple[FloatArray, FloatArray]:
        v = self._ms[col]
        keep = ~np.isnan(v)
        if since_s is not None:
            keep &= self._t > since_s
        return v[keep], self._w[keep]


def _attributable(ttft: FloatArray, wait: FloatArray, limit_ms: float) -> npt.NDArray[np.bool_]:
    """Rows past ``limit_ms`` TTFT whose own prefill (TTFT − wait) fits within it: waiting made them
    late (a row without a wait counts). A prompt whose prefill alone takes longer breaks the limit
    under any fleet size and is no evidence of a shortage."""
    own = np.where(np.isnan(wait), 0.0, ttft - wait)
    return np.asarray((ttft > limit_ms) & (own <= limit_ms), dtype=np.bool_)


def _counts_of_two(t: list[float], block: list[list[float]], w: list[float], slo_ms: float,
                   slo_e2e_ms: float) -> tuple[float, float, float]:
    """(newest finish, TTFT rows' weight, breaches' weight) of a batch of one or two rows — what
    :meth:`LatencyWindow.add` computes with masks, row by row: numpy's sum of one or two values is
    their Python sum, and NaN fails every comparison in both (a NaN finish time stays NaN)."""
    ttft, e2e, wait = block
    total = bad = 0.0
    for i, wi in enumerate(w):
        tt = ttft[i]
        if tt == tt:  # not NaN
            total += wi
        own = 0.0 if wait[i] != wait[i] else tt - wait[i]
        if (tt > slo_ms and own <= slo_ms) or (e2e[i] > slo_e2e_ms and not tt > slo_ms):
            bad += wi
    newest = t[0] if len(t) == 1 else (math.nan if t[0] != t[0] or t[1] != t[1] else max(t))
    return newest, total, bad
