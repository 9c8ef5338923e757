"""A simulated run's decisions as ledger cycles (ebb.sim.decision_log.run_cycles)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ebb.ledger import MemoryLedger, SqliteLedger, open_ledger
from ebb.model.decision import Decision, GateStep
from ebb.model.decisions import Action, CycleRecord
from ebb.model.ids import DecisionId, ReplicaId, RunId
from ebb.sim.decision_log import run_cycles
from ebb.score.results import PolicyRun, Scorecard, Timeline


def _card(policy: str) -> Scorecard:
    return Scorecard(
        policy=policy, trace="synthetic", fidelity="fluid", requests=100, gpu_hours=1.0, cost_usd=2.5,
        slo_violations=0, slo_violation_pct=0.0, ttft_p50_ms=10.0, ttft_p99_ms=50.0, e2e_p50_ms=100.0,
        e2e_p99_ms=500.0, scale_ups=1, scale_downs=1, dropped_requests=0, peak_replicas=4, mean_replicas=3.0,
        slo_ttft_ms=2000.0, slo_e2e_ms=20000.0, wall_s=0.1)


def _timeline() -> Timeline:
    z = np.zeros(3)
    return Timeline(t_s=np.arange(3.0), bin_s=1.0, demand_rps=z, replicas=z, ready_replicas=z, ttft_p50_ms=z,
                    ttft_p99_ms=z, e2e_p50_ms=z, e2e_p99_ms=z, violations=np.zeros(3, dtype=np.int64))


def _decision(t: float, action: Action, frm: int, to: int, **extra: Any) -> Decision:
    fields: dict[str, Any] = {
        "signals": {"demand_mean_replicas": 2.5, "ttft_p99_ms": float("nan"), "e2e_p99_ms": float("nan"),
                    "ready_replicas": 4, "inf": float("inf")},
        "weights": {"workload": 0.65, "base": 0.65, "alpha": 1.2},
        "reasons": (f"{action} because",),
        "plan": {"profile": "balanced", "target_util": 0.9},
    }
    fields.update(extra)
    return Decision(t, action, frm, to, policy="ebb", **fields)


def ebb_run() -> PolicyRun:
    noteworthy = (
        _decision(30.0, "veto", 4, 4, vetoes=("warming up: 29 s of history < 300 s",)),
        _decision(301.5, "scale_down", 4, 3, victims=(ReplicaId(2),)),
        _decision(340.0, "scale_up", 3, 5),
        _decision(400.0, "veto", 5, 5, vetoes=("cooldown",)),
        _decision(460.25, "scale_up", 5, 6),
        _decision(470.0, "hold", 6, 6, gate=GateStep("proceed", "ttft", "pass")),  # a gate step at its target
    )
    decisions = ((301.5, 4, 3), (340.0, 3, 5), (460.25, 5, 6))
    return PolicyRun(_card("ebb"), _timeline(), decisions=decisions, noteworthy=noteworthy)


def baseline_run() -> PolicyRun:
    pol = "hpa:target=0.5"
    changes = ((15.0, 1, 3), (75.0, 3, 2), (90.0, 2, 4))
    return PolicyRun(_card(pol), _timeline(), decisions=changes,
                     noteworthy=tuple(Decision.change(t, a, b, policy=pol, reasons=(f"{pol}: desired {b}",))
                                      for t, a, b in changes))


def test_each_noteworthy_decision_becomes_one_cycle_with_stable_ids_and_times() -> None:
    cycles = run_cycles("r1", 2, ebb_run())
    assert [c.cycle_id for c in cycles] == [f"r1-2-c{n}" for n in range(1, 7)]
    ds = [c.decisions[0] for c in cycles]
    assert all(len(c.decisions) == 1 for c in cycles)
    assert [d.decision_id for d in ds] == [f"r1-2-{n}" for n in range(1, 7)]
    assert [d.action for d in ds] == ["veto", "scale_down", "scale_up", "veto", "scale_up", "hold"]
    assert [(d.from_replicas, d.to_replicas) for d in ds] == [(4, 4), (4, 3), (3, 5), (5, 5), (5, 6), (6, 6)]
    assert [d.ts_ns for d in ds] == [30_000_000_000, 301_500_000_000, 340_000_000_000, 400_000_000_000,
                                     460_250_000_000, 470_000_000_000]
    assert all(c.ts_ns == c.decisions[0].ts_ns and c.run_id == RunId("r1") and c.policy == "ebb" for c in cycles)
    assert all(d.target == "serving" for d in ds)
    assert [c.snapshot for c in cycles[:2]] == [{"replicas": 4}, {"replicas": 4}]


def test_signals_drop_nan_and_infinite_values_and_victims_are_named() -> None:
    cycles = run_cycles("r1", 1, ebb_run())
    d = cycles[1].decisions[0]
    assert dict(d.signals) == {"demand_mean_replicas": 2.5, "ready_replicas": 4.0}
    assert dict(d.weights) == {"workload": 0.65, "base": 0.65, "alpha": 1.2}
    assert d.victims == ("replica-2",) and d.reasons == ("scale_down because",)
    assert dict(d.plan) == {"policy": "ebb", "profile": "balanced", "target_util": 0.9}
    assert cycles[0].decisions[0].vetoes == ("warming up: 29 s of history < 300 s",)
    gate = cycles[5].decisions[0].plan
    assert (gate["gate"], gate["step"], gate["verdict"]) == ("ttft", "proceed", "pass")


def test_a_scale_up_is_caused_by_the_previous_change_and_nothing_else_is() -> None:
    ds = [c.decisions[0] for c in run_cycles("r1", 3, ebb_run())]
    assert [d.caused_by for d in ds] == [(), (), (DecisionId("r1-3-2"),), (), (DecisionId("r1-3-3"),), ()]


def test_a_baseline_run_records_its_changes_with_its_own_reasons() -> None:
    cycles = run_cycles("rb", 1, baseline_run(), target="chat")
    ds = [c.decisions[0] for c in cycles]
    assert [d.decision_id for d in ds] == ["rb-1-1", "rb-1-2", "rb-1-3"]
    assert [d.action for d in ds] == ["scale_up", "scale_down", "scale_up"]
    assert [(d.from_replicas, d.to_replicas) for d in ds] == [(1, 3), (3, 2), (2, 4)]
    assert [d.ts_ns for d in ds] == [15_000_000_000, 75_000_000_000, 90_000_000_000]
    assert [d.reasons for d in ds] == [("hpa:target=0.5: desired 3",), ("hpa:target=0.5: desired 2",),
                                       ("hpa:target=0.5: desired 4",)]
    assert all(d.signals == {} and d.weights == {} and d.vetoes == () and d.victims == () for d in ds)
    assert all(d.plan == {"policy": "hpa:target=0.5"} and d.target == "chat" for d in ds)
    assert [d.caused_by for d in ds] == [(), (), (DecisionId("rb-1-2"),)]


def test_a_run_without_noteworthy_decisions_records_nothing() -> None:
    assert run_cycles("r0", 1, PolicyRun(_card("static"), _timeline())) == []


def _roundtrip(cycles: list[CycleRecord], where: Any) -> None:
    for c in cycles:
        assert where.append_cycle(c) is True
    assert where.cycles() == sorted(cycles, key=lambda c: (c.ts_ns, c.cycle_id))
    for c in cycles:
        assert where.get_cycle(c.cycle_id) == c
        assert where.get_decision(c.decisions[0].decision_id) == c.decisions[0]


def test_the_cycles_append_to_a_memory_and_an_sqlite_ledger_and_read_back_equal(tmp_path: Path) -> None:
    cycles = run_cycles("rx", 1, ebb_run()) + run_cycles("rx", 2, baseline_run())
    mem = MemoryLedger()
    _roundtrip(cycles, mem)
    path = tmp_path / "l.sqlite"
    with SqliteLedger(path) as sq:
        _roundtrip(cycles, sq)
        assert sq.append_cycle(cycles[0]) is False  # idempotent re-append
    reopened = open_ledger(str(path), create=False)
    try:
        assert reopened.cycles() == mem.cycles()
        assert reopened.decisions(run_id=RunId("rx")) == mem.decisions(run_id=RunId("rx"))
        assert len(reopened.decisions()) == 9
    finally:
        reopened.close()
