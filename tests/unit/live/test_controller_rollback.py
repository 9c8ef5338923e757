"""The live controller's rollback channel with in-memory fakes: a gate fails after a scale-down and the
controller compensates it through the ledger and the actuator — or queues it for review, and picks it
up again when an operator retries it."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pytest

from ebb.errors import InputError, PermanentError, SourceUnavailable
from ebb.gates.guard import CanaryGuard
from ebb.gates.metrics_gate import GateSpec
from ebb.ledger.base import Fence
from ebb.ledger.memory import MemoryLedger
from ebb.ledger.review import MemoryCompensationLog
from ebb.live.compensation import CompensationRequest, Compensator
from ebb.live.controller import Controller, ControllerSettings, Proposal
from ebb.model.decision import Decision, action_between
from ebb.model.decisions import CycleRecord, DecisionRecord
from ebb.model.ids import CycleId, DecisionId, RunId
from ebb.model.live import LiveSignals
from ebb.model.observation import FineSignals, Observation, Pipeline, ScaleRequest
from ebb.model.spans import NO_SPANS, Spans
from ebb.telemetry.metrics import EbbMetrics
from ebb.testing.fakes import FakeActuator, FakeSignalSource

Q = "histogram_quantile(0.99, ttft)"


class Clock:
    def __init__(self, t: float = 1_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


@dataclass
class Inner:
    """A scripted policy answering ``want(obs)`` replicas, with what the guard asks of Ebb's (its TTFT
    since a step, scale-ups noted)."""

    want: Any
    spec: str = "scripted"
    interval_s: float = 1.0
    pipeline: Pipeline = Pipeline(1, 1)
    ups: int = 0
    react_interval_s: float | None = None

    def decide(self, obs: Observation, *, spans: Spans = NO_SPANS) -> Decision:
        have, n = obs.spec_replicas, self.want(obs)
        return Decision(obs.t_s, action_between(have, n), have, n, policy=self.spec,
                        reasons=("scripted",) if n != have else ())

    def observe(self, obs: Observation) -> None:
        pass

    def gate_queries(self) -> tuple[str, ...]:
        return ()

    def ttft_p99_since(self, t0_s: float) -> float:
        return float("nan")

    def note_scale_up(self, t_s: float) -> None:
        self.ups += 1


def fresh(clock: Clock) -> FakeSignalSource:
    def produce(since_s: float) -> LiveSignals:
        t = clock.t - 0.1 * np.arange(10)[::-1]
        t = t[t > since_s]
        z = np.zeros(len(t))
        return LiveSignals(FineSignals(t_s=t, prefill_replicas=z + 0.2, slot_replicas=z + 0.2, queued=z),
                           total_qps=1.0, queued=0.0, newest_sample_s=clock.t)
    return FakeSignalSource(produce)


def shrink_once(to: int) -> Any:
    """Wants ``to`` replicas when first asked, then whatever the fleet has."""
    asked = []

    def want(o: Observation) -> int:
        asked.append(o.t_s)
        return to if len(asked) == 1 else o.spec_replicas
    return want


def guarded(want: Any, *, whole: bool = False) -> CanaryGuard:
    gate = GateSpec(query=Q, success_condition="result < 1.6", failure_condition="result >= 2.0", interval_s=1.0,
                    count=2, stage="after_scale_down" if whole else "canary")
    return CanaryGuard(Inner(want), gate, canary_replicas=None if whole else 1)  # type: ignore[arg-type]


def controller(policy: Any, clock: Clock, act: FakeActuator, *, ledger: MemoryLedger | None = None,
               log: MemoryCompensationLog | None = None, probe_value: float = 3.0, **kw: Any) -> Controller:
    settings = kw.pop("settings", ControllerSettings(run_id="r", mode="act", review_poll_s=1.0))
    return Controller(policy, fresh(clock), act, ledger or MemoryLedger(), settings, clock=clock,
                      gate_probe=lambda q: probe_value, compensation_log=log or MemoryCompensationLog(), **kw)


def cycles(c: Controller, clock: Clock, k: int) -> list[Any]:
    out = []
    for _ in range(k):
        out.append(c.cycle())
        clock.t += 1.0
    return out


def ids(ledger: MemoryLedger) -> list[str]:
    return [c.cycle_id for c in ledger.cycles(RunId("r"))]


def test_a_failed_canary_gate_is_compensated_through_the_ledger_and_the_actuator() -> None:
    clock, metrics = Clock(), EbbMetrics()
    act = FakeActuator(4, clock=clock)
    c = controller(guarded(shrink_once(2)), clock, act, metrics=metrics)
    outs = cycles(c, clock, 3)
    assert [o.action for o in outs] == ["scale_down", "scale_up", "hold"], "the gate failed at its first look"
    assert act.state().spec_replicas == 4, "the canary replica came back"
    step = c.ledger.get_decision(DecisionId("r-1-undo"))
    assert step is not None and step.action == "scale_up" and (step.from_replicas, step.to_replicas) == (3, 4)
    assert step.caused_by == ("r-1",) and step.plan["compensates"] == "r-1" and step.plan["step"] == "compensate"
    assert step.cycle_id == "r-1-rollback", "written ahead with the request, in one ledger write"
    assert set(ids(c.ledger)) == {"r-c1", "r-c1-outcome", "r-1-rollback", "r-1-rollback-done"}
    done = c.ledger.get_cycle(CycleId("r-1-rollback-done"))
    assert done is not None and done.snapshot["applied"] == ["r-1"] and done.snapshot["enqueued"] == []
    assert done.snapshot["steps"] == [{"decision_id": "r-1-undo", "target": "serving", "applied": True,
                                       "replicas_after": 4}]
    assert outs[1].decision_id == "r-1-undo" and outs[1].acted and "compensated r-1" in outs[1].note
    assert act.applied_ids == ["r-1", "r-1-undo"]
    text = metrics.exposition().decode()
    assert "ebb_compensation_seconds_count 1.0" in text
    assert 'ebb_compensations_total{result="compensated"} 1.0' in text


def test_a_post_scale_down_check_compensates_the_whole_step() -> None:
    clock = Clock()
    act = FakeActuator(5, clock=clock)
    c = controller(guarded(shrink_once(2), whole=True), clock, act)
    outs = cycles(c, clock, 3)
    assert [(o.action, o.spec_replicas, o.to_replicas) for o in outs] == [
        ("scale_down", 5, 2), ("scale_up", 2, 5), ("hold", 5, 5)]
    first = c.ledger.get_decision(DecisionId("r-1"))
    assert first is not None and first.plan["step"] == "watch"
    assert c.ledger.get_decision(DecisionId("r-1-undo")) is not None


def test_a_passing_check_leaves_the_scale_down_and_writes_no_rollback() -> None:
    clock = Clock()
    act = FakeActuator(4, clock=clock)
    c = controller(guarded(shrink_once(2), whole=True), clock, act, probe_value=0.5)
    cycles(c, clock, 5)
    assert act.state().spec_replicas == 2
    assert not [i for i in ids(c.ledger) if "rollback" in i or "undo" in i]
    assert [d.plan["step"] for d in c.ledger.decisions(RunId("r"))] == ["watch", "proceed"]


def test_a_step_over_the_replica_ceiling_goes_to_review_with_the_reason() -> None:
    # The fleet started above its ceiling (6 > max 4): the canary was clamped to 4, and restoring 6 is
    # over the ceiling — the pod is gone and the budget forbids the scale-up.
    clock, log = Clock(), MemoryCompensationLog()
    act = FakeActuator(6, clock=clock)
    c = controller(guarded(shrink_once(5)), clock, act, log=log,
                   settings=ControllerSettings(run_id="r", mode="act", max_replicas=4))
    outs = cycles(c, clock, 2)
    assert act.state().spec_replicas == 4 and outs[-1].action == "veto"
    [item] = log.list("pending")
    assert item.event_id == "r-1" and "over its cap of 4" in item.reason
    step = c.ledger.get_decision(DecisionId("r-1-undo"))
    assert step is not None and step.action == "veto" and "budget forbids" in step.vetoes[0]
    done = c.ledger.get_cycle(CycleId("r-1-rollback-done"))
    assert done is not None and done.snapshot["enqueued"] == ["r-1"]


class Refusing(FakeActuator):
    """Refuses every scale-up while ``refuse`` is set (the API server says no)."""

    refuse = True

    def apply(self, decision_id: DecisionId, request: ScaleRequest) -> Any:
        if self.refuse and request.replicas > len(self.state().replicas):
            raise PermanentError("forbidden: the namespace's ResourceQuota is exhausted")
        return super().apply(decision_id, request)


def test_a_refused_step_is_queued_and_an_operator_retry_is_carried_out_once() -> None:
    clock, log = Clock(), MemoryCompensationLog()
    act = Refusing(4, clock=clock)
    c = controller(guarded(shrink_once(3)), clock, act, log=log)
    cycles(c, clock, 3)
    [item] = log.list("pending")
    assert "ResourceQuota is exhausted" in item.reason and item.retries == 0
    cycles(c, clock, 3)
    assert act.state().spec_replicas == 3, "an item nobody retried stays queued"
    act.refuse = False
    log.retry("r-1")
    outs = cycles(c, clock, 3)
    assert act.state().spec_replicas == 4 and sum(o.acted for o in outs) == 1
    assert log.show("r-1") is not None and log.show("r-1").status == "resolved"  # type: ignore[union-attr]
    step = c.ledger.get_decision(DecisionId("r-1-undo-r1"))
    assert step is not None and step.action == "scale_up" and step.plan["attempt"] == 1
    assert c.ledger.get_cycle(CycleId("r-1-rollback-r1-done")) is not None
    assert cycles(c, clock, 3)[-1].action == "hold", "a carried-out retry is not repeated"


class Killed(BaseException):
    """A SIGKILL, in process."""


@pytest.mark.parametrize("point", ["after_compensation_ledger", "after_compensation_actuation"])
def test_a_controller_killed_mid_compensation_is_resumed_by_its_successor_exactly_once(point: str) -> None:
    clock, ledger, log = Clock(), MemoryLedger(), MemoryCompensationLog()
    act = FakeActuator(4, clock=clock)

    def fault(where: str) -> None:
        if where == point:
            raise Killed(where)

    c = controller(guarded(shrink_once(3)), clock, act, ledger=ledger, log=log, fault_point=fault)
    c.cycle()
    clock.t += 1.0
    with pytest.raises(Killed):
        c.cycle()
    assert ledger.get_cycle(CycleId("r-1-rollback-done")) is None
    successor = controller(Inner(lambda o: o.spec_replicas), clock, act, ledger=ledger, log=log)
    out = successor.cycle()
    assert act.state().spec_replicas == 4 and act.applied_ids.count(DecisionId("r-1-undo")) == 1
    assert ledger.get_cycle(CycleId("r-1-rollback-done")) is not None and "compensated r-1" in out.note
    assert [c.cycle_id for c in ledger.cycles(RunId("r"))].count("r-1-rollback") == 1
    assert log.done_ids() == {"r-1"}


def test_a_rollback_the_ledger_refused_is_tried_again_next_cycle() -> None:
    clock = Clock()

    class Flaky(MemoryLedger):
        down = False

        def append_cycle(self, cycle: CycleRecord, fence: Any = None) -> bool:
            if self.down and "rollback" in cycle.cycle_id:
                raise SourceUnavailable("etcd at http://127.0.0.1:2379 did not answer (txn)")
            return super().append_cycle(cycle, fence)

    ledger = Flaky()
    act = FakeActuator(4, clock=clock)
    c = controller(guarded(shrink_once(3)), clock, act, ledger=ledger)
    cycles(c, clock, 1)
    ledger.down = True
    outs = cycles(c, clock, 2)
    assert outs[-1].action == "error" and "etcd" in outs[-1].note and act.state().spec_replicas == 3
    ledger.down = False
    assert cycles(c, clock, 1)[-1].acted and act.state().spec_replicas == 4


def test_a_cluster_step_that_narrows_a_rollback_caps_it_and_the_rest_goes_to_review() -> None:
    clock, log = Clock(), MemoryCompensationLog()
    act = FakeActuator(5, clock=clock)
    c = controller(guarded(shrink_once(2), whole=True), clock, act, log=log)
    cycles(c, clock, 1)
    p = c.propose()
    assert isinstance(p, Proposal) and p.compensation is not None and p.decision.to_replicas == 5
    why = "quota: namespace shop at max_gpus 3 (3 GPUs used by managed Deployments)"
    out = c.commit(p, p.decision.retarget(3, reason=why))
    assert out.action == "veto" and act.state().spec_replicas == 2
    [item] = log.list("pending")
    assert "over its cap of 3" in item.reason and "max_gpus 3" in item.reason


def test_in_recommend_mode_a_failed_gate_is_recorded_as_a_recommendation_not_compensated() -> None:
    clock = Clock()
    act = FakeActuator(4, clock=clock)
    c = controller(guarded(shrink_once(3)), clock, act,
                   settings=ControllerSettings(run_id="r", mode="recommend"))
    cycles(c, clock, 2)
    steps = [(d.action, d.plan.get("step")) for d in c.ledger.decisions(RunId("r"))]
    assert steps == [("scale_down", "canary"), ("hold", "compensate")], "nothing was removed, nothing to restore"
    assert not [i for i in ids(c.ledger) if "rollback" in i] and act.applied_ids == []


def test_a_forged_causal_cycle_sends_the_rollback_to_review_and_the_loop_goes_on() -> None:
    clock, ledger, log = Clock(), MemoryLedger(), MemoryCompensationLog()
    for n, cause in ((1, "r-2"), (2, "r-1")):  # r-1 and r-2 each "caused" the other: not a DAG
        d = DecisionRecord(DecisionId(f"r-{n}"), CycleId(f"r-c{n}"), RunId("r"), n, "serving", "scale_down", 5, 4,
                           plan={"mode": "act"}, caused_by=(DecisionId(cause),))
        ledger.append_cycle(CycleRecord(CycleId(f"r-c{n}"), RunId("r"), n, "forged", (d,)))
        ledger.append_cycle(CycleRecord(CycleId(f"r-c{n}-outcome"), RunId("r"), n, "actuator", (),
                                        {"outcome_of": f"r-{n}", "note": "applied", "applied": True,
                                         "replicas_after": 4}))
    log.enqueue("r-1", "compensation did not finish within 800 ms", 1.0)
    log.retry("r-1")
    act = FakeActuator(4, clock=clock)
    c = controller(Inner(lambda o: 3), clock, act, ledger=ledger, log=log)
    out = c.cycle()
    assert out.action == "veto" and "not planned" in out.note and "cycle" in out.note
    [item] = log.list("pending")
    assert item.reason.startswith("rollback not planned: the ledger's causal edges")
    clock.t += 1.0
    assert c.cycle().action == "scale_down", "the policy decides again"


def test_in_a_fleet_a_rollback_over_the_namespace_quota_goes_to_review_with_the_quota_reason() -> None:
    from ebb.config.fleet import FleetWorkload, NamespaceQuota
    from ebb.config.workloads import default_workload_classes
    from ebb.live.fleet_controller import FleetController, FleetMember, FleetSettings
    from ebb.testing.policies import FixedPolicy

    clock, ledger = Clock(), MemoryLedger()
    cls = {c.name: c for c in default_workload_classes()}["offline-training"]
    guard = CanaryGuard(Inner(shrink_once(2)), GateSpec(query=Q, success_condition="result < 1.6", interval_s=1.0,  # type: ignore[arg-type]
                                                        count=2), max_wait_s=2.0)
    other = FixedPolicy(3, spec="fixed")
    members, acts = [], {}
    for dep, pol in (("a", guard), ("b", other)):
        target = f"shop/{dep}"
        acts[target] = FakeActuator(3, target=target, clock=clock)
        ctl = Controller(pol, fresh(clock), acts[target], ledger,
                         ControllerSettings(run_id=f"fleet-shop-{dep}", target=target, mode="act", max_replicas=16,
                                            react_interval_s=0.0), clock=clock)
        w = FleetWorkload(namespace="shop", deployment=dep, workload_class=cls, max_replicas=16)
        members.append(FleetMember(ctl, w, w.ttft_slo_ms(2000.0)))
    fleet = FleetController(members, ledger, FleetSettings(run_id="fleet"), quotas=[NamespaceQuota("shop", 0, 6000)],
                            clock=clock)

    def cycle() -> None:
        clock.t += 1.0
        fleet.cycle()

    cycle()
    assert acts["shop/a"].state().spec_replicas == 2, "the canary step"
    other.replicas = 4
    cycle()
    assert acts["shop/b"].state().spec_replicas == 4, "b takes the freed GPU: the namespace is at its max"
    for _ in range(3):
        cycle()
    assert acts["shop/a"].state().spec_replicas == 2, "the rollback would exceed the quota"
    done = ledger.get_cycle(CycleId("fleet-shop-a-1-rollback-done"))
    assert done is not None and done.snapshot["enqueued"] == ["fleet-shop-a-1"]
    step = ledger.get_decision(DecisionId("fleet-shop-a-1-undo"))
    assert step is not None and step.action == "veto" and "max_gpus 6" in step.vetoes[0]


# -- a rollback never wedges the loop, never applies an untrusted ledger row ---------------------------

def canary_then(later: int) -> Any:
    """Wants 2 replicas when first asked (the canary step), the fleet's while the gate judges it, then ``later``."""
    asked: list[float] = []

    def want(o: Observation) -> int:
        asked.append(o.t_s)
        return 2 if len(asked) == 1 else o.spec_replicas if len(asked) == 2 else later
    return want


class MalformedDone(MemoryLedger):
    """A ledger whose row at ``r-1-rollback-done`` is malformed (as SQLite and etcd report one)."""

    def get_cycle(self, cycle_id: CycleId) -> CycleRecord | None:
        if cycle_id == "r-1-rollback-done":
            raise InputError("malformed cycle r-1-rollback-done: forged")
        return super().get_cycle(cycle_id)

    def append_cycle(self, cycle: CycleRecord, fence: Any = None) -> bool:
        if cycle.cycle_id == "r-1-rollback-done":
            raise InputError("malformed cycle r-1-rollback-done: forged")
        return super().append_cycle(cycle, fence)


def test_a_malformed_done_record_sends_the_rollback_to_review_and_the_policy_decides_again() -> None:
    clock, ledger, log = Clock(), MalformedDone(), MemoryCompensationLog()
    act = FakeActuator(4, clock=clock)
    c = controller(guarded(canary_then(6)), clock, act, ledger=ledger, log=log)
    outs = cycles(c, clock, 3)
    assert [o.action for o in outs[:2]] == ["scale_down", "veto"] and "enqueued for review" in outs[1].note
    assert outs[2].action == "scale_up" and act.state().spec_replicas == 6, "the policy decides again"
    [item] = log.list("pending")
    assert item.event_id == "r-1" and "malformed cycle r-1-rollback-done" in item.reason
    successor = controller(Inner(lambda o: o.spec_replicas), clock, act, ledger=ledger, log=log)
    out = successor.cycle()
    assert out.action == "hold" and "rollback" not in out.note, "a restart does not resurrect a rollback in review"


class UnreadableLog(MemoryCompensationLog):
    """A compensation log whose done marks cannot be read (a malformed row: not transient)."""

    def done_ids(self, among: Any = None) -> set[str]:
        raise InputError("malformed compensation_done row r-1: forged")


def test_any_error_but_a_deferral_ends_the_rollback_in_review_and_the_loop_goes_on() -> None:
    clock, ledger, log = Clock(), MemoryLedger(), UnreadableLog()
    act = FakeActuator(4, clock=clock)
    c = controller(guarded(canary_then(6)), clock, act, ledger=ledger, log=log)
    outs = cycles(c, clock, 3)
    assert outs[1].action == "error" and "sent to review" in outs[1].note and outs[1].to_replicas == 3
    assert outs[2].action == "scale_up", "the request left the queue: the policy decides again"
    [item] = log.list("pending")
    assert item.event_id == "r-1" and "malformed compensation_done row" in item.reason
    successor = controller(Inner(lambda o: o.spec_replicas), clock, act, ledger=ledger, log=log)
    assert successor.cycle().action == "hold", "its request cycle, left without a done record, is not resumed"


class DoneRecordBug(MemoryLedger):
    """A ledger adapter with a bug: writing a rollback's done record raises a plain exception."""

    def append_cycle(self, cycle: CycleRecord, fence: Any = None) -> bool:
        if cycle.cycle_id.endswith("-rollback-done"):
            raise RuntimeError("bug in the ledger adapter")
        return super().append_cycle(cycle, fence)


def test_a_rollback_that_hits_an_unexpected_exception_goes_to_review_and_is_not_resumed_on_the_next_cycle() -> None:
    clock, log = Clock(), MemoryCompensationLog()
    act = FakeActuator(4, clock=clock)
    c = controller(guarded(canary_then(6)), clock, act, ledger=DoneRecordBug(), log=log)
    outs = cycles(c, clock, 4)
    assert outs[1].action == "error" and "internal error" in outs[1].note
    assert [o.action for o in outs[2:]] == ["scale_up", "hold"], "the poison request is neither retried nor resumed"
    [item] = log.list("pending")
    assert item.event_id == "r-1" and "bug in the ledger adapter" in item.reason


def forge_rollback(ledger: MemoryLedger, clock: Clock, **change: Any) -> None:
    """A request cycle ``r-1-rollback`` (no done record) whose one step is forged: ``change`` applied to an
    honest step (``run_id`` changes the cycle's run too)."""
    req = CompensationRequest(DecisionId("r-1"), 0, "forged", clock.t)
    run = change.get("run_id", RunId("r"))
    d = DecisionRecord(DecisionId("r-1-undo"), req.cycle_id, RunId("r"), int(clock.t * 1e9), "serving", "scale_up", 3,
                       4, plan={"mode": "act", "compensates": "r-1"}, caused_by=(DecisionId("r-1"),))
    ledger.append_cycle(CycleRecord(req.cycle_id, run, int(clock.t * 1e9), "rollback", (replace(d, **change),),
                                    {"rollback_of": "r-1", "attempt": 0, "reason": "forged",
                                     "requested_unix_s": clock.t, "cap": None}))


@pytest.mark.parametrize("change, why", [
    ({"to_replicas": 50}, "to 50 replicas, over 4"),
    ({"decision_id": DecisionId("r-1-undo-forged")}, "its id is not r-1-undo"),
    ({"target": "elsewhere"}, "its target is elsewhere"),
    ({"run_id": RunId("q")}, "is not run r's record"),
])
def test_a_forged_or_foreign_recorded_step_is_never_applied_and_goes_to_review(change: dict[str, Any],
                                                                               why: str) -> None:
    clock, ledger, log = Clock(), MemoryLedger(), MemoryCompensationLog()
    act = FakeActuator(4, clock=clock)
    c = controller(guarded(shrink_once(3)), clock, act, ledger=ledger, log=log,
                   settings=ControllerSettings(run_id="r", mode="act", max_replicas=8))
    cycles(c, clock, 1)
    forge_rollback(ledger, clock, **change)  # found at the request's id when the gate fails
    out = c.cycle()
    assert out.action == "veto" and act.state().spec_replicas == 3 and act.applied_ids == ["r-1"]
    [item] = log.list("pending")
    assert item.event_id == "r-1" and why in item.reason and "not applied" in item.reason


def test_a_predecessors_recorded_step_over_max_replicas_is_not_resumed() -> None:
    clock, ledger, log = Clock(), MemoryLedger(), MemoryCompensationLog()
    act = FakeActuator(4, clock=clock)
    settings = ControllerSettings(run_id="r", mode="act", max_replicas=8)
    cycles(controller(Inner(shrink_once(3)), clock, act, ledger=ledger, log=log, settings=settings), clock, 1)
    forge_rollback(ledger, clock, to_replicas=50)  # left without its done record: resumed by the next leader
    out = controller(Inner(lambda o: o.spec_replicas), clock, act, ledger=ledger, log=log, settings=settings).cycle()
    assert out.action == "veto" and act.state().spec_replicas == 3 and act.applied_ids == ["r-1"]
    [item] = log.list("pending")
    assert "scales serving to 50 replicas, over 4" in item.reason


class Flaky(MemoryLedger):
    """Refuses every rollback record while ``down`` (etcd unreachable)."""

    down = False

    def append_cycle(self, cycle: CycleRecord, fence: Any = None) -> bool:
        if self.down and "rollback" in cycle.cycle_id:
            raise SourceUnavailable("etcd at http://127.0.0.1:2379 did not answer (txn)")
        return super().append_cycle(cycle, fence)


def forged_causal_cycle(ledger: MemoryLedger, log: MemoryCompensationLog) -> None:
    """Scale-downs r-1 and r-2 that each "caused" the other (not a DAG), r-1 retried by an operator."""
    for n, cause in ((1, "r-2"), (2, "r-1")):
        d = DecisionRecord(DecisionId(f"r-{n}"), CycleId(f"r-c{n}"), RunId("r"), n, "serving", "scale_down", 5, 4,
                           plan={"mode": "act"}, caused_by=(DecisionId(cause),))
        ledger.append_cycle(CycleRecord(CycleId(f"r-c{n}"), RunId("r"), n, "forged", (d,)))
        ledger.append_cycle(CycleRecord(CycleId(f"r-c{n}-outcome"), RunId("r"), n, "actuator", (),
                                        {"outcome_of": f"r-{n}", "note": "applied", "applied": True,
                                         "replicas_after": 4}))
    log.enqueue("r-1", "compensation did not finish within 800 ms", 1.0)
    log.retry("r-1")


def test_an_unplanned_rollback_whose_record_the_ledger_refuses_still_reaches_the_review_queue() -> None:
    clock, ledger, log = Clock(), Flaky(), MemoryCompensationLog()
    forged_causal_cycle(ledger, log)
    ledger.down = True
    c = controller(Inner(lambda o: 3), clock, FakeActuator(4, clock=clock), ledger=ledger, log=log)
    assert c.cycle().action == "veto"
    [item] = log.list("pending")
    assert item.reason.startswith("rollback not planned: the ledger's causal edges"), "enqueued with the new reason"


class DownLog(MemoryCompensationLog):
    """A compensation log that cannot be reached while ``down``."""

    down = True

    def enqueue(self, event_id: str, reason: str, ts: float) -> Any:
        if self.down:
            raise SourceUnavailable("etcd at http://127.0.0.1:2379 did not answer (review queue)")
        return super().enqueue(event_id, reason, ts)


def test_an_unplanned_rollback_the_review_queue_refuses_is_kept_and_enqueued_when_it_is_back() -> None:
    clock, ledger, log = Clock(), MemoryLedger(), DownLog()
    log.down = False
    forged_causal_cycle(ledger, log)
    log.down = True
    c = controller(Inner(lambda o: 3), clock, FakeActuator(4, clock=clock), ledger=ledger, log=log)
    first = cycles(c, clock, 1)[0]
    assert first.action == "error" and "review queue" in first.note, "deferred, not dropped"
    log.down = False
    assert [o.action for o in cycles(c, clock, 2)] == ["veto", "scale_down"]
    [item] = log.list("pending")
    assert item.reason.startswith("rollback not planned: the ledger's causal edges")


class Reads(MemoryLedger):
    """Counts the ids read one by one; a row of run ``other`` is malformed."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: list[str] = []
        self.history_reads = 0

    def get_cycle(self, cycle_id: CycleId) -> CycleRecord | None:
        self.reads.append(cycle_id)
        if cycle_id.startswith("other-"):
            raise InputError(f"malformed cycle {cycle_id}: forged")
        return super().get_cycle(cycle_id)

    def get_decision(self, decision_id: DecisionId) -> DecisionRecord | None:
        self.reads.append(decision_id)
        if decision_id.startswith("other-"):
            raise InputError(f"malformed decision {decision_id}: forged")
        return super().get_decision(decision_id)

    def cycles(self, run_id: RunId | None = None, limit: int | None = None) -> list[CycleRecord]:
        self.history_reads += limit is not None
        return super().cycles(run_id, limit)


def test_retried_items_of_other_runs_are_never_read_in_the_ledger() -> None:
    clock, ledger, log = Clock(), Reads(), MemoryCompensationLog()
    for item in ("other-3", "r-canary-3", "rr-3"):
        log.enqueue(item, "compensation failed", 1.0)
        log.retry(item)
    c = controller(Inner(lambda o: o.spec_replicas), clock, FakeActuator(4, clock=clock), ledger=ledger, log=log)
    assert [o.action for o in cycles(c, clock, 3)] == ["hold"] * 3
    assert not [r for r in ledger.reads if "3" in r], ledger.reads


def test_a_retry_that_failed_again_is_not_read_again_until_the_next_retry() -> None:
    clock, ledger, log = Clock(), Reads(), MemoryCompensationLog()
    act = Refusing(4, clock=clock)
    c = controller(guarded(shrink_once(3)), clock, act, ledger=ledger, log=log)
    cycles(c, clock, 2)
    log.retry("r-1")
    cycles(c, clock, 2)
    [item] = log.list("pending")
    assert item.retries == 1 and "ResourceQuota" in item.reason, "the retry failed again"
    looked = len(ledger.reads)
    cycles(c, clock, 4)
    assert len(ledger.reads) == looked, "a pending item with the same retries is not looked up again"
    act.refuse = False
    log.retry("r-1")
    cycles(c, clock, 2)
    assert act.state().spec_replicas == 4 and log.show("r-1").status == "resolved"  # type: ignore[union-attr]


class CountingActuator(FakeActuator):
    reads = 0

    def state(self) -> Any:
        self.reads += 1
        return super().state()


def test_a_rollback_cycle_reads_the_run_history_once_and_the_fleet_once() -> None:
    clock, ledger = Clock(), Reads()
    act = CountingActuator(4, clock=clock)
    c = controller(guarded(shrink_once(3)), clock, act, ledger=ledger)
    cycles(c, clock, 1)
    before_reads, before_history = act.reads, ledger.history_reads
    out = cycles(c, clock, 1)[0]
    assert out.action == "scale_up" and out.decision_id == "r-1-undo"
    assert ledger.history_reads - before_history == 1, "planned once: the proposal's plan is carried out"
    reads = act.reads - before_reads
    cycles(c, clock, 1)
    assert reads == act.reads - before_reads - reads, "the rollback cycle reads the fleet as an ordinary one does"


class Elector:
    """Always leading; its fencing token is what the test makes it."""

    token = 1

    def is_leader(self) -> bool:
        return True

    def fence(self) -> Fence:
        return Fence("election/r", self.token)


def test_a_rollback_step_is_not_applied_once_leadership_changed_since_its_ledger_write() -> None:
    clock, elector = Clock(), Elector()
    act = FakeActuator(4, clock=clock)

    def reelected(where: str) -> None:  # deposed and a new term began between the write and the step
        if where == "after_compensation_ledger":
            elector.token = 2

    c = controller(guarded(shrink_once(3)), clock, act, elector=elector, fault_point=reelected)
    outs = cycles(c, clock, 2)
    assert outs[1].action == "error" and "leadership changed" in outs[1].note and act.applied_ids == ["r-1"]
    out = cycles(c, clock, 1)[0]
    assert out.action == "scale_up" and act.state().spec_replicas == 4, "carried out under the new fence"
    assert act.applied_ids == ["r-1", "r-1-undo"]


def acted(ledger: MemoryLedger, n: int, frm: int, to: int, cause: str | None = None) -> None:
    """An acted scale-down ``r-<n>`` of run r with its outcome."""
    d = DecisionRecord(DecisionId(f"r-{n}"), CycleId(f"r-c{n}"), RunId("r"), n, "serving", "scale_down", frm, to,
                       plan={"mode": "act"}, caused_by=(DecisionId(cause),) if cause else ())
    ledger.append_cycle(CycleRecord(CycleId(f"r-c{n}"), RunId("r"), n, "scripted", (d,)))
    ledger.append_cycle(CycleRecord(CycleId(f"r-c{n}-outcome"), RunId("r"), n, "actuator", (),
                                    {"outcome_of": f"r-{n}", "note": "applied", "applied": True,
                                     "replicas_after": to}))


def test_a_resumed_rollback_writes_no_step_after_the_one_its_cap_vetoed() -> None:
    # r-1 (5→4) caused r-2 (7→6), which caused r-3 (4→3): undone r-3, r-2, r-1; r-2's 7 is over the cap of 5.
    clock, ledger, log = Clock(), MemoryLedger(), MemoryCompensationLog()
    acted(ledger, 1, 5, 4)
    acted(ledger, 2, 7, 6, "r-1")
    acted(ledger, 3, 4, 3, "r-2")
    act = FakeActuator(3, clock=clock)
    req = CompensationRequest(DecisionId("r-1"), 0, "gate failed", clock.t)

    def killed(where: str) -> None:
        raise Killed(where)

    first = Compensator(ledger, lambda: log, {"serving": act}, "r", caps={"serving": 5}, clock=clock, fault=killed)
    with pytest.raises(Killed):
        first.run(req)
    assert [d.decision_id for d in ledger.get_cycle(req.cycle_id).decisions] == ["r-3-undo", "r-2-undo"]  # type: ignore[union-attr]
    report = Compensator(ledger, lambda: log, {"serving": act}, "r", caps={"serving": 5}, clock=clock).run(req)
    assert report.result is not None and report.result.applied == ("r-3",) and act.state().spec_replicas == 4
    assert ledger.get_cycle(CycleId("r-1-rollback-s1")) is None and ledger.get_decision(DecisionId("r-1-undo")) is None
    [item] = log.list("pending")
    assert "over its cap of 5" in item.reason


def test_a_retry_killed_mid_compensation_is_resumed_by_the_successor() -> None:
    clock, ledger, log = Clock(), MemoryLedger(), MemoryCompensationLog()
    act = Refusing(4, clock=clock)
    cycles(controller(guarded(shrink_once(3)), clock, act, ledger=ledger, log=log), clock, 2)
    act.refuse = False
    log.retry("r-1")

    def kill(where: str) -> None:
        if where == "after_compensation_ledger":
            raise Killed(where)

    c = controller(Inner(lambda o: o.spec_replicas), clock, act, ledger=ledger, log=log, fault_point=kill)
    with pytest.raises(Killed):
        c.cycle()
    successor = controller(Inner(lambda o: o.spec_replicas), clock, act, ledger=ledger, log=log)
    out = successor.cycle()
    assert out.decision_id == "r-1-undo-r1" and act.state().spec_replicas == 4, "a retry in progress is resumed"
    assert act.applied_ids.count(DecisionId("r-1-undo-r1")) == 1 and log.show("r-1").status == "resolved"  # type: ignore[union-attr]
