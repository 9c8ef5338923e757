"""Range-query answers laid on a step grid, and the per-point checks both Prometheus modes share.

:func:`lay` puts the series of one range answer on the grid ``start, start + step, ...`` (``n``
steps), per metric name (``""`` when Prometheus dropped it, as ``rate``/``timestamp``/aggregations
without ``__name__`` do) and per label set without ``__name__`` (:data:`Key`). A point whose time is
NaN or infinite is ignored; a point off the grid is ignored. :func:`age_problem` is the staleness
rule of :mod:`ebb.sources.prometheus` (a value used at step ``t`` must have been scraped at most
``max_age_s`` before it and not more than :data:`CLOCK_SLACK_S` after it); :func:`bucket_bound`
reads a histogram series' ``le``; :func:`step_increase` is one cumulative bucket's count added per
step (a drop is a counter reset: the new value is all that was counted since; a NaN, infinite or
negative count adds nothing and is counted as bad) and :func:`per_bucket` turns cumulative
increases by bound into per-bucket counts. Both modes fill one :class:`Fleet` per read and
:func:`signals` turns it and the completion rows into the controller's :class:`LiveSignals`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final

import numpy as np
import numpy.typing as npt

from ebb.model.live import LiveSignals
from ebb.model.observation import FineSignals
from ebb.sources.prometheus_api import PromSeries

__all__ = ["CLOCK_SLACK_S", "Grid", "Key", "age_problem", "bucket_bound", "lay"]

FloatArray = npt.NDArray[np.float64]
Key = frozenset[tuple[str, str]]
"""A series' labels without ``__name__``: the same replica in every query."""

CLOCK_SLACK_S: Final = 0.001
"""``timestamp()`` has millisecond resolution: a scrape time up to this far after its step is the step's."""


@dataclass
class Grid:
    """The series of one metric name laid on the step grid: value and presence per step."""

    values: dict[Key, FloatArray] = field(default_factory=dict)
    present: dict[Key, npt.NDArray[np.bool_]] = field(default_factory=dict)

    def at(self, key: Key, k: int) -> float | None:
        """The value at step ``k`` (NaN stays NaN), None when the series has no point there."""
        pres = self.present.get(key)
        return float(self.values[key][k]) if pres is not None and pres[k] else None

    def keys_at(self, k: int) -> list[Key]:
        return [key for key, pres in self.present.items() if pres[k]]


def lay(series: Iterable[PromSeries], start: float, n: int, step: float) -> dict[str, Grid]:
    """The series on the grid ``start + i × step`` (``i < n``), by metric name, then by :data:`Key`."""
    out: dict[str, Grid] = {}
    for s in series:
        finite = np.isfinite(s.ts_s)  # a NaN/inf time has no step (and would not cast to an index)
        idx = np.round((s.ts_s[finite] - start) / step)
        inside = (idx >= 0) & (idx < n)
        at = idx[inside].astype(np.int64)
        vals = np.full(n, np.nan)
        pres = np.zeros(n, dtype=np.bool_)
        vals[at] = s.value[finite][inside]
        pres[at] = True
        g = out.setdefault(s.labels.get("__name__", ""), Grid())
        g.values[s.key], g.present[s.key] = vals, pres
    return out


def age_problem(t: float, scraped_s: float, max_age_s: float, who: str) -> str | None:
    """Why a value used at step ``t`` and scraped at ``scraped_s`` cannot count, or None.

    Real Prometheus never uses a sample from after the step; a time after it (or NaN) would make
    ``newest_sample_s`` lie about freshness, so it drops the step like a stale one."""
    age = t - scraped_s
    if age > max_age_s:
        return f"step with a stale {who} sample"
    if not age >= -CLOCK_SLACK_S:
        return f"step with a {who} scrape time after the step (or not a time)"
    return None


def bucket_bound(key: Key) -> float | None:
    """A histogram series' upper bound ``le`` (``+Inf`` → inf); None unless a number >= 0 or +inf."""
    try:
        le = float(dict(key).get("le", ""))
    except ValueError:
        return None
    return le if le >= 0 else None  # NaN and negatives fail the comparison


def step_increase(vals: FloatArray, present: npt.NDArray[np.bool_]) -> tuple[FloatArray, npt.NDArray[np.bool_]]:
    """(count added at each step after the first, steps whose pair of points is unusable)."""
    prev, cur = vals[:-1], vals[1:]
    both = present[:-1] & present[1:]
    bad = both & ~(np.isfinite(prev) & np.isfinite(cur) & (prev >= 0) & (cur >= 0))
    d = np.where(cur >= prev, cur - prev, cur)
    return np.where(both & ~bad, d, 0.0), bad


def per_bucket(cumulative: dict[float, FloatArray], n: int) -> list[tuple[float, FloatArray]]:
    """(bound, observations in that bucket per step), bounds ascending, from cumulative increases by
    bound (``le``); never negative (a bound whose count fell below a lower one's adds nothing)."""
    below = np.zeros(n)
    out: list[tuple[float, FloatArray]] = []
    for le in sorted(cumulative):
        out.append((le, cumulative[le] - below))
        below = np.maximum(below, cumulative[le])
    return out


@dataclass(frozen=True)
class Fleet:
    """Per grid step: whether every input was fresh and sane, the fleet sums, the oldest scrape
    behind them, in-flight requests by replica, and the replicas counted."""

    ok: npt.NDArray[np.bool_]
    prefill: FloatArray
    slot: FloatArray
    queued: FloatArray
    oldest_scrape_s: FloatArray
    inflight: list[dict[str, float]]
    seen: npt.NDArray[np.int64]
    """Distinct replicas whose values were fresh and sane at each step."""

    @classmethod
    def empty(cls, n: int) -> Fleet:
        """``n`` steps, all usable until a check says otherwise, sums at 0."""
        return cls(np.ones(n, dtype=np.bool_), np.zeros(n), np.zeros(n), np.zeros(n), np.full(n, np.inf),
                   [{} for _ in range(n)], np.zeros(n, dtype=np.int64))


def signals(grid: FloatArray, fleet: Fleet, rows: Mapping[str, FloatArray], since_s: float,
            qps: Callable[[int], float | None]) -> LiveSignals:
    """The read's :class:`LiveSignals`: the usable steps after ``since_s`` and the completion rows
    (``t``, ``ttft``, ``e2e``, ``w``) after it; gauges from the newest usable step ``k``, whose
    ``qps(k)`` is asked only when there is one."""
    keep = fleet.ok & (grid > since_s)
    after = rows["t"] > since_s
    fine = FineSignals(t_s=grid[keep], prefill_replicas=fleet.prefill[keep], slot_replicas=fleet.slot[keep],
                       queued=fleet.queued[keep], done_t_s=rows["t"][after], done_ttft_ms=rows["ttft"][after],
                       done_e2e_ms=rows["e2e"][after], done_weight=rows["w"][after])
    seen = int(fleet.seen[keep].min()) if keep.any() else None
    good = np.flatnonzero(fleet.ok)
    if len(good) == 0:
        return LiveSignals(fine=fine, replicas_seen=seen)
    k = int(good[-1])
    return LiveSignals(fine=fine, inflight_by_replica=fleet.inflight[k], total_qps=qps(k),
                       queued=float(fleet.queued[k]), newest_sample_s=float(fleet.oldest_scrape_s[k]),
                       replicas_seen=seen)
