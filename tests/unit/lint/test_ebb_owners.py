"""Which Deployments an Ebb controller of a lint run scales itself: flags, variables, config and fleet files."""

from __future__ import annotations

from pathlib import Path

import pytest

from ebb.lint.core import Document, Workspace, read_text
from ebb.lint.ebb_owners import ebb_targets, namespaces_meet

REPO = Path(__file__).resolve().parents[3]


def _docs(**files: str) -> list[Document]:
    ws = Workspace()
    for name, text in files.items():
        docs, err = read_text(f"{name}.yaml", text, ".yaml", ws)
        assert err is None, err
        ws.documents.extend(docs)
    return ws.documents


def _targets(**files: str) -> list[tuple[str, str, str]]:
    return [(t.namespace, t.deployment, t.how) for t in ebb_targets(_docs(**files))]


def _container(args: str, env: str = "", image: str = "ghcr.io/ebb-dev/ebb:0.1.0") -> str:
    return ("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: ebb-controller}\nspec:\n  template:\n"
            f"    spec:\n      containers:\n        - name: c\n          image: {image}\n          args: {args}\n"
            + (f"          env: {env}\n" if env else ""))


@pytest.mark.parametrize(("args", "env", "found"), [
    ("[run, --mode=act, --actuator=kubernetes, --namespace=serving, --deployment=vllm]", "", [("serving", "vllm")]),
    ("[run, --mode, act, --actuator, kubernetes, --deployment, vllm]", "", [("default", "vllm")]),  # default ns
    ('"run --mode act --actuator kubernetes --deployment vllm"', "", [("default", "vllm")]),  # one string
    ("[run, --actuator=kubernetes, --deployment=vllm]", "[{name: EBB_RUN_MODE, value: act}]", [("default", "vllm")]),
    ("[run, --mode=recommend, --actuator=kubernetes, --deployment=vllm]", "[{name: EBB_RUN_MODE, value: act}]", []),
    ("[run, --mode=recommend, --actuator=kubernetes, --deployment=vllm]", "", []),  # the shipped default
    ("[run, --mode=act, --deployment=vllm]", "", []),  # local actuator: no Deployment is scaled
    ("[run, --mode=act, --actuator=kubernetes, --deployment=vllm, --serve-keda, ':9090']", "", []),  # KEDA applies
    ("[run, --mode=act, --actuator=kubernetes, --deployment=vllm, --hand-off]", "", []),  # an HPA applies
    ("[run, --mode=act, --actuator=kubernetes, --deployment=vllm]", "[{name: EBB_RUN_HAND_OFF, value: 'true'}]", []),
    ("[run, --mode=act, --actuator=kubernetes, --deployment=vllm]", "[{name: EBB_RUN_HAND_OFF, value: 'false'}]",
     [("default", "vllm")]),
])
def test_a_controller_scales_its_deployment_only_in_act_mode_with_the_kubernetes_actuator_and_no_hand_off(
        args: str, env: str, found: list[tuple[str, str]]) -> None:
    assert [(ns, dep) for ns, dep, _ in _targets(controller=_container(args, env))] == found


def test_a_shell_command_and_a_json_patch_of_args_are_read_too() -> None:
    shell = _container('[-c, "exec ebb run --mode=act --actuator=kubernetes --deployment=chat"]',
                       image="python:3.12").replace("args:", "command: [sh]\n          args:")
    assert _targets(shell=shell) == [("default", "chat", "--deployment")]
    patch = ("- op: replace\n  path: /spec/template/spec/containers/0/args\n  value:\n    - run\n    - --mode=act\n"
             "    - --actuator=kubernetes\n    - --namespace=serving\n    - --deployment=vllm\n")
    assert _targets(patch=patch) == [("serving", "vllm", "--deployment")]


def test_a_program_that_is_not_ebb_is_not_an_owner_whatever_its_flags() -> None:
    other = _container("[run, --mode=act, --deployment=vllm]", image="docker.io/library/busybox:1.36")
    assert _targets(other=other) == []


SETTINGS = "loop: {mode: act}\nactuator: {actuator: kubernetes, namespace: serving, deployment: vllm}\n"


def test_an_ebb_config_file_counts_alone_or_inside_a_configmap() -> None:
    assert _targets(settings=SETTINGS) == [("serving", "vllm", "--deployment")]
    cm = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: ebb}\ndata:\n  run.yaml: |\n" + "".join(
        f"    {line}\n" for line in SETTINGS.splitlines())
    assert _targets(cm=cm) == [("serving", "vllm", "--deployment")]
    assert _targets(settings=SETTINGS.replace("act", "recommend")) == []
    assert _targets(settings=SETTINGS.replace("}\nactuator: {", "}\nactuator: {serve_keda: ':9090', ")) == []


FLEET = "workloads:\n  - {namespace: shop, deployment: checkout}\n  - {namespace: lab, deployment: train}\n"


def test_a_fleet_file_counts_with_an_act_mode_fleet_controller_or_with_no_controller_in_the_run() -> None:
    both = [("shop", "checkout", "fleet file"), ("lab", "train", "fleet file")]
    assert _targets(fleet=FLEET) == both
    assert _targets(fleet=FLEET, c=_container("[run, --mode=act, --workloads=/etc/ebb/fleet.yaml]")) == both
    assert _targets(fleet=FLEET, c=_container("[run, --mode=recommend, --workloads=/etc/ebb/fleet.yaml]")) == []
    cm = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: ebb}\ndata:\n  fleet.yaml: |\n" + "".join(
        f"    {line}\n" for line in FLEET.splitlines())
    assert _targets(cm=cm) == both


def test_a_configmap_string_that_is_not_yaml_is_skipped() -> None:
    cm = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata:\n  a: \"workloads: [\"\n"
    assert _targets(cm=cm) == []


def test_the_shipped_deploy_folder_scales_nothing_itself_until_switched_to_act_mode(tmp_path: Path) -> None:
    ws = Workspace()
    for path in sorted((REPO / "deploy").rglob("*.yaml")):
        text = path.read_text(encoding="utf-8")
        if path.name == "controller-deployment.yaml":
            assert ebb_targets(_docs(c=text)) == ()  # --mode=recommend as shipped
            acting = ebb_targets(_docs(c=text.replace("--mode=recommend", "--mode=act")))
            assert [(t.namespace, t.deployment) for t in acting] == [("serving", "llm-serving")]
        docs, _ = read_text(str(path), text, ".yaml", ws)
        ws.documents.extend(docs)
    assert ebb_targets(ws.documents) == ()


@pytest.mark.parametrize(("a", "b", "meet"), [("x", "x", True), ("x", "y", False), (None, "y", True),
                                              ("x", None, True), (None, None, True)])
def test_a_namespace_left_out_of_a_file_meets_any_namespace(a: str | None, b: str | None, meet: bool) -> None:
    assert namespaces_meet(a, b) is meet
