"""Percentiles and timeline bins shared by every scorer: the simulator's engines and the live demo.

Vectorised (one sort per call, no Python loop per value); percentiles interpolate linearly between
order statistics exactly as :func:`numpy.percentile` does, and are NaN where there is no value.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

__all__ = ["grouped_percentiles", "percentile_or_nan", "timeline_edges"]

FloatArray = npt.NDArray[np.float64]


def timeline_edges(duration_s: float, bin_s: float | None) -> FloatArray:
    """Bin edges covering [0, duration_s]: ``bin_s`` wide, or ~1,000 bins of a whole second."""
    if bin_s is None:
        bin_s = max(1.0, float(np.ceil(duration_s / 1000.0)))
    n = max(1, int(np.ceil(max(duration_s, bin_s) / bin_s)))
    return np.arange(n + 1, dtype=np.float64) * bin_s


def percentile_or_nan(x: FloatArray, q: float) -> float:
    """The q-th percentile of ``x`` (NaN when empty)."""
    return float(np.percentile(x, q)) if len(x) else float("nan")


def grouped_percentiles(bins: npt.NDArray[np.int64], values: FloatArray, nbins: int,
                         qs: tuple[float, ...]) -> list[FloatArray]:
    """Per-bin percentiles of ``values`` (NaN in empty bins) via one sort, no loop per value."""
    out = [np.full(nbins, np.nan) for _ in qs]
    if len(values) == 0:
        return out
    order = np.lexsort((values, bins))
    b, v = bins[order], values[order]
    starts = np.searchsorted(b, np.arange(nbins), side="left")
    ends = np.searchsorted(b, np.arange(nbins), side="right")
    cnt = ends - starts
    has = cnt > 0
    for k, q in enumerate(qs):
        # Linear interpolation between order statistics, as numpy.percentile does.
        pos = starts[has] + (cnt[has] - 1) * (q / 100.0)
        lo = np.floor(pos).astype(np.int64)
        hi = np.minimum(lo + 1, ends[has] - 1)
        frac = pos - lo
        out[k][has] = v[lo] * (1 - frac) + v[hi] * frac
    return out
