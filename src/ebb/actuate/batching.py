"""Batched, throttled scale writes across the actuators of one controller (SPEC §3.4).

The design note bounds the state writes of a rebalance at **3 per 100 ms**, so that scaling many
workloads at once does not amplify API-server / etcd writes into decision oscillation. One
:class:`WriteBatcher` is shared by every actuator a controller drives; :meth:`WriteBatcher.wrap`
puts it in front of one (a :class:`BatchedActuator`, itself an :class:`~ebb.actuate.base.Actuator`).

Guarantees (``per_window`` = 3, ``window_s`` = 0.1 by default):

* **At most ``per_window`` writes start in any window of ``window_s``** (any half-open interval
  ``[t, t + window_s)``), across cycles and actuators. It is a token bucket of ``per_window``
  tokens in which each token comes back ``window_s`` after the write that took it started — not
  the continuous refill of :class:`ebb.ratelimit.TokenBucket`, which lets a full bucket *plus*
  its refill (6) through in one window. A write that finds no token sleeps (injected ``sleep``)
  until one is back, on the injected monotonic ``clock``: tests need no real time. So the
  ``k``-th write (0-based) starts at least ``⌊k / per_window⌋ · window_s`` after the first:
  10 writes take ≥ 300 ms.
* **One write is one** :meth:`~ebb.actuate.base.Actuator.apply`: one workload's scale change
  with the patches that prepare it (the Kubernetes actuator's victims' deletion costs, its intent
  annotation, ``/scale``, its Event). Reads (``state()``) are never throttled. The Kubernetes
  actuator's own per-call client limiter (``qps``/``burst``) still applies underneath.
* **Batches.** Writes are grouped, in the order they started, into batches of at most
  ``per_window``; batch ``b + 1`` starts at least ``window_s`` after batch ``b`` did (each of its
  writes waited for the token of its counterpart in batch ``b``). :meth:`WriteBatcher.take`
  returns the batches written since the previous call, each write with its target, decision id,
  start and end on the monotonic clock, and whether it raised — the controller records them.
* **Idempotent by decision id, as the seam promises.** ``apply`` passes the decision id and the
  request through unchanged, calls the wrapped actuator exactly once and never retries: a
  repeated id reaches the wrapped actuator, which answers ``applied=False`` as before. A write
  that raises is recorded (``ok`` false, the error) and re-raised unchanged; its token is spent
  (the request may have reached the server).

* **Tiers pass through.** An actuator with an asleep tier (a
  :class:`~ebb.actuate.base.SleepingActuator` whose ``tier`` is set) is wrapped as a
  :class:`BatchedSleepingActuator`: ``tier``, ``keep_asleep`` and ``observe_drains`` reach it
  unchanged. ``keep_asleep`` releases are not throttled (no decision id; at most the sleepers a
  policy stops counting on, once per cycle per workload).

Thread-safe: token accounting and records are under one lock; the writes themselves run outside it.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from ebb.actuate.base import ActuationResult, Actuator, FleetState, ReportsDrains, SleepingActuator
from ebb.config.tiers import SleepTier
from ebb.model.drains import DrainObserver
from ebb.model.ids import DecisionId
from ebb.model.observation import ScaleRequest

__all__ = ["BatchedActuator", "BatchedSleepingActuator", "WriteBatch", "WriteBatcher", "WriteRecord"]

T = TypeVar("T")

_MIN_SLEEP_S = 1e-6
"""Sleep at least this long when a token is due (a clock read just short of it by float rounding)."""


@dataclass(frozen=True)
class WriteRecord:
    """One write as issued."""

    target: str
    """The workload written (``namespace/deployment``)."""
    decision_id: DecisionId
    started_s: float
    """Monotonic clock (s) when the write started (after any wait for a token)."""
    ended_s: float
    """Monotonic clock (s) when it returned or raised."""
    waited_s: float
    """How long it waited for a token (s)."""
    ok: bool
    """False when the write raised."""
    error: str = ""
    """The error's type and message when it raised."""


@dataclass(frozen=True)
class WriteBatch:
    """Up to ``per_window`` writes released together (see the module docstring)."""

    index: int
    """0-based, counted from the first batch :meth:`WriteBatcher.take` returns."""
    writes: tuple[WriteRecord, ...]

    @property
    def started_s(self) -> float:
        """When its first write started (monotonic s)."""
        return self.writes[0].started_s

    @property
    def ended_s(self) -> float:
        """When its last write returned (monotonic s)."""
        return max(w.ended_s for w in self.writes)


class WriteBatcher:
    """Throttles and records the writes of every actuator it wraps (see the module docstring)."""

    def __init__(self, per_window: int = 3, window_s: float = 0.1, *,
                 clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> None:
        if isinstance(per_window, bool) or not isinstance(per_window, int) or per_window < 1:
            raise ValueError(f"per_window must be an integer >= 1, got {per_window!r}")
        if not window_s > 0:
            raise ValueError(f"window_s must be > 0, got {window_s!r}")
        self.per_window = per_window
        self.window_s = float(window_s)
        self._clock, self._sleep = clock, sleep
        self._starts: deque[float] = deque(maxlen=per_window)
        """Start times of the last ``per_window`` writes: the oldest one's token is the next due."""
        self._lock = threading.Lock()
        self._pending: list[WriteRecord] = []

    def wrap(self, actuator: Actuator, target: str | None = None) -> BatchedActuator:
        """``actuator`` behind this batcher; ``target`` names it in records (default its ``target``). An
        actuator with an asleep tier comes back as a :class:`BatchedSleepingActuator`."""
        name = target or str(getattr(actuator, "target", type(actuator).__name__))
        if isinstance(actuator, SleepingActuator) and actuator.tier is not None:
            return BatchedSleepingActuator(actuator, self, name)
        return BatchedActuator(actuator, self, name)

    def _acquire(self) -> tuple[float, float]:
        """Wait for a token; (start time, seconds waited). Called under the lock."""
        first = self._clock()
        while True:
            now = self._clock()
            if len(self._starts) < self.per_window:
                break
            due = self._starts[0] + self.window_s
            if now >= due:
                break
            self._sleep(max(due - now, _MIN_SLEEP_S))
        self._starts.append(now)
        return now, now - first

    def issue(self, target: str, decision_id: DecisionId, write: Callable[[], T]) -> T:
        """Run ``write`` once a token is free, and record it; its exception is re-raised unchanged."""
        with self._lock:
            start, waited = self._acquire()
        try:
            out = write()
        except BaseException as exc:
            self._record(WriteRecord(target, decision_id, start, self._clock(), waited, False,
                                     f"{type(exc).__name__}: {exc}"[:300]))
            raise
        self._record(WriteRecord(target, decision_id, start, self._clock(), waited, True))
        return out

    def _record(self, rec: WriteRecord) -> None:
        with self._lock:
            self._pending.append(rec)

    def take(self) -> tuple[WriteBatch, ...]:
        """The writes since the previous call, as batches (oldest first); forgets them."""
        with self._lock:
            writes, self._pending = sorted(self._pending, key=lambda w: w.started_s), []
        n = self.per_window
        return tuple(WriteBatch(i // n, tuple(writes[i:i + n])) for i in range(0, len(writes), n))


class BatchedActuator:
    """An :class:`~ebb.actuate.base.Actuator` whose ``apply`` goes through a :class:`WriteBatcher`."""

    def __init__(self, inner: Actuator, batcher: WriteBatcher, target: str) -> None:
        self.inner = inner
        """The wrapped actuator (for what the seam does not cover: ``reason``, ``evict``, ``close``)."""
        self.batcher = batcher
        self.target = target

    def state(self) -> FleetState:
        """The wrapped actuator's state (reads are not throttled)."""
        return self.inner.state()

    def apply(self, decision_id: DecisionId, request: ScaleRequest) -> ActuationResult:
        """The wrapped ``apply``, once a token is free; same id, same request, no retry."""
        return self.batcher.issue(self.target, decision_id, lambda: self.inner.apply(decision_id, request))


class BatchedSleepingActuator(BatchedActuator):
    """A :class:`BatchedActuator` over a :class:`~ebb.actuate.base.SleepingActuator` with a tier: the
    tier's seam passes through (module docstring), so the controller keeps the sleepers it counts on
    and records the drains."""

    def __init__(self, inner: SleepingActuator, batcher: WriteBatcher, target: str) -> None:
        super().__init__(inner, batcher, target)
        self._sleeping = inner

    @property
    def tier(self) -> SleepTier | None:
        return self._sleeping.tier

    def keep_asleep(self, keep: int | None) -> tuple[str, ...]:
        """The wrapped ``keep_asleep`` (not throttled)."""
        return self._sleeping.keep_asleep(keep)

    def observe_drains(self, observer: DrainObserver | None) -> None:
        """The wrapped actuator's drain records go to ``observer`` (nothing when it tells none)."""
        if isinstance(self._sleeping, ReportsDrains):
            self._sleeping.observe_drains(observer)
