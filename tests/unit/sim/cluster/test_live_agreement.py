"""A cluster what-if predicts the live fleet controller: one scenario through ``ebb simulate --cluster``
(the exact L1) and through the live ``FleetController`` on the virtual clock gives the same decisions.

The scenario: four services in two namespaces with elastic quotas, three zones, seven simulated
minutes of synthetic Poisson arrivals — idle fleets that shrink under a disruption budget of one
replica per cycle (L3 vetoes the rest, borrowed quota reclaimed first), a burst that scales one
service up, a demand step that its namespace's quota ``max`` caps.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from ebb.actuate.batching import WriteBatcher
from ebb.config.fleet import FleetWorkload, NamespaceQuota
from ebb.config.workloads import default_workload_classes
from ebb.decide.profiles import PROFILES
from ebb.ledger.memory import MemoryLedger
from ebb.live.controller import Controller, ControllerSettings
from ebb.live.fleet_controller import FleetController, FleetMember, FleetSettings
from ebb.sim.cluster.engine import ClusterInputs, simulate
from ebb.sim.cluster.exact import service_policy
from ebb.sim.cluster.policies import EbbCluster, build_cluster_policy
from ebb.testing.cluster_bridge import ClusterBridge

CLASSES = default_workload_classes()
ZONES = ("zone-a", "zone-b", "zone-c")
SECONDS = 420
BUDGET = 1
WRITES = 3

Row = tuple[float, str, str, int, int]


def scenario(seed: int = 7) -> ClusterInputs:
    rng = np.random.default_rng(seed)
    # name, namespace, class, priority, capacity rps, service s, slo s, initial, max, mean arrivals/s
    rows = [("checkout", 0, 0, 1000, 4.0, 0.2, 1.0, 6, 12, 5.0),
            ("search", 0, 1, 500, 8.0, 0.1, 0.5, 5, 12, 6.0),
            ("embed", 1, 1, 300, 6.0, 0.1, 0.6, 4, 10, 6.0),
            ("rerank", 1, 2, 100, 5.0, 0.3, 2.0, 4, 10, 3.0)]
    n = len(rows)
    rate = np.array([[r[9]] * SECONDS for r in rows])
    rate[0, 240:300] *= 5.0  # a burst: checkout scales up
    rate[2, 200:] *= 2.5  # embed's demand steps up and stays: lab's quota max caps it

    def col(k: int, dtype: type = np.int64) -> np.ndarray:
        return np.array([r[k] for r in rows], dtype=dtype)
    return ClusterInputs(
        names=tuple(str(r[0]) for r in rows), namespaces=col(1), class_index=col(2), priority=col(3),
        arrivals=rng.poisson(rate).astype(np.int32), capacity_rps=col(4, float), service_s=col(5, float),
        slo_s=col(6, float), min_replicas=np.ones(n, dtype=np.int64), max_replicas=col(8),
        zone_mask=np.ones((n, 3), dtype=bool), gpus=np.ones(n, dtype=np.int64), may_borrow=np.ones(n, dtype=bool),
        cold_start_s=np.full(n, 10, dtype=np.int64), batch_names=(), batch_namespaces=np.zeros(0, dtype=np.int64),
        batch_priority=np.zeros(0, dtype=np.int64), batch_class_index=np.zeros(0, dtype=np.int64),
        batch_may_borrow=np.zeros(0, dtype=bool), batch_demand=np.zeros((0, SECONDS)), zones=ZONES,
        zone_gpus=np.full(3, 16, dtype=np.int64), namespace_names=("shop", "lab"),
        quota_min=np.array([6, 3], dtype=np.int64), quota_max=np.array([14, 8], dtype=np.int64),
        class_names=tuple(c.name for c in CLASSES), initial=col(7))


def target(inp: ClusterInputs, i: int) -> str:
    return f"{inp.namespace_names[int(inp.namespaces[i])]}/{inp.names[i]}"


def simulated(inp: ClusterInputs) -> tuple[list[Row], np.ndarray]:
    """(a) ``ebb simulate --cluster``'s machinery: the Ebb cluster policy with the exact L1."""
    pol = build_cluster_policy("ebb:l1=exact", inp, CLASSES, budget=BUDGET, write_limit=WRITES)
    assert isinstance(pol, EbbCluster) and pol.l1 == "exact"
    run = simulate(inp, pol, write_limit_per_100ms=WRITES)
    return [(r.t_s, target(inp, r.service), r.action, r.from_replicas, r.to_replicas) for r in pol.log], run.gpu_s


def live(inp: ClusterInputs) -> tuple[list[Row], np.ndarray]:
    """(b) the live fleet controller, one ``Controller`` per service, over the same engine."""
    bridge = ClusterBridge(inp, write_limit_per_100ms=WRITES)
    ledger = MemoryLedger()
    fake_t = [0.0]

    def sleep(s: float) -> None:
        fake_t[0] += s
    batcher = WriteBatcher(WRITES, 0.1, clock=lambda: fake_t[0], sleep=sleep)
    members = []
    for i, name in enumerate(inp.names):
        cls = CLASSES[int(inp.class_index[i])]
        w = FleetWorkload(namespace=inp.namespace_names[int(inp.namespaces[i])], deployment=name, workload_class=cls,
                          slo_ttft_ms=float(inp.slo_s[i] - inp.service_s[i]) * 1000.0,
                          slo_e2e_ms=float(inp.slo_s[i]) * 1000.0,
                          min_replicas=max(int(inp.min_replicas[i]), cls.min_replicas),
                          max_replicas=int(inp.max_replicas[i]), priority=int(inp.priority[i]))
        policy = service_policy(PROFILES["balanced"], inp, i, cls, "ebb:l1=exact")  # the member's own EbbPolicy
        ctl = Controller(policy, bridge.source(i), batcher.wrap(bridge.actuator(i, w.target), w.target), ledger,
                         ControllerSettings(run_id=f"fleet-{w.namespace}-{name}", target=w.target, mode="act",
                                            min_replicas=policy.min_replicas, max_replicas=policy.max_replicas,
                                            react_interval_s=0.0),
                         clock=bridge.clock)
        members.append(FleetMember(ctl, w, w.ttft_slo_ms(0.0)))
    quotas = [NamespaceQuota(ns, int(inp.quota_min[k]) * 1000, int(inp.quota_max[k]) * 1000)
              for k, ns in enumerate(inp.namespace_names)]
    fleet = FleetController(members, ledger, FleetSettings(run_id="fleet", disruption_budget=BUDGET), quotas=quotas,
                            batcher=batcher, clock=bridge.clock)
    rows: list[Row] = []

    def cycle() -> None:
        out = fleet.cycle()
        rows.extend((o.t_s, m.target, o.action, o.spec_replicas, o.to_replicas)
                    for m, o in zip(fleet.members, out.outcomes) if o.action != "hold")
    for t in range(inp.seconds):
        bridge.second(t, cycle)
    return rows, bridge.engine.run.gpu_s


@pytest.fixture(scope="module")
def both() -> tuple[list[Row], np.ndarray, list[Row], np.ndarray]:
    inp = scenario()
    return (*simulated(inp), *live(inp))


def test_the_scenario_exercises_scale_downs_scale_ups_l3_vetoes_and_the_quota_cap(both: tuple) -> None:
    sim = both[0]
    kinds = Counter(a for _, _, a, _, _ in sim)
    assert kinds["scale_down"] >= 4 and kinds["scale_up"] >= 3 and kinds["veto"] >= 4
    assert {w for _, w, a, _, _ in sim if a == "scale_down"} >= {"shop/checkout", "shop/search", "lab/rerank"}


def test_the_simulator_and_the_live_controller_make_the_same_decisions(both: tuple) -> None:
    sim, _, live_rows, _ = both
    assert "error" not in {a for _, _, a, _, _ in live_rows}
    assert live_rows == sim  # per workload per second: action, from, to (in member order each second)


def test_so_the_cluster_ends_in_the_same_state_and_costs_the_same(both: tuple) -> None:
    _, sim_gpu_s, _, live_gpu_s = both
    assert np.array_equal(sim_gpu_s, live_gpu_s)
