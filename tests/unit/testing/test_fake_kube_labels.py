"""The fake API server's pod templates and label patches: a Service's EndpointSlices follow a pod's labels.

What the Kubernetes asleep tier relies on (docs/tiers.md "Live (Kubernetes)"): the Deployment's pods carry
the template's ``ebb.io/routable`` label, which its selector does not name; patching it takes the pod out
of the Service that selects it (an equality-only label map) and out of nothing else — the ReplicaSet
keeps the pod, and a Service without the label (the agent's metrics Service) still lists it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("kubernetes")
from kubernetes import client  # noqa: E402

from ebb.agent.kube_pods import EndpointSliceLister  # noqa: E402
from ebb.testing.fake_kube import FakeKubeApiServer  # noqa: E402

NS = "serving"
ROUTABLE = "ebb.io/routable"


@pytest.fixture
def fake() -> Iterator[FakeKubeApiServer]:
    with FakeKubeApiServer() as server:
        server.add_node("node-a", "zone-a")
        server.add_deployment("vllm", 3, namespace=NS, labels={"app": "vllm"}, template_labels={ROUTABLE: "true"},
                              pod_ips=["10.1.0.1", "10.1.0.2", "10.1.0.3", "10.1.0.4"])
        server.add_service("vllm", {"app": "vllm", ROUTABLE: "true"}, {"http": 8000}, namespace=NS)
        server.add_service("vllm-metrics", {"app": "vllm"}, {"http": 8000}, namespace=NS)
        yield server


@pytest.fixture
def api(fake: FakeKubeApiServer) -> Iterator[Any]:
    c = client.ApiClient(fake.configuration())
    yield c
    c.close()


def urls(api: Any, service: str) -> tuple[str, ...]:
    return EndpointSliceLister(service, "node-a", 8000, namespace=NS, api_client=api)()


def test_a_label_patch_moves_a_pod_out_of_the_service_that_selects_it_and_only_that_one(
        fake: FakeKubeApiServer, api: Any) -> None:
    every = ("http://10.1.0.1:8000/metrics", "http://10.1.0.2:8000/metrics", "http://10.1.0.3:8000/metrics")
    assert urls(api, "vllm") == urls(api, "vllm-metrics") == every
    pods = fake.pod_names(NS)
    assert fake.deployments[(NS, "vllm")]["spec"]["selector"]["matchLabels"] == {"app": "vllm"}
    core = client.CoreV1Api(api)
    core.patch_namespaced_pod(pods[2], NS, {"metadata": {"labels": {ROUTABLE: "false"}}},
                              _content_type="application/merge-patch+json")
    assert urls(api, "vllm") == every[:2] and urls(api, "vllm-metrics") == every
    assert fake.pod_names(NS) == pods  # still the Deployment's: nothing replaced it
    core.patch_namespaced_pod(pods[1], NS, {"metadata": {"labels": {ROUTABLE: None}}},  # null removes it
                              _content_type="application/merge-patch+json")
    assert urls(api, "vllm") == every[:1]
    core.patch_namespaced_pod(pods[2], NS, {"metadata": {"labels": {ROUTABLE: "true"}}},
                              _content_type="application/merge-patch+json")
    assert urls(api, "vllm") == (every[0], every[2])
    fake.set_replicas("vllm", 4, namespace=NS)  # a new pod gets the template's label and the next IP
    assert urls(api, "vllm")[-1] == "http://10.1.0.4:8000/metrics"
