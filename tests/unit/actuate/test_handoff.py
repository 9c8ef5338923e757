"""The hand-off board: what KEDA is served and what the policy is shown (ebb.decide.handoff)."""

from __future__ import annotations

import logging

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ebb.decide.handoff import HandoffBoard

T = "serving/llm"


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def board(clock: Clock) -> HandoffBoard:
    return HandoffBoard(apply_within_s=60.0, stale_after_s=30.0, clock=clock)


def test_before_any_decision_the_board_serves_the_fleet_as_it_is() -> None:
    c = Clock()
    b = board(c)
    assert b.spec_seen(T, 4) == 4
    r = b.reading(T)
    assert r is not None and (r.desired_replicas, r.current_replicas) == (4, 4)


def test_a_pending_hand_off_is_the_spec_the_policy_sees_until_the_deployment_reaches_it() -> None:
    c = Clock()
    b = board(c)
    b.spec_seen(T, 4)
    b.hand_off(T, 3)
    c.now = 10.0
    assert b.spec_seen(T, 4) == 3  # the HPA has not synced yet
    reading = b.reading(T)
    assert reading is not None and (reading.desired_replicas, reading.current_replicas) == (3, 4)
    assert b.spec_seen(T, 3) == 3  # applied: no longer pending
    assert b.spec_seen(T, 5) == 5  # a later change by someone else is reported as it is


def test_a_hand_off_not_applied_in_time_is_reported_as_it_is_with_one_warning(caplog: pytest.LogCaptureFixture) -> None:
    c = Clock()
    b = board(c)
    b.spec_seen(T, 10)
    b.hand_off(T, 12)
    c.now = 61.0
    with caplog.at_level(logging.WARNING):
        assert b.spec_seen(T, 10) == 10
        assert b.spec_seen(T, 10) == 10
    assert sum("has not applied" in r.message for r in caplog.records) == 1
    reading = b.reading(T)
    assert reading is not None and reading.desired_replicas == 12  # still asked for


def test_a_target_not_read_for_the_stale_limit_has_no_answer() -> None:
    c = Clock()
    b = board(c)
    b.spec_seen(T, 4)
    c.now = 30.5
    assert b.reading(T) is None
    assert b.targets() == (T,)
    assert b.reading("other/dep") is None


def test_the_version_moves_only_when_the_decided_number_changes() -> None:
    c = Clock()
    b = board(c)
    b.spec_seen(T, 4)
    v = b.version
    b.hand_off(T, 4)
    assert b.version == v
    b.hand_off(T, 2)
    assert b.wait_change(v, 0.0) == v + 1


def test_negative_replicas_are_refused() -> None:
    with pytest.raises(ValueError):
        board(Clock()).hand_off(T, -1)


@given(st.lists(st.tuples(st.sampled_from(["read", "hand"]), st.integers(0, 20), st.floats(0, 100)), max_size=40))
def test_the_served_number_is_always_the_last_hand_off_or_else_the_first_read(
        steps: list[tuple[str, int, float]]) -> None:
    c = Clock()
    b = HandoffBoard(stale_after_s=1e9, clock=c)
    expected: int | None = None
    for kind, n, dt in steps:
        c.now += dt
        if kind == "read":
            shown = b.spec_seen(T, n)
            expected = n if expected is None else expected
            assert shown in (n, expected)
        else:
            b.hand_off(T, n)
            expected = n
        r = b.reading(T)
        assert r is not None and r.desired_replicas == expected
