"""Per-node heat: node x time-bin mean of one metric, for series named ``node/metric``.

The node is everything before the last ``/`` (``gpu0``, ``node7``, ``node7/cpu3``), the metric the
last part. Time is cut into ``n_bins`` equal bins over the span of that metric's samples; a cell
is the mean of the node's samples in the bin, NaN where it has none (shown as a gap, never as 0).
Pure numpy.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ebb.model.samples import SampleBatch

__all__ = ["HeatMap", "split_name", "node_heatmaps"]


@dataclass(frozen=True)
class HeatMap:
    metric: str
    nodes: tuple[str, ...]
    t0_ns: int
    bin_ns: int
    cells: npt.NDArray[np.float64]  # len(nodes) x n_bins


def split_name(name: str) -> tuple[str, str]:
    """``"node3/cpu_util_pct"`` -> ``("node3", "cpu_util_pct")``; no ``/`` -> ``("", name)``."""
    node, _, metric = name.rpartition("/")
    return node, metric


def node_heatmaps(batch: SampleBatch, *, n_bins: int = 48) -> tuple[HeatMap, ...]:
    """One heat map per metric that appears under at least one node prefix."""
    if n_bins < 1:
        raise ValueError(f"n_bins must be >= 1, got {n_bins}")
    by_metric: dict[str, list[int]] = {}
    for k, name in enumerate(batch.series):
        node, metric = split_name(name)
        if node:
            by_metric.setdefault(metric, []).append(k)
    out: list[HeatMap] = []
    for metric, ks in by_metric.items():
        ks = sorted(ks, key=lambda k: _natural(split_name(batch.series[k])[0]))
        m = np.isin(batch.series_idx, ks)
        if not m.any():
            continue
        ts = batch.ts_ns[m]
        t0, t1 = int(ts.min()), int(ts.max())
        bin_ns = max(1, -(-(t1 - t0 + 1) // n_bins))
        cells = np.full((len(ks), n_bins), np.nan)
        for row, k in enumerate(ks):
            sel = batch.series_idx == k
            b = (batch.ts_ns[sel] - t0) // bin_ns
            sums = np.bincount(b, weights=batch.value[sel], minlength=n_bins)
            cnt = np.bincount(b, minlength=n_bins)
            has = cnt > 0
            cells[row, has] = sums[has] / cnt[has]
        out.append(HeatMap(metric=metric, nodes=tuple(split_name(batch.series[k])[0] for k in ks),
                           t0_ns=t0, bin_ns=bin_ns, cells=cells))
    return tuple(out)


def _natural(s: str) -> tuple[tuple[int, int | str], ...]:
    """Sort key so gpu2 comes before gpu10."""
    return tuple((0, int(p)) if p.isdigit() else (1, p) for p in re.split(r"(\d+)", s) if p)
