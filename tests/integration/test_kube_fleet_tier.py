"""The fleet controller with a tiered and an untiered Deployment end to end: the fake API server, in-process
vLLM sleep engines, a router per Service.

Built the way ``ebb run --mode act --workloads FLEET.yaml`` builds it (:func:`ebb.cli.run_fleet.run_fleet`):
one shared :class:`~ebb.actuate.batching.WriteBatcher`, one ``KubernetesActuator(namespace, deployment,
api_client=..., tier=...)`` per Deployment wrapped by ``batcher.wrap``, one
:class:`~ebb.live.controller.Controller` per workload on one SQLite ledger, and the
:class:`~ebb.live.fleet_controller.FleetController` over them in act mode with a disruption budget of one
replica per cycle. Only the tier's timings (settle 0.2 s, ticks 50 ms), the engines' port and the client
limits differ from the command's defaults, to keep the test short.

``shop/chat`` has ``tier: asleep`` (its pods carry ``ebb.io/routable=true``, which its Service selects);
``lab/train`` has none. Each pod gets its own loopback address (127.0.0.N, one port for all) and a
:class:`~ebb.testing.vllm_sleep.SleepyEngine` there, as in ``test_kube_sleep_tier.py``. The policies are
scripted (a replica count each; the tiered one counts on its sleepers as Ebb's does), so every decision
is known in advance; real time, no timing asserts, bounded waits.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("kubernetes")
from kubernetes import client  # noqa: E402

from ebb.actuate.batching import WriteBatcher  # noqa: E402
from ebb.actuate.kube_tier import ASLEEP_ANNOTATION, ROUTABLE_LABEL, TierSettings  # noqa: E402
from ebb.actuate.kubernetes import KubernetesActuator  # noqa: E402
from ebb.config.fleet import FleetWorkload  # noqa: E402
from ebb.config.tiers import SleepTier  # noqa: E402
from ebb.config.workloads import default_workload_classes  # noqa: E402
from ebb.ledger import SqliteLedger  # noqa: E402
from ebb.live.controller import Controller, ControllerSettings  # noqa: E402
from ebb.live.fleet_controller import FleetController, FleetMember, FleetOutcome, FleetSettings  # noqa: E402
from ebb.model.decision import Decision, action_between  # noqa: E402
from ebb.model.drains import DrainEnd, DrainEvent, DrainStart, drain_of  # noqa: E402
from ebb.model.ids import RunId  # noqa: E402
from ebb.model.live import LiveSignals  # noqa: E402
from ebb.model.observation import FineSignals, Observation, Pipeline  # noqa: E402
from ebb.model.spans import NO_SPANS, Spans  # noqa: E402
from ebb.testing.fake_kube import FakeKubeApiServer  # noqa: E402
from ebb.testing.fakes import FakeSignalSource  # noqa: E402
from ebb.testing.vllm_sleep import SleepyEngine  # noqa: E402
from tests.integration.service_router import Router, free_port, wait_until  # noqa: E402

CLASSES = {c.name: c for c in default_workload_classes()}
TIER = SleepTier(wake_s=0.5, max_replicas=2, ttl_s=3600)
BUDGET = 1
"""The fleet's disruption budget (replicas per cycle): both workloads ask for one removal at once."""
CHAT_IPS = [f"127.0.0.{k}" for k in range(2, 8)]
TRAIN_IPS = [f"127.0.0.{k}" for k in range(8, 14)]
IPS = CHAT_IPS + TRAIN_IPS


def fresh_signals() -> FakeSignalSource:
    """Ten fresh samples up to now (wall clock), light load: the policies decide on them, L2 ranks them."""
    def produce(since_s: float) -> LiveSignals:
        now = time.time()
        t = now - 0.1 * np.arange(10)[::-1]
        t = t[t > since_s]
        z = np.zeros(len(t))
        return LiveSignals(FineSignals(t_s=t, prefill_replicas=z + 0.2, slot_replicas=z + 0.2, queued=z),
                           total_qps=1.0, queued=0.0, newest_sample_s=now)
    return FakeSignalSource(produce)


@dataclass
class ScriptedSleepingPolicy:
    """A policy that wants ``want`` replicas and, when ``sleeps``, counts on ``cold`` running or asleep
    (:class:`~ebb.decide.base.Sleeps`, as Ebb's policy with a tier does); it names no victims (L3 does)."""

    want: int
    cold: int = 3
    sleeps: bool = True
    spec: str = "scripted"
    interval_s: float = 1.0
    pipeline: Pipeline = Pipeline(1, 1)
    seen_asleep: list[int] = field(default_factory=list)

    def decide(self, obs: Observation, *, spans: Spans = NO_SPANS) -> Decision:
        self.seen_asleep.append(obs.asleep_replicas)
        have, n = obs.spec_replicas, self.want
        return Decision(obs.t_s, action_between(have, n), have, n, policy=self.spec,
                        reasons=("scripted",) if n != have else (), signals={"demand_p99_replicas": 1.0})

    def observe(self, obs: Observation) -> None:
        pass

    def gate_queries(self) -> tuple[str, ...]:
        return ()

    def asleep_wanted(self, running: int) -> int | None:
        return max(0, self.cold - running)


@dataclass
class Fleet:
    fake: FakeKubeApiServer
    engines: dict[str, SleepyEngine]
    fleet: FleetController
    actuators: dict[str, KubernetesActuator]
    policies: dict[str, ScriptedSleepingPolicy]
    routers: dict[str, Router]
    ledger: SqliteLedger

    def member(self, target: str) -> FleetMember:
        return next(m for m in self.fleet.members if m.target == target)

    def pods(self, ns: str) -> list[str]:
        """The Deployment's pods (each namespace holds one), oldest first, terminating ones left out."""
        return self.fake.pod_names(ns, terminating=False)

    def pod(self, ns: str, name: str) -> dict[str, Any]:
        p = self.fake.pod(name, ns)
        assert p is not None, name
        return p

    def ip(self, ns: str, name: str) -> str:
        return str(self.pod(ns, name)["status"]["podIP"])

    def engine_of(self, ns: str, name: str) -> SleepyEngine:
        return self.engines[self.ip(ns, name)]

    def scale(self, ns: str, dep: str) -> int:
        return int(self.fake.deployments[(ns, dep)]["spec"]["replicas"])

    def drain_records(self, target: str) -> list[DrainEvent]:
        """The drain records of ``target``'s controller in the ledger, in ledger order (read back)."""
        ctl = self.member(target).controller
        assert ctl.drains is not None, f"no drain writer attached to {target}'s actuator"
        assert ctl.drains.flush(timeout_s=5.0)
        events = [e for c in self.ledger.cycles(RunId(ctl.settings.run_id)) if (e := drain_of(c)) is not None]
        assert self.ledger.skipped == ()
        return events

    def cycle(self) -> FleetOutcome:
        time.sleep(0.2)  # fresh samples since the previous cycle's read
        return self.fleet.cycle()


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    port = free_port(IPS)
    engines = {ip: SleepyEngine(ip, port, service_s=0.05).start() for ip in IPS}
    fake = FakeKubeApiServer().start()
    fake.add_node("node-a", "zone-a")
    fake.add_deployment("chat", 3, namespace="shop", labels={"app": "chat"},
                        template_labels={ROUTABLE_LABEL: "true"}, pod_ips=CHAT_IPS)
    fake.add_service("chat", {"app": "chat", ROUTABLE_LABEL: "true"}, {"http": port}, namespace="shop")
    fake.add_deployment("train", 3, namespace="lab", labels={"app": "train"}, pod_ips=TRAIN_IPS)
    fake.add_service("train", {"app": "train"}, {"http": port}, namespace="lab")
    api = client.ApiClient(fake.configuration())
    ledger = SqliteLedger(tmp_path / "ledger.sqlite")
    workloads = [
        FleetWorkload(namespace="shop", deployment="chat", workload_class=CLASSES["order-fulfilment"],
                      max_replicas=8, tier=TIER),
        FleetWorkload(namespace="lab", deployment="train", workload_class=CLASSES["offline-training"],
                      max_replicas=8),
    ]
    batcher = WriteBatcher(3, 0.1)
    actuators: dict[str, KubernetesActuator] = {}
    policies: dict[str, ScriptedSleepingPolicy] = {}
    members = []
    for w in workloads:
        # as run_fleet builds it; the tier's timings and the engines' port made short and local
        settings = TierSettings(w.tier, engine_port=port, settle_s=0.2, tick_s=0.05, scan_s=0.1,
                                drain_budget_s=10.0) if w.tier is not None else None
        act = KubernetesActuator(w.namespace, w.deployment, api_client=api, tier=w.tier, qps=100, burst=100,
                                 tier_settings=settings)
        actuators[w.target] = act
        policies[w.target] = ScriptedSleepingPolicy(want=3, cold=3, sleeps=w.tier is not None)
        ctl = Controller(policies[w.target], fresh_signals(), batcher.wrap(act, w.target), ledger,
                         ControllerSettings(run_id=f"fleet-{w.namespace}-{w.deployment}", target=w.target,
                                            mode="act", interval_s=1.0, min_replicas=w.min_replicas,
                                            max_replicas=w.max_replicas, react_interval_s=0.0))
        members.append(FleetMember(ctl, w, w.ttft_slo_ms(2000.0)))
    fc = FleetController(members, ledger, FleetSettings(run_id="fleet", disruption_budget=BUDGET, interval_s=1.0),
                         batcher=batcher)
    routers = {"shop/chat": Router(fake, port, "shop", "chat"), "lab/train": Router(fake, port, "lab", "train")}
    threads = [threading.Thread(target=r.run, daemon=True) for r in routers.values()]
    for t in threads:
        t.start()
    try:
        yield Fleet(fake, engines, fc, actuators, policies, routers, ledger)
    finally:
        for r in routers.values():
            r.stop.set()
        for t in threads:
            t.join(timeout=10)
        for m in members:
            m.controller.close()
        for a in actuators.values():
            a.close()
        ledger.close()
        api.close()
        fake.stop()
        for e in engines.values():
            e.stop()


def test_a_fleet_scale_down_sleeps_the_tiered_victim_removes_the_other_within_the_budget_and_a_scale_up_wakes(
        fleet: Fleet) -> None:
    f = fleet
    chat, train = f.routers["shop/chat"], f.routers["lab/train"]
    wait_until(lambda: chat.ok >= 6 and train.ok >= 6, "traffic on both Services")
    chat_pods, train_pods = f.pods("shop"), f.pods("lab")
    assert len(chat_pods) == 3 and len(train_pods) == 3
    train_ips = {n: f.ip("lab", n) for n in train_pods}

    # both workloads ask for one replica less in the same cycle; the budget grants one removal a cycle
    f.policies["shop/chat"].want = 2
    f.policies["lab/train"].want = 2
    first = f.cycle()
    assert first.plan is not None
    assert sum(g.requested for g in first.plan.grants) == 2 and sum(g.granted for g in first.plan.grants) == BUDGET
    outs = [first]
    for _ in range(4):
        if f.scale("lab", "train") == 2 and f.actuators["shop/chat"].state().spec_replicas == 2:
            break
        outs.append(f.cycle())
    removed = [o.removed for o in outs]
    assert max(removed) <= BUDGET and sum(removed) == 2, removed
    down = {m.target: o for out in outs for m, o in zip(f.fleet.members, out.outcomes)
            if o.action == "scale_down" and o.acted}
    assert set(down) == {"shop/chat", "lab/train"}, [(o.action, o.note) for out in outs for o in out.outcomes]

    # the tiered victim: out of the Service at once, drained, asleep through its engine, still a pod
    (victim,) = [n for n in chat_pods if f.pod("shop", n)["metadata"]["labels"].get(ROUTABLE_LABEL) == "false"]
    engine = f.engine_of("shop", victim)
    assert f.ip("shop", victim) not in chat.endpoints()
    wait_until(lambda: engine.sleeps == [1], "the tiered victim put to sleep")
    assert engine.sleeping and engine.aborted == 0
    wait_until(lambda: victim in {r.name for r in f.actuators["shop/chat"].state().asleep}, "the sleeper in the state")
    assert ASLEEP_ANNOTATION in f.pod("shop", victim)["metadata"]["annotations"]
    assert f.pods("shop") == chat_pods and f.scale("shop", "chat") == 3  # /scale = 2 running + 1 asleep
    # the ledger shows its drain, under the chat controller's run id: the decision that chose it, drained → slept
    wait_until(lambda: any(isinstance(e, DrainEnd) for e in f.drain_records("shop/chat")), "the drain's end recorded")
    records = [e for e in f.drain_records("shop/chat") if e.worker == victim]
    start, end = records[0], records[-1]
    assert isinstance(start, DrainStart) and (start.reason, start.budget_s) == ("sleep", 10.0)
    assert start.decision_id == down["shop/chat"].decision_id
    assert isinstance(end, DrainEnd) and (end.outcome, end.then, end.inflight) == ("drained", "slept", 0)
    assert {e.drain_id for e in records} == {start.drain_id}
    assert {e.worker for e in f.drain_records("shop/chat")} == {victim}

    # the untiered victim: removed as before (its pod gone, never slept), no drain record
    (gone,) = set(train_pods) - set(f.pods("lab"))
    assert f.scale("lab", "train") == 2 and len(f.pods("lab")) == 2
    gone_engine = f.engines[train_ips[gone]]
    assert gone_engine.sleeps == [] and gone_engine.wakes == 0
    assert f.member("lab/train").controller.drains is None or f.drain_records("lab/train") == []
    assert train_ips[gone] not in train.endpoints()
    assert all(f.engines[ip].sleeps == [] for ip in TRAIN_IPS)

    # the chat policy saw its sleeper on the next cycle; the train policy never sees one
    held = f.cycle()
    assert held.removed == 0
    assert f.policies["shop/chat"].seen_asleep[-1] == 1 and set(f.policies["lab/train"].seen_asleep) == {0}

    # a scale-up of the tiered workload wakes the sleeper instead of creating a pod
    f.policies["shop/chat"].want = 3
    up = f.cycle()
    (o,) = [o for m, o in zip(f.fleet.members, up.outcomes) if m.target == "shop/chat"]
    assert o.action == "scale_up" and o.acted and up.removed == 0
    wait_until(lambda: f.ip("shop", victim) in chat.endpoints(), "the woken pod back in the Service")
    assert engine.wakes == 1 and not engine.sleeping
    assert f.pod("shop", victim)["metadata"]["labels"][ROUTABLE_LABEL] == "true"
    assert f.pods("shop") == chat_pods and f.scale("shop", "chat") == 3  # woken, no cold pod created
    st = f.actuators["shop/chat"].state()
    assert st.asleep == () and st.spec_replicas == 3
    served = engine.served
    wait_until(lambda: engine.served > served, "the woken pod serving again")
    assert chat.failed == [] and train.failed == [] and sum(e.refused for e in f.engines.values()) == 0
