"""The drain reporter's records and its step bound (at most 1 + T / 5 steps for a drain of T s)."""

from __future__ import annotations

import logging

import pytest

from ebb.actuate.drain_report import HEARTBEAT_S, MIN_STEP_S, DrainReporter, inflight_count, stamp_ns
from ebb.model.drains import DrainEnd, DrainEvent, DrainStart, DrainStep

T0_S = 1_767_607_200.0


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def wall(self) -> float:
        return T0_S + self.t

    def mono(self) -> float:
        return 1000.0 + self.t


def reporter() -> tuple[DrainReporter, list[DrainEvent], Clock]:
    clock, seen = Clock(), []
    r = DrainReporter("default/vllm", wall=clock.wall, monotonic=clock.mono)
    r.observer = seen.append
    return r, seen, clock


def drain(counts: list[float | None], tick_s: float = 0.1) -> list[DrainEvent]:
    r, seen, clock = reporter()
    r.start("pod-a", "live-3", "sleep", 120.0)
    for n in counts:
        clock.t += tick_s
        r.read("pod-a", n)
    r.end("pod-a", "budget", "released")
    return seen


@pytest.mark.parametrize("counts", [
    [float(50 - (k % 50)) for k in range(1200)],  # changes at every read (0.1 s) for 120 s
    [3.0] * 1200,  # a long stream: the count holds for 120 s
    [None, 2.0] * 600,  # unreadable every other read
], ids=["changing", "holding", "flapping"])
def test_a_two_minute_drain_records_at_most_one_step_per_5_s(counts: list[float | None]) -> None:
    seen = drain(counts)
    steps = [e for e in seen if isinstance(e, DrainStep)]
    assert isinstance(seen[0], DrainStart) and isinstance(seen[-1], DrainEnd) and len(seen) == len(steps) + 2
    assert 1 <= len(steps) <= 1 + 120 / MIN_STEP_S
    gaps = [b.elapsed_s - a.elapsed_s for a, b in zip(steps, steps[1:])]
    assert all(g >= MIN_STEP_S - 1e-9 for g in gaps)
    if len(set(counts)) == 1:  # a holding count: the first read, then a heartbeat every 30 s
        assert len(steps) == 1 + int(120 / HEARTBEAT_S - 1e-9) and all(HEARTBEAT_S - 1e-9 <= g for g in gaps)


def test_the_first_read_is_a_step_and_a_changed_count_is_recorded_once_5_s_passed() -> None:
    seen = drain([2.0, 2.0, 1.0] + [1.0] * 48 + [0.0], tick_s=0.1)  # 1 from 0.3 s, 0 at 5.2 s
    steps = [e for e in seen if isinstance(e, DrainStep)]
    assert [(s.inflight, round(s.elapsed_s, 1)) for s in steps] == [(2, 0.1), (1, 5.1)]  # 0 at 5.2: too soon
    end = seen[-1]
    assert isinstance(end, DrainEnd) and end.inflight == 0 and round(end.elapsed_s, 1) == 5.2  # the last read


def test_records_share_the_drain_id_and_times_and_a_resumed_drain_keeps_its_start() -> None:
    r, seen, clock = reporter()
    clock.t = 10.0
    r.start("pod-a", "live-3", "release", 30.0, started_s=T0_S + 7.5)  # a restarted actuator's resume
    r.start("pod-a", "live-9", "sleep", 30.0)  # already draining: nothing
    r.end("pod-b", "drained", "slept")  # never started: nothing
    r.read("pod-a", 1.2)
    r.end("pod-a", "drained", "released", inflight=0.0, note="no room")
    start, step, end = seen
    assert isinstance(start, DrainStart) and start.started_ns == stamp_ns(T0_S + 7.5) and start.decision_id == "live-3"
    assert isinstance(step, DrainStep) and step.inflight == 2 and step.elapsed_s == pytest.approx(2.5)
    assert isinstance(end, DrainEnd) and (end.inflight, end.note) == (0, "no room")
    assert {e.drain_id for e in seen} == {start.drain_id} and not r.draining("pod-a")


def test_an_observer_that_raises_is_logged_never_propagated(caplog: pytest.LogCaptureFixture) -> None:
    r = DrainReporter("t")

    def broken(event: DrainEvent) -> None:
        raise RuntimeError("ledger writer gone")
    r.observer = broken
    with caplog.at_level(logging.WARNING, logger="ebb.actuate.drain_report"):
        r.start("pod-a", "", "release", 5.0)
        r.read("pod-a", 1.0)
        r.end("pod-a", "drained", "released")
    assert sum("ledger writer gone" in m for m in caplog.messages) == 1  # one line per 10 s
    r.observer = None
    r.start("pod-b", "", "release", 5.0)  # no observer: nothing recorded, nothing raised


def test_in_flight_counts_are_whole_requests_never_read_low() -> None:
    assert [inflight_count(x) for x in (None, float("nan"), float("inf"), -2.0, 0.0, 0.2, 3.0)] == \
        [None, None, None, 0, 0, 1, 3]
    assert stamp_ns(float(f"{T0_S + 0.1234:.3f}")) == stamp_ns(T0_S + 0.1234)
    with pytest.raises(ValueError):
        DrainReporter("t", min_step_s=10.0, heartbeat_s=5.0)
