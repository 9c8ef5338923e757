"""L3 coordinated scale-down (ebb.decide.coordinate): victims, zone skew, PDB, budgets."""

from __future__ import annotations

import math
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ebb.decide.coordinate import (
    ReplicaView,
    ScaleDownPlan,
    plan_cluster,
    plan_scale_down,
    zone_skew,
)
from ebb.decide.semantics import Candidate


def rep(rid: str, zone: str, load: float, *, ready: bool = True, cost: int = 0,
        workload: str = "api", namespace: str = "prod") -> ReplicaView:
    return ReplicaView(rid, workload, namespace, zone, load, ready, cost)


def skew_of(replicas: list[ReplicaView], zones: set[str]) -> int:
    c = Counter(r.zone for r in replicas)
    return zone_skew({z: c.get(z, 0) for z in zones})


def test_the_least_loaded_replicas_go_first() -> None:
    reps = [rep("a1", "a", 0.9), rep("a2", "a", 0.1), rep("b1", "b", 0.5), rep("b2", "b", 0.2)]
    plan = plan_scale_down(reps, "api", 2)
    assert plan.victim_ids == ("a2", "b2") and plan.granted == 2 and plan.limits == ()


def test_not_ready_replicas_go_before_idle_ready_ones() -> None:
    reps = [rep("a1", "a", 0.0), rep("a2", "a", 0.95, ready=False), rep("b1", "b", 0.1)]
    assert plan_scale_down(reps, "api", 1).victim_ids == ("a2",)


def test_equal_loads_are_broken_by_deletion_cost_then_id() -> None:
    reps = [rep("a1", "a", 0.3, cost=5), rep("a2", "a", 0.3, cost=-1), rep("a3", "a", 0.3)]
    assert plan_scale_down(reps, "api", 3).victim_ids == ("a2", "a3", "a1")


def test_unknown_load_is_removed_last() -> None:
    reps = [rep("a1", "a", math.nan), rep("a2", "a", 0.99)]
    assert plan_scale_down(reps, "api", 1).victim_ids == ("a2",)


def test_a_victim_that_would_unbalance_zones_is_passed_over() -> None:
    # zone a: 2 replicas, zone b: 2; the two idlest are both in b → taking both gives skew 2
    reps = [rep("a1", "a", 0.8), rep("a2", "a", 0.7), rep("b1", "b", 0.1), rep("b2", "b", 0.2)]
    plan = plan_scale_down(reps, "api", 2, max_skew=1)
    assert plan.victim_ids == ("b1", "a2") and plan.skew_after == 0
    assert plan.limits == ("skew: passed over b2 to keep zone skew <= 1",)


def test_skew_is_counted_only_within_the_workloads_namespace() -> None:
    # zone c holds replicas of the same workload name in another namespace: they do not count,
    # exactly as upstream topologySpreadConstraints only count pods of the pod's own namespace
    reps = [rep("a1", "a", 0.1), rep("b1", "b", 0.9), rep("b2", "b", 0.8),
            rep("c1", "c", 0.0, namespace="staging"), rep("c2", "c", 0.0, namespace="staging")]
    plan = plan_scale_down(reps, "api", 1, namespace="prod")
    assert plan.skew_before == 1 and plan.victim_ids == ("b2",) and plan.skew_after == 0


def test_replicas_in_two_namespaces_need_an_explicit_namespace() -> None:
    reps = [rep("a1", "a", 0.1), rep("a2", "a", 0.1, namespace="staging")]
    with pytest.raises(ValueError, match="pass namespace="):
        plan_scale_down(reps, "api", 1)


def test_an_emptied_zone_still_counts_at_zero() -> None:
    reps = [rep("a1", "a", 0.0), rep("b1", "b", 0.5), rep("b2", "b", 0.6), rep("b3", "b", 0.7)]
    plan = plan_scale_down(reps, "api", 1, max_skew=1)
    # removing a1 would leave a=0, b=3 (skew 3 > 2 before): b1 goes instead
    assert plan.skew_before == 2 and plan.victim_ids == ("b1",) and plan.skew_after == 1


def test_max_unavailable_pdb_caps_removals_and_says_so() -> None:
    reps = [rep(f"a{i}", "a", i / 10) for i in range(5)]
    plan = plan_scale_down(reps, "api", 4, pdb_max_unavailable=2, already_unavailable=1)
    assert plan.granted == 1 and plan.allowed_disruptions == 1
    assert plan.limits == ("pdb: 1 disruptions allowed (maxUnavailable 2 − 1 already unavailable)",)


def test_min_available_pdb_counts_ready_replicas() -> None:
    reps = [rep("a1", "a", 0.1), rep("a2", "a", 0.2), rep("a3", "a", 0.3, ready=False)]
    plan = plan_scale_down(reps, "api", 3, pdb_min_available=1)
    assert plan.allowed_disruptions == 1 and plan.victim_ids == ("a3",)


def test_budget_and_eligible_count_are_recorded_as_limits() -> None:
    reps = [rep("a1", "a", 0.1), rep("a2", "a", 0.2)]
    plan = plan_scale_down(reps, "api", 5, budget=1)
    assert plan.requested == 5 and plan.granted == 1
    assert plan.limits == ("eligible: only 2 replicas of 'api' in namespace 'prod'",
                           "budget: at most 1 victims this cycle")


def test_a_workload_without_replicas_gets_an_empty_plan() -> None:
    plan = plan_scale_down([rep("x", "a", 0.1, workload="other")], "api", 2)
    assert plan.granted == 0 and plan.namespace is None and plan.victims == ()


@pytest.mark.parametrize("kwargs", [{"remove": -1}, {"max_skew": 0}, {"budget": -1},
                                    {"pdb_max_unavailable": 1, "pdb_min_available": 1},
                                    {"pdb_min_available": -1}],
                         ids=["negative-remove", "zero-skew", "negative-budget", "both-pdb-fields",
                              "negative-pdb"])
def test_bad_arguments_raise_value_error(kwargs: dict[str, int]) -> None:
    args: dict[str, int] = {"remove": 1, **kwargs}
    remove = args.pop("remove")
    with pytest.raises(ValueError):
        plan_scale_down([rep("a1", "a", 0.1)], "api", remove, **args)  # type: ignore[arg-type]


def test_duplicate_replica_ids_are_refused() -> None:
    with pytest.raises(ValueError, match="duplicate replica ids"):
        plan_scale_down([rep("a1", "a", 0.1), rep("a1", "b", 0.2)], "api", 1)


# ---- properties -------------------------------------------------------------------------------

replica_lists = st.lists(
    st.tuples(st.sampled_from("abcd"), st.sampled_from(["prod", "dev"]),
              st.sampled_from(["api", "web"]), st.floats(0.0, 1.0), st.booleans(),
              st.integers(-2, 2)),
    max_size=24,
).map(lambda rows: [ReplicaView(f"r{i}", w, ns, z, load, ready, cost)
                    for i, (z, ns, w, load, ready, cost) in enumerate(rows)])
pdbs = st.one_of(st.none(), st.tuples(st.just("max"), st.integers(0, 8)),
                 st.tuples(st.just("min"), st.integers(0, 12)))


def _plan(reps: list[ReplicaView], remove: int, max_skew: int, pdb: tuple[str, int] | None,
          unavailable: int, budget: int | None) -> ScaleDownPlan:
    return plan_scale_down(reps, "api", remove, namespace="prod", max_skew=max_skew,
                           pdb_max_unavailable=pdb[1] if pdb and pdb[0] == "max" else None,
                           pdb_min_available=pdb[1] if pdb and pdb[0] == "min" else None,
                           already_unavailable=unavailable, budget=budget)


@given(reps=replica_lists, remove=st.integers(0, 30), max_skew=st.integers(1, 3), pdb=pdbs,
       unavailable=st.integers(0, 3), budget=st.one_of(st.none(), st.integers(0, 30)))
def test_any_plan_keeps_skew_and_pdb_and_picks_only_eligible_replicas(
        reps: list[ReplicaView], remove: int, max_skew: int, pdb: tuple[str, int] | None,
        unavailable: int, budget: int | None) -> None:
    plan = _plan(reps, remove, max_skew, pdb, unavailable, budget)
    eligible = [r for r in reps if r.workload == "api" and r.namespace == "prod"]
    zones = {r.zone for r in eligible}
    survivors = [r for r in eligible if r not in plan.victims]
    before, after = skew_of(eligible, zones), skew_of(survivors, zones)
    assert set(plan.victims) <= set(eligible) and len(set(plan.victim_ids)) == plan.granted
    assert (plan.skew_before, plan.skew_after) == (before, after)
    assert after <= max(max_skew, before)
    if before > max_skew:
        assert after <= before
    assert plan.granted <= remove and (budget is None or plan.granted <= budget)
    if pdb is not None and pdb[0] == "max":
        assert plan.granted + unavailable <= max(pdb[1], unavailable)
    if pdb is not None and pdb[0] == "min":
        ready = sum(r.ready for r in eligible)
        assert ready - plan.granted >= min(pdb[1], ready)
    # nothing but the stated limits holds the count back
    caps = [remove, len(eligible), plan.allowed_disruptions, budget]
    assert plan.granted == min(c for c in caps if c is not None)


@given(reps=replica_lists, remove=st.integers(0, 30), extra=st.integers(0, 10),
       max_skew=st.integers(1, 3), pdb=pdbs, budget=st.one_of(st.none(), st.integers(0, 30)))
def test_a_larger_remove_or_budget_never_removes_fewer(
        reps: list[ReplicaView], remove: int, extra: int, max_skew: int,
        pdb: tuple[str, int] | None, budget: int | None) -> None:
    base = _plan(reps, remove, max_skew, pdb, 0, budget).granted
    assert _plan(reps, remove + extra, max_skew, pdb, 0, budget).granted >= base
    more_budget = None if budget is None else budget + extra
    assert _plan(reps, remove, max_skew, pdb, 0, more_budget).granted >= base
    assert _plan(reps, remove, max_skew, pdb, 0, None).granted >= base


@given(reps=replica_lists, remove=st.integers(0, 30), max_skew=st.integers(1, 3),
       limit=st.integers(0, 8), tighter=st.integers(0, 4), unavailable=st.integers(0, 3))
def test_a_stricter_pdb_never_removes_more(reps: list[ReplicaView], remove: int, max_skew: int,
                                           limit: int, tighter: int, unavailable: int) -> None:
    loose = _plan(reps, remove, max_skew, ("max", limit + tighter), unavailable, None).granted
    strict = _plan(reps, remove, max_skew, ("max", limit), unavailable, None).granted
    assert strict <= loose
    loose = _plan(reps, remove, max_skew, ("min", limit), unavailable, None).granted
    strict = _plan(reps, remove, max_skew, ("min", limit + tighter), unavailable, None).granted
    assert strict <= loose
    assert loose <= _plan(reps, remove, max_skew, None, unavailable, None).granted


# ---- cluster budget ---------------------------------------------------------------------------

def cand(workload: str, weight: float, vetoes: tuple[str, ...] = ()) -> Candidate:
    return Candidate(workload, "c", weight, 0.5, vetoes, "vetoed: x" if vetoes else "eligible")


def test_the_cluster_budget_is_spent_in_rank_order_and_skips_vetoed_workloads() -> None:
    cands = [cand("train", 0.1), cand("reco", 0.25, ("burst active (L1)",)), cand("orders", 0.65),
             cand("idle", 0.7)]
    plan = plan_cluster(cands, {"train": 3, "reco": 2, "orders": 4, "ghost": 1}, 5)
    assert [(g.workload, g.granted) for g in plan.grants] == [
        ("train", 3), ("reco", 0), ("orders", 2), ("ghost", 0)]
    assert plan.total_granted == 5 and plan.remaining == 0 and plan.granted("orders") == 2
    assert plan.grants[2].reason == "cluster budget: 2 of 4 (5 per cycle)"
    assert plan.grants[3].reason == "not ranked: no L2 signals"


@given(reqs=st.lists(st.integers(0, 6), min_size=1, max_size=6), budget=st.integers(0, 20),
       vetoed=st.lists(st.booleans(), min_size=6, max_size=6))
def test_cluster_grants_never_exceed_requests_or_the_budget(reqs: list[int], budget: int,
                                                            vetoed: list[bool]) -> None:
    cands = [cand(f"w{i}", i, ("v",) if vetoed[i] else ()) for i in range(len(reqs))]
    plan = plan_cluster(cands, {f"w{i}": n for i, n in enumerate(reqs)}, budget)
    assert plan.total_granted <= budget
    assert all(g.granted <= g.requested for g in plan.grants)
    assert all(plan.granted(f"w{i}") == 0 for i in range(len(reqs)) if vetoed[i])
    wanted = sum(n for i, n in enumerate(reqs) if not vetoed[i])
    assert plan.total_granted == min(budget, wanted)
