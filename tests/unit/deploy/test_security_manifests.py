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


def test_only_the_controller_reaches_etcd_and_only_prometheus_scrapes_the_controller() -> None:
    p = policies()
    assert sources(p["ebb-etcd-ingress"], 2379) == [{"podSelector": {"matchLabels": {
        "app.kubernetes.io/name": "ebb-controller"}}}]
    (scraper,) = sources(p["ebb-controller-ingress"], 9400)
    assert scraper["podSelector"]["matchLabels"] == {"app.kubernetes.io/name": "prometheus"}
    names = {str(peer.get("podSelector", {}).get("matchLabels")) for peer in sources(p["ebb-agent-ingress"], 9401)}
    assert names == {str({"app.kubernetes.io/name": "ebb-controller"}), str({"app.kubernetes.io/name": "prometheus"})}


def test_the_policies_ports_are_the_ones_the_containers_listen_on() -> None:
    ports = {}
    for f, kind in (("controller-deployment.yaml", "ebb-controller"), ("agent-daemonset.yaml", "ebb-agent")):
        (d,) = docs(f)
        ports[kind] = {p["containerPort"] for p in d["spec"]["template"]["spec"]["containers"][0]["ports"]}
    assert ports["ebb-controller"] == {9400} and ports["ebb-agent"] == {9401}


def admits(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """The messages of the validations the update ``old → new`` fails (empty: admitted)."""
    celpy = pytest.importorskip("celpy", reason="cel-python (a dev dependency) evaluates the policy's CEL")
    (policy, _binding) = docs("admission-policy.yaml")
    spec = policy["spec"]
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


def test_the_policy_applies_to_the_controller_identity_only() -> None:
    (policy, binding) = docs("admission-policy.yaml")
    (cond,) = policy["spec"]["matchConditions"]
    assert "system:serviceaccount:ebb-system:ebb-controller" in cond["expression"]
    assert binding["spec"]["validationActions"] == ["Deny"] and policy["spec"]["failurePolicy"] == "Fail"
