"""The fleet step (ebb.decide.fleet_step) — the cluster rules the live fleet controller and the cluster
simulator share — equals the scalar path on generated fleets: rank_candidates, plan_cluster and
plan_scale_down with a QuotaContext, the quota cap of scale-ups, the words the ledger records."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from ebb.config.workloads import WorkloadClass
from ebb.decide.coordinate import QuotaContext, ReplicaView, plan_cluster, plan_scale_down
from ebb.decide.fleet_rank import FleetClasses
from ebb.decide.fleet_step import (
    FleetProposals,
    FleetRules,
    FleetStep,
    decision_proposals,
    fleet_step,
    proposal_row,
)
from ebb.decide.quota import QoSClass, Quota, QuotaPod
from ebb.decide.semantics import WorkloadSignals, rank_candidates
from ebb.model.decision import Decision

GPU = "nvidia.com/gpu"


@dataclass(frozen=True)
class Fleet:
    ready: list[list[int]]
    starting: list[list[int]]
    target: list[int]
    weight: list[float]
    latency: list[float]
    slo: list[float]
    margin: list[float]
    min_r: list[int]
    stale: list[float]
    burst: list[bool]
    borrowed: list[int]
    zone_veto: list[str]
    cap: list[int]
    budget: int

    @property
    def spec(self) -> list[int]:
        return [sum(r) + sum(s) for r, s in zip(self.ready, self.starting)]


@st.composite
def fleets(draw: st.DrawFn) -> Fleet:
    n = draw(st.integers(1, 6))
    z = draw(st.integers(1, 3))
    ready = [[draw(st.integers(0, 4)) for _ in range(z)] for _ in range(n)]
    starting = [[draw(st.integers(0, 2)) for _ in range(z)] for _ in range(n)]
    spec = [sum(r) + sum(s) for r, s in zip(ready, starting)]
    return Fleet(ready, starting, target=[draw(st.integers(0, s + 4)) for s in spec],
                 weight=[draw(st.sampled_from([0.1, 0.25, 0.65])) for _ in range(n)],
                 latency=[draw(st.one_of(st.just(math.nan), st.sampled_from([0.0, 100.0, 700.0]),
                                         st.floats(0.0, 2000.0))) for _ in range(n)],
                 slo=[draw(st.sampled_from([300.0, 800.0])) for _ in range(n)],
                 margin=[draw(st.sampled_from([0.7, 0.8])) for _ in range(n)],
                 min_r=[draw(st.integers(0, 2)) for _ in range(n)],
                 stale=[draw(st.one_of(st.just(math.nan), st.floats(0.0, 8.0))) for _ in range(n)],
                 burst=[draw(st.integers(0, 9)) == 0 for _ in range(n)],
                 borrowed=[draw(st.integers(0, s)) for s in spec],
                 zone_veto=[draw(st.sampled_from(["", "", "", "zones: replicas in c, outside the listed a"]))
                            for _ in range(n)],
                 cap=[draw(st.one_of(st.just(-1), st.integers(0, 12))) * 1000 for _ in range(n)],
                 budget=draw(st.integers(0, 6)))


def step_of(f: Fleet) -> FleetStep:
    n = len(f.spec)
    classes = FleetClasses.guarding(base_weight=0.5, alpha=1.0, veto_margin=f.margin, slo_ms=f.slo,
                                    min_replicas=f.min_r)
    props = FleetProposals(spec=np.array(f.spec), target=np.array(f.target), weight=np.array(f.weight),
                           latency_ms=np.array(f.latency), staleness_s=np.array(f.stale), burst=np.array(f.burst),
                           ready=np.array(f.ready), starting=np.array(f.starting), borrowed=np.array(f.borrowed),
                           zone_veto=f.zone_veto)
    rules = FleetRules(classes=classes, namespace=np.arange(n), namespace_names=tuple(f"ns{i}" for i in range(n)),
                       gpu_milli=np.full(n, 1000), quota_max_milli=np.array(f.cap), cluster_budget=f.budget,
                       max_staleness_s=5.0, names=tuple(f"ns{i}/w{i}" for i in range(n)))
    return fleet_step(props, rules)


def scalar(f: Fleet) -> tuple[dict[str, int], list[str], dict[str, str]]:
    """The scalar path: rank_candidates over the proposers (zone vetoes after L2's), plan_cluster,
    then plan_scale_down's count for each grant, on materialised replicas and pods."""
    n = len(f.spec)
    names = [f"ns{i}/w{i}" for i in range(n)]
    replicas: list[ReplicaView] = []
    pods: dict[str, QuotaPod] = {}
    quotas: dict[str, Quota] = {}
    for w, (rdy, sta) in enumerate(zip(f.ready, f.starting)):
        for zi, (r, s) in enumerate(zip(rdy, sta)):
            for k in range(r + s):
                rid = f"{names[w]}/z{zi}-{'s' if k < s else 'r'}{k:02d}"
                replicas.append(ReplicaView(rid, names[w], f"ns{w}", f"z{zi}", 0.5, ready=k >= s))
                pods[rid] = QuotaPod(rid.split("/", 1)[1], f"ns{w}", QoSClass.GUARANTEED, requests={GPU: 1000})
        quotas[f"ns{w}"] = Quota(f"ns{w}", min={GPU: 1000 * (f.spec[w] - f.borrowed[w])})
    quota = QuotaContext(quotas, pods)
    downs = [i for i in range(n) if f.target[i] < f.spec[i]]
    classes = [WorkloadClass(name=names[i], base_weight=0.5, alpha=1.0, p99_latency_ms=f.slo[i],
                             veto_margin=f.margin[i], min_replicas=f.min_r[i]) for i in downs]
    sigs = [WorkloadSignals(names[i], names[i], f.spec[i], sum(f.ready[i]), f.latency[i], math.nan, math.nan,
                            f.burst[i], math.nan, f.stale[i]) for i in downs]
    cands = rank_candidates(classes, sigs, {names[i]: f.weight[i] for i in downs}, max_staleness_s=5.0)
    cands = [replace(c, vetoes=(f.zone_veto[names.index(c.workload)],),
                     reason=f"vetoed: {f.zone_veto[names.index(c.workload)]}")
             if f.zone_veto[names.index(c.workload)] and not c.vetoed else c for c in cands]
    plan = plan_cluster(cands, {names[i]: f.spec[i] - f.target[i] for i in downs}, f.budget, quota=quota,
                        replicas=replicas)
    counts = {g.workload: plan_scale_down(replicas, g.workload, g.granted, budget=g.granted, quota=quota).granted
              for g in plan.grants}
    return counts, [c.workload for c in cands], {g.workload: g.reason for g in plan.grants}


@settings(max_examples=300, deadline=None)
@given(f=fleets())
def test_the_step_grants_ranks_and_words_as_the_scalar_path(f: Fleet) -> None:
    got = step_of(f)
    counts, order, reasons = scalar(f)
    names = [f"ns{i}/w{i}" for i in range(len(f.spec))]
    assert [names[i] for i in got.rank.order if got.request[i] > 0] == order
    for i, w in enumerate(names):
        if f.target[i] < f.spec[i]:
            assert got.granted[i] == counts[w]
            assert got.target[i] == f.spec[i] - counts[w]
            assert got.words(i) == reasons[w]
        else:
            assert got.granted[i] == 0
    assert got.granted.sum() <= f.budget
    # scale-ups: only their namespace's max narrows them (one namespace per workload here)
    for i in range(len(f.spec)):
        if f.target[i] > f.spec[i]:
            room = f.target[i] - f.spec[i] if f.cap[i] < 0 else max(0, (f.cap[i] - 1000 * f.spec[i]) // 1000)
            assert got.target[i] == f.spec[i] + min(room, f.target[i] - f.spec[i])
        elif f.target[i] == f.spec[i]:
            assert got.target[i] == f.spec[i]


@settings(max_examples=200, deadline=None)
@given(f=fleets())
def test_decided_narrows_each_proposal_to_the_steps_target_with_its_words(f: Fleet) -> None:
    got = step_of(f)
    for i, (s, t) in enumerate(zip(f.spec, f.target)):
        d = Decision.change(0.0, s, t, policy="p", reasons=("l1",))
        nd = got.decided(i, d)
        assert nd.from_replicas == s and nd.to_replicas == got.target[i]
        if t < s and got.granted[i] == 0:
            assert nd.action == "veto" and nd.vetoes == (f"L3: {got.words(i)}",)
        elif t < s:
            assert nd.reasons[-1] == f"L3: {got.words(i)}" and nd.plan["l3_granted"] == got.granted[i]
        elif t > s and got.quota.capped[i]:
            assert got.words(i).startswith(f"quota: namespace ns{i} at max_gpus")
        else:
            assert nd is d


def test_a_policy_decision_becomes_a_proposal_row() -> None:
    down = Decision(3.0, "scale_down", 4, 3, signals={"ttft_p99_ms": math.nan}, weights={"workload": 0.3})
    assert proposal_row(down, 0.65) == (0.3, 0.0)  # proposed without a P99: judged idle
    hold = Decision(3.0, "hold", 4, 4)
    w, lat = proposal_row(hold, 0.65)
    assert w == 0.65 and math.isnan(lat)
    props = decision_proposals([down, hold], base_weight=[0.1, 0.65], staleness_s=0.5, ready=[[1], [4]],
                               starting=[[2], [0]])
    assert props.spec.tolist() == [4, 4] and props.target.tolist() == [3, 4] and not props.burst.any()
