"""A latency regression injected after a replica is removed: the canary gate aborts and compensates."""

from __future__ import annotations

from ebb.model.trace import RequestTrace
from ebb.sim.compare import compare
from ebb.sim.policies import KNOWN_POLICIES
from ebb.score.report import render_report
from ebb.sim.settings import FaultSettings, SimSettings
from ebb.config.policy_specs import parse_policies
from ebb.sources.traces import bundled_trace


def test_an_injected_latency_regression_makes_the_canary_abort_and_restore_without_dropping_requests() -> None:
    trace = bundled_trace("azure-conv")
    assert isinstance(trace, RequestTrace)
    settings = SimSettings(fault=FaultSettings(slowdown=4.0, after_s=400.0))
    cmp = compare(trace, parse_policies("ebb,ebb:canary=on", KNOWN_POLICIES), settings, fidelity="request",
                  peak_replicas=10)
    plain, guarded = (r.scorecard for r in cmp.runs)
    assert guarded.canary_aborts >= 1
    assert guarded.dropped_requests == 0 and plain.dropped_requests == 0
    # Restoring the removed replica clears the regression: the guarded run violates less.
    assert guarded.slo_violation_pct < plain.slo_violation_pct
    compensations = [d for d in cmp.runs[1].noteworthy if d.gate is not None and d.gate.step == "compensate"]
    assert len(compensations) == guarded.canary_aborts
    assert compensations[0].to_replicas > compensations[0].from_replicas
    assert any("compensate" in r for r in compensations[0].reasons)
    html = render_report(cmp.runs, title="fault", trace_desc="bundled conv", settings={})
    assert "canary aborts" in html


def test_without_a_fault_the_canary_guard_changes_cost_by_little() -> None:
    trace = bundled_trace("azure-conv")
    cmp = compare(trace, parse_policies("ebb,ebb:canary=on", KNOWN_POLICIES), SimSettings(), fidelity="request",
                  peak_replicas=10)
    plain, guarded = (r.scorecard for r in cmp.runs)
    assert guarded.canary_passes >= 1
    assert guarded.gpu_hours <= plain.gpu_hours * 1.05
