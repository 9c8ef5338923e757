"""L3 honours elastic quota (ebb.decide.coordinate with quota=): borrowed capacity goes first."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ebb.decide.coordinate import (
    QuotaContext,
    ReplicaView,
    ScaleDownPlan,
    plan_cluster,
    plan_scale_down,
    zone_skew,
)
from ebb.decide.quota import QoSClass, Quota, QuotaPod, borrowed
from ebb.decide.semantics import Candidate

G, B, BE = QoSClass.GUARANTEED, QoSClass.BURSTABLE, QoSClass.BEST_EFFORT
GPU = "nvidia.com/gpu"


def rep(rid: str, zone: str, load: float, *, workload: str = "api", namespace: str = "prod",
        ready: bool = True) -> ReplicaView:
    return ReplicaView(rid, workload, namespace, zone, load, ready)


def qpod(rid: str, *, ns: str = "prod", qos: QoSClass = G, priority: int = 0,
         created_s: float = 0.0, gpus: int = 1) -> QuotaPod:
    return QuotaPod(rid, ns, qos, priority, created_s, {GPU: 1000 * gpus} if gpus else {})


def cand(workload: str, weight: float, vetoes: tuple[str, ...] = ()) -> Candidate:
    return Candidate(workload, "c", weight, 0.5, vetoes, "vetoed: x" if vetoes else "eligible")


# ---- the multi-namespace scenario -------------------------------------------------------------

# research: min 2 GPUs, max 6. Two priority-100 Guaranteed pods hold the guaranteed share; an old
# Burstable pod and a priority-50 Guaranteed pod are pushed above min (protection order is
# priority first, so the older Burstable pod does not keep its place); a BestEffort pod requests
# nothing and so never borrows. prod: 3 GPUs within its min of 4, nobody borrows.
RESEARCH = Quota("research", min={GPU: 2000}, max={GPU: 6000})
PROD = Quota("prod", min={GPU: 4000}, max={GPU: 4000})
SCENARIO_PODS = {
    "r-g1": qpod("r-g1", ns="research", priority=100, created_s=1),
    "r-g2": qpod("r-g2", ns="research", priority=100, created_s=2),
    "r-b1": qpod("r-b1", ns="research", qos=B, priority=0, created_s=0),
    "r-g3": qpod("r-g3", ns="research", priority=50, created_s=5),
    "r-be": qpod("r-be", ns="research", qos=BE, priority=0, created_s=9, gpus=0),
    "p-1": qpod("p-1", priority=100, created_s=1),
    "p-2": qpod("p-2", priority=100, created_s=2),
    "p-3": qpod("p-3", priority=100, created_s=3),
}
SCENARIO_REPLICAS = [
    rep("r-g1", "a", 0.10, workload="llm-research", namespace="research"),
    rep("r-g2", "b", 0.20, workload="llm-research", namespace="research"),
    rep("r-b1", "a", 0.70, workload="llm-research", namespace="research"),
    rep("r-g3", "b", 0.80, workload="llm-research", namespace="research"),
    rep("r-be", "a", 0.05, workload="llm-research", namespace="research"),
    rep("p-1", "a", 0.01, workload="llm-prod"),
    rep("p-2", "b", 0.02, workload="llm-prod"),
    rep("p-3", "a", 0.03, workload="llm-prod"),
]
SCENARIO = QuotaContext({"research": RESEARCH, "prod": PROD}, SCENARIO_PODS)


def test_the_scenario_has_exactly_the_intended_borrowers() -> None:
    assert [p.name for p in borrowed(RESEARCH, SCENARIO_PODS.values())] == ["r-b1", "r-g3"]
    assert borrowed(PROD, SCENARIO_PODS.values()) == []


def test_a_cluster_plan_reclaims_borrowed_gpus_first_and_leaves_the_guaranteed_share_alone() -> None:
    # L2 ranks the idle prod workload first: without quota the whole budget would shrink it.
    cands = [cand("llm-prod", 0.1), cand("llm-research", 0.4)]
    requests = {"llm-prod": 2, "llm-research": 2}
    without = plan_cluster(cands, requests, 2)
    assert (without.granted("llm-prod"), without.granted("llm-research")) == (2, 0)

    plan = plan_cluster(cands, requests, 2, quota=SCENARIO, replicas=SCENARIO_REPLICAS)
    assert (plan.granted("llm-prod"), plan.granted("llm-research")) == (0, 2)
    assert plan.total_granted == without.total_granted
    research = next(g for g in plan.grants if g.workload == "llm-research")
    assert research.reclaim == 2 and "2 reclaim borrowed quota first" in research.reason

    victims: list[str] = []
    for g in plan.grants:
        sd = plan_scale_down(SCENARIO_REPLICAS, g.workload, g.requested, budget=g.granted,
                             quota=SCENARIO)
        victims += sd.victim_ids
        assert sd.reclaimed == tuple(v for v in sd.victim_ids if SCENARIO.is_borrower(v))
    # lowest priority first among the borrowers: the Burstable pod, then the priority-50 one
    assert victims == ["r-b1", "r-g3"]
    left = [r for r in SCENARIO_REPLICAS if r.replica_id not in victims]
    research_gpus = sum(SCENARIO_PODS[r.replica_id].requests.get(GPU, 0) for r in left
                        if r.namespace == "research")
    assert research_gpus == RESEARCH.min_of(GPU)


def test_without_quota_the_same_workload_would_lose_its_guaranteed_share() -> None:
    plan = plan_scale_down(SCENARIO_REPLICAS, "llm-research", 2)
    assert plan.victim_ids == ("r-be", "r-g1") and plan.reclaimed == ()


def test_after_the_borrowers_the_lowest_priority_newest_pod_goes_before_load_is_considered() -> None:
    plan = plan_scale_down(SCENARIO_REPLICAS, "llm-research", 4, quota=SCENARIO)
    # r-be (priority 0) before r-g1/r-g2 (priority 100); then the newer of the two, r-g2 —
    # although r-g1 is less loaded
    assert plan.victim_ids == ("r-b1", "r-g3", "r-be", "r-g2")
    assert plan.reclaimed == ("r-b1", "r-g3")


# ---- hand-made cases --------------------------------------------------------------------------

def test_zone_skew_still_bounds_the_choice_of_a_borrower() -> None:
    # the only borrower sits in the smaller zone: removing it would make skew 2 > 1
    reps = [rep("a1", "a", 0.5), rep("a2", "a", 0.6), rep("b1", "b", 0.9)]
    pods = {"a1": qpod("a1", priority=9), "a2": qpod("a2", priority=9), "b1": qpod("b1")}
    ctx = QuotaContext({"prod": Quota("prod", min={GPU: 2000}, max={GPU: 3000})}, pods)
    assert ctx.is_borrower("b1") and not ctx.is_borrower("a1")
    plan = plan_scale_down(reps, "api", 1, max_skew=1, quota=ctx)
    assert plan.victim_ids == ("a1",) and plan.reclaimed == ()
    assert plan.limits == ("skew: passed over b1 to keep zone skew <= 1",)


def test_the_pdb_still_caps_the_count_when_borrowers_are_waiting() -> None:
    reps = [rep(f"r{i}", "a", 0.1) for i in range(4)]
    pods = {f"r{i}": qpod(f"r{i}", created_s=i) for i in range(4)}
    ctx = QuotaContext({"prod": Quota("prod", min={GPU: 1000}, max={GPU: 4000})}, pods)
    plan = plan_scale_down(reps, "api", 3, pdb_max_unavailable=1, quota=ctx)
    assert plan.granted == 1 and plan.victim_ids == ("r3",) and plan.reclaimed == ("r3",)


def test_pods_of_other_workloads_in_the_namespace_count_towards_borrowing() -> None:
    # the web pod has priority and holds the whole min: both api replicas borrow
    reps = [rep("a1", "a", 0.9), rep("a2", "a", 0.1)]
    pods = {"a1": qpod("a1", created_s=1), "a2": qpod("a2", created_s=2),
            "w1": qpod("w1", priority=5)}
    ctx = QuotaContext({"prod": Quota("prod", min={GPU: 1000}, max={GPU: 4000})}, pods)
    assert ctx.is_borrower("a1") and ctx.is_borrower("a2") and not ctx.is_borrower("w1")
    assert plan_scale_down(reps, "api", 1, quota=ctx).victim_ids == ("a2",)


def test_a_replica_without_a_pod_record_is_refused_naming_it() -> None:
    ctx = QuotaContext({}, {"a1": qpod("a1")})
    with pytest.raises(ValueError, match="no QuotaPod for replica 'a2'"):
        plan_scale_down([rep("a1", "a", 0.1), rep("a2", "a", 0.1)], "api", 1, quota=ctx)


def test_a_pod_record_in_another_namespace_is_refused() -> None:
    ctx = QuotaContext({}, {"a1": qpod("a1", ns="dev")})
    with pytest.raises(ValueError, match="namespace 'prod' but its QuotaPod is in 'dev'"):
        plan_scale_down([rep("a1", "a", 0.1)], "api", 1, quota=ctx)


def test_a_quota_filed_under_the_wrong_namespace_is_refused() -> None:
    with pytest.raises(ValueError, match="'other'"):
        QuotaContext({"other": Quota("prod")}, {})


def test_a_cluster_plan_with_quota_needs_the_replicas() -> None:
    with pytest.raises(ValueError, match="needs replicas="):
        plan_cluster([cand("api", 0.1)], {"api": 1}, 1, quota=QuotaContext({}, {}))


def test_vetoed_workloads_get_nothing_even_when_they_borrow() -> None:
    plan = plan_cluster([cand("llm-research", 0.4, ("burst active (L1)",))],
                        {"llm-research": 2}, 5, quota=SCENARIO, replicas=SCENARIO_REPLICAS)
    assert plan.granted("llm-research") == 0 and plan.grants[0].reclaim == 0


# ---- properties -------------------------------------------------------------------------------

@st.composite
def quota_worlds(draw: st.DrawFn) -> tuple[list[ReplicaView], QuotaContext]:
    rows = draw(st.lists(
        st.tuples(st.sampled_from("abc"), st.sampled_from(["api", "web"]),
                  st.sampled_from(["prod", "dev"]), st.floats(0.0, 1.0), st.booleans(),
                  st.sampled_from(list(QoSClass)), st.integers(-2, 2), st.integers(0, 6),
                  st.integers(0, 2)),
        max_size=20))
    reps: list[ReplicaView] = []
    pods: dict[str, QuotaPod] = {}
    for i, (zone, wl, ns, load, ready, qos, prio, created, gpus) in enumerate(rows):
        reps.append(ReplicaView(f"r{i}", wl, ns, zone, load, ready))
        pods[f"r{i}"] = qpod(f"r{i}", ns=ns, qos=qos, priority=prio, created_s=created, gpus=gpus)
    lo = draw(st.integers(0, 8)) * 1000
    quotas = {"prod": Quota("prod", min={GPU: lo}, max={GPU: lo + draw(st.integers(0, 8)) * 1000})}
    return reps, QuotaContext(quotas, pods)


pdbs = st.one_of(st.none(), st.tuples(st.just("max"), st.integers(0, 8)),
                 st.tuples(st.just("min"), st.integers(0, 12)))


def _plan(reps: list[ReplicaView], remove: int, max_skew: int, pdb: tuple[str, int] | None,
          budget: int | None, quota: QuotaContext | None) -> ScaleDownPlan:
    return plan_scale_down(reps, "api", remove, namespace="prod", max_skew=max_skew,
                           pdb_max_unavailable=pdb[1] if pdb and pdb[0] == "max" else None,
                           pdb_min_available=pdb[1] if pdb and pdb[0] == "min" else None,
                           budget=budget, quota=quota)


@settings(max_examples=300)
@given(world=quota_worlds(), remove=st.integers(0, 25), max_skew=st.integers(1, 3), pdb=pdbs,
       budget=st.one_of(st.none(), st.integers(0, 25)))
def test_no_non_borrower_goes_while_a_borrower_could_go_within_skew(
        world: tuple[list[ReplicaView], QuotaContext], remove: int, max_skew: int,
        pdb: tuple[str, int] | None, budget: int | None) -> None:
    reps, ctx = world
    plan = _plan(reps, remove, max_skew, pdb, budget, ctx)
    eligible = [r for r in reps if r.workload == "api" and r.namespace == "prod"]
    counts = dict(Counter(r.zone for r in eligible))
    bound = max(max_skew, zone_skew(counts))
    left = list(eligible)
    for v in plan.victims:
        if not ctx.is_borrower(v.replica_id):
            for b in (r for r in left if ctx.is_borrower(r.replica_id)):
                counts[b.zone] -= 1
                assert zone_skew(counts) > bound, f"{v.replica_id} went before borrower {b.replica_id}"
                counts[b.zone] += 1
        counts[v.zone] -= 1
        assert zone_skew(counts) <= bound
        left.remove(v)
    assert plan.reclaimed == tuple(v.replica_id for v in plan.victims
                                   if ctx.is_borrower(v.replica_id))


@settings(max_examples=300)
@given(world=quota_worlds(), remove=st.integers(0, 25), extra=st.integers(0, 6),
       max_skew=st.integers(1, 3), pdb=pdbs, budget=st.one_of(st.none(), st.integers(0, 25)))
def test_quota_only_reorders_so_every_count_is_the_no_quota_count(
        world: tuple[list[ReplicaView], QuotaContext], remove: int, extra: int, max_skew: int,
        pdb: tuple[str, int] | None, budget: int | None) -> None:
    reps, ctx = world
    with_quota = _plan(reps, remove, max_skew, pdb, budget, ctx)
    without = _plan(reps, remove, max_skew, pdb, budget, None)
    assert with_quota.granted == without.granted
    assert with_quota.allowed_disruptions == without.allowed_disruptions
    # monotone exactly as without quota
    assert _plan(reps, remove + extra, max_skew, pdb, budget, ctx).granted >= with_quota.granted
    more = None if budget is None else budget + extra
    assert _plan(reps, remove, max_skew, pdb, more, ctx).granted >= with_quota.granted


@settings(max_examples=200)
@given(world=quota_worlds(), reqs=st.tuples(st.integers(0, 8), st.integers(0, 8)),
       budget=st.integers(0, 12), vetoed=st.tuples(st.booleans(), st.booleans()),
       order=st.booleans())
def test_the_cluster_budget_goes_to_borrowers_first_and_its_total_never_changes(
        world: tuple[list[ReplicaView], QuotaContext], reqs: tuple[int, int], budget: int,
        vetoed: tuple[bool, bool], order: bool) -> None:
    reps, ctx = world
    names = ["api", "web"] if order else ["web", "api"]
    cands = [cand(w, i, ("v",) if vetoed[i] else ()) for i, w in enumerate(names)]
    requests = dict(zip(names, reqs, strict=True))
    with_quota = plan_cluster(cands, requests, budget, quota=ctx, replicas=reps)
    without = plan_cluster(cands, requests, budget)
    assert with_quota.total_granted == without.total_granted <= budget
    holders = Counter(r.workload for r in reps if ctx.is_borrower(r.replica_id))
    owed = {w: 0 if vetoed[i] else min(requests[w], holders[w]) for i, w in enumerate(names)}
    for g in with_quota.grants:
        assert g.reclaim <= g.granted <= g.requested and g.reclaim <= owed[g.workload]
    if sum(owed.values()) <= budget:
        assert all(with_quota.granted(w) >= n for w, n in owed.items())
