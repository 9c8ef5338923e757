"""deploy/'s network and admission fences (SECURITY.md): who may reach which port, and the one pod
patch the controller's identity may make — the admission policy's CEL evaluated on real objects."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

DEPLOY = Path(__file__).resolve().parents[3] / "deploy"
COST = "controller.kubernetes.io/pod-deletion-cost"


def docs(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((DEPLOY / name).read_text(encoding="utf-8")) if d]


def policies() -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d["spec"] for d in docs("networkpolicy.yaml")}


def test_ingress_is_denied_in_ebb_system_unless_a_policy_allows_it() -> None:
    deny = policies()["default-deny-ingress"]
    assert deny["podSelector"] == {} and deny["policyTypes"] == ["Ingress"] and "ingress" not in deny


def sources(policy: dict[str, Any], port: int) -> list[dict[str, Any]]:
    return [peer for rule in policy["ingress"] if any(p["port"] == port for p in rule["ports"])
            for peer in rule["from"]]


def test_only_prometheus_scrapes_the_controller_and_only_it_and_the_controller_reach_the_agents() -> None:
    p = policies()
    assert not [n for n in p if "etcd" in n], "the base runs no etcd: its fences live in overlays/ha-etcd"
    (scraper,) = sources(p["ebb-controller-ingress"], 9400)
    assert scraper["podSelector"]["matchLabels"] == {"app.kubernetes.io/name": "prometheus"}
    names = {str(peer.get("podSelector", {}).get("matchLabels")) for peer in sources(p["ebb-agent-ingress"], 9401)}
    assert names == {str({"app.kubernetes.io/name": "ebb-controller"}), str({"app.kubernetes.io/name": "prometheus"})}


def egress(name: str) -> set[tuple[str, str, int]]:
    """(destination, protocol, port) the policy allows; destination is ``any`` or the peer as text."""
    out = set()
    for rule in policies()[name]["egress"]:
        for peer in rule.get("to") or [None]:
            for p in rule["ports"]:
                out.add(("any" if peer is None else str(peer), p.get("protocol", "TCP"), p["port"]))
    return out


def test_egress_is_denied_unless_allowed_and_each_pod_reaches_only_its_peers() -> None:
    p = policies()
    deny = p["default-deny-egress"]
    assert deny["podSelector"] == {} and deny["policyTypes"] == ["Egress"] and "egress" not in deny
    dns = str({"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
               "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}})
    assert p["ebb-dns-egress"]["podSelector"] == {} and egress("ebb-dns-egress") == {(dns, "UDP", 53), (dns, "TCP", 53)}

    def pod(name: str) -> str:
        return str({"podSelector": {"matchLabels": {"app.kubernetes.io/name": name}}})
    prom = str({"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
                "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}}})
    assert egress("ebb-controller-egress") == {("any", "TCP", 443), ("any", "TCP", 6443),
                                               (pod("ebb-agent"), "TCP", 9401), (prom, "TCP", 9090)}
    serving = str({"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "serving"}}})
    assert egress("ebb-agent-egress") == {(serving, "TCP", 8080), (serving, "TCP", 8000)}
    for name in ("ebb-controller-egress", "ebb-agent-egress"):
        assert p[name]["policyTypes"] == ["Egress"]


def test_egress_ports_match_the_controllers_and_agents_urls() -> None:
    """Every network URL the shipped args name is on a port its pod's egress allows (a moved port fails
    here); the SQLite ledger (sqlite:///PATH) is a file on the pod's volume, not a peer."""
    from urllib.parse import urlsplit

    allowed = {n: {port for _, _, port in egress(f"ebb-{n}-egress")} for n in ("controller", "agent")}
    for f, n in (("controller-deployment.yaml", "controller"), ("agent-daemonset.yaml", "agent")):
        (d,) = docs(f)
        urls = [a.split("=", 1)[1] for a in d["spec"]["template"]["spec"]["containers"][0]["args"]
                if "=" in a and "://" in a and "=sqlite://" not in a]
        assert urls, f
        for u in urls:
            assert urlsplit(u.replace("etcd+https", "https").replace("etcd://", "http://")).port in allowed[n], u


def test_the_policies_ports_are_the_ones_the_containers_listen_on() -> None:
    ports = {}
    for f, kind in (("controller-deployment.yaml", "ebb-controller"), ("agent-daemonset.yaml", "ebb-agent")):
        (d,) = docs(f)
        ports[kind] = {p["containerPort"] for p in d["spec"]["template"]["spec"]["containers"][0]["ports"]}
    assert ports["ebb-controller"] == {9400} and ports["ebb-agent"] == {9401}


def policy_named(name: str, kind: str = "ValidatingAdmissionPolicy") -> dict[str, Any]:
    (found,) = [d for d in docs("admission-policy.yaml") if d["kind"] == kind and d["metadata"]["name"] == name]
    return found


def admits(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """The messages of the validations the update ``old → new`` fails (empty: admitted)."""
    celpy = pytest.importorskip("celpy", reason="cel-python (a dev dependency) evaluates the policy's CEL")
    spec = policy_named("ebb-controller-pod-patch")["spec"]
    env = celpy.Environment()

    def ev(expr: str, act: dict[str, Any]) -> Any:
        return env.program(env.compile(expr)).evaluate(act)
    act: dict[str, Any] = {"object": celpy.json_to_cel(new), "oldObject": celpy.json_to_cel(old),
                           "request": celpy.json_to_cel({"userInfo": {"username": "x"}})}
    act["variables"] = celpy.celtypes.MapType({celpy.celtypes.StringType(v["name"]): ev(v["expression"], act)
                                               for v in spec["variables"]})
    return [v["message"] for v in spec["validations"] if not ev(v["expression"], act)]


POD = {"metadata": {"name": "llm-serving-abc", "labels": {"app.kubernetes.io/name": "llm-serving", "pod-template-hash": "x"},
                    "annotations": {"prometheus.io/scrape": "true"}},
       "spec": {"containers": [{"name": "vllm", "image": "vllm/vllm-openai@sha256:" + "1" * 64}]}}


def changed(**edit: Any) -> dict[str, Any]:
    new = copy.deepcopy(POD)
    for path, value in edit.items():
        *parents, leaf = path.split("__")
        node = new
        for p in parents:
            node = node[p]
        node[leaf] = value
    return new


def test_the_controller_may_set_the_pod_deletion_cost_and_nothing_else() -> None:
    assert admits(POD, changed(metadata__annotations={**POD["metadata"]["annotations"], COST: "-1000"})) == []
    assert admits(POD, changed(metadata__labels={"app.kubernetes.io/name": "other"})) != []
    assert admits(POD, changed(metadata__annotations={COST: "-1000"})) != [], "dropping another annotation"
    assert admits(POD, changed(metadata__annotations={**POD["metadata"]["annotations"], "x": "y"})) != []
    assert admits(POD, changed(spec__containers=[{"name": "vllm", "image": "evil/miner:latest"}])) != []
    other = changed(metadata__labels={"app.kubernetes.io/name": "payments"})
    assert admits(other, changed(metadata__labels={"app.kubernetes.io/name": "payments"},
                                 metadata__annotations={COST: "1"})) != [], "pods of another workload"


def test_the_controller_may_write_what_the_actuator_and_its_asleep_tier_write_and_nothing_more() -> None:
    ann = POD["metadata"]["annotations"]
    labels = {**POD["metadata"]["labels"], "ebb.io/routable": "true"}
    routable = changed(metadata__labels=labels)
    # the plain actuator's scale-in: the cost and whose victim the pod is
    assert admits(POD, changed(metadata__annotations={**ann, COST: "-1000", "ebb.dev/victim-of": "d1"})) == []
    # the tier: out of the Service, draining; asleep; waking; back in
    out = changed(metadata__labels={**labels, "ebb.io/routable": "false"},
                  metadata__annotations={**ann, "ebb.io/draining": "1.0", "ebb.dev/victim-of": "d1"})
    assert admits(routable, out) == []
    asleep = changed(metadata__labels={**labels, "ebb.io/routable": "false"},
                     metadata__annotations={**ann, "ebb.io/asleep": "2.0", COST: "-1000"})
    assert admits(out, asleep) == [] and admits(asleep, routable) == []
    assert admits(routable, changed(metadata__labels={**labels, "ebb.io/routable": "maybe"})) != []
    assert admits(routable, changed(metadata__labels={**labels, "ebb.io/routable": "false", "tier": "gold"})) != []
    assert admits(routable, changed(metadata__labels={"ebb.io/routable": "false"})) != [], "dropping another label"
    assert admits(POD, changed(metadata__annotations={**ann, "ebb.io/other": "x"})) != []


def test_the_policy_applies_to_the_controller_identity_only() -> None:
    for name in ("ebb-controller-pod-patch", "ebb-controller-eviction"):
        policy, binding = policy_named(name), policy_named(name, "ValidatingAdmissionPolicyBinding")
        (cond,) = policy["spec"]["matchConditions"]
        assert "system:serviceaccount:ebb-system:ebb-controller" in cond["expression"]
        assert binding["spec"]["validationActions"] == ["Deny"] and policy["spec"]["failurePolicy"] == "Fail"
        assert binding["spec"]["policyName"] == name
        assert binding["spec"]["matchResources"]["namespaceSelector"]["matchLabels"] == {
            "kubernetes.io/metadata.name": "serving"}


def evicts(pod_name: str, eviction: dict[str, Any] | None = None) -> list[str]:
    """The messages of the eviction policy's validations an eviction of ``pod_name`` fails. The request
    is what the API server passes: ``object`` = the Eviction, ``oldObject`` = null, ``request.name``
    = the pod's name (the pod and its labels are not passed)."""
    celpy = pytest.importorskip("celpy", reason="cel-python (a dev dependency) evaluates the policy's CEL")
    spec = policy_named("ebb-controller-eviction")["spec"]
    rule = spec["matchConstraints"]["resourceRules"][0]
    assert rule["resources"] == ["pods/eviction"] and rule["operations"] == ["CREATE"]
    assert "variables" not in spec and not any("oldObject" in v["expression"] for v in spec["validations"])
    body = eviction or {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": pod_name,
                                                                                    "namespace": "serving"}}
    env = celpy.Environment()
    act = {"object": celpy.json_to_cel(body), "oldObject": None,
           "request": celpy.json_to_cel({"name": pod_name, "namespace": "serving", "subResource": "eviction",
                                         "userInfo": {"username": "x"}})}
    return [v["message"] for v in spec["validations"] if not env.program(env.compile(v["expression"])).evaluate(act)]


def test_the_controller_may_evict_only_the_scaled_deployments_pods() -> None:
    assert evicts("llm-serving-7c9b4f6d8-x7k2p") == []
    for other in ("llm-serving-canary-7c9b4f6d8-x7k2p", "llm-serving-0", "payments-7c9b4f6d8-x7k2p",
                  "llm-serving-7c9b4f6d8-x7k2p-extra", "llm-serving-7c9b4f6d8-X7K2P", "llm-serving"):
        assert evicts(other) == ["ebb-controller may only evict pods of the Deployment it scales"], other
    forced = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "llm-serving-7c9b4f6d8-x7k2p"},
              "deleteOptions": {"gracePeriodSeconds": 0}}
    assert evicts("llm-serving-7c9b4f6d8-x7k2p", forced) == ["ebb-controller may not set deleteOptions on an eviction"]


def test_the_eviction_fence_names_the_deployment_the_controller_scales() -> None:
    import re as _re

    (dep,) = docs("controller-deployment.yaml")
    args = dict(a.lstrip("-").split("=", 1) for a in dep["spec"]["template"]["spec"]["containers"][0]["args"]
                if "=" in a)
    expr = policy_named("ebb-controller-eviction")["spec"]["validations"][0]["expression"]
    assert _re.search(r"'\^([a-z0-9-]+)-\[", expr).group(1) == args["deployment"]  # type: ignore[union-attr]
