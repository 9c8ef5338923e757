"""Kubernetes HPA replica calculator, emulated in pure Python.

Re-implements the decision rules of upstream ``pkg/controller/podautoscaler/
replica_calculator.go`` and ``metrics/utilization.go`` (kubernetes/kubernetes, Apache-2.0;
Kubernetes 1.37 development line) from their documented semantics. The code is our own;
the algorithm is upstream's.

Guarantees:

* Integer arithmetic is Go ``int64`` arithmetic (division truncates toward zero); ratios
  are IEEE-754 float64 exactly as upstream forms them, so tolerance boundaries and
  ``ceil`` results match bit for bit. Replica counts saturate at MaxInt32 and external
  metric sums at MaxInt64 instead of overflowing.
* All times are float seconds on one clock. Go's zero ``time.Time`` is
  :data:`GO_ZERO_TIME_S`, a single instant far in the past, so ``zero + 10 s`` is after
  ``zero`` as in Go. Comparisons are strict where upstream uses ``After``/``Before``.
* Errors are raised as :class:`HpaCalcError` carrying upstream's message text.
* Every function is pure: inputs are never mutated.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Final

GO_ZERO_TIME_S: Final[float] = -62135596800.0
"""Go's zero ``time.Time`` (0001-01-01T00:00:00Z) in Unix seconds."""
MAX_INT32: Final[int] = 2**31 - 1
MIN_INT32: Final[int] = -(2**31)
MAX_INT64: Final[int] = 2**63 - 1
MIN_INT64: Final[int] = -(2**63)


from ebb.sim.baselines.hpa_records import (  # re-exported: the calculator's public records
    HpaCalcError as HpaCalcError,
    ContainerSpec as ContainerSpec,
    ReadyCondition as ReadyCondition,
    PodRecord as PodRecord,
    PodMetricSample as PodMetricSample,
    ContainerUsage as ContainerUsage,
    PodResourceMetrics as PodResourceMetrics,
    Tolerances as Tolerances,
    CalcSettings as CalcSettings,
    PodGroups as PodGroups,
    ResourceReplicas as ResourceReplicas,
    MetricReplicas as MetricReplicas,
)

def _go_div(a: int, b: int) -> int:
    """Go integer division: truncates toward zero (Python's ``//`` floors)."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def _to_int32(x: float) -> int:
    """Float -> int32 with saturation; Go's conversion is undefined out of range."""
    if math.isnan(x):
        return 0
    if x >= MAX_INT32:
        return MAX_INT32
    if x <= MIN_INT32:
        return MIN_INT32
    return int(x)


def _ceil_int32(x: float) -> int:
    return _to_int32(math.ceil(x)) if math.isfinite(x) else _to_int32(x)


def _saturating_sum_int64(values: Iterable[int]) -> int:
    total = 0
    for v in values:
        total = max(MIN_INT64, min(MAX_INT64, total + v))
    return total


# --------------------------------------------------------------------------- metrics client


def resource_metric_samples(
    items: Sequence[PodResourceMetrics], resource: str, container: str = ""
) -> dict[str, PodMetricSample]:
    """Turn resource-metrics items into per-pod samples as upstream's metrics client does.

    Whole pod (``container == ""``): the sum over all container entries; a pod with no
    entries or with any entry lacking the resource gets no sample. Named container: that
    entry's usage; a pod without it gets no sample (dropped, not an error).
    """
    if not items:
        raise HpaCalcError(
            f"unable to get metrics for resource {resource}: "
            "no metrics returned from resource metrics API"
        )
    out: dict[str, PodMetricSample] = {}
    for item in items:
        value: int | None
        if container == "":
            usages = [c.usage_milli for c in item.containers]
            value = (
                None if not usages or None in usages else sum(u for u in usages if u is not None)
            )
        else:
            value = next((c.usage_milli for c in item.containers if c.name == container), None)
        if value is not None:
            out[item.pod_name] = PodMetricSample(value, item.timestamp_s, item.window_s)
    return out


# --------------------------------------------------------------------------- requests


def calculate_pod_requests_from_containers(pod: PodRecord, container: str, resource: str) -> int:
    """Sum of requests over regular containers plus sidecar (restartPolicy Always) inits."""
    considered = list(pod.containers) + [
        c for c in pod.init_containers if c.restart_policy == "Always"
    ]
    total = 0
    found = False
    for c in considered:
        if container == "" or c.name == container:
            found = True
            if resource not in c.requests_milli:
                raise HpaCalcError(
                    f"missing request for {resource} in container {c.name} of Pod {pod.name}"
                )
            total += c.requests_milli[resource]
    if container != "" and not found:
        raise HpaCalcError(f"container {container} not found in Pod {pod.name}")
    return total


def calculate_requests(
    pods: Sequence[PodRecord],
    container: str,
    resource: str,
    pod_level_resources_enabled: bool = True,
) -> dict[str, int]:
    """Request (milli) per pod, for every pod including ones later ignored (upstream order)."""
    requests: dict[str, int] = {}
    for pod in pods:
        plr = pod.pod_level_requests_milli
        # Upstream treats pod-level requests as "set" when cpu or memory is present.
        pod_level_set = plr is not None and ("cpu" in plr or "memory" in plr)
        if container == "" and pod_level_resources_enabled and pod_level_set and plr is not None:
            if resource not in plr:
                raise HpaCalcError(f"missing pod-level request for {resource} in Pod {pod.name}")
            requests[pod.name] = plr[resource]
        else:
            requests[pod.name] = calculate_pod_requests_from_containers(pod, container, resource)
    return requests


# --------------------------------------------------------------------------- grouping


def group_pods(
    pods: Sequence[PodRecord],
    metrics: Mapping[str, PodMetricSample],
    resource: str,
    cpu_initialization_period_s: float,
    delay_of_initial_readiness_status_s: float,
    now_s: float,
) -> PodGroups:
    """Classify pods as ready / unready / missing / ignored; first matching rule wins.

    Readiness only matters for ``cpu``: a pod still in its initialization period counts
    only once it is Ready with a full metric window after the transition; afterwards only
    a pod that has never been ready is unready.
    """
    ready = 0
    unready: set[str] = set()
    missing: set[str] = set()
    ignored: set[str] = set()
    for pod in pods:
        if pod.deletion_set or pod.phase == "Failed":
            ignored.add(pod.name)
            continue
        if pod.phase == "Pending":
            unready.add(pod.name)
            continue
        sample = metrics.get(pod.name)
        if sample is None:
            missing.add(pod.name)
            continue
        if resource == "cpu":
            cond = pod.ready
            if cond is None or pod.start_time_s is None:
                is_unready = True
            elif pod.start_time_s + cpu_initialization_period_s > now_s:
                is_unready = cond.status == "False" or (
                    sample.timestamp_s < cond.last_transition_s + sample.window_s
                )
            else:
                is_unready = cond.status == "False" and (
                    pod.start_time_s + delay_of_initial_readiness_status_s > cond.last_transition_s
                )
            if is_unready:
                unready.add(pod.name)
                continue
        ready += 1
    return PodGroups(ready, frozenset(unready), frozenset(missing), frozenset(ignored))


# --------------------------------------------------------------------------- ratios


def resource_utilization_ratio(
    metrics: Mapping[str, int], requests: Mapping[str, int], target_percent: int
) -> tuple[float, int, int]:
    """(ratio, utilization %, raw average) over entries whose pod has a request.

    The utilization percent is truncated to an integer before the ratio is formed.
    """
    metrics_total = 0
    requests_total = 0
    entries = 0
    for name, value in metrics.items():
        if name not in requests:
            continue  # superfluous metric (no such pod)
        metrics_total += value
        requests_total += requests[name]
        entries += 1
    if requests_total == 0:
        raise HpaCalcError("no metrics returned matched known pods")
    utilization = _to_int32(_go_div(metrics_total * 100, requests_total))
    return utilization / target_percent, utilization, _go_div(metrics_total, entries)


def metric_usage_ratio(metrics: Mapping[str, int], target_milli: int) -> tuple[float, int]:
    """(ratio, average usage) over all map entries, superfluous ones included."""
    usage = _go_div(sum(metrics.values()), len(metrics))
    return usage / target_milli, usage


def _require_positive(target: int, what: str) -> None:
    if target <= 0:
        raise HpaCalcError(f"invalid {what} target {target}: must be positive")


# --------------------------------------------------------------------------- pod-metric paths


def _prepare(
    pods: Sequence[PodRecord],
    samples: Mapping[str, PodMetricSample],
    resource: str,
    settings: CalcSettings,
    now_s: float,
) -> tuple[dict[str, int], PodGroups]:
    if not pods:
        raise HpaCalcError("no pods returned by selector while calculating replica count")
    groups = group_pods(
        pods,
        samples,
        resource,
        settings.cpu_initialization_period_s,
        settings.delay_of_initial_readiness_status_s,
        now_s,
    )
    values = {
        name: s.value_milli
        for name, s in samples.items()
        if name not in groups.ignored and name not in groups.unready
    }
    if not values:
        raise HpaCalcError("did not receive metrics for targeted pods (pods might be unready)")
    return values, groups


def _first_pass(
    current_replicas: int, ratio: float, groups: PodGroups, tolerances: Tolerances
) -> int | None:
    """The answer when no pod needs a guessed value (none missing, no unready on a scale-up)."""
    if groups.missing or (groups.unready and ratio > 1.0):
        return None
    if tolerances.is_within(ratio):
        return current_replicas
    return _ceil_int32(ratio * groups.ready_pod_count)


def _finish(
    current_replicas: int,
    ratio: float,
    new_ratio: float,
    map_len: int,
    tolerances: Tolerances,
) -> int:
    """Steps 10-12: hold on tolerance or direction flip, never move against the ratio."""
    if (
        tolerances.is_within(new_ratio)
        or (ratio < 1.0 and new_ratio > 1.0)
        or (ratio > 1.0 and new_ratio < 1.0)
    ):
        return current_replicas
    new_replicas = _ceil_int32(new_ratio * map_len)
    if (new_ratio < 1.0 and new_replicas > current_replicas) or (
        new_ratio > 1.0 and new_replicas < current_replicas
    ):
        return current_replicas
    return new_replicas


def _fill(
    values: dict[str, int], groups: PodGroups, ratio: float, missing_fill: Mapping[str, int]
) -> None:
    """Assume missing pods sit at the fallback on a scale-down, idle on a scale-up; unready
    pods count as idle only when they would otherwise inflate a scale-up."""
    if ratio < 1.0:
        for name in groups.missing:
            values[name] = missing_fill[name]
    elif ratio > 1.0:
        for name in groups.missing:
            values[name] = 0
    if groups.unready and ratio > 1.0:
        for name in groups.unready:
            values[name] = 0


def get_resource_replicas(
    current_replicas: int,
    target_utilization_percent: int,
    resource: str,
    pods: Sequence[PodRecord],
    samples: Mapping[str, PodMetricSample],
    now_s: float,
    settings: CalcSettings = CalcSettings(),
    container: str = "",
) -> ResourceReplicas:
    """Replicas for a Resource/ContainerResource metric with a Utilization target."""
    _require_positive(target_utilization_percent, "utilization")
    values, groups = _prepare(pods, samples, resource, settings, now_s)
    requests = calculate_requests(pods, container, resource, settings.pod_level_resources_enabled)
    ratio, utilization, raw = resource_utilization_ratio(
        values, requests, target_utilization_percent
    )
    first = _first_pass(current_replicas, ratio, groups, settings.tolerances)
    if first is not None:
        return ResourceReplicas(first, utilization, raw)
    fallback = max(100, target_utilization_percent)
    _fill(values, groups, ratio, {n: _go_div(requests[n] * fallback, 100) for n in groups.missing})
    new_ratio, _, _ = resource_utilization_ratio(values, requests, target_utilization_percent)
    replicas = _finish(current_replicas, ratio, new_ratio, len(values), settings.tolerances)
    return ResourceReplicas(replicas, utilization, raw)


def get_raw_resource_replicas(
    current_replicas: int,
    target_average_milli: int,
    resource: str,
    pods: Sequence[PodRecord],
    samples: Mapping[str, PodMetricSample],
    now_s: float,
    settings: CalcSettings = CalcSettings(),
) -> MetricReplicas:
    """Replicas for a per-pod AverageValue target (upstream ``calcPlainMetricReplicas``).

    ``resource`` names the resource of a Resource/ContainerResource metric (cpu readiness
    rules then apply); :func:`get_metric_replicas` passes ``""`` for Pods metrics.
    """
    _require_positive(target_average_milli, "average value")
    values, groups = _prepare(pods, samples, resource, settings, now_s)
    ratio, usage = metric_usage_ratio(values, target_average_milli)
    first = _first_pass(current_replicas, ratio, groups, settings.tolerances)
    if first is not None:
        return MetricReplicas(first, usage)
    _fill(values, groups, ratio, {n: target_average_milli for n in groups.missing})
    new_ratio, _ = metric_usage_ratio(values, target_average_milli)
    replicas = _finish(current_replicas, ratio, new_ratio, len(values), settings.tolerances)
    return MetricReplicas(replicas, usage)


def get_metric_replicas(
    current_replicas: int,
    target_average_milli: int,
    pods: Sequence[PodRecord],
    samples: Mapping[str, PodMetricSample],
    now_s: float,
    settings: CalcSettings = CalcSettings(),
) -> MetricReplicas:
    """Replicas for a Pods metric (AverageValue); pod readiness is not consulted."""
    if not samples:
        raise HpaCalcError("unable to get metric: no metrics returned from custom metrics API")
    return get_raw_resource_replicas(
        current_replicas, target_average_milli, "", pods, samples, now_s, settings
    )


# --------------------------------------------------------------------------- Object / External


def ready_pods_count(pods: Sequence[PodRecord]) -> int:
    """Pods that are Running with Ready=True (no cpu-initialization logic)."""
    if not pods:
        raise HpaCalcError(
            "unable to calculate ready pods: "
            "no pods returned by selector while calculating replica count"
        )
    return sum(
        1 for p in pods if p.phase == "Running" and p.ready is not None and p.ready.status == "True"
    )


def _usage_ratio_replica_count(
    current_replicas: int, ratio: float, pods: Sequence[PodRecord], tolerances: Tolerances
) -> int:
    if current_replicas == 0:
        return _ceil_int32(ratio)  # scale from zero: tolerance does not apply
    if tolerances.is_within(ratio):
        return current_replicas
    return _ceil_int32(ratio * ready_pods_count(pods))


def get_object_metric_replicas(
    current_replicas: int,
    target_value_milli: int,
    value_milli: int,
    pods: Sequence[PodRecord],
    tolerances: Tolerances = Tolerances(),
) -> MetricReplicas:
    """Object metric with a Value target; ``current_replicas`` is ``spec.replicas``."""
    _require_positive(target_value_milli, "value")
    ratio = value_milli / target_value_milli
    return MetricReplicas(
        _usage_ratio_replica_count(current_replicas, ratio, pods, tolerances), value_milli
    )


def get_external_metric_replicas(
    current_replicas: int,
    target_value_milli: int,
    values_milli: Sequence[int],
    pods: Sequence[PodRecord],
    tolerances: Tolerances = Tolerances(),
) -> MetricReplicas:
    """External metric with a Value target: the samples are summed (saturating)."""
    if not values_milli:
        raise HpaCalcError(
            "unable to get external metric: no metrics returned from external metrics API"
        )
    return get_object_metric_replicas(
        current_replicas, target_value_milli, _saturating_sum_int64(values_milli), pods, tolerances
    )


def get_object_per_pod_metric_replicas(
    status_replicas: int,
    target_average_milli: int,
    value_milli: int,
    tolerances: Tolerances = Tolerances(),
) -> MetricReplicas:
    """Object metric with an AverageValue target; uses ``status.replicas``, not the spec."""
    _require_positive(target_average_milli, "average value")
    replicas = status_replicas
    denominator = float(target_average_milli) * float(status_replicas)
    ratio = value_milli / denominator if denominator != 0.0 else math.inf
    if not tolerances.is_within(ratio):
        replicas = _ceil_int32(value_milli / target_average_milli)
    if value_milli == MAX_INT64 or status_replicas == 0:
        usage = value_milli  # saturated (or undefined per pod): report as is
    else:
        usage = min(MAX_INT64, math.ceil(value_milli / status_replicas))
    return MetricReplicas(replicas, usage)


def get_external_per_pod_metric_replicas(
    status_replicas: int,
    target_average_milli: int,
    values_milli: Sequence[int],
    tolerances: Tolerances = Tolerances(),
) -> MetricReplicas:
    """External metric with an AverageValue target (sum of samples per ``status.replicas``)."""
    if not values_milli:
        raise HpaCalcError(
            "unable to get external metric: no metrics returned from external metrics API"
        )
    return get_object_per_pod_metric_replicas(
        status_replicas, target_average_milli, _saturating_sum_int64(values_milli), tolerances
    )
