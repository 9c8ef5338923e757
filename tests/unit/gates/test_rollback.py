"""Rollback channel: compensation order over the causal DAG, cycle detection, idempotent compensation,
the time budget and the manual review queue (ebb.gates.rollback, ebb.ledger.review)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ebb.errors import PermanentError
from ebb.gates.rollback import CompensationStep, EventGraph, ScaleEvent, compensation_order, plan_compensation
from ebb.ledger import MemoryLedger, SqliteLedger
from ebb.ledger.review import (
    CompensationDeferred,
    MemoryCompensationLog,
    ReviewItemNotFound,
    SqliteCompensationLog,
    compensate,
    compensation_log_for,
)


def ev(eid: str, target: str = "svc", pre: int = 4, post: int = 3, caused_by: tuple[str, ...] = ()) -> ScaleEvent:
    return ScaleEvent(eid, target, pre, post, 0.3, "low util", f"snap/{eid}", caused_by)


def ids(events: list[ScaleEvent]) -> list[str]:
    return [e.event_id for e in events]


class Recorder:
    """Fake actuator: final replica count per target and how often each (target, replicas) was set."""

    def __init__(self, on_call: Callable[[], None] | None = None) -> None:
        self.state: dict[str, int] = {}
        self.calls: list[tuple[str, int]] = []
        self.on_call = on_call

    def __call__(self, step: CompensationStep) -> None:
        if self.on_call is not None:
            self.on_call()
        self.state[step.target] = step.restore_replicas
        self.calls.append((step.target, step.restore_replicas))


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


# -- ordering ---------------------------------------------------------------------------------------------

def test_a_chain_is_undone_from_the_leaf_up_to_the_root() -> None:
    g = EventGraph([ev("a"), ev("b", caused_by=("a",)), ev("c", caused_by=("b",))])
    assert ids(compensation_order(g, ["a"])) == ["c", "b", "a"]


def test_only_descendants_of_the_roots_are_undone() -> None:
    g = EventGraph([ev("a"), ev("b", caused_by=("a",)), ev("x"), ev("y", caused_by=("x",))])
    assert ids(compensation_order(g, ["a"])) == ["b", "a"]
    assert ids(compensation_order(g, ["b"])) == ["b"]


def test_a_diamond_undoes_the_shared_child_first_and_ties_by_event_id() -> None:
    g = EventGraph([ev("root"), ev("m2", caused_by=("root",)), ev("m1", caused_by=("root",)),
                    ev("leaf", caused_by=("m1", "m2"))])
    assert ids(compensation_order(g, ["root"])) == ["leaf", "m1", "m2", "root"]


def test_the_order_does_not_depend_on_the_input_order() -> None:
    events = [ev("r"), ev("c1", caused_by=("r",)), ev("c2", caused_by=("r",)), ev("g", caused_by=("c2",))]
    assert compensation_order(EventGraph(events), ["r"]) == compensation_order(EventGraph(events[::-1]), ["r"])


def test_plan_restores_each_target_to_its_pre_replicas() -> None:
    g = EventGraph([ev("a", "chat", 5, 4), ev("b", "embed", 3, 1, ("a",))])
    assert plan_compensation(g, ["a"]) == [CompensationStep("b", "embed", 3), CompensationStep("a", "chat", 5)]


# -- validation -------------------------------------------------------------------------------------------

def test_a_cycle_in_the_causal_edges_is_refused_naming_its_events() -> None:
    with pytest.raises(ValueError, match=r"cycle among events \['a', 'b', 'c'\]"):
        EventGraph([ev("a", caused_by=("c",)), ev("b", caused_by=("a",)), ev("c", caused_by=("b",))])


def test_an_event_caused_by_itself_is_refused() -> None:
    with pytest.raises(ValueError, match="itself"):
        ev("a", caused_by=("a",))


def test_an_edge_to_an_unknown_event_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown event 'ghost'"):
        EventGraph([ev("a", caused_by=("ghost",))])


def test_a_duplicate_event_id_is_refused() -> None:
    with pytest.raises(ValueError, match="duplicate"):
        EventGraph([ev("a"), ev("a")])


def test_an_unknown_root_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown root"):
        compensation_order(EventGraph([ev("a")]), ["nope"])


def test_negative_replicas_are_refused() -> None:
    with pytest.raises(ValueError, match="pre_replicas"):
        ev("a", pre=-1)


# -- idempotency (property) -------------------------------------------------------------------------------

@st.composite
def dags(draw: st.DrawFn) -> tuple[EventGraph, list[str]]:
    n = draw(st.integers(1, 12))
    events = []
    for i in range(n):
        parents = draw(st.sets(st.integers(0, i - 1), max_size=3)) if i else set()
        target = draw(st.sampled_from(["chat", "embed", "code", "rank"]))
        pre, post = draw(st.integers(1, 8)), draw(st.integers(0, 8))
        events.append(ev(f"e{i:02d}", target, pre, post, tuple(f"e{p:02d}" for p in sorted(parents))))
    roots = draw(st.lists(st.sampled_from([e.event_id for e in events]), min_size=1, max_size=3))
    return EventGraph(events), roots


@settings(max_examples=150, deadline=None)
@given(dags())
def test_compensating_twice_leaves_the_same_state_as_once_and_applies_each_step_at_most_once(
        case: tuple[EventGraph, list[str]]) -> None:
    graph, roots = case
    once, twice = Recorder(), Recorder()
    compensate(graph, roots, once, MemoryCompensationLog())
    log = MemoryCompensationLog()
    first = compensate(graph, roots, twice, log)
    second = compensate(graph, roots, twice, log)
    assert twice.state == once.state
    assert first.completed and second.completed and second.applied == ()
    assert sorted(second.skipped) == sorted(first.applied)
    assert len(twice.calls) == len(plan_compensation(graph, roots))
    assert len(set(first.applied)) == len(first.applied)
    last_step = {s.target: s.restore_replicas for s in plan_compensation(graph, roots)}
    assert twice.state == last_step  # each target ends at the pre-state of its last-undone event


@settings(max_examples=60, deadline=None)
@given(dags(), st.integers(0, 12))
def test_a_run_interrupted_by_the_budget_and_finished_later_ends_like_one_full_run(
        case: tuple[EventGraph, list[str]], cut: int) -> None:
    graph, roots = case
    full = Recorder()
    compensate(graph, roots, full, MemoryCompensationLog())
    clock = FakeClock()
    calls = 0

    def tick() -> None:
        nonlocal calls
        calls += 1
        if calls >= cut:
            clock.now = 10.0

    resumed, log = Recorder(on_call=tick), MemoryCompensationLog()
    compensate(graph, roots, resumed, log, clock=clock)
    clock.now = 0.0
    calls = -10_000
    compensate(graph, roots, resumed, log, clock=clock)
    assert resumed.state == full.state
    assert len(resumed.calls) == len(full.calls)


def test_a_second_run_on_the_same_sqlite_log_applies_nothing(tmp_path: Path) -> None:
    g = EventGraph([ev("a", "chat", 5, 4), ev("b", "embed", 3, 1, ("a",))])
    act = Recorder()
    with SqliteCompensationLog(tmp_path / "l.sqlite") as log:
        assert compensate(g, ["a"], act, log).applied == ("b", "a")
    with SqliteCompensationLog(tmp_path / "l.sqlite") as log:
        again = compensate(g, ["a"], act, log)
    assert again.applied == () and again.skipped == ("b", "a") and act.calls == [("embed", 3), ("chat", 5)]


# -- budget and review queue ------------------------------------------------------------------------------

def test_a_slow_actuator_past_the_budget_stops_and_enqueues_the_unfinished_root() -> None:
    clock = FakeClock()

    def slow() -> None:
        clock.now += 0.3

    g = EventGraph([ev(f"s{i}", f"svc{i}", caused_by=(("s0",) if i else ())) for i in range(5)])
    log, act = MemoryCompensationLog(), Recorder(on_call=slow)
    res = compensate(g, ["s0"], act, log, budget_s=0.8, clock=clock, wall_clock=lambda: 1000.0)
    assert not res.completed
    assert res.applied == ("s1", "s2", "s3")  # 0.0, 0.3, 0.6 are within budget; 0.9 is not
    assert res.remaining == ("s4", "s0") and res.enqueued == ("s0",)
    [item] = log.list()
    assert item.event_id == "s0" and item.status == "pending" and item.ts == 1000.0
    assert "within 800 ms" in item.reason and "2 step(s) left" in item.reason


def test_only_roots_with_unfinished_steps_are_enqueued() -> None:
    clock = FakeClock()

    def slow() -> None:
        clock.now += 0.5

    g = EventGraph([ev("a", "x"), ev("b", "y"), ev("c", "z", caused_by=("b",))])
    log = MemoryCompensationLog()
    res = compensate(g, ["a", "b"], Recorder(on_call=slow), log, budget_s=0.8, clock=clock)
    assert res.applied == ("a", "c") and res.enqueued == ("b",)


def test_a_failing_actuator_enqueues_the_root_with_the_error() -> None:
    def boom(step: CompensationStep) -> None:
        raise RuntimeError("api server said no")

    log = MemoryCompensationLog()
    res = compensate(EventGraph([ev("a")]), ["a"], boom, log)
    assert not res.completed and res.error == "RuntimeError: api server said no"
    assert "api server said no" in log.list()[0].reason


def test_a_non_positive_budget_is_refused() -> None:
    with pytest.raises(ValueError, match="budget_s"):
        compensate(EventGraph([ev("a")]), ["a"], Recorder(), MemoryCompensationLog(), budget_s=0)


@pytest.mark.parametrize("make", [lambda p: MemoryCompensationLog(), lambda p: SqliteCompensationLog(p / "q.db")],
                         ids=["memory", "sqlite"])
def test_review_items_can_be_resolved_and_retried(make: Callable[[Path], MemoryCompensationLog], tmp_path: Path) -> None:
    log = make(tmp_path)
    log.enqueue("b", "slow", 2.0)
    log.enqueue("a", "slow", 1.0)
    assert [i.event_id for i in log.list()] == ["a", "b"]
    done = log.resolve("a", "scaled by hand")
    assert done.status == "resolved" and done.note == "scaled by hand"
    assert [i.event_id for i in log.list("pending")] == ["b"]
    again = log.retry("a")
    assert again.status == "pending" and again.retries == 1
    assert log.enqueue("a", "slow again", 3.0).retries == 1
    with pytest.raises(ReviewItemNotFound):
        log.resolve("zzz", "")
    assert log.show("zzz") is None
    log.close()


def test_a_step_that_cannot_be_recorded_stops_the_run_without_queueing_it() -> None:
    def unrecorded(step: CompensationStep) -> None:
        raise CompensationDeferred("etcd at http://127.0.0.1:2379 did not answer")

    log = MemoryCompensationLog()
    with pytest.raises(CompensationDeferred):
        compensate(EventGraph([ev("a")]), ["a"], unrecorded, log)
    assert log.list() == [] and log.done_ids() == set()


def test_an_ebb_error_goes_to_review_with_its_own_words() -> None:
    def refused(step: CompensationStep) -> None:
        raise PermanentError("restoring svc to 4 replicas is over its cap of 3 (max_replicas)")

    log = MemoryCompensationLog()
    res = compensate(EventGraph([ev("a")]), ["a"], refused, log)
    assert res.error == "restoring svc to 4 replicas is over its cap of 3 (max_replicas)"
    assert res.reason is not None and res.reason.startswith("compensation failed: restoring svc")
    assert log.list()[0].reason == f"{res.reason}; 1 step(s) left"


def test_the_log_next_to_a_ledger_shares_its_store(tmp_path: Path) -> None:
    with SqliteLedger(tmp_path / "l.sqlite") as ledger:
        log = compensation_log_for(ledger)
        assert isinstance(log, SqliteCompensationLog) and log.path == str(tmp_path / "l.sqlite")
        log.enqueue("a", "why", 1.0)
        log.close()
    with SqliteCompensationLog(tmp_path / "l.sqlite", create=False) as again:
        assert [i.event_id for i in again.list()] == ["a"]
    assert isinstance(compensation_log_for(MemoryLedger()), MemoryCompensationLog)
