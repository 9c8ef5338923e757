"""SQLite :class:`~ebb.ledger.base.Ledger`: the default backend, one file, no server.

Guarantees (on top of :mod:`ebb.ledger.base`):

* **One transaction per cycle.** ``append_cycle`` runs ``BEGIN IMMEDIATE`` → existence checks → one
  ``INSERT`` into ``cycles`` and one per decision → ``COMMIT``. SQLite's journal makes that all or
  nothing, also across SIGKILL of the writer (see ``tests/integration/test_ledger_kill9.py``).
  ``BEGIN IMMEDIATE`` takes the write lock up front, so two writers (threads or processes) cannot both
  pass the idempotency check and then race.
* **WAL mode, ``synchronous=FULL``.** WAL lets readers (``ebb explain``) run while a controller writes.
  With ``NORMAL`` a WAL database survives a killed *process* but may lose the last commits on power
  loss or an OS crash; the ledger is an audit trail written a few times per second at most, so we
  pay one fsync per cycle (``FULL``) and a returned ``append_cycle`` is durable.
* **Versioned schema.** Table ``meta`` holds ``schema_version`` (:data:`SCHEMA_VERSION`); a file
  written by a newer schema, or an SQLite file that is not a ledger, is refused with
  :class:`~ebb.errors.InputError` naming the path.
* **Fencing.** A fenced ``append_cycle`` reads ``max(fencing_token)`` (indexed) inside the same
  ``BEGIN IMMEDIATE`` transaction and raises :class:`~ebb.errors.NotLeader` when ``fence.token`` is
  lower: once a newer leader has appended a cycle, an older one cannot, and the check cannot race
  another writer because the write lock is held.
* **Errors.** ``database is locked``/``busy`` (after ``busy_timeout_s``) → :class:`~ebb.errors.TransientError`;
  a corrupt or non-database file, or a path that cannot be opened → :class:`~ebb.errors.InputError`.
  The ``sqlite3`` exception is chained as ``__cause__``.

Schema (version 1)::

    meta(key TEXT PRIMARY KEY, value TEXT)
    cycles(cycle_id TEXT PK, run_id, ts_ns, policy, fencing_token, n_decisions, snapshot JSON)
    decisions(decision_id TEXT PK, cycle_id → cycles, position, run_id, ts_ns, target, action,
              from_replicas, to_replicas, reasons JSON, signals JSON, weights JSON, vetoes JSON,
              victims JSON, plan JSON, caused_by JSON)
    indices: cycles(ts_ns, cycle_id), cycles(run_id, ts_ns), cycles(fencing_token), decisions(run_id),
             decisions(target), decisions(cycle_id, position) UNIQUE
    (``cycles(fencing_token)`` is created on open when missing; files without it stay readable by
    older versions, so the schema version is unchanged)
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Final

from ebb.errors import InputError, TransientError
from ebb.ledger.base import Fence, check_fence_token, check_same_cycle, decision_taken, keep_last, not_leader
from ebb.model.decisions import CycleRecord, DecisionRecord
from ebb.model.ids import CycleId, DecisionId, RunId

__all__ = ["SqliteLedger", "SCHEMA_VERSION", "DEFAULT_PATH"]

SCHEMA_VERSION: Final = 1
DEFAULT_PATH: Final = "ebb-ledger.sqlite"

_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS cycles (
    cycle_id      TEXT PRIMARY KEY,
    run_id        TEXT NOT NULL,
    ts_ns         INTEGER NOT NULL,
    policy        TEXT NOT NULL,
    fencing_token INTEGER NOT NULL,
    n_decisions   INTEGER NOT NULL,
    snapshot      TEXT NOT NULL CHECK (json_valid(snapshot))
);
CREATE TABLE IF NOT EXISTS decisions (
    decision_id   TEXT PRIMARY KEY,
    cycle_id      TEXT NOT NULL REFERENCES cycles(cycle_id),
    position      INTEGER NOT NULL,
    run_id        TEXT NOT NULL,
    ts_ns         INTEGER NOT NULL,
    target        TEXT NOT NULL,
    action        TEXT NOT NULL,
    from_replicas INTEGER NOT NULL,
    to_replicas   INTEGER NOT NULL,
    reasons       TEXT NOT NULL CHECK (json_valid(reasons)),
    signals       TEXT NOT NULL CHECK (json_valid(signals)),
    weights       TEXT NOT NULL CHECK (json_valid(weights)),
    vetoes        TEXT NOT NULL CHECK (json_valid(vetoes)),
    victims       TEXT NOT NULL CHECK (json_valid(victims)),
    plan          TEXT NOT NULL CHECK (json_valid(plan)),
    caused_by     TEXT NOT NULL CHECK (json_valid(caused_by))
);
CREATE INDEX IF NOT EXISTS cycles_by_time ON cycles(ts_ns, cycle_id);
CREATE INDEX IF NOT EXISTS cycles_by_run ON cycles(run_id, ts_ns, cycle_id);
CREATE INDEX IF NOT EXISTS cycles_by_token ON cycles(fencing_token);
CREATE INDEX IF NOT EXISTS decisions_by_run ON decisions(run_id, ts_ns);
CREATE INDEX IF NOT EXISTS decisions_by_target ON decisions(target, ts_ns);
CREATE UNIQUE INDEX IF NOT EXISTS decisions_by_cycle ON decisions(cycle_id, position);
"""

_DECISION_COLS: Final = (
    "decision_id, cycle_id, position, run_id, ts_ns, target, action, from_replicas, to_replicas, "
    "reasons, signals, weights, vetoes, victims, plan, caused_by"
)
_JSON_FIELDS: Final = ("reasons", "signals", "weights", "vetoes", "victims", "plan", "caused_by")


def _dumps(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False, ensure_ascii=False)


class SqliteStore:
    """Shared plumbing of Ebb's SQLite stores: error mapping and one-transaction-per-call.

    Subclasses set ``path``, ``_conn``, ``_lock`` and ``_closed``, and name what the file is used
    as (``_USE``) and the fix for a wrong file (``_FIX``). A locked or busy database becomes
    :class:`~ebb.errors.TransientError` (retry in 0.5 s); any other SQLite error becomes
    :class:`~ebb.errors.InputError` naming the path, with the cause chained.
    """

    _USE: str = "an ebb ledger"
    _FIX: str = "point --ledger at a ledger file, or move this file away and start a new ledger"
    path: str
    _conn: sqlite3.Connection
    _lock: threading.RLock
    _closed: bool

    def _wrap(self, exc: sqlite3.Error, op: str) -> Exception:
        msg = str(exc)
        low = msg.lower()
        if "locked" in low or "busy" in low:
            return TransientError(f"ledger {self.path!r} is locked by another writer during {op}: {msg}",
                                  retry_after_s=0.5)
        return InputError(f"cannot use as {self._USE} ({op}): {msg}", path=self.path, fix=self._FIX)

    @contextmanager
    def _errors(self, op: str) -> Iterator[None]:
        try:
            yield
        except sqlite3.Error as exc:
            raise self._wrap(exc, op) from exc

    @contextmanager
    def _txn(self, op: str, *, write: bool = True) -> Iterator[sqlite3.Connection]:
        with self._lock, self._errors(op):
            if self._closed:
                raise RuntimeError(f"{type(self).__name__}({self.path!r}) is closed")
            conn = self._conn
            conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            try:
                yield conn
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    def close(self) -> None:
        """Close the connection; closing twice is allowed."""
        with self._lock:
            if not self._closed:
                self._closed = True
                self._conn.close()


class SqliteLedger(SqliteStore):
    """Ledger in one SQLite file (``path``); ``create=False`` refuses a missing file instead of creating it.

    ``busy_timeout_s`` is how long a writer waits for another writer's lock before
    :class:`~ebb.errors.TransientError`. One object may be shared by threads (calls are serialised).
    """

    def __init__(self, path: str | os.PathLike[str], *, create: bool = True,
                 busy_timeout_s: float = 5.0) -> None:
        self.path = os.fspath(path)
        self._lock = threading.RLock()
        if not create and self.path != ":memory:" and not os.path.exists(self.path):
            raise InputError("no ledger file here", path=self.path,
                             fix="pass --ledger with the path a controller or simulation wrote")
        try:
            self._conn = sqlite3.connect(self.path, timeout=busy_timeout_s, isolation_level=None,
                                         check_same_thread=False)
        except sqlite3.Error as exc:
            raise self._wrap(exc, "open") from exc
        self._closed = False
        try:
            with self._errors("open"):
                self._conn.execute("PRAGMA foreign_keys=ON")
                self._conn.execute("PRAGMA journal_mode=WAL").fetchone()
                self._conn.execute("PRAGMA synchronous=FULL")
                self._init_schema()
        except BaseException:
            self._conn.close()
            raise

    # -- errors ---------------------------------------------------------------------------------------


    def _init_schema(self) -> None:
        with self._txn("open", write=True) as conn:
            names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            if names and "meta" not in names:
                raise InputError(f"SQLite file without an ebb ledger 'meta' table (tables: {sorted(names)})",
                                 path=self.path, fix="point --ledger at a ledger file")
            for stmt in _SCHEMA.split(";"):
                if stmt.strip():
                    conn.execute(stmt)
            row = conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
            if row is None:
                conn.execute("INSERT INTO meta(key, value) VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
            elif row[0] != str(SCHEMA_VERSION):
                raise InputError(f"ledger schema version {row[0]} is not the supported {SCHEMA_VERSION}",
                                 path=self.path, fix="open it with the ebb version that wrote it")

    # -- writes ---------------------------------------------------------------------------------------

    def append_cycle(self, cycle: CycleRecord, fence: Fence | None = None) -> bool:
        if not isinstance(cycle, CycleRecord):
            raise TypeError(f"append_cycle expects a CycleRecord, got {cycle!r}")
        check_fence_token(cycle, fence)
        with self._txn("append_cycle", write=True) as conn:
            if fence is not None:
                top = conn.execute("SELECT max(fencing_token) FROM cycles").fetchone()[0]
                if top is not None and fence.token < top:
                    raise not_leader(fence, cycle.cycle_id, f"a cycle with token {top} is already stored")
            stored = self._load_cycle(conn, cycle.cycle_id)
            if stored is not None:
                return check_same_cycle(stored, cycle)
            ids = [d.decision_id for d in cycle.decisions]
            for chunk_start in range(0, len(ids), 500):
                chunk = ids[chunk_start:chunk_start + 500]
                marks = ",".join("?" * len(chunk))
                row = conn.execute(
                    f"SELECT decision_id, cycle_id FROM decisions WHERE decision_id IN ({marks}) LIMIT 1", chunk
                ).fetchone()
                if row is not None:
                    raise decision_taken(row[0], row[1], cycle.cycle_id)
            conn.execute(
                "INSERT INTO cycles(cycle_id, run_id, ts_ns, policy, fencing_token, n_decisions, snapshot) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (cycle.cycle_id, cycle.run_id, cycle.ts_ns, cycle.policy, cycle.fencing_token,
                 len(cycle.decisions), _dumps(dict(cycle.snapshot))),
            )
            conn.executemany(
                f"INSERT INTO decisions({_DECISION_COLS}) VALUES ({','.join('?' * 16)})",
                [self._decision_row(d, i) for i, d in enumerate(cycle.decisions)],
            )
            return True

    @staticmethod
    def _decision_row(d: DecisionRecord, position: int) -> tuple[Any, ...]:
        plain = d.to_dict()
        return (d.decision_id, d.cycle_id, position, d.run_id, d.ts_ns, d.target, d.action,
                d.from_replicas, d.to_replicas, *(_dumps(plain[f]) for f in _JSON_FIELDS))

    # -- reads ----------------------------------------------------------------------------------------

    @staticmethod
    def _decision(row: Sequence[Any]) -> DecisionRecord:
        (decision_id, cycle_id, _position, run_id, ts_ns, target, action, from_r, to_r, *js) = row
        data: dict[str, Any] = dict(zip(_JSON_FIELDS, (json.loads(j) for j in js)))
        data.update(decision_id=decision_id, cycle_id=cycle_id, run_id=run_id, ts_ns=ts_ns, target=target,
                    action=action, from_replicas=from_r, to_replicas=to_r)
        return DecisionRecord.from_dict(data)

    @staticmethod
    def _cycle(row: Sequence[Any], decisions: Sequence[DecisionRecord]) -> CycleRecord:
        cycle_id, run_id, ts_ns, policy, fencing_token, _n, snapshot = row
        return CycleRecord(cycle_id=CycleId(cycle_id), run_id=RunId(run_id), ts_ns=ts_ns, policy=policy,
                           decisions=tuple(decisions), snapshot=json.loads(snapshot),
                           fencing_token=fencing_token)

    def _load_cycle(self, conn: sqlite3.Connection, cycle_id: str) -> CycleRecord | None:
        row = conn.execute("SELECT * FROM cycles WHERE cycle_id = ?", (cycle_id,)).fetchone()
        if row is None:
            return None
        decs = conn.execute(f"SELECT {_DECISION_COLS} FROM decisions WHERE cycle_id = ? ORDER BY position",
                            (cycle_id,)).fetchall()
        return self._cycle(row, [self._decision(r) for r in decs])

    def get_decision(self, decision_id: DecisionId) -> DecisionRecord | None:
        with self._txn("get_decision", write=False) as conn:
            row = conn.execute(f"SELECT {_DECISION_COLS} FROM decisions WHERE decision_id = ?",
                               (decision_id,)).fetchone()
        return None if row is None else self._decision(row)

    def get_cycle(self, cycle_id: CycleId) -> CycleRecord | None:
        with self._txn("get_cycle", write=False) as conn:
            return self._load_cycle(conn, cycle_id)

    def cycles(self, run_id: RunId | None = None, limit: int | None = None) -> list[CycleRecord]:
        keep_last([], limit)  # validates limit
        where, args = ("WHERE run_id = ?", [run_id]) if run_id is not None else ("", [])
        sel = f"SELECT cycle_id FROM cycles {where} ORDER BY ts_ns DESC, cycle_id DESC"
        if limit is not None:
            sel += f" LIMIT {int(limit)}"
        with self._txn("cycles", write=False) as conn:
            rows = conn.execute(f"SELECT * FROM cycles WHERE cycle_id IN ({sel}) ORDER BY ts_ns, cycle_id",
                                args).fetchall()
            decs = conn.execute(f"SELECT {_DECISION_COLS} FROM decisions WHERE cycle_id IN ({sel}) "
                                "ORDER BY cycle_id, position", args).fetchall()
        by_cycle: dict[str, list[DecisionRecord]] = {}
        for r in decs:
            by_cycle.setdefault(r[1], []).append(self._decision(r))
        return [self._cycle(r, by_cycle.get(r[0], [])) for r in rows]

    def decisions(self, run_id: RunId | None = None, target: str | None = None) -> list[DecisionRecord]:
        conds: list[str] = []
        args: list[str] = []
        if run_id is not None:
            conds.append("run_id = ?")
            args.append(run_id)
        if target is not None:
            conds.append("target = ?")
            args.append(target)
        where = f"WHERE {' AND '.join(conds)}" if conds else ""
        with self._txn("decisions", write=False) as conn:
            rows = conn.execute(f"SELECT {_DECISION_COLS} FROM decisions {where} ORDER BY ts_ns, decision_id",
                                args).fetchall()
        return [self._decision(r) for r in rows]

    def __enter__(self) -> SqliteLedger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"SqliteLedger({self.path!r})"
