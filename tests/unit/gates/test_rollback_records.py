"""The rollback plan from ledger records (ebb.gates.rollback.scale_events): which recorded decisions are
events, their pre-state and causal edges, and the order a root's compensation takes."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from ebb.gates.rollback import EventGraph, plan_compensation, restored, scale_events
from ebb.model.decisions import CycleRecord, DecisionRecord
from ebb.model.ids import CycleId, DecisionId, RunId


def decision(n: int, frm: int, to: int, *, target: str = "shop/checkout", caused: tuple[str, ...] = (),
             **plan: Any) -> CycleRecord:
    action = "scale_down" if to < frm else "scale_up" if to > frm else "veto"
    d = DecisionRecord(DecisionId(f"r-{n}"), CycleId(f"r-c{n}"), RunId("r"), n * 1_000_000_000, target, action,  # type: ignore[arg-type]
                       frm, to, reasons=(f"plan {n}",), signals={"need_replicas": 1.5},
                       plan={"mode": "act", **plan}, caused_by=tuple(DecisionId(c) for c in caused))
    return CycleRecord(CycleId(f"r-c{n}"), RunId("r"), n * 1_000_000_000, "ebb", (d,))


def outcome(n: int, *, after: int | None = None, applied: bool = True, note: str = "applied") -> CycleRecord:
    snap: dict[str, Any] = {"outcome_of": f"r-{n}", "note": note}
    if after is not None:
        snap.update(applied=applied, replicas_before=0, replicas_after=after, removed=[], added=[])
    return CycleRecord(CycleId(f"r-c{n}-outcome"), RunId("r"), n * 1_000_000_000 + 1, "actuator", (), snap)


def test_an_acted_scale_down_is_an_event_with_its_pre_state() -> None:
    [e] = scale_events([decision(1, 4, 3), outcome(1, after=3)])
    assert (e.event_id, e.target, e.pre_replicas, e.post_replicas) == ("r-1", "shop/checkout", 4, 3)
    assert e.pre_util_ratio == 1.5 / 4 and e.reason == "plan 1" and e.config_snapshot_ref == "r-c1"


def test_only_scale_downs_that_took_effect_are_events() -> None:
    cycles = [decision(1, 4, 3),                                   # no outcome: never acted (or crashed)
              decision(2, 4, 3), outcome(2, after=4, applied=False),  # superseded by another writer
              decision(3, 3, 5), outcome(3, after=5),                # a scale-up
              decision(4, 4, 4), outcome(4, after=4),                # a veto
              decision(5, 5, 4, compensates="r-0"), outcome(5, after=4),  # a compensation step
              decision(6, 4, 2), outcome(6, note="found applied after restart"),
              decision(7, 4, 2), outcome(7, after=2, applied=False),  # applied by a predecessor (same id)
              decision(8, 4, 2), outcome(8, note="not resumed: recorded 90 s ago")]
    assert [e.event_id for e in scale_events(cycles)] == ["r-6", "r-7"]


def test_causal_edges_to_events_are_kept_and_others_dropped() -> None:
    cycles = [decision(1, 5, 4, step="canary"), outcome(1, after=4),
              decision(2, 4, 2, caused=("r-1", "r-zz"), step="proceed"), outcome(2, after=2)]
    events = {e.event_id: e for e in scale_events(cycles)}
    assert events["r-2"].caused_by == ("r-1",)
    steps = plan_compensation(EventGraph(events.values()), ["r-1"])
    assert [(s.event_id, s.restore_replicas) for s in steps] == [("r-2", 4), ("r-1", 5)]
    assert restored(steps) == {"shop/checkout": 5}, "the target ends at the oldest pre-state"


@st.composite
def runs(draw: st.DrawFn) -> list[CycleRecord]:
    n = draw(st.integers(1, 10))
    out: list[CycleRecord] = []
    for i in range(1, n + 1):
        frm = draw(st.integers(2, 9))
        to = draw(st.integers(1, frm - 1))
        parents = tuple(f"r-{p}" for p in draw(st.sets(st.integers(1, i), max_size=2)) if p < i)
        out.append(decision(i, frm, to, target=draw(st.sampled_from(["a", "b", "c"])), caused=parents))
        if draw(st.booleans()):
            out.append(outcome(i, after=to))
    return out


@settings(max_examples=100, deadline=None)
@given(runs())
def test_the_events_of_any_run_form_a_graph_whose_plan_undoes_each_root_once_children_first(
        cycles: list[CycleRecord]) -> None:
    events = scale_events(cycles)
    graph = EventGraph(events)  # never refused: edges only to earlier events, no cycle
    for root in [e.event_id for e in events]:
        steps = plan_compensation(graph, [root])
        order = [s.event_id for s in steps]
        assert order[-1] == root and len(set(order)) == len(order)
        for s in steps:  # every event undone after everything it caused
            for child in graph.children(s.event_id):
                assert order.index(child) < order.index(s.event_id)
