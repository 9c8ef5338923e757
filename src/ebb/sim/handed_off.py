"""Ebb handed off to an HPA, in the simulator: what ``ebb run --serve-keda`` / ``--hand-off`` costs.

``ebb simulate --policy ebb:via=hpa`` runs Ebb's decisions the way a KEDA ScaledObject (or an HPA
on ``ebb_desired_replicas``) applies them live:

* Ebb decides every reconcile (and on its fast path) exactly as it does acting directly, on the
  observation the live hand-off shows it: while its last decision is pending — the HPA has not
  synced yet — the spec it sees is its own number (:class:`~ebb.decide.handoff.HandoffBoard`, the
  same object the live actuator uses, here on the simulator's clock).
* The HPA (:class:`~ebb.sim.baselines.hpa_controller.HpaController`, the conformance-tested
  emulator) syncs every ``sync_s`` (the kube-controller-manager's 15 s) on one External metric, Ebb's
  desired replicas, with an ``AverageValue`` target of 1, the ScaledObject's documented behavior
  (:data:`DOCUMENTED_BEHAVIOR`: no stabilisation, any step) and the HPA's tolerance (0.1 by
  default: a change of at most 10 % of the fleet is not applied; ``hpa_tolerance=0`` is the
  per-HPA tolerance of Kubernetes >= 1.33's HPAConfigurableTolerance).
* The HPA's scale-down removes Ebb's victims (Ebb set their ``pod-deletion-cost``).

What the indirection costs is the scorecard difference between ``ebb`` and ``ebb:via=hpa``
(docs/keda.md quotes it with the command). No tier: the hand-off refuses one, live and here.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Final

from ebb.decide.handoff import HandoffBoard
from ebb.decide.base import Policy, react_of
from ebb.model.decision import Decision
from ebb.model.ids import ReplicaId
from ebb.model.observation import Observation, Pipeline
from ebb.model.spans import NO_SPANS, Spans
from ebb.sim.baselines.hpa_behavior import Behavior, ScalingPolicy, ScalingRules
from ebb.sim.baselines.hpa_controller import HpaConfig, HpaController, MetricSpec

__all__ = ["DOCUMENTED_BEHAVIOR", "HandedOff", "handoff_hpa"]

_TARGET: Final = "sim/serving"

DOCUMENTED_BEHAVIOR: Final = Behavior(
    scale_up=ScalingRules(stabilization_window_s=0, select_policy="Max",
                          policies=(ScalingPolicy("Percent", 1000, 15), ScalingPolicy("Pods", 1000, 15))),
    scale_down=ScalingRules(stabilization_window_s=0, select_policy="Max",
                            policies=(ScalingPolicy("Percent", 100, 15),)))
"""The ``horizontalPodAutoscalerConfig.behavior`` of deploy/examples/keda (docs/keda.md): no
stabilisation either way and steps as large as Ebb asks — Ebb paces itself."""


def handoff_hpa(min_replicas: int, max_replicas: int, tolerance: float = 0.1) -> HpaController:
    """The HPA a ScaledObject on Ebb's scaler creates: External metric, AverageValue 1, documented behavior."""
    return HpaController(HpaConfig(metric=MetricSpec.external_average_value(1000), min_replicas=min_replicas,
                                   max_replicas=max_replicas, tolerance=tolerance, behavior=DOCUMENTED_BEHAVIOR,
                                   downscale_stabilization_s=0))


class HandedOff:
    """``inner``'s decisions applied by ``hpa`` every ``sync_s`` (module docstring); a :class:`Policy`."""

    def __init__(self, inner: Policy, hpa: HpaController, *, sync_s: float = 15.0, spec: str = "") -> None:
        self.inner, self.hpa, self.sync_s = inner, hpa, sync_s
        self._spec = spec or f"{inner.spec}:via=hpa"
        self._t_s = 0.0
        self._board = HandoffBoard(stale_after_s=math.inf, clock=lambda: self._t_s)
        self._next_sync_s: float | None = None
        self._victims: tuple[ReplicaId, ...] = ()
        self._fast = react_of(inner)

    @property
    def spec(self) -> str:
        return self._spec

    @property
    def interval_s(self) -> float:
        return self.inner.interval_s

    @property
    def pipeline(self) -> Pipeline:
        return self.inner.pipeline

    @property
    def react_interval_s(self) -> float | None:
        return None if self._fast is None else self._fast.react_interval_s

    def gate_queries(self) -> tuple[str, ...]:
        return self.inner.gate_queries()

    def observe(self, obs: Observation) -> None:
        self.inner.observe(self._shown(obs))

    def react(self, obs: Observation, *, spans: Spans = NO_SPANS) -> Decision | None:
        """Ebb's fast path hands its scale-up off at once; the HPA applies it at its next sync."""
        if self._fast is not None and (d := self._fast.react(self._shown(obs), spans=spans)) is not None:
            self._hand_off(d)
        return None

    def decide(self, obs: Observation, *, spans: Spans = NO_SPANS) -> Decision:
        if self._next_sync_s is None and obs.spec_replicas == 0:
            # The simulator's t = 0 question, "what fleet was serving already?": Ebb's answer, as it is.
            start = self.inner.decide(obs, spans=spans)
            self._board.spec_seen(_TARGET, start.to_replicas)
            return start
        self._hand_off(self.inner.decide(self._shown(obs), spans=spans))
        return self._synced(obs)

    def _shown(self, obs: Observation) -> Observation:
        """The observation the live hand-off shows Ebb: a pending hand-off is the spec."""
        self._t_s = obs.t_s
        shown = self._board.spec_seen(_TARGET, obs.spec_replicas)
        return obs if shown == obs.spec_replicas else replace(obs, spec_replicas=shown)

    def _hand_off(self, d: Decision) -> None:
        if d.changes:
            self._board.hand_off(_TARGET, d.to_replicas)
            self._victims = d.victims if d.action == "scale_down" else ()

    def _synced(self, obs: Observation) -> Decision:
        """The HPA's answer when a sync falls due (every ``sync_s`` on its own clock), else a hold."""
        now, spec = obs.t_s, obs.spec_replicas
        if self._next_sync_s is not None and now < self._next_sync_s:
            return Decision.change(now, spec, spec, policy=self._spec)
        self._next_sync_s = (math.floor(now / self.sync_s) + 1) * self.sync_s
        reading = self._board.reading(_TARGET)
        desired = spec if reading is None else reading.desired_replicas
        want = self.hpa.reconcile(now, spec, spec, (), {}, external_values_milli=(1000 * desired,)).desired_replicas
        if want == spec:
            return Decision.change(now, spec, spec, policy=self._spec)
        present = {p.replica for p in obs.pods}
        victims = tuple(v for v in self._victims if v in present)[: max(0, spec - want)]
        return Decision.change(now, spec, want, policy=self._spec, victims=victims,
                               reasons=(f"the HPA applies Ebb's {desired} (sync every {self.sync_s:g} s)",))
