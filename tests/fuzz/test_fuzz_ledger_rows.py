"""Fuzz the ledger's row decoders (issue 12, M5): whatever a stored row holds, decoding returns a valid
record or raises :class:`ebb.errors.InputError` — never another exception — and a listing skips the row.

Targets (each ``max_examples`` fixed, a per-input deadline):

* ``ledger_rows``: ``CycleRecord.from_json`` / ``DecisionRecord.from_json`` on valid rows mutated field by
  field with hostile values, on byte-level mutations of their text, and on deep nesting;
  ``decision_from_row`` / ``cycle_from_rows`` (the SQLite path) on rows whose columns hold anything
  SQLite can return; a real SQLite ledger holding such rows; review items (``ReviewItem``); and drain
  records (``drain_from_dict`` / ``drain_of``: a drain cycle's snapshot mutated field by field, and the
  cycle's text byte by byte).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ebb.errors import InputError
from ebb.ledger.review import ReviewItem
from ebb.ledger.sqlite import NotUtf8, SqliteLedger, cycle_from_rows, decision_from_row
from ebb.model.decisions import CycleRecord, DecisionRecord
from ebb.model.drains import DrainEnd, DrainStart, DrainStep, drain_cycle, drain_from_dict, drain_of
from ebb.model.ids import CycleId, DecisionId, RunId

FUZZ = settings(max_examples=500, deadline=500, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

VALID_DECISION = DecisionRecord(
    DecisionId("live-7"), CycleId("live-c7"), RunId("live"), 1_714_564_800_000_000_000, "ns/serving",
    "scale_down", 4, 3, reasons=("peak demand needs 3",), signals={"util": 0.41, "p99_ttft_ms": 120.0},
    weights={"latency": 0.7}, vetoes=("none",), victims=("pod-a",), plan={"mode": "act", "steps": [{"n": 1}]},
    caused_by=(DecisionId("live-6"),))
VALID_CYCLE = CycleRecord(CycleId("live-c7"), RunId("live"), VALID_DECISION.ts_ns, "ebb:profile=lean",
                          (VALID_DECISION,), {"replicas": 4, "ready": 4}, fencing_token=3)

_hostile_scalar = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**200), 2**200), st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20), st.sampled_from(["", "\ud800", "scale_down", "explode", "-1", "1e999"]),
)
_hostile: st.SearchStrategy[Any] = st.recursive(
    _hostile_scalar, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner,
                                                                                  max_size=3),
    max_leaves=8)


def _expect_record_or_input_error(decode: Callable[[], object], kind: type) -> None:
    try:
        out = decode()
    except InputError:
        return
    assert isinstance(out, kind)


def _mutated(base: dict[str, Any], draw: Callable[..., Any]) -> dict[str, Any]:
    data = json.loads(json.dumps(base))
    for _ in range(draw(st.integers(1, 3))):
        target = data
        decisions = data.get("decisions")
        # An earlier round may have replaced the list (or its first item) with a hostile scalar.
        if isinstance(decisions, list) and decisions and isinstance(decisions[0], dict) and draw(st.booleans()):
            target = decisions[0]
        key = draw(st.sampled_from(sorted(target) + ["extra"]))
        if draw(st.integers(0, 9)) == 0:
            target.pop(key, None)
        else:
            target[key] = draw(_hostile)
    return data


@FUZZ
@given(data=st.data(), which=st.sampled_from(["cycle", "decision"]))
def test_a_record_mutated_field_by_field_decodes_or_raises_input_error(
    fuzz_tried: Callable[[str], None], data: st.DataObject, which: str,
) -> None:
    fuzz_tried("ledger_rows")
    base = VALID_CYCLE.to_dict() if which == "cycle" else VALID_DECISION.to_dict()
    mutated = _mutated(base, data.draw)
    try:
        text = json.dumps(mutated, ensure_ascii=False)
    except ValueError:  # a value JSON cannot express (an integer past the conversion limit)
        text = json.dumps(mutated, ensure_ascii=True, default=str)
    cls: type = CycleRecord if which == "cycle" else DecisionRecord
    _expect_record_or_input_error(lambda: cls.from_json(text, where="fuzz"), cls)
    _expect_record_or_input_error(lambda: cls.from_dict(mutated, where="fuzz"), cls)


@FUZZ
@given(data=st.data(), which=st.sampled_from(["cycle", "decision"]))
def test_byte_mutations_and_deep_nesting_of_a_row_decode_or_raise_input_error(
    fuzz_tried: Callable[[str], None], data: st.DataObject, which: str,
) -> None:
    fuzz_tried("ledger_rows")
    raw = bytearray((VALID_CYCLE if which == "cycle" else VALID_DECISION).to_json().encode())
    for _ in range(data.draw(st.integers(0, 6))):
        op = data.draw(st.sampled_from(["flip", "insert", "delete", "nest"]))
        i = data.draw(st.integers(0, len(raw)))
        if op == "flip" and i < len(raw):
            raw[i] ^= data.draw(st.integers(1, 255))
        elif op == "insert":
            raw[i:i] = data.draw(st.binary(min_size=1, max_size=4))
        elif op == "delete" and i < len(raw):
            del raw[i]
        elif op == "nest":
            n = data.draw(st.integers(1, 5_000))
            raw[i:i] = b"[" * n + b"]" * n
    cls: type = CycleRecord if which == "cycle" else DecisionRecord
    _expect_record_or_input_error(lambda: cls.from_json(bytes(raw), where="fuzz"), cls)


_column = st.one_of(
    st.none(), st.integers(-(2**63), 2**63 - 1), st.floats(allow_nan=True), st.text(max_size=12),
    st.binary(max_size=8), st.binary(min_size=1, max_size=4).map(NotUtf8),
    st.sampled_from(["[]", "{}", "[1,", "5", '{"a": 1e999}', "[" * 80 + "]" * 80, '["\\ud800"]', "null"]),
)


def _decision_row() -> list[Any]:
    d = VALID_DECISION.to_dict()
    return [1, d["decision_id"], d["cycle_id"], 0, d["run_id"], d["ts_ns"], d["target"], d["action"],
            d["from_replicas"], d["to_replicas"],
            *(json.dumps(d[k]) for k in ("reasons", "signals", "weights", "vetoes", "victims", "plan", "caused_by"))]


def _cycle_row() -> list[Any]:
    return [1, VALID_CYCLE.cycle_id, VALID_CYCLE.run_id, VALID_CYCLE.ts_ns, VALID_CYCLE.policy,
            VALID_CYCLE.fencing_token, 1, json.dumps(dict(VALID_CYCLE.snapshot))]


@FUZZ
@given(data=st.data())
def test_sqlite_rows_with_any_column_values_decode_or_raise_input_error(
    fuzz_tried: Callable[[str], None], data: st.DataObject,
) -> None:
    fuzz_tried("ledger_rows")
    drow, crow = _decision_row(), _cycle_row()
    for _ in range(data.draw(st.integers(1, 4))):
        row = data.draw(st.sampled_from([drow, crow]))
        row[data.draw(st.integers(0, len(row) - 1))] = data.draw(_column)
    if data.draw(st.integers(0, 19)) == 0:
        drow = drow[: data.draw(st.integers(0, len(drow) - 1))]  # a row of the wrong shape
    _expect_record_or_input_error(lambda: decision_from_row(drow, path="fuzz.sqlite"), DecisionRecord)
    _expect_record_or_input_error(lambda: cycle_from_rows(crow, [drow], path="fuzz.sqlite"), CycleRecord)


@pytest.fixture(scope="module")
def mem_ledger() -> Iterator[SqliteLedger]:
    """One in-memory SQLite ledger for the module; each example empties it."""
    led = SqliteLedger(":memory:")
    yield led
    led.close()


@settings(max_examples=200, deadline=1_000, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_a_real_sqlite_ledger_holding_hostile_rows_lists_the_rest_and_never_crashes(
    fuzz_tried: Callable[[str], None], mem_ledger: SqliteLedger, data: st.DataObject,
) -> None:
    fuzz_tried("ledger_rows")
    _LEDGER = mem_ledger
    conn = _LEDGER._conn
    conn.execute("PRAGMA ignore_check_constraints=ON")
    conn.execute("DELETE FROM decisions")
    conn.execute("DELETE FROM cycles")
    good = CycleRecord(CycleId("good"), RunId("live"), 1, "ebb", (), {})
    _LEDGER.append_cycle(good)
    crow, drow = _cycle_row()[1:], _decision_row()[1:]
    col = data.draw(st.integers(0, len(crow) + len(drow) - 1))
    value = data.draw(_column)
    if col < len(crow):
        crow[col] = value
    else:
        drow[col - len(crow)] = value
    try:
        conn.execute("INSERT INTO cycles VALUES (?, ?, ?, ?, ?, ?, ?)", crow)
        conn.execute("INSERT INTO decisions VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", drow)
    except sqlite3.Error:  # SQLite itself refused the value (NOT NULL, a foreign key): not stored
        pass
    finally:
        conn.execute("PRAGMA ignore_check_constraints=OFF")
    (stored,) = conn.execute("SELECT count(*) FROM cycles").fetchone()
    listed = _LEDGER.cycles()
    assert good in listed and len(listed) + len(_LEDGER.skipped) == stored  # each row listed or skipped
    (stored_d,) = conn.execute("SELECT count(*) FROM decisions").fetchone()
    assert len(_LEDGER.decisions()) + len(_LEDGER.skipped) == stored_d
    _expect_record_or_input_error(lambda: _LEDGER.get_cycle(CycleId("live-c7")) or good, CycleRecord)
    _expect_record_or_input_error(lambda: _LEDGER.get_decision(DecisionId("live-7")) or VALID_DECISION,
                                  DecisionRecord)


_ITEM = {"event_id": "ev-1", "reason": "late", "ts": 1_714_564_800.0, "status": "pending", "note": "", "retries": 0}


@FUZZ
@given(data=st.data())
def test_review_items_decode_or_raise_input_error(fuzz_tried: Callable[[str], None], data: st.DataObject) -> None:
    fuzz_tried("ledger_rows")
    item = dict(_ITEM)
    for _ in range(data.draw(st.integers(1, 3))):
        key = data.draw(st.sampled_from(sorted(item) + ["extra"]))
        if data.draw(st.integers(0, 9)) == 0:
            item.pop(key, None)
        else:
            item[key] = data.draw(_hostile | _column)
    _expect_record_or_input_error(lambda: ReviewItem.from_dict(item, where="fuzz"), ReviewItem)
    text = json.dumps(item, default=repr)
    raw = text.encode()
    if data.draw(st.booleans()):
        i = data.draw(st.integers(0, len(raw)))
        raw = raw[:i] + data.draw(st.binary(max_size=4)) + raw[i:]
    _expect_record_or_input_error(lambda: ReviewItem.from_json(raw, where="fuzz"), ReviewItem)


_DRAINS = [DrainStart(VALID_CYCLE.ts_ns, VALID_CYCLE.ts_ns, "ns/serving", "pod-a", "live-7", "sleep", 120.0),
           DrainStep(VALID_CYCLE.ts_ns + 1, VALID_CYCLE.ts_ns, "ns/serving", "pod-a", "live-7", 3, 0.2),
           DrainEnd(VALID_CYCLE.ts_ns + 2, VALID_CYCLE.ts_ns, "ns/serving", "pod-a", "live-7", "budget", "released",
                    None, 120.0, "drain budget 120 s ran out")]


@FUZZ
@given(data=st.data(), which=st.sampled_from([0, 1, 2]))
def test_a_drain_record_mutated_field_by_field_or_byte_by_byte_decodes_or_raises_input_error(
    fuzz_tried: Callable[[str], None], data: st.DataObject, which: int,
) -> None:
    fuzz_tried("ledger_rows")
    event = _DRAINS[which]
    mutated = _mutated(event.to_dict(), data.draw)
    _expect_record_or_input_error(lambda: drain_from_dict(mutated, where="fuzz"), (DrainStart, DrainStep, DrainEnd))
    raw = bytearray(drain_cycle(event, RunId("live")).to_json().encode())
    for _ in range(data.draw(st.integers(0, 4))):
        i = data.draw(st.integers(0, len(raw) - 1))
        raw[i] ^= data.draw(st.integers(1, 255))
    try:
        cycle = CycleRecord.from_json(bytes(raw), where="fuzz")
    except InputError:
        return
    try:
        out = drain_of(cycle)
    except InputError:
        return
    assert out is None or isinstance(out, (DrainStart, DrainStep, DrainEnd))
