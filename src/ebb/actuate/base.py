"""The :class:`Actuator` seam: read the fleet, apply a scale request — idempotent by decision id.

Guarantees every actuator gives (``tests/contract/test_actuator_contract.py`` runs them on each,
and on the in-memory fake :class:`ebb.testing.fakes.FakeActuator`):

* **Idempotent by decision id.** ``apply(decision_id, request)`` acts at most once per id: a second
  call with the same id (a retry after a timeout, a controller restarted after a crash) changes
  nothing and returns the outcome recorded the first time, with ``applied=False``.
* **Never fails a request by scaling down.** Victims stop receiving new work first and are removed
  only after their in-flight work finished (local: drain; Kubernetes: the pod's own graceful
  termination, chosen through ``pod-deletion-cost``, evicted through the Eviction API so PDBs apply;
  with an asleep tier, a label takes the victim out of its Service and it sleeps only once its
  engine reads no request in flight: :mod:`ebb.actuate.kube_tier`).
* **Victims are hints.** Named victims go first; the actuator chooses the rest (newest first) and
  reports what it removed. Unknown victim names are ignored, never an error.
* **Synchronous.** ``apply`` returns once the change is accepted by the system (workers started or
  marked draining, ``/scale`` patched), not when new replicas are ready or drained ones are gone;
  ``state()`` shows the progress. Both may raise :class:`~ebb.errors.TransientError` (retry later)
  or :class:`~ebb.errors.PermanentError` (give up); a raised ``apply`` has changed nothing that a
  retry with the same id would repeat.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from ebb.config.tiers import SleepTier
from ebb.model.drains import DrainObserver
from ebb.model.ids import DecisionId, ReplicaId
from ebb.model.observation import ScaleRequest

__all__ = ["ActuationResult", "Actuator", "FleetState", "ReplicaState", "ReportsDrains", "SizedBySource",
           "SleepingActuator"]


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
    asleep: tuple[ReplicaState, ...] = ()
    """Replicas asleep (an asleep tier, :class:`SleepingActuator`): out of routing, not in
    ``spec_replicas``, holding their GPU; oldest sleeper first. Always empty without a tier."""
    wake_s_seen: float | None = None
    """The slowest wake this actuator has measured (the wake call until the replica is back in
    service), s; None before any wake or without a tier. A policy learns its tier's wake time
    upward from it (:func:`~ebb.decide.tier_rules.learned_wake_s`)."""
    real_ready: int | None = None
    """Ready replicas of the fleet that really serves, when these replicas are not it (None: they
    are). A shadow fleet (Ebb's own, in recommend mode: :mod:`ebb.live.shadow_fleet`) stands beside
    the real one, whose replicas the source's samples cover: :attr:`source_ready`."""

    @property
    def ready_replicas(self) -> int:
        return sum(1 for r in self.replicas if r.ready_s is not None)

    @property
    def source_ready(self) -> int:
        """The ready replicas the source's samples should cover (the controller's fleet-completeness
        check): :attr:`real_ready` when set, else :attr:`ready_replicas`."""
        return self.ready_replicas if self.real_ready is None else self.real_ready


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


@runtime_checkable
class SleepingActuator(Actuator, Protocol):
    """An :class:`Actuator` with an asleep tier (``tier``; None: it behaves exactly as a plain one).

    The same lifecycle as the simulator's (:mod:`ebb.sim.sleepers`), so a policy decides alike on both:

    * **Who sleeps.** A victim leaves routing and drains first (as every actuator's victims do); when
      its drain ends and fewer than ``tier.max_replicas`` sleep, it is put to sleep through its
      engine (vLLM ``POST /sleep``) instead of removed, and shows in :attr:`FleetState.asleep`.
    * **Who wakes.** A scale-up in ``apply`` wakes sleepers first, the most recent sleeper first,
      and starts cold replicas only for the rest. A woken replica rejoins routing once its engine
      says it is awake (``GET /is_sleeping`` false) and answers. A wake that fails or takes past
      ``max(10 s, 5 x tier.wake_s)`` falls back at once: the sleeper is removed and a cold replica
      started in its place, and the fault is logged.
    * **How long.** A sleeper past ``tier.ttl_s`` is released (stopped, its GPU freed);
      :meth:`keep_asleep` releases the oldest past what the policy still counts on.
    """

    tier: SleepTier | None

    def keep_asleep(self, keep: int | None) -> tuple[str, ...]:
        """Release the oldest sleepers until at most ``keep`` sleep (None: only the TTL decides);
        the names released."""
        ...


@runtime_checkable
class ReportsDrains(Protocol):
    """An actuator that tells each drain of a victim as records (:mod:`ebb.model.drains`): its start,
    its in-flight work at bounded steps and its end (:mod:`ebb.actuate.drain_report` states the bound).

    The live controller passes an observer that writes them to the ledger; an actuator never imports
    the ledger. The observer is called on the actuator's own threads and must only queue.
    """

    def observe_drains(self, observer: DrainObserver | None) -> None:
        """Send every drain record from now on to ``observer`` (None: stop)."""
        ...


@runtime_checkable
class SizedBySource(Protocol):
    """An actuator that learns its fleet's size from the signal source: a fleet Ebb observes but does
    not own (:class:`~ebb.actuate.observed.ObservedFleet` without ``--workers``). The controller tells
    it, before each cycle's ``state()``, how many replicas the cycle's fresh read covered."""

    def source_saw(self, replicas: int | None) -> None:
        """The replicas behind the freshest read (:attr:`~ebb.model.live.LiveSignals.replicas_seen`;
        None: the read said nothing about them)."""
        ...
