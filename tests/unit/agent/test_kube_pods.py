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


# -- EndpointSlice discovery (--pod-service) and pods sharing one IP ---------------------------------

from ebb.agent import kube_pods  # noqa: E402
from ebb.agent.kube_pods import EndpointSliceLister, parse_port_flag  # noqa: E402

SLICES = f"/apis/discovery.k8s.io/v1/namespaces/{NS}/endpointslices"


@pytest.fixture
def svc(fake: FakeKubeApiServer) -> FakeKubeApiServer:
    fake.add_service("vllm", {"app": "vllm"}, {"http": 8000}, namespace=NS)
    fake.add_service("redis", {"app": "redis"}, {"redis": 6379}, namespace=NS)
    return fake


def test_slices_give_this_nodes_ready_endpoints_of_the_service_and_never_read_a_pod(svc: FakeKubeApiServer,
                                                                                    api: Any) -> None:
    lister = EndpointSliceLister("vllm", "node-a", 8000, namespace=NS, api_client=api)
    # Pending without IP, not Ready, terminating, other node, other Service, other namespace: left out
    assert lister() == ("http://10.1.0.5:8000/metrics", "http://[fd00::9]:8000/metrics")
    assert all(r.path == SLICES for r in svc.requests)
    assert svc.requests[-1].query["labelSelector"] == "kubernetes.io/service-name=vllm"
    svc.set_pod_ready("vllm-a-starting", True, namespace=NS)
    assert "http://10.1.0.6:8000/metrics" in lister()
    svc.set_pod_ready("vllm-a", False, namespace=NS)
    assert "http://10.1.0.5:8000/metrics" not in lister()
    assert EndpointSliceLister("vllm", "node-b", "http", namespace=NS, api_client=api)() == (
        "http://10.2.0.5:8000/metrics",)
    assert EndpointSliceLister("vllm", "node-b", 9999, namespace=NS, api_client=api)() == ()


def test_the_fake_serves_slices_with_upstream_shapes_and_stable_names(svc: FakeKubeApiServer, api: Any) -> None:
    disc = client.DiscoveryV1Api(api)
    first = disc.list_namespaced_endpoint_slice(NS, label_selector="kubernetes.io/service-name=vllm")
    assert {s.address_type for s in first.items} == {"IPv4", "IPv6"}
    v4 = next(s for s in first.items if s.address_type == "IPv4")
    assert v4.metadata.name.startswith("vllm-") and [(p.name, p.port) for p in v4.ports] == [("http", 8000)]
    draining = next(e for e in v4.endpoints if e.target_ref.name == "vllm-a-draining")
    assert (draining.conditions.ready, draining.conditions.serving, draining.conditions.terminating) == (
        False, True, True)
    assert draining.node_name == "node-a" and draining.target_ref.kind == "Pod" and draining.target_ref.uid
    again = disc.list_namespaced_endpoint_slice(NS, label_selector="kubernetes.io/service-name=vllm")
    assert [(s.metadata.name, s.metadata.resource_version) for s in again.items] == \
        [(s.metadata.name, s.metadata.resource_version) for s in first.items]
    svc.set_pod_ready("vllm-a", False, namespace=NS)
    after = {s.metadata.name: s.metadata.resource_version
             for s in disc.list_namespaced_endpoint_slice(NS, label_selector="kubernetes.io/service-name=vllm").items}
    assert after[v4.metadata.name] != v4.metadata.resource_version  # changed content: new resourceVersion
    with pytest.raises(client.exceptions.ApiException) as err:  # upstream indexes no nodeName on slices
        disc.list_namespaced_endpoint_slice(NS, field_selector="nodeName=node-a")
    assert err.value.status == 400


def test_slice_lists_page_and_restart_once_when_the_continue_token_expires(
        svc: FakeKubeApiServer, api: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    for i in range(230):  # 3 slices of at most 100 endpoints
        svc.add_pod(f"many-{i:03d}", {"app": "many"}, node="node-c", ip=f"10.9.{i // 200}.{i % 200 + 1}",
                    namespace=NS)
    svc.add_service("many", {"app": "many"}, {"http": 8000}, namespace=NS)
    monkeypatch.setattr(kube_pods, "MAX_SLICES", 1)
    lister = EndpointSliceLister("many", "node-c", 8000, namespace=NS, api_client=api)
    assert len(lister()) == 230
    before = len(svc.requests)
    svc.before("GET", SLICES, svc.compact, times=2)  # the 2nd request's token is expired
    assert len(lister()) == 230
    assert [r.status for r in svc.requests[before:]] == [200, 410, 200, 200, 200]
    monkeypatch.setattr(kube_pods, "MAX_PAGES", 2)
    with pytest.raises(SourceUnavailable, match="more than 2 EndpointSlices"):
        lister()


def test_host_network_pods_sharing_the_node_ip_are_keyed_by_pod_and_port(api: Any) -> None:
    """Regression (T3-M6): two hostNetwork engines on one node share the node's IP; with a named port
    each is polled on its own port instead of collapsing into one URL."""
    with FakeKubeApiServer() as fake:
        for name, port in (("eng-1", 8000), ("eng-2", 8001)):
            fake.add_pod(name, {"app": "vllm"}, node="node-a", ip="192.168.5.10", namespace=NS,
                         ports={"http": port}, host_network=True)
        fake.add_service("vllm", {"app": "vllm"}, {"http": "http"}, namespace=NS)
        c = client.ApiClient(fake.configuration())
        try:
            want = ("http://192.168.5.10:8000/metrics", "http://192.168.5.10:8001/metrics")
            pods = PodLister("app=vllm", "node-a", "http", namespace=NS, api_client=c)
            slices = EndpointSliceLister("vllm", "node-a", "http", namespace=NS, api_client=c)
            assert pods() == slices() == want and pods.shared == slices.shared == {}
            # a fixed number cannot tell them apart: one socket, polled once, and both pods named
            fixed = PodLister("app=vllm", "node-a", 8000, namespace=NS, api_client=c)
            assert fixed() == ("http://192.168.5.10:8000/metrics",)
            assert fixed.shared == {"http://192.168.5.10:8000/metrics": ("eng-1", "eng-2")}
        finally:
            c.close()


def test_pod_port_flag_is_a_number_or_a_port_name(api: Any) -> None:
    assert parse_port_flag("8000") == 8000 and parse_port_flag("http") == "http" and parse_port_flag("h2c-1") == "h2c-1"
    for bad in ("0", "70000", "HTTP", "-x", "a--b", "abcdefghijklmnop", "123-", ""):
        with pytest.raises(ConfigError, match="--pod-port"):
            parse_port_flag(bad)
    with pytest.raises(ConfigError, match="--pod-service"):
        EndpointSliceLister("Bad_Name", "node-a", 8000, api_client=api)
