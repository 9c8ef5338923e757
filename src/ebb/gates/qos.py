"""Pod QoS class, computed exactly as Kubernetes' ``ComputePodQOS`` does (SPEC §3.5).

Port of ``pkg/apis/core/v1/helper/qos/qos.go`` (kubernetes/kubernetes, Apache-2.0), pinned by
the 26 upstream ``TestComputePodQOS`` cases in ``tests/data/conformance/qos.json``.

Rules (conformance README §6.9):

* Only ``cpu`` and ``memory`` count, and only strictly positive quantities; every other
  resource (hugepages, ``nvidia.com/gpu``, ...) and every zero is ignored.
* **Pod-level branch.** Taken when the ``PodLevelResources`` gate is on, the pod has
  ``spec.resources`` (``pod_level`` is not None) and either the
  ``PodLevelResourcesFixKubeletQOSClass`` gate is off or the pod-level requests/limits hold a
  ``cpu`` or ``memory`` key (a zero value counts as set). Requests and limits then come from
  ``spec.resources`` alone; a non-empty limits list without positive limits for both cpu and
  memory makes the pod not Guaranteed.
* **Container branch** (otherwise): containers and all init containers are summed per
  resource; any container without positive limits for both cpu and memory makes the pod not
  Guaranteed.
* No requests and no limits → BestEffort. Guaranteed iff still possible, every summed request
  equals the summed limit, and both lists name the same number of resources. Else Burstable.

Pure: stdlib only, no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

# Defined in the planning layer (ebb.decide may not import ebb.gates) and re-exported here.
from ebb.decide.quota import QoSClass

__all__ = ["QOS_RESOURCES", "ContainerResources", "PodLevelResources", "PodSpec", "QoSClass",
           "compute_pod_qos"]

#: The only resources Kubernetes looks at when classifying a pod.
QOS_RESOURCES: frozenset[str] = frozenset({"cpu", "memory"})


def _frozen_list(owner: str, what: str, values: Mapping[str, int]) -> Mapping[str, int]:
    out: dict[str, int] = {}
    for name, value in values.items():
        if not isinstance(name, str) or not name:
            raise ValueError(f"{owner} {what}: resource names must be non-empty strings, got {name!r}")
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{owner} {what}[{name!r}] must be an integer milli-value, got {value!r}")
        out[name] = value
    return MappingProxyType(out)


@dataclass(frozen=True)
class ContainerResources:
    """``resources`` of one container: requests and limits as integer milli-values.

    Keys are Kubernetes resource names (``cpu`` = 1000 per core; ``memory`` in milli-bytes,
    i.e. ``Quantity.MilliValue()``). An absent key and a zero value both mean "not set" for QoS.
    """

    requests: Mapping[str, int] = field(default_factory=dict, hash=False)
    """Requested milli-values by resource name. Default: none."""
    limits: Mapping[str, int] = field(default_factory=dict, hash=False)
    """Limit milli-values by resource name. Default: none."""
    name: str = ""
    """Container name; informational only (error messages)."""

    def __post_init__(self) -> None:
        owner = f"container {self.name!r}"
        object.__setattr__(self, "requests", _frozen_list(owner, "requests", self.requests))
        object.__setattr__(self, "limits", _frozen_list(owner, "limits", self.limits))


@dataclass(frozen=True)
class PodLevelResources:
    """``pod.spec.resources`` (the PodLevelResources feature): pod-wide requests and limits.

    An empty object (both lists empty) is *not* the same as no pod-level resources: pass
    ``PodSpec(pod_level=None)`` for a nil ``spec.resources``.
    """

    requests: Mapping[str, int] = field(default_factory=dict, hash=False)
    """Pod-level requested milli-values by resource name. Default: none."""
    limits: Mapping[str, int] = field(default_factory=dict, hash=False)
    """Pod-level limit milli-values by resource name. Default: none."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "requests", _frozen_list("pod-level", "requests", self.requests))
        object.__setattr__(self, "limits", _frozen_list("pod-level", "limits", self.limits))

    def sets_cpu_or_memory(self) -> bool:
        """Upstream ``IsPodLevelResourcesSet``: a cpu or memory key exists (zero included)."""
        return any(k in QOS_RESOURCES for k in (*self.requests, *self.limits))


@dataclass(frozen=True)
class PodSpec:
    """The parts of a pod spec that decide its QoS class."""

    containers: tuple[ContainerResources, ...] = ()
    """Regular containers (``spec.containers``)."""
    init_containers: tuple[ContainerResources, ...] = ()
    """Init containers, sidecars included (``spec.initContainers``); they count like containers."""
    pod_level: PodLevelResources | None = None
    """``spec.resources``; None = nil (the pod does not use pod-level resources)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "containers", tuple(self.containers))
        object.__setattr__(self, "init_containers", tuple(self.init_containers))


def _positive(values: Mapping[str, int]) -> dict[str, int]:
    """Upstream ``processResourceList`` filter: supported resources with quantity > 0."""
    return {k: v for k, v in values.items() if k in QOS_RESOURCES and v > 0}


def _add_into(total: dict[str, int], values: Mapping[str, int]) -> None:
    for k, v in _positive(values).items():
        total[k] = total.get(k, 0) + v


def _has_cpu_and_memory_limits(limits: Mapping[str, int]) -> bool:
    return QOS_RESOURCES <= _positive(limits).keys()


def _container_branch(containers: Iterable[ContainerResources]) -> tuple[dict[str, int], dict[str, int], bool]:
    requests: dict[str, int] = {}
    limits: dict[str, int] = {}
    guaranteed = True
    for c in containers:
        _add_into(requests, c.requests)
        _add_into(limits, c.limits)
        if not _has_cpu_and_memory_limits(c.limits):
            guaranteed = False
    return requests, limits, guaranteed


def compute_pod_qos(pod: PodSpec, *, pod_level_resources_gate: bool = True,
                    fix_kubelet_qos_class_gate: bool = True) -> QoSClass:
    """The pod's QoS class, as upstream ``ComputePodQOS`` with the given feature gates.

    ``pod_level_resources_gate``: the ``PodLevelResources`` gate (default on, as in current
    Kubernetes, where it is beta and enabled). ``fix_kubelet_qos_class_gate``: the
    ``PodLevelResourcesFixKubeletQOSClass`` gate (default on, likewise); with it off, any
    non-nil ``spec.resources`` — even an empty one — selects the pod-level branch.
    """
    pl = pod.pod_level
    use_pod_level = (pod_level_resources_gate and pl is not None
                     and (not fix_kubelet_qos_class_gate or pl.sets_cpu_or_memory()))
    if pl is not None and use_pod_level:
        requests = _positive(pl.requests)
        limits = _positive(pl.limits)
        guaranteed = not pl.limits or _has_cpu_and_memory_limits(pl.limits)
    else:
        requests, limits, guaranteed = _container_branch((*pod.containers, *pod.init_containers))
    if not requests and not limits:
        return QoSClass.BEST_EFFORT
    if guaranteed and all(limits.get(k) == v for k, v in requests.items()) \
            and len(requests) == len(limits):
        return QoSClass.GUARANTEED
    return QoSClass.BURSTABLE
