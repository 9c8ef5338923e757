"""The shadow recorder: recommend-mode cycles folded second by second into one fenced ledger row a minute."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ebb.errors import TransientError
from ebb.ledger.base import Fence
from ebb.ledger.memory import MemoryLedger
from ebb.live.settings import CycleOutcome
from ebb.live.shadow import LEADING, MAX_FILL_S, MinuteFold, ShadowRecorder
from ebb.live.shadow_fleet import ShadowFleet
from ebb.live.ttft_seen import NO_TTFT, TtftSeen
from ebb.model.decisions import CycleRecord
from ebb.model.ids import RunId
from ebb.model.shadow import SLOTS, ShadowMinute, shadow_of
from ebb.testing.fakes import FakeActuator

START = 1_767_607_200  # a minute's first second


def fold() -> MinuteFold:
    return MinuteFold(target="local/serving", policy="ebb", slo_ttft_ms=2000.0)


def test_a_minute_holds_each_seconds_replicas_and_closes_when_the_next_minute_starts() -> None:
    f = fold()
    for s in range(SLOTS):
        assert f.add(START + s + 0.3, 6, 6 - s // 20, TtftSeen.of([100.0 + s])) is None
    m = f.add(START + SLOTS + 0.2, 6, 3, NO_TTFT)
    assert m is not None and m.start_s == START
    assert m.as_run == (6,) * SLOTS and m.ebb == (6,) * 20 + (5,) * 20 + (4,) * 20
    assert m.ttft_p99_ms[0] is not None and math.isclose(m.ttft_p99_ms[0], 100.0, rel_tol=0.01)
    assert m.completions == 60 and m.minute_ttft_p99_ms is not None
    assert math.isclose(m.minute_ttft_p99_ms, 158.0, rel_tol=0.01)
    nxt = f.take()
    assert nxt is not None and nxt.start_s == START + SLOTS and nxt.ebb[0] == 3 and nxt.ebb[1:] == (None,) * 59


def test_seconds_between_close_outcomes_take_the_earlier_ones_values_and_a_long_gap_stays_unknown() -> None:
    f = fold()
    f.add(START + 0.5, 6, 4, NO_TTFT)
    f.add(START + 3.5, 7, 5, NO_TTFT)  # seconds 1 and 2 missed: filled from second 0
    f.add(START + 3 + MAX_FILL_S + 1.5, 8, 6, NO_TTFT)  # a gap past MAX_FILL_S: unknown
    m = f.take()
    assert m is not None
    assert m.as_run[:4] == (6, 6, 6, 7) and m.ebb[:4] == (4, 4, 4, 5)
    gap = range(4, 4 + MAX_FILL_S)  # seconds 4-8: the next outcome came MAX_FILL_S + 1 s after second 3
    assert all(m.as_run[i] is None and m.ebb[i] is None for i in gap) and m.ebb[4 + MAX_FILL_S] == 6


def test_in_one_second_the_last_outcome_sets_the_replicas_and_every_outcome_adds_its_completions() -> None:
    f = fold()
    f.add(START + 0.1, 6, 5, TtftSeen.of([100.0] * 3))
    f.add(START + 0.6, 6, 7, TtftSeen.of([100.0] * 2))
    m = f.take()
    assert m is not None and m.ebb[0] == 7 and m.completions == 5


def test_the_minutes_p99_is_over_all_its_completions_not_a_mean_or_max_of_the_seconds() -> None:
    f = fold()
    f.add(START + 0.5, 6, 6, TtftSeen.of([100.0] * 99))
    f.add(START + 1.5, 6, 6, TtftSeen.of([3000.0]))
    m = f.take()
    assert m is not None and m.ttft_p99_ms[1] is not None and m.ttft_p99_ms[1] > 2900
    assert m.minute_ttft_p99_ms is not None and math.isclose(m.minute_ttft_p99_ms, 100.0, rel_tol=0.01)


def outcome(action: str, to: int = 4, ttft: TtftSeen = NO_TTFT) -> CycleOutcome:
    return CycleOutcome(1, 1.0, action, to, to, to, 0.1, ttft=ttft)


class Now:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def recorder(ledger: Any, now: Now, **kw: Any) -> ShadowRecorder:
    fleet = ShadowFleet(FakeActuator(6), cold_start_s=5.0)
    fleet.state()
    return ShadowRecorder(ledger, "r1", fleet, target="local/serving", policy="ebb", slo_ttft_ms=2000.0,
                          clock=now, **kw)


def minutes_in(ledger: MemoryLedger) -> list[ShadowMinute]:
    return [m for c in ledger.cycles(RunId("r1")) if (m := shadow_of(c)) is not None]


def test_the_recorder_writes_one_row_a_minute_and_the_minute_under_way_on_close() -> None:
    ledger, now = MemoryLedger(), Now(START + 0.4)
    rec = recorder(ledger, now)
    for _ in range(150):
        rec(outcome("hold"))
        now.t += 1.0
    assert len(minutes_in(ledger)) == 2  # the third minute is under way
    rec.close()
    rows = minutes_in(ledger)
    assert [m.start_s for m in rows] == [START, START + 60, START + 120] and rec.written == 3
    assert rows[0].as_run == (6,) * SLOTS and rows[0].ebb == (4,) * SLOTS
    assert rows[2].ebb[:30] == (4,) * 30 and rows[2].ebb[30:] == (None,) * 30


def test_a_followers_and_an_errors_seconds_hold_no_ebb_value_and_a_followers_minute_is_not_written() -> None:
    ledger, now = MemoryLedger(), Now(START + 0.4)
    rec = recorder(ledger, now)
    for action in ("follower", "error", "hold"):
        rec(outcome(action))
        now.t += 10.0  # past MAX_FILL_S: no second is filled
    rec.close()
    (m,) = minutes_in(ledger)
    assert (m.as_run[0], m.ebb[0]) == (6, None) and (m.as_run[10], m.ebb[10]) == (None, None)
    assert (m.as_run[20], m.ebb[20]) == (6, 4)
    quiet, now2 = MemoryLedger(), Now(START + 0.4)
    follower = recorder(quiet, now2)
    for _ in range(70):
        follower(outcome("follower"))
        now2.t += 1.0
    follower.close()
    assert minutes_in(quiet) == []


class Elector:
    def __init__(self, fence: Fence | None) -> None:
        self._fence = fence

    def is_leader(self) -> bool:
        return self._fence is not None

    def fence(self) -> Fence | None:
        return self._fence


def test_rows_are_fenced_like_the_controllers_writes() -> None:
    ledger, now = MemoryLedger(current_token=2), Now(START + 0.4)
    rec = recorder(ledger, now, elector=Elector(Fence("leader/x", 2)))
    rec(outcome("hold"))
    rec.close()
    (cycle,) = [c for c in ledger.cycles(RunId("r1"))]
    assert cycle.fencing_token == 2 and rec.written == 1
    deposed = recorder(ledger, Now(START + 60.4), elector=Elector(None))
    deposed(outcome("hold"))
    deposed.close()  # refused (not the leader): dropped, never raised
    assert deposed.written == 0 and deposed.dropped == 1 and len(ledger.cycles(RunId("r1"))) == 1


class FlakyLedger(MemoryLedger):
    def __init__(self) -> None:
        super().__init__()
        self.down = True

    def append_cycle(self, cycle: CycleRecord, fence: Fence | None = None) -> bool:
        if self.down:
            raise TransientError("ledger unreachable")
        return super().append_cycle(cycle, fence)


def test_minutes_the_ledger_cannot_take_wait_in_order_and_at_most_max_pending_of_them() -> None:
    ledger, now = FlakyLedger(), Now(START + 0.4)
    rec = recorder(ledger, now, max_pending=3)
    for _ in range(5 * 60):  # minutes 0-4 while the ledger is down: 0-3 closed, 4 under way
        rec(outcome("hold"))
        now.t += 1.0
    assert minutes_in(ledger) == [] and rec.dropped == 1  # minute 0 dropped: three already waited
    ledger.down = False
    rec(outcome("hold"))  # minute 5's first outcome closes minute 4: the waiting ones go first
    assert [m.start_s for m in minutes_in(ledger)] == [START + 60 * k for k in (1, 2, 3, 4)]
    rec.close()
    assert rec.written == 5 and minutes_in(ledger)[-1].start_s == START + 300


_steps = st.lists(st.tuples(st.floats(0.05, 8.0), st.sampled_from([*LEADING, "follower", "error"]),
                            st.integers(0, 9)), min_size=1, max_size=200)


@settings(max_examples=150, deadline=None)
@given(steps=_steps)
def test_every_row_holds_the_last_outcome_of_each_second_it_saw(steps: list[tuple[float, str, int]]) -> None:
    ledger, now = MemoryLedger(), Now(START + 0.5)
    rec = recorder(ledger, now)
    last: dict[int, tuple[int | None, int | None]] = {}
    for dt, action, to in steps:
        now.t += dt
        rec(outcome(action, to))
        last[math.floor(now.t)] = (None if action == "error" else 6, to if action in LEADING else None)
    rec.close()
    slots: dict[int, tuple[int | None, int | None]] = {}
    for m in minutes_in(ledger):
        assert len(m.as_run) == len(m.ebb) == len(m.ttft_p99_ms) == SLOTS
        assert any(v is not None for v in m.ebb)  # a minute with no Ebb value (followers only) is not written
        for i in range(SLOTS):
            slots.setdefault(m.start_s + i, (m.as_run[i], m.ebb[i]))
    for sec, values in last.items():
        if sec in slots:
            assert slots[sec] == values
    for sec, (as_run, ebb) in slots.items():  # a second no outcome fell in: unknown, or an earlier close one's
        if sec not in last and (as_run, ebb) != (None, None):
            before = max(s for s in last if s < sec)
            assert sec - before <= MAX_FILL_S and last[before] == (as_run, ebb)


def test_a_recorder_never_raises_for_the_ledger() -> None:
    class Broken(MemoryLedger):
        def append_cycle(self, cycle: CycleRecord, fence: Fence | None = None) -> bool:
            raise TransientError("down for good")

    now = Now(START + 0.4)
    rec = recorder(Broken(), now)
    rec(outcome("hold"))
    now.t += 60
    rec(outcome("hold"))
    rec.close()
    assert rec.written == 0 and rec.dropped == 2


@pytest.mark.parametrize("action", ["scale_up", "scale_down", "veto", "hold"])
def test_a_leading_cycles_target_is_ebbs_value_for_its_second(action: str) -> None:
    ledger, now = MemoryLedger(), Now(START + 0.4)
    rec = recorder(ledger, now)
    rec(outcome(action, to=9))
    rec.close()
    (m,) = minutes_in(ledger)
    assert (m.as_run[0], m.ebb[0]) == (6, 9)
