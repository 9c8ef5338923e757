"""Rollback channel, stateful part: the compensation log, the manual review queue and :func:`compensate`.

A :class:`CompensationLog` lives next to the decision ledger — separate tables in the same SQLite
file (:class:`SqliteCompensationLog`), or a sibling key range under the same etcd prefix
(:class:`EtcdCompensationLog`) — and records

* which compensation steps are **done** (idempotency key: ``event_id``; recorded once, never changed);
* a **manual review queue** of root events whose compensation did not finish in its time budget or
  failed: :meth:`~CompensationLog.enqueue`, :meth:`~CompensationLog.list`, :meth:`~CompensationLog.show`,
  :meth:`~CompensationLog.resolve`, :meth:`~CompensationLog.retry` (back to ``pending``). An item's id
  is its root ``event_id``; enqueuing the same event again re-opens the one item.

:func:`compensate` applies :func:`ebb.gates.rollback.plan_compensation` through an injected step
function (the live controller's writes each step to the ledger and applies it through its actuator,
:mod:`ebb.live.compensation`), skipping steps already recorded done, so running it twice has the
effect of running it once. A step is recorded done only after the step function returned
(at-least-once to it across a crash between the two; the controller's step is idempotent by its
deterministic decision id). If the budget (default 0.8 s, SPEC §3.5) runs out before the last step,
or the step function raises, the unfinished roots are enqueued — except when it raises
:class:`CompensationDeferred` (the step could not even be recorded: the caller resumes later).
:func:`compensation_log_for` opens the log next to an open ledger.

The log does not change the :class:`~ebb.ledger.base.Ledger` protocol; it only shares its storage.

The pieces: :mod:`ebb.ledger.review_items` (:class:`ReviewItem`, its validation, the
:class:`CompensationLog` protocol) and :mod:`ebb.ledger.review_logs` (the memory, SQLite and etcd
logs); their classes, aliases and constants are re-exported here.

**Malformed items** (details in :mod:`ebb.ledger.review_logs`): a stored review item that does not
decode is never returned — :meth:`~CompensationLog.show` and the updates raise
:class:`~ebb.errors.InputError` naming the row and the fix; :meth:`~CompensationLog.list` skips it
(one WARNING per row on the ``ebb.ledger`` logger, listed in ``skipped``). ``read_only=True`` opens
an SQLite log without writing anything.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

from ebb.errors import EbbError, TransientError
from ebb.gates.rollback import CompensationStep, EventGraph, plan_compensation
from ebb.ledger.base import Ledger
from ebb.ledger.etcd import DEFAULT_PREFIX, EtcdLedger
from ebb.ledger.location import EtcdAuth, check_auth_fits, parse_location
from ebb.ledger.memory import MemoryLedger
from ebb.ledger.sqlite import SqliteLedger
from ebb.ledger.review_items import CompensationLog, ReviewItem, ReviewItemNotFound, ReviewItems, ReviewStatus
from ebb.ledger.review_logs import (REVIEW_SCHEMA_VERSION, EtcdCompensationLog, MemoryCompensationLog,
                                    SqliteCompensationLog)

__all__ = [
    "ReviewStatus", "ReviewItem", "ReviewItemNotFound", "CompensationLog", "MemoryCompensationLog",
    "SqliteCompensationLog", "EtcdCompensationLog", "open_compensation_log", "CompensationResult",
    "compensate", "DEFAULT_BUDGET_S", "REVIEW_SCHEMA_VERSION", "ReviewItems", "CompensationDeferred",
    "compensation_log_for",
]

log = logging.getLogger(__name__)

DEFAULT_BUDGET_S: Final = 0.8


class CompensationDeferred(TransientError):
    """Raised by a step function when the step cannot be recorded now (the ledger refused, leadership
    lapsed): :func:`compensate` stops at once, enqueues nothing and re-raises; the caller resumes the
    compensation later (done steps stay done)."""


def open_compensation_log(where: str | os.PathLike[str], *, create: bool = True, read_only: bool = False,
                          etcd_auth: EtcdAuth | None = None) -> CompensationLog:
    """Open the log next to a ledger; same locations and options as :func:`ebb.ledger.open_ledger`
    (``read_only`` applies to SQLite; ``etcd_auth`` to etcd)."""
    loc = parse_location(where)
    check_auth_fits(loc, etcd_auth)
    if loc.kind == "etcd":
        return EtcdCompensationLog(loc.target, prefix=loc.prefix or DEFAULT_PREFIX, auth=etcd_auth)
    if loc.kind == "memory":
        return MemoryCompensationLog()
    return SqliteCompensationLog(loc.target, create=create, read_only=read_only)


def compensation_log_for(ledger: Ledger) -> CompensationLog:
    """The log next to an open ``ledger``: the same SQLite file, the same etcd endpoint, prefix and
    credentials, or one in memory for a :class:`~ebb.ledger.memory.MemoryLedger` (and, with a
    warning, for a ledger of any other kind: nothing of it survives the process)."""
    if isinstance(ledger, SqliteLedger):
        return SqliteCompensationLog(ledger.path)
    if isinstance(ledger, EtcdLedger):
        return EtcdCompensationLog(ledger.endpoint, prefix=ledger.prefix, auth=ledger.auth)
    if not isinstance(ledger, MemoryLedger):
        log.warning("compensation log for a %s kept in memory: review items do not survive the process",
                    type(ledger).__name__)
    return MemoryCompensationLog()


@dataclass(frozen=True, slots=True)
class CompensationResult:
    """What :func:`compensate` did. ``completed``: every step is now done (applied now or before).

    ``applied``: steps the step function ran now; ``skipped``: already recorded done; ``remaining``:
    steps not run (budget out or failure); ``enqueued``: root ids put in the review queue; ``error``:
    why the step function raised (an Ebb error's message, else the exception's type and text);
    ``reason``: why the roots were enqueued, when any was (each item's reason adds its steps left).
    """

    completed: bool
    applied: tuple[str, ...]
    skipped: tuple[str, ...]
    remaining: tuple[str, ...]
    enqueued: tuple[str, ...]
    elapsed_s: float
    error: str | None = None
    reason: str | None = None


def compensate(graph: EventGraph, roots: Sequence[str], apply: Callable[[CompensationStep], None],
               log: CompensationLog, *, budget_s: float = DEFAULT_BUDGET_S,
               clock: Callable[[], float] = time.monotonic,
               wall_clock: Callable[[], float] = time.time) -> CompensationResult:
    """Undo ``roots`` and their descendants through ``apply(step)``, idempotently.

    Steps recorded done in ``log`` are skipped. Before each step the elapsed time (by ``clock``) is
    compared with ``budget_s``; once over, or if ``apply`` raises, the remaining steps are not run
    and every root whose compensation is unfinished is enqueued for manual review with the reason.
    :class:`CompensationDeferred` from ``apply`` is re-raised instead (nothing enqueued).
    """
    if not budget_s > 0:
        raise ValueError(f"budget_s must be > 0, got {budget_s!r}")
    start = clock()
    steps = plan_compensation(graph, roots)
    done = log.done_ids(s.event_id for s in steps)
    applied: list[str] = []
    skipped: list[str] = []
    error: str | None = None
    stop_at: int | None = None
    for i, step in enumerate(steps):
        if step.event_id in done:
            skipped.append(step.event_id)
            continue
        if clock() - start > budget_s:
            stop_at = i
            break
        try:
            apply(step)
        except CompensationDeferred:
            raise
        except Exception as exc:  # the actuator is foreign code; any failure goes to review
            error = str(exc) if isinstance(exc, EbbError) else f"{type(exc).__name__}: {exc}"
            stop_at = i
            break
        log.mark_done(step, wall_clock())
        done.add(step.event_id)
        applied.append(step.event_id)
    remaining = tuple(s.event_id for s in steps[stop_at:] if s.event_id not in done) if stop_at is not None else ()
    enqueued: list[str] = []
    why: str | None = None
    if remaining:
        elapsed = clock() - start
        why = (f"compensation failed: {error}" if error is not None
               else f"compensation did not finish within {budget_s * 1000:.0f} ms "
                    f"({elapsed * 1000:.0f} ms elapsed)")
        left = set(remaining)
        for root in dict.fromkeys(roots):
            todo = graph.closure([root]) & left
            if todo:
                log.enqueue(root, f"{why}; {len(todo)} step(s) left", wall_clock())
                enqueued.append(root)
    return CompensationResult(completed=not remaining, applied=tuple(applied), skipped=tuple(skipped),
                              remaining=remaining, enqueued=tuple(enqueued), elapsed_s=clock() - start,
                              error=error, reason=why)
