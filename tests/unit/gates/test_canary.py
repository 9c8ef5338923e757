"""Canary scale-down decision table and state machine (ebb.gates.canary)."""

from __future__ import annotations

import dataclasses

import pytest

from ebb.errors import ConfigError
from ebb.gates.canary import (
    DECISION_TABLE,
    TRANSITIONS,
    CanaryPlan,
    CanaryRun,
    RunState,
    decide,
)
from ebb.gates.metrics_gate import Verdict

# Written out by hand (not derived from the code): every (step healthy, gate verdict) pair.
FULL_TABLE: list[tuple[bool | None, Verdict, str]] = [
    (True, "pass", "proceed"),
    (True, "fail", "abort_and_compensate"),
    (True, "error", "abort_and_compensate"),
    (True, "inconclusive", "wait"),
    (True, "running", "wait"),
    (False, "pass", "abort_and_compensate"),
    (False, "fail", "abort_and_compensate"),
    (False, "error", "abort_and_compensate"),
    (False, "inconclusive", "abort_and_compensate"),
    (False, "running", "abort_and_compensate"),
    (None, "pass", "wait"),
    (None, "fail", "abort_and_compensate"),
    (None, "error", "abort_and_compensate"),
    (None, "inconclusive", "wait"),
    (None, "running", "wait"),
]


@pytest.mark.parametrize(("healthy", "gate", "action"), FULL_TABLE)
def test_the_decision_table_before_the_maximum_wait(healthy: bool | None, gate: Verdict,
                                                    action: str) -> None:
    assert decide(healthy, gate, waited_s=0.0, max_wait_s=600.0) == action
    assert decide(healthy, gate, waited_s=599.9, max_wait_s=600.0) == action


@pytest.mark.parametrize(("healthy", "gate", "action"), FULL_TABLE)
def test_waiting_past_the_maximum_wait_aborts_and_everything_else_is_unchanged(
        healthy: bool | None, gate: Verdict, action: str) -> None:
    expected = "abort_and_compensate" if action == "wait" else action
    assert decide(healthy, gate, waited_s=600.0, max_wait_s=600.0) == expected


def test_the_published_table_has_exactly_the_fifteen_rows() -> None:
    assert {(h, g): a for h, g, a in FULL_TABLE} == DECISION_TABLE


def test_decide_refuses_unknown_verdicts_and_negative_waits() -> None:
    with pytest.raises(ValueError, match="unknown"):
        decide(True, "maybe", 0.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="waited_s"):
        decide(True, "pass", -1.0)


# --- plan ---------------------------------------------------------------------------------------

@pytest.mark.parametrize(("plan", "steps"), [
    (CanaryPlan(1), (1,)),
    (CanaryPlan(5), (1, 1, 1, 1, 1)),
    (CanaryPlan(7, canary_replicas=1, step_replicas=3), (1, 3, 3)),
    (CanaryPlan(8, canary_replicas=2, step_replicas=4), (2, 4, 2)),
    (CanaryPlan(3, canary_replicas=3), (3,)),
])
def test_a_plan_splits_the_removal_into_a_canary_and_steps(plan: CanaryPlan,
                                                           steps: tuple[int, ...]) -> None:
    assert plan.steps() == steps and sum(steps) == plan.total_remove


@pytest.mark.parametrize(("total", "fraction", "canary"), [
    (20, 0.1, 2), (20, 0.25, 5), (5, 0.1, 1), (3, 1.0, 3), (7, 0.5, 3),
])
def test_a_fractional_canary_rounds_down_but_is_at_least_one_replica(total: int, fraction: float,
                                                                     canary: int) -> None:
    assert CanaryPlan.from_fraction(total, fraction).canary_replicas == canary


@pytest.mark.parametrize(("kwargs", "key"), [
    ({"total_remove": 0}, "total_remove"),
    ({"total_remove": 2, "canary_replicas": 3}, "canary_replicas: 3 > total_remove 2"),
    ({"total_remove": 2, "step_replicas": 0}, "step_replicas"),
    ({"total_remove": 2, "max_wait_s": -1.0}, "max_wait_s"),
])
def test_invalid_plans_raise_config_error_naming_the_field(kwargs: dict[str, object], key: str) -> None:
    with pytest.raises(ConfigError, match=key):
        CanaryPlan(**kwargs)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="fraction"):
        CanaryPlan.from_fraction(4, 0.0)


def test_a_plan_is_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        CanaryPlan(3).total_remove = 4  # type: ignore[misc]


# --- state machine ------------------------------------------------------------------------------

def test_a_healthy_run_goes_through_every_step_to_done() -> None:
    run = CanaryRun(CanaryPlan(3, canary_replicas=1, step_replicas=2)).start(0.0)
    assert (run.state, run.step_index) == ("canary", 0)
    run = run.step_applied(1.0)
    assert (run.state, run.removed) == ("gating", 1)
    run, action = run.on_gate(True, "running", 61.0)
    assert action == "wait" and run.state == "gating"
    run, action = run.on_gate(True, "pass", 181.0)
    assert (action, run.state, run.step_index) == ("proceed", "proceeding", 1)
    run = run.step_applied(182.0)
    assert (run.state, run.removed, run.gating_since_s) == ("gating", 3, 182.0)
    run, action = run.on_gate(True, "pass", 400.0)
    assert (action, run.state) == ("proceed", "done")
    assert [s for s, _ in run.history] == ["canary", "gating", "proceeding", "gating", "done"]


def test_a_failing_gate_aborts_and_compensation_ends_the_run() -> None:
    run = CanaryRun(CanaryPlan(4)).start(0.0).step_applied(1.0)
    run, action = run.on_gate(True, "fail", 60.0)
    assert (action, run.state, run.removed) == ("abort_and_compensate", "aborted", 1)
    run = run.compensated(61.0)
    assert run.state == "compensated" and TRANSITIONS["compensated"] == frozenset()


def test_a_gate_undecided_past_the_maximum_wait_aborts() -> None:
    run = CanaryRun(CanaryPlan(4, max_wait_s=300.0)).start(0.0).step_applied(10.0)
    run, action = run.on_gate(True, "inconclusive", 309.0)
    assert action == "wait" and run.state == "gating"
    run, action = run.on_gate(True, "inconclusive", 310.0)
    assert (action, run.state) == ("abort_and_compensate", "aborted")


def test_a_step_that_fails_to_apply_aborts() -> None:
    assert CanaryRun(CanaryPlan(2)).start(0.0).step_failed(1.0).state == "aborted"


ALL_STATES: tuple[RunState, ...] = ("planned", "canary", "gating", "proceeding", "done", "aborted",
                                    "compensated")


def test_the_transition_table_covers_every_state_and_only_known_states() -> None:
    assert set(TRANSITIONS) == set(ALL_STATES)
    assert all(nxt <= set(ALL_STATES) for nxt in TRANSITIONS.values())


@pytest.mark.parametrize(("state", "to"), [
    (s, t) for s in ALL_STATES for t in ALL_STATES if t not in TRANSITIONS[s]
])
def test_illegal_transitions_are_refused(state: RunState, to: RunState) -> None:
    run = CanaryRun(CanaryPlan(2), state=state, step_index=0, gating_since_s=0.0)
    with pytest.raises(ValueError, match=f"illegal canary transition {state} -> {to}"):
        run.transition(to, 1.0)


@pytest.mark.parametrize("state", ["planned", "gating", "done", "aborted", "compensated"])
def test_a_step_cannot_be_applied_unless_one_is_in_flight(state: RunState) -> None:
    run = CanaryRun(CanaryPlan(2), state=state, step_index=0, gating_since_s=0.0)
    with pytest.raises(ValueError, match="illegal canary transition"):
        run.step_applied(1.0)


@pytest.mark.parametrize("state", ["planned", "canary", "proceeding", "done", "aborted"])
def test_the_gate_is_only_consulted_while_gating(state: RunState) -> None:
    with pytest.raises(ValueError, match="on_gate needs state gating"):
        CanaryRun(CanaryPlan(2), state=state, step_index=0).on_gate(True, "pass", 1.0)


def test_a_done_run_cannot_be_restarted_or_compensated() -> None:
    run = CanaryRun(CanaryPlan(1)).start(0.0).step_applied(1.0)
    run, _ = run.on_gate(True, "pass", 2.0)
    assert run.state == "done"
    with pytest.raises(ValueError):
        run.start(3.0)
    with pytest.raises(ValueError):
        run.compensated(3.0)
