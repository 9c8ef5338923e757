"""deploy/overlays/ha/: two controllers on one node sharing the SQLite ledger, elected on a Kubernetes Lease.

``ebb.yaml`` must equal Ebb's base with ``patches/`` applied (run this file as a script to regenerate
it); the render validates and matches ``kubectl kustomize`` (test_renders.py); the controller's args
parse with the real CLI and plan a Lease election in the Role's namespace for the Lease the Role names;
both replicas must share a node (SQLite's WAL needs one host) and mount the one ReadWriteOnce claim;
no disruption budget can hang a drain; the Role grants exactly the calls the Lease elector makes
(derived from the fake API server's request log) on exactly its Lease.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from deploy_render import DEPLOY, controller_args, dump, flags, generate, load_all, one, parse_with_the_cli, render

HA = DEPLOY / "overlays" / "ha"
HEADER = ("# GENERATED: Ebb's base (deploy/*.yaml) with deploy/overlays/ha/patches/ applied; do not edit.\n"
          "# Regenerate: .venv/bin/python tests/unit/deploy/test_ha_lease_overlay.py (the test fails when stale).\n")


def expected_ebb() -> list[dict[str, Any]]:
    return generate(DEPLOY, HA / "patches")


@pytest.fixture(scope="module")
def docs() -> list[dict[str, Any]]:
    return render(HA)


def test_ebb_yaml_is_the_base_with_the_patches_applied() -> None:
    assert load_all(HA / "ebb.yaml") == expected_ebb(), \
        "deploy/overlays/ha/ebb.yaml is stale: run .venv/bin/python tests/unit/deploy/test_ha_lease_overlay.py"


def test_two_replicas_share_one_node_and_one_sqlite_file(docs: list[dict[str, Any]]) -> None:
    from ebb.ledger.location import parse_location

    dep = one(docs, "Deployment", "ebb-controller")
    spec = dep["spec"]["template"]["spec"]
    assert dep["spec"]["replicas"] == 2
    assert dep["spec"]["strategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
    (term,) = spec["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term == {"labelSelector": {"matchLabels": dep["spec"]["selector"]["matchLabels"]},
                    "topologyKey": "kubernetes.io/hostname"}
    assert "podAntiAffinity" not in spec["affinity"]
    loc = parse_location(flags(controller_args(docs))["ledger"])
    (vol,) = [v for v in spec["volumes"] if "persistentVolumeClaim" in v]
    (mount,) = [m for m in spec["containers"][0]["volumeMounts"] if m["name"] == vol["name"]]
    assert loc.kind == "sqlite" and loc.target.startswith(mount["mountPath"] + "/")
    pvc = one(docs, "PersistentVolumeClaim", vol["persistentVolumeClaim"]["claimName"])
    assert pvc["spec"]["accessModes"] == ["ReadWriteOnce"]  # one node: what podAffinity guarantees
    assert not [d for d in docs if d["kind"] == "PodDisruptionBudget"]
    assert not [d for d in docs if "etcd" in d["metadata"]["name"]]


def lease_target(docs: list[dict[str, Any]]) -> tuple[str, str]:
    """(Lease namespace, Lease name) the controller's args elect on, as `ebb run` plans it."""
    from ebb.ledger.kube_lease_store import lease_name

    a = flags(controller_args(docs))
    return a["lease-namespace"], lease_name(f"{a['namespace']}/{a['deployment']}")


def test_the_args_ask_for_a_lease_election_on_the_sqlite_ledger(docs: list[dict[str, Any]]) -> None:
    args = controller_args(docs)
    p = parse_with_the_cli(args)
    assert p["elect"] is True and p["election"] == "kubernetes" and p["lease_namespace"] == "ebb-system"
    role = one(docs, "Role", "ebb-leader-election")
    assert role["metadata"]["namespace"] == lease_target(docs)[0]
    env = {e["name"]: e for e in one(docs, "Deployment", "ebb-controller")["spec"]["template"]["spec"]
           ["containers"][0]["env"]}
    assert env["EBB_INSTANCE"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}  # one identity per pod


def test_the_plan_is_accepted_by_ebb_run(docs: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch) -> None:
    """``ebb run``'s own election planner takes these settings (it refuses, e.g., a Lease with an etcd
    ledger) and names the Lease the Role grants."""
    pytest.importorskip("kubernetes")
    from ebb.cli import run_election
    from ebb.ledger.kube_lease_store import lease_name
    from ebb.ledger.location import parse_location

    a = flags(controller_args(docs))
    settings = SimpleNamespace(  # the fields plan_election reads, from the parsed args (the Lease timings' defaults)
        ledger=SimpleNamespace(elect=True, election=a["election"], lease_namespace=a["lease-namespace"],
                               lease_duration_s=15, lease_renew_deadline_s=10.0, lease_retry_s=2.0),
        actuator=SimpleNamespace(kubeconfig=None, in_cluster=False))
    monkeypatch.setattr("ebb.ledger.kube_lease_store.load_kube_client",
                        lambda *args, **kw: SimpleNamespace(close=lambda: None))  # no cluster here
    target = f"{a['namespace']}/{a['deployment']}"
    plan = run_election.plan_election(settings, parse_location(a["ledger"]), key=target)  # type: ignore[arg-type]
    assert plan is not None and plan.kind == "kubernetes" and plan.shares_sqlite
    assert (plan.lease_namespace, plan.lease_name) == lease_target(docs) == ("ebb-system", lease_name(target))


def test_the_role_grants_exactly_the_calls_the_lease_elector_makes_on_its_lease(docs: list[dict[str, Any]]) -> None:
    client = pytest.importorskip("kubernetes.client")
    from ebb.ledger.kube_lease import KubeLeaseElector
    from ebb.testing.fake_kube import FakeKubeApiServer, rbac_permission

    namespace, name = lease_target(docs)
    t = [100.0]
    with FakeKubeApiServer() as fake:
        api = client.ApiClient(fake.configuration())
        try:
            a = KubeLeaseElector(namespace, name, "ebb-controller-a", api_client=api, clock=lambda: t[0])
            b = KubeLeaseElector(namespace, name, "ebb-controller-b", api_client=api, clock=lambda: t[0])
            a.start(background=False)
            b.start(background=False)
            a.step()  # create: a leads
            b.step()  # get: b follows
            t[0] += 2.0
            a.step()  # renew: update
            assert a.is_leader() and not b.is_leader()
            a.resign()  # release: update
            b.step()  # take over: get + update
            assert b.is_leader()
            b.close()  # release: update
        finally:
            api.close()
        used = set()
        for r in fake.requests:
            perm = rbac_permission(r.method, r.path)
            assert perm is not None and r.path.startswith(f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases")
            used.add((*perm, r.path.rsplit("/", 1)[-1] if r.method != "POST" else ""))
    role = one(docs, "Role", "ebb-leader-election")
    granted = {(g, res, v, n) for rule in role["rules"] for g in rule["apiGroups"] for res in rule["resources"]
               for v in rule["verbs"] for n in rule.get("resourceNames", [""])}
    assert granted == used == {("coordination.k8s.io", "leases", "create", ""),
                               ("coordination.k8s.io", "leases", "get", name),
                               ("coordination.k8s.io", "leases", "update", name)}
    binding = one(docs, "RoleBinding", "ebb-leader-election")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "ebb-controller", "namespace": "ebb-system"}]


if __name__ == "__main__":
    (HA / "ebb.yaml").write_text(dump(HEADER, expected_ebb()), encoding="utf-8")
    print(f"wrote {HA / 'ebb.yaml'}")
