"""What a fleet really ran, as its Prometheus history tells it: the replica curve and the engine's own histograms.

``ebb simulate --from-prometheus`` (:mod:`ebb.sources.prometheus_history`) reads a range of a real
fleet's history; besides the reconstructed request trace it keeps a :class:`MeasuredFleet`, from
which the scorecard's "as run" row is computed (:mod:`ebb.score.as_run`) and which a saved trace
carries (:mod:`ebb.sources.traces.history_file`), so an offline replay shows the same row.

Guarantees (checked on construction, :class:`ValueError` naming the field):

* ``replicas`` holds one value per step of ``step_s`` seconds from ``start_unix_s``: the replicas
  the fleet ran over ``[start + k·step, start + (k+1)·step)``, finite and ``>= 0`` (steps the
  history had no sample for are filled by the reader, which says so in its notes);
* a :class:`BucketSeries` holds non-cumulative observation counts per bin (``bin_s`` seconds, a whole
  number of steps) and per bucket, finite and ``>= 0``, under strictly ascending upper bounds
  (``+inf`` allowed last), and as many bins as ``ceil(len(replicas) · step_s / bin_s)``;
* arrays are read-only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

__all__ = ["BucketSeries", "MeasuredFleet"]

FloatArray = npt.NDArray[np.float64]


def _freeze(a: np.ndarray) -> None:
    a.flags.writeable = False


@dataclass(frozen=True)
class BucketSeries:
    """One histogram's observations per bin: ``counts[i, j]`` fell in bucket ``j`` (upper bound
    ``bounds[j]``, lower bound the bound before it, 0 for the first) during bin ``i``."""

    bounds: tuple[float, ...]
    counts: FloatArray
    sums: FloatArray | None = None
    """The observations' sum per bin (the histogram's ``_sum``), when read; finite and ``>= 0``."""

    def __post_init__(self) -> None:
        b = np.asarray(self.bounds, dtype=np.float64)
        if len(b) == 0 or not (np.all(np.diff(b) > 0) and b[0] >= 0 and np.all(np.isfinite(b[:-1]))):
            raise ValueError(f"BucketSeries.bounds must be ascending, >= 0, finite but the last, got {self.bounds!r}")
        if self.counts.ndim != 2 or self.counts.shape[1] != len(b):
            raise ValueError(f"BucketSeries.counts must have shape (bins, {len(b)}), got {self.counts.shape}")
        if self.counts.size and not bool(np.all(np.isfinite(self.counts) & (self.counts >= 0))):
            raise ValueError("BucketSeries.counts must be finite and >= 0")
        if self.sums is not None:
            if self.sums.shape != (self.counts.shape[0],):
                raise ValueError(f"BucketSeries.sums must hold one value per bin, got shape {self.sums.shape}")
            if self.sums.size and not bool(np.all(np.isfinite(self.sums) & (self.sums >= 0))):
                raise ValueError("BucketSeries.sums must be finite and >= 0")
            _freeze(self.sums)
        _freeze(self.counts)

    @property
    def bins(self) -> int:
        return int(self.counts.shape[0])


@dataclass(frozen=True)
class MeasuredFleet:
    """The fleet as it ran over a range (module docstring for the guarantees)."""

    start_unix_s: float
    step_s: float
    replicas: FloatArray
    """Replicas run over each step (the Deployment's replica gauge, or the engine targets up)."""
    bin_s: float
    ttft_s: BucketSeries | None
    """The engine's time-to-first-token histogram (bounds in seconds), None when it exports none."""
    e2e_s: BucketSeries | None
    """The engine's end-to-end latency histogram (bounds in seconds), None when it exports none."""
    replicas_from: str
    """The series the replica curve was read from (PromQL), for the report."""
    notes: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        if not (math.isfinite(self.step_s) and self.step_s > 0):
            raise ValueError(f"MeasuredFleet.step_s must be > 0, got {self.step_s!r}")
        ratio = self.bin_s / self.step_s
        if not (math.isfinite(ratio) and ratio >= 1 and abs(ratio - round(ratio)) < 1e-9):
            raise ValueError(f"MeasuredFleet.bin_s must be a whole number of steps, got {self.bin_s!r} "
                             f"for steps of {self.step_s!r}")
        if self.replicas.ndim != 1 or len(self.replicas) == 0:
            raise ValueError("MeasuredFleet.replicas must hold at least one step")
        if not bool(np.all(np.isfinite(self.replicas) & (self.replicas >= 0))):
            raise ValueError("MeasuredFleet.replicas must be finite and >= 0")
        for name in ("ttft_s", "e2e_s"):
            h = getattr(self, name)
            if h is not None and h.bins != self.bins:
                raise ValueError(f"MeasuredFleet.{name} has {h.bins} bins, the range {self.bins}")
        _freeze(self.replicas)

    @property
    def steps_per_bin(self) -> int:
        return int(round(self.bin_s / self.step_s))

    @property
    def bins(self) -> int:
        """Histogram bins covering the range (the last may be partial)."""
        return -(-len(self.replicas) // self.steps_per_bin)

    @property
    def duration_s(self) -> float:
        return float(len(self.replicas) * self.step_s)
