"""The :class:`SignalSource` seam the live controller reads each cycle, and an in-memory fake.

Guarantees of every live source (agents, Prometheus, the fake):

* ``read(since_s)`` is synchronous and side-effect free for the observed system; it returns the
  samples with timestamps ``> since_s`` (Unix seconds) that are available now, plus the newest
  per-replica and fleet gauges, as :class:`~ebb.model.live.LiveSignals`.
* Every value carries the time it was observed; ``newest_sample_s`` is the freshest of them. A
  source never fills a gap with a guess: missing data is absent, and the controller treats data
  older than its staleness limit as missing (no scale-down — fail static).
* Unreachable servers raise :class:`~ebb.errors.SourceUnavailable` naming the URL (retry next cycle);
  malformed payloads (wrong version, NaN, negative or absurd values) raise
  :class:`~ebb.errors.InputError` naming the URL and the field — or, for a single bad sample, drop
  it with a logged reason and keep the rest.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Protocol, runtime_checkable

from ebb.model.live import LiveSignals

__all__ = ["FakeSignalSource", "SignalSource"]


@runtime_checkable
class SignalSource(Protocol):
    """A live source of fleet signals: one method, ``read(since_s) -> LiveSignals``."""

    def read(self, since_s: float) -> LiveSignals:
        """Samples newer than ``since_s`` (Unix s) and the newest gauges, each with its time."""
        ...


class FakeSignalSource:
    """Serves whatever ``produce(since_s)`` returns; ``fail`` makes ``read`` raise it (outage drills)."""

    def __init__(self, produce: Callable[[float], LiveSignals]) -> None:
        self._produce = produce
        self._lock = threading.Lock()
        self.fail: Exception | None = None
        self.reads = 0

    def read(self, since_s: float) -> LiveSignals:
        with self._lock:
            self.reads += 1
            if self.fail is not None:
                raise self.fail
        return self._produce(since_s)
