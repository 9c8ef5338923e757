"""Pod QoS is computed exactly as Kubernetes does: every upstream TestComputePodQOS case (26).

Fixtures: ``tests/data/conformance/qos.json`` (see that folder's README for provenance).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ebb.gates.qos import ContainerResources, PodLevelResources, PodSpec, QoSClass, compute_pod_qos

DATA = Path(__file__).resolve().parents[2] / "data" / "conformance" / "qos.json"
DOC = json.loads(DATA.read_text())
CASES: list[dict[str, Any]] = DOC["cases"]


def _milli(resources: dict[str, Any] | None) -> dict[str, int]:
    return {name: int(q["milli_value"]) for name, q in (resources or {}).items()}


def _container(c: dict[str, Any]) -> ContainerResources:
    res = c.get("resources") or {}
    return ContainerResources(requests=_milli(res.get("requests")), limits=_milli(res.get("limits")),
                              name=c.get("name", ""))


def _pod(p: dict[str, Any]) -> PodSpec:
    pl = p.get("pod_level_resources")
    return PodSpec(
        containers=tuple(_container(c) for c in p.get("containers", [])),
        init_containers=tuple(_container(c) for c in p.get("init_containers", [])),
        pod_level=None if pl is None
        else PodLevelResources(requests=_milli(pl.get("requests")), limits=_milli(pl.get("limits"))),
    )


def test_the_fixture_holds_all_26_upstream_cases_with_unique_names() -> None:
    assert len(CASES) == 26
    assert len({c["name"] for c in CASES}) == 26


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_pod_qos_class_matches_upstream(case: dict[str, Any]) -> None:
    gates = case["feature_gates"]
    got = compute_pod_qos(
        _pod(case["pod"]),
        pod_level_resources_gate=gates["PodLevelResources"],
        fix_kubelet_qos_class_gate=gates["PodLevelResourcesFixKubeletQOSClass"],
    )
    assert got == QoSClass(case["expected_qos_class"]), case.get("note", "")


def test_qos_class_values_are_the_exact_kubernetes_strings() -> None:
    assert [q.value for q in QoSClass] == ["Guaranteed", "Burstable", "BestEffort"]


def test_a_non_integer_quantity_is_rejected_quoting_the_value() -> None:
    with pytest.raises(ValueError, match="'1.5'"):
        ContainerResources(requests={"cpu": "1.5"}, name="c")  # type: ignore[dict-item]


def test_pod_level_resources_are_ignored_when_the_gate_is_off() -> None:
    pod = PodSpec(containers=(ContainerResources(),),
                  pod_level=PodLevelResources(requests={"cpu": 10, "memory": 10},
                                              limits={"cpu": 10, "memory": 10}))
    assert compute_pod_qos(pod, pod_level_resources_gate=False) is QoSClass.BEST_EFFORT
    assert compute_pod_qos(pod) is QoSClass.GUARANTEED


def test_gpu_requests_alone_leave_a_pod_best_effort() -> None:
    pod = PodSpec(containers=(ContainerResources(requests={"nvidia.com/gpu": 1000},
                                                 limits={"nvidia.com/gpu": 1000}),))
    assert compute_pod_qos(pod) is QoSClass.BEST_EFFORT
