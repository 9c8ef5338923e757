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

**Malformed items.** A stored review item that does not decode (bad JSON, a field of the wrong type,
an unknown status, a negative retry count, an item stored under another item's key) is never
returned: :meth:`~CompensationLog.show` and the updates raise :class:`~ebb.errors.InputError` naming
the row and the fix; :meth:`~CompensationLog.list` skips it with one WARNING per row on the
``ebb.ledger`` logger and lists it in ``skipped`` (the rows the most recent ``list`` call skipped).
``read_only=True`` (``ebb review list/show``) opens an SQLite log without writing anything, as
:class:`~ebb.ledger.sqlite.SqliteLedger` does; a ledger that never queued an item reads as empty.
"""

from __future__ import annotations

import json
import math
import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final, Literal, Protocol, cast, runtime_checkable
from urllib.parse import unquote_to_bytes

from ebb.errors import ConfigError, InputError, PermanentError, TransientError
from ebb.gates.rollback import CompensationStep, EventGraph, plan_compensation
from ebb.ledger.base import MalformedRow, RowSkips
from ebb.ledger.base import log as ledger_log
from ebb.ledger.etcd import _READ_BATCH, DEFAULT_PREFIX, EtcdGateway, _b64, _key_text, _prefix_end, _q, _unb64
from ebb.ledger.etcd import ROW_FIX as ETCD_ROW_FIX
from ebb.ledger.location import EtcdAuth, check_auth_fits, parse_location
from ebb.ledger.sqlite import DEFAULT_PATH, NotUtf8, SqliteLedger, SqliteStore
from ebb.ledger.sqlite import ROW_FIX as SQLITE_ROW_FIX
from ebb.untrusted import checked_int, loads_json

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
    def from_dict(cls, data: object, *, where: str | None = None, fix: str | None = None) -> ReviewItem:
        """The item in ``data`` (a parsed JSON object or a row's columns by name); any bad value raises
        :class:`~ebb.errors.InputError` naming ``where`` (the row), the field and ``fix``."""
        try:
            return _decode_item(data)
        except ValueError as exc:
            ident = data.get("event_id") if isinstance(data, dict) else None
            name = f" {ident!r:.60}" if isinstance(ident, str) and ident else ""
            raise InputError(f"malformed review item{name}: {exc}", path=where,
                             fix=fix or SQLITE_ROW_FIX) from exc

    @classmethod
    def from_json(cls, raw: str | bytes, *, where: str | None = None, fix: str | None = None) -> ReviewItem:
        """Parse :meth:`to_json` output; any bad text raises :class:`~ebb.errors.InputError` (see
        :meth:`from_dict`)."""
        try:
            data = loads_json(raw)
        except (ValueError, RecursionError) as exc:
            raise InputError(f"malformed review item: not valid JSON ({exc}): {raw[:60]!r}", path=where,
                             fix=fix or SQLITE_ROW_FIX) from exc
        return cls.from_dict(data, where=where, fix=fix)


_STATUSES: Final = ("pending", "resolved")


def _decode_item(data: object) -> ReviewItem:
    """ValueError naming the first bad field of a review item."""
    if not isinstance(data, dict):
        raise ValueError(f"expected a JSON object, got {type(data).__name__}")

    def get(key: str) -> Any:
        if key not in data:
            raise ValueError(f"missing field {key!r}")
        return data[key]

    def text(key: str, *, empty: bool = True) -> str:
        value = get(key)
        if not isinstance(value, str) or (not empty and not value):
            what = "text that is not UTF-8" if isinstance(value, NotUtf8) else f"{type(value).__name__} {value!r:.40}"
            raise ValueError(f"{key} must be a {'non-empty ' if not empty else ''}string, got {what}")
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError(f"{key} holds text that is not valid Unicode") from None
        return value

    event_id, reason, note = text("event_id", empty=False), text("reason"), text("note")
    ts = get("ts")
    if isinstance(ts, bool) or not isinstance(ts, (int, float)):
        raise ValueError(f"ts must be a number of seconds, got {type(ts).__name__} {ts!r:.40}")
    try:
        ts_s = float(ts)
    except OverflowError:
        raise ValueError("ts is an integer past the float range") from None
    if not math.isfinite(ts_s):
        raise ValueError(f"ts must be finite, got {ts!r}")
    status = get("status")
    if status not in _STATUSES:
        raise ValueError(f"status must be pending or resolved, got {status!r:.40}")
    retries = checked_int(get("retries"), "retries", lo=0)
    return ReviewItem(event_id, reason, ts_s, cast(ReviewStatus, status), note, retries)


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
        """Items ordered by ``(ts, event_id)``, optionally of one status; malformed items are skipped
        (logged, in :attr:`skipped`)."""
        ...

    @property
    def skipped(self) -> tuple[MalformedRow, ...]:
        """The items the most recent :meth:`list` call skipped because they are malformed."""
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

    @property
    def skipped(self) -> tuple[MalformedRow, ...]:
        """Always ``()``: items are built in-process, never decoded."""
        return ()

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
    ``read_only=True`` writes nothing (implies ``create=False``; the log's tables are not created, and
    a ledger without them reads as an empty queue; updates raise :class:`~ebb.errors.InputError`).
    """

    _USE = "an ebb compensation log"
    _FIX = "point --ledger at a ledger file"

    def __init__(self, path: str | os.PathLike[str] = DEFAULT_PATH, *, create: bool = True,
                 busy_timeout_s: float = 5.0, read_only: bool = False) -> None:
        self.path = os.fspath(path)
        if self.path == ":memory:":
            raise ConfigError("SqliteCompensationLog needs a file path (use MemoryCompensationLog in memory)")
        SqliteLedger(self.path, create=create, busy_timeout_s=busy_timeout_s, read_only=read_only).close()
        self._lock = threading.RLock()
        self._skipped: tuple[MalformedRow, ...] = ()
        self._open(read_only=read_only, exclusive=False, busy_timeout_s=busy_timeout_s)
        try:
            with self._txn("open", write=not read_only) as conn:
                if read_only:
                    self._has_queue = "review_queue" in self._tables(conn)
                    self._has_done = "compensation_done" in self._tables(conn)
                else:
                    for stmt in _SQL_SCHEMA.split(";"):
                        if stmt.strip():
                            conn.execute(stmt)
                    conn.execute("INSERT OR IGNORE INTO meta(key, value) VALUES ('review_schema_version', ?)",
                                 (str(REVIEW_SCHEMA_VERSION),))
                    self._has_queue = self._has_done = True
        except BaseException:
            self._conn.close()
            raise

    @property
    def skipped(self) -> tuple[MalformedRow, ...]:
        return self._skipped

    _ITEM_COLS: Final = ("event_id", "reason", "ts", "status", "note", "retries")

    def _item(self, row: Sequence[Any]) -> ReviewItem:
        """The item in one ``review_queue`` row (``rowid`` first); InputError naming the row."""
        ident = row[1] if len(row) > 1 else None
        name = f"row {ident!r:.60}" if isinstance(ident, str) and ident else f"rowid {row[0] if row else None!r}"
        where = f"{self.path} (review_queue {name})"
        if len(row) != 1 + len(self._ITEM_COLS):
            raise InputError(f"malformed review item: {len(row)} columns, expected {1 + len(self._ITEM_COLS)}",
                             path=where, fix=SQLITE_ROW_FIX)
        return ReviewItem.from_dict(dict(zip(self._ITEM_COLS, row[1:])), where=where, fix=SQLITE_ROW_FIX)

    _SELECT: Final = "SELECT rowid, event_id, reason, ts, status, note, retries FROM review_queue"

    def done_ids(self, among: Iterable[str] | None = None) -> set[str]:
        with self._txn("done_ids", write=False) as conn:
            if not self._has_done:
                return set()
            if among is None:
                return {r[0] for r in conn.execute("SELECT event_id FROM compensation_done") if isinstance(r[0], str)}
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
            row = conn.execute(f"{self._SELECT} WHERE event_id = ?", (event_id,)).fetchone()
        return self._item(row)

    def list(self, status: ReviewStatus | None = None) -> ReviewItems:
        where, args = ("WHERE status = ?", [status]) if status is not None else ("", [])
        with self._txn("list", write=False) as conn:
            rows = (conn.execute(f"{self._SELECT} {where} ORDER BY ts, event_id", args).fetchall()
                    if self._has_queue else [])
        skips = RowSkips()
        out: list[ReviewItem] = []
        for r in rows:
            try:
                out.append(self._item(r))
            except InputError as exc:
                skips.skip("review item", r[1] if isinstance(r[1], str) else f"rowid {r[0]}", exc)
        self._skipped = skips.result()
        return out

    def show(self, item_id: str) -> ReviewItem | None:
        with self._txn("show", write=False) as conn:
            row = (conn.execute(f"{self._SELECT} WHERE event_id = ?", (item_id,)).fetchone()
                   if self._has_queue else None)
        return None if row is None else self._item(row)

    def _set(self, item_id: str, sql: str, args: Sequence[Any], op: str) -> ReviewItem:
        with self._txn(op) as conn:
            old = conn.execute(f"{self._SELECT} WHERE event_id = ?", (item_id,)).fetchone()
            if old is None:
                raise _not_found(item_id)
            self._item(old)  # a malformed item is reported, never updated
            conn.execute(f"UPDATE review_queue SET {sql} WHERE event_id = ?", (*args, item_id))
            row = conn.execute(f"{self._SELECT} WHERE event_id = ?", (item_id,)).fetchone()
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

    def __init__(self, endpoint: str, *, prefix: str = DEFAULT_PREFIX, timeout_s: float = 5.0,
                 auth: EtcdAuth | None = None) -> None:
        clean = prefix.strip("/")
        if not clean:
            raise ConfigError(f"etcd key prefix must be non-empty, got {prefix!r}")
        self._gw = EtcdGateway(endpoint, timeout_s=timeout_s, owner="EtcdCompensationLog", auth=auth)
        self.endpoint = self._gw.endpoint
        self.prefix = clean
        root = f"/{clean}/".encode()
        self._done_root = root + b"compensation/done/"
        self._review_root = root + b"review/"
        self._skipped: tuple[MalformedRow, ...] = ()

    @property
    def skipped(self) -> tuple[MalformedRow, ...]:
        return self._skipped

    def _decode(self, kv: object, fallback: bytes) -> tuple[ReviewItem, int]:
        """(item, mod_revision) of one gateway kv; InputError naming the key when it is malformed."""
        if not isinstance(kv, dict):
            raise InputError("malformed review item: not a key-value object", path=f"etcd {self.endpoint}",
                             fix=ETCD_ROW_FIX)
        try:
            key = _unb64(kv.get("key", ""))
        except ValueError:
            key = fallback
        where = f"etcd {self.endpoint} key {_key_text(key)}"
        try:
            raw = _unb64(kv.get("value", ""))
        except ValueError as exc:
            raise InputError(f"malformed review item: its value is not base64 ({exc})", path=where,
                             fix=ETCD_ROW_FIX) from exc
        item = ReviewItem.from_json(raw, where=where, fix=ETCD_ROW_FIX)
        if key != self._key(item.event_id):
            raise InputError(f"malformed review item: it holds item {item.event_id!r}, stored under another key",
                             path=where, fix=ETCD_ROW_FIX)
        try:
            rev = int(kv.get("mod_revision", 0))
        except (TypeError, ValueError):
            rev = 0
        return item, rev

    def _post(self, path: str, payload: dict[str, Any], op: str) -> dict[str, Any]:
        return self._gw.post(path, payload, op)

    def _range(self, key: bytes, op: str, *, prefix: bool = False, keys_only: bool = False) -> list[Any]:
        payload: dict[str, Any] = {"key": _b64(key)}
        if prefix:
            payload["range_end"] = _b64(_prefix_end(key))
        if keys_only:
            payload["keys_only"] = True
        kvs = self._post("/kv/range", payload, op).get("kvs", [])
        return list(kvs) if isinstance(kvs, list) else []

    def done_ids(self, among: Iterable[str] | None = None) -> set[str]:
        if among is None:  # the key names the event (percent-encoded): no value needs decoding
            kvs = self._range(self._done_root, "done_ids", prefix=True, keys_only=True)
            out: set[str] = set()
            for kv in kvs:
                try:
                    key = _unb64(kv.get("key", "") if isinstance(kv, dict) else "")
                    if key.startswith(self._done_root):
                        out.add(unquote_to_bytes(key[len(self._done_root):]).decode("utf-8"))
                except ValueError:  # not base64 / not UTF-8: no event id can be read from it
                    ledger_log.warning("etcd %s: a compensation-done key that names no event id; ignored",
                                       self.endpoint)
            return out
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
        return self._decode(kvs[0], self._key(item_id))

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
        skips = RowSkips()
        items: list[ReviewItem] = []
        for kv in kvs:
            try:
                items.append(self._decode(kv, self._review_root)[0])
            except InputError as exc:
                skips.skip("review item", exc.path or self._review_root.decode(), exc)
        self._skipped = skips.result()
        return _sorted_items(items, status)

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
