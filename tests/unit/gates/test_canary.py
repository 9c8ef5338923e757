"""Canary scale-down decision table (ebb.gates.canary)."""

from __future__ import annotations

import pytest

from ebb.gates.canary import DECISION_TABLE, decide
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
