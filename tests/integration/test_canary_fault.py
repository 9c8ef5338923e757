"""A latency regression injected after a replica is removed: the canary gate aborts and compensates.

Ebb's own reactions would restore the capacity too — a latency surge, the need outgrowing its target,
the fast path — and the guard lets the inner policy's scale-ups through, so the fault test mutes
them (``surge_margin=5``, ``violation_budget=0.5``, ``target_util=2``, ``fast_path=off``) in both
runs: what is measured is the gate alone. The load scale and the oracle come from a run without the
fault (the oracle's own scale-downs would arm it and leave no schedule meeting the SLO).
"""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from ebb.cli.main import app
from ebb.config.policy_specs import parse_policies
from ebb.ledger import open_ledger
from ebb.model.trace import RequestTrace
from ebb.score.report import render_report
from ebb.sim.compare import compare, prepare, simulate_one
from ebb.sim.policies import KNOWN_POLICIES, build_policy
from ebb.sim.policy_context import PolicyContext
from ebb.sim.settings import FaultSettings, SimSettings
from ebb.sources.traces import bundled_trace

MUTED = "ebb:surge_margin=5,violation_budget=0.5,target_util=2,fast_path=off"


def test_an_injected_latency_regression_makes_the_canary_abort_and_restore_without_dropping_requests() -> None:
    trace = bundled_trace("azure-conv")
    assert isinstance(trace, RequestTrace)
    base = compare(trace, [], SimSettings(), fidelity="request", peak_replicas=10)
    faulty = SimSettings(fault=FaultSettings(slowdown=4.0, after_s=300.0))
    w = prepare(trace, "request", faulty, load_scale=base.load_scale)
    ctx = PolicyContext(settings=faulty, oracle_schedule=base.oracle.schedule)
    runs = [simulate_one(w, build_policy(item, ctx), faulty)
            for item in parse_policies(f"{MUTED},{MUTED},canary=on", KNOWN_POLICIES)]
    plain, guarded = (r.scorecard for r in runs)
    assert guarded.canary_aborts >= 1
    assert guarded.dropped_requests == 0 and plain.dropped_requests == 0
    # Restoring the removed replica clears the regression: the guarded run violates less.
    assert guarded.slo_violation_pct < plain.slo_violation_pct
    compensations = [d for d in runs[1].noteworthy if d.gate is not None and d.gate.step == "compensate"]
    assert len(compensations) == guarded.canary_aborts
    assert compensations[0].to_replicas > compensations[0].from_replicas
    assert any("compensate" in r for r in compensations[0].reasons)
    html = render_report(runs, title="fault", trace_desc="bundled conv", settings={})
    assert "canary aborts" in html


def test_without_a_fault_the_canary_guard_changes_cost_by_little() -> None:
    trace = bundled_trace("azure-conv")
    cmp = compare(trace, parse_policies("ebb,ebb:canary=on", KNOWN_POLICIES), SimSettings(), fidelity="request",
                  peak_replicas=10)
    plain, guarded = (r.scorecard for r in cmp.runs)
    assert guarded.canary_passes >= 1
    assert guarded.gpu_hours <= plain.gpu_hours * 1.05


def test_the_cli_with_a_fault_records_each_compensation_as_a_step_caused_by_its_canary(tmp_path: Path) -> None:
    # `ebb simulate --fault-slowdown` (issue #30): the guard's compensation, planned by the rollback
    # channel's own planner and applied by the engine, is in the ledger as the scale-up back to the
    # canary's pre-state, caused by the canary step it undoes.
    ledger = tmp_path / "sim.sqlite"
    res = CliRunner().invoke(app, ["simulate", "--trace", "azure-conv", "--peak-replicas", "10",
                                   "--policy", "ebb:canary=on", "--fault-slowdown", "4", "--fault-after-s", "400",
                                   "--ledger", str(ledger)])
    assert res.exit_code == 0, res.output
    store = open_ledger(ledger, read_only=True)
    try:
        decisions = {d.decision_id: d for d in store.decisions()}
    finally:
        store.close()
    undo = [d for d in decisions.values() if d.plan.get("step") == "compensate"]
    assert undo, "the fault made the canary abort"
    for d in undo:
        [canary] = [decisions[c] for c in d.caused_by]
        assert canary.plan.get("step") == "canary" and d.action == "scale_up"
        assert (d.from_replicas, d.to_replicas) == (canary.to_replicas, canary.from_replicas)
        assert "rollback channel" in d.reasons[-1]
