"""Decisions as ledger records (ebb.decide.records): the one conversion both clocks use."""

from __future__ import annotations

import math

from ebb.decide.records import (
    caused_by,
    clamp,
    cycle_record,
    decision_record,
    outcome_cycle,
    sim_victim_name,
    stale_data_veto,
)
from ebb.model.decision import Decision, GateStep
from ebb.model.decisions import DecisionRecord
from ebb.model.ids import CycleId, DecisionId, ReplicaId, RunId


def record(d: Decision, **kw: object) -> DecisionRecord:
    return decision_record(d, decision_id=DecisionId("d1"), cycle_id=CycleId("c1"), run_id=RunId("r1"),
                           ts_ns=5_000_000_000, target="serving", **kw)  # type: ignore[arg-type]


def scale_down() -> Decision:
    return Decision(5.0, "scale_down", 4, 2, policy="ebb:profile=lean", victims=(ReplicaId(7), ReplicaId(3)),
                    reasons=("peak demand",), signals={"ttft_p99_ms": math.nan, "demand_mean_replicas": 1.5,
                                                       "overflow": math.inf},
                    weights={"workload": 0.65, "alpha": math.nan}, plan={"profile": "lean", "target_util": 1.1})


def test_a_record_keeps_every_field_and_drops_what_was_not_measured() -> None:
    rec = record(scale_down())
    assert (rec.action, rec.from_replicas, rec.to_replicas, rec.ts_ns) == ("scale_down", 4, 2, 5_000_000_000)
    assert dict(rec.signals) == {"demand_mean_replicas": 1.5}
    assert dict(rec.weights) == {"workload": 0.65}
    assert rec.reasons == ("peak demand",) and rec.vetoes == () and rec.caused_by == ()
    assert dict(rec.plan) == {"policy": "ebb:profile=lean", "profile": "lean", "target_util": 1.1}


def test_victims_are_named_by_the_simulator_or_by_the_callers_names() -> None:
    assert sim_victim_name(ReplicaId(7)) == "replica-7"
    assert record(scale_down()).victims == ("replica-7", "replica-3")
    assert record(scale_down(), victim_name=lambda r: f"worker-{int(r)}").victims == ("worker-7", "worker-3")


def test_a_gate_step_is_in_the_plan_with_its_query_step_and_verdict() -> None:
    canary = Decision(1.0, "hold", 3, 3, policy="ebb:canary=on", gate=GateStep("canary", "ttft since"))
    assert dict(record(canary).plan) == {"policy": "ebb:canary=on", "gate": "ttft since", "step": "canary"}
    done = Decision(9.0, "scale_up", 3, 4, gate=GateStep("compensate", "q", "fail"))
    plan = record(done, extra_plan={"leader": "a"}).plan
    assert (plan["gate"], plan["step"], plan["verdict"], plan["leader"]) == ("q", "compensate", "fail", "a")


def test_a_scale_up_is_caused_by_the_previous_change_and_nothing_else_is() -> None:
    up, down = Decision.change(0.0, 2, 3), Decision.change(0.0, 3, 2)
    assert caused_by(up, DecisionId("prev")) == (DecisionId("prev"),)
    assert caused_by(up, None) == ()
    assert caused_by(down, DecisionId("prev")) == ()
    assert record(up, caused=caused_by(up, DecisionId("prev"))).caused_by == (DecisionId("prev"),)


def test_a_cycle_holds_its_one_decision_with_the_same_ids_and_time() -> None:
    rec = record(scale_down())
    cyc = cycle_record(rec, policy="ebb", snapshot={"replicas": 4}, fencing_token=3)
    assert (cyc.cycle_id, cyc.run_id, cyc.ts_ns, cyc.policy) == ("c1", "r1", 5_000_000_000, "ebb")
    assert cyc.decisions == (rec,) and cyc.snapshot == {"replicas": 4} and cyc.fencing_token == 3


def test_a_stale_data_veto_keeps_from_on_a_scale_down_and_leaves_anything_else_alone() -> None:
    v = stale_data_veto(scale_down(), "agents silent 6 s")
    assert (v.action, v.from_replicas, v.to_replicas, v.victims) == ("veto", 4, 4, ())
    assert v.vetoes == ("scale-down blocked by the controller: agents silent 6 s",)
    up = Decision.change(0.0, 2, 5)
    assert stale_data_veto(up, "x") is up


def test_clamp_keeps_the_target_inside_the_bounds_and_says_so() -> None:
    d = Decision.change(0.0, 4, 12, reasons=("surge",))
    c = clamp(d, 1, 8)
    assert (c.action, c.to_replicas) == ("scale_up", 8)
    assert c.reasons == ("surge", "clamped to [1, 8] replicas")
    assert clamp(d, 1, 20) is d
    low = clamp(scale_down(), 3, 8)
    assert (low.to_replicas, low.victims) == (3, (ReplicaId(7),))  # one victim is still removed
    assert clamp(Decision.change(0.0, 4, 2), 4, 8).action == "hold"


def test_the_outcome_cycle_closes_the_decision_it_names() -> None:
    cyc = cycle_record(record(scale_down()), policy="ebb", snapshot={"replicas": 4}, fencing_token=2)
    out = outcome_cycle(cyc, DecisionId("d1"), ts_ns=6, note="applied",
                        result={"applied": True, "replicas_after": 2}, fencing_token=2)
    assert out.cycle_id == "c1-outcome" and out.run_id == "r1" and out.ts_ns == 6 and out.policy == "actuator"
    assert out.decisions == () and out.fencing_token == 2
    assert out.snapshot == {"outcome_of": "d1", "note": "applied", "applied": True, "replicas_after": 2}
    assert outcome_cycle(cyc, DecisionId("d1"), ts_ns=6, note="not acted").snapshot == {
        "outcome_of": "d1", "note": "not acted"}
