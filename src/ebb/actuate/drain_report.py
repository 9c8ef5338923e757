"""What an actuator tells of its drains: start, in-flight steps, end — bounded, never blocking the actuator.

Both actuators with a drain (:class:`~ebb.actuate.local.LocalActuator` through its router, the
Kubernetes asleep tier :mod:`ebb.actuate.kube_tier` through the pod's engine) keep one
:class:`DrainReporter` and call it at each step of a victim's way out; it turns the calls into the
records of :mod:`ebb.model.drains` and hands them to its :attr:`~DrainReporter.observer` (the live
controller's :class:`~ebb.live.drain_ledger.DrainLedger` writes them to the ledger; actuators never
import the ledger: ``.importlinter`` keeps adapters apart).

Guarantees:

* **Every drain told has one start and one end**, in that order (a second :meth:`~DrainReporter.start`
  for a worker already draining, or an :meth:`~DrainReporter.end` for one not draining, records
  nothing). A drain resumed by a restarted actuator is told again from its recorded start time, so
  its records keep one ``drain_id``.
* **Bounded steps.** :meth:`~DrainReporter.read` (each read of the victim's in-flight work, every
  0.1–0.2 s) records a :class:`~ebb.model.drains.DrainStep` only on the drain's first read, then when
  the count changed and at least ``min_step_s`` (:data:`MIN_STEP_S`, 5 s) passed since the last step,
  or when ``heartbeat_s`` (:data:`HEARTBEAT_S`, 30 s) passed whatever the count. So a drain of ``T``
  seconds records at most ``1 + T / 5`` steps: a 2-minute drain of a long stream, at most 25 (5 when
  its count holds), however fast its count moves.
* **Ordered in the ledger.** A start's ``ts_ns`` is its start time at millisecond precision (what
  a resumed drain reads back from its annotation); every later record of the drain is stamped
  strictly after the one before, so the ledger's ``(ts_ns, cycle_id)`` order is the order told.
* **In-flight counts** are whole requests: a gauge sum is rounded up (0.2 → 1: never read as zero
  work), a negative one reads 0, a non-finite or unreadable one ``None`` (work in flight, unknown).
* **Never in the actuator's way.** The observer is called synchronously on the actuator's thread, so
  it must only queue; anything it raises is caught and logged (at most one line per 10 s), never
  propagated. No observer (the default): nothing is recorded, nothing changes.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from ebb.log_limit import LogLimiter, held_note
from ebb.model.drains import (DrainEnd, DrainEvent, DrainObserver, DrainOutcome, DrainReason, DrainStart,
                              DrainStep, DrainThen, NOTE_MAX)

__all__ = ["HEARTBEAT_S", "MIN_STEP_S", "DrainReporter", "inflight_count", "stamp_ns"]

log = logging.getLogger(__name__)

MIN_STEP_S: Final = 5.0
"""Least time (s) between two in-flight steps of one drain (but its first)."""
HEARTBEAT_S: Final = 30.0
"""A step at least this often (s) while a drain lasts, even when its count holds."""


def inflight_count(value: float | None) -> int | None:
    """A read of requests running + waiting as a whole count (module docstring); None when unreadable."""
    if value is None or not math.isfinite(value):
        return None
    return min(2**63 - 1, max(0, math.ceil(value)))


def stamp_ns(stamp_s: float) -> int:
    """Unix s → ns at millisecond precision: the same from a start time and from its ``%.3f`` annotation."""
    return int(round(stamp_s * 1000.0)) * 1_000_000


@dataclass
class _Open:
    start: DrainStart
    started_m: float
    """Monotonic time the drain began."""
    last_step_m: float | None = None
    last_count: int | None = None
    last_read: int | None = None
    last_ns: int = 0

    def stamp(self, wall_s: float) -> int:
        """This record's ``ts_ns``: now, strictly after the drain's previous record (so the ledger,
        ordered by ``(ts_ns, cycle_id)``, keeps a drain's records in the order told)."""
        self.last_ns = max(int(wall_s * 1e9), self.last_ns + 1, self.start.started_ns + 1)
        return self.last_ns


class DrainReporter:
    """One actuator's drains as records (module docstring). Thread-safe."""

    def __init__(self, target: str, *, min_step_s: float = MIN_STEP_S, heartbeat_s: float = HEARTBEAT_S,
                 wall: Callable[[], float] = time.time, monotonic: Callable[[], float] = time.monotonic) -> None:
        if not 0 < min_step_s <= heartbeat_s:
            raise ValueError(f"need 0 < min_step_s <= heartbeat_s, got {min_step_s!r} / {heartbeat_s!r}")
        self.target, self.min_step_s, self.heartbeat_s = target, min_step_s, heartbeat_s
        self.observer: DrainObserver | None = None
        """Called with each record; None: nothing is recorded."""
        self._wall, self._mono = wall, monotonic
        self._open: dict[str, _Open] = {}
        self._lock = threading.Lock()
        self._quiet = LogLimiter()

    def draining(self, worker: str) -> bool:
        with self._lock:
            return worker in self._open

    def start(self, worker: str, decision_id: str, reason: DrainReason, budget_s: float, *,
              started_s: float | None = None) -> None:
        """``worker`` left routing: its drain starts now, or at ``started_s`` (Unix s: one a restarted
        actuator resumes). Nothing if it is already draining."""
        now_w, now_m = self._wall(), self._mono()
        began = stamp_ns(now_w if started_s is None else min(started_s, now_w))
        with self._lock:
            if worker in self._open:
                return
            start = DrainStart(began, began, self.target, worker, decision_id, reason, budget_s)
            self._open[worker] = _Open(start, now_m - max(0.0, now_w - began / 1e9))
        self._tell(start)

    def read(self, worker: str, inflight: float | None) -> None:
        """One read of ``worker``'s in-flight work (None: unreadable); a step when one is due."""
        count = inflight_count(inflight)
        now_m = self._mono()
        with self._lock:
            o = self._open.get(worker)
            if o is None:
                return
            o.last_read = count
            gap = math.inf if o.last_step_m is None else now_m - o.last_step_m
            if not (gap >= self.heartbeat_s or (gap >= self.min_step_s and count != o.last_count)):
                return
            o.last_step_m, o.last_count = now_m, count
            s = o.start
            step = DrainStep(o.stamp(self._wall()), s.started_ns, s.target, s.worker,
                             s.decision_id, count, max(0.0, now_m - o.started_m))
        self._tell(step)

    def end(self, worker: str, outcome: DrainOutcome, then: DrainThen, *, inflight: float | None = None,
            note: str = "") -> None:
        """``worker``'s drain ended (``inflight``: the last read; by default the last :meth:`read`)."""
        now_m = self._mono()
        with self._lock:
            o = self._open.pop(worker, None)
            if o is None:
                return
            s = o.start
            count = o.last_read if inflight is None else inflight_count(inflight)
            end = DrainEnd(o.stamp(self._wall()), s.started_ns, s.target, s.worker, s.decision_id,
                           outcome, then, count, max(0.0, now_m - o.started_m), note[:NOTE_MAX])
        self._tell(end)

    def forget(self, worker: str) -> None:
        """Drop ``worker``'s drain without an end (the actuator is closing: no one acts on it now)."""
        with self._lock:
            self._open.pop(worker, None)

    def _tell(self, event: DrainEvent) -> None:
        observer = self.observer
        if observer is None:
            return
        try:
            observer(event)
        except Exception as exc:  # an observer's bug must never stop a drain
            held = self._quiet.allow("observer")
            if held is not None:
                log.warning("%s: drain record of %s not recorded (%s)%s", self.target, event.worker, exc,
                            held_note(held))
