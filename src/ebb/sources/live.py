"""The :class:`SignalSource` seam the live controller reads each cycle.

Guarantees of every live source (agents, Prometheus, and the fake
:class:`ebb.testing.fakes.FakeSignalSource`):

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

from typing import Protocol, runtime_checkable

from ebb.model.live import LiveSignals

__all__ = ["ClockedSource", "FreshSource", "SignalSource"]


@runtime_checkable
class SignalSource(Protocol):
    """A live source of fleet signals: one method, ``read(since_s) -> LiveSignals``."""

    def read(self, since_s: float) -> LiveSignals:
        """Samples newer than ``since_s`` (Unix s) and the newest gauges, each with its time."""
        ...


@runtime_checkable
class ClockedSource(Protocol):
    """A source whose peers stamp their data with their own clocks and which measures how far those
    clocks are from the controller's (the agents: :mod:`ebb.sources.agent_clock`)."""

    def clock_offsets_s(self) -> dict[str, float]:
        """Peer → its clock's offset from the controller's (s, + ahead); peers not measured are absent."""
        ...


@runtime_checkable
class FreshSource(Protocol):
    """A source that says how old its newest sample may be while it keeps up (the agents: 2 s, twenty
    100 ms buckets). The controller lets a scale-down through only on data that fresh; a source
    without it (Prometheus, whose scrape interval sets the age) is fresh up to the staleness limit."""

    @property
    def down_fresh_s(self) -> float:
        """Seconds; data older than this backs scale-ups only."""
        ...
