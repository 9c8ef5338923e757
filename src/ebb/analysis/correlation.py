"""Pearson correlation between resources, on samples aligned in time.

Alignment: series that share one timestamp array (a wide CSV) are paired sample by sample.
Otherwise every series is averaged into time bins as wide as the slowest series' median sampling
interval, and bins are paired. Correlation is computed over pairwise-complete observations (a
bin where either side is missing is left out of that pair only). A pair with fewer than three
observations, or where either side is constant, has no correlation (NaN) rather than a made-up
one. ``|r| > 0.7`` marks *coupled load* (design note §2.1: CPU-memory 0.732). Pure numpy.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

__all__ = ["align", "pearson_matrix", "coupled_pairs", "COUPLED_ABS_R"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
COUPLED_ABS_R = 0.7


def align(series: Sequence[tuple[IntArray, FloatArray]]) -> FloatArray:
    """Observations x series matrix (NaN where a series has no value in that row)."""
    if not series:
        return np.zeros((0, 0))
    first = series[0][0]
    if all(len(ts) == len(first) and np.array_equal(ts, first) for ts, _ in series):
        return np.column_stack([np.asarray(v, dtype=np.float64) for _, v in series])
    steps = [float(np.median(np.diff(np.sort(ts)))) for ts, _ in series if len(ts) > 1]
    step = max([s for s in steps if s > 0], default=1.0)
    t0 = min(int(ts.min()) for ts, _ in series if len(ts))
    t1 = max(int(ts.max()) for ts, _ in series if len(ts))
    n_bins = int((t1 - t0) // step) + 1
    out = np.full((n_bins, len(series)), np.nan)
    for j, (ts, v) in enumerate(series):
        if not len(ts):
            continue
        b = ((ts - t0) // step).astype(np.int64)
        sums = np.bincount(b, weights=v, minlength=n_bins)
        cnt = np.bincount(b, minlength=n_bins)
        has = cnt > 0
        out[has, j] = sums[has] / cnt[has]
    return out


def _r(x: FloatArray, y: FloatArray) -> float:
    if len(x) < 3:
        return float("nan")
    dx, dy = x - x.mean(), y - y.mean()
    sx, sy = float(np.sqrt(dx @ dx)), float(np.sqrt(dy @ dy))
    if sx == 0 or sy == 0:
        return float("nan")
    return float(np.clip((dx @ dy) / (sx * sy), -1.0, 1.0))


def pearson_matrix(x: FloatArray) -> FloatArray:
    """Pearson r between the columns of ``x`` (rows = observations; NaN = missing)."""
    x = np.asarray(x, dtype=np.float64)
    k = x.shape[1]
    r = np.full((k, k), np.nan)
    finite = np.isfinite(x)
    for i in range(k):
        for j in range(i, k):
            m = finite[:, i] & finite[:, j]
            r[i, j] = r[j, i] = _r(x[m, i], x[m, j])
    return r


@dataclass(frozen=True)
class Coupling:
    a: str
    b: str
    r: float


def coupled_pairs(names: Sequence[str], r: FloatArray, threshold: float = COUPLED_ABS_R) -> tuple[Coupling, ...]:
    """Pairs with ``|r| > threshold``, strongest first."""
    out = [Coupling(names[i], names[j], float(r[i, j]))
           for i in range(len(names)) for j in range(i + 1, len(names))
           if np.isfinite(r[i, j]) and abs(r[i, j]) > threshold]
    return tuple(sorted(out, key=lambda c: -abs(c.r)))
