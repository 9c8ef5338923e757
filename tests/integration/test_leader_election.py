"""Leader election against a real etcd: one leader at a time, tokens that grow, takeover after resign
and after kill -9, a stalled leader that lapses before its successor wins and whose fenced ledger write
fails, and an etcd outage and restart. Skips without the etcd binary, fails under CI=true."""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from ebb.errors import NotLeader
from ebb.ledger.base import Fence
from ebb.ledger.election import EtcdElectionStore, LeaderElector
from ebb.ledger.etcd import EtcdLedger
from ebb.model.decisions import CycleRecord, DecisionRecord
from ebb.model.ids import CycleId, DecisionId, RunId
from ebb.testing.etcd import free_port

pytest.importorskip("etcd3gw")

TTL_S = 3


def new_key() -> str:
    return f"/ebb-test/{uuid.uuid4().hex}/leader"


def read_key(url: str, key: str) -> tuple[int, str] | None:
    """(create_revision, value) of ``key`` straight from the gateway, independent of the code under test."""
    body = json.dumps({"key": base64.b64encode(key.encode()).decode()}).encode()
    req = urllib.request.Request(f"{url}/v3/kv/range", data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=5) as resp:
        kvs = json.loads(resp.read()).get("kvs", [])
    return (int(kvs[0]["create_revision"]), base64.b64decode(kvs[0]["value"]).decode()) if kvs else None


def cycle(cid: str, token: int) -> CycleRecord:
    d = DecisionRecord(DecisionId(f"{cid}-d0"), CycleId(cid), RunId("run"), 1, "chat", "scale_down", 4, 3)
    return CycleRecord(CycleId(cid), RunId("run"), 1, "ebb", (d,), {}, fencing_token=token)


def test_of_two_candidates_exactly_one_leads_and_its_token_is_the_keys_create_revision(etcd_endpoint: str) -> None:
    key = new_key()
    with LeaderElector(etcd_endpoint, key, "a", ttl_s=TTL_S) as a, \
            LeaderElector(etcd_endpoint, key, "b", ttl_s=TTL_S) as b:
        a.start()
        b.start()
        end = time.monotonic() + 20
        while not (a.is_leader() or b.is_leader()) and time.monotonic() < end:
            time.sleep(0.01)
        leader, other = (a, b) if a.is_leader() else (b, a)
        fence = leader.fence()
        assert fence is not None and not other.is_leader() and other.fence() is None
        assert read_key(etcd_endpoint, key) == (fence.token, leader.candidate_id)


def test_the_follower_takes_over_when_the_leader_resigns_with_a_higher_token(etcd_endpoint: str) -> None:
    key = new_key()
    with LeaderElector(etcd_endpoint, key, "a", ttl_s=TTL_S) as a, \
            LeaderElector(etcd_endpoint, key, "b", ttl_s=TTL_S, poll_every_s=0.05) as b:
        fa = a.campaign(timeout_s=20)
        assert fa is not None
        assert b.campaign(timeout_s=0.5) is None
        assert a.resign() is True
        assert not a.is_leader()
        fb = b.campaign(timeout_s=20)
        assert fb is not None and fb.token > fa.token
        assert read_key(etcd_endpoint, key) == (fb.token, "b")


CHILD = r"""
import sys, time
from ebb.ledger.election import LeaderElector
e = LeaderElector(sys.argv[1], sys.argv[2], "doomed", ttl_s=int(sys.argv[3]))
fence = e.campaign(timeout_s=30)
print(fence.token if fence else 0, flush=True)
time.sleep(3600)
"""


def test_the_follower_leads_within_ttl_plus_one_second_after_the_leader_is_killed(etcd_endpoint: str) -> None:
    key = new_key()
    with subprocess.Popen([sys.executable, "-c", CHILD, etcd_endpoint, key, str(TTL_S)], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, stdin=subprocess.DEVNULL) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        try:
            line = proc.stdout.readline()
            assert line.strip().isdigit() and int(line) > 0, proc.stderr.read().decode(errors="replace")
            old_token = int(line)
            with LeaderElector(etcd_endpoint, key, "heir", ttl_s=TTL_S, poll_every_s=0.1) as heir:
                assert heir.campaign(timeout_s=1.0) is None  # the child renews: no takeover while it lives
                killed = time.monotonic()
                os.kill(proc.pid, signal.SIGKILL)
                fence = heir.campaign(timeout_s=TTL_S + 20)
                took_s = time.monotonic() - killed
                assert fence is not None and fence.token > old_token
                assert took_s <= TTL_S + 1.0, f"takeover took {took_s:.2f} s"
        finally:
            proc.kill()
            proc.wait()


class RecordingStore(EtcdElectionStore):
    """The real store, noting when each create Txn was sent (monotonic) and the token it got."""

    def __init__(self, endpoint: str) -> None:
        super().__init__(endpoint, timeout_s=2.0)
        self.creates: list[tuple[float, int | None]] = []

    def create(self, key: str, value: str, lease_id: int) -> int | None:
        sent = time.monotonic()
        token = super().create(key, value, lease_id)
        self.creates.append((sent, token))
        return token


def test_a_stalled_leader_lapses_before_its_successor_wins_and_its_fenced_write_fails(etcd_endpoint: str) -> None:
    key, stall, stalled, release = new_key(), threading.Event(), threading.Event(), threading.Event()

    def before_renew() -> None:
        if stall.is_set():
            stalled.set()
            release.wait(30)

    store = RecordingStore(etcd_endpoint)
    with LeaderElector(etcd_endpoint, key, "old", ttl_s=TTL_S, poll_every_s=0.05, before_renew=before_renew) as old, \
            LeaderElector(etcd_endpoint, key, "new", ttl_s=TTL_S, poll_every_s=0.05, store=store) as new, \
            EtcdLedger(etcd_endpoint, prefix=f"test/{uuid.uuid4().hex}") as ledger:
        try:
            f_old = old.campaign(timeout_s=20)
            assert f_old is not None
            new.start()
            assert ledger.append_cycle(cycle("by-old-1", f_old.token), fence=f_old) is True
            stall.set()
            assert stalled.wait(10)
            last = old.fence()
            assert last is not None, "the leader lapsed before its keep-alive thread stalled"
            while old.is_leader():
                time.sleep(0.005)
            old_stopped = time.monotonic()
            f_new = new.campaign(timeout_s=TTL_S + 20)
            assert f_new is not None and f_new.token > f_old.token
            won_sent = [sent for sent, token in store.creates if token == f_new.token]
            assert len(won_sent) == 1
            assert last.valid_until_s <= old_stopped < won_sent[0], (last.valid_until_s, old_stopped, won_sent)
            with pytest.raises(NotLeader, match=str(f_old.token)):
                ledger.append_cycle(cycle("by-old-2", f_old.token), fence=f_old)
            assert ledger.get_cycle(CycleId("by-old-2")) is None
            assert ledger.get_decision(DecisionId("by-old-2-d0")) is None
            assert ledger.append_cycle(cycle("by-new-1", f_new.token), fence=f_new) is True
            assert {c.cycle_id: c.fencing_token for c in ledger.cycles()} == {"by-old-1": f_old.token,
                                                                              "by-new-1": f_new.token}
        finally:
            release.set()


class RestartableEtcd:
    """A single-node etcd on fixed loopback ports and a fixed data dir, so it can be stopped and restarted."""

    def __init__(self, binary: str, data_dir: Path) -> None:
        self.binary, self.data_dir = binary, data_dir
        self.url, self._peer = f"http://127.0.0.1:{free_port()}", f"http://127.0.0.1:{free_port()}"
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        args = [self.binary, "--name", "restartable", "--data-dir", str(self.data_dir),
                "--listen-client-urls", self.url, "--advertise-client-urls", self.url,
                "--listen-peer-urls", self._peer, "--initial-advertise-peer-urls", self._peer,
                "--initial-cluster", f"restartable={self._peer}", "--logger", "zap", "--log-level", "error"]
        self._proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                      stdin=subprocess.DEVNULL)
        end = time.monotonic() + 20
        while True:
            assert self._proc.poll() is None, f"etcd exited with {self._proc.returncode}"
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=1.0) as resp:
                    if resp.status == 200 and b"true" in resp.read():
                        return
            except (urllib.error.URLError, OSError):
                pass
            assert time.monotonic() < end, f"etcd at {self.url} not healthy within 20 s"
            time.sleep(0.05)

    def stop(self) -> None:
        if self._proc is not None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
            self._proc = None


@pytest.fixture
def own_etcd(etcd_binary_path: str, tmp_path: Path) -> Iterator[RestartableEtcd]:
    server = RestartableEtcd(etcd_binary_path, tmp_path / "etcd")
    server.start()
    try:
        yield server
    finally:
        server.stop()


def test_with_etcd_stopped_leadership_lapses_at_the_deadline_and_the_campaign_resumes_after_restart(
    own_etcd: RestartableEtcd,
) -> None:
    key = new_key()
    with LeaderElector(own_etcd.url, key, "a", ttl_s=TTL_S, poll_every_s=0.1, timeout_s=0.5) as a:
        before = a.campaign(timeout_s=20)
        assert before is not None
        own_etcd.stop()
        stopped = time.monotonic()
        last = a.fence()
        if last is not None:  # no renewal can have been sent after ``stopped``: it never extends itself
            assert last.valid_until_s <= stopped + TTL_S - a.safety_margin_s
            while time.monotonic() < last.valid_until_s:
                time.sleep(0.01)
        assert not a.is_leader() and a.fence() is None
        time.sleep(a.renew_every_s)  # a few failed rounds later it is still not leading
        assert not a.is_leader()
        own_etcd.start()
        after = a.campaign(timeout_s=3 * TTL_S + 20)
        assert after is not None and after.token > before.token
        assert read_key(own_etcd.url, key) == (after.token, "a")


def test_a_fence_from_another_election_key_is_refused_by_the_etcd_ledger(etcd_endpoint: str) -> None:
    with LeaderElector(etcd_endpoint, new_key(), "a", ttl_s=TTL_S) as a, \
            EtcdLedger(etcd_endpoint, prefix=f"test/{uuid.uuid4().hex}") as ledger:
        fence = a.campaign(timeout_s=20)
        assert fence is not None
        forged = Fence(new_key(), fence.token, fence.lease_id)
        with pytest.raises(NotLeader, match="gone"):
            ledger.append_cycle(cycle("forged", fence.token), fence=forged)
        assert ledger.cycles() == []
