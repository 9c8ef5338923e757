"""The live controller with in-memory fakes of every seam: source, actuator, ledger, clock."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

from ebb.actuate.base import FakeActuator
from ebb.errors import NotLeader, SourceUnavailable
from ebb.ledger.memory import MemoryLedger
from ebb.live.controller import Controller, ControllerSettings
from ebb.live.policy_spec import build_live_policy
from ebb.model.ids import CycleId, DecisionId, RunId
from ebb.model.live import LiveSignals
from ebb.model.observation import FineSignals, Observation, ScaleRequest
from ebb.sources.live import FakeSignalSource
from ebb.telemetry.tracing import CycleTracer, in_memory_provider


class Clock:
    def __init__(self, t: float = 1_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


@dataclass
class ScriptedPolicy:
    """Answers ``want(obs)``; logs an explanation whenever the answer differs from the fleet."""

    want: Any
    spec: str = "scripted"
    log: list[dict[str, Any]] = field(default_factory=list)
    observed: int = 0

    def decide(self, obs: Observation) -> int | ScaleRequest:
        n = self.want(obs)
        if n != obs.spec_replicas:
            self.log.append({"t_s": obs.t_s, "action": "scale_up" if n > obs.spec_replicas else "scale_down",
                             "from": obs.spec_replicas, "to": n, "reasons": ["scripted"],
                             "signals": {"demand_p99_replicas": 1.0}, "weights": {}, "vetoes": [],
                             "victims": [], "plan": {}})
        return ScaleRequest(n)

    def observe(self, obs: Observation) -> None:
        self.observed += 1


def fresh_signals(clock: Clock, n: int = 10) -> FakeSignalSource:
    def produce(since_s: float) -> LiveSignals:
        t = clock.t - 0.1 * np.arange(n)[::-1]
        t = t[t > since_s]
        z = np.zeros(len(t))
        return LiveSignals(FineSignals(t_s=t, prefill_replicas=z + 0.2, slot_replicas=z + 0.2, queued=z),
                           total_qps=1.0, queued=0.0, newest_sample_s=clock.t)
    return FakeSignalSource(produce)


def make(policy: Any, clock: Clock, *, mode: str = "act", initial: int = 4, source: Any = None,
         ledger: Any = None, actuator: Any = None, **kw: Any) -> Controller:
    return Controller(policy, source or fresh_signals(clock), actuator or FakeActuator(initial, clock=clock),
                      ledger or MemoryLedger(), ControllerSettings(run_id="r1", mode=mode),  # type: ignore[arg-type]
                      clock=clock, **kw)


def test_recommend_mode_records_the_decision_and_never_touches_the_fleet() -> None:
    clock = Clock()
    act = FakeActuator(4, clock=clock)
    c = make(ScriptedPolicy(lambda o: 3), clock, mode="recommend", actuator=act)
    out = c.cycle()
    assert out.action == "scale_down" and not out.acted
    assert act.applied_ids == [] and act.state().spec_replicas == 4
    (d,) = c.ledger.decisions(RunId("r1"))
    assert d.decision_id == "r1-1" and d.plan["mode"] == "recommend"


def test_act_mode_writes_the_decision_before_acting_and_the_outcome_after() -> None:
    clock = Clock()
    c = make(ScriptedPolicy(lambda o: 2), clock)
    out = c.cycle()
    assert out.acted and out.to_replicas == 2
    assert c.actuator.state().spec_replicas == 2
    outcome = c.ledger.get_cycle(CycleId("r1-c1-outcome"))
    assert outcome is not None and outcome.snapshot["outcome_of"] == "r1-1"
    assert outcome.snapshot["replicas_after"] == 2


def test_a_hold_cycle_writes_nothing() -> None:
    clock = Clock()
    c = make(ScriptedPolicy(lambda o: o.spec_replicas), clock)
    assert c.cycle().action == "hold"
    assert c.ledger.cycles() == []


def test_stale_data_blocks_a_scale_down_even_when_the_policy_asks_for_it() -> None:
    clock = Clock()

    def old(since_s: float) -> LiveSignals:
        return LiveSignals(FineSignals(), newest_sample_s=clock.t - 60.0)

    act = FakeActuator(4, clock=clock)
    c = make(ScriptedPolicy(lambda o: 2), clock, source=FakeSignalSource(old), actuator=act)
    out = c.cycle()
    assert out.action == "veto" and act.state().spec_replicas == 4
    (d,) = c.ledger.decisions()
    assert any("blocked by the controller" in v for v in d.vetoes)


def test_an_unreachable_source_blocks_scale_down_but_lets_a_scale_up_through() -> None:
    clock = Clock()
    src = fresh_signals(clock)
    src.fail = SourceUnavailable("http://127.0.0.1:1/: connection refused")
    act = FakeActuator(4, clock=clock)
    down = make(ScriptedPolicy(lambda o: 2), clock, source=src, actuator=act)
    assert down.cycle().action == "veto" and act.state().spec_replicas == 4
    act2 = FakeActuator(4, clock=clock)
    up = make(ScriptedPolicy(lambda o: 6), clock, source=src, actuator=act2)
    assert up.cycle().action == "scale_up" and act2.state().spec_replicas == 6


def test_the_real_ebb_policy_vetoes_scale_down_on_stale_data() -> None:
    clock = Clock()
    fresh = {"on": True}

    def produce(since_s: float) -> LiveSignals:
        if not fresh["on"]:
            return LiveSignals(FineSignals(), newest_sample_s=clock.t - 30.0)
        t = np.arange(since_s + 0.1, clock.t + 1e-9, 0.1)[-10:]
        z = np.zeros(len(t))
        # Completions too: without latency samples the policy also vetoes (p99 unknown, fail safe).
        return LiveSignals(FineSignals(t_s=t, prefill_replicas=z + 0.1, slot_replicas=z + 0.1, queued=z,
                                       done_t_s=t, done_ttft_ms=z + 50.0, done_e2e_ms=z + 900.0,
                                       done_weight=z + 1.0),
                           newest_sample_s=clock.t)

    pol = build_live_policy("ebb:hold_s=5,warmup_s=3,cooldown_s=1,down_interval_s=1", slo_ttft_ms=2000,
                            slo_e2e_ms=60000, initial=4)
    act = FakeActuator(4, clock=clock)
    c = make(pol, clock, source=FakeSignalSource(produce), actuator=act)
    fresh["on"] = False
    for _ in range(20):
        clock.t += 1.0
        c.cycle()
    assert act.state().spec_replicas == 4, "no scale-down while data is stale"
    fresh["on"] = True
    for _ in range(20):
        clock.t += 1.0
        c.cycle()
    assert act.state().spec_replicas < 4, "scales down once fresh data shows the fleet idle"


def test_a_ledger_that_refuses_the_write_means_no_action() -> None:
    clock = Clock()

    class Refusing(MemoryLedger):
        def append_cycle(self, cycle: Any, fence: Any = None) -> bool:
            raise NotLeader("lost the lease")

    act = FakeActuator(4, clock=clock)
    c = make(ScriptedPolicy(lambda o: 2), clock, ledger=Refusing(), actuator=act)
    assert c.cycle().action == "error"
    assert act.applied_ids == []


@pytest.mark.parametrize(("fleet_at", "expect_note", "applies"), [
    (4, "applied after restart", True),
    (2, "found applied after restart", False),
    (7, "superseded", False),
])
def test_a_restarted_controller_reconciles_a_decision_left_without_an_outcome(
        fleet_at: int, expect_note: str, applies: bool) -> None:
    clock = Clock()
    ledger = MemoryLedger()
    first = make(ScriptedPolicy(lambda o: 2), clock, ledger=ledger, mode="recommend")
    first.cycle()
    # Turn the recorded recommendation into an un-actuated act-mode decision (a crash after the write).
    (cyc,) = ledger.cycles()
    d = cyc.decisions[0]
    crashed = type(cyc)(cycle_id=CycleId("r1-c2"), run_id=cyc.run_id, ts_ns=cyc.ts_ns + 1, policy=cyc.policy,
                        decisions=(type(d)(**{**d.__dict__, "decision_id": DecisionId("r1-2"),
                                              "cycle_id": CycleId("r1-c2"),
                                              "plan": {**d.plan, "mode": "act"}}),))
    ledger.append_cycle(crashed)
    act = FakeActuator(fleet_at, clock=clock)
    second = make(ScriptedPolicy(lambda o: o.spec_replicas), clock, ledger=ledger, actuator=act)
    second.cycle()
    outcome = ledger.get_cycle(CycleId("r1-c2-outcome"))
    assert outcome is not None and str(outcome.snapshot["note"]).startswith(expect_note)
    assert (act.applied_ids == [DecisionId("r1-2")]) is applies
    assert act.state().spec_replicas == (2 if fleet_at in (4, 2) else 7)
    # Numbering continues after the ledger's last cycle; a second restart does not re-apply.
    third = make(ScriptedPolicy(lambda o: o.spec_replicas), clock, ledger=ledger, actuator=act)
    third.cycle()
    assert act.applied_ids.count(DecisionId("r1-2")) == (1 if applies else 0)


def test_a_follower_observes_but_never_writes_or_acts() -> None:
    clock = Clock()

    class Follower:
        def is_leader(self) -> bool:
            return False

        def fence(self) -> None:
            return None

    pol = ScriptedPolicy(lambda o: 1)
    act = FakeActuator(4, clock=clock)
    c = make(pol, clock, actuator=act, elector=Follower())
    assert c.cycle().action == "follower"
    assert c.ledger.cycles() == [] and act.applied_ids == [] and pol.observed == 1


def test_every_cycle_is_one_trace_with_a_span_per_layer() -> None:
    clock = Clock()
    provider, exporter = in_memory_provider()
    c = make(ScriptedPolicy(lambda o: 3 if o.spec_replicas == 4 else o.spec_replicas), clock,
             tracer=CycleTracer(provider))
    c.cycle()
    clock.t += 1
    c.cycle()
    spans = exporter.get_finished_spans()
    roots = [s for s in spans if s.name == "ebb.cycle"]
    assert len(roots) == 2 and len({s.context.trace_id for s in roots}) == 2
    names = {s.name for s in spans if s.context.trace_id == roots[0].context.trace_id}
    assert {"ebb.source", "ebb.decide", "ebb.l1", "ebb.l2", "ebb.l3", "ebb.ledger", "ebb.actuate"} <= names


def test_promql_gates_are_measured_only_while_a_canary_step_is_gated() -> None:
    from ebb.gates.guard import CanaryGuard
    from ebb.gates.metrics_gate import GateSpec

    clock = Clock()
    asked: list[str] = []

    def probe(q: str) -> float | None:
        asked.append(q)
        return 0.3

    class Inner(ScriptedPolicy):
        def ttft_p99_since(self, t0_s: float) -> float:
            return float("nan")

        def note_scale_up(self, t_s: float) -> None:
            pass

    guard = CanaryGuard(Inner(lambda o: 2 if o.spec_replicas == 4 else o.spec_replicas),  # type: ignore[arg-type]
                        GateSpec(query="p99_q", success_condition="result < 1.6", interval_s=2.0, count=2))
    act = FakeActuator(4, clock=clock)
    c = make(guard, clock, actuator=act, gate_probe=probe)
    c.cycle()
    assert asked == [] and act.state().spec_replicas == 3, "canary step: one replica first, nothing measured yet"
    for _ in range(6):
        clock.t += 1.0
        c.cycle()
    assert asked and set(asked) == {"p99_q"}
    assert guard.passes == 1 and act.state().spec_replicas == 2
    n = len(asked)
    clock.t += 1.0
    c.cycle()
    assert len(asked) == n, "no canary in flight: no gate queries"


def test_an_unreachable_ledger_stops_acting_says_so_and_resumes_when_back() -> None:
    from ebb.errors import SourceUnavailable as Down

    clock = Clock()

    class Flaky(MemoryLedger):
        down = True

        def append_cycle(self, cycle: Any, fence: Any = None) -> bool:
            if self.down:
                raise Down("etcd at http://127.0.0.1:2379 did not answer (txn)")
            return super().append_cycle(cycle, fence)

    ledger = Flaky()
    act = FakeActuator(4, clock=clock)
    c = make(ScriptedPolicy(lambda o: 3), clock, ledger=ledger, actuator=act)
    out = c.cycle()
    assert out.action == "error" and "etcd" in out.note and act.applied_ids == []
    ledger.down = False
    clock.t += 1.0
    out = c.cycle()
    assert out.acted and act.state().spec_replicas == 3
    assert [d.decision_id for d in ledger.decisions()] == [out.decision_id]
