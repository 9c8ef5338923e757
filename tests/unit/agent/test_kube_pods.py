"""Engine-pod discovery against the in-process fake Kubernetes API server (ebb.testing.fake_kube)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("kubernetes")
from kubernetes import client  # noqa: E402

from ebb.agent.kube_pods import PodLister, parse_selector_flag  # noqa: E402
from ebb.errors import ConfigError, SourceUnavailable  # noqa: E402
from ebb.testing.fake_kube import FakeKubeApiServer  # noqa: E402

NS = "serving"


@pytest.fixture
def fake() -> Iterator[FakeKubeApiServer]:
    with FakeKubeApiServer() as server:
        server.add_pod("vllm-a", {"app": "vllm"}, node="node-a", ip="10.1.0.5", namespace=NS)
        server.add_pod("vllm-a-starting", {"app": "vllm"}, node="node-a", ip="10.1.0.6", namespace=NS, ready=False)
        server.add_pod("vllm-a-pending", {"app": "vllm"}, node="node-a", namespace=NS, phase="Pending", ready=False)
        server.add_pod("vllm-a-draining", {"app": "vllm"}, node="node-a", ip="10.1.0.7", namespace=NS,
                       terminating=True)
        server.add_pod("vllm-a-v6", {"app": "vllm"}, node="node-a", ip="fd00::9", namespace=NS)
        server.add_pod("vllm-b", {"app": "vllm"}, node="node-b", ip="10.2.0.5", namespace=NS)
        server.add_pod("other-a", {"app": "redis"}, node="node-a", ip="10.1.0.8", namespace=NS)
        server.add_pod("vllm-elsewhere", {"app": "vllm"}, node="node-a", ip="10.1.0.9", namespace="default")
        yield server


@pytest.fixture
def api(fake: FakeKubeApiServer) -> Iterator[Any]:
    c = client.ApiClient(fake.configuration())
    yield c
    c.close()


def test_only_running_ready_pods_of_this_node_matching_the_selector_are_listed(fake: FakeKubeApiServer,
                                                                                api: Any) -> None:
    lister = PodLister("app=vllm", "node-a", 8000, namespace=NS, api_client=api)
    assert lister() == ("http://10.1.0.5:8000/metrics", "http://[fd00::9]:8000/metrics")
    call = fake.calls("GET", f"/api/v1/namespaces/{NS}/pods")[-1]
    assert call.query["fieldSelector"] == "spec.nodeName=node-a" and call.query["labelSelector"] == "app=vllm"
    fake.set_pod_ready("vllm-a-starting", True, namespace=NS)
    assert "http://10.1.0.6:8000/metrics" in lister()
    fake.set_pod_ready("vllm-a", False, namespace=NS)  # failing its readiness probe: no longer polled
    assert "http://10.1.0.5:8000/metrics" not in lister()


def test_the_metrics_path_and_port_come_from_the_caller(api: Any) -> None:
    lister = PodLister("app=vllm", "node-b", 30000, namespace=NS, metrics_path="/stats/metrics", api_client=api)
    assert lister() == ("http://10.2.0.5:30000/stats/metrics",)


def test_api_errors_are_source_unavailable_and_bad_flags_config_errors(fake: FakeKubeApiServer, api: Any) -> None:
    lister = PodLister("app=vllm", "node-a", 8000, namespace=NS, api_client=api)
    fake.inject("GET", f"/api/v1/namespaces/{NS}/pods", 500)
    with pytest.raises(SourceUnavailable, match="HTTP 500"):
        lister()
    with FakeKubeApiServer() as gone:
        cfg = gone.configuration()
    dead = client.ApiClient(cfg)
    try:
        with pytest.raises(SourceUnavailable, match="did not answer"):
            PodLister("app=vllm", "node-a", 8000, api_client=dead, timeout_s=2.0)()
    finally:
        dead.close()
    for sel in ("", "app", "=vllm"):
        with pytest.raises(ConfigError, match="--pod-selector"):
            parse_selector_flag(sel)
    assert parse_selector_flag("app=vllm, tier!=canary") == "app=vllm,tier!=canary"
    with pytest.raises(ConfigError, match="--node-name"):
        PodLister("app=vllm", "", 8000, api_client=api)
    with pytest.raises(ConfigError, match="--pod-port"):
        PodLister("app=vllm", "node-a", 0, api_client=api)


def test_the_fake_refuses_a_field_it_does_not_index(fake: FakeKubeApiServer, api: Any) -> None:
    with pytest.raises(client.exceptions.ApiException) as err:
        client.CoreV1Api(api).list_namespaced_pod(NS, field_selector="spec.schedulerName=x")
    assert err.value.status == 400
    names = [p.metadata.name for p in client.CoreV1Api(api).list_namespaced_pod(
        NS, field_selector="spec.nodeName=node-b,status.phase==Running").items]
    assert names == ["vllm-b"]
