"""`ebb review list|show|retry|resolve` against a review queue in an SQLite ledger file."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ebb.cli.main import app
from ebb.ledger.review import SqliteCompensationLog
from ebb.testing.mounts import MountUnavailable, read_only_copy

runner = CliRunner()
T0 = 1_714_564_800.0  # 2024-05-01T12:00:00Z


def _queue(tmp_path: Path) -> Path:
    path = tmp_path / "ledger.sqlite"
    with SqliteCompensationLog(path) as log:
        log.enqueue("ev-chat-1", "compensation did not finish within 800 ms", T0)
        log.enqueue("ev-embed-2", "compensation failed: RuntimeError: boom", T0 + 60)
    return path


def test_list_shows_pending_items_oldest_first(tmp_path: Path) -> None:
    res = runner.invoke(app, ["review", "list", "--ledger", str(_queue(tmp_path))])
    assert res.exit_code == 0, res.output
    lines = res.output.strip().splitlines()
    assert lines[0].startswith("ev-chat-1\tpending\t2024-05-01T12:00:00Z") and lines[1].startswith("ev-embed-2")


def test_show_prints_the_reason_and_status(tmp_path: Path) -> None:
    res = runner.invoke(app, ["review", "show", "ev-chat-1", "--ledger", str(_queue(tmp_path))])
    assert res.exit_code == 0, res.output
    assert "status:   pending" in res.output and "within 800 ms" in res.output


def test_resolve_with_a_note_removes_the_item_from_the_pending_list(tmp_path: Path) -> None:
    path = _queue(tmp_path)
    res = runner.invoke(app, ["review", "resolve", "ev-chat-1", "--note", "scaled chat to 4 by hand",
                              "--ledger", str(path)])
    assert res.exit_code == 0, res.output
    assert "resolved (scaled chat to 4 by hand)" in res.output
    pending = runner.invoke(app, ["review", "list", "--ledger", str(path)]).output
    assert "ev-chat-1" not in pending and "ev-embed-2" in pending
    everything = runner.invoke(app, ["review", "list", "--all", "--ledger", str(path)]).output
    assert "ev-chat-1\tresolved" in everything


def test_retry_marks_a_resolved_item_pending_again(tmp_path: Path) -> None:
    path = _queue(tmp_path)
    runner.invoke(app, ["review", "resolve", "ev-chat-1", "--ledger", str(path)])
    res = runner.invoke(app, ["review", "retry", "ev-chat-1", "--ledger", str(path)])
    assert res.exit_code == 0 and "pending again (retries=1)" in res.output
    with SqliteCompensationLog(path) as log:
        item = log.show("ev-chat-1")
    assert item is not None and item.status == "pending" and item.retries == 1


def test_an_unknown_id_exits_2_with_a_message(tmp_path: Path) -> None:
    path = _queue(tmp_path)
    for cmd in ("show", "retry", "resolve"):
        res = runner.invoke(app, ["review", cmd, "nope", "--ledger", str(path)])
        assert res.exit_code == 2 and "no review item 'nope'" in res.output


def test_a_missing_ledger_file_exits_2_and_is_not_created(tmp_path: Path) -> None:
    path = tmp_path / "absent.sqlite"
    res = runner.invoke(app, ["review", "list", "--ledger", str(path)])
    assert res.exit_code == 2 and "no ledger file here" in res.output
    assert not path.exists()


def test_an_empty_queue_says_so(tmp_path: Path) -> None:
    path = tmp_path / "l.sqlite"
    SqliteCompensationLog(path).close()
    res = runner.invoke(app, ["review", "list", "--ledger", str(path)])
    assert res.exit_code == 0 and "no pending review items" in res.output


# -- hostile and read-only ledgers (issue 12: M5, L3) ---------------------------------------------------


def _damage(path: Path, sql: str) -> None:
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA ignore_check_constraints=ON")
    conn.execute(sql)
    conn.commit()
    conn.close()


def test_list_with_a_malformed_item_lists_the_others_and_warns_in_one_line(tmp_path: Path) -> None:
    path = _queue(tmp_path)
    _damage(path, "UPDATE review_queue SET status = 'exploded' WHERE event_id = 'ev-chat-1'")
    res = runner.invoke(app, ["review", "list", "--all", "--ledger", str(path)])
    assert res.exit_code == 0, res.output
    assert res.stdout.startswith("ev-embed-2\tpending") and "ev-chat-1" not in res.stdout
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("warning: skipped 1 malformed row") and "exploded" in lines[0]


@pytest.mark.parametrize("cmd", ["show", "retry", "resolve"])
def test_show_retry_or_resolve_of_a_malformed_item_exit_2_with_one_line(tmp_path: Path, cmd: str) -> None:
    path = _queue(tmp_path)
    _damage(path, "UPDATE review_queue SET retries = -4 WHERE event_id = 'ev-chat-1'")
    res = runner.invoke(app, ["review", cmd, "ev-chat-1", "--ledger", str(path)])
    assert res.exit_code == 2 and "Traceback" not in res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "ev-chat-1" in lines[0] and "retries = -4" in lines[0]


def test_list_and_show_read_a_ledger_on_a_read_only_filesystem(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    path = _queue(tmp_path / "src")
    try:
        with read_only_copy([path], tmp_path / "ro") as folder:
            ro = str(folder / path.name)
            listed = runner.invoke(app, ["review", "list", "--ledger", ro])
            assert listed.exit_code == 0 and "ev-chat-1\tpending" in listed.stdout, listed.output
            shown = runner.invoke(app, ["review", "show", "ev-embed-2", "--ledger", ro])
            assert shown.exit_code == 0 and "boom" in shown.stdout
            refused = runner.invoke(app, ["review", "resolve", "ev-embed-2", "--ledger", ro])
            assert refused.exit_code == 2 and len(refused.stderr.strip().splitlines()) == 1
    except MountUnavailable as exc:
        pytest.skip(str(exc))


def test_etcd_flags_on_a_sqlite_ledger_exit_2(tmp_path: Path) -> None:
    res = runner.invoke(app, ["review", "list", "--ledger", str(_queue(tmp_path)), "--etcd-ca", "ca.pem"])
    assert res.exit_code == 2 and "etcd ledgers only" in res.stderr
