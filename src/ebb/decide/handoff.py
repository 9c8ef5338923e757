"""The hand-off: Ebb decides the replicas, an HPA or a KEDA ScaledObject applies them.

In hand-off mode (``ebb run --serve-keda ADDR`` or ``--hand-off``) the Kubernetes actuator does
everything it does in ``act`` mode — victims' deletion costs, the decision's intent annotation, the
Event — except the ``/scale`` write: it hands the number to a :class:`HandoffBoard`, which the
KEDA external scaler (:mod:`ebb.actuate.keda_scaler`) and the ``ebb_desired_replicas`` gauge serve.
The HPA the ScaledObject owns then writes ``/scale``, so there is one writer.

Guarantees of :class:`HandoffBoard` (thread-safe; one lock, no I/O):

* **What is served is what was decided.** :meth:`HandoffBoard.desired` is the replica count of the
  last decision handed off for the target; before any, the ``spec.replicas`` the actuator last read
  (so a restarted controller asks for the fleet as it is, never less).
* **The policy sees its own number, as in act mode.** While a hand-off is *pending* (the Deployment
  has not reached it yet), :meth:`HandoffBoard.spec_seen` reports the handed-off count as
  ``spec.replicas``: the policy decides on the fleet it asked for, exactly as it does after its own
  ``/scale`` write, so its next decision is the one act mode would make. A hand-off the Deployment
  has not reached within ``apply_within_s`` (default 60 s: four of the HPA's 15 s sync periods) is
  reported as it is, with one warning naming the likely cause (the ScaledObject's min/max, or a
  second scaler); the board goes on serving the decided number.
* **Sized for the slower comeback.** Capacity Ebb asks for arrives at the HPA's next sync (at most
  15 s later) plus the cold start: a handed-off Ebb sizes for :func:`handed_off_cold_start_s`.
* **Never served stale.** A target whose actuator has not read the fleet for ``stale_after_s``
  (default 30 s) has no answer (:meth:`HandoffBoard.reading` returns None): the scaler then fails
  the call, and KEDA's ``fallback`` with ``behavior: currentReplicasIfHigher`` keeps the current
  replicas — an Ebb outage never scales a fleet down.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

__all__ = ["HPA_SYNC_S", "HandoffBoard", "HandoffReading", "handed_off_cold_start_s"]

log = logging.getLogger(__name__)

HPA_SYNC_S: Final = 15.0
"""kube-controller-manager's ``--horizontal-pod-autoscaler-sync-period`` default (s)."""


def handed_off_cold_start_s(cold_start_s: float, sync_s: float = HPA_SYNC_S) -> float:
    """The comeback time Ebb sizes for when an HPA applies its numbers: capacity it asks for starts
    at the HPA's next sync, at most ``sync_s`` later, then takes the cold start. Ebb acting directly
    sizes for ``cold_start_s``; handed off, for ``cold_start_s + sync_s`` (the worst case)."""
    return cold_start_s + sync_s


@dataclass(frozen=True)
class HandoffReading:
    """One target's numbers as the scaler serves them."""

    target: str
    """``namespace/deployment``."""
    desired_replicas: int
    """What Ebb decided (the last hand-off, else the spec first read)."""
    current_replicas: int
    """``spec.replicas`` as the actuator last read it from the API server."""
    age_s: float
    """Seconds since the actuator last read the fleet (monotonic)."""


@dataclass
class _Entry:
    desired: int
    current: int
    read_at_s: float
    pending_since_s: float | None = None
    warned: bool = False


class HandoffBoard:
    """Each target's handed-off replicas (module docstring). Targets are ``namespace/deployment``."""

    def __init__(self, *, apply_within_s: float = 60.0, stale_after_s: float = 30.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if not (apply_within_s > 0 and stale_after_s > 0):
            raise ValueError(f"apply_within_s and stale_after_s must be > 0, got {apply_within_s}, {stale_after_s}")
        self.apply_within_s, self.stale_after_s = apply_within_s, stale_after_s
        self._clock = clock
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._entries: dict[str, _Entry] = {}
        self._version = 0

    # -- the actuator's side ----------------------------------------------------------------------
    def spec_seen(self, target: str, spec_replicas: int) -> int:
        """Record a read of the Deployment's ``spec.replicas``; return what the policy should take as
        the spec: the pending hand-off while the Deployment has not reached it (module docstring)."""
        now = self._clock()
        with self._lock:
            e = self._entries.get(target)
            if e is None:
                self._entries[target] = _Entry(spec_replicas, spec_replicas, now)
                self._bump()
                return spec_replicas
            e.current, e.read_at_s = spec_replicas, now
            if e.pending_since_s is None:
                return spec_replicas
            if spec_replicas == e.desired:
                e.pending_since_s, e.warned = None, False
                return spec_replicas
            if now - e.pending_since_s <= self.apply_within_s:
                return e.desired
            if not e.warned:
                e.warned = True
                log.warning("%s: the HPA has not applied Ebb's %d replicas in %.0f s (spec.replicas is %d); "
                            "check the ScaledObject's minReplicaCount/maxReplicaCount and that no other "
                            "scaler owns the Deployment (`ebb lint`)", target, e.desired, self.apply_within_s,
                            spec_replicas)
            return spec_replicas

    def hand_off(self, target: str, replicas: int) -> None:
        """A decision's replica count, for the HPA to apply; pending until the Deployment reaches it."""
        if replicas < 0:
            raise ValueError(f"replicas must be >= 0, got {replicas}")
        now = self._clock()
        with self._lock:
            e = self._entries.get(target)
            changed = e is None or e.desired != replicas
            if e is None:
                e = self._entries[target] = _Entry(replicas, replicas, now)
            e.desired = replicas
            e.pending_since_s = None if e.current == replicas else now
            e.warned = False
            if changed:
                self._bump()

    # -- the scaler's side ------------------------------------------------------------------------
    def reading(self, target: str) -> HandoffReading | None:
        """The target's numbers; None when it is unknown or its last read is older than ``stale_after_s``."""
        now = self._clock()
        with self._lock:
            e = self._entries.get(target)
            if e is None or now - e.read_at_s > self.stale_after_s:
                return None
            return HandoffReading(target, e.desired, e.current, now - e.read_at_s)

    def targets(self) -> tuple[str, ...]:
        """Every target the board has seen, sorted."""
        with self._lock:
            return tuple(sorted(self._entries))

    def wait_change(self, version: int, timeout_s: float) -> int:
        """Block until the board changed after ``version`` (or ``timeout_s``); return the version now.
        A streaming call waits here between its updates."""
        with self._changed:
            self._changed.wait_for(lambda: self._version != version, timeout=timeout_s)
            return self._version

    @property
    def version(self) -> int:
        with self._lock:
            return self._version

    def _bump(self) -> None:
        self._version += 1
        self._changed.notify_all()
