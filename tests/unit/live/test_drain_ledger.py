"""Drain records written to the ledger by the live side: in order, fenced, bounded, off the actuator's thread;
the controller attaches the writer in act mode only and detaches it on close."""

from __future__ import annotations

import logging
import threading
from typing import Any

import pytest

from ebb.actuate.drain_report import DrainReporter
from ebb.errors import NotLeader, SourceUnavailable
from ebb.ledger import Fence, MemoryLedger
from ebb.live.drain_ledger import DrainLedger
from ebb.model.decisions import CycleRecord
from ebb.model.drains import DrainEnd, DrainEvent, DrainObserver, DrainStart, DrainStep, drain_of
from ebb.model.ids import RunId
from ebb.testing.fakes import FakeActuator

from tests.unit.live.test_controller import Clock, ScriptedPolicy, make

T0 = 1_767_607_200_000_000_000


def events(worker: str = "pod-a") -> list[DrainEvent]:
    return [DrainStart(T0, T0, "t", worker, "r1-3", "sleep", 120.0),
            DrainStep(T0 + 10**8, T0, "t", worker, "r1-3", 2, 0.1),
            DrainEnd(T0 + 10**9, T0, "t", worker, "r1-3", "drained", "slept", 0, 1.0)]


def recorded(ledger: MemoryLedger) -> list[DrainEvent]:
    return [e for c in ledger.cycles(RunId("r1")) if (e := drain_of(c)) is not None]


def test_records_told_from_another_thread_land_in_order_under_the_fence() -> None:
    ledger = MemoryLedger()
    w = DrainLedger(ledger, "r1", fence=lambda: Fence("/ebb/leader", 7))
    told = events("pod-a") + events("pod-b")
    t = threading.Thread(target=lambda: [w(e) for e in told])
    t.start()
    t.join()
    assert w.flush(5.0)
    assert recorded(ledger) == sorted(told, key=lambda e: (e.ts_ns, e.worker)) and w.written == 6
    assert {c.fencing_token for c in ledger.cycles(RunId("r1"))} == {7}
    w(told[0])  # told again (a resumed drain): already stored, nothing changes
    w(DrainStart(T0, T0, "t", "pod-a", "r1-3", "release", 30.0))  # a differing start under its id: the first stays
    assert w.flush(5.0) and recorded(ledger)[0] == told[0] and w.dropped == 0
    w.close()
    w(told[1])  # after close: dropped, never raised
    assert w.dropped == 1


def test_a_deposed_leader_writes_nothing_and_a_busy_ledger_is_retried_once(caplog: pytest.LogCaptureFixture) -> None:
    ledger = MemoryLedger()

    def lapsed() -> Any:
        raise NotLeader("leadership lapsed")
    w = DrainLedger(ledger, "r1", fence=lapsed)
    with caplog.at_level(logging.WARNING, logger="ebb.live.drain_ledger"):
        for e in events():
            w(e)
        assert w.flush(5.0)
    assert recorded(ledger) == [] and w.dropped == 3
    assert sum("not written" in m for m in caplog.messages) == 1  # one line per 10 s

    class Busy(MemoryLedger):
        fails = 1

        def append_cycle(self, cycle: CycleRecord, fence: Fence | None = None) -> bool:
            if self.fails:
                self.fails -= 1
                raise SourceUnavailable("etcd: no answer")
            return super().append_cycle(cycle, fence)
    busy = Busy()
    w2 = DrainLedger(busy, "r1")
    w2(events()[0])
    assert w2.flush(5.0) and w2.written == 1 and len(busy.cycles()) == 1


def test_a_full_queue_drops_and_counts_and_never_blocks() -> None:
    gate = threading.Event()

    class Slow(MemoryLedger):
        def append_cycle(self, cycle: CycleRecord, fence: Fence | None = None) -> bool:
            gate.wait(5.0)
            return super().append_cycle(cycle, fence)
    w = DrainLedger(Slow(), "r1", max_queued=2)
    for k in range(6):
        w(DrainStep(T0 + k, T0, "t", "pod-a", "", k, 0.0))
    gate.set()
    assert w.flush(5.0) and w.written + w.dropped == 6 and w.dropped >= 3


class DrainingActuator(FakeActuator):
    """The fake actuator with a drain reporter: each victim drains and sleeps at once."""

    def __init__(self, initial: int, **kw: Any) -> None:
        super().__init__(initial, **kw)
        self.drains = DrainReporter(self.target)

    def observe_drains(self, observer: DrainObserver | None) -> None:
        self.drains.observer = observer

    def apply(self, decision_id: Any, request: Any) -> Any:
        res = super().apply(decision_id, request)
        for name in res.removed:
            self.drains.start(name, decision_id, "sleep", 120.0)
            self.drains.read(name, 1.0)
            self.drains.end(name, "drained", "slept", inflight=0.0)
        return res


def test_the_controller_writes_its_actuators_drains_in_act_mode_only() -> None:
    clock = Clock()
    act = DrainingActuator(4, clock=clock)
    c = make(ScriptedPolicy(lambda o: 3), clock, actuator=act)
    assert c.cycle().acted and c.drains is not None and c.drains.flush(5.0)
    (start, step, end) = recorded(c.ledger)  # type: ignore[arg-type]
    assert isinstance(start, DrainStart) and start.decision_id == "r1-1" and isinstance(step, DrainStep)
    assert isinstance(end, DrainEnd) and end.then == "slept"
    c.close()
    assert act.drains.observer is None  # detached: the writer is closed
    quiet = DrainingActuator(4, clock=clock)
    r = make(ScriptedPolicy(lambda o: 3), clock, mode="recommend", actuator=quiet)
    r.cycle()
    assert r.drains is None and quiet.drains.observer is None
