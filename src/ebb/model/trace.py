"""Workload traces as columnar records: one request per index, or one count per time bin.

Guarantees: arrays are numpy, read-only after construction, ``arrival_s`` is sorted ascending
and starts at or after 0; token counts are non-negative integers. Loaders in
``ebb.sources.traces`` are the only producers; the simulator is the consumer.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from ebb.model.ids import TraceName

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


def _freeze(a: np.ndarray) -> None:
    a.flags.writeable = False


@dataclass(frozen=True)
class RequestTrace:
    """A request log: arrival time (seconds since the trace start) and token sizes per request."""

    name: TraceName
    arrival_s: FloatArray
    tokens_in: IntArray
    tokens_out: IntArray
    source: str = ""
    """Where it came from (a path, or ``bundled:<name>``), for reports and error messages."""
    start_epoch_s: float | None = None
    """Wall-clock time of ``arrival_s == 0`` when the file carried one (UTC seconds)."""
    notes: tuple[str, ...] = field(default=())
    """Human-readable remarks from loading (e.g. 'input was unsorted and has been sorted')."""
    service_s: FloatArray | None = None
    """Per-request service time (seconds, finite, >= 0) when the log carries one (a non-LLM service,
    or ``finished - admitted``); None = not measured. Read by the service-time model only."""

    def __post_init__(self) -> None:
        n = len(self.arrival_s)
        if len(self.tokens_in) != n or len(self.tokens_out) != n:
            raise ValueError(
                f"RequestTrace columns differ in length: arrival_s={n}, tokens_in={len(self.tokens_in)}, "
                f"tokens_out={len(self.tokens_out)}"
            )
        if self.service_s is not None:
            if len(self.service_s) != n:
                raise ValueError(f"RequestTrace.service_s has {len(self.service_s)} values for {n} requests")
            if n and not bool(np.all(np.isfinite(self.service_s) & (self.service_s >= 0))):
                raise ValueError("RequestTrace.service_s must be finite and >= 0 seconds")
            _freeze(self.service_s)
        for a in (self.arrival_s, self.tokens_in, self.tokens_out):
            _freeze(a)

    @property
    def requests(self) -> int:
        return int(len(self.arrival_s))

    @property
    def duration_s(self) -> float:
        return float(self.arrival_s[-1]) if len(self.arrival_s) else 0.0


@dataclass(frozen=True)
class CountSeries:
    """Request counts per fixed bin (``bin_s`` seconds), e.g. one integer per second."""

    name: TraceName
    counts: IntArray
    bin_s: float = 1.0
    source: str = ""
    start_epoch_s: float | None = None
    notes: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        if self.bin_s <= 0:
            raise ValueError(f"CountSeries.bin_s must be > 0, got {self.bin_s!r}")
        _freeze(self.counts)

    @property
    def requests(self) -> int:
        return int(self.counts.sum())

    @property
    def duration_s(self) -> float:
        return float(len(self.counts) * self.bin_s)


Trace = RequestTrace | CountSeries
