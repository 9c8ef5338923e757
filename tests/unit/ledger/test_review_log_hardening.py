"""The review queue (``ebb review``) on malformed items and read-only ledgers (issue 12: M5, L3).

``sqlite_corrupt.py`` found that one bad row crashed ``ebb review``; these tests damage one item the way
an editor of the file or of etcd could, and check that the others stay readable.
"""

from __future__ import annotations

import base64
import sqlite3
import uuid
from pathlib import Path

import pytest

from ebb.errors import InputError
from ebb.ledger import SqliteLedger
from ebb.ledger.review import EtcdCompensationLog, ReviewItem, SqliteCompensationLog, open_compensation_log

T0 = 1_714_564_800.0


def _queue(path: Path) -> Path:
    with SqliteCompensationLog(path) as log:
        for k, name in enumerate(("ev-a", "ev-b", "ev-c")):
            log.enqueue(name, f"compensation of {name} did not finish", T0 + k)
    return path


@pytest.mark.parametrize(("sql", "why"), [
    ("UPDATE review_queue SET status = 'bogus' WHERE event_id = 'ev-b'", "status must be pending or resolved"),
    ("UPDATE review_queue SET retries = -1 WHERE event_id = 'ev-b'", "retries = -1"),
    ("UPDATE review_queue SET ts = 'noon' WHERE event_id = 'ev-b'", "ts must be a number"),
    ("UPDATE review_queue SET reason = x'00' WHERE event_id = 'ev-b'", "reason must be a string"),
    ("UPDATE review_queue SET note = CAST(x'ff' AS TEXT) WHERE event_id = 'ev-b'", "not UTF-8"),
])
def test_a_malformed_sqlite_item_is_skipped_by_list_and_refused_by_show_and_resolve(
    tmp_path: Path, sql: str, why: str,
) -> None:
    path = _queue(tmp_path / "l.sqlite")
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA ignore_check_constraints=ON")
    conn.execute(sql)
    conn.commit()
    conn.close()
    with SqliteCompensationLog(path, create=False) as log:
        assert [i.event_id for i in log.list()] == ["ev-a", "ev-c"]
        assert [(r.kind, r.key) for r in log.skipped] == [("review item", "ev-b")]
        assert why in log.skipped[0].error and str(path) in log.skipped[0].error
        with pytest.raises(InputError, match="review_queue row 'ev-b'"):
            log.show("ev-b")
        with pytest.raises(InputError, match="ev-b"):
            log.resolve("ev-b", "fixed")
        assert log.resolve("ev-a", "done").status == "resolved"
    conn = sqlite3.connect(path)
    conn.text_factory = bytes
    (note,) = conn.execute("SELECT note FROM review_queue WHERE event_id = 'ev-b'").fetchone()
    conn.close()
    assert note != b"fixed"  # a malformed item is reported, never updated


def test_a_read_only_log_writes_nothing_and_reads_a_ledger_without_a_queue_as_empty(tmp_path: Path) -> None:
    bare = tmp_path / "bare.sqlite"
    SqliteLedger(bare).close()
    before = bare.read_bytes()
    log = open_compensation_log(bare, create=False, read_only=True)
    try:
        assert log.list() == [] and log.show("x") is None and log.done_ids() == set()
    finally:
        log.close()
    assert bare.read_bytes() == before
    conn = sqlite3.connect(bare)
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    conn.close()
    assert "review_queue" not in tables
    queued = _queue(tmp_path / "q.sqlite")
    with SqliteCompensationLog(queued, read_only=True) as ro:
        assert [i.event_id for i in ro.list()] == ["ev-a", "ev-b", "ev-c"]
        with pytest.raises(InputError, match="readonly|read-only"):
            ro.retry("ev-a")


@pytest.mark.parametrize("raw", [b"not json", b"[]", b'{"event_id": "x"}', b"{" * 200,
                                 b'{"event_id":"x","reason":"r","ts":1e999,"status":"pending","note":"","retries":0}',
                                 b'{"event_id":"x","reason":"r","ts":1,"status":"pending","note":"","retries":true}'])
def test_review_item_from_json_raises_input_error_for_any_bad_text(raw: bytes) -> None:
    with pytest.raises(InputError, match="malformed review item"):
        ReviewItem.from_json(raw, where="somewhere")


def test_review_item_json_round_trips() -> None:
    item = ReviewItem("ev-1", "why", T0, "resolved", "did it", 3)
    assert ReviewItem.from_json(item.to_json()) == item


def _put(log: EtcdCompensationLog, key: bytes, value: bytes) -> None:
    log._gw.post("/kv/put", {"key": base64.b64encode(key).decode(), "value": base64.b64encode(value).decode()},
                 "test put")


def test_a_malformed_etcd_item_is_skipped_by_list_and_named_by_show(etcd_endpoint: str) -> None:
    pytest.importorskip("etcd3gw")
    with EtcdCompensationLog(etcd_endpoint, prefix=f"test/{uuid.uuid4().hex}") as log:
        log.enqueue("ev-a", "late", T0)
        log.enqueue("ev-c", "late", T0 + 2)
        _put(log, log._key("ev-b"), b"not json")
        _put(log, log._key("ev-d"), ReviewItem("ev-a", "copied", T0).to_json().encode())  # under another key
        _put(log, log._done_root + b"ev-z", b"garbage")  # done ids come from the key, not the value
        assert [i.event_id for i in log.list()] == ["ev-a", "ev-c"]
        assert sorted(r.key.rsplit("/", 1)[-1] for r in log.skipped) == ["ev-b", "ev-d"]
        with pytest.raises(InputError, match="review/ev-b"):
            log.show("ev-b")
        with pytest.raises(InputError, match="ev-b"):
            log.resolve("ev-b")
        assert log.done_ids() == {"ev-z"}
