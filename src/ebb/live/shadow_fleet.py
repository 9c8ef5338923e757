"""Ebb's own fleet in ``recommend`` mode: what Ebb would have run beside the fleet that really runs.

A controller in recommend mode changes nothing, so if its policy saw the real fleet every cycle it
would only ever say "one step from where your fleet is": Ebb paces its scale-downs (one step per half
comeback horizon, at most ``down_fraction`` of the fleet) and, seeing the real fleet back at its old
size after each recommendation, would recommend the same first step again and again. To answer
"what would Ebb have done?", :class:`ShadowFleet` stands in for the actuator and keeps a fleet of
Ebb's own:

* **It starts where the real fleet is.** Its first ``state()`` copies the real fleet's replicas.
* **It follows Ebb's recorded recommendations, and only them.** :meth:`ShadowFleet.follow`, a
  controller watcher, applies every recorded ``scale_up`` / ``scale_down`` (a decision id, not acted:
  the cycle's and the fast path's): new replicas start cold and are ready ``cold_start_s`` later
  (the policy's cold start), removed ones go at once, starting ones first, then the newest. Holds,
  vetoes, refused writes, errors and a follower's cycles change nothing.
* **The real fleet is read every cycle.** ``state()`` reads the real actuator (an observed local fleet,
  a Kubernetes Deployment: read only) and keeps what it read (:attr:`ShadowFleet.as_run`); the
  fleet state it returns carries the real ready count (:attr:`~ebb.actuate.base.FleetState.real_ready`),
  so the controller's fleet-completeness check still compares the source with the replicas that
  really serve, and an incomplete read's demand is extrapolated over them, not over Ebb's.
* ``apply()`` is refused (:class:`~ebb.errors.PermanentError`), as the observed fleet's is: recommend
  mode never applies.

What this fleet cannot know: the latency Ebb's own fleet would have served. The policy sees the
signals of the real fleet (its demand is in replica units, the same whoever serves it; its TTFT is
the real fleet's), so where Ebb runs fewer replicas than the real fleet while the observed TTFT is
near the SLO, Ebb's fleet would have served worse: the shadow report counts those minutes as the
risk Ebb would have taken (:mod:`ebb.score.shadow`). A controller restarted starts its fleet from the
real one again (the policy's memory restarts too).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import replace

from ebb.actuate.base import ActuationResult, Actuator, FleetState, ReplicaState, SizedBySource
from ebb.errors import PermanentError
from ebb.live.settings import CycleOutcome
from ebb.model.ids import DecisionId, ReplicaId
from ebb.model.observation import ScaleRequest

__all__ = ["ShadowFleet"]

log = logging.getLogger(__name__)

_FOLLOWED = ("scale_up", "scale_down")


class ShadowFleet:
    """Ebb's own fleet beside ``real`` (module docstring). Not thread-safe: the controller's thread."""

    def __init__(self, real: Actuator, *, cold_start_s: float, clock: Callable[[], float] = time.time) -> None:
        if not cold_start_s >= 0:
            raise ValueError(f"cold_start_s must be >= 0, got {cold_start_s!r}")
        self.real = real
        self.cold_start_s = cold_start_s
        self._clock = clock
        self._replicas: list[ReplicaState] | None = None
        """Ebb's replicas (ready ones with ``ready_s``; starting ones have None) once the real fleet was read."""
        self._ready_at: dict[ReplicaId, float] = {}
        """Unix s each starting replica becomes ready."""
        self._next = 1
        self.as_run: int | None = None
        """The real fleet's ``spec.replicas`` at its last read; None before the first."""

    def source_saw(self, replicas: int | None) -> None:
        """Passed on to a real fleet sized by the source (:class:`~ebb.actuate.base.SizedBySource`)."""
        if isinstance(self.real, SizedBySource):
            self.real.source_saw(replicas)

    def state(self) -> FleetState:
        """Ebb's fleet, with the real fleet's ready count (module docstring); raises what the real read raises."""
        real = self.real.state()
        self.as_run = real.spec_replicas
        now = self._clock()
        if self._replicas is None:
            self._replicas = list(real.replicas)
            self._next = max((int(r.replica) for r in real.replicas), default=0) + 1
            log.info("shadow fleet: Ebb's own fleet starts at the real fleet's %d replica(s)", real.spec_replicas)
        for i, r in enumerate(self._replicas):
            at = self._ready_at.get(r.replica)
            if at is not None and at <= now:
                self._replicas[i] = replace(r, ready_s=at)
                del self._ready_at[r.replica]
        return FleetState(real.target, len(self._replicas), tuple(self._replicas), real_ready=real.ready_replicas)

    def apply(self, decision_id: DecisionId, request: ScaleRequest) -> ActuationResult:
        raise PermanentError(f"shadow fleet: recommend mode never applies (decision {decision_id} asked for "
                             f"{request.replicas} replicas); run with --mode act to let Ebb scale the fleet")

    def follow(self, out: CycleOutcome) -> None:
        """A controller watcher: Ebb's fleet takes each recorded recommendation's size (module docstring)."""
        if out.action not in _FOLLOWED or out.decision_id is None or out.acted or self._replicas is None:
            return
        self.resize(out.to_replicas)

    def resize(self, n: int) -> None:
        """Ebb's fleet to ``n`` replicas: new ones start cold, starting ones go first, then the newest."""
        if self._replicas is None or n < 0:
            return
        now = self._clock()
        while len(self._replicas) > n:
            starting = [i for i, r in enumerate(self._replicas) if r.ready_s is None]
            gone = self._replicas.pop(starting[-1] if starting else len(self._replicas) - 1)
            self._ready_at.pop(gone.replica, None)
        while len(self._replicas) < n:
            rid = ReplicaId(self._next)
            self._next += 1
            self._replicas.append(ReplicaState(rid, f"ebb-shadow-{int(rid)}", now, None))
            self._ready_at[rid] = now + self.cold_start_s
