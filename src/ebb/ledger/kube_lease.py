"""Leader election on a Kubernetes Lease, the way client-go's ``tools/leaderelection`` does it, plus a
local deadline and a fence the ledger checks.

Protocol (``coordination.k8s.io/v1`` Lease ``namespace/name``, through :mod:`ebb.ledger.kube_lease_store`,
``pip install 'ebb[k8s]'``), as ``tryAcquireOrRenew`` in client-go's
``tools/leaderelection/leaderelection.go``:

1. **Observe.** Every read keeps the Lease's election record (holder, ``leaseDurationSeconds``,
   ``acquireTime``, ``renewTime``, ``leaseTransitions``) and, when it differs from the one kept before,
   the *local* monotonic time of that read. A Lease held by another is expired once
   ``leaseDurationSeconds`` have passed on this clock since its record last changed: the holder's
   ``renewTime`` is never compared with this host's clock, so clock *offsets* between hosts do not
   matter, only clock *rates* (client-go's ``isLeaseValid``, ``observedTime``).
2. **Acquire.** Absent → create it (holder = this candidate, ``leaseTransitions`` 0, or one more than
   this elector last saw if the Lease was deleted under it); expired, released
   (holder "") or already ours → one PUT of the observed object carrying its ``resourceVersion``,
   ``leaseTransitions`` + 1 when the holder changes. A 409 means someone wrote it since it was read:
   this round is lost. Followers try every ``retry_period_s`` × (1 + 1.2 × U[0, 1)) (client-go's
   ``JitterFactor``).
3. **Renew** every ``retry_period_s`` after a success: the PUT of the last observed object (fast path);
   on a 409, a read and the acquire rules again (slow path). A read that shows another holder ends
   leadership at once.
4. **Deadline.** Let ``t`` be this host's clock read just *before* the update that (re)acquired or last
   renewed is sent. Leadership ends locally at ``t + renew_deadline_s`` whatever the thread is doing:
   :meth:`KubeLeaseElector.is_leader` compares the clock on every call, so a paused process finds it
   ended when it resumes, and a renewal answered after it does not extend that term.
5. **Release.** :meth:`KubeLeaseElector.resign` (and ``close``) sets the holder to "" and
   ``leaseDurationSeconds`` to 1, keeping ``leaseTransitions`` (client-go's ``release``): a follower
   takes over at its next try instead of after a full lease.

**The token.** :meth:`KubeLeaseElector.fence` carries ``token = leaseTransitions + 1`` (the key is
``namespace/name``, ``holder`` this candidate, ``valid_until_s`` the deadline of step 4). A new holder
always writes ``leaseTransitions`` + 1 under optimistic concurrency, so the token grows from one leader
to the next; the same holder taking the Lease back keeps it. Deleting the Lease by hand restarts the
count at 0 for a candidate that never saw it (one that did continues its count): a ledger holding
higher tokens then refuses the new leader's writes (:class:`~ebb.errors.NotLeader`, logged every cycle)
until ``spec.leaseTransitions`` is patched above them again.

**A leader stops before a successor can start** (defaults: ``lease_duration_s`` 15, ``renew_deadline_s``
10, ``retry_period_s`` 2, as client-go; rate error ``ρ`` <= :data:`CLOCK_DRIFT_RATIO` = 1 %):

* The API server applies the update at or after ``t``; a follower sees it no earlier, restarts its
  count then, and may take the Lease no earlier than 15 s of *its* clock later: real time
  ``t + 15 / (1 + ρ)`` >= ``t + 14.85`` s.
* The holder's term ends at ``t + 10`` s on its clock, by real time ``t + 10.1`` s.
* So leadership ends locally >= 4.75 s before any successor can hold the Lease. A ledger write whose
  fence was checked before the deadline lands before a successor exists unless the writer stalls
  longer than that between the check and the commit; a write checked after the deadline is refused
  (:class:`~ebb.ledger.sqlite.SqliteLedger` compares ``valid_until_s`` with the clock inside its
  write transaction, just before COMMIT). Configurations must keep
  ``renew_deadline_s < lease_duration_s``; the margin is ``lease_duration_s / (1 + ρ) -
  renew_deadline_s (1 + ρ)``.
* ``time.monotonic`` stops while the machine is suspended; where hosts suspend, pass
  ``clock=lambda: time.clock_gettime(time.CLOCK_BOOTTIME)`` (and the same to the ledger).

**Take-over.** A dead leader's Lease is taken <= ``lease_duration_s`` + 2 jittered retries (4.4 s) after
its last renewal (23.8 s with the defaults), a released one at the followers' next try.

**Errors.** The API server not answering, 429 and 5xx never raise from the thread or :meth:`step`:
logged once per outage and retried every ``retry_period_s``; leadership lapses at its deadline. A
refusal (RBAC, a missing namespace) is logged once and retried every ``max(retry_period_s, 1)`` s.
Bad settings raise :class:`~ebb.errors.ConfigError` at construction.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from ebb.errors import ConfigError, EbbError, PermanentError, TransientError
from ebb.ledger.base import Fence
from ebb.ledger.election import CLOCK_DRIFT_RATIO, campaign_loop
from ebb.ledger.kube_lease_store import KubeLeaseStore, LeaseRecord, micro_time

__all__ = ["CLOCK_DRIFT_RATIO", "JITTER_FACTOR", "KubeLeaseElector"]

log = logging.getLogger(__name__)

JITTER_FACTOR: Final = 1.2
"""client-go's ``JitterFactor``: followers wait ``retry_period_s`` × (1 + 1.2 × U[0, 1)) between tries."""
_IDLE_S: Final = 3600.0
_INT32_MAX: Final = 2**31 - 1


@dataclass
class _Term:
    """One stretch of leadership; ``ended`` latches (a late renewal never revives it)."""

    token: int
    deadline_s: float
    ended: bool = False


class KubeLeaseElector:
    """Campaign for the Lease ``namespace/name`` as ``identity``; see the module docstring.

    ``lease_duration_s`` (whole seconds, the Lease's ``leaseDurationSeconds``), ``renew_deadline_s`` and
    ``retry_period_s`` as client-go's (15, 10, 2); ``timeout_s`` bounds each request (default
    ``renew_deadline_s / 2``: a hung request leaves time for another try). The API client: ``api_client``
    (shared, left open), else one loaded from ``kubeconfig`` / ``in_cluster``. ``clock`` is the local
    monotonic clock of the deadlines, ``wall_clock`` writes ``acquireTime`` / ``renewTime``;
    ``before_renew`` runs in the thread before each renewal (tests stall it); ``rng`` jitters retries.
    """

    def __init__(self, namespace: str, name: str, identity: str, *, lease_duration_s: int = 15,
                 renew_deadline_s: float = 10.0, retry_period_s: float = 2.0, timeout_s: float | None = None,
                 api_client: Any = None, kubeconfig: str | None = None, in_cluster: bool = False,
                 clock: Callable[[], float] = time.monotonic, wall_clock: Callable[[], float] = time.time,
                 before_renew: Callable[[], None] | None = None, rng: random.Random | None = None) -> None:
        if not isinstance(identity, str) or not identity:
            raise ConfigError(f"candidate id must be a non-empty string, got {identity!r} (fix: --candidate-id)")
        if isinstance(lease_duration_s, bool) or not isinstance(lease_duration_s, int) \
                or not 1 <= lease_duration_s <= _INT32_MAX:
            raise ConfigError(f"--lease-duration-s must be a whole number of seconds >= 1 (the Lease's "
                              f"leaseDurationSeconds), got {lease_duration_s!r}")
        if not 0 < retry_period_s * JITTER_FACTOR < renew_deadline_s < lease_duration_s:
            raise ConfigError(
                f"need 0 < --lease-retry-s x {JITTER_FACTOR} < --lease-renew-deadline-s < --lease-duration-s, got "
                f"{retry_period_s!r}, {renew_deadline_s!r}, {lease_duration_s!r} (fix: keep client-go's ratios, "
                "e.g. 15, 10 and 2 s)")
        self.identity = identity
        self.lease_duration_s, self.renew_deadline_s = lease_duration_s, float(renew_deadline_s)
        self.retry_period_s = float(retry_period_s)
        self.key = f"{namespace}/{name}"
        self._store = KubeLeaseStore(namespace, name,
                                     timeout_s=renew_deadline_s / 2 if timeout_s is None else timeout_s,
                                     api_client=api_client, kubeconfig=kubeconfig, in_cluster=in_cluster)
        self._clock, self._wall = clock, wall_clock
        self._before_renew = before_renew
        self._rng = rng or random.Random()
        self._cond = threading.Condition()
        self._io = threading.Lock()  # one request sequence at a time: the thread's round, or a release
        self._term: _Term | None = None
        self._observed: LeaseRecord | None = None
        self._observed_at_s = 0.0
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
            log.warning("%s lost leadership of Lease %s (token %d): no renewal before its deadline",
                        self.identity, self.key, term.token)
            term.ended = True
        if term.ended:
            self._term = None
            self._cond.notify_all()
            return None
        return term

    def is_leader(self) -> bool:
        """True only while this candidate holds the Lease and its local deadline has not passed."""
        with self._cond:
            return self._settle() is not None

    def fence(self) -> Fence | None:
        """The fence to pass to ``Ledger.append_cycle`` while leading, else None."""
        with self._cond:
            term = self._settle()
            return None if term is None else Fence(self.key, term.token, 0, term.deadline_s, self.identity)

    @property
    def observed(self) -> LeaseRecord | None:
        """The Lease as last read or written (None before the first answer)."""
        with self._cond:
            return self._observed

    # -- one round ------------------------------------------------------------------------------------

    def step(self) -> float:
        """Run one round now (renew while leading, else try to acquire while wanted); the seconds until
        the next round is due. An API server outage is logged, never raised."""
        with self._cond:
            if self._closed:
                raise RuntimeError(f"{self!r} is closed")
            term, want = self._settle(), self._want
        if term is None and not want:
            return _IDLE_S
        try:
            with self._io:
                pause = self._round(term)
        except TransientError as exc:
            if not self._outage:
                self._outage = True
                log.warning("%s: %s; retrying every %.2f s (leadership, if held, lapses at its deadline)",
                            self.identity, exc, self.retry_period_s)
            return self.retry_period_s
        if self._outage:
            self._outage = False
            log.info("the API server answers again; %s resumes on Lease %s", self.identity, self.key)
        return pause

    def _spec(self, *, holder: str, acquire: str, transitions: int, duration_s: int | None = None) -> dict[str, Any]:
        return {"holderIdentity": holder, "leaseDurationSeconds": duration_s or self.lease_duration_s,
                "acquireTime": acquire, "renewTime": micro_time(self._wall()), "leaseTransitions": transitions}

    def _round(self, term: _Term | None) -> float:
        seen = self.observed
        if term is not None and seen is not None and seen.holder == self.identity:  # fast path
            if self._before_renew is not None:
                self._before_renew()
            with self._cond:
                if self._settle() is not term:  # lapsed while the hook (or the process) stalled
                    return 0.0
            sent = self._clock()  # read before sending: the server renews no earlier than this
            got = self._store.update(seen, self._spec(holder=self.identity, acquire=seen.acquire_time,
                                                      transitions=seen.transitions))
            if got is not None:
                return self._won(got, sent)
        rec = self._store.get()
        with self._cond:
            want = self._want and not self._closed
        if rec is None:
            if not want:
                return _IDLE_S
            sent = self._clock()
            # client-go starts the count at 0; a Lease deleted under us continues the count we saw
            count = 0 if seen is None else seen.transitions + 1
            got = self._store.create(self._spec(holder=self.identity, acquire=micro_time(self._wall()),
                                                transitions=count))
            return self._follow() if got is None else self._won(got, sent)
        self._saw(rec)
        mine = rec.holder == self.identity
        if not mine:
            self._deposed(rec.holder)
            if rec.holder and self._clock() < self._observed_at_s + rec.lease_duration_s:
                return self._follow()
        if not want:
            return _IDLE_S
        sent = self._clock()
        got = self._store.update(rec, self._spec(
            holder=self.identity, acquire=rec.acquire_time if mine else micro_time(self._wall()),
            transitions=rec.transitions if mine else rec.transitions + 1))
        return self._follow() if got is None else self._won(got, sent)

    def _follow(self) -> float:
        return self.retry_period_s * (1 + JITTER_FACTOR * self._rng.random())

    def _saw(self, rec: LeaseRecord) -> None:
        """Keep ``rec``; restart the expiry count when its election record changed."""
        with self._cond:
            if self._observed is None or self._observed.record != rec.record:
                self._observed_at_s = self._clock()
            self._observed = rec

    def _deposed(self, holder: str) -> None:
        with self._cond:
            term = self._settle()
            if term is not None:
                log.warning("%s was deposed from Lease %s (token %d): %s", self.identity, self.key, term.token,
                            f"{holder} holds it" if holder else "it was released")
                term.ended = True
                self._settle()

    def _won(self, got: LeaseRecord, sent: float) -> float:
        """This candidate's write landed: lead (or lead on) until ``sent + renew_deadline_s``."""
        self._saw(got)
        token = got.transitions + 1
        with self._cond:
            term = self._settle()
            if term is not None and term.token != token:  # the count was edited under us: a new term
                term.ended = True
                term = self._settle()
            if not self._want or self._closed:
                return 0.0  # resigned meanwhile: resign() releases what this round took once it may
            if term is None:
                self._term = _Term(token, sent + self.renew_deadline_s)
                self._cond.notify_all()
                log.info("%s leads Lease %s (leaseTransitions %d, fencing token %d)", self.identity, self.key,
                         got.transitions, token)
            else:
                term.deadline_s = max(term.deadline_s, sent + self.renew_deadline_s)
        return max(0.0, sent + self.retry_period_s - self._clock())

    # -- lifecycle ------------------------------------------------------------------------------------

    def _loop(self) -> None:
        campaign_loop(self._cond, lambda: self._closed, self.step, who=self.identity,
                      what="the Lease election was refused", retry_s=self.retry_period_s)

    def start(self, *, background: bool = True) -> None:
        """Campaign in a daemon thread (keep leadership, campaign again after losing it);
        ``background=False`` starts no thread: the caller runs :meth:`step` itself."""
        with self._cond:
            if self._closed:
                raise RuntimeError(f"{self!r} is closed")
            self._want = True
            if background and self._thread is None:
                self._thread = threading.Thread(target=self._loop, daemon=True, name=f"ebb-lease-{self.identity}")
                self._thread.start()
            self._cond.notify_all()

    def campaign(self, timeout_s: float | None = None) -> Fence | None:
        """:meth:`start`, then wait until this candidate leads: its fence, or None after ``timeout_s``."""
        self.start()
        end = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            fence = self.fence()
            if fence is not None:
                return fence
            left = None if end is None else end - time.monotonic()
            if left is not None and left <= 0:
                return None
            with self._cond:
                self._cond.wait(timeout=0.5 if left is None else min(left, 0.5))

    def resign(self) -> bool:
        """Stop leading and campaigning, and release the Lease if this candidate holds it: True once
        released or not held, False when the API server did not answer (it expires on its own)."""
        with self._cond:
            self._want = False
            term = self._settle()
            if term is not None:
                term.ended = True
                self._settle()
            self._cond.notify_all()
        with self._io:
            seen = self.observed
            if seen is None or seen.holder != self.identity:
                return True
            try:
                got = self._store.update(seen, self._spec(holder="", acquire=micro_time(self._wall()),
                                                          transitions=seen.transitions, duration_s=1))
            except EbbError as exc:
                log.warning("%s: resigned, but the Lease %s was not released (it expires within %d s): %s",
                            self.identity, self.key, self.lease_duration_s, exc)
                return False
            if got is not None:
                self._saw(got)
            return True

    def close(self) -> None:
        """Resign, stop the thread and release the API client; closing twice is allowed."""
        with self._cond:
            if self._closed:
                return
        self.resign()
        with self._cond:
            self._closed = True
            thread, self._thread = self._thread, None
            self._cond.notify_all()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=self._store.timeout_s * 3 + 1.0)
        self._store.close()

    def __enter__(self) -> KubeLeaseElector:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"KubeLeaseElector({self.key!r}, {self.identity!r})"
