"""Two live controllers elected on a Kubernetes Lease, one SQLite ledger file: a leader paused past its
lease writes nothing when it resumes, and its successor continues the run's decision sequence.

Both are real processes (:mod:`ebb.testing.controller_proc`, ``--elect --election kubernetes``, the
Lease election ``ebb run --election kubernetes`` starts) against one fake API server in this process,
which serves both the Lease and the Deployment they scale, and one SQLite ledger both open (no
one-writer lock: the fence keeps one writer). Short lease settings: 2 s lease, 1 s renew deadline,
0.2 s retry. The leader stops itself (SIGSTOP) at its 3rd ledger append — its 2nd decision's
write-ahead record, fence already taken — and stays stopped until the follower has taken the Lease
and decided. Checked: the resumed leader's pending write is refused by the ledger (its lease ran
out), it acts on nothing and follows from then on; the ledger holds one sequence of decision ids
(unique, cycle numbers strictly increasing across both controllers), the old leader's token strictly
before the new one's; every recorded move reached the API server exactly once, the refused one never.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("kubernetes")

from ebb.ledger import open_ledger  # noqa: E402
from ebb.ledger.kube_lease_store import lease_name  # noqa: E402
from ebb.model.ids import RunId  # noqa: E402
from ebb.testing.controller_proc import scale_writes  # noqa: E402
from ebb.testing.fake_kube import FakeKubeApiServer  # noqa: E402

NS, NAME, START = "serving", "llm", 3
LEASE_NS = "ebb-system"
LEASE = ["--lease-duration-s", "2", "--lease-renew-deadline-s", "1", "--lease-retry-s", "0.2"]
WAIT_S = 30.0  # how long any single wait may take before the test gives up


class Harness:
    """One controller process; its stdout (JSON lines) and stderr go to files the test polls."""

    def __init__(self, tmp: Path, name: str, fake: FakeKubeApiServer, ledger: Path, run_id: str, *extra: str) -> None:
        self.name, self.out, self.err = name, tmp / f"{name}.out", tmp / f"{name}.err"
        args = [sys.executable, "-m", "ebb.testing.controller_proc", "--ledger", str(ledger), "--kube-url", fake.url,
                "--namespace", NS, "--deployment", NAME, "--run-id", run_id, "--elect", "--election", "kubernetes",
                "--lease-namespace", LEASE_NS, "--candidate", name, *LEASE, "--interval-s", "0.5", "--every", "3",
                *extra]
        with self.out.open("wb") as out, self.err.open("wb") as err:
            self.proc = subprocess.Popen(args, stdout=out, stderr=err, stdin=subprocess.DEVNULL)

    def lines(self) -> list[dict[str, Any]]:
        text = self.out.read_text()
        return [json.loads(line) for line in text.splitlines(keepends=True) if line.endswith("\n")]

    def cycles(self) -> list[dict[str, Any]]:
        return [x for x in self.lines() if x["event"] == "cycle"]

    def decisions(self) -> list[dict[str, Any]]:
        return [x for x in self.cycles() if x["action"] in ("scale_up", "scale_down")]

    def wait(self, what: str, ready: Callable[[], bool]) -> None:
        end = time.monotonic() + WAIT_S
        while not ready():
            assert time.monotonic() < end, f"{self.name}: no {what} within {WAIT_S:g} s:\n{self.tail()}"
            assert self.proc.poll() is None, f"{self.name} exited while waiting for {what}:\n{self.tail()}"
            time.sleep(0.02)

    def tail(self) -> str:
        return f"exit={self.proc.poll()} stdout:\n{self.out.read_text()[-2000:]}\nstderr:\n{self.err.read_text()[-3000:]}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)  # a stopped process cannot handle SIGTERM
            self.proc.terminate()
            try:
                self.proc.wait(timeout=WAIT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.proc.wait()


@pytest.fixture
def fake() -> Iterator[FakeKubeApiServer]:
    with FakeKubeApiServer() as server:
        server.add_node("node-a", "zone-a")
        server.add_deployment(NAME, START, namespace=NS)
        yield server


def test_a_leader_paused_past_its_lease_writes_nothing_and_its_successor_continues_the_sequence(
        fake: FakeKubeApiServer, tmp_path: Path, record_property: Callable[[str, object], None]) -> None:
    run_id = f"lease-{uuid.uuid4().hex[:8]}"
    ledger = tmp_path / "ledger.sqlite"
    started = time.monotonic()
    a = Harness(tmp_path, "a", fake, ledger, run_id, "--stop-at", "before_ledger:3")
    b: Harness | None = None
    try:
        a.wait("leadership", lambda: any(x["action"] != "follower" for x in a.cycles()))
        b = Harness(tmp_path, "b", fake, ledger, run_id)
        follower = b
        follower.wait("follower cycle", lambda: any(x["action"] == "follower" for x in follower.cycles()))
        end = time.monotonic() + WAIT_S
        while not any(x["event"] == "stop" for x in a.lines()):
            assert time.monotonic() < end, a.tail()
            time.sleep(0.02)
        (stop,) = [x for x in a.lines() if x["event"] == "stop"]
        assert (stop["point"], stop["nth"]) == ("before_ledger", 3)
        follower.wait("decision after the take-over", lambda: len(follower.decisions()) >= 1)
        took_s = follower.decisions()[0]["t_s"] - stop["t_s"]
        record_property("takeover_s", round(took_s, 3))
        os.kill(a.proc.pid, signal.SIGCONT)

        def resumed() -> list[dict[str, Any]]:
            lines = a.lines()
            at = next(i for i, x in enumerate(lines) if x["event"] == "stop")
            return [x for x in lines[at + 1:] if x["event"] == "cycle"]

        a.wait("2 cycles after SIGCONT", lambda: len(resumed()) >= 2)
        refused, then = resumed()[0], resumed()[1:]
        assert refused["action"] == "error" and not refused["acted"], refused
        assert "ledger:" in refused["note"] and "ran out" in refused["note"], refused
        assert all(x["action"] == "follower" for x in then), f"the deposed leader did not step down: {then}"
        woke_at = refused["t_s"]
        follower.wait("decision after a woke", lambda: any(x["t_s"] > woke_at for x in follower.decisions()))
        for h in (a, follower):
            h.stop()
            assert h.proc.returncode == 0, h.tail()
        assert "lost leadership of Lease" in a.err.read_text()
    finally:
        for h in (a, b):
            if h is not None:
                h.stop()
    print(f"\nLease take-over: the leader's pause to the follower's first decision {took_s:.2f} s "
          f"(lease 2 s); whole test {time.monotonic() - started:.1f} s")
    check_ledger_and_fleet(ledger, run_id, fake, refused_id=str(refused["decision_id"]))
    lease = fake.lease(lease_name(run_id), LEASE_NS)
    assert lease is not None and lease["spec"]["leaseTransitions"] == 1, lease


def check_ledger_and_fleet(path: Path, run_id: str, fake: FakeKubeApiServer, *, refused_id: str) -> None:
    store = open_ledger(path, create=False, read_only=True)
    try:
        cycles = store.cycles(RunId(run_id))
    finally:
        store.close()
    tokens = [c.fencing_token for c in cycles]
    assert tokens == sorted(tokens) and set(tokens) == {1, 2}, \
        f"a write carried no fence, or the deposed leader wrote after its successor: {tokens}"
    made = [c for c in cycles if not c.cycle_id.endswith("-outcome")]
    decisions = [d for c in made for d in c.decisions]
    ids = [d.decision_id for d in decisions]
    assert len(ids) == len(set(ids)), f"a decision id is in the ledger twice: {ids}"
    nums = [int(c.cycle_id.rsplit("-c", 1)[1]) for c in made]
    assert nums == sorted(set(nums)), f"cycle numbers not strictly increasing across controllers: {nums}"
    assert all(d.decision_id != refused_id or c.fencing_token == 2 for c in made for d in c.decisions), \
        f"the paused leader's refused decision {refused_id} is in the ledger"
    moves = [d for d in decisions if d.action in ("scale_up", "scale_down")]
    outcome_of = sorted(str(c.snapshot["outcome_of"]) for c in cycles if c.cycle_id.endswith("-outcome"))
    assert outcome_of == sorted(d.decision_id for d in moves), "each move needs exactly one outcome"
    assert scale_writes(fake.requests, NS, NAME, START) == [(d.decision_id, d.from_replicas, d.to_replicas)
                                                            for d in moves]
