"""Shadow minutes (issue #34 item 3): validation, the dict and ledger round trips, versions, hostile rows."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ebb.errors import InputError
from ebb.ledger import SqliteLedger
from ebb.model.decisions import CycleRecord
from ebb.model.ids import CycleId, RunId
from ebb.model.shadow import (SHADOW_RECORD_VERSION, SLOTS, ShadowMinute, shadow_cycle, shadow_from_dict,
                              shadow_of)

START = 1_767_607_200


def minute(**over: Any) -> ShadowMinute:
    args: dict[str, Any] = dict(start_s=START, target="default/vllm", as_run=(None,) * 5 + (6,) * 55,
                                ebb=(None,) * 5 + (4,) * 55, ttft_p99_ms=(None,) * 10 + (180.5,) * 50,
                                minute_ttft_p99_ms=240.0, completions=812.0, slo_ttft_ms=2000.0,
                                policy="ebb:profile=balanced")
    args.update(over)
    return ShadowMinute(**args)


def test_a_minute_round_trips_through_its_dict_and_a_ledger_cycle(tmp_path: Path) -> None:
    m = minute()
    d = m.to_dict()
    assert d["v"] == SHADOW_RECORD_VERSION and shadow_from_dict(d) == m
    cycle = shadow_cycle(m, RunId("live"), fencing_token=3)
    assert cycle.cycle_id == f"live-shadow-{START}-05" and cycle.policy == "shadow" and cycle.decisions == ()
    assert cycle.ts_ns == (START + 5) * 1_000_000_000 and cycle.fencing_token == 3
    assert shadow_of(CycleRecord.from_json(cycle.to_json())) == m
    with SqliteLedger(tmp_path / "l.sqlite") as led:
        assert led.append_cycle(cycle) is True and led.append_cycle(cycle) is False  # idempotent by id
        back = led.get_cycle(cycle.cycle_id)
    assert back is not None and shadow_of(back) == m


def test_two_controllers_sharing_a_minute_write_two_rows() -> None:
    first = minute(as_run=(6,) * 30 + (None,) * 30, ebb=(4,) * 30 + (None,) * 30)
    second = minute(as_run=(None,) * 31 + (6,) * 29, ebb=(None,) * 31 + (5,) * 29)
    ids = {shadow_cycle(m, RunId("live")).cycle_id for m in (first, second)}
    assert ids == {f"live-shadow-{START}-00", f"live-shadow-{START}-31"}


def test_other_cycles_are_no_shadow_minutes() -> None:
    assert shadow_of(CycleRecord(CycleId("live-c1"), RunId("live"), 1, "ebb")) is None
    assert shadow_of(CycleRecord(CycleId("live-d"), RunId("live"), 1, "actuator", snapshot={"drain": {}})) is None


@pytest.mark.parametrize(("over", "field"), [
    ({"start_s": START + 1}, "start_s"), ({"as_run": (6,) * 59}, "as_run"), ({"ebb": (-1,) * SLOTS}, "ebb[0]"),
    ({"ebb": (True,) * SLOTS}, "ebb[0]"), ({"ttft_p99_ms": (float("nan"),) * SLOTS}, "ttft_p99_ms[0]"),
    ({"completions": -1.0}, "completions"), ({"slo_ttft_ms": 0.0}, "slo_ttft_ms"),
    ({"minute_ttft_p99_ms": float("inf")}, "minute_ttft_p99_ms"), ({"target": "x" * 1001}, "target"),
    ({"as_run": (2_000_000,) * SLOTS}, "as_run[0]"),
])
def test_a_bad_field_is_refused_naming_it(over: dict[str, Any], field: str) -> None:
    with pytest.raises(ValueError, match=field.replace("[", r"\[").replace("]", r"\]")):
        minute(**over)


def test_a_newer_version_is_refused_by_name_and_a_missing_field_named() -> None:
    d = minute().to_dict()
    with pytest.raises(InputError, match="version 2 is newer"):
        shadow_from_dict({**d, "v": 2}, where="row 7")
    del d["ebb"]
    with pytest.raises(InputError, match=r"row 7: .*missing field shadow\.ebb"):
        shadow_from_dict(d, where="row 7")


_json = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
                     lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=5), kids, max_size=4),
                     max_leaves=20)


@settings(max_examples=300, deadline=None)
@given(data=st.dictionaries(st.sampled_from(["v", "start_s", "target", "as_run", "ebb", "ttft_p99_ms",
                                             "minute_ttft_p99_ms", "completions", "slo_ttft_ms", "policy"]),
                            _json) | _json)
def test_decoding_any_row_gives_a_record_or_an_input_error_never_another_exception(data: Any) -> None:
    try:
        m = shadow_from_dict(data)
    except InputError:
        return
    assert shadow_from_dict(m.to_dict()) == m
