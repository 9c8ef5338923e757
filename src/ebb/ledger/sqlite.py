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
* **One writer, read-only opening, errors** (:mod:`ebb.ledger.sqlite_store`, shared with the
  compensation log): ``exclusive=True`` (what a controller opens) holds an ``flock`` on
  ``<path>.lock`` and refuses a second exclusive opener at once with
  :class:`~ebb.errors.ConfigError`; ``read_only=True`` (``ebb explain``, ``ebb review list/show``)
  never writes the database file; a locked or busy database, a full disk and disk I/O errors are
  :class:`~ebb.errors.TransientError` with nothing written; any other SQLite error is an
  :class:`~ebb.errors.InputError` naming the path and a fix.
* **Versioned schema.** Table ``meta`` holds ``schema_version`` (:data:`SCHEMA_VERSION`); a file
  written by a newer schema, or an SQLite file that is not a ledger, is refused with
  :class:`~ebb.errors.InputError` naming the path.
* **Fencing.** A fenced ``append_cycle`` reads ``max(fencing_token)`` (indexed) inside the same
  ``BEGIN IMMEDIATE`` transaction and raises :class:`~ebb.errors.NotLeader` when ``fence.token`` is
  lower: once a newer leader has appended a cycle, an older one cannot, and the check cannot race
  another writer because the write lock is held. It also raises ``NotLeader`` when
  ``fence.valid_until_s`` is not ahead of ``fence_clock()`` (the elector's deadline, default
  ``time.monotonic``), checked with the token and again after the inserts, as the last step before
  ``COMMIT``: a leader paused past its lease writes nothing when it resumes, and the window in which a
  pause can still let a write through is the ``COMMIT`` itself — during which the paused writer holds
  the write lock, so no successor's cycle can land before it.
* **Malformed rows** (see :mod:`ebb.ledger.base`): every column of every row read is type-checked
  (text that is not UTF-8, numbers in a text column, JSON columns that are not JSON or nest deeper
  than 64 levels, counts outside ``[0, 2**63 - 1]``), and a cycle row must have exactly
  ``n_decisions`` decision rows. The error names the file and the row (id, or rowid when the id
  itself is unreadable).

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
import time
from collections.abc import Callable, Sequence
from typing import Any, Final

from ebb.errors import ConfigError, InputError
from ebb.ledger.base import (Fence, MalformedRow, RowSkips, check_fence_time, check_fence_token, check_same_cycle,
                             decision_taken, keep_last, not_leader)
from ebb.ledger.sqlite_store import NotUtf8, SqliteStore, WriterLock
from ebb.model.decisions import CycleRecord, DecisionRecord
from ebb.model.ids import CycleId, DecisionId, RunId
from ebb.untrusted import checked_int, loads_json

__all__ = ["SqliteLedger", "SCHEMA_VERSION", "DEFAULT_PATH", "WriterLock", "decision_from_row", "cycle_from_rows",
           "ROW_FIX", "NotUtf8", "SqliteStore"]

SCHEMA_VERSION: Final = 1
DEFAULT_PATH: Final = "ebb-ledger.sqlite"
ROW_FIX: Final = ("ebb never rewrites a recorded row: restore the file from a backup, or delete this row in a copy "
                  "with sqlite3 (the other rows stay readable)")

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
_LEDGER_TABLES: Final = frozenset({"meta", "cycles", "decisions"})

_DECISION_COLS: Final = (
    "decision_id, cycle_id, position, run_id, ts_ns, target, action, from_replicas, to_replicas, "
    "reasons, signals, weights, vetoes, victims, plan, caused_by"
)
_CYCLE_COLS: Final = "cycle_id, run_id, ts_ns, policy, fencing_token, n_decisions, snapshot"
_JSON_FIELDS: Final = ("reasons", "signals", "weights", "vetoes", "victims", "plan", "caused_by")
_DECISION_ROW: Final = ("rowid", "decision_id", "cycle_id", "position", "run_id", "ts_ns", "target", "action",
                        "from_replicas", "to_replicas", *_JSON_FIELDS)
_CYCLE_ROW: Final = ("rowid", "cycle_id", "run_id", "ts_ns", "policy", "fencing_token", "n_decisions", "snapshot")
_TEXT_COLS: Final = frozenset({"decision_id", "cycle_id", "run_id", "target", "action", "policy", "snapshot",
                               *_JSON_FIELDS})
_INT64_MAX: Final = 2**63 - 1


def _dumps(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False, ensure_ascii=False)


def _brief(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _row_name(table: str, ident: object, rowid: object, cycle_id: object = None) -> str:
    name = f"{table} row {_brief(ident)}" if isinstance(ident, str) and ident else f"{table} rowid {rowid!r}"
    if isinstance(cycle_id, str) and cycle_id:
        name += f" of cycle {_brief(cycle_id)}"
    return name


def _columns(kind: str, row: Sequence[Any], names: Sequence[str], path: str, where: str) -> dict[str, Any]:
    """``row`` as a dict by column name; InputError for a wrong shape or undecodable text."""
    if len(row) != len(names):
        raise InputError(f"malformed {kind}: {len(row)} columns, expected {len(names)}", path=where, fix=ROW_FIX)
    out = dict(zip(names, row))
    for name in names:
        value = out[name]
        if name in _TEXT_COLS and not isinstance(value, str):
            what = "text that is not UTF-8" if isinstance(value, NotUtf8) else type(value).__name__
            raise InputError(f"malformed {kind}: column {name} holds {what} ({_brief(value)}), not text",
                             path=where, fix=ROW_FIX)
    return out


def _json_column(kind: str, name: str, text: str, where: str) -> Any:
    try:
        return loads_json(text)
    except (ValueError, RecursionError) as exc:
        raise InputError(f"malformed {kind}: column {name} is not valid JSON ({exc}): {text[:60]!r}",
                         path=where, fix=ROW_FIX) from exc


def decision_from_row(row: Sequence[Any], *, path: str) -> DecisionRecord:
    """The decision in one ``decisions`` row (``rowid`` first, then the table's columns in order).

    Any malformed value raises :class:`~ebb.errors.InputError` naming ``path`` and the row.
    """
    rowid = row[0] if len(row) else None
    ident = row[1] if len(row) > 1 else None
    where = f"{path} ({_row_name('decisions', ident, rowid, row[2] if len(row) > 2 else None)})"
    cols = _columns("decision", row, _DECISION_ROW, path, where)
    data: dict[str, Any] = {k: cols[k] for k in ("decision_id", "cycle_id", "run_id", "ts_ns", "target", "action",
                                                 "from_replicas", "to_replicas")}
    for name in _JSON_FIELDS:
        data[name] = _json_column("decision", name, cols[name], where)
    try:
        checked_int(cols["position"], "decision.position", lo=0, hi=_INT64_MAX)
    except ValueError as exc:
        raise InputError(f"malformed decision: {exc}", path=where, fix=ROW_FIX) from exc
    return DecisionRecord.from_dict(data, where=where, fix=ROW_FIX)


def cycle_from_rows(row: Sequence[Any], decision_rows: Sequence[Sequence[Any]], *, path: str) -> CycleRecord:
    """The cycle in one ``cycles`` row (``rowid`` first) with its ``decisions`` rows (by position).

    Any malformed value — in the cycle row or in one of its decision rows — raises
    :class:`~ebb.errors.InputError` naming ``path`` and that row; so does a decision count that
    differs from the row's ``n_decisions`` (decision rows lost or added by hand).
    """
    rowid = row[0] if len(row) else None
    where = f"{path} ({_row_name('cycles', row[1] if len(row) > 1 else None, rowid)})"
    cols = _columns("cycle", row, _CYCLE_ROW, path, where)
    decisions = [decision_from_row(r, path=path) for r in decision_rows]
    try:
        n = checked_int(cols["n_decisions"], "cycle.n_decisions", lo=0, hi=_INT64_MAX)
    except ValueError as exc:
        raise InputError(f"malformed cycle: {exc}", path=where, fix=ROW_FIX) from exc
    if n != len(decisions):
        raise InputError(f"malformed cycle: the cycle row says {n} decisions but {len(decisions)} decision rows "
                         "are stored", path=where, fix=ROW_FIX)
    data = {k: cols[k] for k in ("cycle_id", "run_id", "ts_ns", "policy", "fencing_token")}
    data["snapshot"] = _json_column("cycle", "snapshot", cols["snapshot"], where)
    return CycleRecord.from_dict(data, where=where, fix=ROW_FIX, decisions=decisions)


class SqliteLedger(SqliteStore):
    """Ledger in one SQLite file (``path``); ``create=False`` refuses a missing file instead of creating it.

    ``busy_timeout_s`` is how long a writer waits for another writer's lock before
    :class:`~ebb.errors.TransientError`. One object may be shared by threads (calls are serialised).
    ``read_only=True`` opens without writing anything (implies ``create=False``; appends fail with
    :class:`~ebb.errors.InputError`); ``exclusive=True`` is the one-controller lock (module docstring).
    ``fence_clock`` is the clock a fence's ``valid_until_s`` is compared with: the elector's.
    """

    def __init__(self, path: str | os.PathLike[str], *, create: bool = True, busy_timeout_s: float = 5.0,
                 read_only: bool = False, exclusive: bool = False,
                 fence_clock: Callable[[], float] = time.monotonic) -> None:
        self.path = os.fspath(path)
        self._fence_clock = fence_clock
        self._lock = threading.RLock()
        self._skipped: tuple[MalformedRow, ...] = ()
        if read_only and exclusive:
            raise ConfigError("a ledger opened read_only cannot be the exclusive writer")
        if read_only and self.path == ":memory:":
            raise ConfigError("an in-memory SQLite ledger cannot be opened read-only")
        if (read_only or not create) and self.path != ":memory:" and not os.path.exists(self.path):
            raise InputError("no ledger file here", path=self.path,
                             fix="pass --ledger with the path a controller or simulation wrote")
        self._open(read_only=read_only, exclusive=exclusive, busy_timeout_s=busy_timeout_s)
        try:
            self._init_schema()
        except BaseException:
            self._conn.close()
            self._release_writer()
            raise

    @property
    def skipped(self) -> tuple[MalformedRow, ...]:
        return self._skipped

    def _init_schema(self) -> None:
        with self._txn("open", write=not self.read_only) as conn:
            names = self._tables(conn)
            if not names and self.read_only:
                raise InputError("an empty SQLite file: no ebb ledger was written to it", path=self.path,
                                 fix="pass --ledger with the path a controller or simulation wrote")
            if names and "meta" not in names:
                raise InputError(f"SQLite file without an ebb ledger 'meta' table (tables: {sorted(names)})",
                                 path=self.path, fix="point --ledger at a ledger file")
            missing = sorted(_LEDGER_TABLES - names) if names else []
            if missing:
                raise InputError(f"ledger file without its {', '.join(missing)} table(s) (tables: {sorted(names)})",
                                 path=self.path, fix="restore it from a backup; ebb does not re-create the tables "
                                                     "of a ledger that had them")
            if not self.read_only:
                for stmt in _SCHEMA.split(";"):
                    if stmt.strip():
                        conn.execute(stmt)
            row = conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
            if row is None and not self.read_only:
                conn.execute("INSERT INTO meta(key, value) VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
            elif row is None or row[0] != str(SCHEMA_VERSION):
                found = "missing" if row is None else _brief(row[0])
                raise InputError(f"ledger schema version {found} is not the supported {SCHEMA_VERSION}",
                                 path=self.path, fix="open it with the ebb version that wrote it")

    # -- writes ---------------------------------------------------------------------------------------

    def append_cycle(self, cycle: CycleRecord, fence: Fence | None = None) -> bool:
        if not isinstance(cycle, CycleRecord):
            raise TypeError(f"append_cycle expects a CycleRecord, got {cycle!r}")
        check_fence_token(cycle, fence)
        with self._txn("append_cycle", write=True) as conn:
            if fence is not None:
                check_fence_time(fence, cycle.cycle_id, self._fence_clock())
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
            if fence is not None:  # again, last: a pause during the inserts must not outlive the lease
                check_fence_time(fence, cycle.cycle_id, self._fence_clock())
            return True

    @staticmethod
    def _decision_row(d: DecisionRecord, position: int) -> tuple[Any, ...]:
        plain = d.to_dict()
        return (d.decision_id, d.cycle_id, position, d.run_id, d.ts_ns, d.target, d.action,
                d.from_replicas, d.to_replicas, *(_dumps(plain[f]) for f in _JSON_FIELDS))

    # -- reads ----------------------------------------------------------------------------------------

    def _load_cycle(self, conn: sqlite3.Connection, cycle_id: str) -> CycleRecord | None:
        row = conn.execute(f"SELECT rowid, {_CYCLE_COLS} FROM cycles WHERE cycle_id = ?", (cycle_id,)).fetchone()
        if row is None:
            return None
        decs = conn.execute(f"SELECT rowid, {_DECISION_COLS} FROM decisions WHERE cycle_id = ? ORDER BY position",
                            (cycle_id,)).fetchall()
        return cycle_from_rows(row, decs, path=self.path)

    def get_decision(self, decision_id: DecisionId) -> DecisionRecord | None:
        with self._txn("get_decision", write=False) as conn:
            row = conn.execute(f"SELECT rowid, {_DECISION_COLS} FROM decisions WHERE decision_id = ?",
                               (decision_id,)).fetchone()
        return None if row is None else decision_from_row(row, path=self.path)

    def get_cycle(self, cycle_id: CycleId) -> CycleRecord | None:
        with self._txn("get_cycle", write=False) as conn:
            return self._load_cycle(conn, cycle_id)

    def cycles(self, run_id: RunId | None = None, limit: int | None = None) -> list[CycleRecord]:
        keep_last([], limit)  # validates limit
        where, args = ("WHERE run_id = ?", [run_id]) if run_id is not None else ("", [])
        # By rowid, so a row whose cycle_id was damaged (NULL, a blob) is still read, and reported.
        sel = f"SELECT rowid FROM cycles {where} ORDER BY ts_ns DESC, cycle_id DESC"
        if limit is not None:
            sel += f" LIMIT {int(limit)}"
        with self._txn("cycles", write=False) as conn:
            rows = conn.execute(f"SELECT rowid, {_CYCLE_COLS} FROM cycles WHERE rowid IN ({sel}) "
                                "ORDER BY ts_ns, cycle_id", args).fetchall()
            decs = conn.execute(f"SELECT rowid, {_DECISION_COLS} FROM decisions WHERE cycle_id IN "
                                f"(SELECT cycle_id FROM cycles WHERE rowid IN ({sel})) "
                                "ORDER BY cycle_id, position", args).fetchall()
        by_cycle: dict[object, list[Sequence[Any]]] = {}
        for r in decs:
            by_cycle.setdefault(r[2], []).append(r)
        skips = RowSkips()
        out: list[CycleRecord] = []
        for r in rows:
            try:
                out.append(cycle_from_rows(r, by_cycle.get(r[1], []), path=self.path))
            except InputError as exc:
                skips.skip("cycle", r[1] if isinstance(r[1], str) else f"rowid {r[0]}", exc)
        self._skipped = skips.result()
        return out

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
            rows = conn.execute(f"SELECT rowid, {_DECISION_COLS} FROM decisions {where} "
                                "ORDER BY ts_ns, decision_id", args).fetchall()
        skips = RowSkips()
        out: list[DecisionRecord] = []
        for r in rows:
            try:
                out.append(decision_from_row(r, path=self.path))
            except InputError as exc:
                skips.skip("decision", r[1] if isinstance(r[1], str) else f"rowid {r[0]}", exc)
        self._skipped = skips.result()
        return out

    def __enter__(self) -> SqliteLedger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"SqliteLedger({self.path!r})"
