"""Records of the HPA replica calculator: pods, metric samples, tolerances, results, errors.

Split from :mod:`ebb.sim.baselines.hpa_calc` (which re-exports them); field meanings follow the
upstream Kubernetes API objects they mirror. Times are float seconds on one clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

class HpaCalcError(ValueError):
    """A replica computation that upstream would return as an error (message = upstream text)."""


# --------------------------------------------------------------------------- records


@dataclass(frozen=True)
class ContainerSpec:
    """One container of a pod spec (regular or init)."""

    name: str
    requests_milli: Mapping[str, int] = field(default_factory=dict)
    """Resource name -> request in milli-units; a missing key means "no request"."""
    restart_policy: str | None = None
    """Only meaningful for init containers: ``"Always"`` marks a sidecar, whose request counts."""


@dataclass(frozen=True)
class ReadyCondition:
    """The pod's ``Ready`` condition."""

    status: str
    """``"True"``, ``"False"`` or ``"Unknown"`` (Kubernetes ConditionStatus spelling)."""
    last_transition_s: float


@dataclass(frozen=True)
class PodRecord:
    """What the HPA reads from one pod returned by its label selector."""

    name: str
    phase: str = "Running"
    """``Pending`` / ``Running`` / ``Succeeded`` / ``Failed`` / ``Unknown``."""
    start_time_s: float | None = None
    """``status.startTime``; None = not set (the pod counts as unready for cpu)."""
    ready: ReadyCondition | None = None
    """None = the pod has no Ready condition."""
    deletion_set: bool = False
    """``metadata.deletionTimestamp`` is set (the pod is terminating)."""
    containers: tuple[ContainerSpec, ...] = ()
    init_containers: tuple[ContainerSpec, ...] = ()
    pod_level_requests_milli: Mapping[str, int] | None = None
    """``spec.resources.requests`` (PodLevelResources); None = unset."""


@dataclass(frozen=True)
class PodMetricSample:
    """One pod's metric value as the metrics client hands it to the calculator."""

    value_milli: int
    timestamp_s: float
    window_s: float = 60.0
    """Sampling window; upstream defaults custom (Pods) metrics to 60 s."""


@dataclass(frozen=True)
class ContainerUsage:
    """One container entry of a resource-metrics ``PodMetrics`` item."""

    name: str
    usage_milli: int | None
    """Usage of the queried resource; None = the entry lacks that resource."""


@dataclass(frozen=True)
class PodResourceMetrics:
    """One ``PodMetrics`` item of the resource metrics API (metrics.k8s.io)."""

    pod_name: str
    timestamp_s: float
    window_s: float
    containers: tuple[ContainerUsage, ...]


@dataclass(frozen=True)
class Tolerances:
    """Per-direction no-op band around ratio 1.0 (KEP-4951); both sides default to 0.1."""

    scale_down: float = 0.1
    scale_up: float = 0.1

    def is_within(self, ratio: float) -> bool:
        """True iff ``1 - scale_down <= ratio <= 1 + scale_up`` (inclusive, float64)."""
        return (1.0 - self.scale_down) <= ratio <= (1.0 + self.scale_up)


@dataclass(frozen=True)
class CalcSettings:
    """Controller-wide knobs the calculator reads (kube-controller-manager flags)."""

    tolerances: Tolerances = Tolerances()
    cpu_initialization_period_s: float = 300.0
    """``--horizontal-pod-autoscaler-cpu-initialization-period`` (5 min in production)."""
    delay_of_initial_readiness_status_s: float = 30.0
    """``--horizontal-pod-autoscaler-initial-readiness-delay`` (30 s in production)."""
    pod_level_resources_enabled: bool = True
    """PodLevelResources feature gate."""


@dataclass(frozen=True)
class PodGroups:
    """Result of :func:`group_pods`."""

    ready_pod_count: int
    unready: frozenset[str]
    missing: frozenset[str]
    ignored: frozenset[str]


@dataclass(frozen=True)
class ResourceReplicas:
    """Result of :func:`get_resource_replicas` (utilization and raw value are first-pass)."""

    replicas: int
    utilization_percent: int
    raw_value_milli: int


@dataclass(frozen=True)
class MetricReplicas:
    """Result of the non-utilization calculators."""

    replicas: int
    usage_milli: int


# --------------------------------------------------------------------------- Go numerics
