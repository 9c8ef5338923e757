"""The fleet controller on Kubernetes actuators against the in-process fake API server
(ebb.testing.fake_kube; no real API server runs here): three Deployments in two namespaces, one L3
budget, quotas, batched writes, a failing workload contained. Time is injected: nothing sleeps."""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pytest

pytest.importorskip("kubernetes")
from kubernetes import client

from ebb.actuate.batching import WriteBatcher
from ebb.actuate.kubernetes import DELETION_COST_ANNOTATION, KubernetesActuator
from ebb.config.fleet import FleetWorkload, NamespaceQuota, parse_fleet
from ebb.ledger.memory import MemoryLedger
from ebb.live.controller import Controller, ControllerSettings
from ebb.live.fleet_controller import (
    FleetController,
    FleetMember,
    FleetOutcome,
    FleetSettings,
)
from ebb.model.ids import RunId
from ebb.model.live import LiveSignals
from ebb.model.observation import FineSignals
from ebb.testing.fake_kube import FakeKubeApiServer
from ebb.testing.fakes import FakeSignalSource
from ebb.testing.policies import FixedPolicy

FLEET = """\
workloads:
  - {namespace: shop, deployment: checkout, class: order-fulfilment, max_replicas: 8}
  - {namespace: shop, deployment: recs, class: realtime-recommendation, max_replicas: 8}
  - {namespace: lab, deployment: train, class: offline-training, max_replicas: 8}
cluster: {disruption_budget: 1, writes_per_100ms: 3}
"""


class FakeTime:
    """Injected monotonic clock and sleep for the actuators' client limiter, their backoff and the batcher."""

    def __init__(self) -> None:
        self.now = 1000.0

    def clock(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.now += s


class Wall:
    def __init__(self) -> None:
        self.t = 1_700_000_000.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def fake() -> Iterator[FakeKubeApiServer]:
    with FakeKubeApiServer() as server:
        for zone in ("a", "b", "c"):
            server.add_node(f"node-{zone}", f"zone-{zone}")
        yield server


@pytest.fixture
def api(fake: FakeKubeApiServer) -> Iterator[Any]:
    api_client = client.ApiClient(fake.configuration())
    yield api_client
    api_client.close()


class KubeFleet:
    """A fleet file's Deployments on the fake API server, each policy wanting ``want[target]`` replicas."""

    def __init__(self, fake: FakeKubeApiServer, api: Any, text: str, have: dict[str, int], want: dict[str, int], *,
                 mode: str = "act", quotas: Sequence[NamespaceQuota] | None = None) -> None:
        cfg = parse_fleet(text, "fleet.yaml")
        self.fake, self.wall, self.time = fake, Wall(), FakeTime()
        self.ledger = MemoryLedger()
        self.batcher = WriteBatcher(cfg.cluster.writes_per_100ms, 0.1, clock=self.time.clock, sleep=self.time.sleep)
        members = []
        for w in cfg.workloads:
            fake.add_deployment(w.deployment, have[w.target], namespace=w.namespace)
            act = KubernetesActuator(w.namespace, w.deployment, api_client=api, clock=self.time.clock,
                                     sleep=self.time.sleep, rng=random.Random(3))
            ctl = Controller(FixedPolicy(want[w.target], spec=f"fixed-{w.deployment}"), self._fresh(),
                             self.batcher.wrap(act, w.target), self.ledger,
                             ControllerSettings(run_id=f"fleet-{w.namespace}-{w.deployment}", target=w.target,
                                                mode=mode, max_replicas=w.max_replicas,  # type: ignore[arg-type]
                                                react_interval_s=0.0),
                             clock=self.wall)
            members.append(FleetMember(ctl, w, w.ttft_slo_ms(2000.0)))
        self.workloads: tuple[FleetWorkload, ...] = cfg.workloads
        self.fleet = FleetController(members, self.ledger,
                                     FleetSettings(run_id="fleet", disruption_budget=cfg.cluster.disruption_budget),
                                     quotas=cfg.quotas if quotas is None else quotas, batcher=self.batcher,
                                     clock=self.wall)

    def _fresh(self) -> FakeSignalSource:
        def produce(since_s: float) -> LiveSignals:
            t = self.wall.t - 0.1 * np.arange(10)[::-1]
            t = t[t > since_s]
            z = np.zeros(len(t))
            return LiveSignals(FineSignals(t_s=t, prefill_replicas=z + 0.1, slot_replicas=z + 0.1, queued=z),
                               total_qps=1.0, queued=0.0, newest_sample_s=self.wall.t)
        return FakeSignalSource(produce)

    def cycle(self) -> FleetOutcome:
        self.wall.t += 1.0
        return self.fleet.cycle()

    def replicas(self) -> dict[str, int]:
        return {w.target: int(self.fake.deployments[(w.namespace, w.deployment)]["spec"]["replicas"])
                for w in self.workloads}

    def scale_patches(self) -> list[str]:
        return [r.path.split("/")[-2] for r in self.fake.requests if r.method == "PATCH" and r.path.endswith("/scale")]


THREE = {"shop/checkout": 3, "shop/recs": 3, "lab/train": 3}
ONE = {"shop/checkout": 1, "shop/recs": 1, "lab/train": 1}


def test_a_budget_of_one_removes_one_replica_per_cycle_across_the_fleet_in_l2_rank_order(
        fake: FakeKubeApiServer, api: Any) -> None:
    kf = KubeFleet(fake, api, FLEET, THREE, ONE)
    seen = []
    for _ in range(6):
        out = kf.cycle()
        assert out.removed == 1 and sum(kf.replicas().values()) == 9 - len(seen) - 1
        seen.append(kf.replicas())
    assert [s["lab/train"] for s in seen] == [2, 1, 1, 1, 1, 1]
    assert [s["shop/recs"] for s in seen] == [3, 3, 2, 1, 1, 1]
    assert [s["shop/checkout"] for s in seen] == [3, 3, 3, 3, 2, 1]
    assert kf.scale_patches() == ["train", "train", "recs", "recs", "checkout", "checkout"]
    assert len(fake.pod_names("lab")) == 1 and len(fake.pod_names("shop")) == 2
    vetoed = kf.ledger.decisions(target="shop/checkout")[0]
    assert vetoed.action == "veto" and vetoed.vetoes[-1].startswith("L3: cluster budget: 0 of 2")


def test_a_namespaces_quota_min_is_never_reclaimed_while_another_borrows(fake: FakeKubeApiServer, api: Any) -> None:
    # shop holds 2 GPUs guaranteed, uses 6: 4 borrowed; lab (offline training, lowest weight) holds
    # its 3 within min. With one removal per cycle, shop's borrowers go first, ranked order or not.
    quotas = [NamespaceQuota("shop", 2000, 12000), NamespaceQuota("lab", 3000, None)]
    kf = KubeFleet(fake, api, FLEET, THREE, ONE, quotas=quotas)
    for _ in range(4):
        kf.cycle()
    assert kf.replicas() == {"shop/checkout": 1, "shop/recs": 1, "lab/train": 3}, "lab's min untouched"
    # the pods kept in shop are the two that hold its min: the oldest (then first by name)
    assert fake.pod_names("shop") == ["checkout-5d8f7c-00001", "recs-5d8f7c-00004"]
    kf.cycle()
    assert kf.replicas()["lab/train"] == 2, "no borrower left: rank order again"
    reasons = [r for d in kf.ledger.decisions(target="shop/recs") for r in d.reasons]
    assert any("reclaims borrowed quota" in r for r in reasons)


def test_victims_are_marked_before_scale_and_come_from_the_l3_plan(fake: FakeKubeApiServer, api: Any) -> None:
    kf = KubeFleet(fake, api, FLEET, THREE, {**THREE, "lab/train": 2})
    kf.cycle()
    (d,) = [x for x in kf.ledger.decisions(target="lab/train") if x.action == "scale_down"]
    (victim,) = d.victims
    assert victim not in fake.pod_names("lab")
    log = [(r.method, r.path) for r in fake.requests if r.method == "PATCH"]
    cost = [i for i, (_, p) in enumerate(log) if p.endswith(f"/pods/{victim}")]
    scale = [i for i, (_, p) in enumerate(log) if p.endswith("/train/scale")]
    assert cost and scale and cost[0] < scale[0]
    body = next(r.body for r in fake.requests if r.method == "PATCH" and r.path.endswith(f"/pods/{victim}"))
    assert body["metadata"]["annotations"][DELETION_COST_ANNOTATION] == "-1000"


def test_writes_are_batched_at_most_three_per_100_ms(fake: FakeKubeApiServer, api: Any) -> None:
    text = "workloads:\n" + "".join(
        f"  - {{namespace: {ns}, deployment: w{i}, class: order-fulfilment, max_replicas: 8}}\n"
        for i, ns in enumerate(["shop", "lab"] * 4))
    targets = [f"{ns}/w{i}" for i, ns in enumerate(["shop", "lab"] * 4)]
    kf = KubeFleet(fake, api, text, dict.fromkeys(targets, 1), dict.fromkeys(targets, 3))
    t0 = kf.time.now
    out = kf.cycle()
    assert set(kf.replicas().values()) == {3} and len(kf.scale_patches()) == 8
    assert [len(b.writes) for b in out.batches] == [3, 3, 2]
    starts = [w.started_s for b in out.batches for w in b.writes]
    assert all(sum(1 for s in starts if t <= s < t + 0.1) <= 3 for t in starts)
    assert starts[-1] - t0 >= 0.2 - 1e-9
    (rec,) = kf.ledger.cycles(RunId("fleet"))
    assert [len(b["writes"]) for b in rec.snapshot["batches"]] == [3, 3, 2]  # type: ignore[index,union-attr,arg-type]


def test_a_failing_workload_does_not_stop_the_others(fake: FakeKubeApiServer, api: Any) -> None:
    kf = KubeFleet(fake, api, FLEET, THREE, {"shop/checkout": 5, "shop/recs": 3, "lab/train": 2})
    fault = fake.inject("PATCH", "/apis/apps/v1/namespaces/shop/deployments/checkout/scale", 503, times=50)
    out = kf.cycle()
    by = {m.target: o for m, o in zip(kf.fleet.members, out.outcomes)}
    assert by["shop/checkout"].action == "error" and "retry later" in by["shop/checkout"].note
    assert by["lab/train"].acted and kf.replicas() == {"shop/checkout": 3, "shop/recs": 3, "lab/train": 2}
    (bad,) = [w for b in out.batches for w in b.writes if not w.ok]
    assert bad.target == "shop/checkout" and "TransientError" in bad.error
    fault.times = 0  # the API server recovers
    kf.cycle()
    assert kf.replicas()["shop/checkout"] == 5, "recovers on the next cycle"


def test_recommend_mode_writes_nothing_to_the_cluster(fake: FakeKubeApiServer, api: Any) -> None:
    kf = KubeFleet(fake, api, FLEET, THREE, {"shop/checkout": 5, "shop/recs": 1, "lab/train": 1}, mode="recommend")
    for _ in range(3):
        kf.cycle()
    assert [r for r in fake.requests if r.method != "GET"] == []
    assert kf.replicas() == THREE
    assert {d.plan["mode"] for d in kf.ledger.decisions()} == {"recommend"}
