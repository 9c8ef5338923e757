"""deploy/overlays/ha/: Ebb with its own etcd over TLS with client-certificate auth (T3-M6).

``ebb.yaml`` must equal Ebb's base with ``patches/`` applied (run this file as a script to regenerate
it); every document validates against the Kubernetes 1.30 schema; ``kubectl kustomize`` renders the
same documents when kubectl is installed; the controller's args parse with the real CLI and name an
``etcd+https`` ledger with the CA, certificate and key of the mounted client Secret; etcd serves
clients and peers over https only and requires client certificates from both.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from test_vllm_example import DEPLOY, K8S_VERSION, apply_patch, flags, kustomized, load_all, one

HA = DEPLOY / "overlays" / "ha"
HEADER = ("# GENERATED: Ebb's base (deploy/*.yaml) with deploy/overlays/ha/patches/ applied; do not edit.\n"
          "# Regenerate: .venv/bin/python tests/unit/deploy/test_ha_overlay.py (the test fails when stale).\n")


def expected_ebb() -> list[dict[str, Any]]:
    patches = {tuple(p.name.removesuffix(".yaml").split(".", 1)): yaml.safe_load(p.read_text(encoding="utf-8"))
               for p in sorted((HA / "patches").glob("*.yaml"))}
    out, used = [], set()
    for d in kustomized(DEPLOY):
        target = (d["kind"], d["metadata"]["name"])
        if target in patches:
            d = apply_patch(d, patches[target])
            used.add(target)
        out.append(d)
    assert used == set(patches), f"patches without a target in the base: {set(patches) - used}"
    return out


@pytest.fixture(scope="module")
def docs() -> list[dict[str, Any]]:
    return kustomized(HA)


def test_ebb_yaml_is_the_base_with_the_patches_applied() -> None:
    assert load_all(HA / "ebb.yaml") == expected_ebb(), \
        "deploy/overlays/ha/ebb.yaml is stale: run .venv/bin/python tests/unit/deploy/test_ha_overlay.py"


@pytest.mark.parametrize("doc", kustomized(HA), ids=lambda d: f"{d['kind']}/{d['metadata']['name']}")
def test_every_document_validates_against_the_kubernetes_schema(doc: dict[str, Any]) -> None:
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def test_kubectl_kustomize_renders_the_same_documents(docs: list[dict[str, Any]]) -> None:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl not installed; kustomized() alone is checked")
    out = subprocess.run([kubectl, "kustomize", str(HA)], capture_output=True, text=True, timeout=60, check=True)

    def key(d: dict[str, Any]) -> tuple[str, str, str]:
        return d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"]
    assert sorted((d for d in yaml.safe_load_all(out.stdout) if d), key=key) == sorted(docs, key=key)


def test_the_controller_reaches_etcd_over_https_with_the_mounted_client_certificate(
        docs: list[dict[str, Any]]) -> None:
    from typer.main import get_command

    import ebb.cli.main  # noqa: F401  (registers every command)
    from ebb.cli.app import app
    from ebb.ledger.location import parse_location

    spec = one(docs, "Deployment", "ebb-controller")["spec"]["template"]["spec"]
    args = spec["containers"][0]["args"]
    group: Any = get_command(app)
    assert group.commands["run"].make_context("run", list(args[1:]), resilient_parsing=False).params
    a = flags(args)
    assert sum(x.startswith("--ledger=") for x in args) == 1
    loc = parse_location(a["ledger"])
    assert loc.kind == "etcd" and loc.target == "https://etcd.ebb-system.svc:2379"
    (mount,) = [m for m in spec["containers"][0]["volumeMounts"] if m["name"] == "etcd-tls"]
    (vol,) = [v for v in spec["volumes"] if v["name"] == "etcd-tls"]
    assert vol["secret"]["secretName"] == "ebb-etcd-client-tls" and mount["readOnly"] is True
    assert {a["etcd-ca"], a["etcd-cert"], a["etcd-key"]} == {f"{mount['mountPath']}/{f}" for f in
                                                             ("ca.crt", "tls.crt", "tls.key")}
    assert spec["securityContext"]["fsGroup"] == spec["securityContext"]["runAsGroup"]  # 0440 files readable


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
    assert list(members) == [f"etcd-{i}" for i in range(sts["spec"]["replicas"])]
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
    # the Services: the controller's host is the client Service, the members' names the headless one
    client_svc, peer_svc = one(docs, "Service", "etcd"), one(docs, "Service", "etcd-peer")
    assert peer_svc["spec"]["clusterIP"] == "None" and peer_svc["spec"]["publishNotReadyAddresses"] is True
    assert client_svc["spec"]["selector"] == peer_svc["spec"]["selector"] == sts["spec"]["selector"]["matchLabels"]
    assert one(docs, "PodDisruptionBudget", "etcd")["spec"]["maxUnavailable"] == 1
    # the base's NetworkPolicies admit exactly these ports between controller, members and peers
    labels = sts["spec"]["template"]["metadata"]["labels"]
    assert labels["app.kubernetes.io/name"] == "etcd"


def test_the_readme_recipe_names_the_secrets_and_sans_the_overlay_uses(docs: list[dict[str, Any]]) -> None:
    text = (DEPLOY / "README.md").read_text(encoding="utf-8")
    for needed in ("etcd-server-tls", "ebb-etcd-client-tls", "DNS:etcd.ebb-system.svc",
                   "DNS:*.etcd-peer.ebb-system.svc", "clientAuth", "serverAuth", "kubectl apply -k deploy/overlays/ha/"):
        assert needed in text, needed


if __name__ == "__main__":
    (HA / "ebb.yaml").write_text(HEADER + yaml.safe_dump_all(expected_ebb(), sort_keys=False, width=120),
                                 encoding="utf-8")
    print(f"wrote {HA / 'ebb.yaml'}")
