"""WriteBatcher: at most 3 writes start in any 100 ms, in batches, on an injected clock; the
Actuator seam's idempotency by decision id is kept."""

from __future__ import annotations

import pytest

from ebb.actuate.base import Actuator
from ebb.actuate.batching import WriteBatcher
from ebb.errors import TransientError
from ebb.model.ids import DecisionId
from ebb.model.observation import ScaleRequest
from ebb.testing.fakes import FakeActuator


class FakeTime:
    """Sleeping advances the clock; each write takes ``write_s`` (so writes are spread in time too)."""

    def __init__(self, t: float = 100.0) -> None:
        self.t = t

    def clock(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        assert s > 0
        self.t += s


def max_in_window(starts: list[float], window: float) -> int:
    """Most starts in any half-open window [t, t + window)."""
    return max(sum(1 for s in starts if t <= s < t + window) for t in starts)


@pytest.mark.parametrize("write_s", [0.0, 0.01, 0.045, 0.2])
def test_ten_workloads_writes_take_300_ms_and_never_more_than_3_per_100_ms(write_s: float) -> None:
    ft = FakeTime()
    batcher = WriteBatcher(3, 0.1, clock=ft.clock, sleep=ft.sleep)

    class Slow(FakeActuator):
        def apply(self, decision_id: DecisionId, request: ScaleRequest):  # type: ignore[no-untyped-def]
            ft.t += write_s
            return super().apply(decision_id, request)

    acts = [batcher.wrap(Slow(2, clock=ft.clock), f"ns/w{i}") for i in range(10)]
    t0 = ft.t
    for i, a in enumerate(acts):
        assert a.apply(DecisionId(f"d{i}"), ScaleRequest(3)).applied
    batches = batcher.take()
    starts = [w.started_s for b in batches for w in b.writes]
    assert len(starts) == 10 and starts == sorted(starts)
    assert max_in_window(starts, 0.1) <= 3
    assert starts[-1] - t0 >= 0.3 - 1e-9 and ft.t - t0 >= 0.3 - 1e-9
    assert [len(b.writes) for b in batches] == [3, 3, 3, 1]
    assert [b.index for b in batches] == [0, 1, 2, 3]
    for prev, nxt in zip(batches, batches[1:]):
        assert nxt.started_s >= prev.started_s + 0.1
    assert [w.target for b in batches for w in b.writes] == [f"ns/w{i}" for i in range(10)]
    assert batcher.take() == ()


def test_the_limit_holds_across_cycles() -> None:
    ft = FakeTime()
    batcher = WriteBatcher(3, 0.1, clock=ft.clock, sleep=ft.sleep)
    act = batcher.wrap(FakeActuator(1, clock=ft.clock), "ns/w")
    starts = []
    for cycle in range(4):
        for k in range(2):
            act.apply(DecisionId(f"c{cycle}-{k}"), ScaleRequest(1 + (cycle * 2 + k) % 2))
        starts += [w.started_s for b in batcher.take() for w in b.writes]
        ft.t += 0.02  # the next cycle comes quickly
    assert max_in_window(starts, 0.1) <= 3


def test_a_repeated_decision_id_changes_nothing_and_a_failed_write_is_recorded() -> None:
    ft = FakeTime()
    batcher = WriteBatcher(3, 0.1, clock=ft.clock, sleep=ft.sleep)
    inner = FakeActuator(2, clock=ft.clock)
    act = batcher.wrap(inner)
    assert isinstance(act, Actuator) and act.target == inner.target
    first = act.apply(DecisionId("d1"), ScaleRequest(4))
    again = act.apply(DecisionId("d1"), ScaleRequest(4))
    assert first.applied and not again.applied and inner.state().spec_replicas == 4
    assert inner.applied_ids == [DecisionId("d1")], "the repeat changed nothing"

    class Down(FakeActuator):
        def apply(self, decision_id: DecisionId, request: ScaleRequest):  # type: ignore[no-untyped-def]
            raise TransientError("API server unreachable")

    bad = batcher.wrap(Down(2, clock=ft.clock), "ns/down")
    with pytest.raises(TransientError, match="unreachable"):
        bad.apply(DecisionId("d2"), ScaleRequest(1))
    writes = [w for b in batcher.take() for w in b.writes]
    assert [(w.decision_id, w.ok) for w in writes] == [("d1", True), ("d1", True), ("d2", False)]
    assert "TransientError" in writes[-1].error


def test_reads_are_not_throttled() -> None:
    ft = FakeTime()
    batcher = WriteBatcher(1, 0.1, clock=ft.clock, sleep=ft.sleep)
    act = batcher.wrap(FakeActuator(2, clock=ft.clock))
    for _ in range(50):
        act.state()
    assert ft.t == 100.0 and batcher.take() == ()


def test_bad_limits_are_refused() -> None:
    for per, win in ((0, 0.1), (3, 0.0), (True, 0.1)):
        with pytest.raises(ValueError):
            WriteBatcher(per, win)  # type: ignore[arg-type]
