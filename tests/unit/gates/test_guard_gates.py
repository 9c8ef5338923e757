"""The canary guard (ebb.gates.guard) with several gates, measured live (PromQL values in the
observation) or from L1, and the decisions it returns: canary, proceed and compensate steps."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import pytest

from ebb.errors import ConfigError
from ebb.gates.guard import L1_TTFT_QUERY, CanaryGuard, canary_counts, combine, ttft_gate
from ebb.gates.metrics_gate import GateSpec, load_gates
from ebb.model.decision import Decision, GateStep
from ebb.model.ids import ReplicaId
from ebb.model.observation import Observation
from ebb.model.spans import NO_SPANS, Spans

P99 = "histogram_quantile(0.99, sum by (le) (rate(ebb_router_ttft_seconds_bucket[1m])))"
OK_RATIO = 'sum(rate(ebb_router_requests_total{outcome="ok"}[1m])) / sum(rate(ebb_router_requests_total[1m]))'


@dataclass
class Inner:
    """Wants 4 → 2 once (victims 7 then 5, with its explanation); reports a fixed L1 TTFT P99."""

    ttft_ms: float = 100.0
    spec: str = "stub"
    interval_s: float = 1.0
    pipeline: Any = None
    ups: list[float] = field(default_factory=list)
    observed: int = 0
    decided: int = 0
    surge_at: float | None = None
    """When set, asks for one more replica at this time (a burst while a step is gated)."""

    def decide(self, obs: Observation, *, spans: Spans = NO_SPANS) -> Decision:
        self.decided += 1
        if self.surge_at is not None and obs.t_s >= self.surge_at:
            return Decision(obs.t_s, "scale_up", obs.spec_replicas, obs.spec_replicas + 1, policy=self.spec,
                            reasons=("surge: latency",))
        if obs.spec_replicas == 4:
            return Decision(obs.t_s, "scale_down", 4, 2, policy=self.spec, victims=(ReplicaId(7), ReplicaId(5)),
                            reasons=("peak demand needs 2",), signals={"ttft_p99_ms": self.ttft_ms},
                            weights={"workload": 0.65}, plan={"profile": "stub"})
        return Decision(obs.t_s, "hold", obs.spec_replicas, obs.spec_replicas, policy=self.spec)

    def observe(self, obs: Observation) -> None:
        self.observed += 1

    def ttft_p99_since(self, t0_s: float) -> float:
        return self.ttft_ms

    def note_scale_up(self, t_s: float) -> None:
        self.ups.append(t_s)


def obs(t: float, spec: int, values: dict[str, float] | None = None) -> Observation:
    return Observation(t_s=t, spec_replicas=spec, ready_replicas=spec, pods=(), total_qps=1.0, total_inflight=0.0,
                       queued=0.0, gate_values=values)


def gate(query: str, cond: str, fail: str) -> GateSpec:
    return GateSpec(query=query, success_condition=cond, failure_condition=fail, interval_s=10.0, count=2)


def guard(inner: Inner, first: GateSpec, *extra: GateSpec, max_wait_s: float = 60.0) -> CanaryGuard:
    return CanaryGuard(inner, first, extra_gates=extra, max_wait_s=max_wait_s)  # type: ignore[arg-type]


def run(g: CanaryGuard, values: dict[str, float] | None, until_s: float = 60.0) -> list[Decision]:
    """The canary step at t=0 (4 → 3), then one cycle a second at 3 replicas until a gate step."""
    answers = [g.decide(obs(0.0, 4))]
    t = 1.0
    while t <= until_s:
        a = g.decide(obs(t, 3, values))
        answers.append(a)
        if a.gate is not None:
            break
        t += 1.0
    return answers


def counts(d: Decision) -> tuple[int, int, str]:
    return d.from_replicas, d.to_replicas, d.action


def test_combining_gates_fails_on_any_failure_and_passes_only_when_all_pass() -> None:
    assert combine(["pass", "pass"]) == "pass"
    assert combine(["pass", "fail"]) == "fail"
    assert combine(["error", "pass"]) == "error"
    assert combine(["pass", "running"]) == "running"
    assert combine(["pass", "inconclusive"]) == "inconclusive"


def test_live_gate_values_that_pass_let_the_plan_proceed() -> None:
    g = guard(Inner(), gate(P99, "result < 1.6", "result >= 2.0"), gate(OK_RATIO, "result >= 0.999", "result < 0.99"))
    answers = run(g, {P99: 0.4, OK_RATIO: 1.0})
    assert counts(answers[0]) == (4, 3, "scale_down")
    assert counts(answers[-1]) == (3, 2, "scale_down")
    assert answers[-1].gate == GateStep("proceed", P99, "pass")
    assert canary_counts(answers) == (1, 0)


def test_one_failing_gate_aborts_and_restores_the_pre_state() -> None:
    inner = Inner()
    g = guard(inner, gate(P99, "result < 1.6", "result >= 2.0"), gate(OK_RATIO, "result >= 0.999", "result < 0.99"))
    answers = run(g, {P99: 0.4, OK_RATIO: 0.95})
    assert counts(answers[-1]) == (3, 4, "scale_up") and answers[-1].gate == GateStep("compensate", P99, "fail")
    assert canary_counts(answers) == (0, 1) and inner.ups == [answers[-1].t_s]
    assert answers[-1].reasons == (
        f"compensate: gate fail ({P99} = 0.4): abort and undo the gated step (rollback channel)",)


def test_a_promql_gate_without_a_measured_value_never_passes() -> None:
    """No Prometheus value (the agents source, or a failed query): inconclusive, then abort at max wait."""
    g = guard(Inner(), gate(P99, "result < 1.6", "result >= 2.0"), max_wait_s=30.0)
    answers = run(g, None)
    assert counts(answers[-1]) == (3, 4, "scale_up") and canary_counts(answers) == (0, 1)
    assert answers[-1].t_s == 30.0
    g2 = guard(Inner(), gate(P99, "result < 1.6", "result >= 2.0"), max_wait_s=30.0)
    assert counts(run(g2, {P99: math.nan})[-1]) == (3, 4, "scale_up")


def test_the_built_in_gate_reads_the_l1_signal_in_the_simulator() -> None:
    g = guard(Inner(ttft_ms=100.0), ttft_gate(2000.0, 0.7))
    assert g.gate.query == L1_TTFT_QUERY
    assert counts(run(g, None)[-1]) == (3, 2, "scale_down")
    bad = guard(Inner(ttft_ms=1900.0), ttft_gate(2000.0, 0.7))
    assert counts(run(bad, None)[-1]) == (3, 4, "scale_up")


def test_the_canary_step_is_the_inner_decision_cut_to_the_first_victim_with_its_explanation() -> None:
    g = guard(Inner(), ttft_gate(2000.0, 0.7))
    canary = g.decide(obs(0.0, 4))
    assert counts(canary) == (4, 3, "scale_down") and canary.victims == (ReplicaId(7),)
    assert canary.gate == GateStep("canary", L1_TTFT_QUERY)
    assert canary.reasons == ("peak demand needs 2", "canary: canary step before the plan")
    assert dict(canary.signals) == {"ttft_p99_ms": 100.0} and dict(canary.plan) == {"profile": "stub"}
    assert canary.policy == "stub" and canary.noteworthy


def test_proceed_removes_the_remaining_victims() -> None:
    answers = run(guard(Inner(), ttft_gate(2000.0, 0.7)), None)
    assert answers[-1].victims == (ReplicaId(5),) and answers[-1].reasons == ("proceed: gate pass, canary healthy",)


def test_cycles_waiting_on_the_gate_are_holds_while_the_inner_policy_keeps_deciding() -> None:
    inner = Inner()
    answers = run(guard(inner, ttft_gate(2000.0, 0.7)), None)
    waiting = answers[1:-1]
    assert waiting and all(counts(d) == (3, 3, "hold") and not d.noteworthy for d in waiting)
    assert inner.decided == len(answers)  # its windows stay warm and its scale-ups are heard


def test_a_scale_up_the_inner_policy_asks_for_while_gated_ends_the_step_and_goes_through() -> None:
    inner = Inner(surge_at=5.0)
    g = guard(inner, ttft_gate(2000.0, 0.7))
    first = g.decide(obs(0.0, 4))
    assert first.gate is not None and first.gate.step == "canary"
    answers = [g.decide(obs(float(t), 3)) for t in range(1, 7)]
    assert [a.action for a in answers[:4]] == ["hold"] * 4
    assert counts(answers[4]) == (3, 4, "scale_up") and answers[4].reasons == ("surge: latency",)
    assert g.gate_queries() == () and g._run is None  # the step is over


def test_a_gate_step_at_the_target_already_is_a_noteworthy_hold() -> None:
    g = guard(Inner(), ttft_gate(2000.0, 0.7))
    g.decide(obs(0.0, 4))
    t, d = 1.0, g.decide(obs(1.0, 2))
    while d.gate is None:
        t += 1.0
        d = g.decide(obs(t, 2))
    assert counts(d) == (2, 2, "hold") and d.gate is not None and d.gate.step == "proceed" and d.noteworthy
    assert d.victims == ()


def test_gate_queries_name_the_promql_gates_only_while_a_step_is_gated() -> None:
    g = guard(Inner(), ttft_gate(2000.0, 0.7), gate(P99, "result < 1.6", "result >= 2.0"),
              gate(OK_RATIO, "result >= 0.999", "result < 0.99"))
    assert g.gate_queries() == ()
    g.decide(obs(0.0, 4))
    assert g.gate_queries() == (P99, OK_RATIO)  # the built-in L1 gate reads no PromQL
    run_to_end = [g.decide(obs(float(t), 3, {P99: 0.4, OK_RATIO: 1.0})) for t in range(1, 40)]
    assert any(d.gate is not None for d in run_to_end) and g.gate_queries() == ()


def test_observe_feeds_the_inner_policy() -> None:
    inner = Inner()
    guard(inner, ttft_gate(2000.0, 0.7)).observe(obs(0.0, 4))
    assert inner.observed == 1


def test_canary_counts_count_proceed_and_compensate_steps_only() -> None:
    steps = [Decision(0.0, "scale_down", 4, 3, gate=GateStep("canary", "q")),
             Decision(1.0, "scale_down", 3, 2, gate=GateStep("proceed", "q", "pass")),
             Decision(2.0, "scale_up", 2, 3),
             Decision(3.0, "hold", 3, 3, gate=GateStep("proceed", "q", "pass")),
             Decision(4.0, "scale_up", 2, 3, gate=GateStep("compensate", "q", "fail"))]
    assert canary_counts(steps) == (2, 1)
    assert canary_counts([]) == (0, 0)


@dataclass
class Layers:
    names: list[tuple[str, dict[str, object]]] = field(default_factory=list)

    def layer(self, name: str, **attrs: object) -> Layers:
        self.names.append((name, dict(attrs)))
        return self

    def set(self, **attrs: object) -> None:
        self.names[-1][1].update(attrs)

    def __enter__(self) -> Layers:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


def test_each_gate_step_opens_a_canary_span_naming_the_step() -> None:
    g, spans = guard(Inner(), ttft_gate(2000.0, 0.7)), Layers()
    g.decide(obs(0.0, 4), spans=spans)
    t = 1.0
    while g.decide(obs(t, 3), spans=spans).gate is None:
        t += 1.0
    results = [a["ebb.gate.result"] for n, a in spans.names if n == "ebb.gate.canary"]
    assert results == ["canary", "proceed"]


def test_gates_load_from_yaml_and_bad_files_name_the_entry() -> None:
    gates = load_gates(f"gates:\n  - query: '{P99}'\n    success_condition: result < 1.6\n", "gates.yaml")
    assert gates[0].query == P99
    with pytest.raises(ConfigError, match="gates.yaml"):
        load_gates("gates: [", "gates.yaml")
    with pytest.raises(ConfigError, match=r"gates\[0\]"):
        load_gates("gates:\n  - success_condition: result < 1\n", "gates.yaml")
    with pytest.raises(ConfigError, match="non-empty list"):
        load_gates("gates: []\n", "gates.yaml")


def test_a_post_scale_down_check_takes_the_whole_step_and_undoes_it_when_a_gate_fails() -> None:
    inner = Inner()
    g = CanaryGuard(inner, gate(P99, "result < 1.6", "result >= 2.0"), canary_replicas=None)  # type: ignore[arg-type]
    first = g.decide(obs(0.0, 4))
    assert counts(first) == (4, 2, "scale_down") and first.gate == GateStep("watch", P99)
    assert first.victims == (ReplicaId(7), ReplicaId(5)), "the whole step, its victims kept"
    t, last = 1.0, first
    while (last := g.decide(obs(t, 2, {P99: 2.5}))).gate is None:
        t += 1.0
    assert counts(last) == (2, 4, "scale_up") and last.gate == GateStep("compensate", P99, "fail")
    assert "rollback channel" in last.reasons[0] and inner.ups == [t]


def test_a_post_scale_down_check_that_passes_lets_the_step_stand() -> None:
    g = CanaryGuard(Inner(), gate(P99, "result < 1.6", "result >= 2.0"), canary_replicas=None)  # type: ignore[arg-type]
    g.decide(obs(0.0, 4))
    t, last = 1.0, None
    while (last := g.decide(obs(t, 2, {P99: 0.4}))).gate is None:
        t += 1.0
    assert counts(last) == (2, 2, "hold") and last.gate == GateStep("proceed", P99, "pass")
    assert g.gate_queries() == ()


def test_a_gates_file_names_post_scale_down_checks_in_their_own_section() -> None:
    text = f"after_scale_down:\n  - query: '{P99}'\n    failure_condition: result >= 2\n    count: 3\n"
    [g] = load_gates(text, "gates.yaml")
    assert g.stage == "after_scale_down" and g.count == 3
    assert load_gates(f"gates:\n  - query: '{P99}'\n    success_condition: result < 1.6\n")[0].stage == "canary"
    both = f"gates:\n  - {{query: q, success_condition: result < 1}}\n{text}"
    with pytest.raises(ConfigError, match="both gates: and after_scale_down:"):
        load_gates(both, "gates.yaml")
    with pytest.raises(ConfigError, match="after_scale_dwn: unknown key"):
        load_gates(text.replace("after_scale_down", "after_scale_dwn"), "gates.yaml")
    with pytest.raises(ConfigError, match=r"after_scale_down\[0\]: stage: unknown key"):
        load_gates(text + "    stage: canary\n", "gates.yaml")
