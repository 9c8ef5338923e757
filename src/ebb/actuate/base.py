"""The :class:`Actuator` seam: read the fleet, apply a scale request — idempotent by decision id.

Guarantees every actuator gives (``tests/contract/test_actuator_contract.py`` runs them on each):

* **Idempotent by decision id.** ``apply(decision_id, request)`` acts at most once per id: a second
  call with the same id (a retry after a timeout, a controller restarted after a crash) changes
  nothing and returns the outcome recorded the first time, with ``applied=False``.
* **Never fails a request by scaling down.** Victims stop receiving new work first and are removed
  only after their in-flight work finished (local: drain; Kubernetes: the pod's own graceful
  termination, chosen through ``pod-deletion-cost``, evicted through the Eviction API so PDBs apply).
* **Victims are hints.** Named victims go first; the actuator chooses the rest (newest first) and
  reports what it removed. Unknown victim names are ignored, never an error.
* **Synchronous.** ``apply`` returns once the change is accepted by the system (workers started or
  marked draining, ``/scale`` patched), not when new replicas are ready or drained ones are gone;
  ``state()`` shows the progress. Both may raise :class:`~ebb.errors.TransientError` (retry later)
  or :class:`~ebb.errors.PermanentError` (give up); a raised ``apply`` has changed nothing that a
  retry with the same id would repeat.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
import time
from dataclasses import dataclass, replace
from typing import Protocol, runtime_checkable

from ebb.model.ids import DecisionId, ReplicaId
from ebb.model.observation import ScaleRequest

__all__ = ["ActuationResult", "Actuator", "FakeActuator", "FleetState", "ReplicaState"]


@dataclass(frozen=True)
class ReplicaState:
    """One replica of the scaled workload as the actuator sees it."""

    replica: ReplicaId
    """Stable small integer id, never reused within one actuator (what policies name as victims)."""
    name: str
    """Worker name / pod name: the key sources use in ``LiveSignals.inflight_by_replica``."""
    created_s: float
    """Unix time (s) the replica was requested."""
    ready_s: float | None
    """Unix time (s) it became ready; None while starting."""
    zone: str = ""
    """Topology zone (``topology.kubernetes.io/zone``); "" when unknown."""
    endpoint: str = ""
    """Where it serves (``http://127.0.0.1:PORT``) when the actuator knows; "" otherwise."""


@dataclass(frozen=True)
class FleetState:
    """The scaled workload now: its target and its replicas (draining ones excluded)."""

    target: str
    """The workload being scaled (``namespace/deployment`` or the local fleet's name)."""
    spec_replicas: int
    """Desired replicas (``/scale`` ``spec.replicas``): starting + ready, draining excluded."""
    replicas: tuple[ReplicaState, ...]
    """Replicas counted in ``spec_replicas``, oldest first."""
    draining: int = 0
    """Replicas removed from service and still finishing in-flight work."""

    @property
    def ready_replicas(self) -> int:
        return sum(1 for r in self.replicas if r.ready_s is not None)


@dataclass(frozen=True)
class ActuationResult:
    """What ``apply`` did (or, for a repeated id, what the first call did)."""

    decision_id: DecisionId
    applied: bool
    """True when this call changed the fleet; False for a repeated decision id (or no change)."""
    replicas_before: int
    replicas_after: int
    removed: tuple[str, ...] = ()
    """Names of the replicas taken out of service (in order)."""
    added: tuple[str, ...] = ()
    """Names of the replicas requested."""


@runtime_checkable
class Actuator(Protocol):
    """Reads and changes one workload's replica count. See the module docstring for guarantees."""

    def state(self) -> FleetState:
        """The fleet now (one consistent read)."""
        ...

    def apply(self, decision_id: DecisionId, request: ScaleRequest) -> ActuationResult:
        """Bring the fleet to ``request.replicas``, removing ``request.victims`` first; at most
        once per ``decision_id``."""
        ...


class FakeActuator:
    """In-memory actuator for unit tests: replicas become ready after ``ready_after_s`` of the
    injected clock and are removed at once on scale-down. Keeps the full contract (idempotency
    by id, victims as hints) and counts calls in ``applied_ids``."""

    def __init__(self, initial: int = 1, *, target: str = "fake/serving", ready_after_s: float = 0.0,
                 clock: Callable[[], float] | None = None, zones: tuple[str, ...] = ("a", "b", "c")) -> None:
        self._clock = clock or time.time
        self._ready_after = ready_after_s
        self._zones = zones
        self._next = 0
        self._lock = threading.Lock()
        self._replicas: list[ReplicaState] = []
        self._done: dict[DecisionId, ActuationResult] = {}
        self.applied_ids: list[DecisionId] = []
        self.target = target
        now = self._clock()
        for _ in range(initial):
            self._replicas.append(self._new(now, ready=True))

    def _new(self, now: float, ready: bool) -> ReplicaState:
        rid = ReplicaId(self._next)
        self._next += 1
        return ReplicaState(rid, f"replica-{int(rid)}", now, now if ready or self._ready_after <= 0 else None,
                            self._zones[int(rid) % len(self._zones)] if self._zones else "")

    def state(self) -> FleetState:
        with self._lock:
            now = self._clock()
            self._replicas = [r if r.ready_s is not None or now - r.created_s < self._ready_after
                              else replace(r, ready_s=r.created_s + self._ready_after) for r in self._replicas]
            return FleetState(self.target, len(self._replicas), tuple(self._replicas))

    def apply(self, decision_id: DecisionId, request: ScaleRequest) -> ActuationResult:
        with self._lock:
            if decision_id in self._done:
                return replace(self._done[decision_id], applied=False)
            before = len(self._replicas)
            want = max(0, request.replicas)
            removed: list[str] = []
            added: list[str] = []
            if want < before:
                order = [r for v in request.victims for r in self._replicas if r.replica == v]
                order += [r for r in reversed(self._replicas) if r not in order]
                gone = order[: before - want]
                removed = [r.name for r in gone]
                self._replicas = [r for r in self._replicas if r not in gone]
            elif want > before:
                now = self._clock()
                for _ in range(want - before):
                    r = self._new(now, ready=False)
                    self._replicas.append(r)
                    added.append(r.name)
            res = ActuationResult(decision_id, want != before, before, len(self._replicas), tuple(removed),
                                  tuple(added))
            self._done[decision_id] = res
            self.applied_ids.append(decision_id)
            return res
