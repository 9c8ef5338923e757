"""LeaderElector's deadline logic against a fake etcd and a hand-driven clock (no server, no threads
except where a test says so). The real-etcd behaviour is in tests/integration/test_leader_election.py."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable

import pytest

from ebb.errors import ConfigError, SourceUnavailable
from ebb.ledger.election import CLOCK_DRIFT_RATIO, EtcdElectionStore, LeaderElector

KEY = "/ebb/leader"


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class FakeEtcd:
    """One election key, leases without expiry (tests expire them by hand), a revision counter."""

    endpoint = "fake://etcd"

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.revision = 10
        self.key: tuple[int, int] | None = None  # (create_revision, lease)
        self.leases: dict[int, int] = {}
        self.next_lease = 1
        self.down = False
        self.granted_ttl: int | None = None
        self.reply_delay_s = 0.0  # the clock moves this much while a keepalive is "on the wire"
        self.create_fails_after_landing = False
        self.revoked: list[int] = []
        self.kept: list[int] = []  # lease of every keepalive received

    def _check(self) -> None:
        if self.down:
            raise SourceUnavailable(f"etcd at {self.endpoint} did not answer (test)")

    def read(self, key: str) -> tuple[int, int] | None:
        self._check()
        return self.key

    def grant(self, ttl_s: int) -> tuple[int, int]:
        self._check()
        lease, self.next_lease = self.next_lease, self.next_lease + 1
        self.leases[lease] = self.granted_ttl or ttl_s
        return lease, self.leases[lease]

    def create(self, key: str, value: str, lease_id: int) -> int | None:
        self._check()
        if self.key is not None:
            return None
        self.revision += 1
        self.key = (self.revision, lease_id)
        if self.create_fails_after_landing:
            raise SourceUnavailable("reply lost (test)")
        return self.revision

    def keepalive(self, lease_id: int) -> int:
        self._check()
        self.kept.append(lease_id)
        self.clock.now += self.reply_delay_s
        return self.leases.get(lease_id, 0)

    def revoke(self, lease_id: int) -> None:
        self._check()
        self.revoked.append(lease_id)
        self.expire(lease_id)

    def expire(self, lease_id: int) -> None:
        self.leases.pop(lease_id, None)
        if self.key is not None and self.key[1] == lease_id:
            self.key = None

    def close(self) -> None:
        pass


def elector(etcd: FakeEtcd, clock: Callable[[], float], name: str = "a",
            before_renew: Callable[[], None] | None = None) -> LeaderElector:
    return LeaderElector("http://unused:2379", KEY, name, ttl_s=6, clock=clock, store=etcd,
                         before_renew=before_renew)


MARGIN_6 = 6 / 3 + 6 * CLOCK_DRIFT_RATIO  # default safety margin for ttl_s=6: 2.06 s


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def etcd(clock: Clock) -> FakeEtcd:
    return FakeEtcd(clock)


def won(e: LeaderElector) -> LeaderElector:
    """Campaign without the daemon thread: one round, driven by the test."""
    e.start(background=False)
    e.step()
    return e


def test_the_winner_holds_a_fence_whose_token_is_the_keys_create_revision(etcd: FakeEtcd, clock: Clock) -> None:
    e = won(elector(etcd, clock))
    fence = e.fence()
    assert e.is_leader() and fence is not None
    assert etcd.key is not None and fence.token == etcd.key[0] == 11
    assert fence.key == KEY and fence.lease_id == etcd.key[1]
    assert fence.valid_until_s == pytest.approx(100.0 + 6 - MARGIN_6)


def test_a_candidate_takes_no_lease_while_the_key_is_held(etcd: FakeEtcd, clock: Clock) -> None:
    a = won(elector(etcd, clock, "a"))
    b = won(elector(etcd, clock, "b"))
    assert a.is_leader() and not b.is_leader() and b.fence() is None
    assert list(etcd.leases) == [1]  # b only looked at the key


def test_leadership_ends_at_the_deadline_counted_from_the_send_time_of_the_last_good_renewal(
    etcd: FakeEtcd, clock: Clock,
) -> None:
    e = won(elector(etcd, clock))
    clock.now = 102.0
    etcd.reply_delay_s = 1.5  # the answer arrives at 103.5; the renewal counts from 102.0
    e.step()
    fence = e.fence()
    assert fence is not None and fence.valid_until_s == pytest.approx(102.0 + 6 - MARGIN_6)
    clock.now = 102.0 + 6 - MARGIN_6 - 0.001
    assert e.is_leader()
    clock.now += 0.001
    assert not e.is_leader() and e.fence() is None


def test_failed_renewals_never_extend_the_deadline_and_the_step_does_not_raise(etcd: FakeEtcd, clock: Clock) -> None:
    e = won(elector(etcd, clock))
    deadline = 100.0 + 6 - MARGIN_6
    etcd.down = True
    for now in (101.0, 102.0, 103.0, deadline - 0.01):
        clock.now = now
        pause = e.step()
        assert 0 < pause <= e.renew_every_s / 4
        fence = e.fence()
        assert fence is not None and fence.valid_until_s == pytest.approx(deadline)
    clock.now = deadline
    assert not e.is_leader()


def test_a_renewal_answered_after_the_deadline_does_not_revive_the_term(etcd: FakeEtcd, clock: Clock) -> None:
    e = won(elector(etcd, clock))
    clock.now = 100.0 + 6 - MARGIN_6 - 0.5
    etcd.reply_delay_s = 1.0  # lands 0.5 s past the deadline
    e.step()
    assert not e.is_leader()
    etcd.reply_delay_s = 0.0
    e.step()  # the old lease is revoked, then the campaign starts afresh
    assert etcd.revoked == [1]
    fence = e.fence()
    assert fence is not None and fence.lease_id == 2 and fence.token == 12


def test_the_deadline_uses_the_smaller_of_the_asked_and_the_granted_ttl(etcd: FakeEtcd, clock: Clock) -> None:
    etcd.granted_ttl = 60
    fence = won(elector(etcd, clock)).fence()
    assert fence is not None and fence.valid_until_s == pytest.approx(100.0 + 6 - MARGIN_6)


def test_a_leader_whose_key_was_deleted_is_deposed_at_its_next_renewal(etcd: FakeEtcd, clock: Clock) -> None:
    e = won(elector(etcd, clock))
    etcd.key = None  # deleted by hand; the lease itself lives on
    clock.now = 101.0
    e.step()
    assert not e.is_leader()


def test_a_leader_whose_lease_etcd_forgot_is_deposed_at_its_next_renewal(etcd: FakeEtcd, clock: Clock) -> None:
    e = won(elector(etcd, clock))
    etcd.expire(1)
    clock.now = 101.0
    e.step()
    assert not e.is_leader()


def test_a_lease_whose_txn_outcome_is_unknown_is_revoked_before_the_next_campaign(
    etcd: FakeEtcd, clock: Clock,
) -> None:
    e = elector(etcd, clock)
    etcd.create_fails_after_landing = True
    won(e)
    assert not e.is_leader() and etcd.key is not None  # the Txn landed, we never learned it
    etcd.create_fails_after_landing = False
    e.step()
    assert etcd.revoked == [1]
    fence = e.fence()
    assert fence is not None and fence.lease_id == 2


def test_the_loser_of_a_race_revokes_its_unused_lease(etcd: FakeEtcd, clock: Clock) -> None:
    a, b = elector(etcd, clock, "a"), elector(etcd, clock, "b")
    real_read = etcd.read
    etcd.read = lambda key: None  # type: ignore[method-assign]  # both see the key absent
    won(a)
    won(b)
    etcd.read = real_read  # type: ignore[method-assign]
    assert a.is_leader() and not b.is_leader()
    b.step()
    assert etcd.revoked == [2] and a.is_leader()


def test_resign_revokes_the_lease_and_stops_campaigning(etcd: FakeEtcd, clock: Clock) -> None:
    e = won(elector(etcd, clock))
    assert e.resign() is True
    assert not e.is_leader() and etcd.revoked == [1] and etcd.key is None
    e.step()
    assert etcd.key is None and not e.is_leader()


def test_resign_while_etcd_is_down_reports_it_and_revokes_later(etcd: FakeEtcd, clock: Clock) -> None:
    e = won(elector(etcd, clock))
    etcd.down = True
    assert e.resign() is False
    assert not e.is_leader()
    etcd.down = False
    e.step()
    assert etcd.revoked == [1] and etcd.key is None


def test_a_stalled_keepalive_thread_cannot_keep_is_leader_true(etcd: FakeEtcd) -> None:
    gate, entered = threading.Event(), threading.Event()

    def stall() -> None:
        entered.set()
        gate.wait(30)

    e = LeaderElector("http://unused:2379", KEY, "a", ttl_s=2, store=etcd, before_renew=stall)
    try:
        fence = e.campaign(timeout_s=10)
        assert fence is not None
        assert entered.wait(10)
        final = e.fence()
        deadline = fence.valid_until_s if final is None else final.valid_until_s
        while time.monotonic() < deadline:
            time.sleep(0.01)
        assert not e.is_leader() and e.fence() is None
        gate.set()  # the thread wakes up past the deadline: it must not renew the lapsed lease
        end = time.monotonic() + 10
        while fence.lease_id not in etcd.revoked and time.monotonic() < end:
            time.sleep(0.01)
        assert fence.lease_id in etcd.revoked and fence.lease_id not in etcd.kept
    finally:
        gate.set()
        e.close()


@pytest.mark.parametrize(("kw", "match"), [
    ({"ttl_s": 0}, "ttl_s"), ({"ttl_s": 2.5}, "ttl_s"), ({"ttl_s": True}, "ttl_s"),
    ({"renew_every_s": 4.0}, "renew_every_s=4"), ({"safety_margin_s": 6.0}, "safety_margin_s"),
    ({"poll_every_s": 0.0}, "poll_every_s"),
])
def test_settings_that_would_let_a_healthy_leader_lapse_are_refused(
    etcd: FakeEtcd, clock: Clock, kw: dict[str, object], match: str,
) -> None:
    args: dict[str, object] = {"ttl_s": 6, **kw}
    with pytest.raises(ConfigError, match=match):
        LeaderElector("http://unused:2379", KEY, "a", clock=clock, store=etcd, **args)  # type: ignore[arg-type]


def test_an_empty_key_or_candidate_or_a_bad_endpoint_is_refused() -> None:
    with pytest.raises(ConfigError, match="election key"):
        LeaderElector("http://127.0.0.1:2379", "", "a")
    with pytest.raises(ConfigError, match="candidate"):
        LeaderElector("http://127.0.0.1:2379", KEY, "")
    with pytest.raises(ConfigError, match="ftp://x"):
        LeaderElector("ftp://x", KEY, "a")


def test_an_unreachable_etcd_is_source_unavailable_naming_the_endpoint_and_never_leads() -> None:
    pytest.importorskip("etcd3gw")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))  # bound, not listening: connections are refused
        port = s.getsockname()[1]
        store = EtcdElectionStore(f"http://127.0.0.1:{port}", timeout_s=1.0)
        with pytest.raises(SourceUnavailable, match=f"127.0.0.1:{port}") as info:
            store.read(KEY)
        assert info.value.__cause__ is not None
        store.close()
        with LeaderElector(f"http://127.0.0.1:{port}", KEY, "a", ttl_s=2, timeout_s=1.0) as e:
            e.start(background=False)
            assert e.step() > 0
            assert not e.is_leader()


def test_a_refused_election_is_logged_once_without_a_traceback_and_retried_slowly(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A TLS or auth failure (ConfigError from the store) is permanent: one ERROR line naming it, no
    traceback per poll, and the thread keeps going (it leads once etcd accepts it)."""
    etcd = FakeEtcd(Clock())
    calls: list[float] = []

    def refused(key: str) -> None:
        calls.append(time.monotonic())
        raise ConfigError("etcd at https://x: TLS verification of the server failed (fix: --etcd-ca FILE)")

    etcd.read = refused  # type: ignore[assignment, method-assign]
    e = LeaderElector("http://unused:2379", KEY, "a", ttl_s=3, store=etcd, poll_every_s=0.01)
    with caplog.at_level("DEBUG", logger="ebb.ledger.election"):
        e.start()
        deadline = time.monotonic() + 5
        while len(calls) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        e.close()
    assert len(calls) >= 2 and calls[1] - calls[0] >= 0.9  # retried, at most once a second
    errors = [r for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1 and "--etcd-ca" in errors[0].getMessage() and errors[0].exc_info is None
    assert not e.is_leader()
