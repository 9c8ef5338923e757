"""Drain records (issue #33, item 6): validation, the dict and ledger round trips, versions, old ledgers."""

from __future__ import annotations

from typing import Any

import pytest

from ebb.errors import InputError
from ebb.ledger import MemoryLedger, SqliteLedger
from ebb.model.decisions import CycleRecord
from ebb.model.drains import (DRAIN_RECORD_VERSION, DrainEnd, DrainEvent, DrainStart, DrainStep, drain_cycle,
                              drain_from_dict, drain_of)
from ebb.model.ids import CycleId, RunId

T0 = 1_767_607_200_000_000_000
START = DrainStart(T0, T0, "default/vllm", "vllm-0001", "live-7", "sleep", 120.0)
STEP = DrainStep(T0 + 200_000_000, T0, "default/vllm", "vllm-0001", "live-7", 2, 0.2)
END = DrainEnd(T0 + 1_050_000_000, T0, "default/vllm", "vllm-0001", "live-7", "drained", "slept", 0, 1.05,
               "sleep level 1")
EVENTS: list[DrainEvent] = [START, STEP, END]


@pytest.mark.parametrize("event", EVENTS, ids=lambda e: e.kind)
def test_a_record_round_trips_through_its_dict_and_through_a_ledger_cycle(event: DrainEvent, tmp_path: Any) -> None:
    d = event.to_dict()
    assert d["v"] == DRAIN_RECORD_VERSION and d["kind"] == event.kind
    assert drain_from_dict(d) == event
    cycle = drain_cycle(event, RunId("live"), fencing_token=4)
    assert cycle.decisions == () and cycle.policy == "actuator" and cycle.fencing_token == 4
    assert drain_of(CycleRecord.from_json(cycle.to_json())) == event
    with SqliteLedger(tmp_path / "l.sqlite") as led:
        assert led.append_cycle(cycle) is True and led.append_cycle(cycle) is False  # idempotent by id
        back = led.get_cycle(cycle.cycle_id)
    assert back is not None and drain_of(back) == event


def test_one_drain_keeps_one_id_and_its_records_distinct_cycle_ids() -> None:
    ids = {drain_cycle(e, RunId("live")).cycle_id for e in EVENTS}
    assert len(ids) == 3 and all(i.startswith(f"live-drain-vllm-0001-{T0}-") for i in ids)
    assert {e.drain_id for e in EVENTS} == {f"vllm-0001@{T0}"}


def test_other_cycles_are_no_drain_and_an_old_ledger_reads_unchanged() -> None:
    outcome = CycleRecord(CycleId("live-c7-outcome"), RunId("live"), T0, "actuator", (),
                          {"outcome_of": "live-7", "note": "applied"})
    assert drain_of(outcome) is None
    led = MemoryLedger()
    led.append_cycle(outcome)
    led.append_cycle(drain_cycle(START, RunId("live")))
    assert [drain_of(c) for c in led.cycles(RunId("live"))] == [None, START]


@pytest.mark.parametrize(("change", "field"), [
    ({"started_ns": T0 + 1}, "started_ns"), ({"ts_ns": -1}, "ts_ns"), ({"worker": ""}, "worker"),
    ({"reason": "nap"}, "reason"), ({"budget_s": 0.0}, "budget_s"), ({"budget_s": float("nan")}, "budget_s"),
    ({"budget_s": 10**400}, "budget_s"), ({"worker": "\ud800"}, "worker"),
])
def test_a_bad_start_is_refused_naming_its_field(change: dict[str, Any], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        DrainStart(**{**{k: getattr(START, k) for k in START.to_dict() if k not in ("v", "kind")}, **change})


@pytest.mark.parametrize(("event", "change", "field"), [
    (STEP, {"inflight": -1}, "inflight"), (STEP, {"inflight": True}, "inflight"), (STEP, {"elapsed_s": -0.1}, "elapsed_s"),
    (STEP, {"started_ns": T0 + 10**9}, "started_ns"), (END, {"outcome": "lost"}, "outcome"),
    (END, {"then": "deleted"}, "then"), (END, {"note": "x" * 501}, "note"),
])
def test_a_bad_step_or_end_is_refused_naming_its_field(event: DrainEvent, change: dict[str, Any], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        type(event)(**{**{k: v for k, v in event.to_dict().items() if k not in ("v", "kind")}, **change})


def test_a_newer_version_is_refused_by_name_and_a_missing_later_field_takes_its_default() -> None:
    with pytest.raises(InputError, match="version 2 is newer"):
        drain_from_dict({**END.to_dict(), "v": 2}, where="ledger.sqlite cycle x")
    older = {k: v for k, v in END.to_dict().items() if k != "note"}  # a field this version added later
    assert drain_from_dict(older) == DrainEnd(**{**{k: v for k, v in older.items() if k not in ("v", "kind")}, "note": ""})
    for bad in ({**STEP.to_dict(), "kind": "pause"}, {**STEP.to_dict(), "v": None}, [1], "x",
                {k: v for k, v in STEP.to_dict().items() if k != "worker"}):
        with pytest.raises(InputError, match="malformed drain record"):
            drain_from_dict(bad)


def test_a_malformed_drain_cycle_raises_input_error_naming_the_cycle() -> None:
    bad = CycleRecord(CycleId("live-drain-x"), RunId("live"), T0, "actuator", (), {"drain": {"v": 1, "kind": "end"}})
    with pytest.raises(InputError, match="live-drain-x"):
        drain_of(bad)
