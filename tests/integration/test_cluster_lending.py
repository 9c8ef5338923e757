"""Issue #33's cluster clause on ``examples/cluster/lending.yaml`` (bundled traces: no ../shared needed).

Serving lends its sleepers' GPUs to an elastic training job and takes them back by preemption. Checked:
best-effort GPU-hours done > 0 (and more than the same scenario without the tier), serving violations
≤ 0.1 %, every preemption recorded, no quota breach; peers never sleep.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from ebb.config.scenario import load_scenario
from ebb.sim.cluster.inputs import build_inputs
from ebb.sim.cluster.run import ClusterResult, run_policy
from ebb.sources.traces.scenario_series import TraceSeries

SCENARIO = Path(__file__).resolve().parents[2] / "examples" / "cluster" / "lending.yaml"


@pytest.fixture(scope="module")
def runs() -> dict[str, ClusterResult]:
    sc = load_scenario(SCENARIO)
    inp = build_inputs(sc, TraceSeries())
    untiered = dataclasses.replace(sc, services=tuple(dataclasses.replace(s, tier=None) for s in sc.services))
    return {"ebb": run_policy(sc, inp, "ebb"), "hpa": run_policy(sc, inp, "hpa:target=0.3"),
            "ebb without tier": run_policy(untiered, build_inputs(untiered, TraceSeries()), "ebb")}


def test_training_borrows_what_serving_sleeps_on_and_serving_keeps_its_slo(runs: dict[str, ClusterResult]) -> None:
    card = runs["ebb"].scorecard
    assert card["violations_by_class"]["order-fulfilment"]["violation_pct"] <= 0.1
    assert card["gpu_hours_lent"] > 0 and card["best_effort_gpu_hours_done"] > 0
    assert card["best_effort_gpu_hours_done"] > runs["ebb without tier"].scorecard["best_effort_gpu_hours_done"]
    assert card["quota_breach_s"] == 0


def test_every_preemption_is_recorded_with_its_cost(runs: dict[str, ClusterResult]) -> None:
    card, run = runs["ebb"].scorecard, runs["ebb"].run
    assert card["preemptions"] == len(card["preemption_log"]) == len(run.preemption_log) > 0
    lost = sum(p["gpus"] for p in card["preemption_log"]) * 300 / 3600  # restart_gpu_s: 300 in the scenario
    assert card["best_effort_gpu_hours_lost"] == pytest.approx(lost, abs=1e-6)
    assert all(w["count"] == 0 or w["max"] >= 30 for w in (card["reclaim_delay_s"],))  # checkpoint_s: 30


def test_peers_keep_their_upstream_behaviour_and_never_sleep(runs: dict[str, ClusterResult]) -> None:
    card = runs["hpa"].scorecard
    assert card["gpu_hours_online_asleep"] == 0 and card["wakes"] == 0 and card["gpu_hours_lent"] == 0


def test_a_reserve_keeps_more_asleep_for_the_borrowers_in_both_l1_paths(runs: dict[str, ClusterResult]) -> None:
    """``reserve=1`` keeps every sleeper to the tier's max until its TTL (not only those the cold floor
    counts on), in the exact L1 (EbbPolicy per service) and the fleet L1 (FleetEbb's twins) alike:
    more GPU-hours asleep and lent, serving's SLO kept. The price is the borrowers': a reserve wakes
    every sleeper at a scale-up, so each wake on a lent GPU is a preemption (more of them, and more
    best-effort work lost to restarts: docs/tiers.md)."""
    sc = load_scenario(SCENARIO)
    services = tuple(dataclasses.replace(s, tier=dataclasses.replace(s.tier, reserve=1.0)) if s.tier else s
                     for s in sc.services)
    reserved = dataclasses.replace(sc, services=services)
    inp = build_inputs(reserved, TraceSeries())
    assert inp.tiers is not None and inp.tiers.reserve is not None
    assert all(r == 1.0 for r, on in zip(inp.tiers.reserve, inp.tiers.tiered) if on)
    plain_fleet = run_policy(sc, build_inputs(sc, TraceSeries()), "ebb:l1=fleet").scorecard
    for spec, plain in (("ebb", runs["ebb"].scorecard), ("ebb:l1=fleet", plain_fleet)):
        card = run_policy(reserved, inp, spec).scorecard
        assert card["gpu_hours_online_asleep"] > plain["gpu_hours_online_asleep"], spec
        assert card["gpu_hours_lent"] > plain["gpu_hours_lent"], spec
        assert card["violations_by_class"]["order-fulfilment"]["violation_pct"] <= 0.1, spec
        assert card["preemptions"] > plain["preemptions"] and card["quota_breach_s"] == 0, spec
