"""The HPA emulator reproduces every upstream Kubernetes test-table case (171 cases).

Fixtures: ``tests/data/conformance`` (see its README for provenance and conventions).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ebb.sim.baselines import hpa_behavior as hb
from ebb.sim.baselines import hpa_calc as hc

DATA = Path(__file__).resolve().parents[3] / "data" / "conformance"
CALC = json.loads((DATA / "hpa_replica_calc.json").read_text())
BEHAVIOR = json.loads((DATA / "hpa_behavior.json").read_text())
NOW = 1_700_000_000.0


def _cases(doc: dict[str, Any], section: str) -> pytest.MarkDecorator:
    cases = doc[section]
    return pytest.mark.parametrize("case", cases, ids=[c["name"] for c in cases])


def _time(t: dict[str, Any] | None) -> float | None:
    if t is None:
        return None
    if t.get("go_zero_time"):
        return hc.GO_ZERO_TIME_S
    return NOW + float(t["relative_seconds"])


def _req(requests: dict[str, int] | None) -> dict[str, int] | None:
    if requests is None:
        return None
    return {k.removesuffix("_milli"): v for k, v in requests.items()}


def _container(c: dict[str, Any]) -> hc.ContainerSpec:
    return hc.ContainerSpec(c["name"], _req(c["requests"]) or {}, c.get("restart_policy"))


def _pod(p: dict[str, Any]) -> hc.PodRecord:
    ready = next((c for c in p.get("conditions", []) if c["type"] == "Ready"), None)
    return hc.PodRecord(
        name=p["name"],
        phase=p.get("phase", "Running"),
        start_time_s=_time(p.get("start_time")),
        ready=None
        if ready is None
        else hc.ReadyCondition(ready["status"], _time(ready["last_transition_time"]) or 0.0),
        deletion_set=p.get("deletion_timestamp_set", False),
        containers=tuple(_container(c) for c in p.get("containers", [])),
        init_containers=tuple(_container(c) for c in p.get("init_containers", [])),
        pod_level_requests_milli=_req(p.get("pod_level_requests")),
    )


def _settings(case: dict[str, Any]) -> hc.CalcSettings:
    tol = case.get("tolerance", {"scale_down": 0.1, "scale_up": 0.1})
    return hc.CalcSettings(
        tolerances=hc.Tolerances(tol["scale_down"], tol["scale_up"]),
        cpu_initialization_period_s=case["cpu_initialization_period_seconds"],
        delay_of_initial_readiness_status_s=case["delay_of_initial_readiness_status_seconds"],
    )


def _run_replica_case(case: dict[str, Any]) -> dict[str, int]:
    fn = case["function"]
    pods = [_pod(p) for p in case["pods"]]
    settings = _settings(case)
    tol = settings.tolerances
    target = case["target"]
    current = case["current_replicas"]
    if fn == "GetResourceReplicas":
        items = [
            hc.PodResourceMetrics(
                m["pod_name"],
                _time(m["timestamp"]) or 0.0,
                m["window_seconds"],
                tuple(hc.ContainerUsage(c["name"], c["usage_milli"]) for c in m["containers"]),
            )
            for m in case["resource_metrics"]
        ]
        container = case["container"] or ""
        samples = hc.resource_metric_samples(items, case["resource"], container)
        r = hc.get_resource_replicas(
            current,
            target["average_utilization_percent"],
            case["resource"],
            pods,
            samples,
            NOW,
            settings,
            container,
        )
        return {
            "replicas": r.replicas,
            "utilization_percent": r.utilization_percent,
            "raw_value_milli": r.raw_value_milli,
        }
    if fn == "GetMetricReplicas":
        samples = {
            m["pod_name"]: hc.PodMetricSample(
                m["value_milli"], _time(m["timestamp"]) or 0.0, m["window_seconds"]
            )
            for m in case["pods_metric_values"]
        }
        m = hc.get_metric_replicas(
            current, target["average_value_milli"], pods, samples, NOW, settings
        )
    elif fn == "GetObjectMetricReplicas":
        m = hc.get_object_metric_replicas(
            current, target["value_milli"], case["object_metric_value_milli"], pods, tol
        )
    elif fn == "GetObjectPerPodMetricReplicas":
        m = hc.get_object_per_pod_metric_replicas(
            current, target["average_value_milli"], case["object_metric_value_milli"], tol
        )
    elif fn == "GetExternalMetricReplicas":
        m = hc.get_external_metric_replicas(
            current, target["value_milli"], case["external_metric_values_milli"], pods, tol
        )
    elif fn == "GetExternalPerPodMetricReplicas":
        m = hc.get_external_per_pod_metric_replicas(
            current, target["average_value_milli"], case["external_metric_values_milli"], tol
        )
    else:  # pragma: no cover - fixture drift
        raise AssertionError(f"unknown function {fn}")
    return {"replicas": m.replicas, "usage_milli": m.usage_milli}


@_cases(CALC, "replica_cases")
def test_replica_calculator_matches_upstream_case(case: dict[str, Any]) -> None:
    expected = case["expected"]
    if "error_contains" in expected:
        with pytest.raises(hc.HpaCalcError) as info:
            _run_replica_case(case)
        assert expected["error_contains"] in str(info.value)
    else:
        assert _run_replica_case(case) == expected


@_cases(CALC, "group_pods_cases")
def test_group_pods_classifies_like_upstream(case: dict[str, Any]) -> None:
    metrics = {
        name: hc.PodMetricSample(m["value"], _time(m["timestamp"]) or 0.0, m["window_seconds"])
        for name, m in case["metrics"].items()
    }
    g = hc.group_pods(
        [_pod(p) for p in case["pods"]],
        metrics,
        case["resource"],
        case["cpu_initialization_period_seconds"],
        case["delay_of_initial_readiness_status_seconds"],
        NOW,
    )
    e = case["expected"]
    assert g.ready_pod_count == e["ready_pod_count"]
    assert g.unready == frozenset(e["unready_pods"])
    assert g.missing == frozenset(e["missing_pods"])
    assert g.ignored == frozenset(e["ignored_pods"])


@_cases(CALC, "calculate_requests_cases")
def test_request_calculation_matches_upstream_case(case: dict[str, Any]) -> None:
    pods = [_pod(p) for p in case["pods"]]
    expected = case["expected"]

    def call() -> object:
        if case["function"] == "calculatePodRequestsFromContainers":
            return hc.calculate_pod_requests_from_containers(
                pods[0], case["container"], case["resource"]
            )
        return hc.calculate_requests(
            pods, case["container"], case["resource"], case["pod_level_resources_feature_enabled"]
        )

    if "error" in expected:
        with pytest.raises(hc.HpaCalcError) as info:
            call()
        assert str(info.value) == expected["error"]
    else:
        assert call() == expected["requests_milli"]


# --------------------------------------------------------------------------- behavior


def _recs(items: list[dict[str, Any]]) -> list[hb.Recommendation]:
    return [hb.Recommendation(r["recommendation"], NOW + r["relative_seconds"]) for r in items]


def _events(items: list[dict[str, Any]]) -> list[hb.ScaleEvent]:
    return [
        hb.ScaleEvent(e["replica_change"], NOW + e["relative_seconds"], e.get("outdated", False))
        for e in items
    ]


def _rules(r: dict[str, Any]) -> hb.ResolvedRules:
    return hb.ResolvedRules(
        stabilization_window_s=r["stabilization_window_seconds"] or 0,
        select_policy=r["select_policy"],
        policies=tuple(
            hb.ScalingPolicy(p["type"], p["value"], p["period_seconds"]) for p in r["policies"]
        ),
    )


@_cases(BEHAVIOR, "stabilize_recommendation_cases")
def test_legacy_stabilization_matches_upstream_case(case: dict[str, Any]) -> None:
    i, e = case["inputs"], case["expected"]
    log = _recs(i["recommendations"])
    got = hb.stabilize_recommendation(
        log, i["prenormalized_desired_replicas"], NOW, i["downscale_stabilization_window_seconds"]
    )
    assert got == e["stabilized_replicas"]
    assert len(log) == e["recommendations_log_length"]


@_cases(BEHAVIOR, "stabilize_recommendation_with_behaviors_cases")
def test_behavior_stabilization_matches_upstream_case(case: dict[str, Any]) -> None:
    i, e = case["inputs"], case["expected"]
    log = _recs(i["recommendations"])
    got, _ = hb.stabilize_recommendation_with_behaviors(
        log,
        i["current_replicas"],
        i["prenormalized_desired_replicas"],
        NOW,
        i["scale_up_stabilization_window_seconds"],
        i["scale_down_stabilization_window_seconds"],
    )
    assert got == e["stabilized_replicas"]
    if "stored_recommendation_values" in e:
        assert [r.recommendation for r in log] == e["stored_recommendation_values"]


@_cases(BEHAVIOR, "convert_desired_replicas_with_rules_cases")
def test_legacy_scale_limits_match_upstream_case(case: dict[str, Any]) -> None:
    i, e = case["inputs"], case["expected"]
    got = hb.convert_desired_replicas_with_rules(
        i["current_replicas"],
        i["desired_replicas"],
        i["min_replicas"],
        i["max_replicas"],
        i["scale_up_limit_factor"],
        i["scale_up_limit_minimum"],
    )
    assert got == (e["replicas"], e["condition_reason"])


@_cases(BEHAVIOR, "convert_desired_replicas_with_behavior_rate_cases")
def test_behavior_rate_limits_match_upstream_case(case: dict[str, Any]) -> None:
    i, e = case["inputs"], case["expected"]
    log = hb.ScaleEventLog(_events(i["scale_up_events"]), _events(i["scale_down_events"]))
    got = hb.convert_desired_replicas_with_behavior_rate(
        i["current_replicas"],
        i["prenormalized_desired_replicas"],
        i["min_replicas"],
        i["max_replicas"],
        _rules(i["scale_up_rules"]),
        _rules(i["scale_down_rules"]),
        log,
        NOW,
    )
    assert got == (e["replicas"], e["condition_reason"])


@_cases(BEHAVIOR, "scale_limit_cases")
def test_policy_limit_matches_upstream_case(case: dict[str, Any]) -> None:
    i = case["inputs"]
    fn = (
        hb.calculate_scale_up_limit_with_rules
        if case["function"] == "calculateScaleUpLimitWithScalingRules"
        else hb.calculate_scale_down_limit_with_rules
    )
    got = fn(
        i["current_replicas"],
        _events(i["scale_up_events"]),
        _events(i["scale_down_events"]),
        _rules(i["rules"]),
        NOW,
    )
    assert got == case["expected"]["limit"]


@_cases(BEHAVIOR, "store_scale_event_cases")
def test_scale_event_store_matches_upstream_case(case: dict[str, Any]) -> None:
    # Upstream runs every case as a scale-up (rules = behavior.scaleUp) and as a
    # scale-down (rules = behavior.scaleDown); both must give the same result.
    i, e = case["inputs"], case["expected"]
    rules = None if i["rules"] is None else _rules(i["rules"])
    change = i["replica_change"]
    for direction in ("up", "down"):
        log = hb.ScaleEventLog()
        events = log.up if direction == "up" else log.down
        events.extend(_events(i["previous_events"]))
        assert (
            hb.replicas_change_per_period(60, events, NOW)
            == e["replicas_change_per_60s_period_before_store"]
        )
        if direction == "up":
            log.record(rules, None, 10, 10 + change, NOW)
        else:
            log.record(None, rules, 10, 10 - change, NOW)
        got = [{"replica_change": ev.replica_change, "outdated": ev.outdated} for ev in events]
        assert got == e["events_after_store"], direction
        assert not (log.down if direction == "up" else log.up), "the other direction stays empty"
