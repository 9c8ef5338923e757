"""The live fleet controller on the cluster simulator's virtual clock: one engine, live seams over it.

``ebb simulate --cluster`` and ``ebb run --workloads`` share their cluster rules
(:mod:`ebb.decide.fleet_step`) and, with the simulator's exact L1, their per-workload policy. This
module lets a test check that they therefore make the same decisions: a
:class:`~ebb.sim.cluster.engine.ClusterEngine` runs the scenario second by second, and the live
:class:`~ebb.live.fleet_controller.FleetController` is its policy —

* :meth:`ClusterBridge.source` is service ``i``'s :class:`~ebb.sources.live.SignalSource`: the
  engine's second as :func:`ebb.sim.cluster.exact.service_signals` reports it, stamped in Unix time
  ``t0_unix + t`` (samples newer than the cursor only, like an agent);
* :meth:`ClusterBridge.actuator` is its :class:`~ebb.actuate.base.Actuator`: ``state()`` the
  engine's replicas (:func:`ebb.sim.cluster.exact.service_replicas`; all created at ``t0_unix``, the
  engine keeping counts only), ``apply()`` records the wanted count (idempotent by decision id),
  which the engine writes when the second ends — removing by count per zone, as the simulator does;
* :meth:`ClusterBridge.second` advances the wall clock to ``t0_unix + t``, lets the engine serve
  second ``t``, runs the caller's fleet cycle and hands the engine what was applied.

So the live loop sees exactly what the simulator's exact L1 sees, through its own code: its
controller's timeline, source cursor, staleness and completeness checks, observation, locks, the
fleet step and ``plan_scale_down``, the ledger and the actuator protocol. Test support only.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ebb.actuate.base import ActuationResult, FleetState, ReplicaState
from ebb.model.ids import DecisionId
from ebb.model.live import LiveSignals
from ebb.model.observation import FineSignals, ScaleRequest
from ebb.sim.cluster.engine import ClusterEngine, ClusterInputs, PolicyStep
from ebb.sim.cluster.exact import service_replicas, service_signals

__all__ = ["BridgeActuator", "BridgeSource", "ClusterBridge"]


class ClusterBridge:
    """One cluster engine with a live source and actuator per service (module docstring)."""

    def __init__(self, inp: ClusterInputs, *, write_limit_per_100ms: int | None, t0_unix: float = 1_000_000.0) -> None:
        self.inp = inp
        self.engine = ClusterEngine(inp, write_limit_per_100ms=write_limit_per_100ms, record_batches=False)
        self.t0 = t0_unix
        self.now = t0_unix
        """The wall clock (Unix s): give it to the controllers as their ``clock``."""
        self.step: PolicyStep | None = None
        self.wanted = np.asarray(inp.initial, dtype=np.int64).copy()

    def clock(self) -> float:
        return self.now

    def second(self, t: int, cycle: Callable[[], object]) -> None:
        """Second ``t``: the engine serves it, ``cycle()`` decides (through the actuators), the engine
        writes what was applied."""
        self.now = self.t0 + t
        self.step = self.engine.sense(t)
        self.wanted = self.step.spec.copy()
        cycle()
        self.engine.act(t, self.wanted, None)

    def source(self, i: int) -> BridgeSource:
        return BridgeSource(self, i)

    def actuator(self, i: int, target: str) -> BridgeActuator:
        return BridgeActuator(self, i, target)


class BridgeSource:
    """Service ``i``'s signals of the engine's current second (a :class:`~ebb.sources.live.SignalSource`)."""

    def __init__(self, bridge: ClusterBridge, i: int) -> None:
        self._b = bridge
        self._i = i

    def read(self, since_s: float) -> LiveSignals:
        b = self._b
        assert b.step is not None, "read before the engine's first second"
        sig = service_signals(b.step, self._i, b.inp, offset_s=b.t0)
        if not len(sig.fine.t_s) or float(sig.fine.t_s[-1]) > since_s:
            return sig
        return LiveSignals(FineSignals(), total_qps=sig.total_qps, queued=sig.queued,
                           newest_sample_s=sig.newest_sample_s)


class BridgeActuator:
    """Service ``i``'s replicas in the engine (an :class:`~ebb.actuate.base.Actuator`)."""

    def __init__(self, bridge: ClusterBridge, i: int, target: str) -> None:
        self._b = bridge
        self._i = i
        self.target = target
        self._done: dict[DecisionId, ActuationResult] = {}

    def state(self) -> FleetState:
        b = self._b
        assert b.step is not None, "state before the engine's first second"
        reps = tuple(ReplicaState(r.replica, r.name, b.t0, b.t0 if r.ready else None, r.zone)
                     for r in service_replicas(b.step, self._i, b.inp.zones))
        return FleetState(self.target, int(b.step.spec[self._i]), reps)

    def apply(self, decision_id: DecisionId, request: ScaleRequest) -> ActuationResult:
        if decision_id in self._done:
            done = self._done[decision_id]
            return ActuationResult(decision_id, False, done.replicas_before, done.replicas_after)
        before = int(self._b.wanted[self._i])
        self._b.wanted[self._i] = request.replicas
        res = ActuationResult(decision_id, request.replicas != before, before, request.replicas)
        self._done[decision_id] = res
        return res
