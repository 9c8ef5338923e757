"""HpaController reconciles one HPA over virtual time the way kube-controller-manager does."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from ebb.sim.baselines.hpa_behavior import (
    Behavior,
    Recommendation,
    ResolvedRules,
    ScaleEvent,
    ScaleEventLog,
    ScalingPolicy,
    ScalingRules,
    convert_desired_replicas_with_behavior_rate,
    stabilize_recommendation_with_behaviors,
)
from ebb.sim.baselines.hpa_calc import ContainerSpec, PodMetricSample, PodRecord, ReadyCondition
from ebb.sim.baselines.hpa_controller import HpaConfig, HpaController, MetricSpec

SYNC_S = 15.0


def _pods(n: int, resource: str = "", request_milli: int = 0) -> list[PodRecord]:
    requests = {resource: request_milli} if resource else {}
    return [
        PodRecord(
            name=f"pod-{i}",
            start_time_s=-3600.0,
            ready=ReadyCondition("True", -3590.0),
            containers=(ContainerSpec("main", requests),),
        )
        for i in range(n)
    ]


def _per_pod(pods: list[PodRecord], value_milli: int, now_s: float) -> dict[str, PodMetricSample]:
    return {p.name: PodMetricSample(value_milli, now_s - 1.0) for p in pods}


def _step(hpa: HpaController, now_s: float, replicas: int, value_milli: int) -> tuple[int, str]:
    pods = _pods(replicas)
    desired, reason = hpa.reconcile(
        now_s, replicas, replicas, pods, _per_pod(pods, value_milli, now_s)
    )
    return desired, reason


def test_legacy_hpa_does_not_scale_down_within_the_first_300_seconds() -> None:
    hpa = HpaController(HpaConfig(MetricSpec.pods_average_value(10_000), max_replicas=20))
    for k in range(20):  # t = 0 .. 285 s
        desired, reason = _step(hpa, k * SYNC_S, 10, 1_000)
        assert desired == 10, f"scaled down at t={k * SYNC_S}"
        assert reason == "ScaleDownStabilized"
    desired, _ = _step(hpa, 300.0, 10, 1_000)
    assert desired == 1


def test_legacy_scale_up_is_capped_at_twice_current_or_four() -> None:
    cfg = HpaConfig(MetricSpec.pods_average_value(1_000), max_replicas=100)
    for current, cap in ((1, 4), (3, 6), (10, 20)):
        desired, reason = _step(HpaController(cfg), 0.0, current, 50_000)
        assert (desired, reason) == (cap, "ScaleUpLimit")


def test_legacy_scale_up_stops_at_max_replicas() -> None:
    cfg = HpaConfig(MetricSpec.pods_average_value(1_000), max_replicas=15)
    assert _step(HpaController(cfg), 0.0, 10, 50_000) == (15, "TooManyReplicas")


def test_behavior_percent_100_per_15s_scale_down_goes_straight_to_target() -> None:
    down = ScalingRules(stabilization_window_s=0, policies=(ScalingPolicy("Percent", 100, 15),))
    hpa = HpaController(
        HpaConfig(
            MetricSpec.pods_average_value(10_000),
            max_replicas=20,
            behavior=Behavior(scale_down=down),
        )
    )
    assert _step(hpa, 0.0, 10, 3_000) == (3, "DesiredWithinRange")
    assert [(e.replica_change, e.timestamp_s) for e in hpa.events.down] == [(7, 0.0)]


def test_behavior_percent_50_per_15s_halves_at_most_once_per_period() -> None:
    down = ScalingRules(stabilization_window_s=0, policies=(ScalingPolicy("Percent", 50, 15),))
    hpa = HpaController(
        HpaConfig(
            MetricSpec.pods_average_value(10_000),
            max_replicas=20,
            behavior=Behavior(scale_down=down),
        )
    )
    assert _step(hpa, 0.0, 16, 100) == (8, "ScaleDownLimit")
    # Mid-period the 8-pod drop already used the budget (period start is still 16).
    assert _step(hpa, 7.5, 8, 100) == (8, "ScaleDownLimit")
    replicas, t = 8, 15.0
    seen = []
    while replicas > 1:
        replicas, _ = _step(hpa, t, replicas, 100)
        seen.append(replicas)
        t += SYNC_S
    assert seen == [4, 2, 1]


def test_default_behavior_scale_up_allows_max_of_four_pods_or_doubling() -> None:
    hpa = HpaController(
        HpaConfig(MetricSpec.pods_average_value(1_000), max_replicas=100, behavior=Behavior())
    )
    assert _step(hpa, 0.0, 3, 50_000) == (7, "ScaleUpLimit")  # 3 + 4 > 2 x 3
    hpa = HpaController(
        HpaConfig(MetricSpec.pods_average_value(1_000), max_replicas=100, behavior=Behavior())
    )
    assert _step(hpa, 0.0, 10, 50_000) == (20, "ScaleUpLimit")


def test_default_behavior_keeps_the_300s_downscale_window() -> None:
    hpa = HpaController(
        HpaConfig(MetricSpec.pods_average_value(10_000), max_replicas=20, behavior=Behavior())
    )
    assert _step(hpa, 0.0, 10, 1_000) == (10, "ScaleDownStabilized")
    assert _step(hpa, 285.0, 10, 1_000)[0] == 10
    assert _step(hpa, 300.0, 10, 1_000)[0] == 1


def test_tolerance_holds_replicas_at_ratio_1_05() -> None:
    cfg = HpaConfig(MetricSpec.pods_average_value(1_000), max_replicas=20)
    assert _step(HpaController(cfg), 0.0, 10, 1_050) == (10, "DesiredWithinRange")
    assert _step(HpaController(cfg), 0.0, 10, 1_110)[0] == 12


def test_behavior_tolerance_overrides_one_side() -> None:
    up = ScalingRules(tolerance=0.01)
    cfg = HpaConfig(
        MetricSpec.pods_average_value(1_000), max_replicas=20, behavior=Behavior(scale_up=up)
    )
    assert _step(HpaController(cfg), 0.0, 10, 1_050)[0] == 11


def test_resource_utilization_scales_gpu_util_over_a_request_of_100() -> None:
    hpa = HpaController(HpaConfig(MetricSpec.resource_utilization("gpu-util", 60), max_replicas=10))
    pods = _pods(4, "gpu-util", 100)
    metrics = _per_pod(pods, 90, 0.0)  # 90 % busy against a 60 % target
    assert hpa.reconcile(0.0, 4, 4, pods, metrics) == (6, "DesiredWithinRange")


def test_external_total_qps_scales_on_ready_pods() -> None:
    hpa = HpaController(
        HpaConfig(MetricSpec.external_value(100_000), max_replicas=50, behavior=Behavior())
    )
    pods = _pods(3)
    desired, reason = hpa.reconcile(0.0, 3, 3, pods, {}, external_values_milli=[300_000, 250_000])
    assert (desired, reason) == (7, "ScaleUpLimit")  # wants ceil(5.5 x 3) = 17


def test_external_average_value_uses_status_replicas() -> None:
    hpa = HpaController(
        HpaConfig(MetricSpec.external_average_value(100_000), max_replicas=50, behavior=Behavior())
    )
    desired, _ = hpa.reconcile(0.0, 4, 4, _pods(4), {}, external_values_milli=[600_000])
    assert desired == 6


def test_metric_error_leaves_replicas_unchanged() -> None:
    hpa = HpaController(HpaConfig(MetricSpec.resource_utilization("cpu", 50), max_replicas=10))
    assert hpa.reconcile(0.0, 3, 3, _pods(3, "cpu", 1000), {}) == (3, "FailedGetMetrics")
    assert hpa.last_error is not None and "no metrics returned" in hpa.last_error


def test_out_of_bounds_current_is_pulled_back_without_metrics() -> None:
    cfg = HpaConfig(MetricSpec.pods_average_value(1_000), min_replicas=2, max_replicas=5)
    assert HpaController(cfg).reconcile(0.0, 9, 9, [], {}) == (5, "AboveMaxReplicas")
    assert HpaController(cfg).reconcile(0.0, 1, 1, [], {}) == (2, "BelowMinReplicas")


def test_zero_replicas_disable_scaling() -> None:
    cfg = HpaConfig(MetricSpec.pods_average_value(1_000), max_replicas=5)
    assert HpaController(cfg).reconcile(0.0, 0, 0, [], {}) == (0, "ScalingDisabled")


# --------------------------------------------------------------------------- properties

_events = st.lists(st.builds(ScaleEvent, st.integers(1, 50), st.floats(-200.0, 0.0)), max_size=6)
_policies = st.lists(
    st.builds(
        ScalingPolicy,
        st.sampled_from(["Pods", "Percent"]),
        st.integers(1, 300),
        st.integers(1, 120),
    ),
    min_size=1,
    max_size=3,
).map(tuple)
_rules = st.builds(
    ResolvedRules, st.integers(0, 600), st.sampled_from(["Max", "Min", "Disabled"]), _policies
)


@given(
    recs=st.lists(st.tuples(st.integers(0, 100), st.floats(-900.0, 0.0)), max_size=8),
    current=st.integers(0, 100),
    desired=st.integers(0, 100),
    up_window=st.integers(0, 600),
    down_window=st.integers(0, 600),
)
def test_stabilization_never_moves_opposite_to_desired(
    recs: list[tuple[int, float]], current: int, desired: int, up_window: int, down_window: int
) -> None:
    log = [Recommendation(r, t) for r, t in recs]
    got, _ = stabilize_recommendation_with_behaviors(
        log, current, desired, 0.0, up_window, down_window
    )
    assert min(current, desired) <= got <= max(current, desired)


@given(
    bounds=st.tuples(st.integers(0, 50), st.integers(1, 100)).filter(lambda b: b[0] <= b[1]),
    current_frac=st.floats(0.0, 1.0),
    desired=st.integers(0, 200),
    up_rules=_rules,
    down_rules=_rules,
    up_events=_events,
    down_events=_events,
)
def test_rate_limited_result_lies_between_current_and_desired_within_bounds(
    bounds: tuple[int, int],
    current_frac: float,
    desired: int,
    up_rules: ResolvedRules,
    down_rules: ResolvedRules,
    up_events: list[ScaleEvent],
    down_events: list[ScaleEvent],
) -> None:
    lo, hi = bounds
    current = lo + round(current_frac * (hi - lo))
    got, _ = convert_desired_replicas_with_behavior_rate(
        current, desired, lo, hi, up_rules, down_rules, ScaleEventLog(up_events, down_events), 0.0
    )
    if desired >= current:
        assert current <= got <= min(desired, hi)
    else:
        assert max(desired, lo) <= got <= current


@settings(max_examples=50)
@given(
    loads=st.lists(st.integers(0, 40_000), min_size=1, max_size=40),
    use_behavior=st.booleans(),
    start=st.integers(1, 10),
)
def test_controller_stays_within_min_and_max_over_any_load_sequence(
    loads: list[int], use_behavior: bool, start: int
) -> None:
    cfg = HpaConfig(
        MetricSpec.pods_average_value(5_000),
        min_replicas=1,
        max_replicas=10,
        behavior=Behavior() if use_behavior else None,
    )
    hpa = HpaController(cfg)
    replicas = start
    for k, load in enumerate(loads):
        replicas, _ = _step(hpa, k * SYNC_S, replicas, load)
        assert 1 <= replicas <= 10
