"""deploy/examples/vllm/: Ebb managing a vLLM Deployment, validated like deploy/ itself.

``ebb.yaml`` must equal Ebb's base (deploy/*.yaml, in kustomization order) with the JSON-patch
files of ``patches/`` applied (``KIND.NAME.yaml`` each); run this file as a script to regenerate it.
Every document validates against the Kubernetes 1.30 schema (the PodMonitor, a CRD, is checked by
field); ``kubectl kustomize`` renders the same documents when kubectl is installed; the agent's and
the controller's args parse with the real CLI; the Ebb pods keep every hardening rule of the base;
the vLLM pod (the user's workload) has the rules that do not stop vLLM from running, and the
names, labels, ports and concurrency agree across every file.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from deploy_render import DEPLOY, K8S_VERSION, dump, flags, generate, key, kubectl_render, load_all, one, render

EXAMPLE = DEPLOY / "examples" / "vllm"
HEADER = ("# GENERATED: Ebb's base (deploy/*.yaml) with deploy/examples/vllm/patches/ applied; do not edit.\n"
          "# Regenerate: .venv/bin/python tests/unit/deploy/test_vllm_example.py (the test fails when stale).\n"
          "# The comments explaining each field are in the base files.\n")


def expected_ebb() -> list[dict[str, Any]]:
    """The base's documents with every patch applied to its target (each patch used exactly once)."""
    return generate(DEPLOY, EXAMPLE / "patches")


def write_ebb() -> None:
    (EXAMPLE / "ebb.yaml").write_text(dump(HEADER, expected_ebb()), encoding="utf-8")


@pytest.fixture(scope="module")
def docs() -> list[dict[str, Any]]:
    return render(EXAMPLE)


def test_ebb_yaml_is_the_base_with_the_patches_applied() -> None:
    assert load_all(EXAMPLE / "ebb.yaml") == expected_ebb(), \
        "deploy/examples/vllm/ebb.yaml is stale: run .venv/bin/python tests/unit/deploy/test_vllm_example.py"


def test_every_file_of_the_example_is_in_its_kustomization() -> None:
    listed = set(yaml.safe_load((EXAMPLE / "kustomization.yaml").read_text())["resources"])
    assert listed == {p.name for p in EXAMPLE.glob("*.yaml")} - {"kustomization.yaml"}


@pytest.mark.parametrize("doc", [d for d in render(EXAMPLE) if d["kind"] != "PodMonitor"],
                         ids=lambda d: f"{d['kind']}/{d['metadata']['name']}")
def test_every_document_validates_against_the_kubernetes_schema(doc: dict[str, Any]) -> None:
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def test_kubectl_kustomize_renders_the_same_documents(docs: list[dict[str, Any]]) -> None:
    theirs = kubectl_render(EXAMPLE)
    if theirs is None:
        pytest.skip("kubectl not installed; render() alone is checked")
    assert sorted(theirs, key=key) == sorted(docs, key=key)


def test_the_agent_and_controller_args_are_real_ebb_options(docs: list[dict[str, Any]]) -> None:
    from typer.main import get_command

    import ebb.cli.main  # noqa: F401  (registers every command)
    from ebb.cli.app import app

    group: Any = get_command(app)
    for kind, name in (("DaemonSet", "ebb-agent"), ("Deployment", "ebb-controller")):
        args = one(docs, kind, name)["spec"]["template"]["spec"]["containers"][0]["args"]
        ctx = group.commands[args[0]].make_context(args[0], list(args[1:]), resilient_parsing=False)
        assert ctx.params, (kind, args)


def test_ebb_pods_keep_every_hardening_rule_of_the_base(docs: list[dict[str, Any]]) -> None:
    base = render(DEPLOY)
    for kind, name in (("Deployment", "ebb-controller"), ("DaemonSet", "ebb-agent")):
        ours, theirs = one(docs, kind, name)["spec"]["template"]["spec"], one(base, kind, name)["spec"]["template"]["spec"]
        assert ours["securityContext"] == theirs["securityContext"]
        assert ours.get("hostPID") == theirs.get("hostPID") and ours["serviceAccountName"] == theirs["serviceAccountName"]
        for c, b in zip(ours["containers"], theirs["containers"], strict=True):
            assert c["securityContext"] == b["securityContext"] and c["image"] == b["image"]
            assert c["resources"] == b["resources"] and c["ports"] == b["ports"]


def test_the_agent_may_only_list_endpointslices_in_the_serving_namespace(docs: list[dict[str, Any]]) -> None:
    """T3-M6: no grant on pods (whose env a pod list returns), only the slices discovery reads."""
    role = one(docs, "Role", "ebb-agent-endpointslices")
    binding = one(docs, "RoleBinding", "ebb-agent-endpointslices")
    assert role["metadata"]["namespace"] == binding["metadata"]["namespace"] == "serving"
    assert role["rules"] == [{"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list"]}]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "ebb-agent", "namespace": "ebb-system"}]
    spec = one(docs, "DaemonSet", "ebb-agent")["spec"]["template"]["spec"]
    assert spec["automountServiceAccountToken"] is True
    a = flags(spec["containers"][0]["args"])
    assert a["pod-namespace"] == "serving" and a["node-name"] == "$(NODE_NAME)"
    env = {e["name"]: e for e in spec["containers"][0]["env"]}
    assert env["NODE_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    # every other grant of the agent: none (the base's bindings do not name it)
    others = [b for b in docs if b["kind"] in ("RoleBinding", "ClusterRoleBinding") and b is not binding
              and any(s.get("name") == "ebb-agent" for s in b["subjects"])]
    assert others == []


def test_names_labels_ports_and_concurrency_agree_across_the_files(docs: list[dict[str, Any]]) -> None:
    dep = one(docs, "Deployment", "vllm")
    labels = dep["spec"]["selector"]["matchLabels"]
    assert dep["spec"]["template"]["metadata"]["labels"] == labels == {"app.kubernetes.io/name": "vllm"}
    (c,) = dep["spec"]["template"]["spec"]["containers"]
    vllm_args = flags(c["args"])
    ctrl = flags(one(docs, "Deployment", "ebb-controller")["spec"]["template"]["spec"]["containers"][0]["args"])
    agent = flags(one(docs, "DaemonSet", "ebb-agent")["spec"]["template"]["spec"]["containers"][0]["args"])
    # what is scaled: the Deployment, in the Role, the admission fence and the pod selector
    assert ctrl["deployment"] == dep["metadata"]["name"] and ctrl["namespace"] == dep["metadata"]["namespace"]
    role = one(docs, "Role", "ebb-actuator")
    assert role["metadata"]["namespace"] == ctrl["namespace"]
    assert [r["resourceNames"] for r in role["rules"] if r["apiGroups"] == ["apps"]] == [["vllm"], ["vllm"]]
    fence = one(docs, "ValidatingAdmissionPolicy", "ebb-controller-pod-patch")["spec"]["validations"][0]["expression"]
    assert "== 'vllm'" in fence
    assert "pod-selector" not in agent and agent["pod-service"] == "vllm"
    # how it is read: one engine, one concurrency, one port
    assert agent["engine"] == ctrl["engine"] == "vllm"
    assert agent["max-concurrency"] == ctrl["max-concurrency"] == vllm_args["max-num-seqs"]
    port = int(vllm_args["port"])
    assert c["ports"] == [{"name": "http", "containerPort": port, "protocol": "TCP"}]
    svc = one(docs, "Service", "vllm")
    assert svc["spec"]["selector"] == labels and svc["spec"]["ports"][0]["targetPort"] == "http"
    # the agent's port is the Service port's name: its EndpointSlices carry it with the pod's number
    assert agent["pod-port"] == svc["spec"]["ports"][0]["name"] == "http"
    evict = one(docs, "ValidatingAdmissionPolicy", "ebb-controller-eviction")["spec"]["validations"][0]["expression"]
    assert "'^vllm-[" in evict
    egress = one(docs, "NetworkPolicy", "ebb-agent-egress")["spec"]["egress"]
    assert {p["port"] for r in egress if r.get("to") for p in r["ports"]} == {port}
    assert one(docs, "PodDisruptionBudget", "vllm")["spec"]["selector"]["matchLabels"] == labels
    pm = one(docs, "PodMonitor", "vllm")
    assert pm["apiVersion"] == "monitoring.coreos.com/v1" and pm["spec"]["selector"]["matchLabels"] == labels
    (ep,) = pm["spec"]["podMetricsEndpoints"]
    assert ep == {"port": "http", "path": "/metrics", "interval": "1s", "scrapeTimeout": "1s"}
    # the operator's job label is NAMESPACE/NAME; the source's replica label is the pod name
    job = f'{pm["metadata"]["namespace"]}/{pm["metadata"]["name"]}'
    assert ctrl["prometheus-selector"] == f'namespace="{pm["metadata"]["namespace"]}",job="{job}"'
    assert ctrl["prometheus-replica-label"] == "pod" and ctrl["source"] == "prometheus"


def test_the_vllm_pod_gets_a_gpu_readiness_and_a_drain_longer_than_its_generations(
        docs: list[dict[str, Any]]) -> None:
    spec = one(docs, "Deployment", "vllm")["spec"]["template"]["spec"]
    (c,) = spec["containers"]
    image, tag = c["image"].rsplit(":", 1)
    assert image == "vllm/vllm-openai" and tag.startswith("v") and tag != "latest"  # pinned release
    assert c["command"] == ["vllm", "serve"]
    assert c["resources"]["requests"]["nvidia.com/gpu"] == c["resources"]["limits"]["nvidia.com/gpu"] == 1
    for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
        assert c[probe]["httpGet"] == {"path": "/health", "port": "http"}
    # preStop (endpoints removed) + vLLM's drain (--shutdown-timeout) must end before SIGKILL
    (sleep_cmd, seconds) = c["lifecycle"]["preStop"]["exec"]["command"]
    assert sleep_cmd == "sleep"
    drain = int(flags(c["args"])["shutdown-timeout"])
    assert drain >= 300 and spec["terminationGracePeriodSeconds"] > int(seconds) + drain
    # the rules of Ebb's pods that vLLM can keep (it runs as root and writes caches under /root):
    # no privilege escalation, no capabilities, the runtime's seccomp profile, no host namespaces
    assert c["securityContext"]["allowPrivilegeEscalation"] is False
    assert c["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert not any(spec.get(k) for k in ("hostPID", "hostNetwork", "hostIPC"))
    assert not c["securityContext"].get("privileged", False)
    assert one(docs, "Deployment", "vllm")["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0


def test_the_gates_parse_with_ebbs_loader_and_read_vllm_series(docs: list[dict[str, Any]]) -> None:
    from ebb.gates.metrics_gate import load_gates

    text = one(docs, "ConfigMap", "ebb-config")["data"]["gates.yaml"]
    gates = load_gates(text, "deploy/examples/vllm/ebb.yaml:gates.yaml")
    assert gates and all("vllm:" in g.query and 'job="serving/vllm"' in g.query for g in gates)


def test_ebb_lint_finds_nothing_in_the_example() -> None:
    from ebb.lint import ALL_RULES, lint_paths

    result = lint_paths([EXAMPLE], ALL_RULES)
    assert result.files >= 7 and not result.errors and not result.findings, (result.errors, result.findings)


if __name__ == "__main__":
    write_ebb()
    print(f"wrote {EXAMPLE / 'ebb.yaml'}")


def test_the_agents_discovery_finds_the_vllm_pods_from_the_example_objects(docs: list[dict[str, Any]]) -> None:
    """The DaemonSet's args, run through the real CLI parser, discover the example's pods from the
    slices the fake API server derives from the example's Service, with only the Role's grants."""
    client = pytest.importorskip("kubernetes.client")
    from typer.main import get_command

    import ebb.cli.main  # noqa: F401
    from ebb.agent.kube_pods import EndpointSliceLister, parse_port_flag
    from ebb.cli.app import app
    from ebb.testing.fake_kube import FakeKubeApiServer, rbac_permission

    args = one(docs, "DaemonSet", "ebb-agent")["spec"]["template"]["spec"]["containers"][0]["args"]
    group: Any = get_command(app)
    p = group.commands["agent"].make_context("agent", list(args[1:]), resilient_parsing=False).params
    svc, dep = one(docs, "Service", "vllm"), one(docs, "Deployment", "vllm")
    port = dep["spec"]["template"]["spec"]["containers"][0]["ports"][0]
    with FakeKubeApiServer() as fake:
        fake.add_pod("vllm-a", dep["spec"]["selector"]["matchLabels"], node="gpu-1", ip="10.4.0.7",
                     namespace="serving", ports={port["name"]: port["containerPort"]})
        fake.add_pod("vllm-b", dep["spec"]["selector"]["matchLabels"], node="gpu-2", ip="10.4.1.7",
                     namespace="serving", ports={port["name"]: port["containerPort"]})
        fake.add_service(svc["metadata"]["name"], svc["spec"]["selector"],
                         {q["name"]: q["targetPort"] for q in svc["spec"]["ports"]}, namespace="serving")
        api = client.ApiClient(fake.configuration())
        try:
            lister = EndpointSliceLister(p["pod_service"], "gpu-1", parse_port_flag(p["pod_port"]),
                                         namespace=p["pod_namespace"], api_client=api)
            assert lister() == ("http://10.4.0.7:8000/metrics",)
        finally:
            api.close()
        role = one(docs, "Role", "ebb-agent-endpointslices")
        grants = {(g, r, v) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]
                  for v in rule["verbs"]}
        assert {rbac_permission(r.method, r.path) for r in fake.requests} == grants
