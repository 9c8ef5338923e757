"""L1 latency window: the completions of the last ``window_s`` seconds as columns, for P99s and lateness.

Completions arrive with every fine-signal batch (finish time, TTFT, end-to-end latency, a weight,
and the wait before the request's own prefill — NaN where the source cannot tell, and a row may
describe TTFT or end-to-end only, as an agent's sketches do). The window keeps them as numpy
columns: appending a batch and dropping what aged out cost O(batch + window) array copies, a
weighted quantile one sort of the window — never a Python loop per request (270 completions a
second on the Azure conversation trace).
"""

from __future__ import annotations

from collections import deque

import numpy as np
import numpy.typing as npt

__all__ = ["LatencyWindow", "TTFT", "E2E", "WAIT"]

FloatArray = npt.NDArray[np.float64]

TTFT, E2E, WAIT = 0, 1, 2
"""Latency columns (milliseconds)."""


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

        self._t = np.zeros(0)
        self._w = np.zeros(0)
        self._ms = np.zeros((3, 0))

    def __len__(self) -> int:
        return len(self._t)

    def add(self, t_s: FloatArray, ttft_ms: FloatArray, e2e_ms: FloatArray, weight: FloatArray,
            wait_ms: FloatArray | None = None) -> None:
        """Append a batch (equal lengths; ``wait_ms`` of another length counts as unknown)."""
        n = len(t_s)
        if n == 0:
            return
        wait = wait_ms if wait_ms is not None and len(wait_ms) == n else np.full(n, np.nan)
        self._t = np.concatenate([self._t, np.asarray(t_s, dtype=np.float64)])
        self._w = np.concatenate([self._w, np.asarray(weight, dtype=np.float64)])
        # np.array of three equal 1-D rows is vstack's (3, n) block without its wrapper costs.
        block = np.array([np.asarray(ttft_ms, dtype=np.float64), np.asarray(e2e_ms, dtype=np.float64),
                          np.asarray(wait, dtype=np.float64)], dtype=np.float64)
        self._ms = np.concatenate([self._ms, block], axis=1)
        # Breaches: TTFT past the SLO by waiting, or end-to-end past its SLO (a decode stretched by a
        # crowded fleet; a row with a TTFT breach is not counted twice). Sources report the two as
        # separate rows, often in separate batches (the simulator at the first token and at the
        # end): a batch of end-to-end rows only still brings its breaches.
        rows = ~np.isnan(block[TTFT])
        w = self._w[-n:]
        bad = 0.0  # the sum over no rows: most batches have no row past either SLO
        if (block[TTFT] > self.slo_ms).any() or (block[E2E] > self.slo_e2e_ms).any():
            late = _attributable(block[TTFT], block[WAIT], self.slo_ms)
            slow = (block[E2E] > self.slo_e2e_ms) & ~(block[TTFT] > self.slo_ms)
            bad = float(w[late | slow].sum())
        total = float(w[rows].sum())
        if bad > 0 or total > 0:
            self._long.append((float(np.asarray(t_s).max()), total, bad))
            self._long_rows += total
            self._long_bad += bad

    def trim(self, now_s: float) -> None:
        """Forget completions older than ``now − window_s`` (their counts after ``long_window_s``)."""
        while self._long and self._long[0][0] < now_s - self.long_window_s:
            _, total, bad = self._long.popleft()
            self._long_rows -= total
            self._long_bad -= bad
        if len(self._t) and self._t.min() < now_s - self.window_s:
            keep = self._t >= now_s - self.window_s
            self._t, self._w, self._ms = self._t[keep], self._w[keep], self._ms[:, keep]

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
