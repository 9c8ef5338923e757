"""Rollback channel, stateful part: the compensation log, the manual review queue and :func:`compensate`.

A :class:`CompensationLog` lives next to the decision ledger — separate tables in the same SQLite
file (:class:`SqliteCompensationLog`), or a sibling key range under the same etcd prefix
(:class:`EtcdCompensationLog`) — and records

* which compensation steps are **done** (idempotency key: ``event_id``; recorded once, never changed);
* a **manual review queue** of root events whose compensation did not finish in its time budget or
  failed: :meth:`~CompensationLog.enqueue`, :meth:`~CompensationLog.list`, :meth:`~CompensationLog.show`,
  :meth:`~CompensationLog.resolve`, :meth:`~CompensationLog.retry` (back to ``pending``). An item's id
  is its root ``event_id``; enqueuing the same event again re-opens the one item.

:func:`compensate` applies :func:`ebb.gates.rollback.plan_compensation` through an injected actuator,
skipping steps already recorded done, so running it twice has the effect of running it once. A step
is recorded done only after the actuator returned (at-least-once to the actuator across a crash
between the two; setting a replica count is itself idempotent). If the budget (default 0.8 s,
SPEC §3.5) runs out before the last step, or the actuator raises, the unfinished roots are enqueued.

The log does not change the :class:`~ebb.ledger.base.Ledger` protocol; it only shares its storage.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final, Literal, Protocol, runtime_checkable

from ebb.errors import ConfigError, PermanentError, TransientError
from ebb.gates.rollback import CompensationStep, EventGraph, plan_compensation
from ebb.ledger.etcd import _READ_BATCH, DEFAULT_PREFIX, EtcdGateway, _b64, _prefix_end, _q, _unb64
from ebb.ledger.location import parse_location
from ebb.ledger.sqlite import DEFAULT_PATH, SqliteLedger, SqliteStore

__all__ = [
    "ReviewStatus", "ReviewItem", "ReviewItemNotFound", "CompensationLog", "MemoryCompensationLog",
    "SqliteCompensationLog", "EtcdCompensationLog", "open_compensation_log", "CompensationResult",
    "compensate", "DEFAULT_BUDGET_S",
]

DEFAULT_BUDGET_S: Final = 0.8
REVIEW_SCHEMA_VERSION: Final = 1

ReviewStatus = Literal["pending", "resolved"]


class ReviewItemNotFound(PermanentError):
    """No review item with this id."""


@dataclass(frozen=True, slots=True)
class ReviewItem:
    """One root event waiting for (or done with) manual review. ``retries`` counts :meth:`retry` calls."""

    event_id: str
    reason: str
    ts: float
    status: ReviewStatus = "pending"
    note: str = ""
    retries: int = 0

    def to_json(self) -> str:
        return json.dumps({"event_id": self.event_id, "reason": self.reason, "ts": self.ts,
                           "status": self.status, "note": self.note, "retries": self.retries},
                          sort_keys=True, separators=(",", ":"), ensure_ascii=False)

    @classmethod
    def from_json(cls, raw: str | bytes) -> ReviewItem:
        d = json.loads(raw)
        status = d["status"]
        if status not in ("pending", "resolved"):
            raise ValueError(f"review item status must be pending or resolved, got {status!r}")
        return cls(str(d["event_id"]), str(d["reason"]), float(d["ts"]), status, str(d["note"]), int(d["retries"]))


ReviewItems = list[ReviewItem]  # alias: the log classes have a method named ``list``


@runtime_checkable
class CompensationLog(Protocol):
    """Done-steps record and manual review queue; see the module docstring."""

    def done_ids(self, among: Iterable[str] | None = None) -> set[str]:
        """Event ids whose compensation step is recorded done (only those in ``among`` when given)."""
        ...

    def mark_done(self, step: CompensationStep, ts: float) -> bool:
        """Record ``step`` done; ``True`` if newly recorded, ``False`` if it already was."""
        ...

    def enqueue(self, event_id: str, reason: str, ts: float) -> ReviewItem:
        """Put ``event_id`` in the queue as pending (re-opens an existing item with the new reason)."""
        ...

    def list(self, status: ReviewStatus | None = None) -> ReviewItems:
        """Items ordered by ``(ts, event_id)``, optionally of one status."""
        ...

    def show(self, item_id: str) -> ReviewItem | None:
        """The item, or ``None``."""
        ...

    def resolve(self, item_id: str, note: str = "") -> ReviewItem:
        """Mark resolved with ``note``; :class:`ReviewItemNotFound` if unknown."""
        ...

    def retry(self, item_id: str) -> ReviewItem:
        """Mark pending again (``retries`` + 1); :class:`ReviewItemNotFound` if unknown."""
        ...

    def close(self) -> None:
        """Release the store; closing twice is allowed."""
        ...


def _not_found(item_id: str) -> ReviewItemNotFound:
    return ReviewItemNotFound(f"no review item {item_id!r}; `ebb review list` shows the queue")


def _sorted_items(items: Iterable[ReviewItem], status: ReviewStatus | None) -> list[ReviewItem]:
    return sorted((i for i in items if status is None or i.status == status), key=lambda i: (i.ts, i.event_id))


class MemoryCompensationLog:
    """In-process log for tests and the simulator; nothing survives the process."""

    def __init__(self) -> None:
        self._done: dict[str, CompensationStep] = {}
        self._items: dict[str, ReviewItem] = {}
        self._lock = threading.Lock()

    def done_ids(self, among: Iterable[str] | None = None) -> set[str]:
        with self._lock:
            return set(self._done) if among is None else {e for e in among if e in self._done}

    def mark_done(self, step: CompensationStep, ts: float) -> bool:
        with self._lock:
            if step.event_id in self._done:
                return False
            self._done[step.event_id] = step
            return True

    def enqueue(self, event_id: str, reason: str, ts: float) -> ReviewItem:
        with self._lock:
            old = self._items.get(event_id)
            item = (ReviewItem(event_id, reason, ts) if old is None
                    else replace(old, reason=reason, ts=ts, status="pending"))
            self._items[event_id] = item
            return item

    def list(self, status: ReviewStatus | None = None) -> ReviewItems:
        with self._lock:
            return _sorted_items(self._items.values(), status)

    def show(self, item_id: str) -> ReviewItem | None:
        with self._lock:
            return self._items.get(item_id)

    def _update(self, item_id: str, **changes: Any) -> ReviewItem:
        with self._lock:
            old = self._items.get(item_id)
            if old is None:
                raise _not_found(item_id)
            if "retries" in changes:
                changes["retries"] = old.retries + 1
            new = replace(old, **changes)
            self._items[item_id] = new
            return new

    def resolve(self, item_id: str, note: str = "") -> ReviewItem:
        return self._update(item_id, status="resolved", note=note)

    def retry(self, item_id: str) -> ReviewItem:
        return self._update(item_id, status="pending", retries=1)

    def close(self) -> None:
        pass


_SQL_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS compensation_done (
    event_id         TEXT PRIMARY KEY,
    target           TEXT NOT NULL,
    restore_replicas INTEGER NOT NULL,
    ts               REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS review_queue (
    event_id TEXT PRIMARY KEY,
    reason   TEXT NOT NULL,
    ts       REAL NOT NULL,
    status   TEXT NOT NULL CHECK (status IN ('pending', 'resolved')),
    note     TEXT NOT NULL,
    retries  INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS review_by_time ON review_queue(ts, event_id)
"""


class SqliteCompensationLog(SqliteStore):
    """Log in the ledger's SQLite file: tables ``compensation_done`` and ``review_queue``.

    Opening first opens the file as a :class:`~ebb.ledger.sqlite.SqliteLedger` (which creates or
    validates the ledger schema), so a non-ledger file is refused with :class:`~ebb.errors.InputError`.
    Same durability as the ledger: WAL, ``synchronous=FULL``, one transaction per call.
    """

    _USE = "an ebb compensation log"
    _FIX = "point --ledger at a ledger file"

    def __init__(self, path: str | os.PathLike[str] = DEFAULT_PATH, *, create: bool = True,
                 busy_timeout_s: float = 5.0) -> None:
        self.path = os.fspath(path)
        if self.path == ":memory:":
            raise ConfigError("SqliteCompensationLog needs a file path (use MemoryCompensationLog in memory)")
        SqliteLedger(self.path, create=create, busy_timeout_s=busy_timeout_s).close()
        self._lock = threading.RLock()
        self._closed = False
        try:
            self._conn = sqlite3.connect(self.path, timeout=busy_timeout_s, isolation_level=None,
                                         check_same_thread=False)
        except sqlite3.Error as exc:
            raise self._wrap(exc, "open") from exc
        try:
            with self._errors("open"):
                self._conn.execute("PRAGMA journal_mode=WAL").fetchone()
                self._conn.execute("PRAGMA synchronous=FULL")
            with self._txn("open") as conn:
                for stmt in _SQL_SCHEMA.split(";"):
                    if stmt.strip():
                        conn.execute(stmt)
                conn.execute("INSERT OR IGNORE INTO meta(key, value) VALUES ('review_schema_version', ?)",
                             (str(REVIEW_SCHEMA_VERSION),))
        except BaseException:
            self._conn.close()
            raise


    @staticmethod
    def _item(row: Sequence[Any]) -> ReviewItem:
        return ReviewItem(row[0], row[1], float(row[2]), row[3], row[4], int(row[5]))

    def done_ids(self, among: Iterable[str] | None = None) -> set[str]:
        with self._txn("done_ids", write=False) as conn:
            if among is None:
                return {r[0] for r in conn.execute("SELECT event_id FROM compensation_done")}
            wanted = sorted(set(among))
            found: set[str] = set()
            for i in range(0, len(wanted), 500):
                batch = wanted[i:i + 500]
                found.update(r[0] for r in conn.execute(
                    f"SELECT event_id FROM compensation_done WHERE event_id IN ({','.join('?' * len(batch))})",
                    batch))
            return found

    def mark_done(self, step: CompensationStep, ts: float) -> bool:
        with self._txn("mark_done") as conn:
            cur = conn.execute("INSERT OR IGNORE INTO compensation_done VALUES (?, ?, ?, ?)",
                               (step.event_id, step.target, step.restore_replicas, ts))
            return cur.rowcount == 1

    def enqueue(self, event_id: str, reason: str, ts: float) -> ReviewItem:
        with self._txn("enqueue") as conn:
            conn.execute("INSERT INTO review_queue VALUES (?, ?, ?, 'pending', '', 0) "
                         "ON CONFLICT(event_id) DO UPDATE SET reason=excluded.reason, ts=excluded.ts, "
                         "status='pending'", (event_id, reason, ts))
            row = conn.execute("SELECT * FROM review_queue WHERE event_id = ?", (event_id,)).fetchone()
        return self._item(row)

    def list(self, status: ReviewStatus | None = None) -> ReviewItems:
        where, args = ("WHERE status = ?", [status]) if status is not None else ("", [])
        with self._txn("list", write=False) as conn:
            rows = conn.execute(f"SELECT * FROM review_queue {where} ORDER BY ts, event_id", args).fetchall()
        return [self._item(r) for r in rows]

    def show(self, item_id: str) -> ReviewItem | None:
        with self._txn("show", write=False) as conn:
            row = conn.execute("SELECT * FROM review_queue WHERE event_id = ?", (item_id,)).fetchone()
        return None if row is None else self._item(row)

    def _set(self, item_id: str, sql: str, args: Sequence[Any], op: str) -> ReviewItem:
        with self._txn(op) as conn:
            if conn.execute(f"UPDATE review_queue SET {sql} WHERE event_id = ?", (*args, item_id)).rowcount != 1:
                raise _not_found(item_id)
            row = conn.execute("SELECT * FROM review_queue WHERE event_id = ?", (item_id,)).fetchone()
        return self._item(row)

    def resolve(self, item_id: str, note: str = "") -> ReviewItem:
        return self._set(item_id, "status = 'resolved', note = ?", (note,), "resolve")

    def retry(self, item_id: str) -> ReviewItem:
        return self._set(item_id, "status = 'pending', retries = retries + 1", (), "retry")

    def __enter__(self) -> SqliteCompensationLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"SqliteCompensationLog({self.path!r})"


class EtcdCompensationLog:
    """Log in etcd next to an :class:`~ebb.ledger.etcd.EtcdLedger` with the same ``prefix``::

        /{prefix}/compensation/done/{event_id}   the step as JSON; created once (create_revision == 0)
        /{prefix}/review/{event_id}              the review item as JSON; updated by compare-and-swap

    Errors as :class:`~ebb.ledger.etcd.EtcdLedger`: no answer → :class:`~ebb.errors.SourceUnavailable`.
    """

    def __init__(self, endpoint: str, *, prefix: str = DEFAULT_PREFIX, timeout_s: float = 5.0) -> None:
        clean = prefix.strip("/")
        if not clean:
            raise ConfigError(f"etcd key prefix must be non-empty, got {prefix!r}")
        self._gw = EtcdGateway(endpoint, timeout_s=timeout_s, owner="EtcdCompensationLog")
        self.endpoint = self._gw.endpoint
        self.prefix = clean
        root = f"/{clean}/".encode()
        self._done_root = root + b"compensation/done/"
        self._review_root = root + b"review/"

    def _post(self, path: str, payload: dict[str, Any], op: str) -> dict[str, Any]:
        return self._gw.post(path, payload, op)

    def _range(self, key: bytes, op: str, *, prefix: bool = False) -> list[dict[str, Any]]:
        payload: dict[str, Any] = {"key": _b64(key)}
        if prefix:
            payload["range_end"] = _b64(_prefix_end(key))
        return list(self._post("/kv/range", payload, op).get("kvs", []))

    def done_ids(self, among: Iterable[str] | None = None) -> set[str]:
        if among is None:
            kvs = self._range(self._done_root, "done_ids", prefix=True)
            return {json.loads(_unb64(kv.get("value", "")))["event_id"] for kv in kvs}
        wanted = sorted(set(among))
        found: set[str] = set()
        for i in range(0, len(wanted), _READ_BATCH):  # one read-only Txn per batch (etcd --max-txn-ops)
            batch = wanted[i:i + _READ_BATCH]
            resp = self._post("/kv/txn", {"compare": [], "success": [
                {"request_range": {"key": _b64(self._done_root + _q(e).encode()), "keys_only": True}}
                for e in batch]}, "done_ids")
            for eid, r in zip(batch, resp.get("responses", [])):
                if r.get("response_range", {}).get("kvs"):
                    found.add(eid)
        return found

    def mark_done(self, step: CompensationStep, ts: float) -> bool:
        key = _b64(self._done_root + _q(step.event_id).encode())
        value = json.dumps({"event_id": step.event_id, "target": step.target,
                            "restore_replicas": step.restore_replicas, "ts": ts}, sort_keys=True)
        resp = self._post("/kv/txn", {
            "compare": [{"key": key, "result": "EQUAL", "target": "CREATE", "create_revision": 0}],
            "success": [{"request_put": {"key": key, "value": _b64(value.encode())}}],
        }, "mark_done")
        return bool(resp.get("succeeded"))

    def _key(self, item_id: str) -> bytes:
        return self._review_root + _q(item_id).encode()

    def _get(self, item_id: str, op: str) -> tuple[ReviewItem | None, int]:
        kvs = self._range(self._key(item_id), op)
        if not kvs:
            return None, 0
        return ReviewItem.from_json(_unb64(kvs[0].get("value", ""))), int(kvs[0].get("mod_revision", 0))

    def _cas(self, item_id: str, change: Callable[[ReviewItem | None], ReviewItem], op: str) -> ReviewItem:
        key = self._key(item_id)
        for _ in range(20):
            old, rev = self._get(item_id, op)
            new = change(old)
            cmp: dict[str, Any] = ({"key": _b64(key), "result": "EQUAL", "target": "CREATE", "create_revision": 0}
                                   if old is None else
                                   {"key": _b64(key), "result": "EQUAL", "target": "MOD", "mod_revision": rev})
            resp = self._post("/kv/txn", {"compare": [cmp], "success": [
                {"request_put": {"key": _b64(key), "value": _b64(new.to_json().encode())}}]}, op)
            if resp.get("succeeded"):
                return new
        raise TransientError(f"review item {item_id!r} kept changing under {op} at etcd {self.endpoint}; retry",
                             retry_after_s=0.1)

    def enqueue(self, event_id: str, reason: str, ts: float) -> ReviewItem:
        return self._cas(event_id, lambda old: ReviewItem(event_id, reason, ts) if old is None
                         else replace(old, reason=reason, ts=ts, status="pending"), "enqueue")

    def list(self, status: ReviewStatus | None = None) -> ReviewItems:
        kvs = self._range(self._review_root, "list", prefix=True)
        return _sorted_items((ReviewItem.from_json(_unb64(kv.get("value", ""))) for kv in kvs), status)

    def show(self, item_id: str) -> ReviewItem | None:
        return self._get(item_id, "show")[0]

    def _update(self, item_id: str, op: str, **changes: Any) -> ReviewItem:
        def change(old: ReviewItem | None) -> ReviewItem:
            if old is None:
                raise _not_found(item_id)
            extra: dict[str, Any] = {"retries": old.retries + 1} if op == "retry" else {}
            return replace(old, **changes, **extra)
        return self._cas(item_id, change, op)

    def resolve(self, item_id: str, note: str = "") -> ReviewItem:
        return self._update(item_id, "resolve", status="resolved", note=note)

    def retry(self, item_id: str) -> ReviewItem:
        return self._update(item_id, "retry", status="pending")

    def close(self) -> None:
        self._gw.close()

    def __enter__(self) -> EtcdCompensationLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"EtcdCompensationLog({self.endpoint!r}, prefix={self.prefix!r})"


def open_compensation_log(where: str | os.PathLike[str], *, create: bool = True) -> CompensationLog:
    """Open the log next to a ledger; same locations as :func:`ebb.ledger.open_ledger`."""
    loc = parse_location(where)
    if loc.kind == "etcd":
        return EtcdCompensationLog(loc.target, prefix=loc.prefix or DEFAULT_PREFIX)
    if loc.kind == "memory":
        return MemoryCompensationLog()
    return SqliteCompensationLog(loc.target, create=create)


@dataclass(frozen=True, slots=True)
class CompensationResult:
    """What :func:`compensate` did. ``completed``: every step is now done (applied now or before).

    ``applied``: steps the actuator ran now; ``skipped``: already recorded done; ``remaining``: steps not
    run (budget out or failure); ``enqueued``: root ids put in the review queue; ``error``: the
    actuator's exception text, if it raised.
    """

    completed: bool
    applied: tuple[str, ...]
    skipped: tuple[str, ...]
    remaining: tuple[str, ...]
    enqueued: tuple[str, ...]
    elapsed_s: float
    error: str | None = None


def compensate(graph: EventGraph, roots: Sequence[str], actuator: Callable[[str, int], None],
               log: CompensationLog, *, budget_s: float = DEFAULT_BUDGET_S,
               clock: Callable[[], float] = time.monotonic,
               wall_clock: Callable[[], float] = time.time) -> CompensationResult:
    """Undo ``roots`` and their descendants through ``actuator(target, replicas)``, idempotently.

    Steps recorded done in ``log`` are skipped. Before each step the elapsed time (by ``clock``) is
    compared with ``budget_s``; once over, or if the actuator raises, the remaining steps are not run
    and every root whose compensation is unfinished is enqueued for manual review.
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
            actuator(step.target, step.restore_replicas)
        except Exception as exc:  # the actuator is foreign code; any failure goes to review
            error = f"{type(exc).__name__}: {exc}"
            stop_at = i
            break
        log.mark_done(step, wall_clock())
        done.add(step.event_id)
        applied.append(step.event_id)
    remaining = tuple(s.event_id for s in steps[stop_at:] if s.event_id not in done) if stop_at is not None else ()
    enqueued: list[str] = []
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
                              error=error)
