"""The :class:`Ledger` protocol: an append-only store of decision cycles, shared by every backend.

Guarantees every backend gives (checked by ``tests/contract/test_ledger_contract.py``):

* **Atomic cycles.** ``append_cycle`` makes a cycle and all of its decisions visible together or not
  at all, also when the writing process is killed mid-write (SIGKILL) or the store's connection drops.
  A reader never sees a cycle without all of its decisions, nor a decision without its cycle.
* **Append-only, idempotent by id.** Re-appending a cycle equal to the stored one returns ``False`` and
  changes nothing (safe to retry after a timeout). Appending a *different* cycle under an existing
  ``cycle_id``, or a cycle holding a ``decision_id`` already stored under another cycle, raises
  :class:`~ebb.errors.LedgerConflict` and writes nothing. Records are never updated or deleted.
* **Ordering.** ``cycles()`` is ordered by ``(ts_ns, cycle_id)``; ``decisions()`` by
  ``(ts_ns, decision_id)``. A cycle's decisions keep the order they were appended in.
* **Fidelity.** Records read back compare equal to the records appended (every field, JSON round-trip).
* **Consistency.** Read-your-writes within one process (one ledger object); other processes see a
  cycle once ``append_cycle`` has returned. The API is synchronous and safe to call from several
  threads of one process.
* **Fencing (optional).** ``append_cycle(cycle, fence)`` with a :class:`Fence` writes only while that
  fence is current; otherwise it raises :class:`~ebb.errors.NotLeader` and writes nothing. The cycle
  must carry ``fencing_token == fence.token`` (:class:`ValueError` before anything is written). The
  fence is checked before idempotency: a stale fence raises ``NotLeader`` even for a cycle already
  stored. "Current" depends on what the backend can see:

  - **etcd**: the election key ``fence.key`` exists and its ``create_revision`` equals
    ``fence.token``, compared by etcd in the same transaction as the writes. A deposed leader's write
    fails atomically as soon as its lease has expired or been revoked, whoever wrote since.
  - **SQLite** (no election to look at): ``fence.token`` is at least the highest ``fencing_token`` of
    any stored cycle, and the fence's lease has not run out: ``fence.valid_until_s`` is still ahead
    of the ledger's clock (``fence_clock``, ``time.monotonic`` as the electors'), checked inside the
    write transaction before anything else and again as the last step before COMMIT. A deposed
    leader is refused once its deadline has passed (``KubeLeaseElector``: >= 4.75 s before a
    successor can exist) and, whatever its deadline, once the new leader has appended one cycle.
  - **memory**: as SQLite, and while :attr:`MemoryLedger.current_token` is set (tests simulate an
    election with it) ``fence.token`` must equal it.
  - ``fence=None`` checks nothing (one controller, simulations), as before.
* **Malformed rows.** A stored row that does not decode to a valid record (damaged file, forged or
  hand-edited etcd key, bad JSON, a field of the wrong type or out of range, an unknown action, a
  cycle whose decision rows are missing or damaged, a record stored under another record's key) is
  never returned and never crashes a reader:

  - ``get_cycle(id)`` / ``get_decision(id)`` on such a row raise :class:`~ebb.errors.InputError`
    naming the ledger location, the row (cycle/decision id or etcd key), what is wrong and the fix.
  - ``cycles()`` and ``decisions()`` skip it, log one WARNING per skipped row on the ``ebb.ledger``
    logger (naming the row, as above), and return every other row; so one bad row hides only itself
    (a cycle is skipped whole when its own row or any of its decision rows is malformed;
    ``decisions()`` skips only the malformed decision rows).
  - :attr:`Ledger.skipped` then lists what the **most recent** ``cycles()`` / ``decisions()`` call
    on this object skipped (``()`` when nothing; reset by every such call). A caller that must not
    act on a partial view — the controller resuming a run — checks it right after the call::

        mine = ledger.cycles(run_id)
        if ledger.skipped:              # some of this run's rows could not be read
            ...                         # fail static: do not resume / do not act

    After ``cycles(run_id)`` every skipped row is one of that run's (SQLite: its ``run_id`` column;
    etcd: the run's index entries), so ``skipped`` says exactly whether the run's history is whole.
  - The memory backend stores validated records, so it never holds a malformed row (``skipped`` is
    always ``()``); the contract suite checks the rule on SQLite and a real etcd.
  - Appending over a malformed row (same cycle id) raises ``InputError``: it is never overwritten.
* **Errors.** Unreachable or busy stores raise :class:`~ebb.errors.TransientError`
  (etcd: :class:`~ebb.errors.SourceUnavailable` naming the endpoint; SQLite: also a full disk or a
  disk I/O error, with nothing written); a file that is not a ledger raises
  :class:`~ebb.errors.InputError` naming the path. TLS or authentication failures (etcd) and a
  second writer on one SQLite ledger (:class:`~ebb.ledger.sqlite.SqliteLedger` ``exclusive=True``)
  raise :class:`~ebb.errors.ConfigError` naming the flag to fix: retrying cannot help.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Literal, Protocol, runtime_checkable

from ebb.errors import InputError, LedgerConflict, NotLeader
from ebb.model.decisions import CycleRecord, DecisionRecord
from ebb.model.ids import CycleId, DecisionId, RunId

__all__ = ["Fence", "Ledger", "fence_token", "MalformedRow", "RowSkips", "check_fence_time", "check_fence_token",
           "check_same_cycle", "cycle_order",
           "decision_order", "decision_taken", "keep_last", "not_leader"]

log = logging.getLogger("ebb.ledger")

RowKind = Literal["cycle", "decision", "review item"]


@dataclass(frozen=True)
class MalformedRow:
    """A stored row a reader skipped because it does not decode (see "Malformed rows" above).

    ``kind`` is what the row should hold; ``key`` the row's id (SQLite) or etcd key, as text;
    ``error`` the :class:`~ebb.errors.InputError` text: the ledger location, the row, what is wrong
    and the fix.
    """

    kind: RowKind
    key: str
    error: str


@dataclass
class RowSkips:
    """Collects the malformed rows one listing call skips, logging each (one WARNING per row)."""

    rows: list[MalformedRow] = field(default_factory=list)

    def skip(self, kind: RowKind, key: str, exc: InputError) -> None:
        """Record (and log) that the row ``key`` was skipped because of ``exc``."""
        log.warning("skipping malformed ledger row: %s", exc)
        self.rows.append(MalformedRow(kind, key, str(exc)))

    def result(self) -> tuple[MalformedRow, ...]:
        return tuple(self.rows)


def fence_token(fence: object) -> int:
    """The fencing token a record written under ``fence`` carries: its ``token``; 0 unfenced (None)."""
    return int(getattr(fence, "token", 0) or 0)


@dataclass(frozen=True)
class Fence:
    """Proof of leadership handed to :meth:`Ledger.append_cycle` (made by ``LeaderElector.fence()``).

    ``key`` is the election key (a Kubernetes Lease: ``namespace/name``); ``token`` its etcd
    ``create_revision``, or the Lease's ``leaseTransitions`` + 1 (>= 1; it only grows from one leader
    to the next); ``lease_id`` the etcd lease holding the key (0 when there is none);
    ``valid_until_s`` the holder's local deadline on its monotonic clock: act only before it;
    ``holder`` the holder's identity ("" when the election names none).
    """

    key: str
    token: int
    lease_id: int = 0
    valid_until_s: float = math.inf
    holder: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.key, str) or not self.key:
            raise ValueError(f"Fence.key must be a non-empty string, got {self.key!r}")
        for name, value, low in (("token", self.token, 1), ("lease_id", self.lease_id, 0)):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"Fence.{name} must be an integer >= {low}, got {value!r}")
        if isinstance(self.valid_until_s, bool) or not isinstance(self.valid_until_s, (int, float)) \
                or math.isnan(self.valid_until_s):
            raise ValueError(f"Fence.valid_until_s must be a number, got {self.valid_until_s!r}")
        if not isinstance(self.holder, str):
            raise ValueError(f"Fence.holder must be a string, got {self.holder!r}")


@runtime_checkable
class Ledger(Protocol):
    """Append-only decision ledger; see the module docstring for the guarantees."""

    def append_cycle(self, cycle: CycleRecord, fence: Fence | None = None) -> bool:
        """Store ``cycle`` and its decisions atomically; ``True`` if written, ``False`` if already there.

        Raises :class:`~ebb.errors.LedgerConflict` when an id is taken by different content, and
        :class:`~ebb.errors.NotLeader` when ``fence`` is given and no longer current.
        """
        ...

    def get_decision(self, decision_id: DecisionId) -> DecisionRecord | None:
        """The decision with this id, or ``None``."""
        ...

    def get_cycle(self, cycle_id: CycleId) -> CycleRecord | None:
        """The cycle with this id (with all its decisions), or ``None``."""
        ...

    def cycles(self, run_id: RunId | None = None, limit: int | None = None) -> list[CycleRecord]:
        """Cycles ordered by ``(ts_ns, cycle_id)``, optionally of one run; ``limit`` keeps the most recent.

        Malformed rows are skipped (logged, listed in :attr:`skipped`); with ``limit`` they still
        count against it where the store applies the limit before decoding (SQLite), so fewer than
        ``limit`` cycles may come back.
        """
        ...

    def decisions(self, run_id: RunId | None = None, target: str | None = None) -> list[DecisionRecord]:
        """Decisions ordered by ``(ts_ns, decision_id)``, optionally filtered by run and target.

        Malformed rows are skipped (logged, listed in :attr:`skipped`).
        """
        ...

    @property
    def skipped(self) -> tuple[MalformedRow, ...]:
        """The rows the most recent ``cycles()`` / ``decisions()`` call on this object skipped."""
        ...

    def close(self) -> None:
        """Release the connection; further calls are an error. Closing twice is allowed."""
        ...


def cycle_order(c: CycleRecord) -> tuple[int, str]:
    """Sort key of :meth:`Ledger.cycles`."""
    return (c.ts_ns, c.cycle_id)


def decision_order(d: DecisionRecord) -> tuple[int, str]:
    """Sort key of :meth:`Ledger.decisions`."""
    return (d.ts_ns, d.decision_id)


def keep_last(cycles: list[CycleRecord], limit: int | None) -> list[CycleRecord]:
    """The ``limit`` most recent of already-ordered cycles (all when ``limit`` is None)."""
    if limit is None:
        return cycles
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        raise ValueError(f"limit must be an integer >= 0 or None, got {limit!r}")
    return cycles[len(cycles) - limit:] if limit else []


def check_same_cycle(stored: CycleRecord, new: CycleRecord) -> bool:
    """``False`` (nothing to do) when ``new`` equals ``stored``; LedgerConflict otherwise."""
    if stored == new:
        return False
    raise LedgerConflict(
        f"cycle {new.cycle_id!r} is already in the ledger with different content "
        f"(stored ts_ns={stored.ts_ns}, {len(stored.decisions)} decisions; "
        f"new ts_ns={new.ts_ns}, {len(new.decisions)} decisions); use a fresh cycle id"
    )


def decision_taken(decision_id: str, owner: str, cycle_id: str) -> LedgerConflict:
    """The error for a decision id already stored under another cycle."""
    return LedgerConflict(
        f"decision id {decision_id!r} of cycle {cycle_id!r} is already used by cycle {owner!r}; "
        "nothing was written; use a fresh decision id"
    )


def check_fence_token(cycle: CycleRecord, fence: Fence | None) -> None:
    """ValueError unless a fenced ``cycle`` carries the fence's token (checked before any write)."""
    if fence is None:
        return
    if not isinstance(fence, Fence):
        raise TypeError(f"fence must be a Fence or None, got {fence!r}")
    if cycle.fencing_token != fence.token:
        raise ValueError(
            f"cycle {cycle.cycle_id!r} has fencing_token={cycle.fencing_token} but is appended under the "
            f"fence of token {fence.token} (key {fence.key!r}); build the cycle with fencing_token=fence.token"
        )


def check_fence_time(fence: Fence, cycle_id: str, now_s: float) -> None:
    """NotLeader when ``fence``'s lease has run out by ``now_s`` (the holder's clock: ``valid_until_s``)."""
    if now_s >= fence.valid_until_s:
        holder = f" held by {fence.holder!r}" if fence.holder else ""
        raise not_leader(fence, cycle_id, f"its lease{holder} ran out {now_s - fence.valid_until_s:.3f} s ago")


def not_leader(fence: Fence, cycle_id: str, why: str) -> NotLeader:
    """The error for a fenced write refused because ``fence`` is no longer current."""
    return NotLeader(
        f"cycle {cycle_id!r} was not written: fencing token {fence.token} (election key {fence.key!r}) "
        f"is no longer current ({why}); stop acting and campaign again"
    )
