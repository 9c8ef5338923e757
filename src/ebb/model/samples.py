"""Metric samples as columnar batches: the one record every source produces and L1 ingests.

A :class:`SampleBatch` holds N samples of many series at once (no Python object per sample):
``series_idx[i]`` names the series (an index into ``series``), ``value[i]`` its value in the
series' own unit (the series name carries it: ``util_gpu_ratio``, ``power_w``, ``pcie_tx_kbs``),
and ``ts_ns[i]`` the sample's own timestamp (nanoseconds; epoch or run-relative, as the source
states). Staleness is measured from ``ts_ns``, never assumed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt


@dataclass(frozen=True)
class SampleBatch:
    """N samples over ``len(series)`` series; arrays are equal-length and read-only."""

    series: tuple[str, ...]
    series_idx: npt.NDArray[np.int64]
    value: npt.NDArray[np.float64]
    ts_ns: npt.NDArray[np.int64]

    def __post_init__(self) -> None:
        n = len(self.value)
        if len(self.series_idx) != n or len(self.ts_ns) != n:
            raise ValueError(
                f"SampleBatch columns differ in length: series_idx={len(self.series_idx)}, "
                f"value={n}, ts_ns={len(self.ts_ns)}"
            )
        if n and (int(self.series_idx.min()) < 0 or int(self.series_idx.max()) >= len(self.series)):
            raise ValueError(
                f"SampleBatch.series_idx out of range [0, {len(self.series)}): "
                f"min={int(self.series_idx.min())}, max={int(self.series_idx.max())}"
            )
        for a in (self.series_idx, self.value, self.ts_ns):
            a.flags.writeable = False

    def __len__(self) -> int:
        return int(len(self.value))

    def of(self, name: str) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
        """(ts_ns, value) of one series, in stored order; raises KeyError naming the known series."""
        try:
            k = self.series.index(name)
        except ValueError:
            raise KeyError(f"series {name!r} not in batch; known: {', '.join(self.series)}") from None
        m = self.series_idx == k
        return self.ts_ns[m], self.value[m]
