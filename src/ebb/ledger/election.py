"""Leader election on etcd: one lease-held key, a fencing token that only grows, and a local deadline
that ends leadership before anyone else can win.

Protocol (etcd v3 JSON gateway, ``pip install 'ebb[etcd]'``):

1. **Campaign.** Poll the election key every ``poll_every_s`` until it is absent; then grant a lease of
   ``ttl_s`` and send one Txn: ``create_revision(key) == 0`` → put ``key = candidate_id`` with the lease
   and read it back. The winner's fencing token is the key's ``create_revision``. A loser revokes its
   unused lease and polls again.
2. **Lead.** A daemon thread renews the lease every ``renew_every_s`` (default ``ttl_s / 3``; after a
   failed renewal, every ``min(poll_every_s, renew_every_s / 4)``) and reads the key back: if it is
   gone or was re-created, leadership ends at once.
3. **Lose, resign.** Leadership ends when the local deadline passes without a renewal, whatever the
   thread is doing; the old lease is revoked as soon as etcd answers and the campaign starts again.
   :meth:`LeaderElector.resign` revokes at once and stops campaigning.

**The token only grows.** etcd's revision is one cluster-wide counter that every write increments and
that never goes back (it survives restarts; compaction drops old values, not the counter). A successor's
key is created by a later write than its predecessor's, so its ``create_revision`` is strictly higher.
Only wiping etcd's data restarts it; a wiped cluster must come with a fresh ledger.

**A leader stops before a successor can start** (numbers for ``ttl_s=5`` and the default margin
``ttl_s / 3 + ttl_s * CLOCK_DRIFT_RATIO`` = 1.667 + 0.050 = 1.717 s):

* Let ``t`` be the elector's clock read just *before* a keep-alive (or the lease grant) is sent. etcd
  cannot process the request before it leaves, so when it accepts it, it sets the lease to expire at
  its own now (>= ``t``) + 5 s. Nobody can win before the key is deleted with the lease: not before
  real time ``t + 5 / (1 + ρ)`` >= ``t + 4.95`` s for clock rate errors ``ρ`` <= 1 %.
* The local deadline is ``t + 5 - 1.717 = t + 3.283`` s on the elector's clock, at most ``t + 3.316`` s
  of real time. :meth:`LeaderElector.is_leader` compares the clock on every call, so it turns False then
  even if the keep-alive thread is blocked or the whole process was paused; a renewal answered after the
  deadline does not revive that term.
* So leadership ends locally >= 1.63 s before a successor can exist: an action started right after
  ``is_leader()`` returned True has that long to finish (``Fence.valid_until_s`` says until when).
* The reply's arrival time would be unsafe: a reply delayed 2 s would push the deadline 2 s past the
  real expiry. A renewal with no reply moves nothing; if etcd applied it, the lease only lives longer,
  which delays the successor. etcd may lengthen a lease (TTLs under its minimum, 2 s with default
  flags, are raised; a new etcd leader extends every lease), never shorten one; the deadline uses the
  smaller of the asked and the granted TTL.
* Not covered by any deadline: a stall longer than that window *between* ``is_leader()`` and the action.
  For the ledger the fence closes that hole (``EtcdLedger.append_cycle(cycle, fence)`` compares the
  token inside etcd's Txn); other side effects must be idempotent or fenced on their own. An election
  key deleted by hand deposes its leader only at the next renewal (<= ``renew_every_s``).
* ``time.monotonic`` stops while the machine is suspended; where hosts suspend, pass
  ``clock=lambda: time.clock_gettime(time.CLOCK_BOOTTIME)``.

**Takeover.** A dead leader's lease expires <= ``ttl_s`` after its last renewal, etcd reaps expired
leases every 0.5 s and followers poll every ``poll_every_s``: a successor leads within
``ttl_s + 0.5 + poll_every_s`` plus a few round trips (``tests/integration/test_leader_election.py``).

**Errors.** etcd not answering never raises from the thread or :meth:`LeaderElector.step`: it is
logged (once per outage) and retried every ``min(poll_every_s, renew_every_s / 4)``; leadership lapses
at the deadline and the campaign resumes once etcd answers. Configuration errors raise
:class:`~ebb.errors.ConfigError`; etcd errors are wrapped in :mod:`ebb.errors` types, cause chained.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, Protocol

from ebb.errors import ConfigError, EbbError, PermanentError, TransientError
from ebb.ledger.base import Fence
from ebb.ledger.etcd_gateway import EtcdGateway, b64
from ebb.ledger.location import EtcdAuth

__all__ = ["CLOCK_DRIFT_RATIO", "ElectionStore", "EtcdElectionStore", "Fence", "LeaderElector"]

log = logging.getLogger(__name__)

CLOCK_DRIFT_RATIO: Final = 0.01
"""Largest rate error assumed between the elector's clock and etcd's (1 %; NTP keeps real ones < 0.05 %)."""

_IDLE_S: Final = 3600.0


class ElectionStore(Protocol):
    """The five etcd operations an election needs (a fake stands in for etcd in unit tests)."""

    endpoint: str

    def read(self, key: str) -> tuple[int, int] | None:
        """``(create_revision, lease_id)`` of ``key``, or None when absent."""
        ...

    def grant(self, ttl_s: int) -> tuple[int, int]:
        """A new lease: ``(lease_id, granted_ttl_s)``."""
        ...

    def create(self, key: str, value: str, lease_id: int) -> int | None:
        """Put ``key`` with the lease only if absent; its ``create_revision``, or None if it existed."""
        ...

    def keepalive(self, lease_id: int) -> int:
        """Renew the lease; its TTL in seconds, or <= 0 when etcd no longer knows it."""
        ...

    def revoke(self, lease_id: int) -> None:
        """Revoke the lease (deleting its keys); a lease etcd no longer knows is fine."""
        ...

    def close(self) -> None:
        """Release the connection."""
        ...


class EtcdElectionStore:
    """:class:`ElectionStore` over etcd's JSON gateway; ``timeout_s`` bounds each request; ``auth`` as for
    :class:`~ebb.ledger.etcd.EtcdLedger` (TLS files, user and password)."""

    def __init__(self, endpoint: str, *, timeout_s: float, auth: EtcdAuth | None = None) -> None:
        self._gw = EtcdGateway(endpoint, timeout_s=timeout_s, owner="EtcdElectionStore", auth=auth)
        self.endpoint = self._gw.endpoint

    def _post(self, path: str, payload: dict[str, Any], op: str, *, gone_ok: bool = False) -> dict[str, Any]:
        try:
            return self._gw.post(path, payload, op)
        except ConfigError as exc:  # etcd refused the request
            if gone_ok and "lease not found" in str(exc):
                return {}
            raise

    def read(self, key: str) -> tuple[int, int] | None:
        kvs = self._post("/kv/range", {"key": b64(key.encode())}, "election read").get("kvs", [])
        return (int(kvs[0].get("create_revision", 0)), int(kvs[0].get("lease", 0))) if kvs else None

    def grant(self, ttl_s: int) -> tuple[int, int]:
        resp = self._post("/lease/grant", {"TTL": ttl_s}, "lease grant")
        return int(resp["ID"]), int(resp.get("TTL", 0))

    def create(self, key: str, value: str, lease_id: int) -> int | None:
        k = b64(key.encode())
        resp = self._post("/kv/txn", {
            "compare": [{"key": k, "result": "EQUAL", "target": "CREATE", "create_revision": 0}],
            "success": [{"request_put": {"key": k, "value": b64(value.encode()), "lease": lease_id}},
                        {"request_range": {"key": k}}],
        }, "election txn")
        if not resp.get("succeeded"):
            return None
        kvs = resp["responses"][1]["response_range"]["kvs"]
        return int(kvs[0]["create_revision"])

    def keepalive(self, lease_id: int) -> int:
        resp = self._post("/lease/keepalive", {"ID": lease_id}, "lease keepalive")
        return int(resp.get("result", {}).get("TTL", 0))

    def revoke(self, lease_id: int) -> None:
        self._post("/lease/revoke", {"ID": lease_id}, "lease revoke", gone_ok=True)

    def close(self) -> None:
        self._gw.close()


@dataclass
class _Term:
    """One stretch of leadership on one lease; ``ended`` latches (a late renewal never revives it)."""

    lease_id: int
    token: int
    deadline_s: float
    ended: bool = False


def campaign_loop(cond: threading.Condition, closed: Callable[[], bool], step: Callable[[], float], *, who: str,
                  what: str, retry_s: float) -> None:
    """An elector's campaign thread (etcd's and the Kubernetes Lease's): ``step()`` and wait the seconds it
    returns, until ``closed()`` (read under ``cond``, whose ``notify`` wakes the wait). A
    :class:`~ebb.errors.PermanentError` (auth, TLS, RBAC) is logged once per distinct message and retried
    every ``max(retry_s, 1)`` s; any other error is logged and retried after ``retry_s``: the thread
    outlives every surprise, and leadership lapses meanwhile."""
    refused: str | None = None
    while True:
        with cond:
            if closed():
                return
        try:
            pause = step()
            refused = None
        except PermanentError as exc:
            if str(exc) != refused:
                refused = str(exc)
                log.error("%s: %s (%s); retrying every %.2f s", who, what, exc, max(retry_s, 1.0))
            pause = max(retry_s, 1.0)
        except Exception:
            with cond:
                if closed():
                    return
            log.exception("%s: election round failed; retrying", who)
            pause = retry_s
        with cond:
            if closed():
                return
            cond.wait(timeout=pause)


class LeaderElector:
    """Campaign for ``election_key`` on etcd at ``endpoint`` as ``candidate_id``; see the module docstring.

    ``ttl_s`` is the lease TTL (whole seconds, as etcd keeps it); ``renew_every_s`` defaults to
    ``ttl_s / 3``; ``safety_margin_s`` (default ``ttl_s / 3 + ttl_s * CLOCK_DRIFT_RATIO``) is how long
    before the earliest possible lease expiry leadership ends locally; ``poll_every_s`` (default
    ``min(0.25, ttl_s / 10)``) is how often followers look at the key; ``timeout_s`` (default
    ``renew_every_s``) bounds each request. ``before_renew`` runs in the keep-alive thread before each
    renewal (tests block it to play a stalled process). ``store`` replaces etcd (unit tests); ``auth``
    holds the etcd TLS files and user (:class:`~ebb.ledger.location.EtcdAuth`).
    """

    def __init__(self, endpoint: str, election_key: str, candidate_id: str, *, ttl_s: int = 5,
                 renew_every_s: float | None = None, clock: Callable[[], float] = time.monotonic,
                 safety_margin_s: float | None = None, poll_every_s: float | None = None,
                 timeout_s: float | None = None, before_renew: Callable[[], None] | None = None,
                 store: ElectionStore | None = None, auth: EtcdAuth | None = None) -> None:
        if not isinstance(election_key, str) or not election_key:
            raise ConfigError(f"election key must be a non-empty string, got {election_key!r}")
        if not isinstance(candidate_id, str) or not candidate_id:
            raise ConfigError(f"candidate id must be a non-empty string, got {candidate_id!r}")
        if isinstance(ttl_s, bool) or not isinstance(ttl_s, int) or ttl_s < 1:
            raise ConfigError(f"ttl_s must be a whole number of seconds >= 1 (etcd lease TTL), got {ttl_s!r}")
        self.ttl_s = ttl_s
        self.renew_every_s = ttl_s / 3 if renew_every_s is None else float(renew_every_s)
        self.safety_margin_s = (ttl_s / 3 + ttl_s * CLOCK_DRIFT_RATIO if safety_margin_s is None
                                else float(safety_margin_s))
        self.poll_every_s = min(0.25, ttl_s / 10) if poll_every_s is None else float(poll_every_s)
        if not 0 <= self.safety_margin_s < ttl_s:
            raise ConfigError(f"safety_margin_s must be in [0, ttl_s={ttl_s}), got {self.safety_margin_s!r}")
        if not 0 < self.renew_every_s < ttl_s - self.safety_margin_s:
            raise ConfigError(
                f"renew_every_s={self.renew_every_s:g} must be > 0 and below ttl_s - safety_margin_s = "
                f"{ttl_s - self.safety_margin_s:g}, or a healthy leader would lapse between renewals; "
                "renew more often or raise ttl_s")
        if not self.poll_every_s > 0:
            raise ConfigError(f"poll_every_s must be > 0, got {self.poll_every_s!r}")
        self._retry_s = min(self.poll_every_s, self.renew_every_s / 4)
        self.election_key = election_key
        self.candidate_id = candidate_id
        self._clock = clock
        self._before_renew = before_renew
        self._store: ElectionStore = store if store is not None else EtcdElectionStore(
            endpoint, timeout_s=self.renew_every_s if timeout_s is None else timeout_s, auth=auth)
        self.endpoint = self._store.endpoint
        self._cond = threading.Condition()
        self._term: _Term | None = None
        self._stale: list[int] = []  # leases of ended terms and lost races, to revoke when etcd answers
        self._want = False
        self._closed = False
        self._outage = False
        self._thread: threading.Thread | None = None

    # -- queries --------------------------------------------------------------------------------------

    def _settle(self) -> _Term | None:
        """The live term, ending it first if its deadline has passed. Caller holds ``_cond``."""
        term = self._term
        if term is None:
            return None
        if not term.ended and self._clock() >= term.deadline_s:
            log.warning("%s lost leadership of %s (token %d): no renewal before its deadline",
                        self.candidate_id, self.election_key, term.token)
            term.ended = True
        if term.ended:
            self._term = None
            self._stale.append(term.lease_id)
            self._cond.notify_all()
            return None
        return term

    def is_leader(self) -> bool:
        """True only while this candidate holds the key and its local deadline has not passed."""
        with self._cond:
            return self._settle() is not None

    def fence(self) -> Fence | None:
        """The fence to pass to ``Ledger.append_cycle`` while leading, else None."""
        with self._cond:
            term = self._settle()
            if term is None:
                return None
            return Fence(self.election_key, term.token, term.lease_id, term.deadline_s)

    # -- one round ------------------------------------------------------------------------------------

    def step(self) -> float:
        """Run one round now: revoke leases of ended terms, then renew (leading) or campaign (wanted).

        Returns the seconds until the next round is due. The daemon thread of :meth:`start` calls it in
        a loop; after ``start(background=False)`` the caller does. An etcd outage is logged, never raised.
        """
        with self._cond:
            if self._closed:
                raise RuntimeError(f"{self!r} is closed")
            term, want, stale = self._settle(), self._want, list(self._stale)
        try:
            self._revoke(stale)
            if term is not None:
                pause = self._renew(term)
            elif want:
                pause = self._campaign_once()
            else:
                pause = _IDLE_S
        except TransientError as exc:
            self._note_outage(exc)
            return self._retry_s
        if self._outage:
            self._outage = False
            log.info("etcd at %s answers again; %s resumes", self.endpoint, self.candidate_id)
        return pause

    def _note_outage(self, exc: TransientError) -> None:
        if not self._outage:
            self._outage = True
            log.warning("%s: %s; retrying every %.2f s (leadership, if held, lapses at its deadline)",
                        self.candidate_id, exc, self._retry_s)
        else:
            log.debug("%s: still no answer: %s", self.candidate_id, exc)

    def _revoke(self, leases: list[int]) -> None:
        for lease in leases:
            try:
                self._store.revoke(lease)
            except TransientError:
                raise
            except EbbError as exc:  # refused for good: it expires on its own within ttl_s
                log.warning("%s: could not revoke lease %d: %s", self.candidate_id, lease, exc)
            with self._cond:
                if lease in self._stale:
                    self._stale.remove(lease)

    def _renew(self, term: _Term) -> float:
        if self._before_renew is not None:
            self._before_renew()
        with self._cond:
            if self._settle() is not term:  # lapsed while the hook (or the process) stalled
                return 0.0
        sent = self._clock()  # read before sending: etcd renews no earlier than this
        ttl = self._store.keepalive(term.lease_id)
        with self._cond:
            if self._settle() is not term:
                return 0.0
            if ttl > 0:
                term.deadline_s = max(term.deadline_s, sent + min(self.ttl_s, ttl) - self.safety_margin_s)
        held = ttl > 0 and self._store.read(self.election_key) == (term.token, term.lease_id)
        if not held:
            with self._cond:
                if self._settle() is term:
                    log.warning("%s was deposed from %s (token %d): %s", self.candidate_id,
                                self.election_key, term.token,
                                "its lease expired" if ttl <= 0 else "the key was deleted or replaced")
                    term.ended = True
                    self._settle()
            return 0.0
        return max(0.0, sent + self.renew_every_s - self._clock())

    def _campaign_once(self) -> float:
        if self._store.read(self.election_key) is not None:
            return self.poll_every_s
        sent = self._clock()  # the lease cannot start before this
        lease, granted = self._store.grant(self.ttl_s)
        try:
            token = self._store.create(self.election_key, self.candidate_id, lease)
        except BaseException:
            with self._cond:  # the Txn may have landed: revoking the lease undoes it
                self._stale.append(lease)
            raise
        ttl = min(self.ttl_s, granted)
        with self._cond:
            if token is None or not self._want or self._closed:
                self._stale.append(lease)
                return self.poll_every_s if token is None else 0.0
            self._term = _Term(lease, token, sent + ttl - self.safety_margin_s)
            self._cond.notify_all()
        if granted != self.ttl_s:
            log.info("etcd granted a %d s lease for the asked %d s", granted, self.ttl_s)
        log.info("%s leads %s with fencing token %d", self.candidate_id, self.election_key, token)
        return max(0.0, sent + self.renew_every_s - self._clock())

    # -- lifecycle ------------------------------------------------------------------------------------

    def _loop(self) -> None:
        campaign_loop(self._cond, lambda: self._closed, self.step, who=self.candidate_id, what="etcd refused the election",
                      retry_s=self.poll_every_s)

    def start(self, *, background: bool = True) -> None:
        """Campaign in a daemon thread (and keep leadership, and campaign again after losing it).

        ``background=False`` starts no thread: the caller then runs :meth:`step` itself, again after
        the seconds each call returns.
        """
        with self._cond:
            if self._closed:
                raise RuntimeError(f"{self!r} is closed")
            self._want = True
            if background and self._thread is None:
                self._thread = threading.Thread(target=self._loop, daemon=True,
                                                name=f"ebb-election-{self.candidate_id}")
                self._thread.start()
            self._cond.notify_all()

    def campaign(self, timeout_s: float | None = None) -> Fence | None:
        """:meth:`start`, then wait until this candidate leads: its fence, or None after ``timeout_s``."""
        self.start()
        end = None if timeout_s is None else time.monotonic() + timeout_s
        with self._cond:
            while True:
                term = self._settle()
                if term is not None:
                    return Fence(self.election_key, term.token, term.lease_id, term.deadline_s)
                left = None if end is None else end - time.monotonic()
                if left is not None and left <= 0:
                    return None
                self._cond.wait(timeout=0.5 if left is None else min(left, 0.5))

    def resign(self) -> bool:
        """Stop leading and campaigning; True once the lease is revoked (a successor may win at once),
        False when etcd did not answer (the thread retries; the lease expires within ``ttl_s`` anyway)."""
        with self._cond:
            self._want = False
            term = self._settle()
            if term is not None:
                term.ended = True
                self._settle()
            stale = list(self._stale)
            self._cond.notify_all()
        try:
            self._revoke(stale)
        except TransientError as exc:
            log.warning("%s: resigned, but %s", self.candidate_id, exc)
            return False
        return True

    def close(self) -> None:
        """Resign, stop the thread and release the connection; closing twice is allowed."""
        with self._cond:
            if self._closed:
                return
        self.resign()
        with self._cond:
            self._closed = True
            thread, self._thread = self._thread, None
            self._cond.notify_all()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=self.renew_every_s + 5.0)
        try:  # a campaign the thread finished after resign() above left its lease here
            self._revoke(list(self._stale))
        except TransientError as exc:
            log.warning("%s: closing without revoking every lease (they expire within %d s): %s",
                        self.candidate_id, self.ttl_s, exc)
        self._store.close()

    def __enter__(self) -> LeaderElector:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"LeaderElector({self.endpoint!r}, {self.election_key!r}, {self.candidate_id!r})"
