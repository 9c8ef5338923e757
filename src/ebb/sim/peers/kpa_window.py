"""Knative's metric windows: bucketed window averages and the scale-down-delay max window.

Upstream: ``knative/serving`` @ ``98e5ef90aa7033797aa0a61ef97f3ff7e49a3944`` (knative-v1.23.0-5),
``pkg/autoscaler/aggregation/bucketing.go`` (``TimedFloat64Buckets``, ``WeightedFloat64Buckets``)
and ``pkg/autoscaler/aggregation/max/{window,timewindow}.go`` (``TimeWindow``). Re-written here from
the upstream semantics; the ported upstream cases live in ``tests/data/upstream/knative/``.

Guarantees (as upstream):

* :class:`TimedBuckets` sums every value recorded in one ``granularity_s`` bucket (Knative records the
  fleet's concurrency once per second, so one bucket = one scrape) and averages the buckets of the last
  ``window_s``; a window that started less than ``window_s`` ago averages only the buckets since its
  first write; buckets between writes count as 0; a window with no write for ``window_s`` reads 0.
  Averages are rounded to 6 decimals.
* :class:`WeightedBuckets` weights bucket ``k`` steps back by ``c·(1−c)^k`` with
  ``c = max(1 − 0.0001^(1/buckets), 0.2)`` (weights sum to ≥ 0.9999 over the window).
* :func:`max_window_record` keeps the maximum of the values recorded in the last ``size`` indices
  (Knative's scale-down delay: a scale-down takes effect only once the higher recommendations have
  scrolled out).
"""

from __future__ import annotations

import math

_PRECISION_DIGITS = 6
_WEIGHT_PRECISION = 0.9999
_MIN_EXPONENT = 0.2


def _round_half_away(x: float, digits: int) -> float:
    """Round to ``digits`` decimals, halves away from zero (Go ``math.Round``, not banker's)."""
    p = 10.0 ** digits
    return math.copysign(math.floor(abs(x) * p + 0.5), x) / p


def smoothing_coeff(n_buckets: float) -> float:
    """The weighted window's decay ``c`` for ``n_buckets`` buckets (at least 0.2)."""
    return max(1.0 - math.pow(1.0 - _WEIGHT_PRECISION, 1.0 / n_buckets), _MIN_EXPONENT)


class TimedBuckets:
    """Sum-per-bucket ring of ``ceil(window_s / granularity_s)`` buckets with a window average."""

    def __init__(self, window_s: float, granularity_s: float = 1.0) -> None:
        if window_s <= 0 or granularity_s < 1 or granularity_s != int(granularity_s):
            raise ValueError(f"TimedBuckets needs window_s > 0 and whole granularity_s >= 1, "
                             f"got {window_s!r}, {granularity_s!r}")
        self.window_s = float(window_s)
        self.granularity_s = float(granularity_s)
        self.buckets = [0.0] * int(math.ceil(window_s / granularity_s))
        self.first_write_s: float | None = None
        self.last_write_s: float | None = None
        self.window_total = 0.0

    def _trunc(self, t_s: float) -> float:
        return math.floor(t_s / self.granularity_s) * self.granularity_s

    def _index(self, t_s: float) -> int:
        # Upstream: whole Unix seconds divided by whole granularity seconds.
        return int(math.floor(t_s)) // int(self.granularity_s)

    def is_empty(self, now_s: float) -> bool:
        """No write during the last ``window_s``."""
        return self.last_write_s is None or self._trunc(now_s) - self.last_write_s > self.window_s

    def record(self, now_s: float, value: float) -> None:
        """Add ``value`` to the bucket of ``now_s`` (values older than a window are ignored)."""
        bucket_s = self._trunc(now_s)
        write_idx = self._index(now_s)
        n = len(self.buckets)
        lw = self.last_write_s
        if lw != bucket_s:
            if lw is not None and not bucket_s + self.window_s > lw:
                return  # a window or more behind the newest write
            if self.first_write_s is None or self.first_write_s > bucket_s:
                self.first_write_s = bucket_s
            if lw is None or bucket_s > lw:
                if lw is None or bucket_s - lw >= self.window_s:
                    # A whole window without data: start afresh.
                    self.first_write_s = bucket_s
                    self.buckets = [0.0] * n
                    self.window_total = 0.0
                else:
                    # Clear the buckets skipped since the last write (they may hold stale data).
                    for i in range(self._index(lw) + 1, write_idx + 1):
                        self.window_total -= self.buckets[i % n]
                        self.buckets[i % n] = 0.0
                self.last_write_s = bucket_s
        self.buckets[write_idx % n] += value
        self.window_total += value

    def window_average(self, now_s: float) -> float:
        """Mean bucket value over the valid part of the window ending at ``now_s``."""
        now = self._trunc(now_s)
        lw, fw = self.last_write_s, self.first_write_s
        if lw is None or fw is None:
            return 0.0
        n = len(self.buckets)
        d = now - lw
        span = int((lw - fw) // self.granularity_s) + 1  # +1: both ends inclusive
        if d <= 0:
            return _round_half_away(self.window_total / min(span, n), _PRECISION_DIGITS)
        if d < self.window_s:
            st, en = self._index(lw), self._index(now)
            total = self.window_total - sum(self.buckets[i % n] for i in range(st + 1, en + 1))
            return _round_half_away(total / min(span, n - (en - st)), _PRECISION_DIGITS)
        return 0.0


class WeightedBuckets(TimedBuckets):
    """:class:`TimedBuckets` read as an exponentially weighted average (newest weighs most)."""

    def __init__(self, window_s: float, granularity_s: float = 1.0) -> None:
        super().__init__(window_s, granularity_s)
        self.coeff = smoothing_coeff(math.ceil(window_s / granularity_s))

    def window_average(self, now_s: float) -> float:
        now = self._trunc(now_s)
        if self.is_empty(now) or self.last_write_s is None:
            return 0.0
        n = len(self.buckets)
        count = n
        mult = self.coeff
        if now > self.last_write_s:
            # Empty buckets since the last write weigh in as zeros.
            zeros = int((now - self.last_write_s) // self.granularity_s)
            mult *= math.pow(1.0 - self.coeff, zeros)
            count -= zeros
        start = self._index(self.last_write_s) + n
        total = 0.0
        for i in range(count):
            total += self.buckets[(start - i) % n] * mult
            mult *= 1.0 - self.coeff
        return total


MaxWindow = tuple[tuple[int, int], ...]
"""Descending (index, value) pairs, oldest first: the candidates for the window's maximum."""


def max_window_record(window: MaxWindow, size: int, index: int, value: int) -> MaxWindow:
    """Record ``value`` at ``index`` (non-decreasing) in a max window of ``size`` indices."""
    entries = list(window)
    while entries and not value < entries[-1][1]:
        entries.pop()  # smaller and older: can never be the maximum again
    while entries and index - entries[0][0] >= size:
        entries.pop(0)  # scrolled out
    if entries and entries[-1][0] == index:
        value = max(value, entries[-1][1])
        entries.pop()
    entries.append((index, value))
    return tuple(entries)


def max_window_current(window: MaxWindow) -> int:
    """The maximum over the window (0 before any record)."""
    return window[0][1] if window else 0


def time_window_index(t_s: float, granularity_s: float) -> int:
    """Knative's ``max.TimeWindow`` index: whole seconds divided by whole granularity seconds."""
    return int(math.floor(t_s)) // int(granularity_s)
