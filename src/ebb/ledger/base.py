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
* **Errors.** Unreachable or busy stores raise :class:`~ebb.errors.TransientError`
  (etcd: :class:`~ebb.errors.SourceUnavailable` naming the endpoint); a file that is not a ledger
  raises :class:`~ebb.errors.InputError` naming the path.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from ebb.errors import LedgerConflict
from ebb.model.decisions import CycleRecord, DecisionRecord
from ebb.model.ids import CycleId, DecisionId, RunId

__all__ = ["Ledger", "check_same_cycle", "cycle_order", "decision_order", "decision_taken", "keep_last"]


@runtime_checkable
class Ledger(Protocol):
    """Append-only decision ledger; see the module docstring for the guarantees."""

    def append_cycle(self, cycle: CycleRecord) -> bool:
        """Store ``cycle`` and its decisions atomically; ``True`` if written, ``False`` if already there.

        Raises :class:`~ebb.errors.LedgerConflict` when an id is taken by different content.
        """
        ...

    def get_decision(self, decision_id: DecisionId) -> DecisionRecord | None:
        """The decision with this id, or ``None``."""
        ...

    def get_cycle(self, cycle_id: CycleId) -> CycleRecord | None:
        """The cycle with this id (with all its decisions), or ``None``."""
        ...

    def cycles(self, run_id: RunId | None = None, limit: int | None = None) -> list[CycleRecord]:
        """Cycles ordered by ``(ts_ns, cycle_id)``, optionally of one run; ``limit`` keeps the most recent."""
        ...

    def decisions(self, run_id: RunId | None = None, target: str | None = None) -> list[DecisionRecord]:
        """Decisions ordered by ``(ts_ns, decision_id)``, optionally filtered by run and target."""
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
