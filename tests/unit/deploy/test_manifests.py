"""deploy/: renders like kustomize, validates against the Kubernetes 1.30 schema, parses with Ebb's
own config loaders, and grants exactly the RBAC the Kubernetes actuator uses."""

from __future__ import annotations

import random
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from ebb.config.workloads import parse_workload_classes
from ebb.gates.metrics_gate import gate_spec_from_mapping, load_gates

DEPLOY = Path(__file__).resolve().parents[3] / "deploy"
K8S_VERSION = "1.30"
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding", "ValidatingAdmissionPolicy",
                  "ValidatingAdmissionPolicyBinding"}


def render(root: Path = DEPLOY) -> list[dict[str, Any]]:
    """The subset of ``kustomize build`` this directory uses: ``resources`` (files) and ``namespace``."""
    kust = yaml.safe_load((root / "kustomization.yaml").read_text(encoding="utf-8"))
    unknown = set(kust) - {"apiVersion", "kind", "resources", "namespace"}
    assert not unknown, f"kustomization.yaml uses {unknown}: teach render() or drop them"
    docs: list[dict[str, Any]] = []
    for res in kust["resources"]:
        docs += [d for d in yaml.safe_load_all((root / res).read_text(encoding="utf-8")) if d]
    if "namespace" in kust:
        for d in docs:
            if d["kind"] not in CLUSTER_SCOPED:
                d["metadata"]["namespace"] = kust["namespace"]
    return docs


@pytest.fixture(scope="module")
def docs() -> list[dict[str, Any]]:
    return render()


def one(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind}/{name}, found {len(found)}"
    return found[0]


def key(d: dict[str, Any]) -> tuple[str, str, str]:
    return d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"]


def test_every_manifest_file_is_listed_in_the_kustomization() -> None:
    listed = set(yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())["resources"])
    present = {p.name for p in DEPLOY.glob("*.yaml")} - {"kustomization.yaml"}
    assert listed == present


@pytest.mark.parametrize("doc", render(), ids=lambda d: "/".join(key(d)))
def test_every_document_validates_against_the_kubernetes_schema(doc: dict[str, Any]) -> None:
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def test_render_matches_kubectl_kustomize_when_kubectl_is_installed(docs: list[dict[str, Any]]) -> None:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl not installed; render() alone is checked")
    out = subprocess.run([kubectl, "kustomize", str(DEPLOY)], capture_output=True, text=True, timeout=60, check=True)
    theirs = sorted((d for d in yaml.safe_load_all(out.stdout) if d), key=key)
    assert theirs == sorted(docs, key=key)


def test_the_controller_runs_one_hardened_replica_replaced_by_recreate(docs: list[dict[str, Any]]) -> None:
    dep = one(docs, "Deployment", "ebb-controller")
    spec = dep["spec"]["template"]["spec"]
    (c,) = spec["containers"]
    assert dep["spec"]["replicas"] == 1 and dep["spec"]["strategy"] == {"type": "Recreate"}
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert c["securityContext"]["allowPrivilegeEscalation"] is False
    assert c["livenessProbe"]["httpGet"]["port"] == c["readinessProbe"]["httpGet"]["port"] == "metrics"
    assert c["args"][:1] == ["run"] and "--actuator=kubernetes" in c["args"] and "--mode=recommend" in c["args"]
    assert c["resources"]["requests"] and c["resources"]["limits"]


def test_the_ledger_is_sqlite_on_a_read_write_once_claim_the_non_root_controller_can_write(
        docs: list[dict[str, Any]]) -> None:
    """One writer per SQLite file: one replica, no --elect, the file (and its WAL and lock) on the claim's
    mount, the only writable path besides /tmp; fsGroup makes the volume writable by uid 65532."""
    from ebb.ledger.location import parse_location

    dep = one(docs, "Deployment", "ebb-controller")
    spec = dep["spec"]["template"]["spec"]
    (c,) = spec["containers"]
    args = c["args"]
    assert not any(a == "--elect" or a.startswith("--elect=") for a in args)
    (ledger,) = [a.split("=", 1)[1] for a in args if a.startswith("--ledger=")]
    loc = parse_location(ledger)
    assert loc.kind == "sqlite" and loc.target == "/var/lib/ebb/ledger.db"
    (vol,) = [v for v in spec["volumes"] if "persistentVolumeClaim" in v]
    (mount,) = [m for m in c["volumeMounts"] if m["name"] == vol["name"]]
    assert loc.target.startswith(mount["mountPath"] + "/") and not mount.get("readOnly", False)
    pvc = one(docs, "PersistentVolumeClaim", vol["persistentVolumeClaim"]["claimName"])
    assert pvc["metadata"]["namespace"] == dep["metadata"]["namespace"]
    assert pvc["spec"]["accessModes"] == ["ReadWriteOnce"] and pvc["spec"]["resources"]["requests"]["storage"] == "1Gi"
    ctx = spec["securityContext"]
    assert ctx["fsGroup"] == ctx["runAsGroup"] == 65532 and ctx["runAsUser"] == 65532
    writable = {m["mountPath"] for m in c["volumeMounts"] if not m.get("readOnly", False)}
    assert writable == {"/tmp", mount["mountPath"]}


def test_the_pdb_lets_a_drain_evict_the_single_controller(docs: list[dict[str, Any]]) -> None:
    """minAvailable 1 on one replica would block every drain of its node; maxUnavailable 1 lets it move."""
    pdb = one(docs, "PodDisruptionBudget", "ebb-controller")
    dep = one(docs, "Deployment", "ebb-controller")
    assert pdb["spec"]["maxUnavailable"] == dep["spec"]["replicas"] == 1 and "minAvailable" not in pdb["spec"]
    assert pdb["spec"]["selector"]["matchLabels"] == dep["spec"]["selector"]["matchLabels"]


def test_the_default_render_names_no_etcd(docs: list[dict[str, Any]]) -> None:
    """Nothing in deploy/ creates etcd, so nothing in it may point at one (overlays/ha-etcd ships it)."""
    text = yaml.safe_dump_all(docs)
    assert "etcd://" not in text and "etcd+https://" not in text and "--etcd-" not in text
    assert not [d for d in docs if "etcd" in d["metadata"]["name"]]


def test_the_agent_runs_on_gpu_nodes_without_host_pid_or_api_access(docs: list[dict[str, Any]]) -> None:
    spec = one(docs, "DaemonSet", "ebb-agent")["spec"]["template"]["spec"]
    assert spec["hostPID"] is False and spec["automountServiceAccountToken"] is False
    assert spec["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert any(t["key"] == "nvidia.com/gpu" for t in spec["tolerations"])
    (c,) = spec["containers"]
    assert c["args"][0] == "agent" and c["ports"][0]["name"] == "metrics"


def test_the_configmap_parses_with_ebbs_own_loaders(docs: list[dict[str, Any]]) -> None:
    data = one(docs, "ConfigMap", "ebb-config")["data"]
    assert set(data) == {"workloads.yaml", "gates.yaml"}
    classes = parse_workload_classes(data["workloads.yaml"], "deploy/configmap.yaml:workloads.yaml")
    assert [c.name for c in classes][0] == "order-fulfilment"
    gates = [gate_spec_from_mapping(g, f"gates.yaml:gates[{i}]")
             for i, g in enumerate(yaml.safe_load(data["gates.yaml"])["gates"])]
    assert all(g.success is not None for g in gates)
    assert load_gates(data["gates.yaml"], "deploy/configmap.yaml:gates.yaml") == tuple(gates)
    dep = one(docs, "Deployment", "ebb-controller")
    mount = dep["spec"]["template"]["spec"]["containers"][0]["volumeMounts"][0]["mountPath"]
    args = dep["spec"]["template"]["spec"]["containers"][0]["args"]
    assert {f"{mount}/{name}" for name in data} <= {a.split("=", 1)[1] for a in args if "=" in a}


# -- RBAC: granted == used -----------------------------------------------------------------------

def granted(docs: list[dict[str, Any]], sa: tuple[str, str]) -> set[tuple[str, str, str, str]]:
    """(namespace or "*", apiGroup, resource, verb) granted to ServiceAccount ``sa`` (namespace, name)."""
    roles = {(d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"]): d
             for d in docs if d["kind"] in ("Role", "ClusterRole")}
    out: set[tuple[str, str, str, str]] = set()
    for b in (d for d in docs if d["kind"] in ("RoleBinding", "ClusterRoleBinding")):
        if not any(s["kind"] == "ServiceAccount" and (s["namespace"], s["name"]) == sa for s in b["subjects"]):
            continue
        ref = b["roleRef"]
        role = roles[(ref["kind"], b["metadata"]["namespace"] if ref["kind"] == "Role" else "", ref["name"])]
        scope = b["metadata"]["namespace"] if b["kind"] == "RoleBinding" else "*"
        for rule in role["rules"]:
            for g in rule["apiGroups"]:
                for r in rule["resources"]:
                    for v in rule["verbs"]:
                        out.add((scope, g, r, v))
    return out


def used_by_the_actuator(namespace: str = "serving", deployment: str = "llm-serving") -> set[tuple[str, str, str, str]]:
    """Every public path of KubernetesActuator against the fake API server; each request mapped to
    (namespace or "*", apiGroup, resource, verb)."""
    client = pytest.importorskip("kubernetes.client")
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
                                     rng=random.Random(1))
            st = act.state()
            fake.before("PATCH", f"/apis/apps/v1/namespaces/{namespace}/deployments/{deployment}/scale",
                        lambda: fake.touch(deployment, namespace=namespace))  # the 409 path
            act.apply(DecisionId("down"), ScaleRequest(3, victims=(st.replicas[0].replica,)))
            act.apply(DecisionId("up"), ScaleRequest(4))
            act.apply(DecisionId("down-again"), ScaleRequest(3))  # clears any stale cost
            fake.add_pdb("all", {"app": deployment}, namespace=namespace, min_available=3)
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


def test_rbac_grants_exactly_what_the_actuator_calls(docs: list[dict[str, Any]]) -> None:
    dep = one(docs, "Deployment", "ebb-controller")
    sa = (dep["metadata"]["namespace"], dep["spec"]["template"]["spec"]["serviceAccountName"])
    assert granted(docs, sa) == used_by_the_actuator()


def test_the_actuator_role_is_limited_to_the_deployment_the_controller_scales(docs: list[dict[str, Any]]) -> None:
    args = dict(a.lstrip("-").split("=", 1) for a in
                one(docs, "Deployment", "ebb-controller")["spec"]["template"]["spec"]["containers"][0]["args"]
                if "=" in a)
    role = one(docs, "Role", "ebb-actuator")
    assert role["metadata"]["namespace"] == args["namespace"]
    for rule in role["rules"]:
        if rule["apiGroups"] == ["apps"]:
            assert rule["resourceNames"] == [args["deployment"]]
    assert not any("*" in v for r in role["rules"] for v in r["verbs"] + r["resources"])


# -- RBAC of a fleet (ebb run --workloads): namespaced, granted == used -----------------------------

FLEET_FILE = DEPLOY / "examples" / "fleet-workloads.yaml"
FLEET_RBAC = DEPLOY / "examples" / "fleet-rbac.yaml"
CONTROLLER_SA = ("ebb-system", "ebb-controller")


def fleet_rbac() -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(FLEET_RBAC.read_text(encoding="utf-8")) if d]


@pytest.mark.parametrize("doc", fleet_rbac(), ids=lambda d: "/".join(key(d)))
def test_the_fleet_rbac_validates_against_the_kubernetes_schema(doc: dict[str, Any]) -> None:
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def test_the_fleet_rbac_grants_exactly_what_the_fleets_actuators_call() -> None:
    from ebb.config.fleet import load_fleet

    cfg = load_fleet(FLEET_FILE)
    used: set[tuple[str, str, str, str]] = set()
    for w in cfg.workloads:
        used |= used_by_the_actuator(w.namespace, w.deployment)
    assert granted(fleet_rbac(), CONTROLLER_SA) == used


def test_the_fleet_rbac_is_namespaced_and_names_only_the_fleets_deployments() -> None:
    from ebb.config.fleet import load_fleet

    cfg = load_fleet(FLEET_FILE)
    docs = fleet_rbac()
    per_ns: dict[str, set[str]] = {}
    for w in cfg.workloads:
        per_ns.setdefault(w.namespace, set()).add(w.deployment)
    roles = {d["metadata"]["namespace"]: d for d in docs if d["kind"] == "Role"}
    assert set(roles) == set(per_ns), "one Role per managed namespace, none elsewhere"
    for ns, role in roles.items():
        for rule in role["rules"]:
            assert not any("*" in v for v in rule["verbs"] + rule["resources"] + rule["apiGroups"])
            if rule["apiGroups"] == ["apps"]:
                assert set(rule["resourceNames"]) == per_ns[ns], ns
    for b in (d for d in docs if d["kind"] == "RoleBinding"):
        assert b["roleRef"]["kind"] == "Role" and b["metadata"]["namespace"] in roles
    # the only cluster-wide grant: get one node (nodes are cluster-scoped; the zone label)
    cluster = {(g, r, v) for scope, g, r, v in granted(docs, CONTROLLER_SA) if scope == "*"}
    assert cluster == {("", "nodes", "get")}
    assert not any("leases" in r for d in docs if "rules" in d for rule in d["rules"] for r in rule["resources"])


def test_the_agent_is_granted_nothing(docs: list[dict[str, Any]]) -> None:
    assert granted(docs, ("ebb-system", "ebb-agent")) == set()


def test_every_container_argument_is_a_real_ebb_option() -> None:
    """The controller and agent args parse with the real CLI (a renamed flag fails here, not in a cluster)."""
    from typer.main import get_command

    import ebb.cli.main  # noqa: F401  (registers every command)
    from ebb.cli.app import app

    group: Any = get_command(app)
    docs = render()
    for kind, name in (("Deployment", "ebb-controller"), ("DaemonSet", "ebb-agent")):
        args = one(docs, kind, name)["spec"]["template"]["spec"]["containers"][0]["args"]
        cmd = group.commands[args[0]]
        ctx = cmd.make_context(args[0], list(args[1:]), resilient_parsing=False)
        assert ctx.params, (kind, args)
