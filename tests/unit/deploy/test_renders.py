"""Every kustomization under deploy/ (the default, both HA overlays, every example), rendered and checked
as a whole: ``kubectl kustomize`` prints what ``render()`` computes; every object validates (built-in
kinds against the Kubernetes 1.30 schema, strict; KEDA's against its v2.17.0 CRD schemas, strict;
PodMonitors by the fields used); no workload or scaler names a Service (``serviceName``, a
``NAME.NAMESPACE.svc`` address in args, env or trigger metadata) that the same render does not create,
apart from the cluster's own (Prometheus, the serving router); every Service selects pods of the render
on a port they declare; every Secret mounted or referenced is one the README or the render's script
creates; every controller's and agent's args parse with the real CLI.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

import crd_schema
from deploy_render import DEPLOY, K8S_VERSION, key, kubectl_render, name_of, parse_with_the_cli, render

RENDERS = {
    "default": DEPLOY,
    "ha-etcd": DEPLOY / "overlays" / "ha-etcd",
    "ha": DEPLOY / "overlays" / "ha",
    "vllm": DEPLOY / "examples" / "vllm",
    "keda": DEPLOY / "examples" / "keda",
    "hpa-external": DEPLOY / "examples" / "hpa-external",
    "keda-prometheus": DEPLOY / "examples" / "keda-prometheus",
}
SCRIPTS = {"ha-etcd": DEPLOY / "overlays" / "ha-etcd" / "make-certs.sh",
           "ha": DEPLOY / "overlays" / "ha-etcd" / "make-certs.sh",
           "keda": DEPLOY / "examples" / "keda" / "make-secrets.sh"}
# Services the manifests use but do not create, and whose they are
EXTERNAL = {
    "prometheus-operated.monitoring.svc": "the cluster's Prometheus (prometheus-operator's Service)",
    "llm-router.serving.svc": "the router of the serving fleet the default scales (the user's)",
}
WORKLOADS = {"Deployment", "StatefulSet", "DaemonSet"}
CRD_KINDS = set(crd_schema.FILES)


def docs_of(name: str) -> list[dict[str, Any]]:
    return render(RENDERS[name])


def every_doc() -> list[tuple[str, dict[str, Any]]]:
    return [(r, d) for r in RENDERS for d in docs_of(r)]


@pytest.mark.parametrize("name", RENDERS)
def test_kubectl_kustomize_renders_what_render_computes(name: str) -> None:
    theirs = kubectl_render(RENDERS[name])
    if theirs is None:
        pytest.skip("kubectl not installed; render() alone is checked")
    assert sorted(theirs, key=key) == sorted(docs_of(name), key=key)


@pytest.mark.parametrize(("render_name", "doc"), every_doc(),
                         ids=lambda x: x if isinstance(x, str) else "/".join(key(x)))
def test_every_object_validates_against_its_schema(render_name: str, doc: dict[str, Any]) -> None:
    if doc["kind"] in CRD_KINDS:
        crd_schema.validate(doc)
    elif doc["kind"] == "PodMonitor":
        assert doc["apiVersion"] == "monitoring.coreos.com/v1" and doc["metadata"]["namespace"]
        assert set(doc["spec"]) == {"selector", "podMetricsEndpoints"}
        for ep in doc["spec"]["podMetricsEndpoints"]:
            assert set(ep) <= {"port", "path", "interval", "scrapeTimeout", "honorLabels"}, ep
    else:
        kubernetes_validate = pytest.importorskip("kubernetes_validate")
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def pod_templates(docs: list[dict[str, Any]]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(workload, its pod template) for every Deployment, StatefulSet and DaemonSet."""
    return [(d, d["spec"]["template"]) for d in docs if d["kind"] in WORKLOADS]


def selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def service_hosts(doc: dict[str, Any]) -> set[str]:
    """``NAME.NAMESPACE.svc`` of every in-cluster address a workload's containers or a trigger name."""
    texts: list[str] = []
    if doc["kind"] in WORKLOADS:
        for c in doc["spec"]["template"]["spec"]["containers"]:
            texts += [str(a) for a in c.get("args", []) + c.get("command", [])]
            texts += [str(e.get("value", "")) for e in c.get("env", [])]
    if doc["kind"] == "ScaledObject":
        texts += [str(v) for t in doc["spec"]["triggers"] for v in t["metadata"].values()]
    return {m.group(1) for t in texts for m in re.finditer(r"([a-z0-9-]+\.[a-z0-9-]+\.svc)(?:\.cluster\.local)?\b", t)}


@pytest.mark.parametrize("name", RENDERS)
def test_no_workload_or_scaler_names_a_service_the_render_does_not_create(name: str) -> None:
    docs = docs_of(name)
    services = {f"{d['metadata']['name']}.{d['metadata']['namespace']}.svc" for d in docs if d["kind"] == "Service"}
    for d in docs:
        missing = service_hosts(d) - services - set(EXTERNAL)
        assert not missing, f"{name}: {d['kind']}/{d['metadata']['name']} names {missing}, which nothing here creates"
        if d["kind"] == "StatefulSet":
            assert f"{d['spec']['serviceName']}.{d['metadata']['namespace']}.svc" in services, d["spec"]["serviceName"]


@pytest.mark.parametrize("name", RENDERS)
def test_every_service_selects_pods_of_the_render_on_a_port_they_declare(name: str) -> None:
    docs = docs_of(name)
    for svc in (d for d in docs if d["kind"] == "Service"):
        pods = [t for w, t in pod_templates(docs) if w["metadata"]["namespace"] == svc["metadata"]["namespace"]
                and selects(svc["spec"]["selector"], t["metadata"]["labels"])]
        assert pods, f"{name}: Service {svc['metadata']['name']} selects no pod of the render"
        for port in svc["spec"]["ports"]:
            target = port.get("targetPort", port["port"])
            declared = {p.get("name") if isinstance(target, str) else p["containerPort"]
                        for t in pods for c in t["spec"]["containers"] for p in c.get("ports", [])}
            assert target in declared, f"{name}: Service {svc['metadata']['name']} port {target} is on no selected pod"


def referenced_secrets(docs: list[dict[str, Any]]) -> set[tuple[str, str]]:
    """(namespace, name) of every Secret a pod mounts or reads, or a TriggerAuthentication reads."""
    out: set[tuple[str, str]] = set()
    for d in docs:
        ns = d["metadata"].get("namespace", "")
        if d["kind"] == "TriggerAuthentication":
            out |= {(ns, r["name"]) for r in d["spec"]["secretTargetRef"]}
        if d["kind"] not in WORKLOADS:
            continue
        spec = d["spec"]["template"]["spec"]
        for v in spec.get("volumes", []):
            if "secret" in v:
                out.add((ns, v["secret"]["secretName"]))
            for src in v.get("projected", {}).get("sources", []):
                if "secret" in src:
                    out.add((ns, src["secret"]["name"]))
        for c in spec["containers"]:
            out |= {(ns, e["valueFrom"]["secretKeyRef"]["name"]) for e in c.get("env", [])
                    if "secretKeyRef" in e.get("valueFrom", {})}
    return out


def readme_secrets() -> set[tuple[str, str]]:
    text = (DEPLOY / "README.md").read_text(encoding="utf-8")
    return set(re.findall(r"kubectl -n (\S+) create secret generic (\S+)", text))


@pytest.fixture(scope="module")
def script_secrets(tmp_path_factory: pytest.TempPathFactory) -> dict[Path, set[tuple[str, str]]]:
    """(namespace, name) each script creates, from the argv its kubectl gets (a stub that records it)."""
    if subprocess.run(["sh", "-c", "command -v openssl"], capture_output=True).returncode:
        pytest.skip("openssl not installed: the scripts cannot run")
    out = {}
    for script in set(SCRIPTS.values()):
        tmp = tmp_path_factory.mktemp(script.stem)
        log, stub = tmp / "kubectl.log", tmp / "kubectl"
        stub.write_text(f'#!/bin/sh\nfor a in "$@"; do printf "%s\\t" "$a"; done >> {log}\necho >> {log}\n')
        stub.chmod(0o755)
        subprocess.run(["bash", str(script), str(tmp / "keys")], check=True, capture_output=True, timeout=120,
                       env={**os.environ, "KUBECTL": str(stub)})
        calls = [line.rstrip("\t").split("\t") for line in log.read_text().splitlines()]
        out[script] = {(c[1], c[c.index("generic") + 1]) for c in calls if c[0] == "-n" and "generic" in c}
    return out


@pytest.mark.parametrize("name", RENDERS)
def test_every_secret_the_render_reads_is_created_by_the_readme_or_its_script(
        name: str, script_secrets: dict[Path, set[tuple[str, str]]]) -> None:
    created = readme_secrets() | (script_secrets[SCRIPTS[name]] if name in SCRIPTS else set())
    missing = referenced_secrets(docs_of(name)) - created
    assert not missing, f"{name}: nothing documented creates {missing}"


@pytest.mark.parametrize("name", RENDERS)
def test_every_controller_and_agent_argument_parses_with_the_real_cli(name: str) -> None:
    docs = docs_of(name)
    for kind, obj in (("Deployment", "ebb-controller"), ("DaemonSet", "ebb-agent")):
        (d,) = [x for x in docs if name_of(x) == (kind, obj)]
        args = d["spec"]["template"]["spec"]["containers"][0]["args"]
        assert parse_with_the_cli(args), (name, kind)


@pytest.mark.parametrize("name", RENDERS)
def test_ebb_pods_keep_every_hardening_rule_of_the_default(name: str) -> None:
    base, docs = docs_of("default"), docs_of(name)
    for kind, obj in (("Deployment", "ebb-controller"), ("DaemonSet", "ebb-agent")):
        ours = [x for x in docs if name_of(x) == (kind, obj)][0]["spec"]["template"]["spec"]
        theirs = [x for x in base if name_of(x) == (kind, obj)][0]["spec"]["template"]["spec"]
        assert ours["securityContext"] == theirs["securityContext"], (name, kind)
        assert ours.get("hostPID") == theirs.get("hostPID")
        assert ours["serviceAccountName"] == theirs["serviceAccountName"]
        for c, b in zip(ours["containers"], theirs["containers"], strict=True):
            assert c["securityContext"] == b["securityContext"] and c["image"] == b["image"], (name, kind)
        # the only writable paths: /tmp and, where it runs on SQLite, the ledger's volume
        for c in ours["containers"]:
            writable = {m["mountPath"] for m in c.get("volumeMounts", []) if not m.get("readOnly", False)}
            assert writable <= {"/tmp", "/var/lib/ebb"}, (name, kind, writable)


def test_one_writer_per_sqlite_file_and_every_etcd_render_ships_its_etcd() -> None:
    """One replica writes SQLite alone (Recreate, no election); two replicas elect: on a Kubernetes Lease
    sharing one SQLite file on one node (required pod affinity), or on etcd, which the render creates."""
    from ebb.ledger.location import parse_location

    for name in RENDERS:
        docs = docs_of(name)
        dep = [d for d in docs if name_of(d) == ("Deployment", "ebb-controller")][0]
        spec = dep["spec"]["template"]["spec"]
        args = spec["containers"][0]["args"]
        (ledger,) = [a.split("=", 1)[1] for a in args if a.startswith("--ledger=")]
        loc = parse_location(ledger)
        etcd = [d for d in docs if name_of(d) == ("StatefulSet", "etcd")]
        if dep["spec"]["replicas"] == 1:
            assert loc.kind == "sqlite" and dep["spec"]["strategy"]["type"] == "Recreate", name
            assert "--elect" not in args and not etcd, name
        elif loc.kind == "sqlite":
            assert "--elect" in args and "--election=kubernetes" in args and not etcd, name
            (term,) = spec["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
            assert term["topologyKey"] == "kubernetes.io/hostname", name
        else:
            assert loc.kind == "etcd" and "--elect" in args and etcd, name
