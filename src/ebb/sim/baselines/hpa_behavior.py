"""Kubernetes HPA normalization: stabilization windows, scale limits and scaling policies.

Emulates the post-metric half of upstream ``pkg/controller/podautoscaler/horizontal.go``
(kubernetes/kubernetes, Apache-2.0) and the ``autoscaling/v2`` behavior defaults, written
from their documented semantics:

* legacy HPAs (no ``spec.behavior``): downscale stabilization over one window, then a
  scale-up cap of ``max(factor x current, minimum)`` (production 2.0 / 4.0);
* HPAs with ``spec.behavior``: per-direction stabilization windows, then Pods/Percent
  rate policies combined with ``selectPolicy`` Max/Min/Disabled, fed by a scale-event log.

Guarantees:

* Time windows use one convention everywhere: a record whose age equals a window or
  period counts as *outside* it (upstream stamps fixtures before ``time.Now()``, so a
  nominal tie is really slightly older). ``age < window`` is inside.
* Behavior-stabilization never moves the count opposite to the desired direction, and the
  rate-limited result always lies between ``current`` and the stabilized recommendation.
* Recommendation and event lists are mutated in place exactly where upstream mutates its
  per-HPA state (append, or overwrite the last stale slot); nothing else is touched.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final, Literal

from ebb.sim.baselines.hpa_calc import MAX_INT32, MIN_INT32

PolicyType = Literal["Pods", "Percent"]
SelectPolicy = Literal["Max", "Min", "Disabled"]

LEGACY_SCALE_UP_LIMIT_FACTOR: Final[float] = 2.0
"""Production ``scaleUpLimitFactor`` (upstream tests override it to 8.0)."""
LEGACY_SCALE_UP_LIMIT_MINIMUM: Final[float] = 4.0


@dataclass(frozen=True)
class ScalingPolicy:
    """One ``HPAScalingPolicy``: at most ``value`` pods/percent of change per ``period_s``."""

    type: PolicyType
    value: int
    period_s: int


@dataclass(frozen=True)
class ScalingRules:
    """``HPAScalingRules`` as a user writes them: None = unset (filled by defaults)."""

    stabilization_window_s: int | None = None
    select_policy: SelectPolicy | None = None
    policies: tuple[ScalingPolicy, ...] | None = None
    tolerance: float | None = None
    """Per-direction tolerance (HPAConfigurableTolerance); None = controller flag."""


@dataclass(frozen=True)
class Behavior:
    """``spec.behavior``; a None side takes the upstream default rules."""

    scale_up: ScalingRules | None = None
    scale_down: ScalingRules | None = None


@dataclass(frozen=True)
class ResolvedRules:
    """Fully defaulted rules, as the controller uses them."""

    stabilization_window_s: int
    select_policy: SelectPolicy
    policies: tuple[ScalingPolicy, ...]
    tolerance: float | None = None


DEFAULT_SCALE_UP_POLICIES: Final[tuple[ScalingPolicy, ...]] = (
    ScalingPolicy("Pods", 4, 15),
    ScalingPolicy("Percent", 100, 15),
)
DEFAULT_SCALE_DOWN_POLICIES: Final[tuple[ScalingPolicy, ...]] = (ScalingPolicy("Percent", 100, 15),)


def _resolve(
    rules: ScalingRules | None, window: int, policies: tuple[ScalingPolicy, ...]
) -> ResolvedRules:
    # Field-by-field override: a user policy list replaces the default list entirely.
    r = rules or ScalingRules()
    return ResolvedRules(
        stabilization_window_s=window
        if r.stabilization_window_s is None
        else r.stabilization_window_s,
        select_policy="Max" if r.select_policy is None else r.select_policy,
        policies=policies if r.policies is None else r.policies,
        tolerance=r.tolerance,
    )


def resolve_scale_up_rules(rules: ScalingRules | None) -> ResolvedRules:
    """Defaults: window 0, Max, [Pods 4 / 15 s, Percent 100 / 15 s]."""
    return _resolve(rules, 0, DEFAULT_SCALE_UP_POLICIES)


def resolve_scale_down_rules(rules: ScalingRules | None, downscale_window_s: int) -> ResolvedRules:
    """Defaults: window = controller flag (300 s), Max, [Percent 100 / 15 s]."""
    return _resolve(rules, downscale_window_s, DEFAULT_SCALE_DOWN_POLICIES)


# --------------------------------------------------------------------------- stabilization


@dataclass
class Recommendation:
    """A timestamped prenormalized recommendation (mutable slot, reused when stale)."""

    recommendation: int
    timestamp_s: float


def _inside(timestamp_s: float, now_s: float, window_s: float) -> bool:
    return timestamp_s > now_s - window_s


def stabilize_recommendation(
    recommendations: list[Recommendation], desired: int, now_s: float, window_s: float
) -> int:
    """Legacy downscale stabilization: max of ``desired`` and every in-window recommendation.

    Stores ``desired`` by overwriting the last out-of-window record, else appending.
    """
    best = desired
    old_index: int | None = None
    for i, rec in enumerate(recommendations):
        if not _inside(rec.timestamp_s, now_s, window_s):
            old_index = i
        elif rec.recommendation > best:
            best = rec.recommendation
    _store(recommendations, old_index, Recommendation(desired, now_s))
    return best


def _store(recommendations: list[Recommendation], index: int | None, rec: Recommendation) -> None:
    if index is None:
        recommendations.append(rec)
    else:
        recommendations[index] = rec


def stabilize_recommendation_with_behaviors(
    recommendations: list[Recommendation],
    current: int,
    desired: int,
    now_s: float,
    up_window_s: float,
    down_window_s: float,
) -> tuple[int, str]:
    """Clamp ``current`` into [min over up window, max over down window] (desired included).

    Returns (recommendation, reason); reason is ``ScaleUpStabilized`` if ``desired >=
    current`` else ``ScaleDownStabilized`` and only meaningful when the result differs
    from ``desired``. Stores ``desired`` over the last record outside both windows.
    """
    up_rec = desired
    down_rec = desired
    old_index: int | None = None
    for i, rec in enumerate(recommendations):
        in_up = _inside(rec.timestamp_s, now_s, up_window_s)
        in_down = _inside(rec.timestamp_s, now_s, down_window_s)
        if in_up:
            up_rec = min(up_rec, rec.recommendation)
        if in_down:
            down_rec = max(down_rec, rec.recommendation)
        if not in_up and not in_down:
            old_index = i
    result = current
    if result < up_rec:
        result = up_rec
    if result > down_rec:
        result = down_rec
    _store(recommendations, old_index, Recommendation(desired, now_s))
    return result, "ScaleUpStabilized" if desired >= current else "ScaleDownStabilized"


# --------------------------------------------------------------------------- legacy limits


def calculate_scale_up_limit(
    current: int,
    factor: float = LEGACY_SCALE_UP_LIMIT_FACTOR,
    minimum: float = LEGACY_SCALE_UP_LIMIT_MINIMUM,
) -> int:
    """Legacy per-reconcile cap ``int32(max(factor x current, minimum))``."""
    return min(MAX_INT32, int(max(factor * current, minimum)))


def convert_desired_replicas_with_rules(
    current: int,
    desired: int,
    min_replicas: int,
    max_replicas: int,
    scale_up_limit_factor: float = LEGACY_SCALE_UP_LIMIT_FACTOR,
    scale_up_limit_minimum: float = LEGACY_SCALE_UP_LIMIT_MINIMUM,
) -> tuple[int, str]:
    """Legacy clamp into [min, min(max, scale-up cap)]; returns (replicas, condition reason)."""
    limit = calculate_scale_up_limit(current, scale_up_limit_factor, scale_up_limit_minimum)
    if max_replicas > limit:
        maximum, reason = limit, "ScaleUpLimit"
    else:
        maximum, reason = max_replicas, "TooManyReplicas"
    if desired < min_replicas:
        return min_replicas, "TooFewReplicas"
    if desired > maximum:
        return maximum, reason
    return desired, "DesiredWithinRange"


# --------------------------------------------------------------------------- scale events


@dataclass
class ScaleEvent:
    """A past rescale in one direction; ``outdated`` slots are reused by later events."""

    replica_change: int
    timestamp_s: float
    outdated: bool = False


def replicas_change_per_period(period_s: float, events: Sequence[ScaleEvent], now_s: float) -> int:
    """Total change of the events younger than ``period_s`` (the outdated flag is ignored)."""
    return sum(e.replica_change for e in events if _inside(e.timestamp_s, now_s, period_s))


def longest_policy_period(rules: ResolvedRules) -> int:
    return max((p.period_s for p in rules.policies), default=0)


@dataclass
class ScaleEventLog:
    """Per-HPA event lists (upstream ``scaleUpEvents`` / ``scaleDownEvents``)."""

    up: list[ScaleEvent] = field(default_factory=list)
    down: list[ScaleEvent] = field(default_factory=list)

    def record(
        self,
        up_rules: ResolvedRules | None,
        down_rules: ResolvedRules | None,
        prev_replicas: int,
        new_replicas: int,
        now_s: float,
    ) -> None:
        """Store ``|new - prev|`` in the direction's list; no-op for legacy HPAs (rules None).

        Events older than the direction's longest policy period are first marked outdated;
        the new event overwrites the last outdated one, or is appended.
        """
        scaling_up = new_replicas > prev_replicas
        rules = up_rules if scaling_up else down_rules
        if rules is None:
            return  # legacy HPAs never read events, so upstream does not keep them
        events = self.up if scaling_up else self.down
        period = longest_policy_period(rules)
        for e in events:
            if not _inside(e.timestamp_s, now_s, period):
                e.outdated = True
        new_event = ScaleEvent(abs(new_replicas - prev_replicas), now_s)
        reuse = [i for i, e in enumerate(events) if e.outdated]
        if reuse:
            events[reuse[-1]] = new_event
        else:
            events.append(new_event)


# --------------------------------------------------------------------------- behavior limits


def _period_start(
    current: int, period_s: int, up: Sequence[ScaleEvent], down: Sequence[ScaleEvent], now_s: float
) -> int:
    # Both directions count: a period's starting size undoes every change made inside it.
    return (
        current
        - replicas_change_per_period(period_s, up, now_s)
        + replicas_change_per_period(period_s, down, now_s)
    )


def calculate_scale_up_limit_with_rules(
    current: int,
    up_events: Sequence[ScaleEvent],
    down_events: Sequence[ScaleEvent],
    rules: ResolvedRules,
    now_s: float,
) -> int:
    """Highest count the scale-up policies allow now (Max = largest, Min = smallest change)."""
    if rules.select_policy == "Disabled":
        return current
    use_min = rules.select_policy == "Min"
    result = MAX_INT32 if use_min else MIN_INT32
    for p in rules.policies:
        start = _period_start(current, p.period_s, up_events, down_events, now_s)
        if p.type == "Pods":
            proposed = start + p.value
        else:
            # Rounded up so a small percentage can still add a pod.
            proposed = math.ceil(start * (1.0 + p.value / 100.0))
        result = min(result, proposed) if use_min else max(result, proposed)
    return result


def calculate_scale_down_limit_with_rules(
    current: int,
    up_events: Sequence[ScaleEvent],
    down_events: Sequence[ScaleEvent],
    rules: ResolvedRules,
    now_s: float,
) -> int:
    """Lowest count the scale-down policies allow now (Max = largest, Min = smallest change)."""
    if rules.select_policy == "Disabled":
        return current
    use_min = rules.select_policy == "Min"
    result = MIN_INT32 if use_min else MAX_INT32
    for p in rules.policies:
        start = _period_start(current, p.period_s, up_events, down_events, now_s)
        # Percent truncates toward zero, as Go's int32() conversion does.
        proposed = start - p.value if p.type == "Pods" else int(start * (1.0 - p.value / 100.0))
        result = max(result, proposed) if use_min else min(result, proposed)
    return result


def convert_desired_replicas_with_behavior_rate(
    current: int,
    desired: int,
    min_replicas: int,
    max_replicas: int,
    up_rules: ResolvedRules,
    down_rules: ResolvedRules,
    events: ScaleEventLog,
    now_s: float,
) -> tuple[int, str]:
    """Apply the rate policies (and min/max in the direction of movement).

    Returns (replicas, condition reason). A policy never forces movement opposite to
    ``desired``: the limit is raised/lowered to ``current`` first.
    """
    if desired > current:
        limit = max(
            current,
            calculate_scale_up_limit_with_rules(current, events.up, events.down, up_rules, now_s),
        )
        if max_replicas > limit:
            maximum, reason = limit, "ScaleUpLimit"
        else:
            maximum, reason = max_replicas, "TooManyReplicas"
        if desired > maximum:
            return maximum, reason
    elif desired < current:
        limit = min(
            current,
            calculate_scale_down_limit_with_rules(
                current, events.up, events.down, down_rules, now_s
            ),
        )
        if min_replicas < limit:
            minimum, reason = limit, "ScaleDownLimit"
        else:
            minimum, reason = min_replicas, "TooFewReplicas"
        if desired < minimum:
            return minimum, reason
    return desired, "DesiredWithinRange"
