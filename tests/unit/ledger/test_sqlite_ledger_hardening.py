"""The SQLite ledger against a hostile or failing disk (issue 12: M5, L1, L2, L3).

Written from the red-team reproductions: ``sqlite_corrupt.py`` (rows edited behind the ledger's
back), ``diskfull2.py`` (a 600 KiB tmpfs that fills up), ``two_controllers_sqlite_every1.py`` (two
controllers on one file) and recipe R (a ledger on a read-only mount).
"""

from __future__ import annotations

import logging
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from ebb.errors import ConfigError, InputError, TransientError
from ebb.ledger import SqliteLedger, open_ledger
from ebb.model.decisions import CycleRecord, DecisionRecord
from ebb.model.ids import CycleId, DecisionId, RunId
from ebb.testing.mounts import MountUnavailable, read_only_copy, tiny_tmpfs


def _cycle(n: int, *, run: str = "run-a", plan_bytes: int = 0) -> CycleRecord:
    cid = CycleId(f"{run}-c{n}")
    d = DecisionRecord(DecisionId(f"{run}-{n}"), cid, RunId(run), 1_000 + n, "local/serving", "scale_down", 4, 3,
                       reasons=("peak demand needs 3",), signals={"util": 0.4}, plan={"pad": "x" * plan_bytes})
    return CycleRecord(cid, RunId(run), 1_000 + n, "ebb", (d,), {"replicas": 4})


@pytest.fixture
def ledger_path(tmp_path: Path) -> Path:
    path = tmp_path / "ledger.sqlite"
    with SqliteLedger(path) as led:
        for n in range(1, 4):
            led.append_cycle(_cycle(n))
    return path


def _edit(path: Path, sql: str, *args: object) -> None:
    """Change the file behind the ledger's back, CHECK constraints off (as the reproduction does)."""
    conn = sqlite3.connect(path)
    try:
        conn.execute("PRAGMA ignore_check_constraints=ON")
        conn.execute(sql, args)
        conn.commit()
    finally:
        conn.close()


# -- M5: malformed rows --------------------------------------------------------------------------------

# (what the reproduction or a hostile editor does to cycle 2, and a word the error must contain)
DAMAGE = [
    ("UPDATE decisions SET reasons = '[1,' WHERE cycle_id = 'run-a-c2'", "reasons is not valid JSON"),
    ("UPDATE decisions SET reasons = '5' WHERE cycle_id = 'run-a-c2'", "reasons must be a JSON list"),
    ("UPDATE decisions SET to_replicas = -3 WHERE cycle_id = 'run-a-c2'", "to_replicas = -3"),
    ("UPDATE decisions SET action = 'explode' WHERE cycle_id = 'run-a-c2'", "action must be one of"),
    ("UPDATE cycles SET snapshot = '[]' WHERE cycle_id = 'run-a-c2'", "snapshot must be a JSON object"),
    ("UPDATE decisions SET target = CAST(x'ff00' AS TEXT) WHERE cycle_id = 'run-a-c2'", "not UTF-8"),
    ("UPDATE decisions SET ts_ns = 'yesterday' WHERE cycle_id = 'run-a-c2'", "ts_ns must be an integer"),
    ("UPDATE decisions SET plan = x'7b7d' WHERE cycle_id = 'run-a-c2'", "column plan holds bytes"),
    ("UPDATE decisions SET plan = '" + "[" * 100 + "]" * 100 + "' WHERE cycle_id = 'run-a-c2'", "deeper than 64"),
    ("UPDATE decisions SET signals = '{\"util\": 1" + "0" * 400 + "}' WHERE cycle_id = 'run-a-c2'", "signals"),
    ("UPDATE decisions SET from_replicas = 1.5 WHERE cycle_id = 'run-a-c2'", "from_replicas must be an integer"),
    ("UPDATE decisions SET reasons = '[\"\\ud800\"]' WHERE cycle_id = 'run-a-c2'", "not valid Unicode"),
    ("UPDATE decisions SET cycle_id = 'run-a-c9' WHERE cycle_id = 'run-a-c2'", "says 1 decisions but 0"),
    ("UPDATE cycles SET fencing_token = 9223372036854775807 + 1 WHERE cycle_id = 'run-a-c2'", "fencing_token"),
    ("UPDATE cycles SET policy = x'01' WHERE cycle_id = 'run-a-c2'", "column policy holds bytes"),
]


@pytest.mark.parametrize(("sql", "why"), DAMAGE, ids=[f"damage{i}" for i in range(len(DAMAGE))])
def test_a_malformed_row_is_skipped_by_cycles_and_raises_input_error_naming_file_and_row(
    ledger_path: Path, sql: str, why: str, caplog: pytest.LogCaptureFixture,
) -> None:
    _edit(ledger_path, sql)
    with SqliteLedger(ledger_path) as led, caplog.at_level(logging.WARNING, logger="ebb.ledger"):
        assert [c.cycle_id for c in led.cycles(RunId("run-a"))] == ["run-a-c1", "run-a-c3"]
        assert len(led.skipped) == 1 and led.skipped[0].key == "run-a-c2"
        assert why in led.skipped[0].error and str(ledger_path) in led.skipped[0].error
        assert any("run-a-c2" in r.getMessage() for r in caplog.records if r.name == "ebb.ledger")
        with pytest.raises(InputError, match="run-a-c2") as info:
            led.get_cycle(CycleId("run-a-c2"))
        assert str(ledger_path) in str(info.value) and "(fix: " in str(info.value)
        assert led.get_cycle(CycleId("run-a-c3")) == _cycle(3)


def test_decisions_skips_only_the_malformed_decision_and_get_decision_names_it(ledger_path: Path) -> None:
    _edit(ledger_path, "UPDATE decisions SET action = 'explode' WHERE decision_id = 'run-a-2'")
    with SqliteLedger(ledger_path) as led:
        assert [d.decision_id for d in led.decisions()] == ["run-a-1", "run-a-3"]
        assert [r.kind for r in led.skipped] == ["decision"]
        with pytest.raises(InputError, match=r"decisions row 'run-a-2' of cycle 'run-a-c2'.*explode"):
            led.get_decision(DecisionId("run-a-2"))


def test_a_row_whose_id_is_not_text_is_named_by_its_rowid(ledger_path: Path) -> None:
    _edit(ledger_path, "UPDATE cycles SET cycle_id = CAST(x'fffe' AS TEXT) WHERE cycle_id = 'run-a-c2'")
    with SqliteLedger(ledger_path) as led:
        assert [c.cycle_id for c in led.cycles()] == ["run-a-c1", "run-a-c3"]
        assert led.skipped[0].key.startswith("rowid ") and "cycles rowid" in led.skipped[0].error


def test_a_ledger_missing_one_of_its_tables_is_refused_not_silently_recreated(ledger_path: Path) -> None:
    _edit(ledger_path, "DROP TABLE decisions")
    for read_only in (False, True):
        with pytest.raises(InputError, match="without its decisions table"):
            SqliteLedger(ledger_path, read_only=read_only)
    conn = sqlite3.connect(ledger_path)
    names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    conn.close()
    assert "decisions" not in names


# -- L3: read-only opening -----------------------------------------------------------------------------


def test_a_read_only_open_writes_nothing_and_refuses_to_append(ledger_path: Path) -> None:
    before = ledger_path.read_bytes()
    with SqliteLedger(ledger_path, read_only=True) as led:
        assert len(led.cycles()) == 3
        with pytest.raises(InputError, match="readonly|read-only"):
            led.append_cycle(_cycle(9))
    assert ledger_path.read_bytes() == before


def test_a_read_only_open_of_an_empty_or_missing_file_is_an_input_error_and_creates_nothing(tmp_path: Path) -> None:
    empty = tmp_path / "empty.sqlite"
    empty.write_bytes(b"")
    with pytest.raises(InputError, match="empty SQLite file"):
        SqliteLedger(empty, read_only=True)
    assert empty.read_bytes() == b""
    with pytest.raises(InputError, match="no ledger file here"):
        SqliteLedger(tmp_path / "absent.sqlite", read_only=True)
    assert not (tmp_path / "absent.sqlite").exists()


@pytest.fixture
def read_only_ledger(ledger_path: Path, tmp_path: Path) -> Iterator[Path]:
    try:
        with read_only_copy([ledger_path], tmp_path / "ro") as folder:
            yield folder / ledger_path.name
    except MountUnavailable as exc:
        pytest.skip(str(exc))


def test_a_ledger_in_a_directory_nobody_can_write_opens_read_only(read_only_ledger: Path) -> None:
    """Recipe R: before, `unable to open database file` (SQLite wanted a -shm file next to it)."""
    assert not os.access(read_only_ledger.parent, os.W_OK)
    with SqliteLedger(read_only_ledger, read_only=True) as led:
        assert led.immutable
        assert [c.cycle_id for c in led.cycles()] == ["run-a-c1", "run-a-c2", "run-a-c3"]
        assert led.get_decision(DecisionId("run-a-2")) == _cycle(2).decisions[0]
    led2 = open_ledger(read_only_ledger, read_only=True)
    assert len(led2.decisions()) == 3
    led2.close()


# -- L1: a full disk is transient -------------------------------------------------------------------------


def test_a_full_disk_raises_transient_error_writes_nothing_and_the_ledger_works_once_space_is_freed(
    tmp_path: Path,
) -> None:
    """diskfull2.py: before, `cannot use as an ebb ledger (append_cycle): database or disk is full` as a
    permanent InputError with the fix `point --ledger at a ledger file`."""
    try:
        with tiny_tmpfs(tmp_path / "tiny", size_kib=600) as tiny:
            led = SqliteLedger(tiny / "l.sqlite")
            filler = tiny / "filler"
            st = os.statvfs(tiny)
            filler.write_bytes(b"\0" * max(0, st.f_bavail * st.f_frsize - 120 * 1024))
            stored, failure = 0, None
            try:
                for n in range(1, 200):
                    try:
                        led.append_cycle(_cycle(n, plan_bytes=8_000))
                        stored = n
                    except TransientError as exc:
                        failure = (n, exc)
                        break
                assert failure is not None, "the disk never filled up"
                n, exc = failure
                assert "full" in str(exc) and "nothing was written" in str(exc) and str(tiny) in str(exc)
                assert isinstance(exc.__cause__, sqlite3.Error)
                assert led.get_cycle(CycleId(f"run-a-c{n}")) is None  # all or nothing
                assert len(led.cycles()) == stored
                filler.unlink()
                assert led.append_cycle(_cycle(n, plan_bytes=8_000)) is True  # no transaction left open
                assert len(led.cycles()) == stored + 1
            finally:
                led.close()
    except MountUnavailable as exc:
        pytest.skip(str(exc))


def test_disk_full_and_io_errors_map_to_transient_and_others_to_input_errors_with_their_own_fix(
    tmp_path: Path,
) -> None:
    with SqliteLedger(tmp_path / "l.sqlite") as led:
        def wrapped(code: int, text: str) -> Exception:
            exc = sqlite3.OperationalError(text)
            exc.sqlite_errorcode = code
            return led._wrap(exc, "append_cycle")
        full, ioerr = wrapped(13, "database or disk is full"), wrapped(10 | (3 << 8), "disk I/O error")
        assert isinstance(full, TransientError) and "full" in str(full)
        assert isinstance(ioerr, TransientError) and "disk I/O error" in str(ioerr)
        ro = wrapped(8, "attempt to write a readonly database")
        assert isinstance(ro, InputError) and "writable" in str(ro)
        corrupt = wrapped(11, "database disk image is malformed")
        assert isinstance(corrupt, InputError) and "backup" in str(corrupt)
        assert isinstance(wrapped(5, "database is locked"), TransientError)


# -- L2: one controller per file ----------------------------------------------------------------------------


def test_a_second_exclusive_writer_is_refused_naming_the_holder_while_readers_are_not_blocked(tmp_path: Path) -> None:
    path = tmp_path / "l.sqlite"
    first = SqliteLedger(path, exclusive=True)
    try:
        first.append_cycle(_cycle(1))
        with pytest.raises(ConfigError, match=rf"another controller holds this ledger \(pid {os.getpid()} .*--elect"):
            SqliteLedger(path, exclusive=True)
        with pytest.raises(ConfigError, match="another controller"):
            open_ledger(path, writer=True)
        with SqliteLedger(path, read_only=True) as reader, SqliteLedger(path) as plain:
            assert reader.cycles() == [_cycle(1)] and plain.get_cycle(CycleId("run-a-c1")) == _cycle(1)
        first.append_cycle(_cycle(2))  # still the writer
    finally:
        first.close()
    with SqliteLedger(path, exclusive=True) as again:  # released by close
        assert len(again.cycles()) == 2


def test_the_writer_lock_dies_with_its_process_even_on_sigkill(tmp_path: Path) -> None:
    path = tmp_path / "l.sqlite"
    holder = textwrap.dedent(f"""
        import sys, time
        from ebb.ledger import SqliteLedger
        led = SqliteLedger({str(path)!r}, exclusive=True)
        print("locked", flush=True)
        time.sleep(60)
    """)
    proc = subprocess.Popen([sys.executable, "-c", holder], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "locked"
        with pytest.raises(ConfigError, match=f"pid {proc.pid}"):
            SqliteLedger(path, exclusive=True)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        if proc.stdout is not None:
            proc.stdout.close()
    with SqliteLedger(path, exclusive=True) as led:  # the kernel dropped the flock with the process
        assert led.cycles() == []
