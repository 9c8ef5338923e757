"""The SQLite plumbing Ebb's stores share: opening, the one-writer lock, read-only opening, errors.

:class:`SqliteStore` is the base of :class:`~ebb.ledger.sqlite.SqliteLedger` and of
:class:`~ebb.ledger.review.SqliteCompensationLog` (tables in the same file); :class:`WriterLock` is
the one-controller lock. Guarantees of every store built on it:

* **WAL mode, ``synchronous=FULL``** (every writable connection). WAL lets readers (``ebb
  explain``) run while a controller writes. With ``NORMAL`` a WAL database survives a killed
  *process* but may lose the last commits on power loss or an OS crash; the ledger is an audit trail
  written a few times per second at most, so we pay one fsync per cycle (``FULL``) and a returned
  ``append_cycle`` is durable.
* **One writer** (``exclusive=True``, what a controller opens). The ledger takes an exclusive
  ``flock`` on the sidecar file ``<path>.lock`` (created next to the ledger, holding the owner's pid
  and host; never deleted) before it touches the database, and holds it until
  :meth:`SqliteStore.close`. A second exclusive opener — another controller on the same file, in
  this process or any other on this host — is refused at once with
  :class:`~ebb.errors.ConfigError` ("another controller holds this ledger (pid N on HOST)…; use
  --elect with an etcd ledger for HA"). The kernel drops the lock when its process dies (SIGKILL
  included), so a restarted controller takes it over at once. Readers and non-exclusive writers
  (``ebb explain``, ``ebb review``, simulations) never look at the lock.
* **Read-only opening** (``read_only=True``, what ``ebb explain`` and ``ebb review list/show`` use).
  The file is opened with SQLite's ``mode=ro`` (``PRAGMA query_only`` too): the database file is
  never written and the schema is checked but never created (a missing or empty file is an
  :class:`~ebb.errors.InputError`); in a writable directory SQLite may still create the ``-wal`` and
  ``-shm`` side files every WAL reader uses. Where the directory is not writable (a read-only mount,
  a ``chmod a-w`` copy) and no non-empty ``-wal`` file holds recent commits, the file is opened
  ``immutable=1``, which needs no side files; such a reader does not see writes made after it opened
  (there cannot be a writer in such a directory).
* **Text that is not UTF-8** comes back as :class:`NotUtf8` (the connections' ``text_factory``)
  instead of failing the whole query, so only the row holding it is malformed.
* **Errors.** ``database is locked``/``busy`` (after ``busy_timeout_s``), a full disk
  (``SQLITE_FULL``) and disk I/O errors (``SQLITE_IOERR``) → :class:`~ebb.errors.TransientError`,
  with nothing written (the transaction is rolled back); a corrupt or non-database file, a file of
  another application, a damaged schema, a read-only file opened for writing, or a path that cannot
  be opened → :class:`~ebb.errors.InputError` naming the path and a fix for that case. The
  ``sqlite3`` exception is chained as ``__cause__``.
"""

from __future__ import annotations

import errno
import fcntl
import os
import socket
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import quote

from ebb.errors import ConfigError, InputError, TransientError

__all__ = ["NotUtf8", "SqliteStore", "WriterLock"]

# SQLite primary result codes (``sqlite3.Error.sqlite_errorcode & 0xFF``).
_SQLITE_PERM, _SQLITE_BUSY, _SQLITE_LOCKED, _SQLITE_READONLY = 3, 5, 6, 8
_SQLITE_IOERR, _SQLITE_CORRUPT, _SQLITE_FULL, _SQLITE_CANTOPEN, _SQLITE_NOTADB = 10, 11, 13, 14, 26


class NotUtf8(bytes):
    """A TEXT value whose bytes are not UTF-8 (returned by the connections' ``text_factory`` instead of
    failing the whole query, so only the row holding it is malformed)."""


def _text(raw: bytes) -> str | NotUtf8:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return NotUtf8(raw)


def _dir_writable(path: str) -> bool:
    return os.access(os.path.dirname(os.path.abspath(path)) or ".", os.W_OK)


def _nonempty(path: str) -> bool:
    try:
        return os.path.getsize(path) > 0
    except OSError:
        return False


class WriterLock:
    """An exclusive ``flock`` on ``<ledger>.lock``, held until :meth:`release` or the process dies.

    :class:`~ebb.errors.ConfigError` when another holder has it (the message names its pid and host,
    as written in the file); :class:`~ebb.errors.InputError` when the lock file cannot be created
    (:class:`~ebb.errors.TransientError` when the disk is full).
    """

    def __init__(self, ledger_path: str) -> None:
        self.path = f"{ledger_path}.lock"
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            if exc.errno == errno.ENOSPC:
                raise TransientError(f"cannot create the ledger's writer lock {self.path}: the disk is full "
                                     "(fix: free space on that filesystem)", retry_after_s=5.0) from exc
            raise InputError(f"cannot create the writer lock {self.path}: {exc.strerror or exc}", path=ledger_path,
                             fix="a controller needs the ledger's directory writable") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            holder = self._holder(fd)
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise ConfigError(
                    f"another controller holds this ledger ({holder}): {ledger_path} (lock {self.path}); two "
                    "controllers on one SQLite ledger would both act (fix: stop the other controller, or use "
                    "--elect with an etcd ledger for HA)") from exc
            raise InputError(f"cannot lock {self.path}: {exc.strerror or exc}", path=ledger_path,
                             fix="put the ledger on a local filesystem that supports flock") from exc
        self._fd: int | None = fd
        try:  # who holds it, for the message above; the lock itself does not depend on it
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()}\n".encode(), 0)
        except OSError:
            pass

    @staticmethod
    def _holder(fd: int) -> str:
        try:
            text = os.pread(fd, 200, 0).decode("utf-8", "replace").strip()
        except OSError:
            text = ""
        return text if text.startswith("pid ") else "pid unknown"

    def release(self) -> None:
        """Drop the lock (the file stays); releasing twice is allowed."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)


class SqliteStore:
    """Shared plumbing of Ebb's SQLite stores: opening, error mapping and one-transaction-per-call.

    Subclasses set ``path`` and ``_lock`` and call :meth:`_open`, and name what the file is used as
    (``_USE``) and the fix for a wrong file (``_FIX``). A locked or busy database, a full disk and a
    disk I/O error become :class:`~ebb.errors.TransientError`; any other SQLite error becomes
    :class:`~ebb.errors.InputError` naming the path and a fix for its kind, with the cause chained.
    """

    _USE: str = "an ebb ledger"
    _FIX: str = "point --ledger at a ledger file, or move this file away and start a new ledger"
    path: str
    read_only: bool = False
    immutable: bool = False
    _conn: sqlite3.Connection
    _lock: threading.RLock
    _closed: bool
    _writer_lock: WriterLock | None = None

    def _wrap(self, exc: sqlite3.Error, op: str) -> Exception:
        msg = str(exc)
        low = msg.lower()
        code = getattr(exc, "sqlite_errorcode", None)
        primary = code & 0xFF if isinstance(code, int) else None
        if primary in (_SQLITE_BUSY, _SQLITE_LOCKED) or "locked" in low or "busy" in low:
            return TransientError(f"ledger {self.path!r} is locked by another writer during {op}: {msg}",
                                  retry_after_s=0.5)
        folder = os.path.dirname(os.path.abspath(self.path))
        if primary == _SQLITE_FULL:
            return TransientError(f"{self.path}: the disk holding the ledger is full ({op}: {msg}); nothing was written "
                                  f"(fix: free space on the filesystem holding {folder})", retry_after_s=5.0)
        if primary == _SQLITE_IOERR:
            return TransientError(f"{self.path}: disk I/O error on the ledger ({op}: {msg}); nothing was written "
                                  f"(the disk holding {folder} may be full or failing)", retry_after_s=5.0)
        if primary == _SQLITE_READONLY:
            return InputError(f"cannot write {self._USE} ({op}): {msg}", path=self.path,
                              fix="a controller needs the file and its directory writable; `ebb explain` and "
                                  "`ebb review list/show` read a read-only ledger as it is")
        if primary in (_SQLITE_CANTOPEN, _SQLITE_PERM):
            return InputError(f"cannot open {self._USE} ({op}): {msg}", path=self.path,
                              fix="check that the file and its directory exist and are readable "
                                  "(and writable, for a controller)")
        if primary in (_SQLITE_CORRUPT, _SQLITE_NOTADB):
            return InputError(f"not {self._USE}, or a damaged one ({op}): {msg}", path=self.path,
                              fix="restore it from a backup, or move this file away (keep it) and start a new "
                                  "ledger")
        return InputError(f"cannot use as {self._USE} ({op}): {msg}", path=self.path, fix=self._FIX)

    @contextmanager
    def _errors(self, op: str) -> Iterator[None]:
        try:
            yield
        except sqlite3.Error as exc:
            raise self._wrap(exc, op) from exc

    def _open(self, *, read_only: bool, exclusive: bool, busy_timeout_s: float) -> None:
        """Lock (``exclusive``), connect and set the pragmas; ``self._conn`` is set on return."""
        self.read_only = read_only
        self._closed = False
        if exclusive and self.path != ":memory:":
            self._writer_lock = WriterLock(self.path)
        try:
            self._conn = self._connect(read_only, busy_timeout_s)
            try:
                with self._errors("open"):
                    if read_only:
                        self._conn.execute("PRAGMA query_only=ON")
                    else:
                        self._conn.execute("PRAGMA foreign_keys=ON")
                        self._conn.execute("PRAGMA journal_mode=WAL").fetchone()
                        self._conn.execute("PRAGMA synchronous=FULL")
            except BaseException:
                self._conn.close()
                raise
        except BaseException:
            self._release_writer()
            raise

    def _connect(self, read_only: bool, busy_timeout_s: float) -> sqlite3.Connection:
        if not read_only:
            try:
                conn = sqlite3.connect(self.path, timeout=busy_timeout_s, isolation_level=None,
                                       check_same_thread=False)
            except sqlite3.Error as exc:
                raise self._wrap(exc, "open") from exc
            conn.text_factory = _text
            return conn
        uri = f"file:{quote(os.path.abspath(self.path))}?mode=ro"
        try:
            return self._probe(uri, busy_timeout_s)
        except sqlite3.Error as exc:
            # A WAL file in a directory nobody can write: SQLite cannot make the -shm it wants. With no
            # -wal holding commits, the main file is the whole ledger: open it immutable.
            if _dir_writable(self.path) or _nonempty(f"{self.path}-wal"):
                raise self._wrap(exc, "open") from exc
        try:
            conn = self._probe(uri + "&immutable=1", busy_timeout_s)
        except sqlite3.Error as exc:
            raise self._wrap(exc, "open") from exc
        self.immutable = True
        return conn

    @staticmethod
    def _probe(uri: str, busy_timeout_s: float) -> sqlite3.Connection:
        conn = sqlite3.connect(uri, uri=True, timeout=busy_timeout_s, isolation_level=None, check_same_thread=False)
        conn.text_factory = _text
        try:
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        except BaseException:
            conn.close()
            raise
        return conn

    def _tables(self, conn: sqlite3.Connection) -> set[str]:
        return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")
                if isinstance(r[0], str)}

    @contextmanager
    def _txn(self, op: str, *, write: bool = True) -> Iterator[sqlite3.Connection]:
        with self._lock, self._errors(op):
            if self._closed:
                raise RuntimeError(f"{type(self).__name__}({self.path!r}) is closed")
            conn = self._conn
            conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            try:
                yield conn
                conn.execute("COMMIT")
            except BaseException:
                # Also after a failed COMMIT (disk full): never leave the transaction open.
                if conn.in_transaction:
                    try:
                        conn.execute("ROLLBACK")
                    except sqlite3.Error:
                        pass
                raise

    def _release_writer(self) -> None:
        lock, self._writer_lock = self._writer_lock, None
        if lock is not None:
            lock.release()

    def close(self) -> None:
        """Close the connection (and drop the writer lock); closing twice is allowed."""
        with self._lock:
            if not self._closed:
                self._closed = True
                self._conn.close()
                self._release_writer()
