"""The canary guard with several gates, measured live (PromQL values in the observation) or from L1."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import pytest

from ebb.errors import ConfigError
from ebb.gates.guard import L1_TTFT_QUERY, CanaryGuard, combine, ttft_gate
from ebb.gates.metrics_gate import GateSpec, load_gates
from ebb.model.observation import Observation, ScaleRequest

P99 = "histogram_quantile(0.99, sum by (le) (rate(ebb_router_ttft_seconds_bucket[1m])))"
OK_RATIO = 'sum(rate(ebb_router_requests_total{outcome="ok"}[1m])) / sum(rate(ebb_router_requests_total[1m]))'


@dataclass
class Inner:
    """Wants 4 → 2 once; reports a fixed L1 TTFT P99."""

    ttft_ms: float = 100.0
    spec: str = "stub"
    interval_s: float = 1.0
    pipeline: Any = None
    log: list[dict[str, Any]] = field(default_factory=list)
    ups: list[float] = field(default_factory=list)

    def decide(self, obs: Observation) -> int | ScaleRequest:
        return ScaleRequest(2) if obs.spec_replicas == 4 else obs.spec_replicas

    def observe(self, obs: Observation) -> None:
        pass

    def ttft_p99_since(self, t0_s: float) -> float:
        return self.ttft_ms

    def note_scale_up(self, t_s: float) -> None:
        self.ups.append(t_s)


def obs(t: float, spec: int, values: dict[str, float] | None = None) -> Observation:
    return Observation(t_s=t, spec_replicas=spec, ready_replicas=spec, pods=(), total_qps=1.0, total_inflight=0.0,
                       queued=0.0, gate_values=values)


def gate(query: str, cond: str, fail: str) -> GateSpec:
    return GateSpec(query=query, success_condition=cond, failure_condition=fail, interval_s=10.0, count=2)


def run(guard: CanaryGuard, values: dict[str, float] | None, until_s: float = 60.0) -> list[int | ScaleRequest]:
    answers: list[int | ScaleRequest] = [guard.decide(obs(0.0, 4))]
    spec = 3
    t = 1.0
    while t <= until_s and guard.active:
        a = guard.decide(obs(t, spec, values))
        answers.append(a)
        t += 1.0
    return answers


def test_combining_gates_fails_on_any_failure_and_passes_only_when_all_pass() -> None:
    assert combine(["pass", "pass"]) == "pass"
    assert combine(["pass", "fail"]) == "fail"
    assert combine(["error", "pass"]) == "error"
    assert combine(["pass", "running"]) == "running"
    assert combine(["pass", "inconclusive"]) == "inconclusive"


def test_live_gate_values_that_pass_let_the_plan_proceed() -> None:
    g = CanaryGuard(Inner(), gate(P99, "result < 1.6", "result >= 2.0"),
                    extra_gates=(gate(OK_RATIO, "result >= 0.999", "result < 0.99"),))
    answers = run(g, {P99: 0.4, OK_RATIO: 1.0})
    assert answers[0] == ScaleRequest(3)
    assert answers[-1] == ScaleRequest(2) and g.passes == 1 and g.aborts == 0


def test_one_failing_gate_aborts_and_restores_the_pre_state() -> None:
    inner = Inner()
    g = CanaryGuard(inner, gate(P99, "result < 1.6", "result >= 2.0"),
                    extra_gates=(gate(OK_RATIO, "result >= 0.999", "result < 0.99"),))
    answers = run(g, {P99: 0.4, OK_RATIO: 0.95})
    assert answers[-1] == ScaleRequest(4) and g.aborts == 1 and inner.ups


def test_a_promql_gate_without_a_measured_value_never_passes() -> None:
    """No Prometheus value (the agents source, or a failed query): inconclusive, then abort at max wait."""
    g = CanaryGuard(Inner(), gate(P99, "result < 1.6", "result >= 2.0"), max_wait_s=30.0)
    answers = run(g, None)
    assert answers[-1] == ScaleRequest(4) and g.passes == 0
    g2 = CanaryGuard(Inner(), gate(P99, "result < 1.6", "result >= 2.0"), max_wait_s=30.0)
    assert run(g2, {P99: math.nan})[-1] == ScaleRequest(4)


def test_the_built_in_gate_reads_the_l1_signal_in_the_simulator() -> None:
    g = CanaryGuard(Inner(ttft_ms=100.0), ttft_gate(2000.0, 0.7))
    assert g.gate.query == L1_TTFT_QUERY
    assert run(g, None)[-1] == ScaleRequest(2)
    bad = CanaryGuard(Inner(ttft_ms=1900.0), ttft_gate(2000.0, 0.7))
    assert run(bad, None)[-1] == ScaleRequest(4)


def test_gates_load_from_yaml_and_bad_files_name_the_entry() -> None:
    gates = load_gates(f"gates:\n  - query: '{P99}'\n    success_condition: result < 1.6\n", "gates.yaml")
    assert gates[0].query == P99
    with pytest.raises(ConfigError, match="gates.yaml"):
        load_gates("gates: [", "gates.yaml")
    with pytest.raises(ConfigError, match=r"gates\[0\]"):
        load_gates("gates:\n  - success_condition: result < 1\n", "gates.yaml")
    with pytest.raises(ConfigError, match="non-empty list"):
        load_gates("gates: []\n", "gates.yaml")
