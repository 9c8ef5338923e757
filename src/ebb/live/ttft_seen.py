"""The TTFT of the completions a controller read, as a small mergeable histogram.

A cycle's :class:`~ebb.live.settings.CycleOutcome` carries the time to first token of every
completion the controller read since the previous cycle (the fast path's reads between cycles
included: :class:`~ebb.live.sensed.Sensor`), so a watcher such as the shadow recorder
(:mod:`ebb.live.shadow`) can tell what latency the fleet served without reading the source again.

Guarantees:

* **1 % relative error.** Values are kept as weights per bin of :data:`MAPPING` (DDSketch-style log
  bins, :class:`~ebb.window.mapping.LogMapping`, alpha 0.01, covering 0.001 ms to 10^7 ms): a
  quantile is within 1 % of the rank-selected TTFT. Values outside that range are clamped.
* **Exact merges.** ``a.merged(b)`` holds the bin weights of both, so a minute's p99 from its
  cycles' histograms is the p99 of the minute's completions (to the 1 %), never a mean of p99s.
* **Small.** One entry per occupied bin: at most about 2,000 for TTFTs from 1 ms to 100 s, usually
  a few dozen a cycle. Rows with a NaN TTFT (end-to-end rows of a sketch) or a weight that is not a
  finite number > 0 are not counted.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Final

import numpy as np
import numpy.typing as npt

from ebb.window.mapping import LogMapping

__all__ = ["MAPPING", "NO_TTFT", "TtftSeen"]

MAPPING: Final = LogMapping(alpha=0.01, min_value=1e-3, max_value=1e7)
"""The bins every :class:`TtftSeen` uses (equal mappings merge)."""
_VALUES: Final = MAPPING.bin_values()


@dataclass(frozen=True)
class TtftSeen:
    """TTFT (ms) weights per bin of :data:`MAPPING` (module docstring); empty when nothing finished."""

    bins: Mapping[int, float] = field(default_factory=lambda: MappingProxyType({}))

    @staticmethod
    def of(ttft_ms: npt.ArrayLike, weight: npt.ArrayLike | None = None) -> TtftSeen:
        """The completions ``ttft_ms`` (ms) with ``weight`` (1 each when None or of another length)."""
        v = np.asarray(ttft_ms, dtype=np.float64).ravel()
        w = np.ones_like(v) if weight is None else np.asarray(weight, dtype=np.float64).ravel()
        if len(w) != len(v):
            w = np.ones_like(v)
        keep = np.isfinite(v) & (v >= 0) & np.isfinite(w) & (w > 0)
        if not keep.any():
            return NO_TTFT
        idx, _ = MAPPING.bin_index(v[keep])
        uniq, inv = np.unique(idx, return_inverse=True)
        sums = np.bincount(inv, weights=w[keep])
        return TtftSeen(MappingProxyType({int(k): float(s) for k, s in zip(uniq, sums, strict=True)}))

    def merged(self, other: TtftSeen) -> TtftSeen:
        """Both histograms' weights together."""
        if not other.bins:
            return self
        if not self.bins:
            return other
        out = dict(self.bins)
        for k, w in other.bins.items():
            out[k] = out.get(k, 0.0) + w
        return TtftSeen(MappingProxyType(out))

    @property
    def weight(self) -> float:
        """Completions counted (their weights' sum)."""
        return float(sum(self.bins.values()))

    def quantile_ms(self, q: float) -> float | None:
        """The smallest bin value with at least ``q`` of the weight at or below it (``q`` in [0, 1]);
        None when empty."""
        if not 0.0 <= q <= 1.0 or math.isnan(q):
            raise ValueError(f"q must be within [0, 1], got {q!r}")
        if not self.bins:
            return None
        keys = sorted(self.bins)
        w = np.array([self.bins[k] for k in keys])
        cum = np.cumsum(w)
        at = int(np.searchsorted(cum, q * cum[-1] * (1 - 1e-12), side="left"))
        return float(_VALUES[keys[min(at, len(keys) - 1)]])


NO_TTFT: Final = TtftSeen()
"""No completion read."""
