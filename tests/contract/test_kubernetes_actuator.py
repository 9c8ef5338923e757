"""KubernetesActuator against the in-process fake API server (ebb.testing.fake_kube).

No real Kubernetes API server runs on the build machines: these tests pin the actuator's HTTP
conversation (which endpoints, in which order, with which preconditions) and the fake's model of
upstream behaviour (409 on a stale resourceVersion, 429 with Retry-After, PDB-blocked evictions,
ReplicaSet victim ranking by pod-deletion-cost). Time is injected: no test sleeps for real.
"""

from __future__ import annotations

import random
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("kubernetes")
from kubernetes import client  # noqa: E402

from ebb.actuate.base import Actuator  # noqa: E402
from ebb.actuate.kubernetes import (  # noqa: E402
    DECISION_ANNOTATION,
    DELETION_COST_ANNOTATION,
    KubernetesActuator,
    RateLimiter,
)
from ebb.errors import MissingExtraError, PermanentError, TransientError  # noqa: E402
from ebb.model.ids import DecisionId, ReplicaId  # noqa: E402
from ebb.model.observation import ScaleRequest  # noqa: E402
from ebb.testing.fake_kube import FakeKubeApiServer  # noqa: E402

NS, NAME = "serving", "llm"
DEP = f"/apis/apps/v1/namespaces/{NS}/deployments/{NAME}"
SCALE = f"{DEP}/scale"
EVENTS = f"/api/v1/namespaces/{NS}/events"


class FakeTime:
    """Injected clock and sleep: sleeping advances the clock, nothing waits for real."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


@pytest.fixture
def fake() -> Iterator[FakeKubeApiServer]:
    with FakeKubeApiServer() as server:
        for zone in ("a", "b", "c"):
            server.add_node(f"node-{zone}", f"zone-{zone}")
        server.add_deployment(NAME, 5, namespace=NS)
        yield server


@pytest.fixture
def api(fake: FakeKubeApiServer) -> Iterator[Any]:
    api_client = client.ApiClient(fake.configuration())
    yield api_client
    api_client.close()


@pytest.fixture
def clock() -> FakeTime:
    return FakeTime()


def make(api: Any, clock: FakeTime, **kw: Any) -> KubernetesActuator:
    return KubernetesActuator(NS, NAME, api_client=api, clock=clock.clock, sleep=clock.sleep,
                              rng=random.Random(7), **kw)


def spec_replicas(fake: FakeKubeApiServer) -> int:
    return int(fake.deployments[(NS, NAME)]["spec"]["replicas"])


def writes(fake: FakeKubeApiServer) -> list[tuple[str, str, int]]:
    return [(r.method, r.path, r.status) for r in fake.requests if r.method != "GET"]


def test_the_kubernetes_actuator_satisfies_the_actuator_protocol(api: Any, clock: FakeTime) -> None:
    assert isinstance(make(api, clock), Actuator)


def test_state_lists_the_pods_oldest_first_with_their_zones(fake: FakeKubeApiServer, api: Any,
                                                           clock: FakeTime) -> None:
    st = make(api, clock).state()
    assert st.target == f"{NS}/{NAME}" and st.spec_replicas == 5 and st.draining == 0
    assert [r.name for r in st.replicas] == fake.pod_names(NS)
    assert [int(r.replica) for r in st.replicas] == [0, 1, 2, 3, 4]
    assert {r.zone for r in st.replicas} == {"zone-a", "zone-b", "zone-c"}
    assert all(r.ready_s is not None for r in st.replicas)


def test_nodes_are_read_once_and_cached(fake: FakeKubeApiServer, api: Any, clock: FakeTime) -> None:
    act = make(api, clock)
    act.state()
    act.state()
    assert len(fake.calls("GET", "/nodes/node-a")) == 1


def test_a_scale_down_marks_the_victims_before_lowering_replicas_and_exactly_they_go(
        fake: FakeKubeApiServer, api: Any, clock: FakeTime) -> None:
    act = make(api, clock)
    st = act.state()
    victims = (st.replicas[1], st.replicas[3])
    res = act.apply(DecisionId("d-down"), ScaleRequest(3, victims=tuple(v.replica for v in victims)))
    assert res.applied and (res.replicas_before, res.replicas_after) == (5, 3)
    assert res.removed == (victims[0].name, victims[1].name)
    assert set(fake.pod_names(NS)) == {r.name for r in st.replicas} - set(res.removed)
    log = [(r.method, r.path) for r in fake.requests]
    cost_patches = [i for i, (m, p) in enumerate(log) if m == "PATCH" and "/pods/" in p]
    scale_patch = log.index(("PATCH", SCALE))
    assert len(cost_patches) == 2 and max(cost_patches) < scale_patch
    costs = [r.body["metadata"]["annotations"][DELETION_COST_ANNOTATION]
             for r in fake.calls("PATCH") if "/pods/" in r.path]
    assert costs == ["-1000", "-999"]
    assert [r.replica for r in act.state().replicas] == [st.replicas[i].replica for i in (0, 2, 4)]


def test_unnamed_and_unknown_victims_fall_back_to_the_newest_pods(fake: FakeKubeApiServer, api: Any,
                                                                 clock: FakeTime) -> None:
    act = make(api, clock)
    st = act.state()
    res = act.apply(DecisionId("d1"), ScaleRequest(2, victims=(ReplicaId(999), st.replicas[0].replica)))
    assert res.removed == (st.replicas[0].name, st.replicas[4].name, st.replicas[3].name)
    assert fake.pod_names(NS) == [st.replicas[1].name, st.replicas[2].name]


def test_a_later_scale_in_takes_back_costs_left_by_an_abandoned_one(fake: FakeKubeApiServer, api: Any,
                                                                    clock: FakeTime) -> None:
    act = make(api, clock)
    st = act.state()
    fake.inject("PATCH", SCALE, 403)  # the first decision dies after marking its victim
    with pytest.raises(PermanentError, match="rbac"):
        act.apply(DecisionId("d1"), ScaleRequest(4, victims=(st.replicas[0].replica,)))
    act.apply(DecisionId("d2"), ScaleRequest(4, victims=(st.replicas[2].replica,)))
    assert st.replicas[0].name in fake.pod_names(NS)
    assert st.replicas[2].name not in fake.pod_names(NS)
    pod = fake.pod(st.replicas[0].name, NS)
    assert pod is not None and DELETION_COST_ANNOTATION not in pod["metadata"]["annotations"]


def test_a_conflict_is_re_read_and_the_retry_carries_the_new_resource_version(
        fake: FakeKubeApiServer, api: Any, clock: FakeTime) -> None:
    act = make(api, clock)
    fake.before("PATCH", SCALE, lambda: fake.touch(NAME, namespace=NS))  # a status update races us
    res = act.apply(DecisionId("d1"), ScaleRequest(3))
    assert res.applied and spec_replicas(fake) == 3
    patches = fake.calls("PATCH", "/scale")
    assert [p.status for p in patches] == [409, 200]
    first_rv, second_rv = (p.body["metadata"]["resourceVersion"] for p in patches)
    assert int(second_rv) > int(first_rv)
    assert len(fake.calls("GET", DEP)) == 2  # re-read before retrying, never a blind overwrite


def test_a_concurrent_change_of_replicas_supersedes_the_decision_instead_of_overwriting_it(
        fake: FakeKubeApiServer, api: Any, clock: FakeTime) -> None:
    act = make(api, clock)
    st = act.state()
    fake.before("PATCH", SCALE, lambda: fake.set_replicas(NAME, 7, namespace=NS))  # an HPA scales out
    res = act.apply(DecisionId("d1"), ScaleRequest(3, victims=(st.replicas[0].replica,)))
    assert not res.applied and (res.replicas_before, res.replicas_after) == (5, 7)
    assert (act.reason(DecisionId("d1")) or "").startswith("superseded")
    assert spec_replicas(fake) == 7
    assert [p.status for p in fake.calls("PATCH", "/scale")] == [409]
    pod = fake.pod(st.replicas[0].name, NS)
    assert pod is not None and DELETION_COST_ANNOTATION not in pod["metadata"]["annotations"]
    assert act.apply(DecisionId("d1"), ScaleRequest(3)) == res  # the outcome is remembered


def test_a_scale_write_whose_answer_was_lost_is_recognised_as_ours(fake: FakeKubeApiServer, api: Any,
                                                                  clock: FakeTime) -> None:
    act = make(api, clock)
    # the first PATCH lands but its answer is lost; the retry then meets its own write as a 409
    fake.before("PATCH", SCALE, lambda: fake.set_replicas(NAME, 3, namespace=NS))
    res = act.apply(DecisionId("d1"), ScaleRequest(3))
    assert res.applied and (res.replicas_before, res.replicas_after) == (5, 3)
    assert act.reason(DecisionId("d1")) == "applied" and spec_replicas(fake) == 3


def test_throttling_honours_retry_after_then_succeeds(fake: FakeKubeApiServer, api: Any, clock: FakeTime) -> None:
    act = make(api, clock)
    fake.inject("PATCH", SCALE, 429, times=2, retry_after_s=3)
    assert act.apply(DecisionId("d1"), ScaleRequest(6)).applied
    assert [p.status for p in fake.calls("PATCH", "/scale")] == [429, 429, 200]
    backoffs = [s for s in clock.sleeps if s >= 1.0]
    assert len(backoffs) == 2 and all(s >= 3.0 for s in backoffs)


def test_persistent_throttling_ends_in_a_transient_error_that_changed_nothing(
        fake: FakeKubeApiServer, api: Any, clock: FakeTime) -> None:
    act = make(api, clock, max_retries=3, backoff_s=1.0)
    fault = fake.inject("GET", DEP, 429, times=100, retry_after_s=1)
    with pytest.raises(TransientError, match="HTTP 429") as err:
        act.apply(DecisionId("d1"), ScaleRequest(2))
    assert err.value.retry_after_s >= 1.0
    assert len(fake.calls("GET", DEP)) == 4 and writes(fake) == []
    # exponential with jitter: 1·2^k scaled by [0.5, 1], never below Retry-After (1 s)
    assert len(clock.sleeps) == 3
    for k, delay in enumerate(clock.sleeps):
        assert max(1.0, 2.0 ** (k - 1)) <= delay <= 2.0 ** k
    fault.times = 0
    assert act.apply(DecisionId("d1"), ScaleRequest(2)).applied  # a retry with the same id works


def test_server_errors_are_retried_with_backoff(fake: FakeKubeApiServer, api: Any, clock: FakeTime) -> None:
    act = make(api, clock)
    fake.inject("GET", SCALE, 500, times=2)
    assert act.state().spec_replicas == 5
    assert len(clock.sleeps) == 2


def test_an_unreachable_api_server_is_a_transient_error_naming_it(clock: FakeTime) -> None:
    with FakeKubeApiServer() as gone:
        cfg = gone.configuration()
    api = client.ApiClient(cfg)
    try:
        with pytest.raises(TransientError, match=gone.url):
            make(api, clock, max_retries=1).state()
    finally:
        api.close()


def test_a_missing_deployment_is_a_permanent_error_naming_it(fake: FakeKubeApiServer, api: Any,
                                                            clock: FakeTime) -> None:
    act = KubernetesActuator(NS, "nope", api_client=api, clock=clock.clock, sleep=clock.sleep)
    with pytest.raises(PermanentError, match=f"{NS}/nope"):
        act.apply(DecisionId("d1"), ScaleRequest(1))


def test_an_eviction_blocked_by_a_pdb_returns_false_with_the_reason_and_the_pod_stays(
        fake: FakeKubeApiServer, api: Any, clock: FakeTime) -> None:
    fake.add_pdb("llm-pdb", {"app": NAME}, namespace=NS, min_available=5)
    pod = fake.pod_names(NS)[0]
    out = make(api, clock).evict(pod)
    assert not out and out.evicted is False
    assert "disruption budget" in out.reason and "llm-pdb needs 5 healthy pods" in out.reason
    assert pod in fake.pod_names(NS, terminating=False)
    assert clock.sleeps == []  # a budget refusal is an answer, not throttling to retry


def test_an_allowed_eviction_goes_through_the_eviction_api_never_a_delete(fake: FakeKubeApiServer, api: Any,
                                                                         clock: FakeTime) -> None:
    fake.add_pdb("llm-pdb", {"app": NAME}, namespace=NS, max_unavailable=1)
    pod = fake.pod_names(NS)[0]
    out = make(api, clock).evict(pod)
    assert out and out.reason == "evicted"
    assert pod not in fake.pod_names(NS)
    assert [r.method for r in fake.requests if "/pods/" in r.path] == ["POST"]
    assert not any(r.method == "DELETE" for r in fake.requests)


def test_throttled_evictions_are_retried_not_mistaken_for_a_budget(fake: FakeKubeApiServer, api: Any,
                                                                 clock: FakeTime) -> None:
    pod = fake.pod_names(NS)[0]
    fake.inject("POST", f"/api/v1/namespaces/{NS}/pods/{pod}/eviction", 429, retry_after_s=2)
    assert make(api, clock).evict(pod).evicted
    assert max(clock.sleeps) >= 2.0


def test_every_applied_decision_emits_one_event_naming_the_id_and_the_change(
        fake: FakeKubeApiServer, api: Any, clock: FakeTime) -> None:
    act = make(api, clock)
    act.apply(DecisionId("d-down"), ScaleRequest(3))
    act.apply(DecisionId("d-down"), ScaleRequest(3))  # repeat: no second event
    act.apply(DecisionId("d-same"), ScaleRequest(3))  # no change: no event
    act.apply(DecisionId("d-up"), ScaleRequest(4))
    assert [(e["reason"], e["message"].split(";")[0]) for e in fake.events] == [
        ("EbbScaleDown", "decision d-down: replicas 5->3"), ("EbbScaleUp", "decision d-up: replicas 3->4")]
    ev = fake.events[0]
    assert ev["involvedObject"]["kind"] == "Deployment" and ev["involvedObject"]["name"] == NAME
    assert ev["involvedObject"]["uid"] == fake.deployments[(NS, NAME)]["metadata"]["uid"]
    assert ev["source"]["component"] == "ebb" and ev["type"] == "Normal"


def test_a_failing_event_never_fails_the_apply(fake: FakeKubeApiServer, api: Any, clock: FakeTime) -> None:
    fake.inject("POST", EVENTS, 500, times=10)
    assert make(api, clock).apply(DecisionId("d1"), ScaleRequest(2)).applied
    assert spec_replicas(fake) == 2 and fake.events == []
    assert len(fake.calls("POST", EVENTS)) == 1  # telemetry is not retried into the loop


def test_a_repeated_decision_id_changes_nothing(fake: FakeKubeApiServer, api: Any, clock: FakeTime) -> None:
    act = make(api, clock)
    first = act.apply(DecisionId("d1"), ScaleRequest(3))
    before = len(fake.requests)
    again = act.apply(DecisionId("d1"), ScaleRequest(1))
    assert again.applied is False and (again.replicas_before, again.replicas_after) == (5, 3)
    assert again.removed == first.removed and len(fake.requests) == before and spec_replicas(fake) == 3


def test_a_restarted_controller_reads_the_annotation_and_never_applies_a_decision_twice(
        fake: FakeKubeApiServer, api: Any, clock: FakeTime) -> None:
    make(api, clock).apply(DecisionId("d1"), ScaleRequest(3))
    assert fake.deployments[(NS, NAME)]["metadata"]["annotations"][DECISION_ANNOTATION] == "d1"
    again = make(api, clock).apply(DecisionId("d1"), ScaleRequest(3))
    assert again.applied is False and (again.replicas_before, again.replicas_after) == (5, 3)
    fake.set_replicas(NAME, 4, namespace=NS)  # someone scaled since: the old decision must not return
    late = make(api, clock).apply(DecisionId("d1"), ScaleRequest(3))
    assert late.applied is False and spec_replicas(fake) == 4
    assert len(fake.calls("PATCH", "/scale")) == 1


def test_a_decision_interrupted_after_its_intent_is_finished_by_a_retry(fake: FakeKubeApiServer, api: Any,
                                                                       clock: FakeTime) -> None:
    fake.inject("PATCH", SCALE, 503, times=2)
    with pytest.raises(TransientError):
        make(api, clock, max_retries=1).apply(DecisionId("d1"), ScaleRequest(2))
    assert spec_replicas(fake) == 5  # only the intent annotation was written
    res = make(api, clock).apply(DecisionId("d1"), ScaleRequest(2))
    assert res.applied and spec_replicas(fake) == 2


def test_scale_in_leaves_terminating_pods_as_draining(api: Any, clock: FakeTime) -> None:
    with FakeKubeApiServer(termination_grace_s=3600) as slow:
        slow.add_deployment(NAME, 4, namespace=NS)
        slow_api = client.ApiClient(slow.configuration())
        try:
            act = make(slow_api, clock)
            act.apply(DecisionId("d1"), ScaleRequest(1))
            st = act.state()
            assert (st.spec_replicas, len(st.replicas), st.draining) == (1, 1, 3)
        finally:
            slow_api.close()


def test_new_pods_count_as_starting_until_ready(clock: FakeTime) -> None:
    with FakeKubeApiServer(ready_delay_s=3600) as slow:
        slow.add_deployment(NAME, 1, namespace=NS)
        slow_api = client.ApiClient(slow.configuration())
        try:
            act = make(slow_api, clock)
            assert act.apply(DecisionId("up"), ScaleRequest(3)).applied
            st = act.state()
            assert (st.spec_replicas, len(st.replicas), st.ready_replicas) == (3, 3, 1)
        finally:
            slow_api.close()


def test_the_rate_limiter_admits_a_burst_then_spaces_calls_by_the_injected_clock(clock: FakeTime) -> None:
    limiter = RateLimiter(qps=2.0, burst=3, clock=clock.clock, sleep=clock.sleep)
    start = clock.now
    times = []
    for _ in range(9):
        limiter.acquire()
        times.append(clock.now - start)
    assert times[:3] == [0.0, 0.0, 0.0]
    for k, t in enumerate(times):  # call k (0-based) may go no earlier than (k + 1 - burst) / qps
        assert t >= (k + 1 - 3) / 2.0 - 1e-9
    assert times[-1] == pytest.approx(3.0)


def test_every_api_call_of_the_actuator_passes_the_rate_limiter(fake: FakeKubeApiServer, api: Any,
                                                               clock: FakeTime) -> None:
    act = make(api, clock, qps=1.0, burst=2)
    start = clock.now
    act.state()
    act.apply(DecisionId("d1"), ScaleRequest(3))
    calls = len(fake.requests)
    assert calls > 2
    assert clock.now - start == pytest.approx(calls - 2, abs=1e-6)


def test_a_kubeconfig_file_is_enough_to_connect(fake: FakeKubeApiServer, tmp_path: Path, clock: FakeTime) -> None:
    path = fake.write_kubeconfig(tmp_path / "kubeconfig")
    with KubernetesActuator(NS, NAME, kubeconfig=str(path), clock=clock.clock, sleep=clock.sleep) as act:
        assert act.state().spec_replicas == 5


def test_without_the_k8s_extra_the_error_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "kubernetes.client", None)
    with pytest.raises(MissingExtraError, match=r"pip install 'ebb\[k8s\]'"):
        KubernetesActuator(NS, NAME)
