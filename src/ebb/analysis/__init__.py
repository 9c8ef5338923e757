"""Offline analysis of collected samples (design note §2.1; ``ebb analyze``). Pure numpy.

:func:`analyze` turns a :class:`~ebb.model.samples.SampleBatch` into an :class:`AnalysisReport`:

* a distribution per *resource* (the metric part of ``node/metric``; all nodes pooled, as the
  note pooled 892,416 samples) with its modes (:mod:`ebb.analysis.distribution`);
* a node x time heat map per metric when series carry a node prefix (:mod:`ebb.analysis.heatmap`);
* the Pearson matrix between resources, each node's series aligned in time and the nodes' rows
  stacked, with ``|r| > 0.7`` flagged as coupled load (:mod:`ebb.analysis.correlation`).

Rendering lives in :mod:`ebb.analysis.report_html` (a string) and in the CLI (terminal).

Also offline, over files the commands are given (the only modules here that read a file): the
Pareto frontier of measured configurations (:mod:`ebb.analysis.measurements` reads the CSV,
:mod:`ebb.analysis.pareto` computes; ``ebb pareto``), bursts and triggers in a recorded CSV
(:mod:`ebb.analysis.csv_series` reads it, :mod:`ebb.analysis.bursts` replays it through the L1
window; ``ebb bursts``) and the samples ``ebb analyze`` reads (:mod:`ebb.analysis.inputs`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ebb.analysis.correlation import COUPLED_ABS_R, Coupling, align, coupled_pairs, pearson_matrix
from ebb.analysis.distribution import Distribution, Mode, distribution
from ebb.analysis.heatmap import HeatMap, node_heatmaps, split_name
from ebb.model.samples import SampleBatch

__all__ = [
    "AnalysisReport", "Coupling", "Distribution", "HeatMap", "Mode", "analyze", "distribution",
    "node_heatmaps", "pearson_matrix", "COUPLED_ABS_R",
]


@dataclass(frozen=True)
class AnalysisReport:
    n_samples: int
    n_series: int
    t0_ns: int
    t1_ns: int
    distributions: tuple[Distribution, ...]
    heatmaps: tuple[HeatMap, ...]
    resources: tuple[str, ...]  # order of the correlation matrix
    correlation: npt.NDArray[np.float64]
    coupled: tuple[Coupling, ...]


def analyze(batch: SampleBatch, *, bins: int = 100, heat_bins: int = 48,
            coupled_abs_r: float = COUPLED_ABS_R) -> AnalysisReport:
    """Distributions, heat maps and correlations of every series in ``batch``."""
    if len(batch) == 0:
        raise ValueError("cannot analyze an empty batch: no samples")
    resources: dict[str, list[int]] = {}
    for k, name in enumerate(batch.series):
        resources.setdefault(split_name(name)[1], []).append(k)
    names = tuple(resources)
    dists = []
    for res, ks in resources.items():
        vals = batch.value[np.isin(batch.series_idx, ks)]
        if len(vals):
            dists.append(distribution(res, vals, bins=bins))
    # correlation: per node, align that node's resources; stack the rows of all nodes
    nodes: dict[str, dict[str, int]] = {}
    for k, name in enumerate(batch.series):
        node, res = split_name(name)
        nodes.setdefault(node, {})[res] = k
    col = {r: j for j, r in enumerate(names)}
    blocks = []
    for per_node in nodes.values():
        present = [(res, k) for res, k in per_node.items() if np.any(batch.series_idx == k)]
        if not present:
            continue
        mat = align([batch.of(batch.series[k]) for _, k in present])
        block = np.full((mat.shape[0], len(names)), np.nan)
        for j, (res, _) in enumerate(present):
            block[:, col[res]] = mat[:, j]
        blocks.append(block)
    r = pearson_matrix(np.vstack(blocks)) if blocks else np.full((len(names), len(names)), np.nan)
    return AnalysisReport(
        n_samples=len(batch), n_series=len(batch.series),
        t0_ns=int(batch.ts_ns.min()), t1_ns=int(batch.ts_ns.max()),
        distributions=tuple(dists), heatmaps=node_heatmaps(batch, n_bins=heat_bins),
        resources=names, correlation=r, coupled=coupled_pairs(names, r, coupled_abs_r),
    )
