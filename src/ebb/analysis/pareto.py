"""The Pareto frontier of measured serving configurations (``ebb pareto``; SPEC §3.5, note §4.3).

A measurement (:mod:`ebb.analysis.measurements`) is *dominated* when another one costs no more in
every objective and less in at least one; the *frontier* is every measurement nothing dominates.
Configurations measured more than once appear once per measurement (each row is a point; noise can
make a configuration dominate itself). Two modes, both with :mod:`ebb.gates.pareto` doing the work:

* **batch** (:func:`batch_frontier`): every row, :func:`~ebb.gates.pareto.pareto_mask` then
  :func:`~ebb.gates.pareto.dominated_by`, vectorised (O(n log n) for 2 objectives).
* **windowed** (:func:`windowed_frontier`): rows are fed in file order into a
  :class:`~ebb.gates.pareto.FrontierMonitor`: ``expire(t)`` then ``insert`` per row, exactly what
  the online monitor does as measurements arrive. The result is the frontier *at the last
  timestamp* ``t_last``: the measurements with ``t > t_last - W``. A configuration dominated only by
  measurements that expired is back on the frontier (the monitor re-examines it). Memory holds the
  window, not the file.

**Work bound (batch).** The filter is vectorised (:func:`~ebb.gates.pareto.pareto_mask`: O(n log n)
for 2 objectives, a blocked skyline for 3+), but a skyline's cost grows with rows × frontier size, and
naming each dominated row's dominator costs dominated × frontier: 100,000 rows on a 3-objective
simplex (every row non-dominated) took 130 s. So the batch mode refuses, with an
:class:`~ebb.errors.InputError` giving the estimate and the limit, any input whose comparisons
(element-wise, rows × frontier × objectives) would pass :data:`MAX_COMPARISONS` (2·10**9, about 3 s
on one core): for 3+ objectives and more than :data:`_SAMPLE_ROWS` rows the frontier size is
estimated from a fixed-seed sample of that many rows (a sample's frontier share is at least the
file's, in expectation), checked before the full filter runs; the dominator search is checked
exactly once the frontier is known. 20,000 simplex rows (1.2·10**9) still run, in under 2 s.

In both modes the reported dominator of a dominated measurement is the *earliest* (in file order)
frontier measurement that dominates it, so the windowed mode with a window longer than the file
gives exactly the batch result.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import numpy as np

from ebb.analysis.measurements import Measurement, MeasurementCsv, Objective
from ebb.config import settings_checks as checks
from ebb.errors import ConfigError, InputError
from ebb.gates.pareto import FrontierMonitor, dominated_by, pareto_mask

__all__ = ["MAX_COMPARISONS", "ParetoReport", "batch_frontier", "pareto_report", "windowed_frontier"]

MAX_COMPARISONS = 2_000_000_000
"""Element-wise comparisons (rows × frontier × objectives) one batch report may cost (about 3 s)."""
_SAMPLE_ROWS = 10_000
"""Rows sampled to estimate a 3+-objective frontier's size (its own filter costs at most 3·10**8)."""
_FIX = ("keep one row per configuration (e.g. its median), drop an objective, or use --time-column and "
        "--window-s to keep only recent rows")


@dataclass(frozen=True, slots=True)
class ParetoReport:
    """The frontier (file order) and each dominated measurement with its earliest frontier dominator."""

    path: str
    objectives: tuple[Objective, ...]
    config_columns: tuple[str, ...]
    n_rows: int
    frontier: tuple[Measurement, ...]
    dominated: tuple[tuple[Measurement, Measurement], ...]
    time_column: str | None = None
    window_s: float | None = None
    now_s: float | None = None
    expired: int = 0


def _signs(objectives: Sequence[Objective]) -> np.ndarray:
    return np.array([o.sign for o in objectives], dtype=np.float64)


def batch_frontier(rows: Sequence[Measurement], objectives: Sequence[Objective], *, source: str | None = None,
                   ) -> tuple[list[Measurement], list[tuple[Measurement, Measurement]]]:
    """Frontier (input order) and (dominated, earliest dominating frontier row), vectorised.

    Raises :class:`InputError` (naming ``source``) when the work would pass :data:`MAX_COMPARISONS`
    (see the module docstring), before doing it."""
    if not rows:
        return [], []
    pts = np.array([r.values for r in rows], dtype=np.float64) * _signs(objectives)
    n, k = pts.shape
    if k >= 3 and n > _SAMPLE_ROWS:
        sample = np.random.default_rng(0).choice(n, _SAMPLE_ROWS, replace=False)
        share = float(pareto_mask(pts[sample]).mean())
        _check_work(n * share * n * k, f"{n:,} rows x an estimated {share * n:,.0f}-row frontier "
                    f"({share:.0%} of a {_SAMPLE_ROWS:,}-row sample) x {k} objectives", source)
    mask = pareto_mask(pts)
    front_idx = np.flatnonzero(mask)
    dom_idx = np.flatnonzero(~mask)
    _check_work(float(front_idx.size) * dom_idx.size * k, f"{dom_idx.size:,} dominated rows x a "
                f"{front_idx.size:,}-row frontier x {k} objectives", source)
    by = dominated_by(pts[dom_idx], pts[front_idx])
    frontier = [rows[int(i)] for i in front_idx]
    return frontier, [(rows[int(i)], frontier[int(b)]) for i, b in zip(dom_idx, by, strict=True)]


def _check_work(cost: float, what: str, source: str | None) -> None:
    if cost > MAX_COMPARISONS:
        raise InputError(f"the Pareto report would take {cost:.2g} comparisons ({what}), over the limit of "
                         f"{MAX_COMPARISONS:.0e}", path=source, fix=_FIX)


def windowed_frontier(rows: Iterator[Measurement] | Sequence[Measurement], objectives: Sequence[Objective],
                      window_s: float) -> tuple[list[Measurement], list[tuple[Measurement, Measurement]],
                                                float | None, int]:
    """Feed rows (time order) into a :class:`FrontierMonitor`; the frontier at the last timestamp.

    Returns (frontier, dominated pairs, last timestamp or None when no rows, rows expired).
    """
    signs = _signs(objectives)
    mon = FrontierMonitor(window_s, len(signs))
    now: float | None = None
    expired = 0
    for r in rows:
        if r.ts_s is None:
            raise ValueError(f"line {r.line}: a windowed frontier needs a timestamp on every row")
        now = r.ts_s
        expired += mon.expire(now)  # before the insert: a row is never expired by its own time
        mon.insert(r, now, (np.asarray(r.values) * signs).tolist())
    frontier = [cast(Measurement, p.config_id) for p in mon.frontier()]
    dominated = [(cast(Measurement, d.point.config_id), cast(Measurement, d.by.config_id))
                 for d in mon.dominated()]
    return frontier, dominated, now, expired


def pareto_report(path: Path, objectives: Sequence[Objective], *, config: Sequence[str] | None = None,
                  time_column: str | None = None, window_s: float | None = None) -> ParetoReport:
    """Read ``path`` and compute the frontier (see the module docstring for both modes)."""
    if (time_column is None) != (window_s is None):
        raise ConfigError("--time-column and --window-s go together (fix: give both for the windowed "
                          "monitor, or neither for the whole file)")
    if window_s is not None:
        checks.positive("--window-s", window_s, fix="the seconds of measurements the frontier keeps, e.g. --window-s 600")
    with MeasurementCsv(path, objectives, config=config, time_column=time_column) as src:
        now: float | None = None
        expired = 0
        if window_s is None:
            rows = list(src)
            frontier, dominated = batch_frontier(rows, objectives, source=str(path))
        else:
            frontier, dominated, now, expired = windowed_frontier(iter(src), objectives, window_s)
        if src.n_rows == 0:
            raise InputError("no data rows after the header", path=str(path), line=2,
                             fix="add one row per measurement")
        return ParetoReport(str(path), tuple(objectives), src.config_columns, src.n_rows, tuple(frontier),
                            tuple(dominated), time_column, window_s, now, expired)
