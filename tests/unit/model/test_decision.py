"""The typed Decision (ebb.model.decision): its invariants hold for every count and every retarget."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ebb.model.decision import Decision, GateStep, action_between
from ebb.model.ids import ReplicaId

counts = st.integers(min_value=0, max_value=10_000)


@given(frm=counts, to=st.integers(min_value=-50, max_value=10_000))
def test_any_from_and_to_give_a_valid_change_whose_action_follows_the_counts(frm: int, to: int) -> None:
    d = Decision.change(1.5, frm, to, policy="hpa", reasons=("why",))
    assert d.to_replicas == max(0, to) and d.from_replicas == frm
    assert d.action == action_between(frm, max(0, to))
    assert d.changes == (d.to_replicas != frm) and d.noteworthy == d.changes


def test_a_negative_target_is_clamped_to_zero() -> None:
    assert Decision.change(0.0, 3, -2).to_replicas == 0


@pytest.mark.parametrize(("action", "frm", "to"), [
    ("scale_up", 3, 3), ("scale_up", 3, 2), ("scale_down", 3, 4), ("hold", 3, 4), ("veto", 3, 2), ("pause", 3, 3)])
def test_an_action_that_contradicts_the_counts_is_refused(action: str, frm: int, to: int) -> None:
    with pytest.raises(ValueError, match="Decision"):
        Decision(0.0, action, frm, to)  # type: ignore[arg-type]


@pytest.mark.parametrize(("frm", "to"), [(-1, 0), (0, -1), (True, 1), (1.0, 1)])
def test_counts_must_be_non_negative_ints(frm: object, to: object) -> None:
    with pytest.raises(ValueError, match="replica counts"):
        Decision(0.0, "hold", frm, to)  # type: ignore[arg-type]


@pytest.mark.parametrize(("action", "frm", "to", "victims"), [
    ("scale_down", 4, 3, (ReplicaId(1), ReplicaId(2))),  # more victims than removed replicas
    ("scale_down", 4, 2, (ReplicaId(1), ReplicaId(1))),  # the same victim twice
    ("scale_up", 2, 3, (ReplicaId(1),)),                 # victims on a scale-up
    ("hold", 3, 3, (ReplicaId(1),)),
    ("veto", 3, 3, (ReplicaId(1),)),
])
def test_victims_need_a_scale_down_removing_at_least_that_many_distinct_replicas(
        action: str, frm: int, to: int, victims: tuple[ReplicaId, ...]) -> None:
    with pytest.raises(ValueError, match="victims"):
        Decision(0.0, action, frm, to, victims=victims)  # type: ignore[arg-type]


def test_a_gate_step_must_be_one_of_the_three_steps() -> None:
    with pytest.raises(ValueError, match="GateStep"):
        GateStep("rollback", "q")  # type: ignore[arg-type]


def test_a_hold_with_a_gate_step_is_noteworthy_and_a_plain_hold_is_not() -> None:
    assert Decision(0.0, "hold", 3, 3, gate=GateStep("proceed", "q", "pass")).noteworthy
    assert not Decision(0.0, "hold", 3, 3).noteworthy
    assert Decision(0.0, "veto", 3, 3, vetoes=("latency",)).noteworthy


def test_signals_weights_and_plan_are_read_only_and_keep_nan() -> None:
    src = {"ttft_p99_ms": math.nan}
    d = Decision(0.0, "hold", 1, 1, signals=src, plan={"profile": "lean"})
    src["ttft_p99_ms"] = 1.0
    assert math.isnan(d.signals["ttft_p99_ms"])
    with pytest.raises(TypeError):
        d.signals["x"] = 1.0  # type: ignore[index]
    with pytest.raises(TypeError):
        d.plan["profile"] = "balanced"  # type: ignore[index]


@given(frm=st.integers(min_value=1, max_value=200), data=st.data())
def test_retarget_keeps_the_invariants_and_only_the_victims_still_removed(frm: int, data: st.DataObject) -> None:
    to = data.draw(st.integers(min_value=0, max_value=frm - 1))
    victims = tuple(ReplicaId(i) for i in range(frm - to))
    d = Decision(2.0, "scale_down", frm, to, policy="ebb", victims=victims, reasons=("plan",))
    new_to = data.draw(st.integers(min_value=0, max_value=2 * frm))
    r = d.retarget(new_to, reason="clamped")
    assert (r.from_replicas, r.to_replicas, r.action) == (frm, new_to, action_between(frm, new_to))
    assert r.victims == (victims[:frm - new_to] if new_to < frm else ())
    assert r.reasons == ("plan", "clamped") and r.policy == "ebb" and r.t_s == 2.0
    v = d.retarget(new_to, veto="stale data")
    assert (v.action, v.to_replicas, v.victims, v.vetoes) == ("veto", frm, (), ("stale data",))
