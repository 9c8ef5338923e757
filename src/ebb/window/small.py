"""A one-series sliding-window quantile for few samples: the same answer as :class:`SlidingWindow`.

Ebb's L1 window holds one second of 100 ms buckets — at most ten samples from an agent, one per
second from the fluid simulator's bins. For so few samples the columnar sketch's fixed costs (a
scatter into a count matrix on ingest, two cumulative sums over its bins on every query, ~20 numpy
calls a second) dominate; this window keeps the raw values and sorts them when asked.

Guarantee: for samples fed in any order, ``quantile(q, now_ns)`` equals
``SlidingWindow(1, buckets=B, bucket_ms=…).quantile(q, now_ns)[0]`` bit for bit (same mapping).
The sketch answers with the representative value of the bin holding the ``floor(q × (n − 1))``-th
smallest sample; bins are monotone in the value, so that is the bin of the ``floor(q × (n − 1))``-th
smallest raw value — one value mapped, not ``n``. In-window samples are the same: those whose bucket
``ts_ns // bucket_ns`` is within ``B`` buckets of the newest bucket seen (sample or ``now_ns``);
a sample older than that on arrival is never counted. Cost: O(n log n) Python on ``n`` in-window
samples per query, O(batch) per ingest (one numpy call for the bucket ids).
"""

from __future__ import annotations

import math
from bisect import bisect_left, insort
from operator import itemgetter

import numpy as np
import numpy.typing as npt

from ebb.window.mapping import LogMapping

__all__ = ["SmallWindow"]

_BUCKET = itemgetter(0)


class SmallWindow:
    """Samples of the last ``buckets`` × ``bucket_ms`` as (bucket id, value), quantiles exact to the sketch."""

    __slots__ = ("_bin_values", "_last", "_samples", "bucket_ns", "buckets", "head", "mapping")

    def __init__(self, *, buckets: int, bucket_ms: float, mapping: LogMapping | None = None) -> None:
        if buckets < 1 or not bucket_ms > 0:
            raise ValueError(f"buckets must be >= 1 and bucket_ms > 0, got {buckets!r}, {bucket_ms!r}")
        self.buckets = int(buckets)
        self.bucket_ns = round(bucket_ms * 1_000_000)
        self.head: int | None = None
        """Newest bucket id seen; None before the first sample or query."""
        self.mapping = mapping if mapping is not None else LogMapping()
        self._bin_values = self.mapping.bin_values()
        # Sorted by bucket id (samples in time order append at the end), so the ones that leave the
        # window are a prefix; the order of values within it does not matter (quantile sorts them).
        self._samples: list[tuple[int, float]] = []
        # The last positive value mapped and its bin's value: a steady fleet asks for the same one
        # every second (two positive floats that compare equal have the same bits: the same bin).
        self._last = (math.nan, math.nan)

    def ingest(self, value: npt.NDArray[np.float64], ts_ns: npt.NDArray[np.int64]) -> None:
        """Add samples (finite values, integer nanosecond times; ValueError otherwise, nothing added)."""
        if len(value) != len(ts_ns):
            raise ValueError(f"value and ts_ns must have equal lengths, got {len(value)} and {len(ts_ns)}")
        if not len(value):
            return
        if len(value) == 1 and math.isfinite(v := float(value[0])):
            self.ingest_one(v, int(ts_ns[0]))
            return
        self.mapping.check_finite(np.asarray(value, dtype=np.float64))
        bids: list[int] = (np.asarray(ts_ns, dtype=np.int64) // self.bucket_ns).tolist()
        vals: list[float] = np.asarray(value, dtype=np.float64).tolist()
        self._advance_to(max(bids))
        oldest = (self.head if self.head is not None else 0) - self.buckets + 1
        for b, v in zip(bids, vals, strict=True):
            if b >= oldest:
                insort(self._samples, (b, v), key=_BUCKET)

    def ingest_one(self, value: float, ts_ns: int) -> None:
        """:meth:`ingest` of one finite sample (the fluid engine's 1 s bins, an agent's 100 ms samples):
        Python ints floor-divide as numpy's int64 do."""
        bid = ts_ns // self.bucket_ns
        self._advance_to(bid)
        if bid >= (self.head if self.head is not None else 0) - self.buckets + 1:
            insort(self._samples, (bid, value), key=_BUCKET)

    def ingest_run(self, values: list[float], ts_ns: list[int]) -> None:
        """:meth:`ingest_one` of each sample in turn (finite values), at once when their buckets do
        not decrease and start at the newest bucket seen or later — each is then kept on arrival and
        appended, and one advance to the last forgets what the ones between would have."""
        bucket = self.bucket_ns
        bids = [ns // bucket for ns in ts_ns]
        if not bids:
            return
        if (self.head is not None and bids[0] < self.head) or any(b > a for a, b in zip(bids[1:], bids, strict=False)):
            for v, ns in zip(values, ts_ns, strict=True):
                self.ingest_one(v, ns)
            return
        self._samples.extend(zip(bids, values, strict=True))
        self._advance_to(bids[-1])

    def _advance_to(self, head: int) -> None:
        if self.head is not None and head <= self.head:
            return
        self.head = head
        oldest = head - self.buckets + 1
        s = self._samples
        if s and s[0][0] < oldest:
            del s[:bisect_left(s, oldest, key=_BUCKET)]

    def lone_quantiles(self, values: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        """:meth:`quantile` (any ``q``) of a window holding one sample, for each of ``values``: the
        representative value of its bin (finite values only)."""
        return np.asarray(self._bin_values[self.mapping.bin_index(values)[0]], dtype=np.float64)

    def quantile(self, q: float, now_ns: int | None = None) -> float:
        """The sketch's quantile ``q`` of the in-window samples (after advancing to ``now_ns``); NaN when empty."""
        if not (0.0 <= q <= 1.0):
            raise ValueError(f"quantile q must be in [0, 1], got {q!r}")
        if now_ns is not None:
            self._advance_to(int(now_ns) // self.bucket_ns)
        n = len(self._samples)
        if n == 0:
            return math.nan
        # The sketch's rank: floor(q × (n − 1)) in float64, as np.floor computes it.
        rank = math.floor(q * (n - 1))
        x = sorted(v for _, v in self._samples)[rank]
        last_x, last_v = self._last
        if x == last_x:
            return last_v
        v = float(self._bin_values[self.mapping.bin_of(x)])
        if x > 0.0:
            self._last = (x, v)
        return v
