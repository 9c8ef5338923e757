"""deploy/examples/hpa-external/ and deploy/examples/keda-prometheus/: Ebb hands off through Prometheus.

The controller runs ``--mode=act --hand-off`` (parsed by the real CLI); the HPA (or KEDA's prometheus
trigger) reads ``ebb_desired_replicas`` with exactly the labels Ebb's gauge carries in hand-off mode
(taken from Ebb's own metrics code); the PodMonitor keeps those labels (honorLabels) on the port Ebb
serves; Prometheus itself (``promtool test rules``) evaluates the adapter's query and the ScaledObject's
to the deciding replica's number, ignoring a follower's series and other targets and modes; the HPA
applies any step in one sync; an empty Prometheus answer cannot become a scale-down; the actuator's
Role is exactly what hand-off calls.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from deploy_render import DEPLOY, controller_args, flags, one, parse_with_the_cli, render
from test_keda_example import one_step_passes, used_in_hand_off, workload_class

EXAMPLE = DEPLOY / "examples" / "hpa-external"
KEDA_PROM = DEPLOY / "examples" / "keda-prometheus"
ADAPTER = EXAMPLE / "prometheus-adapter-values.yaml"


@pytest.fixture(scope="module")
def docs() -> list[dict[str, Any]]:
    return render(EXAMPLE)


def test_every_manifest_of_the_examples_is_in_their_kustomizations() -> None:
    for root, base in ((EXAMPLE, "../vllm"), (KEDA_PROM, "../hpa-external")):
        kust = yaml.safe_load((root / "kustomization.yaml").read_text())
        files = {p.name for p in root.glob("*.yaml")} - {"kustomization.yaml", ADAPTER.name}
        assert set(kust["resources"]) - {base} == files
        assert {p["path"] for p in kust["patches"]} == {f"patches/{p.name}" for p in (root / "patches").glob("*.yaml")}


def gauge_series(target: str) -> dict[str, dict[str, str]]:
    """The labels of ``ebb_desired_replicas`` and ``ebb_leader`` as Ebb exports them in hand-off mode."""
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from ebb.decide.handoff import HandoffBoard
    from ebb.live.replica_gauge import ReplicaGauge
    from ebb.live.settings import CycleOutcome
    from ebb.telemetry.metrics import EbbMetrics

    metrics, board = EbbMetrics(), HandoffBoard()
    board.spec_seen(target, 2)
    board.hand_off(target, 5)
    ReplicaGauge(metrics, target, "act", board)(CycleOutcome(1, 1.0, "scale_up", 5, 5, 2, 0.5))
    metrics.set_leader(True)
    out = {}
    for fam in text_string_to_metric_families(generate_latest(metrics.registry).decode()):
        for s in fam.samples:
            if s.name in ("ebb_desired_replicas", "ebb_leader"):
                out[s.name] = dict(s.labels)
    return out


def test_the_controller_hands_off_and_prometheus_keeps_its_labels(docs: list[dict[str, Any]]) -> None:
    args = controller_args(docs)
    p = parse_with_the_cli(args)
    assert p["mode"] == "act" and p["hand_off"] is True and p["serve_keda"] is None
    dep = one(docs, "Deployment", "ebb-controller")
    pm = one(docs, "PodMonitor", "ebb-controller")
    assert pm["metadata"]["namespace"] == dep["metadata"]["namespace"]
    assert pm["spec"]["selector"]["matchLabels"] == dep["spec"]["selector"]["matchLabels"]
    (ep,) = pm["spec"]["podMetricsEndpoints"]
    (port,) = [q for q in dep["spec"]["template"]["spec"]["containers"][0]["ports"] if q["name"] == ep["port"]]
    assert port["containerPort"] == p["metrics_port"] and p["metrics_bind"] == "0.0.0.0"
    # Ebb's `namespace` label names the scaled workload's; the operator's target label would replace it
    assert ep["honorLabels"] is True and "namespace" in gauge_series("serving/vllm")["ebb_desired_replicas"]


def test_the_hpa_reads_the_gauge_ebb_exports_for_the_deployment_it_scales(docs: list[dict[str, Any]]) -> None:
    hpa = one(docs, "HorizontalPodAutoscaler", "vllm")
    a = flags(controller_args(docs))
    target = one(docs, "Deployment", hpa["spec"]["scaleTargetRef"]["name"])
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": a["deployment"]}
    assert target["metadata"]["namespace"] == hpa["metadata"]["namespace"] == a["namespace"]
    assert "replicas" not in target["spec"]
    (metric,) = hpa["spec"]["metrics"]
    assert metric["type"] == "External"
    ext = metric["external"]
    series = gauge_series(f"{a['namespace']}/{a['deployment']}")
    assert ext["metric"]["name"] in series
    assert ext["metric"]["selector"]["matchLabels"] == series[ext["metric"]["name"]]
    assert ext["target"] == {"type": "AverageValue", "averageValue": "1"}
    cls = workload_class(docs, a.get("workload-class", "order-fulfilment"))
    assert hpa["spec"]["minReplicas"] == cls.min_replicas < hpa["spec"]["maxReplicas"]
    assert one_step_passes(hpa["spec"]["behavior"], hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"])


def test_the_actuator_role_grants_what_hand_off_calls_and_no_scale_write(docs: list[dict[str, Any]]) -> None:
    from test_manifests import granted

    a = flags(controller_args(docs))
    assert granted(docs, ("ebb-system", "ebb-controller")) == used_in_hand_off(a["namespace"], a["deployment"])


def adapter_query(docs: list[dict[str, Any]]) -> str:
    """prometheus-adapter's query for hpa.yaml's metric: its rule's metricsQuery with the HPA's selector
    (and the HPA's namespace, from the rule's namespace override) as the label matchers."""
    (rule,) = yaml.safe_load(ADAPTER.read_text())["rules"]["external"]
    hpa = one(docs, "HorizontalPodAutoscaler", "vllm")
    ext = hpa["spec"]["metrics"][0]["external"]
    assert rule["name"]["as"] == ext["metric"]["name"] and rule["seriesQuery"].startswith(ext["metric"]["name"] + "{")
    assert rule["resources"]["overrides"] == {"namespace": {"resource": "namespace"}}
    labels = {**ext["metric"]["selector"]["matchLabels"], "namespace": hpa["metadata"]["namespace"]}
    matchers = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    query: str = rule["metricsQuery"].replace("<<.Series>>", ext["metric"]["name"]).replace("<<.LabelMatchers>>",
                                                                                          matchers)
    return query


def scaled_object_query() -> str:
    so = one(render(KEDA_PROM), "ScaledObject", "vllm")
    (trigger,) = so["spec"]["triggers"]
    query: str = trigger["metadata"]["query"]
    return query


@pytest.mark.parametrize("which", ["prometheus-adapter", "keda-prometheus"])
def test_prometheus_evaluates_the_query_to_the_deciding_replicas_number(
        which: str, docs: list[dict[str, Any]], tmp_path: Path) -> None:
    """Leader pod a decided a scale-down to 3; follower pod b exports the spec it read (5); another
    Deployment (9) and a recommend-mode series (7) exist too. The query must give 3, one sample."""
    if shutil.which("promtool") is None:
        pytest.skip("promtool (Prometheus) not installed: the query is not evaluated")
    query = adapter_query(docs) if which == "prometheus-adapter" else scaled_object_query()
    s = gauge_series("serving/vllm")

    def series(name: str, value: str, **labels: str) -> dict[str, str]:
        body = ",".join(f'{k}="{v}"' for k, v in sorted({**s[name], **labels}.items()))
        return {"series": f"{name}{{{body}}}", "values": value}
    tests = {"rule_files": [], "evaluation_interval": "1m", "tests": [{
        "interval": "15s",
        "input_series": [series("ebb_desired_replicas", "3x8", pod="a"), series("ebb_leader", "1x8", pod="a"),
                         series("ebb_desired_replicas", "5x8", pod="b"), series("ebb_leader", "0x8", pod="b"),
                         series("ebb_desired_replicas", "9x8", pod="a", deployment="other"),
                         series("ebb_desired_replicas", "7x8", pod="c", mode="recommend"),
                         series("ebb_leader", "1x8", pod="c")],
        "promql_expr_test": [{"expr": query, "eval_time": "1m", "exp_samples": [{"labels": "{}", "value": 3}]}]}]}
    path = tmp_path / "test.yaml"
    path.write_text(yaml.safe_dump(tests))
    out = subprocess.run(["promtool", "test", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr


def test_keda_prometheus_replaces_the_hpa_and_never_reads_an_empty_answer_as_zero() -> None:
    docs = render(KEDA_PROM)
    assert not [d for d in docs if d["kind"] == "HorizontalPodAutoscaler"]  # one autoscaler per Deployment
    so = one(docs, "ScaledObject", "vllm")
    spec = so["spec"]
    (trigger,) = spec["triggers"]
    assert trigger["type"] == "prometheus" and trigger["metricType"] == "AverageValue"
    meta = trigger["metadata"]
    assert meta["threshold"] == "1" and meta["ignoreNullValues"] == "false"
    assert meta["serverAddress"] == flags(controller_args(docs))["prometheus-url"]
    assert spec["scaleTargetRef"]["name"] == flags(controller_args(docs))["deployment"]
    assert spec["fallback"] == {"failureThreshold": 3, "replicas": spec["minReplicaCount"],
                                "behavior": "currentReplicasIfHigher"}
    assert one_step_passes(spec["advanced"]["horizontalPodAutoscalerConfig"]["behavior"], spec["minReplicaCount"],
                           spec["maxReplicaCount"])


@pytest.mark.parametrize("root", [EXAMPLE, KEDA_PROM], ids=lambda p: p.name)
def test_ebb_lint_finds_nothing_in_the_example(root: Path) -> None:
    from ebb.lint import ALL_RULES, lint_paths

    result = lint_paths([root], ALL_RULES)
    assert result.files >= 3 and not result.errors and not result.findings, (result.errors, result.findings)
