"""llm-d WVA's V1 saturation analyzer: which replicas are saturated, whether to add or remove one.

Follows ``internal/saturation/analyzer.go`` and ``internal/saturation/constants.go`` of
``llm-d/llm-d-workload-variant-autoscaler`` at commit ``b08b1c77c89d284361e40b2a9315e93ef46e7022``
(2026-02-19; the analyzer is unchanged in substance since tag v0.5.1, ``c760bb79``). Defaults from
``config/manager/configmap-saturation-scaling.yaml`` (the ``default`` entry) at the same commit.
Written from the upstream semantics; no code carried over.

Rules (per replica, then over the model's fleet):

* A replica is **saturated** when ``kv ≥ kv_threshold`` (0.80) or ``queue ≥ queue_threshold`` (5);
  ``queue`` is an integer (the collector truncates the PromQL float with ``int()``).
* Each non-saturated replica has spare ``kv_threshold − kv`` and ``queue_threshold − queue``;
  spares are averaged per variant, then over all non-saturated replicas (0 when there are none).
* **Scale up** when the average spare KV < ``kv_spare`` (0.1) or the average spare queue <
  ``queue_spare`` (3). An all-saturated fleet has spares 0, so it always asks to scale up.
* **Scale down is safe** only with ≥ 2 non-saturated replicas and when spreading their average load
  over one replica fewer (load × N/(N−1)) still leaves spare KV ≥ ``kv_spare`` and spare queue ≥
  ``queue_spare``. The analyzer only approves; :func:`saturation_targets` removes the replica.
* **Targets**: if any variant is in transition (desired ≠ 0 and ≠ current, or replicas reporting
  metrics ≠ current) nothing moves (desired kept where set, else current); else a scale-up adds one
  replica to the cheapest variant without pending replicas, else a safe scale-down removes one from
  the most expensive variant above 1 replica; ties by variant name.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

MIN_NON_SATURATED_FOR_SCALE_DOWN = 2
"""``MinNonSaturatedReplicasForScaleDown``: with one replica left there is nowhere to spread load."""
DEFAULT_VARIANT_COST = 10.0
"""``DefaultVariantCost``: the cost of a variant whose CR names none."""


@dataclass(frozen=True)
class SaturationConfig:
    """``SaturationScalingConfig`` (V1 fields); defaults = the shipped ``default`` ConfigMap entry."""

    kv_threshold_ratio: float = 0.80
    """``kvCacheThreshold``: KV-cache fraction at which a replica counts as saturated."""
    queue_threshold: float = 5.0
    """``queueLengthThreshold``: waiting requests at which a replica counts as saturated."""
    kv_spare_ratio: float = 0.1
    """``kvSpareTrigger``: scale up when the mean spare KV fraction falls below this."""
    queue_spare: float = 3.0
    """``queueSpareTrigger``: scale up when the mean spare queue (requests) falls below this."""

    def __post_init__(self) -> None:
        # Upstream Validate(): fractions in [0, 1], counts >= 0, threshold >= spare trigger.
        if not (0 <= self.kv_threshold_ratio <= 1 and 0 <= self.kv_spare_ratio <= 1):
            raise ValueError(f"kv threshold and spare must lie in [0, 1]; got {self!r}")
        if self.queue_threshold < 0 or self.queue_spare < 0:
            raise ValueError(f"queue threshold and spare must be >= 0; got {self!r}")
        if self.kv_threshold_ratio < self.kv_spare_ratio:
            raise ValueError(f"kv threshold must be >= kv spare trigger; got {self!r}")


@dataclass(frozen=True)
class ReplicaMetrics:
    """One pod's peak metrics over the query window (``max_over_time[1m]``)."""

    pod: str
    kv_ratio: float
    queue: int
    variant: str = "v1"
    cost: float = DEFAULT_VARIANT_COST


@dataclass(frozen=True)
class VariantAnalysis:
    name: str
    replica_count: int
    """Replicas reporting metrics."""
    non_saturated: int
    avg_spare_kv: float
    avg_spare_queue: float
    saturated: tuple[str, ...]
    cost: float = DEFAULT_VARIANT_COST


@dataclass(frozen=True)
class ModelAnalysis:
    total_replicas: int
    non_saturated: int
    avg_spare_kv: float
    avg_spare_queue: float
    should_scale_up: bool
    scale_down_safe: bool
    variants: tuple[VariantAnalysis, ...]
    reason: str = ""


@dataclass(frozen=True)
class VariantState:
    """``VariantReplicaState``: the deployment's replicas and the VA's last desired count."""

    name: str
    current: int
    desired: int = 0
    """``status.desiredOptimizedAlloc.numReplicas``; 0 = never set."""
    pending: int = 0
    """Current minus ready replicas."""


def analyze_variant(name: str, metrics: Sequence[ReplicaMetrics], cfg: SaturationConfig) -> VariantAnalysis:
    """Saturated pods and the mean spare capacity of the rest, for one variant."""
    saturated: list[str] = []
    spare_kv = spare_q = 0.0
    n = 0
    for m in metrics:
        if m.kv_ratio >= cfg.kv_threshold_ratio or float(m.queue) >= cfg.queue_threshold:
            saturated.append(m.pod)
            continue
        spare_kv += cfg.kv_threshold_ratio - m.kv_ratio
        spare_q += cfg.queue_threshold - float(m.queue)
        n += 1
    cost = metrics[0].cost if metrics else DEFAULT_VARIANT_COST
    return VariantAnalysis(name, len(metrics), n, spare_kv / n if n else 0.0, spare_q / n if n else 0.0,
                           tuple(saturated), cost)


def _scale_down_safe(n: int, avg_spare_kv: float, avg_spare_q: float, cfg: SaturationConfig) -> bool:
    if n < MIN_NON_SATURATED_FOR_SCALE_DOWN:
        return False
    # Worst case: the removed replica's share lands evenly on the others, load × N/(N−1).
    factor = n / (n - 1)
    kv_after = (cfg.kv_threshold_ratio - avg_spare_kv) * factor
    q_after = (cfg.queue_threshold - avg_spare_q) * factor
    return (cfg.kv_threshold_ratio - kv_after >= cfg.kv_spare_ratio
            and cfg.queue_threshold - q_after >= cfg.queue_spare)


def analyze_model(metrics: Sequence[ReplicaMetrics], cfg: SaturationConfig) -> ModelAnalysis:
    """``AnalyzeModelSaturation``: the fleet-wide verdict over every variant of one model.

    No metrics → neither scale up nor scale down (upstream's empty analysis)."""
    if not metrics:
        return ModelAnalysis(0, 0, 0.0, 0.0, False, False, ())
    by_variant: dict[str, list[ReplicaMetrics]] = {}
    for m in metrics:
        by_variant.setdefault(m.variant, []).append(m)
    variants = tuple(analyze_variant(v, ms, cfg) for v, ms in by_variant.items())
    n = sum(v.non_saturated for v in variants)
    # Variant means re-weighted by their counts, as upstream aggregates them.
    kv = sum(v.avg_spare_kv * v.non_saturated for v in variants) / n if n else 0.0
    q = sum(v.avg_spare_queue * v.non_saturated for v in variants) / n if n else 0.0
    kv_low, q_low = kv < cfg.kv_spare_ratio, q < cfg.queue_spare
    reason = " and ".join(s for s, on in ((f"spare KV {kv:.3f} < {cfg.kv_spare_ratio:g}", kv_low),
                                           (f"spare queue {q:.1f} < {cfg.queue_spare:g}", q_low)) if on)
    return ModelAnalysis(len(metrics), n, kv, q, kv_low or q_low, _scale_down_safe(n, kv, q, cfg),
                         variants, reason)


def saturation_targets(analysis: ModelAnalysis | None, states: Sequence[VariantState]) -> dict[str, int]:
    """``CalculateSaturationTargets``: replicas per variant after one analysis (±1 at most)."""
    if analysis is None or not analysis.variants:
        return {s.name: s.current for s in states}
    state: Mapping[str, VariantState] = {s.name: s for s in states}
    blank = VariantState("", 0)
    moving = any((st.desired != 0 and st.desired != st.current) or v.replica_count != st.current
                 for v in analysis.variants for st in (state.get(v.name, blank),))
    targets: dict[str, int] = {}
    for v in analysis.variants:
        st = state.get(v.name, blank)
        if moving:
            targets[v.name] = st.desired if st.desired != 0 and st.desired != st.current else st.current
        else:
            targets[v.name] = v.replica_count
    if moving:
        return targets
    if analysis.should_scale_up:
        ups = [v for v in analysis.variants if state.get(v.name, blank).pending <= 0]
        if ups:
            pick = min(ups, key=lambda v: (v.cost, v.name))
            targets[pick.name] += 1
    elif analysis.scale_down_safe:
        downs = [v for v in analysis.variants if targets[v.name] > 1]
        if downs:
            pick = max(downs, key=lambda v: (v.cost, v.name))
            targets[pick.name] -= 1
    return targets
