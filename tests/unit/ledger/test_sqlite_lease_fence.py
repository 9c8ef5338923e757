"""A SQLite ledger shared by two controllers under a Kubernetes Lease election refuses the write of a
leader whose lease ran out (its fence's ``valid_until_s``), before anything is written, even when no
successor has written yet: the token check alone would let that write through."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ebb.errors import NotLeader
from ebb.ledger import SqliteLedger
from ebb.ledger.base import Fence
from ebb.model.decisions import CycleRecord, DecisionRecord
from ebb.model.ids import CycleId, DecisionId, RunId

RUN = "live-serving-llm"


class Clock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def cycle(n: int, fence: Fence) -> CycleRecord:
    cid = CycleId(f"{RUN}-c{n}")
    d = DecisionRecord(decision_id=DecisionId(f"{RUN}-{n}"), cycle_id=cid, run_id=RunId(RUN), ts_ns=n * 1_000,
                       target="serving/llm", action="scale_down", from_replicas=4, to_replicas=3, reasons=("idle",))
    return CycleRecord(cycle_id=cid, run_id=RunId(RUN), ts_ns=n * 1_000, policy="ebb", decisions=(d,),
                       fencing_token=fence.token)


def stored_ids(path: Path) -> list[str]:
    led = SqliteLedger(path, read_only=True)
    try:
        return [d.decision_id for d in led.decisions(RunId(RUN))]
    finally:
        led.close()


def test_a_write_under_a_fence_whose_deadline_passed_is_refused_and_writes_nothing(tmp_path: Path) -> None:
    clock = Clock(50.0)
    led = SqliteLedger(tmp_path / "l.sqlite", fence_clock=clock)
    fence = Fence("ebb-system/ebb-x", 1, 0, 60.0, "a")
    try:
        assert led.append_cycle(cycle(1, fence), fence)
        clock.t = 60.0
        with pytest.raises(NotLeader, match="lease held by 'a' ran out"):
            led.append_cycle(cycle(2, fence), fence)
        with pytest.raises(NotLeader):  # checked before idempotency, as the token is
            led.append_cycle(cycle(1, fence), fence)
        assert led.get_cycle(CycleId(f"{RUN}-c2")) is None
        assert led.append_cycle(cycle(2, fence)) is True, "unfenced writes are not affected"
    finally:
        led.close()


def test_a_pause_during_the_inserts_past_the_deadline_is_caught_before_commit(tmp_path: Path) -> None:
    reads = iter([59.0, 61.0])  # the first check passes; the process then stalls past valid_until
    led = SqliteLedger(tmp_path / "l.sqlite", fence_clock=lambda: next(reads))
    fence = Fence("ebb-system/ebb-x", 1, 0, 60.0, "a")
    try:
        with pytest.raises(NotLeader, match="ran out 1.000 s ago"):
            led.append_cycle(cycle(1, fence), fence)
        assert led.cycles() == []
    finally:
        led.close()


@pytest.fixture
def fake() -> Iterator[Any]:
    pytest.importorskip("kubernetes")
    from ebb.testing.fake_kube import FakeKubeApiServer
    with FakeKubeApiServer() as server:
        yield server


def test_a_leader_frozen_past_its_lease_cannot_write_after_resuming_and_its_successor_continues_the_sequence(
        fake: Any, tmp_path: Path) -> None:
    """Two controllers, one ledger file, one Lease; each has its own monotonic clock and ledger handle."""
    from kubernetes import client

    from ebb.ledger.kube_lease import KubeLeaseElector

    api = client.ApiClient(fake.configuration())
    ca, cb = Clock(1_000.0), Clock(77.0)
    path = tmp_path / "shared.sqlite"
    led_a, led_b = SqliteLedger(path, fence_clock=ca), SqliteLedger(path, fence_clock=cb)
    electors = [KubeLeaseElector("ebb-system", "ebb-x", who, api_client=api, clock=c, rng=random.Random(0))
                for who, c in (("a", ca), ("b", cb))]
    a, b = electors
    try:
        for e in electors:
            e.start(background=False)
        a.step()
        b.step()
        fa = a.fence()
        assert fa is not None and led_a.append_cycle(cycle(1, fa), fa)
        pending = cycle(2, fa)  # a decided its next cycle under its fence... and froze right there
        ca.t += 11.0  # past its 10 s renew deadline, before it could renew
        cb.t += 15.0  # b saw no renewal for the lease's 15 s
        b.step()
        fb = b.fence()
        assert fb is not None and fb.token == fa.token + 1 and fb.holder == "b"
        with pytest.raises(NotLeader, match="ran out"):  # a resumes before b wrote anything
            led_a.append_cycle(pending, fa)
        assert stored_ids(path) == [f"{RUN}-1"], "the frozen leader's write landed"
        assert not a.is_leader() and a.fence() is None
        assert led_b.append_cycle(cycle(2, fb), fb)  # b continues the run's numbering: no gap, no duplicate
        late = dataclasses.replace(fa, valid_until_s=float("inf"))  # even a fence with time left...
        with pytest.raises(NotLeader, match="token 2 is already stored"):  # ...is older than b's
            led_a.append_cycle(cycle(3, late), late)
        assert stored_ids(path) == [f"{RUN}-1", f"{RUN}-2"]
    finally:
        for e in electors:
            e.close()
        led_a.close()
        led_b.close()
        api.close()
