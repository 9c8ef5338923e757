"""A columnar, mergeable relative-error quantile sketch: one object holds S series.

Guarantees (see :mod:`ebb.window.mapping` for the bin rule):

* **Accuracy.** ``quantile(q)`` returns, per series, a value within relative error ``alpha``
  (default 1 %) of the rank-selected sample ``sorted(x)[floor(q * (n - 1))]`` (numpy's
  ``method="lower"``), for every magnitude in ``[min_value, max_value]`` (default ``[1e-6, 1e9]``);
  0 is returned exactly; negatives are mirrored with the same guarantee. Out-of-range values are
  clamped and counted in :attr:`ColumnarSketch.clamped`.
* **Mergeability.** Counts are exact integers: ``a.merge(b)`` is bin-for-bin identical to one
  sketch that ingested both inputs; ``subtract`` is its exact inverse (the sliding window uses it).
* **Cost.** Memory is ``S × n_bins × 8`` bytes (n_bins = 3,520 at the defaults: 27.5 kB per series,
  275 MB for 10,000 series) plus 1/64 of that for block counts. Ingest is vectorised — no Python
  loop per sample — and a quantile for all S series is a two-level search over 55 block totals then
  64 bins (about 1 ms for 10,000 series).

Why ``np.add.at`` and not ``np.bincount``: measured on numpy 2.4 with 10,000 series × 3,520 bins,
adding 2 M flat indices took 13 ms with ``np.add.at`` and 21 ms with ``bincount(minlength=S*K)``
(bincount allocates and adds a 280 MB dense vector per call, whatever the batch size).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from ebb.window.mapping import BLOCK, LogMapping

__all__ = ["ColumnarSketch"]

_BLOCK_SHIFT = BLOCK.bit_length() - 1
assert 1 << _BLOCK_SHIFT == BLOCK

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
CountArray = npt.NDArray[np.int32]
_ONE = np.int32(1)


def as_series_idx(series_idx: npt.ArrayLike, n_series: int) -> IntArray:
    """Validate a series index column (int, in [0, n_series)); ValueError quotes the bad value."""
    sid = np.asarray(series_idx)
    if sid.ndim != 1:
        raise ValueError(f"series_idx must be 1-D, got shape {sid.shape}")
    if sid.size and not np.issubdtype(sid.dtype, np.integer):
        raise ValueError(f"series_idx must be integers, got dtype {sid.dtype}")
    sid = sid.astype(np.int64, copy=False)
    if sid.size:
        lo, hi = int(sid.min()), int(sid.max())
        if lo < 0 or hi >= n_series:
            bad = lo if lo < 0 else hi
            raise ValueError(f"series_idx {bad} out of range [0, {n_series})")
    return sid


def as_values(value: npt.ArrayLike, n: int) -> FloatArray:
    """A 1-D float64 value column of length ``n``."""
    v = np.asarray(value, dtype=np.float64)
    if v.ndim != 1 or v.shape[0] != n:
        raise ValueError(f"value must be 1-D with {n} elements (like series_idx), got shape {v.shape}")
    return v


class ColumnarSketch:
    """S DDSketch-style sketches sharing one :class:`LogMapping`, stored as a dense count matrix."""

    def __init__(self, n_series: int, mapping: LogMapping | None = None) -> None:
        if n_series < 1:
            raise ValueError(f"n_series must be >= 1, got {n_series!r}")
        self.mapping = mapping if mapping is not None else LogMapping()
        self.n_series = int(n_series)
        nb = self.mapping.n_bins
        self.counts: CountArray = np.zeros((self.n_series, nb), dtype=np.int32)
        """Exact count per (series, bin), bins in ascending value order. int32 halves the memory
        the random scatter of ingest touches (measured ~25 % faster ingest); one bin holds
        < 2**31 samples, far above any window (10 Hz × 1 s = 10)."""
        self.blocks: IntArray = np.zeros((self.n_series, nb // BLOCK), dtype=np.int64)
        """Sum of each run of BLOCK bins; kept in step with ``counts`` for fast rank search."""
        self.clamped = 0
        """Samples whose magnitude fell outside [min_value, max_value] (clamped to an extreme bin)."""
        self._bin_values = self.mapping.bin_values()

    # -- ingest --------------------------------------------------------------------------------
    def flat_index(self, series_idx: npt.ArrayLike, value: npt.ArrayLike) -> IntArray:
        """Validate a batch and return ``series * n_bins + bin`` per sample; updates ``clamped``."""
        sid = as_series_idx(series_idx, self.n_series)
        v = as_values(value, sid.shape[0])
        self.mapping.check_finite(v)
        idx, clamped = self.mapping.bin_index(v)
        self.clamped += clamped
        idx += sid * self.mapping.n_bins
        return idx

    def ingest(self, series_idx: npt.ArrayLike, value: npt.ArrayLike) -> None:
        """Add one sample per (series_idx[i], value[i]); all-or-nothing on validation errors."""
        self.add_flat(self.flat_index(series_idx, value))

    def add_flat(self, flat: IntArray) -> None:
        """Add samples given as flat indices from :meth:`flat_index` (duplicates allowed)."""
        if flat.size:
            np.add.at(self.counts.reshape(-1), flat, _ONE)
            # flat >> 6 (= flat // BLOCK) is the flat block index because n_bins is a multiple of BLOCK
            np.add.at(self.blocks.reshape(-1), flat >> _BLOCK_SHIFT, 1)

    def subtract_flat(self, flat: IntArray) -> None:
        """Exact inverse of :meth:`add_flat` for indices that were added before."""
        if flat.size:
            np.subtract.at(self.counts.reshape(-1), flat, _ONE)
            np.subtract.at(self.blocks.reshape(-1), flat >> _BLOCK_SHIFT, 1)

    # -- combine -------------------------------------------------------------------------------
    def check_compatible(self, other: ColumnarSketch) -> None:
        """ValueError unless ``other`` has the same mapping and series count (what a merge needs)."""
        if other.mapping != self.mapping or other.n_series != self.n_series:
            raise ValueError(
                "can only merge sketches with the same mapping and series count: "
                f"{self.mapping}, S={self.n_series} vs {other.mapping}, S={other.n_series}"
            )

    def merge(self, other: ColumnarSketch) -> None:
        """In place: self becomes the sketch of self ∪ other (exact counts)."""
        self.check_compatible(other)
        self.counts += other.counts
        self.blocks += other.blocks
        self.clamped += other.clamped

    def copy(self) -> ColumnarSketch:
        """An independent copy."""
        out = ColumnarSketch(self.n_series, self.mapping)
        out.merge(self)
        return out

    def clear(self) -> None:
        """Forget everything."""
        self.counts.fill(0)
        self.blocks.fill(0)
        self.clamped = 0

    # -- query ---------------------------------------------------------------------------------
    def count(self) -> IntArray:
        """Samples per series, shape (S,)."""
        return np.asarray(self.blocks.sum(axis=1), dtype=np.int64)

    def quantile(self, q: float) -> FloatArray:
        """Estimate of ``sorted(x)[floor(q*(n-1))]`` per series, shape (S,); NaN for empty series."""
        if not (0.0 <= q <= 1.0):
            raise ValueError(f"quantile q must be in [0, 1], got {q!r}")
        n = self.count()
        rank = np.floor(q * (n - 1).clip(min=0)).astype(np.int64)
        rows = np.arange(self.n_series)
        cum_b = np.cumsum(self.blocks, axis=1)
        # first block whose running total exceeds the rank holds the rank-th sample
        b = np.argmax(cum_b > rank[:, None], axis=1)
        before = cum_b[rows, b] - self.blocks[rows, b]
        inner = self.counts.reshape(self.n_series, -1, BLOCK)[rows, b]
        cum_i = np.cumsum(inner, axis=1, dtype=np.int64)
        cum_i += before[:, None]
        j = np.argmax(cum_i > rank[:, None], axis=1)
        out: FloatArray = self._bin_values[b * BLOCK + j]
        out[n == 0] = np.nan
        return out

    def quantiles(self, qs: npt.ArrayLike) -> FloatArray:
        """Several quantiles at once, shape (len(qs), S)."""
        return np.stack([self.quantile(float(q)) for q in np.atleast_1d(np.asarray(qs, dtype=float))])
