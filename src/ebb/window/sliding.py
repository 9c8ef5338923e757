"""Sliding-window quantiles for many series: a ring of B buckets × W ms (default 10 × 100 ms = 1 s).

Time model (one clock for all series). Bucket ``b = floor(ts_ns / W_ns)`` covers
``[b·W, (b+1)·W)``. The *head* is the newest bucket seen (by any sample or by ``advance``); the
window is buckets ``head-B+1 .. head``, i.e. exactly the last ``B·W`` ms up to the head bucket's end.

Guarantees:

* **Exact forgetting.** A quantile is taken from a running window total (a
  :class:`~ebb.window.sketch.ColumnarSketch`); when the head moves, each bucket that leaves the
  window is subtracted from the total exactly (integer counts), so the window is bin-for-bin equal
  to a sketch built from the in-window samples only. A roll costs O(samples in the leaving bucket)
  plus O(1) per bucket — never a re-merge of B buckets at query time.
* **Accuracy.** Same as the sketch: ``alpha`` relative error (default 1 %) against the
  rank-selected in-window sample ``sorted(x)[floor(q·(n-1))]``.
* **Order.** A batch is processed as if its samples arrived one by one in array order: a sample is
  *late* iff its bucket is ≤ (newest bucket seen before it) − B; late samples are counted in
  :attr:`SlidingWindow.dropped_late` (per series, and ``dropped_late_total``) and never raise.
  Out-of-order samples inside the window land in their own bucket. A sample newer than the head
  advances the window. A sample of the batch that was in-window on arrival but aged out by a newer
  sample of the same batch is forgotten, exactly as sequential ingestion would.

Each bucket is kept in sparse form (the flat ``series·n_bins + bin`` index of every sample, the
same mapping as the dense sketch) because dense buckets would cost B× the total's memory
(2.75 GB for 10,000 series) while holding about one sample per series each.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from ebb.model.samples import SampleBatch
from ebb.window.mapping import LogMapping
from ebb.window.sketch import ColumnarSketch, as_series_idx, as_values

__all__ = ["SlidingWindow"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

_NS_PER_MS = 1_000_000


class SlidingWindow:
    """Windowed quantile sketches for ``n_series`` series on one shared clock."""

    def __init__(
        self,
        n_series: int,
        *,
        buckets: int = 10,
        bucket_ms: float = 100.0,
        mapping: LogMapping | None = None,
    ) -> None:
        if buckets < 1:
            raise ValueError(f"buckets must be >= 1, got {buckets!r}")
        bucket_ns = int(round(bucket_ms * _NS_PER_MS))
        if bucket_ns < 1:
            raise ValueError(f"bucket_ms must be > 0, got {bucket_ms!r}")
        self.buckets = int(buckets)
        self.bucket_ns = bucket_ns
        self.total = ColumnarSketch(n_series, mapping)
        """Running sketch of exactly the in-window samples."""
        self.n_series = self.total.n_series
        self.head: int | None = None
        """Newest bucket id (ts_ns // bucket_ns); None before the first sample."""
        self.dropped_late: IntArray = np.zeros(self.n_series, dtype=np.int64)
        """Per series: samples older than the window on arrival (not ingested)."""
        # ring slot i holds bucket id _ids[i] (None: empty) and its samples' flat indices
        self._ids: list[int | None] = [None] * self.buckets
        self._flat: list[list[IntArray]] = [[] for _ in range(self.buckets)]

    @property
    def mapping(self) -> LogMapping:
        return self.total.mapping

    @property
    def window_ms(self) -> float:
        return self.buckets * self.bucket_ns / _NS_PER_MS

    @property
    def dropped_late_total(self) -> int:
        return int(self.dropped_late.sum())

    @property
    def clamped(self) -> int:
        return self.total.clamped

    def bucket_of(self, ts_ns: int) -> int:
        return int(ts_ns) // self.bucket_ns

    # -- time ----------------------------------------------------------------------------------
    def advance(self, now_ns: int) -> None:
        """Move the head to the bucket holding ``now_ns`` (never backwards), forgetting what ages out."""
        self._advance_to(self.bucket_of(now_ns))

    def _advance_to(self, head: int) -> None:
        if self.head is not None and head <= self.head:
            return
        self.head = head
        oldest = head - self.buckets + 1
        for slot in range(self.buckets):  # O(B) per advance, whatever the jump
            bid = self._ids[slot]
            if bid is not None and bid < oldest:
                for flat in self._flat[slot]:
                    self.total.subtract_flat(flat)
                self._flat[slot] = []
                self._ids[slot] = None

    # -- ingest --------------------------------------------------------------------------------
    def ingest(
        self,
        series_idx: npt.ArrayLike | SampleBatch,
        value: npt.ArrayLike | None = None,
        ts_ns: npt.ArrayLike | None = None,
    ) -> None:
        """Ingest a batch: ``ingest(series_idx, value, ts_ns)`` or ``ingest(sample_batch)``."""
        if isinstance(series_idx, SampleBatch):
            if series_idx.series and len(series_idx.series) > self.n_series:
                raise ValueError(
                    f"batch has {len(series_idx.series)} series, window holds {self.n_series}"
                )
            batch = series_idx
            series_idx, value, ts_ns = batch.series_idx, batch.value, batch.ts_ns
        if value is None or ts_ns is None:
            raise ValueError("ingest needs series_idx, value and ts_ns (or one SampleBatch)")
        sid = as_series_idx(series_idx, self.n_series)
        v = as_values(value, sid.shape[0])
        ts = np.asarray(ts_ns)
        if ts.shape != sid.shape or (ts.size and not np.issubdtype(ts.dtype, np.integer)):
            raise ValueError(
                f"ts_ns must be integer nanoseconds shaped like series_idx {sid.shape}, "
                f"got dtype {ts.dtype} shape {ts.shape}"
            )
        if not sid.size:
            return
        self.mapping.check_finite(v)  # validate before any state changes
        bid = ts.astype(np.int64, copy=False) // self.bucket_ns
        run_max = np.maximum.accumulate(bid)
        prev_max = np.empty_like(run_max)
        prev_max[0] = bid[0]
        prev_max[1:] = run_max[:-1]
        if self.head is not None:
            np.maximum(prev_max, self.head, out=prev_max)
        late = bid <= prev_max - self.buckets
        new_head = int(run_max[-1]) if self.head is None else max(self.head, int(run_max[-1]))
        oldest = new_head - self.buckets + 1
        keep = ~late & (bid >= oldest)
        if late.any():
            self.dropped_late += np.bincount(sid[late], minlength=self.n_series)
        self._advance_to(new_head)
        if not keep.all():
            sid, v, bid = sid[keep], v[keep], bid[keep]
        if not sid.size:
            return
        flat = self.total.flat_index(sid, v)
        self.total.add_flat(flat)
        lo, hi = int(bid.min()), int(bid.max())
        if lo == hi:  # the common streaming case: the whole batch falls in one bucket
            self._store(lo, flat)
            return
        rel = bid - oldest  # in [0, B): few distinct values, so a stable sort is a radix sort
        small = rel.astype(np.uint8) if self.buckets <= 255 else rel
        order = np.argsort(small, kind="stable")
        sizes = np.bincount(rel, minlength=self.buckets)
        parts = np.split(flat[order], np.cumsum(sizes)[:-1])
        for r, part in enumerate(parts):
            if part.size:
                self._store(oldest + r, part)

    def _store(self, bucket_id: int, flat: IntArray) -> None:
        slot = bucket_id % self.buckets
        if self._ids[slot] != bucket_id:
            self._ids[slot] = bucket_id
            self._flat[slot] = []
        self._flat[slot].append(flat)

    # -- query ---------------------------------------------------------------------------------
    def quantile(self, q: float, now_ns: int | None = None) -> FloatArray:
        """Windowed quantile per series, shape (S,), NaN where the window is empty.

        With ``now_ns`` the window first advances to the bucket holding ``now_ns`` (forgetting what
        has aged out); without it, the window ends at the head bucket.
        """
        if now_ns is not None:
            self.advance(now_ns)
        return self.total.quantile(q)

    def count(self, now_ns: int | None = None) -> IntArray:
        """In-window samples per series, shape (S,)."""
        if now_ns is not None:
            self.advance(now_ns)
        return self.total.count()

    def bucket_ids(self) -> list[int]:
        """Ids of the non-empty buckets currently in the window, ascending."""
        return sorted(b for b in self._ids if b is not None)

    def merge(self, other: SlidingWindow) -> None:
        """In place: self becomes the window of both sample streams (same config required).

        The merged head is the newer of the two; buckets of either side older than the merged
        window are forgotten; late counters add up.
        """
        if (other.buckets, other.bucket_ns) != (self.buckets, self.bucket_ns):
            raise ValueError(
                f"window shapes differ: {self.buckets}×{self.bucket_ns} ns vs "
                f"{other.buckets}×{other.bucket_ns} ns"
            )
        self.total.check_compatible(other.total)
        self.dropped_late += other.dropped_late
        self.total.clamped += other.total.clamped
        if other.head is None:
            return
        self._advance_to(other.head)
        assert self.head is not None
        oldest = self.head - self.buckets + 1
        for slot in range(other.buckets):
            bid = other._ids[slot]
            if bid is None or bid < oldest:
                continue
            for flat in other._flat[slot]:
                self.total.add_flat(flat)
                self._store(bid, flat.copy())
