"""AIBrix's pod-autoscaler algorithms (APA, KPA), its metric windows and its cooldown, as pure code.

Upstream: ``vllm-project/aibrix`` @ ``e3e10f9e4aebe9aac5e7d992fb87d2648e01628b`` (2026-08-22):
``pkg/controller/podautoscaler/algorithm/{algorithm,apa,kpa}.go``, ``context/context.go`` (defaults),
``metrics/client.go`` and ``types/metrics.go`` (windows), ``autoscaler.go`` (the pipeline) and
``podautoscaler_controller.go`` (``computeScaleDecision``, ``stabilizeRecommendation``). Ported
upstream cases: ``tests/data/upstream/aibrix/``.

Rules, as upstream:

* **Windows.** Each reconcile records the mean of the pods' values in a stable window (observe,
  180 s) and a panic window (60 s); one value per 1 s bucket (the last wins), values older than
  the window dropped; a window reads the plain mean of what it holds (0 when empty).
* **APA.** With ``r = value / target``: above ``1 + up_tolerance`` → ``ceil(current · r)``, at most
  ``ceil(current · max_scale_up_rate)``; below ``1 − down_tolerance`` → ``ceil(current · r)``, at
  least ``floor(current / max_scale_down_rate)``; otherwise ``current``. Target ≤ 0 → ``current``.
* **KPA.** Panic iff the stable value is ≤ 0 or ``panic / stable > panic_threshold``. Each window
  value outside ``target · [1 − down_tol, 1 + up_tol]`` asks ``ceil(value / target)`` pods, inside it
  ``current``; both clamped to ``[floor(current / down_rate), max(1, ceil(current · up_rate))]``;
  panic takes the larger and never goes below ``max_panic_pods``. Note: upstream's window holds
  the *per-pod mean*, which KPA divides by the per-pod target as if it were a fleet total (its own
  tests feed totals); the emulation keeps that, so KPA sizes the fleet at about
  ``ceil(mean / target)``.
* **Cooldown.** Recommendations are kept for the longer cooldown window; a scale-up returns the
  largest of the last ``scale_up_cooldown_s`` (0 s: the new one), a scale-down the *smallest* of the
  last ``scale_down_cooldown_s`` (300 s) — upstream's code picks the minimum, not the HPA's maximum
  that its comment and docs describe, so one scale-down jumps to the lowest recommendation of the
  last 5 minutes; :func:`stabilize` offers the documented maximum as an option.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class AibrixContext:
    """``ScalingContext``: per-PodAutoscaler settings, upstream defaults (``NewBaseScalingContext``)."""

    target_value: float
    up_tolerance_ratio: float = 0.1
    down_tolerance_ratio: float = 0.1
    max_scale_up_rate: float = 2.0
    max_scale_down_rate: float = 2.0
    panic_threshold_ratio: float = 2.0
    min_replicas: int = 1
    max_replicas: int = 10
    activation_scale: int = 1
    """Always 1 in the production context; upstream tests set it through a mock."""


def _i32(x: float) -> int:
    """Go's ``int32(float)``: truncation toward zero."""
    return int(x)


def apply_constraints(replicas: int, ctx: AibrixContext) -> int:
    """Clamp to ``[min_replicas, max_replicas]``."""
    return max(ctx.min_replicas, min(replicas, ctx.max_replicas))


def apa_target_replicas(current_pods: float, use_per_pod: float, ctx: AibrixContext) -> int:
    """APA's ``computeTargetReplicas`` (before the min/max constraints)."""
    if ctx.target_value <= 0:
        return _i32(current_pods)
    r = use_per_pod / ctx.target_value
    if r > 1 + ctx.up_tolerance_ratio:
        return min(_i32(math.ceil(current_pods * r)), _i32(math.ceil(ctx.max_scale_up_rate * current_pods)))
    if r < 1 - ctx.down_tolerance_ratio:
        return max(_i32(math.ceil(current_pods * r)), _i32(math.floor(current_pods / ctx.max_scale_down_rate)))
    return _i32(current_pods)


def kpa_should_panic(stable: float, panic: float, threshold: float) -> bool:
    """KPA's ``shouldEnterPanicMode``."""
    return stable <= 0 or panic / stable > threshold


def kpa_target_replicas(current_pods: float, stable: float, panic: float, ctx: AibrixContext, *,
                        in_panic: bool, max_panic_pods: int = 0) -> int:
    """KPA's ``computeTargetReplicas`` (before the min/max constraints)."""
    t = ctx.target_value
    ready = max(0.0, current_pods)
    max_up = max(1.0, math.ceil(ctx.max_scale_up_rate * ready))
    max_down = math.floor(ready / ctx.max_scale_down_rate)
    hi, lo = t * (1 + ctx.up_tolerance_ratio), t * (1 - ctx.down_tolerance_ratio)

    def ask(v: float) -> int:
        want = math.ceil(v / t) if (v > hi or v < lo) else current_pods
        n = _i32(min(max(want, max_down), max_up))
        if ctx.activation_scale > 1 and ctx.activation_scale > n > 0:
            n = ctx.activation_scale
        return n

    desired = ask(stable)
    if in_panic:
        desired = max(desired, ask(panic), max_panic_pods)
    return desired


class MetricWindow:
    """``types.TimeWindow``: the last value per ``granularity_s`` bucket over ``duration_s``."""

    def __init__(self, duration_s: float, granularity_s: float = 1.0) -> None:
        if duration_s <= 0 or granularity_s <= 0:
            raise ValueError(f"MetricWindow needs positive durations, got {duration_s!r}, {granularity_s!r}")
        self.duration_s = float(duration_s)
        self.granularity_s = float(granularity_s)
        self._buckets: dict[int, float] = {}

    def _bucket(self, t_s: float) -> int:
        return math.floor(t_s / self.granularity_s)

    def record(self, t_s: float, value: float) -> None:
        self._buckets[self._bucket(t_s)] = value
        cutoff = self._bucket(t_s - self.duration_s)
        for b in [b for b in self._buckets if b < cutoff]:
            del self._buckets[b]

    def values(self) -> list[float]:
        return [self._buckets[b] for b in sorted(self._buckets)]

    def avg(self) -> float:
        v = self.values()
        return sum(v) / len(v) if v else 0.0


@dataclass(frozen=True)
class Recommendation:
    """One past recommendation for the cooldown window."""

    t_s: float
    replicas: int


def stabilize(history: tuple[Recommendation, ...], now_s: float, recommendation: int, current: int,
              up_cooldown_s: float, down_cooldown_s: float, *,
              down_pick_max: bool = False) -> tuple[int, tuple[Recommendation, ...]]:
    """``stabilizeRecommendation``: the cooldown-filtered count and the history to keep.

    ``down_pick_max`` (not upstream) makes a scale-down take the *largest* recommendation of the
    window, as the HPA's stabilisation window and AIBrix's docs ("stabilization window for
    scale-down recommendations") describe; upstream's code takes the smallest.
    """
    hist = history + (Recommendation(now_s, recommendation),)
    keep_from = now_s - max(up_cooldown_s, down_cooldown_s)
    hist = tuple(r for r in hist if r.t_s > keep_from)
    if recommendation == current:
        return current, hist
    up = recommendation > current
    cutoff = now_s - (up_cooldown_s if up else down_cooldown_s)
    inside = [r.replicas for r in hist if r.t_s > cutoff]
    if not inside:
        return recommendation, hist
    return (max(inside) if (up or down_pick_max) else min(inside)), hist


def recommend(algo: str, current: int, stable: float, panic: float, ctx: AibrixContext) -> tuple[int, bool]:
    """One metric source's constrained recommendation (``ComputeRecommendation``) and whether KPA panicked."""
    if algo == "apa":
        return apply_constraints(apa_target_replicas(float(current), stable, ctx), ctx), False
    in_panic = kpa_should_panic(stable, panic, ctx.panic_threshold_ratio)
    # A fresh ScalingContext each reconcile: max_panic_pods is always 0 in production.
    return apply_constraints(kpa_target_replicas(float(current), stable, panic, ctx, in_panic=in_panic), ctx), in_panic


def desired_over_sources(algo: str, current: int, sources: list[tuple[float, float, AibrixContext]]) -> int:
    """``ComputeDesiredReplicas``: the largest recommendation over the metric sources (stable, panic, context)."""
    if not sources:
        raise ValueError("desired_over_sources needs at least one metric source")
    return max(recommend(algo, current, s, p, c)[0] for s, p, c in sources)
