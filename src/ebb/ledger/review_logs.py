"""The compensation logs: in memory, in the ledger's SQLite file, under the ledger's etcd prefix.

Each implements :class:`~ebb.ledger.review_items.CompensationLog`: :class:`MemoryCompensationLog`
(tests and the simulator; nothing survives the process), :class:`SqliteCompensationLog` (tables
``compensation_done`` and ``review_queue`` next to the ledger's; WAL, ``synchronous=FULL``, one
transaction per call) and :class:`EtcdCompensationLog` (keys next to the
:class:`~ebb.ledger.etcd.EtcdLedger`'s; a done step is created once, an item updated by
compare-and-swap). A done step is recorded once and never changed; enqueuing an event again
re-opens its one item.

**Malformed items.** A stored review item that does not decode (bad JSON, a field of the wrong type,
an unknown status, a negative retry count, an item stored under another item's key) is never
returned: :meth:`~ebb.ledger.review_items.CompensationLog.show` and the updates raise
:class:`~ebb.errors.InputError` naming the row and the fix;
:meth:`~ebb.ledger.review_items.CompensationLog.list` skips it with one WARNING per row on the
``ebb.ledger`` logger and lists it in ``skipped`` (the rows the most recent ``list`` call skipped).
``read_only=True`` (``ebb review list/show``) opens an SQLite log without writing anything, as
:class:`~ebb.ledger.sqlite.SqliteLedger` does; a ledger that never queued an item reads as empty.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import Any, Final
from urllib.parse import unquote_to_bytes

from ebb.errors import ConfigError, InputError, TransientError
from ebb.gates.rollback import CompensationStep
from ebb.ledger.base import MalformedRow, RowSkips
from ebb.ledger.base import log as ledger_log
from ebb.ledger.etcd import DEFAULT_PREFIX
from ebb.ledger.etcd import ROW_FIX as ETCD_ROW_FIX
from ebb.ledger.etcd_gateway import READ_BATCH, EtcdGateway, b64, key_text, prefix_end, quote_id, unb64
from ebb.ledger.location import EtcdAuth
from ebb.ledger.review_items import ReviewItem, ReviewItems, ReviewStatus, not_found, sorted_items
from ebb.ledger.sqlite import DEFAULT_PATH, SqliteLedger
from ebb.ledger.sqlite import ROW_FIX as SQLITE_ROW_FIX
from ebb.ledger.sqlite_store import SqliteStore

__all__ = ["EtcdCompensationLog", "MemoryCompensationLog", "REVIEW_SCHEMA_VERSION", "SqliteCompensationLog"]

REVIEW_SCHEMA_VERSION: Final = 1


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
            return sorted_items(self._items.values(), status)

    def show(self, item_id: str) -> ReviewItem | None:
        with self._lock:
            return self._items.get(item_id)

    def _update(self, item_id: str, **changes: Any) -> ReviewItem:
        with self._lock:
            old = self._items.get(item_id)
            if old is None:
                raise not_found(item_id)
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
                raise not_found(item_id)
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
            key = unb64(kv.get("key", ""))
        except ValueError:
            key = fallback
        where = f"etcd {self.endpoint} key {key_text(key)}"
        try:
            raw = unb64(kv.get("value", ""))
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
        payload: dict[str, Any] = {"key": b64(key)}
        if prefix:
            payload["range_end"] = b64(prefix_end(key))
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
                    key = unb64(kv.get("key", "") if isinstance(kv, dict) else "")
                    if key.startswith(self._done_root):
                        out.add(unquote_to_bytes(key[len(self._done_root):]).decode("utf-8"))
                except ValueError:  # not base64 / not UTF-8: no event id can be read from it
                    ledger_log.warning("etcd %s: a compensation-done key that names no event id; ignored",
                                       self.endpoint)
            return out
        wanted = sorted(set(among))
        found: set[str] = set()
        for i in range(0, len(wanted), READ_BATCH):  # one read-only Txn per batch (etcd --max-txn-ops)
            batch = wanted[i:i + READ_BATCH]
            resp = self._post("/kv/txn", {"compare": [], "success": [
                {"request_range": {"key": b64(self._done_root + quote_id(e).encode()), "keys_only": True}}
                for e in batch]}, "done_ids")
            for eid, r in zip(batch, resp.get("responses", [])):
                if r.get("response_range", {}).get("kvs"):
                    found.add(eid)
        return found

    def mark_done(self, step: CompensationStep, ts: float) -> bool:
        key = b64(self._done_root + quote_id(step.event_id).encode())
        value = json.dumps({"event_id": step.event_id, "target": step.target,
                            "restore_replicas": step.restore_replicas, "ts": ts}, sort_keys=True)
        resp = self._post("/kv/txn", {
            "compare": [{"key": key, "result": "EQUAL", "target": "CREATE", "create_revision": 0}],
            "success": [{"request_put": {"key": key, "value": b64(value.encode())}}],
        }, "mark_done")
        return bool(resp.get("succeeded"))

    def _key(self, item_id: str) -> bytes:
        return self._review_root + quote_id(item_id).encode()

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
            cmp: dict[str, Any] = ({"key": b64(key), "result": "EQUAL", "target": "CREATE", "create_revision": 0}
                                   if old is None else
                                   {"key": b64(key), "result": "EQUAL", "target": "MOD", "mod_revision": rev})
            resp = self._post("/kv/txn", {"compare": [cmp], "success": [
                {"request_put": {"key": b64(key), "value": b64(new.to_json().encode())}}]}, op)
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
        return sorted_items(items, status)

    def show(self, item_id: str) -> ReviewItem | None:
        return self._get(item_id, "show")[0]

    def _update(self, item_id: str, op: str, **changes: Any) -> ReviewItem:
        def change(old: ReviewItem | None) -> ReviewItem:
            if old is None:
                raise not_found(item_id)
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
