"""The Kubernetes actuator's asleep tier end to end: the fake API server, in-process vLLM sleep engines, a router.

Each pod of the Deployment gets its own loopback address (127.0.0.N, one port for all: the pods of a
Deployment share their container port) and a :class:`~ebb.testing.vllm_sleep.SleepyEngine` there. The
Service selects ``app=vllm`` and ``ebb.io/routable=true``; a router thread sends completions to the
addresses the Service's EndpointSlices list (re-read every 20 ms, as kube-proxy follows them) and
counts every answer that is not 200. The actuator tells its drains to a
:class:`~ebb.live.drain_ledger.DrainLedger` on an SQLite ledger, as the live controller attaches one.
Real time, short: settle 0.2 s, ticks 50 ms.
"""

from __future__ import annotations

import logging
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("kubernetes")
from kubernetes import client  # noqa: E402

from ebb.actuate.base import SleepingActuator  # noqa: E402
from ebb.actuate.kube_tier import (  # noqa: E402
    ASLEEP_ANNOTATION,
    RELEASE_COST,
    ROUTABLE_LABEL,
    SLEEPER_COST,
    TierSettings,
)
from ebb.actuate.kubernetes import DELETION_COST_ANNOTATION, KubernetesActuator  # noqa: E402
from ebb.config.tiers import SleepTier  # noqa: E402
from ebb.ledger import SqliteLedger  # noqa: E402
from ebb.live.drain_ledger import DrainLedger  # noqa: E402
from ebb.model.drains import DrainEnd, DrainEvent, DrainStart, DrainStep, drain_of  # noqa: E402
from ebb.model.ids import RunId  # noqa: E402
from ebb.model.ids import DecisionId  # noqa: E402
from ebb.model.observation import ScaleRequest  # noqa: E402
from ebb.testing.fake_kube import FakeKubeApiServer  # noqa: E402
from ebb.testing.vllm_sleep import SleepyEngine  # noqa: E402
from tests.integration.service_router import Router, free_port, wait_until  # noqa: E402

IPS = [f"127.0.0.{k}" for k in range(2, 12)]
DEP = "/apis/apps/v1/namespaces/default/deployments/vllm"


@dataclass
class Cluster:
    fake: FakeKubeApiServer
    engines: dict[str, SleepyEngine]
    actuator: KubernetesActuator
    router: Router
    ledger: SqliteLedger
    drains: DrainLedger

    def engine_of(self, pod: str) -> SleepyEngine:
        return self.engines[self.fake.pods[("default", pod)]["status"]["podIP"]]

    def pod(self, name: str) -> dict[str, Any]:
        p = self.fake.pod(name)
        assert p is not None, name
        return p

    def spec(self) -> int:
        return int(self.fake.deployments[("default", "vllm")]["spec"]["replicas"])

    def ip(self, pod: str) -> str:
        return str(self.pod(pod)["status"]["podIP"])

    def drain_records(self, pod: str) -> list[DrainEvent]:
        """The drain records of ``pod`` in the ledger, in ledger order (read back, not from memory)."""
        assert self.drains.flush(timeout_s=5.0)
        events = [e for c in self.ledger.cycles(RunId("kube")) if (e := drain_of(c)) is not None]
        assert self.ledger.skipped == ()
        return [e for e in events if e.worker == pod]


@pytest.fixture
def cluster(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Cluster]:
    """Three pods; the drain budget (s) is 10 unless the test parametrizes ``cluster`` indirectly."""
    budget = float(getattr(request, "param", 10.0))
    port = free_port(IPS)
    engines = {ip: SleepyEngine(ip, port, service_s=0.1).start() for ip in IPS}
    fake = FakeKubeApiServer().start()
    fake.add_node("node-a", "zone-a")
    fake.add_deployment("vllm", 3, labels={"app": "vllm"}, template_labels={ROUTABLE_LABEL: "true"}, pod_ips=IPS)
    fake.add_service("vllm", {"app": "vllm", ROUTABLE_LABEL: "true"}, {"http": port})
    fake.add_service("vllm-metrics", {"app": "vllm"}, {"http": port})  # what the agent polls: every pod
    api = client.ApiClient(fake.configuration())
    tier = SleepTier(wake_s=0.5, max_replicas=2, ttl_s=3600)
    actuator = KubernetesActuator("default", "vllm", api_client=api, tier=tier, qps=100, burst=100,
                                  tier_settings=TierSettings(tier, engine_port=port, settle_s=0.2, tick_s=0.05,
                                                             scan_s=0.1, drain_budget_s=budget))
    ledger = SqliteLedger(tmp_path / "ledger.sqlite")
    drains = DrainLedger(ledger, "kube")
    actuator.observe_drains(drains)
    router = Router(fake, port)
    thread = threading.Thread(target=router.run, daemon=True)
    thread.start()
    try:
        yield Cluster(fake, engines, actuator, router, ledger, drains)
    finally:
        router.stop.set()
        thread.join(timeout=10)
        actuator.close()
        drains.close()
        ledger.close()
        api.close()
        fake.stop()
        for e in engines.values():
            e.stop()


def long_request(url: str, out: list[int]) -> threading.Thread:
    def go() -> None:
        req = urllib.request.Request(f"{url}/v1/completions", data=b"{}", method="POST")
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                out.append(resp.status)
        except urllib.error.HTTPError as exc:
            exc.close()
            out.append(exc.code)
    t = threading.Thread(target=go, daemon=True)
    t.start()
    return t


def sleep_one(c: Cluster, decision: str, replicas: int) -> str:
    """Scale to ``replicas`` running; the victim (newest running) must end asleep. Its name."""
    result = c.actuator.apply(DecisionId(decision), ScaleRequest(replicas))
    assert result.applied and len(result.removed) == 1
    victim = result.removed[0]
    wait_until(lambda: victim in {r.name for r in c.actuator.state().asleep}, f"{victim} asleep")
    return victim


def test_a_drained_victim_leaves_the_service_finishes_its_work_then_sleeps_and_a_scale_up_wakes_it(
        cluster: Cluster) -> None:
    c = cluster
    assert isinstance(c.actuator, SleepingActuator) and c.actuator.tier is not None
    wait_until(lambda: c.router.ok >= 6, "traffic on every pod")
    pods = c.fake.pod_names()
    victim_engine = c.engine_of(pods[-1])
    victim_engine.service_s = 1.0  # the victim's in-flight requests outlast the settle time
    done: list[int] = []
    inflight = [long_request(victim_engine.url, done) for _ in range(2)]
    wait_until(lambda: victim_engine.running == 2, "two requests in flight on the victim")

    result = c.actuator.apply(DecisionId("d1"), ScaleRequest(2))
    assert result.removed == (pods[-1],) and (result.replicas_before, result.replicas_after) == (3, 2)
    victim = pods[-1]
    # out of every endpoint at once, while its two requests still run; /scale untouched
    assert c.ip(victim) not in c.router.endpoints() and victim_engine.running >= 2  # + the router's own
    assert c.spec() == 3 and c.actuator.state().spec_replicas == 2 and c.actuator.state().draining == 1
    assert victim_engine.sleeps == []
    for t in inflight:
        t.join(timeout=5)
    assert done == [200, 200]
    wait_until(lambda: victim_engine.sleeps == [1], "the victim put to sleep")
    assert victim_engine.aborted == 0  # it slept only once its work had finished
    # the ledger shows the drain: its start, its in-flight work while the requests finished, its end
    wait_until(lambda: any(isinstance(e, DrainEnd) for e in c.drain_records(victim)), "the drain's end recorded")
    records = c.drain_records(victim)
    start, steps, end = records[0], [e for e in records if isinstance(e, DrainStep)], records[-1]
    assert isinstance(start, DrainStart) and (start.decision_id, start.reason, start.budget_s) == ("d1", "sleep", 10.0)
    assert isinstance(end, DrainEnd) and (end.outcome, end.then, end.inflight) == ("drained", "slept", 0)
    assert len(records) == 2 + len(steps) and {e.drain_id for e in records} == {start.drain_id}
    assert steps and steps[0].inflight is not None and steps[0].inflight >= 2  # read while the two still ran
    assert all(start.ts_ns <= s.ts_ns <= end.ts_ns and s.elapsed_s <= end.elapsed_s for s in steps)
    assert 0.9 <= end.elapsed_s < 5.0  # the requests took 1 s; the drain ended once they were done
    wait_until(lambda: ASLEEP_ANNOTATION in c.pod(victim)["metadata"]["annotations"], "the asleep annotation")
    ann = c.pod(victim)["metadata"]["annotations"]
    assert ann[DELETION_COST_ANNOTATION] == str(SLEEPER_COST)
    st = c.actuator.state()
    assert [r.name for r in st.asleep] == [victim] and st.spec_replicas == 2 and c.spec() == 3  # /scale = 2 + 1 asleep
    assert st.draining == 0 and len(st.replicas) == 2 and st.wake_s_seen is None  # no wake measured yet

    result = c.actuator.apply(DecisionId("d2"), ScaleRequest(3))
    assert result.added == (victim,) and c.spec() == 3
    wait_until(lambda: c.ip(victim) in c.router.endpoints(), "the woken pod back in the Service")
    assert not victim_engine.sleeping and victim_engine.wakes == 1
    assert DELETION_COST_ANNOTATION not in c.pod(victim)["metadata"]["annotations"]
    assert c.fake.pod_names() == pods  # woken, no cold pod created
    # the wake measured (set just after the pod rejoined the Service), for the policy to learn from
    wait_until(lambda: (c.actuator.state().wake_s_seen or 0.0) > 0, "the wake measured")
    served = victim_engine.served
    wait_until(lambda: victim_engine.served > served, "the woken pod serving again")
    assert c.router.failed == [] and sum(e.refused for e in c.engines.values()) == 0


def test_a_failing_wake_releases_the_sleeper_and_a_cold_pod_takes_its_place(
        cluster: Cluster, caplog: pytest.LogCaptureFixture) -> None:
    c = cluster
    victim = sleep_one(c, "d1", 2)
    c.engine_of(victim).fail_wake = True
    with caplog.at_level(logging.WARNING, logger="ebb.actuate.kube_tier"):
        result = c.actuator.apply(DecisionId("d2"), ScaleRequest(3))
        assert result.added == (victim,)
        wait_until(lambda: victim not in c.fake.pod_names(terminating=False), "the failed sleeper released")
        wait_until(lambda: len(c.fake.pod_names(terminating=False)) == 3, "a cold pod in its place")
    assert any("wake of" in r.message and victim in r.message and "cold" in r.message for r in caplog.records)
    release = [r for r in c.fake.calls("PATCH", f"/pods/{victim}")
               if (r.body or {}).get("metadata", {}).get("annotations", {}).get(DELETION_COST_ANNOTATION)
               == str(RELEASE_COST)]
    assert release, "the released pod got the lowest deletion cost before /scale went down"
    scales = [r.body["spec"]["replicas"] for r in c.fake.calls("PATCH", f"{DEP}/scale")]
    assert scales[-2:] == [2, 3]  # released, then a cold replica once it was terminating
    assert c.spec() == 3
    new = [n for n in c.fake.pod_names(terminating=False) if n != victim]
    wait_until(lambda: all(c.ip(n) in c.router.endpoints() for n in new), "the cold pod serving")
    assert c.router.failed == []


def test_keep_asleep_releases_the_oldest_sleeper_through_scale_with_the_lowest_cost(cluster: Cluster) -> None:
    c = cluster
    first = sleep_one(c, "d1", 2)
    second = sleep_one(c, "d2", 1)
    assert [r.name for r in c.actuator.state().asleep] == [first, second] and c.spec() == 3
    assert c.actuator.keep_asleep(None) == ()
    assert c.actuator.keep_asleep(1) == (first,)
    wait_until(lambda: first not in c.fake.pod_names(terminating=False), "the oldest sleeper terminating")
    assert c.spec() == 2 and [r.name for r in c.actuator.state().asleep] == [second]
    patches = [r for r in c.fake.requests if r.method == "PATCH"]
    i_cost = max(i for i, r in enumerate(patches) if r.path.endswith(f"/pods/{first}") and
                 (r.body or {}).get("metadata", {}).get("annotations", {}).get(DELETION_COST_ANNOTATION)
                 == str(RELEASE_COST))
    i_scale = max(i for i, r in enumerate(patches) if r.path == f"{DEP}/scale")
    assert i_cost < i_scale and patches[i_scale].body["spec"]["replicas"] == 2
    assert second in c.fake.pod_names(terminating=False)  # the newer sleeper stays
    assert c.router.failed == []


def test_a_drain_that_cannot_sleep_past_the_tier_max_releases_the_pod(cluster: Cluster) -> None:
    c = cluster
    sleep_one(c, "d1", 2)
    sleep_one(c, "d2", 1)  # max_replicas = 2 sleep now
    result = c.actuator.apply(DecisionId("d3"), ScaleRequest(0))
    victim = result.removed[0]
    engine = c.engine_of(victim)
    wait_until(lambda: victim not in c.fake.pod_names(terminating=False), "the third victim released")
    assert engine.sleeps == [] and c.spec() == 2
    assert len(c.actuator.state().asleep) == 2


def test_a_restarted_actuator_keeps_a_decision_once_and_finishes_the_drain_it_finds(cluster: Cluster) -> None:
    c = cluster
    pods = c.fake.pod_names()
    victim_engine = c.engine_of(pods[-1])
    victim_engine.service_s = 1.5
    done: list[int] = []
    t = long_request(victim_engine.url, done)
    wait_until(lambda: victim_engine.running >= 1, "a request in flight on the victim")
    first = c.actuator.apply(DecisionId("d1"), ScaleRequest(2))
    c.actuator.close()  # the controller dies mid-drain
    assert victim_engine.sleeps == []
    tier = c.actuator.tier
    assert tier is not None
    port = int(victim_engine.url.rsplit(":", 1)[1])
    api = client.ApiClient(c.fake.configuration())
    again = KubernetesActuator("default", "vllm", api_client=api, qps=100, burst=100,
                               tier_settings=TierSettings(tier, engine_port=port, settle_s=0.2, tick_s=0.05))
    again.observe_drains(c.drains)
    try:
        retry = again.apply(DecisionId("d1"), ScaleRequest(2))
        assert retry.applied is False and again.reason(DecisionId("d1")) == "already applied"
        assert (retry.replicas_before, retry.replicas_after) == (first.replicas_before, first.replicas_after)
        assert [r.name for r in again.state().replicas] == pods[:2]  # no second victim
        t.join(timeout=5)
        assert done == [200]
        wait_until(lambda: victim_engine.sleeps == [1], "the drain the new actuator found ended in sleep")
        wait_until(lambda: [r.name for r in again.state().asleep] == [pods[-1]], "the sleeper in the new state")
        assert victim_engine.aborted == 0
        # one drain in the ledger across the restart: the first start kept, the new actuator's end
        wait_until(lambda: isinstance(c.drain_records(pods[-1])[-1], DrainEnd), "the resumed drain's end recorded")
        records = c.drain_records(pods[-1])
        starts = [e for e in records if isinstance(e, DrainStart)]
        assert len(starts) == 1 and starts[0].budget_s == 10.0 and starts[0].decision_id == "d1"
        assert len({e.drain_id for e in records}) == 1 and (records[-1].outcome, records[-1].then) == ("drained", "slept")
    finally:
        again.close()
        api.close()


def test_a_pod_taken_again_while_it_wakes_is_not_put_back_and_a_hand_made_label_is_left_alone(
        cluster: Cluster) -> None:
    c = cluster
    victim = sleep_one(c, "d1", 2)
    engine = c.engine_of(victim)
    engine.wake_s = 0.8  # a slow wake: the next decision lands while it runs
    assert c.actuator.apply(DecisionId("d2"), ScaleRequest(3)).added == (victim,)
    rid = next(r.replica for r in c.actuator.state().replicas if r.name == victim)
    again = c.actuator.apply(DecisionId("d3"), ScaleRequest(2, victims=(rid,)))
    assert again.removed == (victim,)
    wait_until(lambda: engine.wakes == 1, "the slow wake done")
    wait_until(lambda: engine.sleeps == [1, 1], "the pod drained and asleep again")
    wait_until(lambda: victim in {r.name for r in c.actuator.state().asleep}, "its asleep annotation")
    assert c.ip(victim) not in c.router.endpoints()  # never put back in the Service in between
    # a pod a person took out of the Service (no ebb.io/draining) is no capacity, and never slept or released
    other = c.actuator.state().replicas[0].name
    with client.ApiClient(c.fake.configuration()) as person:
        body = {"metadata": {"labels": {ROUTABLE_LABEL: "false"}}}
        client.CoreV1Api(person).patch_namespaced_pod(other, "default", body,
                                                      _content_type="application/merge-patch+json")
    time.sleep(0.6)
    st = c.actuator.state()
    assert other not in {r.name for r in st.replicas} and st.draining == 1 and c.engine_of(other).sleeps == []
    assert other in c.fake.pod_names(terminating=False) and c.router.failed == []


@pytest.mark.parametrize("cluster", [1.0], indirect=True, ids=["budget-1s"])
def test_work_still_in_flight_when_the_drain_budget_runs_out_is_never_aborted_by_a_sleep(
        cluster: Cluster, caplog: pytest.LogCaptureFixture) -> None:
    c = cluster
    pods = c.fake.pod_names()
    engine = c.engine_of(pods[-1])
    engine.service_s = 2.5  # longer than the 1 s budget
    done: list[int] = []
    t = long_request(engine.url, done)
    wait_until(lambda: engine.running >= 1, "a long request on the victim")
    with caplog.at_level(logging.WARNING, logger="ebb.actuate.kube_tier"):
        assert c.actuator.apply(DecisionId("d1"), ScaleRequest(2)).removed == (pods[-1],)
        wait_until(lambda: pods[-1] not in c.fake.pod_names(terminating=False), "the victim released")
    assert any("drain budget" in r.message and "in flight" in r.message for r in caplog.records)
    wait_until(lambda: isinstance(c.drain_records(pods[-1])[-1], DrainEnd), "the drain's end recorded")
    end = c.drain_records(pods[-1])[-1]
    assert isinstance(end, DrainEnd) and (end.outcome, end.then) == ("budget", "released")
    assert end.inflight is not None and end.inflight >= 1 and 1.0 <= end.elapsed_s < 3.0
    t.join(timeout=5)
    assert done == [200] and engine.sleeps == [] and engine.aborted == 0
    assert c.spec() == 2 and c.actuator.state().asleep == ()


def test_a_release_waits_for_a_starting_pod_and_a_queued_sleeper_is_never_woken(cluster: Cluster) -> None:
    c = cluster
    a = sleep_one(c, "d1", 2)
    b = sleep_one(c, "d2", 1)
    c.fake.ready_delay_s = 1.5
    c.fake.set_replicas("vllm", 4)  # another writer: a pod starts, not Ready for 1.5 s
    starting = [n for n in c.fake.pod_names(terminating=False) if n not in (a, b)][-1]
    assert c.actuator.keep_asleep(0) == (a, b)
    st = c.actuator.state()
    assert st.asleep == () and st.draining == 2  # queued: no longer counted on, still held
    time.sleep(0.3)
    assert {a, b} <= set(c.fake.pod_names(terminating=False))  # upstream would delete the starting pod first
    up = c.actuator.apply(DecisionId("d3"), ScaleRequest(3))
    assert a not in up.added and b not in up.added and len(up.added) == 1  # a cold pod, not a sleeper on its way out
    wait_until(lambda: not {a, b} & set(c.fake.pod_names(terminating=False)), "both sleepers released", 8.0)
    assert starting in c.fake.pod_names(terminating=False) and c.spec() == 3
    assert c.engines[c.ip(starting)].sleeps == [] and c.router.failed == []


def test_the_node_agent_sees_the_sleeper_through_the_metrics_service_and_counts_it_as_no_capacity(
        cluster: Cluster) -> None:
    from ebb.agent.kube_pods import EndpointSliceLister
    from ebb.agent.server import Agent
    from ebb.sources.agents import AgentSource
    from ebb.sources.engines.profiles import PROFILES

    c = cluster
    port = int(next(iter(c.engines.values())).url.rsplit(":", 1)[1])
    api = client.ApiClient(c.fake.configuration())
    try:
        lister = EndpointSliceLister("vllm-metrics", "node-a", port, namespace="default", api_client=api)
        with Agent(engine=PROFILES["vllm"], engine_pods=lister, discover_s=0.2, name="node-a") as agent:
            source = AgentSource([agent.url], timeout_s=2.0)
            # the last half second only: under load one poll may time out (missing, and fewer seen)
            wait_until(lambda: source.read(time.time() - 0.5).replicas_seen == 3, "three awake pods seen")
            victim = sleep_one(c, "d1", 2)
            name = f"{c.ip(victim)}:{port}"

            def counted() -> bool:
                sig = source.read(time.time() - 0.5)
                return sig.asleep_replicas == 1 and sig.replicas_seen == 2
            wait_until(counted, "the sleeper counted asleep, not seen as capacity")
            newest = agent.aggregator.since(0)[-1]
            assert newest.workers[name].asleep and not newest.workers[name].ready
            with urllib.request.urlopen(f"{agent.url}/metrics", timeout=5) as resp:
                assert "ebb_agent_asleep_workers 1.0" in resp.read().decode()
            c.actuator.apply(DecisionId("d2"), ScaleRequest(3))

            def awake_again() -> bool:
                sig = source.read(time.time() - 0.5)
                return sig.asleep_replicas == 0 and sig.replicas_seen == 3
            wait_until(awake_again, "the woken pod counted as capacity again")
    finally:
        api.close()


def test_a_wake_slower_than_its_deadline_falls_back_to_a_cold_pod(cluster: Cluster,
                                                                    caplog: pytest.LogCaptureFixture) -> None:
    c = cluster
    victim = sleep_one(c, "d1", 2)
    ip = c.ip(victim)
    c.engine_of(victim).wake_s = 30.0  # the deadline is max(10 s, 5 x 0.5 s) = 10 s
    start = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="ebb.actuate.kube_tier"):
        assert c.actuator.apply(DecisionId("d2"), ScaleRequest(3)).added == (victim,)
        wait_until(lambda: victim not in c.fake.pod_names(terminating=False), "the slow sleeper released", 20.0)
    assert 9.5 <= time.monotonic() - start < 20.0
    assert any("wake of" in r.message and victim in r.message for r in caplog.records)
    wait_until(lambda: len(c.fake.pod_names(terminating=False)) == 3, "a cold pod in its place")
    assert c.spec() == 3 and ip not in c.router.endpoints() and c.router.failed == []


def test_a_pod_deleted_while_it_drains_ends_its_drain_as_vanished_in_the_ledger(cluster: Cluster) -> None:
    c = cluster
    pods = c.fake.pod_names()
    engine = c.engine_of(pods[-1])
    engine.service_s = 3.0
    done: list[int] = []
    long_request(engine.url, done)
    wait_until(lambda: engine.running >= 1, "a request in flight on the victim")
    assert c.actuator.apply(DecisionId("d1"), ScaleRequest(2)).removed == (pods[-1],)
    wait_until(lambda: any(isinstance(e, DrainStep) for e in c.drain_records(pods[-1])), "an in-flight step")
    with c.fake._lock:  # someone else deletes the pod outright
        del c.fake.pods[("default", pods[-1])]
    wait_until(lambda: isinstance(c.drain_records(pods[-1])[-1], DrainEnd), "the drain's end recorded")
    end = c.drain_records(pods[-1])[-1]
    assert isinstance(end, DrainEnd) and (end.outcome, end.then) == ("vanished", "gone") and end.elapsed_s < 3.0
    assert engine.sleeps == []
