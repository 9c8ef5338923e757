"""Ebb's own fleet in recommend mode: it starts at the real fleet, follows Ebb's recorded recommendations
only, keeps the real fleet's ready count for the completeness check, and never applies."""

from __future__ import annotations

import pytest

from ebb.errors import PermanentError
from ebb.ledger.memory import MemoryLedger
from ebb.live.controller import Controller, ControllerSettings
from ebb.live.settings import CycleOutcome
from ebb.live.shadow_fleet import ShadowFleet
from ebb.model.ids import DecisionId, RunId
from ebb.model.observation import ScaleRequest
from ebb.testing.fakes import FakeActuator
from tests.unit.live.test_controller import Clock, ScriptedPolicy, fresh_signals


def out(action: str, frm: int, to: int, *, did: str | None = "r1-1", acted: bool = False) -> CycleOutcome:
    return CycleOutcome(1, 1.0, action, frm, to, frm, 0.1, None if did is None else DecisionId(did), acted)


def test_ebbs_fleet_starts_at_the_real_one_and_follows_only_recorded_recommendations() -> None:
    clock = Clock()
    real = FakeActuator(6, clock=clock)
    fleet = ShadowFleet(real, cold_start_s=10.0, clock=clock)
    st = fleet.state()
    assert st.spec_replicas == 6 and st.ready_replicas == 6 and st.real_ready == 6 and fleet.as_run == 6
    fleet.follow(out("scale_down", 6, 4))
    assert fleet.state().spec_replicas == 4
    for ignored in (out("hold", 4, 4), out("veto", 4, 4), out("error", 4, 2), out("scale_down", 4, 1, did=None),
                    out("scale_down", 4, 1, acted=True)):
        fleet.follow(ignored)
    assert fleet.state().spec_replicas == 4
    fleet.follow(out("scale_up", 4, 7))
    st = fleet.state()
    assert (st.spec_replicas, st.ready_replicas) == (7, 4)  # new replicas start cold
    clock.t += 10.0
    assert fleet.state().ready_replicas == 7
    fleet.follow(out("scale_up", 7, 9))
    fleet.follow(out("scale_down", 9, 6))  # the starting ones go first
    assert [r.ready_s is not None for r in fleet.state().replicas] == [True] * 6
    assert real.state().spec_replicas == 6 and real.applied_ids == []
    with pytest.raises(PermanentError, match="recommend mode never applies"):
        fleet.apply(DecisionId("r1-9"), ScaleRequest(3))


def run(clock: Clock, actuator: object, watchers: list[object], cycles: int = 5,
        replicas_seen: int | None = 6) -> list[CycleOutcome]:
    step = ScriptedPolicy(lambda o: max(2, o.spec_replicas - 1))
    ctl = Controller(step, fresh_signals(clock, replicas_seen=replicas_seen), actuator,  # type: ignore[arg-type]
                     MemoryLedger(), ControllerSettings(run_id="r1", mode="recommend"), clock=clock,
                     watchers=watchers)  # type: ignore[arg-type]
    outs = []
    for _ in range(cycles):
        clock.t += 1.0
        outs.append(ctl.cycle())
    return outs


def test_on_its_own_fleet_ebb_keeps_stepping_down_where_on_the_real_one_it_repeats_its_first_step() -> None:
    """Why recommend mode needs Ebb's own fleet: seeing the real fleet back at 6 every cycle, a paced
    policy only ever recommends its first step (6 → 5); on its own fleet it goes where it would have."""
    clock = Clock()
    real = FakeActuator(6, clock=clock)
    plain = run(clock, real, [])
    assert [(o.spec_replicas, o.to_replicas) for o in plain] == [(6, 5)] * 5
    fleet = ShadowFleet(FakeActuator(6, clock=clock), cold_start_s=5.0, clock=clock)
    shadowed = run(clock, fleet, [fleet.follow])
    assert [(o.spec_replicas, o.to_replicas) for o in shadowed] == [(6, 5), (5, 4), (4, 3), (3, 2), (2, 2)]
    assert [o.action for o in shadowed][-1] == "hold" and fleet.as_run == 6


def test_the_completeness_check_compares_the_source_with_the_real_fleet_not_ebbs() -> None:
    clock = Clock()
    fleet = ShadowFleet(FakeActuator(6, clock=clock), cold_start_s=0.0, clock=clock)
    fleet.state()
    fleet.resize(9)  # Ebb runs more replicas than the real fleet: the source covers the real 6 only
    assert all(o.note == "" for o in run(clock, fleet, [], cycles=3, replicas_seen=6))
    notes = [o.note for o in run(clock, fleet, [], cycles=2, replicas_seen=3)]
    assert all("3 of 6 ready replicas" in n for n in notes)


def test_a_recommend_decision_is_recorded_on_ebbs_fleet_sizes() -> None:
    clock = Clock()
    fleet = ShadowFleet(FakeActuator(6, clock=clock), cold_start_s=5.0, clock=clock)
    ledger = MemoryLedger()
    ctl = Controller(ScriptedPolicy(lambda o: 3), fresh_signals(clock, replicas_seen=6), fleet, ledger,
                     ControllerSettings(run_id="r1", mode="recommend"), clock=clock, watchers=[fleet.follow])
    clock.t += 1.0
    ctl.cycle()
    clock.t += 1.0
    assert ctl.cycle().action == "hold"
    (d,) = ledger.decisions(RunId("r1"))
    assert (d.from_replicas, d.to_replicas, d.plan["mode"]) == (6, 3, "recommend")
