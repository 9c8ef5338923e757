"""One Kubernetes HorizontalPodAutoscaler, reconciled on a virtual clock.

:class:`HpaController` reproduces upstream ``reconcileAutoscaler`` (kubernetes/kubernetes
``pkg/controller/podautoscaler/horizontal.go``, Apache-2.0) for a single HPA with a single
metric: bounds check, metric proposal (:mod:`ebb.sim.baselines.hpa_calc`), normalization
(:mod:`ebb.sim.baselines.hpa_behavior`), and the per-HPA state kept between reconciles
(recommendation history, scale events). The simulator calls :meth:`HpaController.reconcile`
every sync period (15 s in production) of virtual time.

Guarantees:

* Deterministic: the output depends only on the config, the call sequence and its inputs.
* Faithful to upstream for the supported metric kinds, including first-reconcile seeding
  (no scale-down inside the first stabilization window), the legacy ``max(2 x current, 4)``
  scale-up cap, behavior policies and per-direction tolerances.
* A metric error leaves the replica count unchanged (upstream returns before normalizing).
* ``desired_replicas`` is never negative; it is within [min, max] whenever the controller
  moves the count (and is min/max itself when the current count is outside them).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, NamedTuple

from ebb.sim.baselines import hpa_calc as calc
from ebb.sim.baselines.hpa_behavior import (
    LEGACY_SCALE_UP_LIMIT_FACTOR,
    LEGACY_SCALE_UP_LIMIT_MINIMUM,
    Behavior,
    Recommendation,
    ResolvedRules,
    ScaleEventLog,
    convert_desired_replicas_with_behavior_rate,
    convert_desired_replicas_with_rules,
    resolve_scale_down_rules,
    resolve_scale_up_rules,
    stabilize_recommendation,
    stabilize_recommendation_with_behaviors,
)
from ebb.sim.baselines.hpa_calc import HpaCalcError, PodMetricSample, PodRecord

MetricSource = Literal["Pods", "Resource", "ContainerResource", "Object", "External"]
TargetType = Literal["Utilization", "AverageValue", "Value"]

_ALLOWED_TARGETS: dict[str, frozenset[str]] = {
    "Pods": frozenset({"AverageValue"}),
    "Resource": frozenset({"Utilization", "AverageValue"}),
    "ContainerResource": frozenset({"Utilization", "AverageValue"}),
    "Object": frozenset({"Value", "AverageValue"}),
    "External": frozenset({"Value", "AverageValue"}),
}


@dataclass(frozen=True)
class MetricSpec:
    """One ``spec.metrics[]`` entry: a source and its target."""

    source: MetricSource
    target_type: TargetType
    target: int
    """Percent of the request for Utilization; milli-units for AverageValue / Value."""
    resource: str = "cpu"
    """Resource of a Resource / ContainerResource source (readiness rules apply to cpu only)."""
    container: str = ""
    """Container name for ContainerResource; "" = whole pod."""

    def __post_init__(self) -> None:
        if self.target_type not in _ALLOWED_TARGETS[self.source]:
            raise ValueError(f"{self.source} metrics do not support a {self.target_type} target")
        if self.target <= 0:
            raise ValueError(f"metric target must be positive, got {self.target}")
        if (self.source == "ContainerResource") != (self.container != ""):
            raise ValueError("a container name is required for, and only for, ContainerResource")

    @classmethod
    def pods_average_value(cls, target_milli: int) -> MetricSpec:
        """Pods metric, e.g. in-flight requests per pod (1 request = 1000 milli)."""
        return cls("Pods", "AverageValue", target_milli)

    @classmethod
    def resource_utilization(cls, resource: str, target_percent: int) -> MetricSpec:
        """Resource metric as percent of the request, e.g. GPU util with request 100."""
        return cls("Resource", "Utilization", target_percent, resource=resource)

    @classmethod
    def external_value(cls, target_milli: int) -> MetricSpec:
        """External metric compared as a total, e.g. cluster QPS."""
        return cls("External", "Value", target_milli)

    @classmethod
    def external_average_value(cls, target_milli: int) -> MetricSpec:
        """External metric divided by ``status.replicas``, e.g. QPS per replica."""
        return cls("External", "AverageValue", target_milli)


@dataclass(frozen=True)
class HpaConfig:
    """One HPA's spec plus the kube-controller-manager flags that shape its decisions."""

    metric: MetricSpec
    """The single metric this HPA scales on (multi-metric max is not emulated)."""
    max_replicas: int
    """``spec.maxReplicas``; required upstream, so no default."""
    min_replicas: int = 1
    """``spec.minReplicas`` in replicas; 1 is upstream's default when unset (0 = HPAScaleToZero)."""
    tolerance: float = 0.1
    """Fraction; ``--horizontal-pod-autoscaler-tolerance`` default 0.1: ratios in
    [0.9, 1.1] are a no-op, to avoid flapping on noise."""
    downscale_stabilization_s: int = 300
    """Seconds; ``--horizontal-pod-autoscaler-downscale-stabilization`` default 5 min: a
    scale-down follows the highest recommendation of this window so dips do not thrash."""
    cpu_initialization_period_s: float = 300.0
    """Seconds; ``--horizontal-pod-autoscaler-cpu-initialization-period`` default 5 min:
    cpu samples of just-started pods are distrusted (start-up spikes)."""
    initial_readiness_delay_s: float = 30.0
    """Seconds; ``--horizontal-pod-autoscaler-initial-readiness-delay`` default 30 s: a pod
    unready this soon after start counts as never-ready (its cpu samples are skipped)."""
    behavior: Behavior | None = None
    """``spec.behavior``; None selects the legacy path (window max + ``max(2x, 4)`` cap)."""
    scale_up_limit_factor: float = LEGACY_SCALE_UP_LIMIT_FACTOR
    """Legacy cap factor; 2.0 in production (upstream tests use 8.0)."""
    scale_up_limit_minimum: float = LEGACY_SCALE_UP_LIMIT_MINIMUM
    """Legacy cap floor in replicas; 4.0 in production, so tiny deployments can grow."""
    configurable_tolerance: bool = True
    """HPAConfigurableTolerance gate: behavior rules' ``tolerance`` overrides one side."""

    def __post_init__(self) -> None:
        if not 0 <= self.min_replicas <= self.max_replicas or self.max_replicas < 1:
            raise ValueError("need 0 <= min_replicas <= max_replicas and max_replicas >= 1")


class HpaDecision(NamedTuple):
    """What one reconcile decides. ``reason`` is an upstream condition reason, or
    ``AboveMaxReplicas`` / ``BelowMinReplicas`` / ``ScalingDisabled`` / ``FailedGetMetrics``."""

    desired_replicas: int
    reason: str


class HpaController:
    """Per-HPA controller state plus the reconcile step. Not thread-safe (one HPA, one clock)."""

    def __init__(self, config: HpaConfig) -> None:
        self.config = config
        self._recommendations: list[Recommendation] = []
        self._events = ScaleEventLog()
        self._scaled_to_zero = False
        self._up_rules: ResolvedRules | None = None
        self._down_rules: ResolvedRules | None = None
        if config.behavior is not None:
            self._up_rules = resolve_scale_up_rules(config.behavior.scale_up)
            self._down_rules = resolve_scale_down_rules(
                config.behavior.scale_down, config.downscale_stabilization_s
            )
        self.last_error: str | None = None
        """Message of the last metric error (None after a successful metric read)."""

    @property
    def recommendations(self) -> tuple[Recommendation, ...]:
        return tuple(self._recommendations)

    @property
    def events(self) -> ScaleEventLog:
        return self._events

    def tolerances(self) -> calc.Tolerances:
        """Effective per-direction tolerances (behavior overrides when the gate is on)."""
        down = up = self.config.tolerance
        if self.config.configurable_tolerance:
            if self._up_rules is not None and self._up_rules.tolerance is not None:
                up = self._up_rules.tolerance
            if self._down_rules is not None and self._down_rules.tolerance is not None:
                down = self._down_rules.tolerance
        return calc.Tolerances(scale_down=down, scale_up=up)

    def reconcile(
        self,
        now_s: float,
        spec_replicas: int,
        status_replicas: int,
        pods: Sequence[PodRecord],
        metrics_by_pod: Mapping[str, PodMetricSample],
        *,
        object_value_milli: int | None = None,
        external_values_milli: Sequence[int] = (),
    ) -> HpaDecision:
        """One reconcile at ``now_s``; returns the replica count to set and why.

        ``metrics_by_pod`` holds the per-pod values of a Pods metric or the resource usage
        (pod total, or the named container's) of a Resource metric; build it from raw
        resource-metrics items with :func:`hpa_calc.resource_metric_samples`. Object and
        External metrics read the keyword arguments instead.
        """
        cfg = self.config
        current = spec_replicas
        if not self._recommendations:
            # Seeding with the current size blocks any scale-down for one window after start.
            self._recommendations.append(Recommendation(current, now_s))
        if current != 0:
            self._scaled_to_zero = False
        reason: str
        if current == 0 and not self._may_scale_from_zero():
            return HpaDecision(0, "ScalingDisabled")
        if current > cfg.max_replicas:
            desired, reason = cfg.max_replicas, "AboveMaxReplicas"
        elif current < cfg.min_replicas:
            desired, reason = cfg.min_replicas, "BelowMinReplicas"
        else:
            try:
                proposal = self._proposal(
                    now_s,
                    current,
                    status_replicas,
                    pods,
                    metrics_by_pod,
                    object_value_milli,
                    external_values_milli,
                )
            except HpaCalcError as err:
                self.last_error = str(err)
                return HpaDecision(current, "FailedGetMetrics")
            self.last_error = None
            desired, reason = self._normalize(now_s, current, max(0, proposal))
        if current == 0 and cfg.min_replicas != 0 and desired < cfg.min_replicas:
            desired = cfg.min_replicas
        if desired != current:
            self._events.record(self._up_rules, self._down_rules, current, desired, now_s)
            self._scaled_to_zero = desired == 0
        return HpaDecision(desired, reason)

    def _may_scale_from_zero(self) -> bool:
        # HPAScaleToZero: only an HPA that scaled itself to zero may scale back out, and
        # only if it has a floor or a metric that exists without pods.
        return self._scaled_to_zero and (
            self.config.min_replicas != 0 or self.config.metric.source in ("Object", "External")
        )

    def _proposal(
        self,
        now_s: float,
        spec_replicas: int,
        status_replicas: int,
        pods: Sequence[PodRecord],
        metrics_by_pod: Mapping[str, PodMetricSample],
        object_value_milli: int | None,
        external_values_milli: Sequence[int],
    ) -> int:
        cfg = self.config
        m = cfg.metric
        tol = self.tolerances()
        settings = calc.CalcSettings(
            tolerances=tol,
            cpu_initialization_period_s=cfg.cpu_initialization_period_s,
            delay_of_initial_readiness_status_s=cfg.initial_readiness_delay_s,
        )
        if m.source == "Pods":
            return calc.get_metric_replicas(
                spec_replicas, m.target, pods, metrics_by_pod, now_s, settings
            ).replicas
        if m.source in ("Resource", "ContainerResource"):
            if not metrics_by_pod:
                raise HpaCalcError(
                    f"unable to get metrics for resource {m.resource}: "
                    "no metrics returned from resource metrics API"
                )
            if m.target_type == "Utilization":
                return calc.get_resource_replicas(
                    spec_replicas,
                    m.target,
                    m.resource,
                    pods,
                    metrics_by_pod,
                    now_s,
                    settings,
                    m.container,
                ).replicas
            return calc.get_raw_resource_replicas(
                spec_replicas, m.target, m.resource, pods, metrics_by_pod, now_s, settings
            ).replicas
        if m.source == "Object":
            if object_value_milli is None:
                raise HpaCalcError("unable to get metric: no object metric value")
            if m.target_type == "Value":
                return calc.get_object_metric_replicas(
                    spec_replicas, m.target, object_value_milli, pods, tol
                ).replicas
            return calc.get_object_per_pod_metric_replicas(
                status_replicas, m.target, object_value_milli, tol
            ).replicas
        if m.target_type == "Value":
            return calc.get_external_metric_replicas(
                spec_replicas, m.target, external_values_milli, pods, tol
            ).replicas
        return calc.get_external_per_pod_metric_replicas(
            status_replicas, m.target, external_values_milli, tol
        ).replicas

    def _normalize(self, now_s: float, current: int, desired: int) -> tuple[int, str]:
        cfg = self.config
        if self._up_rules is None or self._down_rules is None:
            stabilized = stabilize_recommendation(
                self._recommendations, desired, now_s, cfg.downscale_stabilization_s
            )
            stab_reason = "ScaleDownStabilized"
            result, reason = convert_desired_replicas_with_rules(
                current,
                stabilized,
                cfg.min_replicas,
                cfg.max_replicas,
                cfg.scale_up_limit_factor,
                cfg.scale_up_limit_minimum,
            )
        else:
            stabilized, stab_reason = stabilize_recommendation_with_behaviors(
                self._recommendations,
                current,
                desired,
                now_s,
                self._up_rules.stabilization_window_s,
                self._down_rules.stabilization_window_s,
            )
            result, reason = convert_desired_replicas_with_behavior_rate(
                current,
                stabilized,
                cfg.min_replicas,
                cfg.max_replicas,
                self._up_rules,
                self._down_rules,
                self._events,
                now_s,
            )
        if reason == "DesiredWithinRange" and stabilized != desired:
            reason = stab_reason
        return result, reason
