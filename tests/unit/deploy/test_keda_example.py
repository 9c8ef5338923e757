"""deploy/examples/keda/: Ebb as KEDA's external scaler for the vLLM example (hand-off mode).

The render (validated with KEDA's own CRD schemas in test_renders.py) wires one chain end to end:
the ScaledObject's trigger names the Service, port, target and workload class the controller serves
and scales; its fallback keeps the replicas when Ebb cannot answer; its HPA behaviour passes Ebb's
number in one step; the TriggerAuthentication, the token's env var and the controller's projected
files come from exactly the Secrets make-secrets.sh creates; and, with those files, Ebb's real scaler
answers a client holding KEDA's material (the ScaledObject's address, certificate and metadata) and
refuses one without it. The actuator's Role is exactly what the actuator calls in hand-off mode.
"""

from __future__ import annotations

import os
import random
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from deploy_render import DEPLOY, controller_args, flags, one, parse_with_the_cli, render

EXAMPLE = DEPLOY / "examples" / "keda"


@pytest.fixture(scope="module")
def docs() -> list[dict[str, Any]]:
    return render(EXAMPLE)


def test_every_file_of_the_example_is_in_its_kustomization() -> None:
    kust = yaml.safe_load((EXAMPLE / "kustomization.yaml").read_text())
    assert set(kust["resources"]) - {"../vllm"} == {p.name for p in EXAMPLE.glob("*.yaml")} - {"kustomization.yaml"}
    assert {p["path"] for p in kust["patches"]} == {f"patches/{p.name}" for p in (EXAMPLE / "patches").glob("*.yaml")}


def workload_class(docs: list[dict[str, Any]], name: str) -> Any:
    from ebb.config.workloads import parse_workload_classes

    data = one(docs, "ConfigMap", "ebb-config")["data"]["workloads.yaml"]
    (cls,) = [c for c in parse_workload_classes(data, "ebb-config:workloads.yaml") if c.name == name]
    return cls


def test_the_controller_hands_off_and_serves_keda_on_the_port_the_service_and_policy_open(
        docs: list[dict[str, Any]]) -> None:
    args = controller_args(docs)
    p = parse_with_the_cli(args)
    assert p["mode"] == "act" and p["serve_keda"] == "0.0.0.0:9090" and p["actuator"] == "kubernetes"
    port = int(p["serve_keda"].rsplit(":", 1)[1])
    spec = one(docs, "Deployment", "ebb-controller")["spec"]["template"]["spec"]
    (keda_port,) = [q for q in spec["containers"][0]["ports"] if q["name"] == "keda"]
    assert keda_port["containerPort"] == port
    svc = one(docs, "Service", "ebb-keda")
    (sp,) = svc["spec"]["ports"]
    assert sp["targetPort"] == "keda" and sp["appProtocol"] == "grpc"
    (trigger,) = one(docs, "ScaledObject", "vllm")["spec"]["triggers"]
    host, trigger_port = trigger["metadata"]["scalerAddress"].rsplit(":", 1)
    assert host == f"{svc['metadata']['name']}.{svc['metadata']['namespace']}.svc" and int(trigger_port) == sp["port"]
    (rule,) = one(docs, "NetworkPolicy", "ebb-keda-ingress")["spec"]["ingress"]
    assert rule["ports"] == [{"protocol": "TCP", "port": port}]
    assert rule["from"] == [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "keda"}}}]
    assert one(docs, "NetworkPolicy", "ebb-keda-ingress")["spec"]["podSelector"] == {
        "matchLabels": one(docs, "Deployment", "ebb-controller")["spec"]["selector"]["matchLabels"]}


def test_the_scaled_object_targets_what_ebb_scales_and_keeps_replicas_when_ebb_cannot_answer(
        docs: list[dict[str, Any]]) -> None:
    so = one(docs, "ScaledObject", "vllm")
    a = flags(controller_args(docs))
    (trigger,) = so["spec"]["triggers"]
    meta = trigger["metadata"]
    target = one(docs, "Deployment", so["spec"]["scaleTargetRef"]["name"])
    assert target["metadata"]["namespace"] == so["metadata"]["namespace"] == meta["namespace"] == a["namespace"]
    assert target["metadata"]["name"] == meta["deployment"] == a["deployment"]
    assert "replicas" not in target["spec"]  # the ScaledObject's HPA owns it
    assert trigger["type"] == "external" and trigger["metricType"] == "AverageValue"  # fallback needs AverageValue
    assert meta["workloadClass"] == a["workload-class"]
    cls = workload_class(docs, meta["workloadClass"])
    spec = so["spec"]
    assert spec["minReplicaCount"] == cls.min_replicas == spec["fallback"]["replicas"]
    assert spec["fallback"] == {"failureThreshold": 3, "replicas": spec["minReplicaCount"],
                                "behavior": "currentReplicasIfHigher"}
    assert spec["maxReplicaCount"] > spec["minReplicaCount"]


def one_step_passes(behavior: dict[str, Any], low: int, high: int) -> bool:
    """Whether, from every replica count in [low, high], the HPA may reach any other in one period
    (upstream's rules: no stabilization; per direction, the largest change a policy allows with
    selectPolicy Max: Pods = value, Percent = ceil(current × value / 100))."""
    import math

    def limit(rules: dict[str, Any], n: int) -> int:
        assert rules["selectPolicy"] == "Max" and rules["stabilizationWindowSeconds"] == 0
        assert {p["periodSeconds"] for p in rules["policies"]} == {15}  # one HPA sync
        return max(p["value"] if p["type"] == "Pods" else math.ceil(n * p["value"] / 100) for p in rules["policies"])
    return all(n + limit(behavior["scaleUp"], n) >= high and n - limit(behavior["scaleDown"], n) <= low
               for n in range(low, high + 1))


def test_the_hpa_applies_ebbs_number_in_one_step_without_smoothing(docs: list[dict[str, Any]]) -> None:
    spec = one(docs, "ScaledObject", "vllm")["spec"]
    assert one_step_passes(spec["advanced"]["horizontalPodAutoscalerConfig"]["behavior"],
                           spec["minReplicaCount"], spec["maxReplicaCount"])


def secret_files(calls: list[list[str]], keys: Path) -> dict[tuple[str, str], dict[str, Path]]:
    """(namespace, Secret) -> {key: the file it holds}, from ``kubectl create secret generic --from-file``."""
    out: dict[tuple[str, str], dict[str, Path]] = {}
    for c in calls:
        files = {}
        for f in (x.removeprefix("--from-file=") for x in c if x.startswith("--from-file=")):
            k, _, path = f.partition("=")
            files[k if path else Path(k).name] = keys / (path or k)
        out[(c[1], c[c.index("generic") + 1])] = files
    return out


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], dict[str, Path]]:
    """The Secrets make-secrets.sh creates, with their files (a stub kubectl records the calls)."""
    if subprocess.run(["sh", "-c", "command -v openssl"], capture_output=True).returncode:
        pytest.skip("openssl not installed: make-secrets.sh cannot run")
    tmp = tmp_path_factory.mktemp("keda")
    log, stub = tmp / "kubectl.log", tmp / "kubectl"
    stub.write_text(f'#!/bin/sh\nfor a in "$@"; do printf "%s\\t" "$a"; done >> {log}\necho >> {log}\n')
    stub.chmod(0o755)
    subprocess.run(["bash", str(EXAMPLE / "make-secrets.sh"), str(tmp / "keys")], check=True, capture_output=True,
                   timeout=120, env={**os.environ, "KUBECTL": str(stub)})
    calls = [line.rstrip("\t").split("\t") for line in log.read_text().splitlines()]
    assert all(c[0] == "-n" and c[2:5] == ["create", "secret", "generic"] for c in calls), calls
    return secret_files(calls, tmp / "keys")


def controller_files(docs: list[dict[str, Any]], made: dict[tuple[str, str], dict[str, Path]]) -> dict[str, Path]:
    """The controller's mounted path -> the script's file behind it, through the projected volume."""
    spec = one(docs, "Deployment", "ebb-controller")["spec"]["template"]["spec"]
    (vol,) = [v for v in spec["volumes"] if v["name"] == "keda"]
    (mount,) = [m for m in spec["containers"][0]["volumeMounts"] if m["name"] == "keda"]
    assert mount["readOnly"] is True
    return {f"{mount['mountPath']}/{item['path']}": made[("ebb-system", src["secret"]["name"])][item["key"]]
            for src in vol["projected"]["sources"] for item in src["secret"]["items"]}


def keda_material(docs: list[dict[str, Any]], made: dict[tuple[str, str], dict[str, Path]]) -> tuple[
        dict[str, bytes], dict[str, str]]:
    """What KEDA holds for the trigger: its TriggerAuthentication parameters (PEM) and the scalerMetadata
    it sends (``*FromEnv`` resolved from the scale target's container env, as KEDA's resolver does)."""
    so = one(docs, "ScaledObject", "vllm")
    ns = so["metadata"]["namespace"]
    (trigger,) = so["spec"]["triggers"]
    auth = one(docs, "TriggerAuthentication", trigger["authenticationRef"]["name"])
    assert auth["metadata"]["namespace"] == ns
    params = {r["parameter"]: made[(ns, r["name"])][r["key"]].read_bytes() for r in auth["spec"]["secretTargetRef"]}
    target = one(docs, "Deployment", so["spec"]["scaleTargetRef"]["name"])
    (container,) = [c for c in target["spec"]["template"]["spec"]["containers"]
                    if c["name"] == so["spec"]["scaleTargetRef"]["envSourceContainerName"]]
    env = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in container.get("env", [])}
    meta = {}
    for k, v in trigger["metadata"].items():
        if k.endswith("FromEnv"):
            ref = env[v]
            v = made[(ns, ref["name"])][ref["key"]].read_text()
        meta[k] = v
    return params, meta


def test_every_file_and_parameter_comes_from_a_secret_the_script_makes(
        docs: list[dict[str, Any]], made: dict[tuple[str, str], dict[str, Path]]) -> None:
    files = controller_files(docs, made)
    a = flags(controller_args(docs))
    assert {a["keda-cert"], a["keda-key"], a["keda-client-ca"], a["keda-token-file"]} == set(files)
    params, meta = keda_material(docs, made)
    assert set(params) == {"caCert", "tlsClientCert", "tlsClientKey"}  # KEDA's auth parameters for `external`
    assert meta["tokenFromEnv"] == files[a["keda-token-file"]].read_text().strip()


def test_ebbs_scaler_answers_keda_with_the_decided_replicas_and_refuses_anyone_else(
        docs: list[dict[str, Any]], made: dict[tuple[str, str], dict[str, Path]]) -> None:
    """The real server (``KedaScalerServer``) built from the controller's flags and files, on loopback
    instead of 0.0.0.0:9090; the client dials it as KEDA does: TLS to the scalerAddress's name with the
    TriggerAuthentication's CA and client certificate, the trigger's metadata in every call."""
    grpc = pytest.importorskip("grpc")
    from ebb.decide.handoff import HandoffBoard
    from ebb.actuate.keda_pb import messages
    from ebb.actuate.keda_scaler import METRIC_NAME, SERVICE, KedaScalerServer

    files = controller_files(docs, made)
    a = flags(controller_args(docs))
    params, meta = keda_material(docs, made)
    so = one(docs, "ScaledObject", "vllm")
    target = f"{a['namespace']}/{a['deployment']}"
    board = HandoffBoard()
    board.spec_seen(target, 2)
    board.hand_off(target, 5)  # Ebb decided 5 replicas
    server = KedaScalerServer(board, classes={target: a["workload-class"]},
                              token=files[a["keda-token-file"]].read_text().strip(),
                              cert_file=str(files[a["keda-cert"]]), key_file=str(files[a["keda-key"]]),
                              client_ca_file=str(files[a["keda-client-ca"]]))
    port = server.start("127.0.0.1:0").rsplit(":", 1)[1]
    pb = messages()
    host = meta["scalerAddress"].rsplit(":", 1)[0]

    def call(method: str, metadata: dict[str, str], *, cert: bool = True) -> Any:
        creds = grpc.ssl_channel_credentials(root_certificates=params["caCert"],
                                             private_key=params["tlsClientKey"] if cert else None,
                                             certificate_chain=params["tlsClientCert"] if cert else None)
        with grpc.secure_channel(f"127.0.0.1:{port}", creds, options=[("grpc.ssl_target_name_override", host)]) as ch:
            ref = pb.ScaledObjectRef(name=so["metadata"]["name"], namespace=so["metadata"]["namespace"],
                                     scalerMetadata=metadata)
            if method == "GetMetrics":
                req, resp = pb.GetMetricsRequest(scaledObjectRef=ref, metricName=METRIC_NAME), pb.GetMetricsResponse
            else:
                req, resp = ref, pb.GetMetricSpecResponse
            return ch.unary_unary(f"/{SERVICE}/{method}", request_serializer=lambda m: m.SerializeToString(),
                                  response_deserializer=resp.FromString)(req, timeout=10)
    try:
        (spec,) = call("GetMetricSpec", meta).metricSpecs
        assert spec.metricName == METRIC_NAME and spec.targetSizeFloat == 1.0  # AverageValue 1: desired = the value
        (value,) = call("GetMetrics", meta).metricValues
        assert value.metricValueFloat == 5.0
        for bad, code in (({**meta, "tokenFromEnv": "x" * 64}, grpc.StatusCode.UNAUTHENTICATED),
                          ({**meta, "workloadClass": "offline-training"}, grpc.StatusCode.FAILED_PRECONDITION),
                          ({**meta, "deployment": "other"}, grpc.StatusCode.NOT_FOUND)):
            with pytest.raises(grpc.RpcError) as refused:
                call("GetMetrics", bad)
            assert refused.value.code() == code
        with pytest.raises(grpc.RpcError) as no_cert:  # mTLS: no client certificate, no connection
            call("GetMetrics", meta, cert=False)
        assert no_cert.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        server.stop()


def used_in_hand_off(namespace: str, deployment: str) -> set[tuple[str, str, str, str]]:
    """(namespace or "*", apiGroup, resource, verb) of every call the Kubernetes actuator makes in
    hand-off mode against the fake API server: scale-down with a victim, scale-up, eviction."""
    client = pytest.importorskip("kubernetes.client")
    import re

    from ebb.decide.handoff import HandoffBoard
    from ebb.actuate.kubernetes import KubernetesActuator
    from ebb.model.ids import DecisionId
    from ebb.model.observation import ScaleRequest
    from ebb.testing.fake_kube import FakeKubeApiServer, rbac_permission

    t = [0.0]

    def sleep(s: float) -> None:
        t[0] += s

    with FakeKubeApiServer() as fake:
        fake.add_node("node-a", "zone-a")
        fake.add_deployment(deployment, 4, namespace=namespace)
        api = client.ApiClient(fake.configuration())
        try:
            act = KubernetesActuator(namespace, deployment, api_client=api, clock=lambda: t[0], sleep=sleep,
                                     rng=random.Random(1), handoff=HandoffBoard(clock=lambda: t[0]))
            st = act.state()
            act.apply(DecisionId("down"), ScaleRequest(3, victims=(st.replicas[0].replica,)))
            act.apply(DecisionId("up"), ScaleRequest(4))
            fake.add_pdb("all", {"app": deployment}, namespace=namespace, min_available=4)  # /scale stayed at 4
            assert not act.evict(fake.pod_names(namespace)[0])
            perms = set()
            for r in fake.requests:
                perm = rbac_permission(r.method, r.path)
                assert perm is not None, f"the actuator called {r.method} {r.path}, which the fake does not model"
                m = re.match(r"^/apis?/(?:[^/]+/)?v1/namespaces/([^/]+)/", r.path)
                perms.add((m.group(1) if m else "*", *perm))
            return perms
        finally:
            api.close()


def test_the_actuator_role_grants_what_hand_off_calls_and_no_scale_write(docs: list[dict[str, Any]]) -> None:
    from test_manifests import granted

    a = flags(controller_args(docs))
    used = used_in_hand_off(a["namespace"], a["deployment"])
    assert ("serving", "apps", "deployments/scale", "patch") not in used
    assert granted(docs, ("ebb-system", "ebb-controller")) == used


def test_ebb_lint_finds_nothing_in_the_example() -> None:
    from ebb.lint import ALL_RULES, lint_paths

    result = lint_paths([EXAMPLE], ALL_RULES)
    assert result.files >= 6 and not result.errors and not result.findings, (result.errors, result.findings)
