"""Count-level L3 (ebb.decide.fleet_plan) grants what plan_cluster + plan_scale_down grant."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ebb.decide.coordinate import QuotaContext, ReplicaView, plan_cluster, plan_scale_down, zone_skew
from ebb.decide.fleet_plan import FleetPlan, plan_fleet
from ebb.decide.quota import QoSClass, Quota, QuotaPod
from ebb.decide.semantics import Candidate

GPU = "nvidia.com/gpu"


def plan(ready: list[list[int]], starting: list[list[int]] | None = None, *, request: list[int],
         budget: int = 100, order: list[int] | None = None, vetoed: list[bool] | None = None,
         pdb: list[int] | None = None, borrowed: list[int] | None = None, max_skew: int = 1) -> FleetPlan:
    n = len(ready)
    return plan_fleet(ready=ready, starting=starting if starting is not None else np.zeros_like(ready),
                      request=request, order=order if order is not None else list(range(n)),
                      vetoed=vetoed if vetoed is not None else [False] * n, cluster_budget=budget,
                      pdb_allowance=pdb, borrowed=borrowed, max_skew=max_skew)


def test_the_budget_goes_in_rank_order_and_vetoed_workloads_get_nothing() -> None:
    got = plan([[3, 3, 3]] * 3, request=[2, 2, 2], budget=3, order=[2, 0, 1], vetoed=[True, False, False])
    assert got.cluster_granted.tolist() == [0, 1, 2] and got.granted.tolist() == [0, 1, 2]
    assert got.total_granted == 3


def test_a_pdb_and_the_replica_count_cap_the_grant_but_the_budget_is_still_spent() -> None:
    got = plan([[2, 0, 0], [5, 5, 0]], request=[4, 4], budget=8, pdb=[-1, 1])
    assert got.cluster_granted.tolist() == [4, 4]  # plan_cluster knows neither count nor PDB
    assert got.granted.tolist() == [2, 1]


def test_starting_replicas_go_first_then_the_most_populated_zone_lowest_index_on_ties() -> None:
    got = plan([[3, 3, 2]], [[0, 0, 1]], request=[3])
    assert got.remove_starting.tolist() == [[0, 0, 1]]
    assert got.remove_ready.tolist() == [[1, 1, 0]]
    assert got.skew_after.tolist() == [0]


def test_a_starting_replica_that_would_break_the_skew_bound_is_passed_over() -> None:
    # zones 4, 3 (+1 starting in the smaller one counted in it): removing the starting one from
    # zone b (count 3 → 2) would make skew 4 − 2 = 2 > 1; a ready one from zone a goes instead
    got = plan([[4, 2]], [[0, 1]], request=[1])
    assert got.remove_starting.tolist() == [[0, 0]] and got.remove_ready.tolist() == [[1, 0]]
    assert got.skew_before.tolist() == [1] and got.skew_after.tolist() == [0]


def test_the_reclaim_pass_moves_budget_to_workloads_holding_borrowers() -> None:
    got = plan([[4, 0, 0], [4, 0, 0]], request=[2, 2], budget=2, borrowed=[0, 1])
    assert got.cluster_granted.tolist() == [1, 1]
    assert got.reclaimed.tolist() == [0, 1]


def test_an_already_skewed_workload_never_gets_more_skewed() -> None:
    got = plan([[6, 1, 0]], request=[5], max_skew=1)
    assert got.skew_before.tolist() == [5] and got.skew_after.tolist() == [0]  # zone c held none: not counted
    assert got.remove_ready.tolist() == [[5, 0, 0]]


@pytest.mark.parametrize("change", [{"request": [-1]}, {"order": [1]}, {"budget": -1}, {"pdb": [-2]},
                                    {"borrowed": [9]}, {"max_skew": 0}])
def test_bad_arguments_raise_value_error(change: dict[str, object]) -> None:
    kw: dict[str, object] = {"request": [1], **change}
    with pytest.raises(ValueError):
        plan([[2, 2]], **kw)  # type: ignore[arg-type]


def test_replicas_outside_the_zone_mask_are_refused_and_empty_fleets_plan_nothing() -> None:
    with pytest.raises(ValueError, match="zone_mask"):
        plan_fleet(ready=[[1, 1]], starting=[[0, 0]], request=[1], order=[0], vetoed=[False],
                   cluster_budget=1, zone_mask=[[True, False]])
    empty = plan_fleet(ready=np.zeros((0, 3), dtype=int), starting=np.zeros((0, 3), dtype=int), request=[],
                       order=[], vetoed=[], cluster_budget=5)
    assert empty.total_granted == 0 and empty.remove_ready.shape == (0, 3)


# ---- property: equal to the per-replica planners on materialised replicas ----------------------

def reference_zones(ready: list[int], starting: list[int], granted: int,
                    max_skew: int) -> tuple[list[int], list[int]]:
    """The documented zone rule, one removal at a time, in plain Python."""
    counts = {z: r + s for z, (r, s) in enumerate(zip(ready, starting)) if r + s > 0}
    bound = max(max_skew, zone_skew(counts))
    s_left, rs, rr = list(starting), [0] * len(ready), [0] * len(ready)
    for _ in range(granted):
        fits = []
        for z in counts:
            if s_left[z] > 0:
                counts[z] -= 1
                if zone_skew(counts) <= bound:
                    fits.append(z)
                counts[z] += 1
        if fits:
            z = max(fits, key=lambda j: (counts[j], -j))
            s_left[z] -= 1
            rs[z] += 1
        else:
            z = max(counts, key=lambda j: (counts[j], -j))
            rr[z] += 1
        counts[z] -= 1
    return rs, rr


@dataclass(frozen=True)
class Fleet:
    ready: list[list[int]]
    starting: list[list[int]]
    request: list[int]
    order: list[int]
    vetoed: list[bool]
    pdb: list[int]
    borrowed: list[int]
    budget: int
    max_skew: int


@st.composite
def fleets(draw: st.DrawFn) -> Fleet:
    n = draw(st.integers(1, 5))
    z = draw(st.integers(1, 3))
    ready = [[draw(st.integers(0, 4)) for _ in range(z)] for _ in range(n)]
    starting = [[draw(st.integers(0, 2)) for _ in range(z)] for _ in range(n)]
    totals = [sum(r) + sum(s) for r, s in zip(ready, starting)]
    return Fleet(ready, starting, request=[draw(st.integers(0, 6)) for _ in range(n)],
                 order=draw(st.permutations(list(range(n)))),
                 vetoed=[draw(st.booleans()) for _ in range(n)],
                 pdb=[draw(st.integers(-1, 4)) for _ in range(n)],
                 borrowed=[draw(st.integers(0, t)) for t in totals],
                 budget=draw(st.integers(0, 12)), max_skew=draw(st.integers(1, 2)))


def materialise(f: Fleet) -> tuple[list[ReplicaView], QuotaContext]:
    """Per-replica views (equal loads, ids that sort starting first) and a quota context in which
    exactly ``f.borrowed[w]`` pods of workload w's namespace borrow."""
    replicas: list[ReplicaView] = []
    pods: dict[str, QuotaPod] = {}
    quotas: dict[str, Quota] = {}
    for w, (rdy, sta) in enumerate(zip(f.ready, f.starting)):
        ns = f"ns{w}"
        mine = 0
        for zi, (r, s) in enumerate(zip(rdy, sta)):
            for i in range(s + r):
                rid = f"w{w}-z{zi}-{'s' if i < s else 'r'}{i:02d}"
                replicas.append(ReplicaView(rid, f"w{w}", ns, f"z{zi}", 0.5, ready=i >= s))
                pods[rid] = QuotaPod(rid, ns, QoSClass.GUARANTEED, requests={GPU: 1000})
                mine += 1
        # first fit under min: exactly `borrowed` one-GPU pods of the namespace do not fit
        quotas[ns] = Quota(ns, min={GPU: 1000 * (mine - f.borrowed[w])})
    return replicas, QuotaContext(quotas, pods)


@settings(max_examples=250, deadline=None)
@given(f=fleets())
def test_counts_equal_plan_cluster_and_plan_scale_down_on_materialised_replicas(f: Fleet) -> None:
    got = plan(f.ready, f.starting, request=f.request, budget=f.budget, order=f.order, vetoed=f.vetoed,
               pdb=f.pdb, borrowed=f.borrowed, max_skew=f.max_skew)
    replicas, quota = materialise(f)
    n = len(f.order)
    cands = [Candidate(f"w{i}", "c", 0.5, 0.5, ("x",) if f.vetoed[i] else (), "r") for i in f.order]
    requests = {f"w{i}": f.request[i] for i in range(n)}
    cluster = plan_cluster(cands, requests, f.budget, quota=quota, replicas=replicas)
    assert got.total_granted <= f.budget
    for i in range(n):
        w = f"w{i}"
        assert got.cluster_granted[i] == cluster.granted(w)
        (grant,) = [g for g in cluster.grants if g.workload == w]
        assert got.reclaim_first[i] == grant.reclaim
        for q in (None, quota):
            sp = plan_scale_down(replicas, w, requests[w], max_skew=f.max_skew,
                                 pdb_max_unavailable=None if f.pdb[i] < 0 else f.pdb[i],
                                 budget=cluster.granted(w), quota=q)
            assert got.granted[i] == sp.granted
            assert got.skew_before[i] == sp.skew_before
            assert sp.skew_after <= max(f.max_skew, sp.skew_before)
            if q is not None:
                assert len(sp.reclaimed) <= got.reclaimed[i] == min(got.granted[i], f.borrowed[i])
        if f.vetoed[i]:
            assert got.granted[i] == 0
        assert got.skew_after[i] <= max(f.max_skew, got.skew_before[i])
        rs, rr = reference_zones(f.ready[i], f.starting[i], int(got.granted[i]), f.max_skew)
        assert got.remove_starting[i].tolist() == rs and got.remove_ready[i].tolist() == rr
    assert np.all(got.remove_starting <= np.asarray(f.starting))
    assert np.all(got.remove_ready <= np.asarray(f.ready))
