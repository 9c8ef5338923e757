"""The live controller with in-memory fakes of every seam: source, actuator, ledger, clock."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from ebb.errors import NotLeader, SourceUnavailable
from ebb.ledger.memory import MemoryLedger
from ebb.live.controller import Controller, ControllerSettings, Proposal
from ebb.live.policy_spec import build_live_policy
from ebb.model.decision import Decision, action_between
from ebb.model.ids import CycleId, DecisionId, ReplicaId, RunId
from ebb.model.live import LiveSignals
from ebb.model.observation import FineSignals, Observation, Pipeline, ScaleRequest
from ebb.model.spans import NO_SPANS, Spans
from ebb.telemetry.tracing import CycleTracer
from ebb.testing.fakes import FakeActuator, FakeSignalSource
from ebb.testing.tracing import in_memory_provider


class Clock:
    def __init__(self, t: float = 1_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


@dataclass
class ScriptedPolicy:
    """A :class:`~ebb.decide.base.Policy` answering ``want(obs)`` replicas, a scale-down naming
    ``victims(obs)`` (at most as many as it removes); it opens the three layer spans as Ebb's does."""

    want: Any
    spec: str = "scripted"
    victims: Callable[[Observation], tuple[ReplicaId, ...]] | None = None
    interval_s: float = 1.0
    pipeline: Pipeline = Pipeline(1, 1)
    observed: int = 0

    def decide(self, obs: Observation, *, spans: Spans = NO_SPANS) -> Decision:
        have, n = obs.spec_replicas, self.want(obs)
        with spans.layer("ebb.l1", **{"ebb.l1.demand_p99_replicas": 1.0}):
            pass
        with spans.layer("ebb.l2"):
            pass
        with spans.layer("ebb.l3"):
            victims = self.victims(obs)[:max(0, have - n)] if self.victims is not None and n < have else ()
        return Decision(obs.t_s, action_between(have, n), have, n, policy=self.spec,
                        reasons=("scripted",) if n != have else (), victims=victims,
                        signals={"demand_p99_replicas": 1.0})

    def observe(self, obs: Observation) -> None:
        self.observed += 1

    def gate_queries(self) -> tuple[str, ...]:
        return ()


def oldest(obs: Observation) -> tuple[ReplicaId, ...]:
    """Victims no actuator picks by itself (they remove the newest first)."""
    return tuple(p.replica for p in obs.pods)


def fresh_signals(clock: Clock, n: int = 10, *, prefill: float = 0.2, slots: float = 0.2,
                  replicas_seen: int | None = None) -> FakeSignalSource:
    def produce(since_s: float) -> LiveSignals:
        t = clock.t - 0.1 * np.arange(n)[::-1]
        t = t[t > since_s]
        z = np.zeros(len(t))
        return LiveSignals(FineSignals(t_s=t, prefill_replicas=z + prefill, slot_replicas=z + slots, queued=z),
                           total_qps=1.0, queued=0.0, newest_sample_s=clock.t, replicas_seen=replicas_seen)
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


@pytest.mark.parametrize("want", [6, 2])
def test_an_incomplete_fleet_still_scales_up_on_its_extrapolated_demand_and_never_down(want: int) -> None:
    clock = Clock()
    seen: list[Observation] = []
    pol = ScriptedPolicy(lambda o: seen.append(o) or want)
    act = FakeActuator(4, clock=clock)
    # fresh samples from 2 of the 4 ready replicas (one agent's pods dropped, say), 1.5 replicas busy
    out = make(pol, clock, source=fresh_signals(clock, prefill=0.5, slots=1.0, replicas_seen=2), actuator=act).cycle()
    fine = seen[0].fine
    assert fine is not None and np.allclose(fine.slot_replicas, 2.0) and np.allclose(fine.prefill_replicas, 1.0)
    if want > 4:
        assert out.action == "scale_up" and out.acted and act.state().spec_replicas == 6
    else:
        assert out.action == "veto" and act.state().spec_replicas == 4 and "incomplete fleet: 2 of 4" in out.note


def test_a_read_with_nothing_new_since_the_last_is_not_stale_until_the_freshest_sample_ages() -> None:
    # The fast path read the newest bucket a moment ago; the cycle's read finds nothing newer and
    # no newest time (the agents' merge then returns an empty page). Stale means the freshest sample
    # seen is older than 5 s, not that this read was empty (a loaded host once blocked a whole run).
    clock = Clock()
    reads = iter([LiveSignals(FineSignals(t_s=np.array([clock.t]), prefill_replicas=np.array([0.2]),
                                          slot_replicas=np.array([0.2]), queued=np.zeros(1)),
                              total_qps=1.0, queued=0.0, newest_sample_s=clock.t)])

    def nothing_new_after_the_first(since_s: float) -> LiveSignals:
        return next(reads, LiveSignals(FineSignals()))

    act = FakeActuator(6, clock=clock)
    c = make(ScriptedPolicy(lambda o: o.spec_replicas - 1), clock, source=FakeSignalSource(nothing_new_after_the_first),
             actuator=act)
    assert c.cycle().acted and act.state().spec_replicas == 5  # the fresh read
    clock.t += 1.0
    assert c.cycle().acted and act.state().spec_replicas == 4  # nothing new, the freshest is 1 s old
    clock.t += 4.5
    out = c.cycle()  # the freshest is 5.5 s old
    assert out.action == "veto" and act.state().spec_replicas == 4
    assert "stale data" in out.note


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

    pol = build_live_policy("ebb:warmup_s=3", slo_ttft_ms=2000, slo_e2e_ms=60000, initial=4, cold_start_s=1.0)
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


def _crashed_decision(ledger: MemoryLedger, clock: Clock, frm: int, to: int, age_s: float = 0.0,
                      victims: Callable[[Observation], tuple[ReplicaId, ...]] | None = None) -> None:
    """Leave an act-mode decision ``frm → to`` without an outcome, as a crash after the write does."""
    first = make(ScriptedPolicy(lambda o: to, victims=victims), clock, ledger=ledger, mode="recommend",
                 actuator=FakeActuator(frm, clock=clock))
    first.cycle()
    (cyc,) = ledger.cycles()
    d = cyc.decisions[0]
    ts = cyc.ts_ns + 1 - int(age_s * 1e9)
    crashed = type(cyc)(cycle_id=CycleId("r1-c2"), run_id=cyc.run_id, ts_ns=ts, policy=cyc.policy,
                        decisions=(type(d)(**{**d.__dict__, "decision_id": DecisionId("r1-2"), "ts_ns": ts,
                                              "cycle_id": CycleId("r1-c2"),
                                              "plan": {**d.plan, "mode": "act"}}),))
    ledger.append_cycle(crashed)


def _outcome_note(ledger: MemoryLedger) -> str:
    outcome = ledger.get_cycle(CycleId("r1-c2-outcome"))
    assert outcome is not None, "the unfinished decision got no outcome"
    return str(outcome.snapshot["note"])


@pytest.mark.parametrize(("frm", "to", "fleet_at", "expect_note", "applies", "final"), [
    (4, 6, 4, "applied after restart", True, 6),
    (4, 6, 6, "found applied after restart", False, 6),
    (4, 6, 7, "superseded", False, 7),
    (4, 2, 4, "applied after restart", True, 2),
    (4, 2, 2, "found applied after restart", False, 2),
    (4, 2, 3, "superseded", False, 3),
])
def test_a_restarted_controller_rechecks_a_decision_left_without_an_outcome(
        frm: int, to: int, fleet_at: int, expect_note: str, applies: bool, final: int) -> None:
    clock = Clock()
    ledger = MemoryLedger()
    _crashed_decision(ledger, clock, frm, to)
    act = FakeActuator(fleet_at, clock=clock)
    second = make(ScriptedPolicy(lambda o: o.spec_replicas), clock, ledger=ledger, actuator=act)
    out = second.cycle()
    assert _outcome_note(ledger).startswith(expect_note)
    assert (act.applied_ids == [DecisionId("r1-2")]) is applies
    assert act.state().spec_replicas == final
    if applies:  # the resuming cycle ends there; the next one decides on the new fleet
        assert (out.decision_id, out.acted, out.note) == (DecisionId("r1-2"), True, "applied after restart")
    # Numbering continues after the ledger's last cycle; a second restart does not re-apply.
    third = make(ScriptedPolicy(lambda o: o.spec_replicas), clock, ledger=ledger, actuator=act)
    third.cycle()
    assert act.applied_ids.count(DecisionId("r1-2")) == (1 if applies else 0)


def test_a_resumed_scale_down_removes_its_recorded_victims_not_the_actuators_choice() -> None:
    clock = Clock()
    ledger = MemoryLedger()
    _crashed_decision(ledger, clock, 4, 2, victims=oldest)
    (d,) = [x for x in ledger.decisions() if x.decision_id == "r1-2"]
    assert d.victims == ("replica-0", "replica-1"), "victims are recorded under the actuator's names"
    act = FakeActuator(4, clock=clock)
    make(ScriptedPolicy(lambda o: o.spec_replicas), clock, ledger=ledger, actuator=act).cycle()
    assert [r.name for r in act.state().replicas] == ["replica-2", "replica-3"]
    assert _outcome_note(ledger) == "applied after restart"


def test_a_resumed_scale_down_whose_victim_left_the_fleet_is_not_resumed() -> None:
    clock = Clock()
    ledger = MemoryLedger()
    _crashed_decision(ledger, clock, 4, 3, victims=oldest)
    act = FakeActuator(5, clock=clock)
    act.apply(DecisionId("someone-else"), ScaleRequest(4, victims=(ReplicaId(0),)))  # replica-0 gone, still 4
    make(ScriptedPolicy(lambda o: o.spec_replicas), clock, ledger=ledger, actuator=act).cycle()
    assert _outcome_note(ledger).startswith("not resumed: victim(s) replica-0 no longer in the fleet")
    assert act.applied_ids == [DecisionId("someone-else")] and act.state().spec_replicas == 4


def test_a_young_scale_down_is_not_resumed_on_stale_data() -> None:
    clock = Clock()
    ledger = MemoryLedger()
    _crashed_decision(ledger, clock, 4, 2)

    def old(since_s: float) -> LiveSignals:
        return LiveSignals(FineSignals(), newest_sample_s=clock.t - 60.0)

    act = FakeActuator(4, clock=clock)
    c = make(ScriptedPolicy(lambda o: o.spec_replicas), clock, ledger=ledger, actuator=act,
             source=FakeSignalSource(old))
    c.cycle()
    note = _outcome_note(ledger)
    assert note.startswith("not resumed") and "no fresh data" in note and "stale data" in note
    assert act.applied_ids == [] and act.state().spec_replicas == 4


def test_a_young_scale_down_is_not_resumed_on_an_incomplete_fleet() -> None:
    clock = Clock()
    ledger = MemoryLedger()
    _crashed_decision(ledger, clock, 4, 2)
    act = FakeActuator(4, clock=clock)
    make(ScriptedPolicy(lambda o: o.spec_replicas), clock, ledger=ledger, actuator=act,
         source=partial_fleet(clock, 3)).cycle()
    note = _outcome_note(ledger)
    assert note.startswith("not resumed") and "incomplete fleet: 3 of 4" in note
    assert act.applied_ids == []


def _forge(ledger: MemoryLedger, clock: Clock, frm: int, to: int, age_s: float) -> None:
    """The red team's forged row (``/work/shared/redteam/forge_ledger.py``, recipe C): an act-mode
    scale-down without an outcome, no victims, written straight into the store."""
    from ebb.model.decisions import CycleRecord, DecisionRecord

    ts = int((clock.t - age_s) * 1e9)
    d = DecisionRecord(decision_id=DecisionId("r1-100000"), cycle_id=CycleId("r1-c100000"), run_id=RunId("r1"),
                       ts_ns=ts, target="local/serving", action="scale_down", from_replicas=frm, to_replicas=to,
                       reasons=("peak demand over 600 s needs 1 at 90%",),
                       plan={"mode": "act", "controller": "live", "policy": "ebb"})
    ledger.append_cycle(CycleRecord(cycle_id=CycleId("r1-c100000"), run_id=RunId("r1"), ts_ns=ts, policy="ebb",
                                    decisions=(d,), snapshot={"replicas": frm, "ready": frm, "draining": 0}))


@pytest.mark.parametrize("source_up", [True, False], ids=["fresh-data", "agent-down"])
def test_a_day_old_forged_scale_down_is_not_resumed(source_up: bool) -> None:
    # Red-team C2: a forged one-day-old 4 → 0 row; whether the agent answers or not, nothing is removed.
    clock = Clock()
    ledger = MemoryLedger()
    _forge(ledger, clock, 4, 0, age_s=86_400)
    src = fresh_signals(clock)
    if not source_up:
        src.fail = SourceUnavailable("agent did not answer")
    act = FakeActuator(4, clock=clock)
    c = make(ScriptedPolicy(lambda o: o.spec_replicas), clock, ledger=ledger, actuator=act, source=src)
    for _ in range(3):
        clock.t += 1.0
        c.cycle()
    assert act.applied_ids == [] and act.state().spec_replicas == 4
    outcome = ledger.get_cycle(CycleId("r1-c100000-outcome"))
    assert outcome is not None and str(outcome.snapshot["note"]).startswith("not resumed: recorded 8640")
    assert outcome.snapshot.get("applied") is None


def test_a_young_forged_scale_down_to_zero_is_held_at_the_replica_floor() -> None:
    clock = Clock()
    ledger = MemoryLedger()
    _forge(ledger, clock, 4, 0, age_s=1.0)
    act = FakeActuator(4, clock=clock)
    c = Controller(ScriptedPolicy(lambda o: o.spec_replicas), fresh_signals(clock), act, ledger,
                   ControllerSettings(run_id="r1", mode="act", min_replicas=2), clock=clock)
    c.cycle()
    assert act.state().spec_replicas == 2
    outcome = ledger.get_cycle(CycleId("r1-c100000-outcome"))
    assert outcome is not None and outcome.snapshot["note"] == "applied after restart (clamped to 2 replicas)"


@pytest.mark.parametrize("to", [2, 6])
def test_a_controller_restarted_in_recommend_mode_does_not_carry_out_an_act_mode_decision(to: int) -> None:
    clock = Clock()
    ledger = MemoryLedger()
    _forge(ledger, clock, 4, to, age_s=1.0)
    act = FakeActuator(4, clock=clock)
    c = Controller(ScriptedPolicy(lambda o: o.spec_replicas), fresh_signals(clock), act, ledger,
                   ControllerSettings(run_id="r1", mode="recommend"), clock=clock)
    c.cycle()
    assert act.applied_ids == [] and act.state().spec_replicas == 4
    outcome = ledger.get_cycle(CycleId("r1-c100000-outcome"))
    assert outcome is not None and outcome.snapshot["note"] == "not resumed: the controller now runs in recommend mode"


def test_a_resumed_stale_scale_down_removes_nothing_even_while_the_source_is_down() -> None:
    # C2 with the real policy: a day-old (forged or honest) 4 → 0 decision, the agent unreachable at restart.
    clock = Clock()
    ledger = MemoryLedger()
    _crashed_decision(ledger, clock, 4, 0, age_s=86_400)
    down = fresh_signals(clock)
    down.fail = SourceUnavailable("agent did not answer")
    act = FakeActuator(4, clock=clock)
    c = make(build_live_policy("ebb", slo_ttft_ms=2000.0, slo_e2e_ms=60000.0, initial=4), clock,
             ledger=ledger, actuator=act, source=down)
    for _ in range(5):
        clock.t += 1.0
        c.cycle()
    assert act.applied_ids == [] and act.state().spec_replicas == 4
    outcome = ledger.get_cycle(CycleId("r1-c2-outcome"))
    assert outcome is not None and str(outcome.snapshot["note"]).startswith("not resumed")
    assert outcome.snapshot.get("applied") is None


@pytest.mark.parametrize(("to", "age_s", "note"), [(40, 600.0, "not resumed: recorded 600 s ago"),
                                                   (40, -3600.0, "not resumed: recorded -3600 s ago"),
                                                   (2, 600.0, "not resumed: recorded 600 s ago"),
                                                   (2, -3600.0, "not resumed: recorded -3600 s ago")])
def test_an_old_or_future_stamped_decision_is_re_decided_not_replayed(to: int, age_s: float, note: str) -> None:
    clock = Clock()
    ledger = MemoryLedger()
    _crashed_decision(ledger, clock, 4, to, age_s=age_s)
    act = FakeActuator(4, clock=clock)
    make(ScriptedPolicy(lambda o: o.spec_replicas), clock, ledger=ledger, actuator=act).cycle()
    assert _outcome_note(ledger).startswith(note)
    assert act.applied_ids == []


def test_a_replayed_scale_up_is_clamped_to_the_replica_ceiling() -> None:
    clock = Clock()
    ledger = MemoryLedger()
    _crashed_decision(ledger, clock, 4, 10_000)
    act = FakeActuator(4, clock=clock)
    c = Controller(ScriptedPolicy(lambda o: o.spec_replicas), fresh_signals(clock), act, ledger,
                   ControllerSettings(run_id="r1", mode="act", max_replicas=8), clock=clock)
    c.cycle()
    assert act.applied_ids == [DecisionId("r1-2")] and act.state().spec_replicas == 8


def test_no_decision_is_applied_outside_the_replica_bounds() -> None:
    clock = Clock()
    act = FakeActuator(4, clock=clock)
    c = Controller(ScriptedPolicy(lambda o: 0), fresh_signals(clock), act, MemoryLedger(),
                   ControllerSettings(run_id="r1", mode="act", min_replicas=2), clock=clock)
    out = c.cycle()
    assert out.to_replicas == 2 and act.state().spec_replicas == 2
    (d,) = c.ledger.decisions(RunId("r1"))
    assert d.to_replicas == 2 and any("clamped" in r for r in d.reasons)


def partial_fleet(clock: Clock, seen: int) -> FakeSignalSource:
    def produce(since_s: float) -> LiveSignals:
        full = fresh_signals(clock).read(since_s)
        return LiveSignals(full.fine, total_qps=1.0, queued=0.0, newest_sample_s=clock.t, replicas_seen=seen)
    return FakeSignalSource(produce)


def test_a_read_covering_fewer_replicas_than_are_ready_blocks_scale_down_but_not_scale_up() -> None:
    clock = Clock()
    act = FakeActuator(4, clock=clock)
    c = make(ScriptedPolicy(lambda o: 1), clock, actuator=act, source=partial_fleet(clock, 1))
    out = c.cycle()
    assert out.action == "veto" and act.state().spec_replicas == 4
    assert "incomplete fleet: 1 of 4 ready replicas reported" in out.note
    up = make(ScriptedPolicy(lambda o: 6), clock, actuator=act, source=partial_fleet(clock, 1))
    assert up.cycle().action == "scale_up" and act.state().spec_replicas == 6


def test_an_unexpected_exception_in_a_cycle_is_an_error_cycle_not_a_crash() -> None:
    clock = Clock()

    def explode(since_s: float) -> LiveSignals:
        raise RecursionError("maximum recursion depth exceeded")
    act = FakeActuator(4, clock=clock)
    c = make(ScriptedPolicy(lambda o: 2), clock, actuator=act, source=FakeSignalSource(explode))
    out = c.cycle()
    assert out.action == "error" and "RecursionError" in out.note
    assert act.state().spec_replicas == 4
    c.source = fresh_signals(clock)
    clock.t += 1.0
    assert c.cycle().action == "scale_down", "the next cycle runs normally"


class SteppingClock:
    """A wall clock whose reading jumps by ``step_s`` once ``real`` passes ``at``."""

    def __init__(self, at: float | None = None, step_s: float = 0.0) -> None:
        self.real, self.at, self.step_s = 0.0, at, step_s

    def __call__(self) -> float:
        jump = self.step_s if self.at is not None and self.real >= self.at else 0.0
        return 1.8e9 + self.real + jump


def _run_steps(clock: SteppingClock, demand_at: Any, steps: int, start: int) -> list[tuple[int, str, int, int]]:
    def produce(since_s: float) -> LiveSignals:
        now = clock()
        t = np.round(np.arange(now - 3.0, now + 1e-9, 0.1), 1)
        t = t[t > since_s]
        d = np.full(len(t), demand_at(clock.real))
        z = np.zeros(len(t))
        return LiveSignals(FineSignals(t_s=t, prefill_replicas=d * 0.5, slot_replicas=d, queued=z,
                                       done_t_s=t.copy(), done_ttft_ms=z + 300.0,
                                       done_e2e_ms=np.full(len(t), np.nan), done_weight=z + 5.0),
                           total_qps=50.0, queued=0.0, newest_sample_s=float(t[-1]) if len(t) else None)
    act = FakeActuator(start, clock=clock)
    pol = build_live_policy("ebb", slo_ttft_ms=2000.0, slo_e2e_ms=60000.0, initial=start)
    mono = {"t": 0.0}
    ctl = Controller(pol, FakeSignalSource(produce), act, MemoryLedger(), ControllerSettings(mode="act"),
                     clock=clock, monotonic=lambda: mono["t"])
    events = []
    for k in range(steps):
        clock.real = mono["t"] = float(k)
        out = ctl.cycle()
        if out.action in ("scale_up", "scale_down") and out.acted:
            events.append((k, out.action, out.spec_replicas, out.to_replicas))
    return events


def test_a_forward_wall_clock_step_does_not_erase_the_policys_memory() -> None:
    # H5 "fwd": 400 s at demand 7 on 8 replicas, then demand 1; the wall clock jumps +700 s at 420 s.
    hi_lo = (lambda t: 7.0 if t < 400 else 1.0)
    stepped = _run_steps(SteppingClock(at=420, step_s=700.0), hi_lo, 3800, 8)
    # The history opened at demand 7: that need is held while it is in the hour of memory (3,666 s of
    # monotonic time, not 2,966 s of the stepped wall clock), and the fleet follows the drop after it.
    downs = [e for e in stepped if e[1] == "scale_down"]
    assert downs and downs[0][0] >= 3666, stepped
    assert stepped == _run_steps(SteppingClock(), hi_lo, 3800, 8)


def test_a_backward_wall_clock_step_does_not_blind_the_controller() -> None:
    # H5 "back": 400 s at demand 3 on 4 replicas, the wall clock jumps -3600 s at 400 s, then a surge to 12.
    surge = (lambda t: 3.0 if t < 400 else 12.0)
    stepped = _run_steps(SteppingClock(at=400, step_s=-3600.0), surge, 460, 4)
    ups = [e for e in stepped if e[1] == "scale_up"]
    assert ups and ups[0][0] <= 405 and max(e[3] for e in ups) >= 13

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
    steps = [d.plan.get("step") for d in c.ledger.decisions()]
    assert steps.count("proceed") == 1 and act.state().spec_replicas == 2
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


def test_a_malformed_ledger_row_is_skipped_on_resume_and_its_cycle_number_never_reused(
        tmp_path: Any, caplog: pytest.LogCaptureFixture) -> None:
    # M5: a row the decoder refuses (here: an unknown action written straight into the SQLite file).
    import sqlite3

    from ebb.ledger.sqlite import SqliteLedger

    path = tmp_path / "ledger.sqlite"
    clock = Clock()
    first = SqliteLedger(path)
    make(ScriptedPolicy(lambda o: o.spec_replicas + 1), clock, ledger=first).cycle()
    make(ScriptedPolicy(lambda o: o.spec_replicas + 1), clock, ledger=first, actuator=FakeActuator(5, clock=clock)).cycle()
    first.close()
    with sqlite3.connect(path) as db:
        db.execute("UPDATE decisions SET action = 'nuke' WHERE decision_id = 'r1-2'")
    db.close()
    store = SqliteLedger(path)
    try:
        act = FakeActuator(6, clock=clock)
        c = make(ScriptedPolicy(lambda o: 7), clock, ledger=store, actuator=act)
        out = c.cycle()
        assert out.action == "scale_up" and out.decision_id == DecisionId("r1-3"), "numbering goes past the bad row"
        assert act.state().spec_replicas == 7
        assert any("malformed row" in r.getMessage() and r.levelname == "ERROR" for r in caplog.records)
    finally:
        store.close()


# -- the fast path between cycles ---------------------------------------------------------------------------

@dataclass
class ReactingPolicy(ScriptedPolicy):
    """A scripted policy with a fast path: ``wish(obs)`` replicas (None = nothing) between cycles."""

    wish: Any = None
    react_interval_s: float | None = 0.1
    reacted: int = 0

    def react(self, obs: Observation, *, spans: Spans = NO_SPANS) -> Decision | None:
        self.reacted += 1
        n = self.wish(obs) if self.wish is not None else None
        if n is None or n <= obs.spec_replicas:
            return None
        return Decision(obs.t_s, "scale_up", obs.spec_replicas, n, policy=self.spec, reasons=("fast path: test",))


def test_a_quiet_fast_path_tick_reads_the_source_and_writes_nothing() -> None:
    clock = Clock()
    pol = ReactingPolicy(lambda o: o.spec_replicas, wish=lambda o: None)
    c = make(pol, clock)
    c.cycle()
    reads = c.source.reads  # type: ignore[attr-defined]
    clock.t += 0.1
    assert c.react() is None
    assert pol.reacted == 1 and c.source.reads == reads + 1  # type: ignore[attr-defined]
    assert len(c.ledger.decisions(RunId("r1"))) == 0


def test_a_fast_path_scale_up_is_recorded_before_it_is_applied_and_counts_as_a_cycle() -> None:
    clock = Clock()
    act = FakeActuator(4, clock=clock)
    pol = ReactingPolicy(lambda o: o.spec_replicas, wish=lambda o: 7)
    c = make(pol, clock, actuator=act)
    c.cycle()
    clock.t += 0.1
    out = c.react()
    assert out is not None and out.fast and out.action == "scale_up" and out.acted
    assert act.state().spec_replicas == 7
    (d,) = c.ledger.decisions(RunId("r1"))
    assert (d.action, d.from_replicas, d.to_replicas, d.reasons) == ("scale_up", 4, 7, ("fast path: test",))
    assert d.decision_id == "r1-2"  # the cycle before it was number 1 (a hold)
    clock.t += 0.1
    assert c.react() is None  # 7 already there: no second request for the same need


def test_the_fast_path_waits_for_a_first_cycle_and_never_acts_on_stale_data() -> None:
    clock = Clock()
    act = FakeActuator(4, clock=clock)
    pol = ReactingPolicy(lambda o: o.spec_replicas, wish=lambda o: 9)
    c = make(pol, clock, actuator=act)
    assert c.react() is None and pol.reacted == 0  # no cycle yet: no fleet read, no leadership settled
    c.cycle()
    c.source.fail = SourceUnavailable("agent down")  # type: ignore[attr-defined]
    clock.t += 0.1
    assert c.react() is None and act.state().spec_replicas == 4


def test_a_policy_without_a_fast_path_is_never_asked_between_cycles() -> None:
    clock = Clock()
    pol = ScriptedPolicy(lambda o: o.spec_replicas)
    c = make(pol, clock)
    c.cycle()
    assert c.react() is None


def test_the_real_ebb_policy_asks_between_cycles_when_a_queue_outgrows_the_fleet() -> None:
    clock = Clock()
    queue = {"n": 0.0}

    def produce(since_s: float) -> LiveSignals:
        t = clock.t - 0.1 * np.arange(5)[::-1]
        t = t[t > since_s]
        z = np.zeros(len(t))
        return LiveSignals(FineSignals(t_s=t, prefill_replicas=z + 4.0, slot_replicas=z, queued=z + queue["n"],
                                       done_t_s=t, done_ttft_ms=z + 100.0, done_e2e_ms=z + 900.0,
                                       done_weight=z + 20.0),
                           total_qps=20.0, queued=queue["n"], newest_sample_s=clock.t)

    pol = build_live_policy("ebb", slo_ttft_ms=2000.0, slo_e2e_ms=60000.0, initial=4, cold_start_s=3.0)
    act = FakeActuator(4, clock=clock)
    c = make(pol, clock, actuator=act, source=FakeSignalSource(produce))
    for _ in range(5):
        c.cycle()
        clock.t += 1.0
    queue["n"] = 400.0  # a burst the 4 replicas cannot absorb within the slack
    clock.t += 0.1
    out = c.react()
    assert out is not None and out.fast and out.to_replicas > 4 and act.state().spec_replicas == out.to_replicas
    (d,) = [d for d in c.ledger.decisions(RunId("r1")) if d.action == "scale_up"]
    assert d.reasons[0].startswith("fast path: need")


def test_a_cycle_is_two_plain_calls_with_its_trace_open_in_between() -> None:
    clock = Clock()
    provider, exporter = in_memory_provider()
    act = FakeActuator(4, clock=clock)
    c = make(ScriptedPolicy(lambda o: 3), clock, actuator=act, tracer=CycleTracer(provider))
    p = c.propose()
    assert isinstance(p, Proposal) and p.decision.to_replicas == 3 and p.cycle.n == 1
    assert not [s for s in exporter.get_finished_spans() if s.name == "ebb.cycle"], "the cycle's span is open"
    assert c.ledger.cycles() == [] and act.applied_ids == [], "nothing recorded or acted before the commit"
    out = c.commit(p)
    assert out.acted and act.state().spec_replicas == 3
    roots = [s for s in exporter.get_finished_spans() if s.name == "ebb.cycle"]
    assert len(roots) == 1 and roots[0].attributes["ebb.decision.action"] == "scale_down"
    children = {s.name for s in exporter.get_finished_spans() if s.context.trace_id == roots[0].context.trace_id}
    assert {"ebb.source", "ebb.decide", "ebb.ledger", "ebb.actuate"} <= children, "both halves in one trace"
    assert c.commit(p) is out and act.applied_ids == ["r1-1"], "committed once"


def test_a_cycle_that_ends_before_deciding_proposes_its_outcome() -> None:
    clock = Clock()

    class Follower:
        def is_leader(self) -> bool:
            return False

        def fence(self) -> None:
            return None

    c = make(ScriptedPolicy(lambda o: 1), clock, elector=Follower())
    out = c.propose()
    assert not isinstance(out, Proposal) and out.action == "follower"
    assert c.commit(out) is out


def test_an_unexpected_exception_in_the_second_half_is_an_error_cycle_with_its_span_closed() -> None:
    clock = Clock()
    provider, exporter = in_memory_provider()

    class Broken(FakeActuator):
        def apply(self, decision_id: DecisionId, request: ScaleRequest) -> Any:
            raise KeyError("a bug in the actuator")

    c = make(ScriptedPolicy(lambda o: 3), clock, actuator=Broken(4, clock=clock), tracer=CycleTracer(provider))
    out = c.cycle()
    assert out.action == "error" and "KeyError" in out.note
    [root] = [s for s in exporter.get_finished_spans() if s.name == "ebb.cycle"]
    assert not root.status.is_ok
    c.actuator = FakeActuator(4, clock=clock)
    clock.t += 1.0
    assert c.cycle().acted, "the next cycle re-reads the ledger and runs normally"


def test_a_proposal_is_committed_only_by_the_controller_that_proposed_it() -> None:
    clock = Clock()
    act = FakeActuator(4, clock=clock)
    a = make(ScriptedPolicy(lambda o: 3), clock, actuator=act)
    b = make(ScriptedPolicy(lambda o: 3), clock, actuator=act)
    p = a.propose()
    assert isinstance(p, Proposal)
    assert b.commit(p).action == "error" and act.applied_ids == []
    assert a.commit(p).acted


class AgentLike(FakeSignalSource):
    """A source that, like the agents', backs scale-downs only on data at most 2 s old."""

    @property
    def down_fresh_s(self) -> float:
        return 2.0


def late_signals(clock: Clock, age_s: Callable[[], float], *, agent: bool = True) -> FakeSignalSource:
    """Ten 100 ms samples of 0.2 busy replicas ending ``age_s()`` before the clock (an agent behind;
    ``agent`` False: a source without its own freshness, such as Prometheus)."""
    def produce(since_s: float) -> LiveSignals:
        end = clock.t - age_s()
        t = end - 0.1 * np.arange(10)[::-1]
        t = t[t > since_s]
        z = np.zeros(len(t))
        return LiveSignals(FineSignals(t_s=t, prefill_replicas=z + 0.2, slot_replicas=z + 0.2, queued=z),
                           total_qps=1.0, queued=0.0, newest_sample_s=end)
    return AgentLike(produce) if agent else FakeSignalSource(produce)


def test_a_source_without_its_own_freshness_backs_scale_downs_up_to_the_staleness_limit() -> None:
    # Prometheus: its scrape interval sets the age (2-3 s at a 1 s scrape), so 3 s old is fresh
    clock = Clock()
    act = FakeActuator(4, clock=clock)
    src = late_signals(clock, lambda: 3.0, agent=False)
    out = make(ScriptedPolicy(lambda o: 2), clock, source=src, actuator=act).cycle()
    assert out.action == "scale_down" and act.state().spec_replicas == 2


@pytest.mark.parametrize("want", [6, 2])
def test_data_three_seconds_old_backs_a_scale_up_and_never_a_scale_down(want: int) -> None:
    clock = Clock()
    act = FakeActuator(4, clock=clock)
    out = make(ScriptedPolicy(lambda o: want), clock, source=late_signals(clock, lambda: 3.0), actuator=act).cycle()
    if want > 4:
        assert out.action == "scale_up" and out.acted and act.state().spec_replicas == 6
    else:
        assert out.action == "veto" and act.state().spec_replicas == 4
        assert "data 3.0 s old: a scale-down needs data at most 2 s old" in out.note


def test_the_datas_freshness_is_logged_once_per_change_of_state(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    # late for three cycles, on time, then stalled (nothing newer arrives) for six, then on time; the
    # age is the freshest sample *seen*'s, so the first late cycle still reads 1.1 s (fresh)
    ages = [0.1, 3.0, 3.0, 3.0, 0.1, 0.1] + [100.0] * 6 + [0.1, 0.1]
    age = [0.1]
    c = make(ScriptedPolicy(lambda o: o.spec_replicas), clock, source=late_signals(clock, lambda: age[0]))
    with caplog.at_level("INFO", logger="ebb.live.controller"):
        for a in ages:
            age[0] = a
            clock.t += 1.0
            c.cycle()
    lines = [r.getMessage() for r in caplog.records if "newest sample" in r.getMessage() or "fresh again" in
             r.getMessage()]
    assert [line.split(":")[0] for line in lines] == [
        "newest sample is 2.1 s old", "data fresh again", "newest sample is 2.1 s old",
        "newest sample is 5.1 s old, over the 5 s allowed (--max-staleness-s)", "data fresh again"], lines


def test_the_fast_path_sees_an_incomplete_fleets_demand_extrapolated_as_the_cycle_does() -> None:
    # One pod's page is missing (2 of 4 ready report, 0.5 busy each): the cycle extrapolated their
    # demand to the fleet, the fast path fed the policy the raw half, so its memory averaged both.
    clock = Clock()
    seen: list[float] = []

    def wish(o: Observation) -> None:
        assert o.fine is not None
        seen.append(float(o.fine.prefill_replicas[-1]))

    pol = ReactingPolicy(lambda o: o.spec_replicas, wish=wish)
    c = make(pol, clock, source=fresh_signals(clock, prefill=1.0, slots=1.0, replicas_seen=2))
    c.cycle()
    clock.t += 0.1
    assert c.react() is None
    assert seen == [pytest.approx(2.0)]  # × 4 ready / 2 seen


def test_in_recommend_mode_the_fast_path_asks_for_a_size_once_a_cycle_not_every_tick() -> None:
    # The fleet never grows in recommend mode: without this, a saturated fleet wrote a ledger row
    # every 100 ms tick for the same wish.
    clock = Clock()
    pol = ReactingPolicy(lambda o: o.spec_replicas, wish=lambda o: 7)
    c = make(pol, clock, mode="recommend")
    c.cycle()
    fired = []
    for _ in range(5):
        clock.t += 0.1
        fired.append(c.react())
    assert [o is not None for o in fired] == [True, False, False, False, False]
    clock.t += 0.5
    c.cycle()  # reads the fleet: still 4, so the next tick may ask again (once)
    clock.t += 0.1
    assert c.react() is not None
    assert len(c.ledger.decisions(RunId("r1"))) == 2
