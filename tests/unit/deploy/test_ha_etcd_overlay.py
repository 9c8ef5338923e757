"""deploy/overlays/ha-etcd/: two controllers electing on Ebb's own etcd, over TLS with client certificates.

``ebb.yaml`` must equal Ebb's base with ``patches/`` applied (run this file as a script to regenerate
it); every document validates against the Kubernetes 1.30 schema; ``kubectl kustomize`` renders the
same documents when kubectl is installed; the controller's args parse with the real CLI and name an
``etcd+https`` ledger with the CA, certificate and key of the mounted client Secret, and ``--elect``;
the SQLite volume is gone; etcd serves clients and peers over https only and requires client
certificates from both; ``make-certs.sh`` writes certificates that verify for every name etcd is
reached by and creates exactly the Secrets the manifests mount.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from deploy_render import (DEPLOY, K8S_VERSION, controller_args, dump, flags, generate, key, kubectl_render, load_all,
                           one, parse_with_the_cli, render)

HA = DEPLOY / "overlays" / "ha-etcd"
HEADER = ("# GENERATED: Ebb's base (deploy/*.yaml) with deploy/overlays/ha-etcd/patches/ applied; do not edit.\n"
          "# Regenerate: .venv/bin/python tests/unit/deploy/test_ha_etcd_overlay.py (the test fails when stale).\n")


def expected_ebb() -> list[dict[str, Any]]:
    return generate(DEPLOY, HA / "patches")


@pytest.fixture(scope="module")
def docs() -> list[dict[str, Any]]:
    return render(HA)


def test_ebb_yaml_is_the_base_with_the_patches_applied() -> None:
    assert load_all(HA / "ebb.yaml") == expected_ebb(), \
        "deploy/overlays/ha-etcd/ebb.yaml is stale: run .venv/bin/python tests/unit/deploy/test_ha_etcd_overlay.py"


@pytest.mark.parametrize("doc", render(HA), ids=lambda d: "/".join(key(d)))
def test_every_document_validates_against_the_kubernetes_schema(doc: dict[str, Any]) -> None:
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def test_kubectl_kustomize_renders_the_same_documents(docs: list[dict[str, Any]]) -> None:
    theirs = kubectl_render(HA)
    if theirs is None:
        pytest.skip("kubectl not installed; render() alone is checked")
    assert sorted(theirs, key=key) == sorted(docs, key=key)


def test_two_spread_replicas_elect_on_the_etcd_ledger_and_no_sqlite_volume_is_left(
        docs: list[dict[str, Any]]) -> None:
    dep = one(docs, "Deployment", "ebb-controller")
    spec = dep["spec"]["template"]["spec"]
    assert dep["spec"]["replicas"] == 2 and dep["spec"]["strategy"]["type"] == "RollingUpdate"
    (anti,) = spec["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert anti["topologyKey"] == "kubernetes.io/hostname"
    assert anti["labelSelector"]["matchLabels"] == dep["spec"]["selector"]["matchLabels"]
    args = controller_args(docs)
    assert "--elect" in args and sum(a.startswith("--ledger=") for a in args) == 1
    assert not [d for d in docs if d["kind"] == "PersistentVolumeClaim"]
    assert not [v for v in spec["volumes"] if "persistentVolumeClaim" in v]
    pdb = one(docs, "PodDisruptionBudget", "ebb-controller")["spec"]
    assert pdb == {"minAvailable": 1, "selector": {"matchLabels": dep["spec"]["selector"]["matchLabels"]}}


def test_the_controller_reaches_etcd_over_https_with_the_mounted_client_certificate(
        docs: list[dict[str, Any]]) -> None:
    from ebb.ledger.location import parse_location

    spec = one(docs, "Deployment", "ebb-controller")["spec"]["template"]["spec"]
    args = controller_args(docs)
    assert parse_with_the_cli(args)["elect"] is True
    a = flags(args)
    loc = parse_location(a["ledger"])
    assert loc.kind == "etcd" and loc.target == "https://etcd.ebb-system.svc:2379"
    (mount,) = [m for m in spec["containers"][0]["volumeMounts"] if m["name"] == "etcd-tls"]
    (vol,) = [v for v in spec["volumes"] if v["name"] == "etcd-tls"]
    assert vol["secret"]["secretName"] == "ebb-etcd-client-tls" and mount["readOnly"] is True
    assert {a["etcd-ca"], a["etcd-cert"], a["etcd-key"]} == {f"{mount['mountPath']}/{f}" for f in
                                                             ("ca.crt", "tls.crt", "tls.key")}
    assert spec["securityContext"]["fsGroup"] == spec["securityContext"]["runAsGroup"]  # 0440 files readable
    # the ledger's host is the client Service of etcd.yaml, and the controller may reach its port
    svc = one(docs, "Service", "etcd")
    assert svc["spec"]["ports"] == [{"name": "client", "port": 2379, "targetPort": "client"}]
    egress = one(docs, "NetworkPolicy", "ebb-controller-egress")["spec"]["egress"]
    assert {"to": [{"podSelector": {"matchLabels": {"app.kubernetes.io/name": "etcd"}}}],
            "ports": [{"protocol": "TCP", "port": 2379}]} in egress


def test_etcd_speaks_tls_only_and_requires_client_certificates(docs: list[dict[str, Any]]) -> None:
    sts = one(docs, "StatefulSet", "etcd")
    spec = sts["spec"]["template"]["spec"]
    (c,) = spec["containers"]
    a = flags(c["args"])
    switches = {x for x in c["args"] if "=" not in x}
    assert {"--client-cert-auth", "--peer-client-cert-auth"} <= switches
    for k in ("listen-client-urls", "advertise-client-urls", "listen-peer-urls", "initial-advertise-peer-urls"):
        assert a[k].startswith("https://"), k
    members = dict(m.split("=", 1) for m in a["initial-cluster"].split(","))
    assert list(members) == [f"etcd-{i}" for i in range(sts["spec"]["replicas"])] == ["etcd-0", "etcd-1", "etcd-2"]
    assert all(u == f"https://{n}.{sts['spec']['serviceName']}.ebb-system.svc:2380" for n, u in members.items())
    (tls,) = [m for m in c["volumeMounts"] if m["name"] == "tls"]
    for k in ("trusted-ca-file", "peer-trusted-ca-file"):
        assert a[k] == f"{tls['mountPath']}/ca.crt"
    (vol,) = [v for v in spec["volumes"] if v["name"] == "tls"]
    assert vol["secret"]["secretName"] == "etcd-server-tls"
    assert a["listen-metrics-urls"] == "http://0.0.0.0:2381"  # probes only: no key access on plain http
    assert c["livenessProbe"]["httpGet"]["port"] == c["readinessProbe"]["httpGet"]["port"] == "metrics"
    assert spec["securityContext"]["runAsNonRoot"] is True and spec["automountServiceAccountToken"] is False
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    client_svc, peer_svc = one(docs, "Service", "etcd"), one(docs, "Service", "etcd-peer")
    assert peer_svc["spec"]["clusterIP"] == "None" and peer_svc["spec"]["publishNotReadyAddresses"] is True
    assert client_svc["spec"]["selector"] == peer_svc["spec"]["selector"] == sts["spec"]["selector"]["matchLabels"]
    assert one(docs, "PodDisruptionBudget", "etcd")["spec"]["maxUnavailable"] == 1


def test_only_the_controller_reaches_etcds_client_port_and_only_members_its_peer_port(
        docs: list[dict[str, Any]]) -> None:
    def pod(name: str) -> dict[str, Any]:
        return {"podSelector": {"matchLabels": {"app.kubernetes.io/name": name}}}
    ingress = one(docs, "NetworkPolicy", "ebb-etcd-ingress")["spec"]
    assert ingress["podSelector"] == {"matchLabels": {"app.kubernetes.io/name": "etcd"}}
    assert ingress["ingress"] == [{"from": [pod("ebb-controller")], "ports": [{"protocol": "TCP", "port": 2379}]},
                                  {"from": [pod("etcd")], "ports": [{"protocol": "TCP", "port": 2380}]}]
    assert one(docs, "NetworkPolicy", "ebb-etcd-egress")["spec"]["egress"] == [
        {"to": [pod("etcd")], "ports": [{"protocol": "TCP", "port": 2380}]}]


def run_make_certs(script: Path, tmp_path: Path) -> tuple[Path, list[list[str]]]:
    """Run ``script`` with a stub kubectl that records its argv; (key folder, kubectl calls)."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl not installed: the certificate script cannot run")
    log = tmp_path / "kubectl.log"
    stub = tmp_path / "kubectl"
    stub.write_text(f'#!/bin/sh\nfor a in "$@"; do printf "%s\\t" "$a"; done >> {log}\necho >> {log}\n')
    stub.chmod(0o755)
    out = tmp_path / "keys"
    subprocess.run(["bash", str(script), str(out)], check=True, capture_output=True, text=True, timeout=120,
                   env={**os.environ, "KUBECTL": str(stub)})
    calls = [line.rstrip("\t").split("\t") for line in log.read_text().splitlines()]
    return out, calls


def openssl(*args: str) -> str:
    return subprocess.run(["openssl", *args], check=True, capture_output=True, text=True, timeout=30).stdout


def secret_files(calls: list[list[str]]) -> dict[str, set[str]]:
    """Secret name -> the keys its ``kubectl create secret generic --from-file=KEY[=PATH]`` gives it."""
    return {c[c.index("generic") + 1]: {a.removeprefix("--from-file=").split("=")[0] for a in c
                                        if a.startswith("--from-file=")} for c in calls if "generic" in c}


def test_make_certs_signs_every_name_etcd_is_reached_by_and_creates_the_mounted_secrets(
        docs: list[dict[str, Any]], tmp_path: Path) -> None:
    keys, calls = run_make_certs(HA / "make-certs.sh", tmp_path)
    assert secret_files(calls) == {"etcd-server-tls": {"ca.crt", "tls.crt", "tls.key"},
                                   "ebb-etcd-client-tls": {"ca.crt", "tls.crt", "tls.key"}}
    assert all(c[:2] == ["-n", "ebb-system"] for c in calls)
    ca = str(keys / "ca.crt")
    # the members' certificate serves clients and peers, and is a client to peers
    for purpose in ("sslserver", "sslclient"):
        assert "OK" in openssl("verify", "-CAfile", ca, "-purpose", purpose, str(keys / "etcd.crt"))
    sts = one(docs, "StatefulSet", "etcd")
    a = flags(sts["spec"]["template"]["spec"]["containers"][0]["args"])
    hosts = {"etcd.ebb-system.svc"} | {u.split("//")[1].split(":")[0] for u in
                                       (m.split("=", 1)[1] for m in a["initial-cluster"].split(","))}
    for host in sorted(hosts):  # the ledger's Service and each member's peer name
        openssl("verify", "-CAfile", ca, "-verify_hostname", host, str(keys / "etcd.crt"))
    # the controller's: a client only
    assert "OK" in openssl("verify", "-CAfile", ca, "-purpose", "sslclient", str(keys / "client.crt"))
    with pytest.raises(subprocess.CalledProcessError):
        openssl("verify", "-CAfile", ca, "-purpose", "sslserver", str(keys / "client.crt"))
    assert oct((keys / "ca.key").stat().st_mode & 0o777) == "0o600"


def test_the_readme_names_the_script_the_secrets_and_the_apply_command() -> None:
    text = (DEPLOY / "README.md").read_text(encoding="utf-8")
    for needed in ("deploy/overlays/ha-etcd/make-certs.sh", "etcd-server-tls", "ebb-etcd-client-tls",
                   "kubectl apply -k deploy/overlays/ha-etcd/"):
        assert needed in text, needed


if __name__ == "__main__":
    (HA / "ebb.yaml").write_text(dump(HEADER, expected_ebb()), encoding="utf-8")
    print(f"wrote {HA / 'ebb.yaml'}")
