"""The desired/current replica gauges, fed by a controller's cycles (a :class:`~ebb.live.controller.Controller` watcher).

``ebb_desired_replicas{namespace,deployment,mode}`` is what Ebb decided for the target at its last
cycle, ``ebb_current_replicas`` the target's ``spec.replicas`` as it read it
(:meth:`ebb.telemetry.metrics.EbbMetrics.replicas`). Rules, per cycle outcome:

* a decision (``hold``, ``scale_up``, ``scale_down``, ``veto``): current = the spec read, desired = the
  decision's target (in ``act`` mode the replicas after acting; in ``recommend`` mode what Ebb would
  have asked for; a veto keeps the spec);
* a follower's cycle: both are the spec it read (a follower decides nothing, so it asks for no change);
* an error: nothing changes (the gauges keep the last decision; Prometheus' staleness and
  ``ebb_cycles_total{result="error"}`` tell the outage);
* ``recommend`` mode with Ebb's own fleet (:mod:`ebb.live.shadow_fleet`): the outcome's spec is Ebb's
  fleet, so current is the real fleet's spec (``as_run``, when set) and desired is Ebb's fleet after
  the cycle;
* ``mode="handoff"`` (:mod:`ebb.decide.handoff`): desired is the board's handed-off count and current
  the Deployment's real ``spec.replicas`` (the outcome's spec is the pending hand-off).
"""

from __future__ import annotations

from collections.abc import Callable

from ebb.decide.handoff import HandoffBoard
from ebb.live.settings import CycleOutcome
from ebb.telemetry.metrics import EbbMetrics

__all__ = ["ReplicaGauge"]

_DECISIONS = frozenset({"hold", "scale_up", "scale_down", "veto"})


class ReplicaGauge:
    """Call it with each cycle's outcome of ``target``; it sets the two gauges (module docstring)."""

    def __init__(self, metrics: EbbMetrics, target: str, mode: str, board: HandoffBoard | None = None) -> None:
        self.metrics, self.target, self.board = metrics, target, board
        self.mode = "handoff" if board is not None else mode
        self.as_run: Callable[[], int | None] | None = None
        """The real fleet's spec when the outcome's is not (recommend mode's own fleet); None: the outcome's."""

    def __call__(self, out: CycleOutcome) -> None:
        if self.board is not None:
            reading = self.board.reading(self.target)
            if reading is not None and out.action != "error":
                self.metrics.replicas(self.target, self.mode, current=reading.current_replicas,
                                      desired=reading.desired_replicas)
            return
        real = self.as_run() if self.as_run is not None else None
        current = out.spec_replicas if real is None else real
        if out.action in _DECISIONS:
            self.metrics.replicas(self.target, self.mode, current=current, desired=out.to_replicas)
        elif out.action == "follower" and out.spec_replicas > 0:
            self.metrics.replicas(self.target, self.mode, current=current, desired=out.spec_replicas)
