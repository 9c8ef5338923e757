"""The drains in a ledger, as ``ebb explain`` shows them: with the decision that chose the victim, or listed.

A drain's records (:mod:`ebb.model.drains`: start, in-flight steps, end) are grouped by drain
(``worker`` and start time) and shown as one block, times relative to the start::

    worker-3  drain from 2026-01-05T10:00:00.120000000Z  (decision live-7)  reason sleep, budget 120 s
      +0.20 s   2 in flight
      +1.05 s   end: drained to zero → slept  (sleep level 1)

A drain whose end is not (yet) in the ledger says ``still draining, or its end was not recorded``.
A ledger cycle that claims to be a drain record but does not decode is skipped and named
(:class:`~ebb.ledger.base.MalformedRow`), like every malformed row ``ebb explain`` meets.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from ebb.errors import InputError
from ebb.ledger import Ledger, MalformedRow
from ebb.model.drains import DrainEnd, DrainEvent, DrainStart, DrainStep, drain_of
from ebb.model.ids import RunId

__all__ = ["drain_blocks", "read_drains"]

_OUTCOME = {"drained": "drained to zero", "budget": "drain budget ran out", "vanished": "vanished while draining"}


def read_drains(ledger: Ledger, run_id: RunId | None, skipped: list[MalformedRow]) -> list[DrainEvent]:
    """The drain records of ``run_id`` (every run: None), in ledger order; malformed ones go to ``skipped``."""
    out: list[DrainEvent] = []
    cycles = ledger.cycles(run_id)
    skipped += ledger.skipped
    for c in cycles:
        try:
            event = drain_of(c)
        except InputError as exc:
            skipped.append(MalformedRow("cycle", c.cycle_id, str(exc)))
            continue
        if event is not None:
            out.append(event)
    return out


def _count(n: int | None) -> str:
    return "an unreadable count (taken as work in flight)" if n is None else f"{n} in flight"


def _line(e: DrainEvent) -> str:
    if isinstance(e, DrainStep):
        return f"{_count(e.inflight)}"
    assert isinstance(e, DrainEnd)
    last = "" if e.outcome == "drained" or e.inflight is None else f" with {e.inflight} in flight"
    note = f"  ({e.note})" if e.note else ""
    return f"end: {_OUTCOME[e.outcome]}{last} → {e.then}{note}"


def drain_blocks(events: Iterable[DrainEvent], time_of: Callable[[int], str]) -> list[str]:
    """Each drain among ``events`` as a block of lines (module docstring), in order of first record."""
    drains: dict[str, list[DrainEvent]] = {}
    for e in events:
        drains.setdefault(e.drain_id, []).append(e)
    lines: list[str] = []
    for recs in drains.values():
        first = recs[0]
        start = next((r for r in recs if isinstance(r, DrainStart)), None)
        why = (f"  reason {start.reason}, budget {start.budget_s:g} s" if start is not None
               else "  (its start was not recorded)")
        decision = f"  (decision {first.decision_id})" if first.decision_id else ""
        lines.append(f"{first.worker}  drain from {time_of(first.started_ns)}{decision}{why}")
        for r in recs:
            if not isinstance(r, DrainStart):
                lines.append(f"  +{r.elapsed_s:.2f} s   {_line(r)}")
        if not any(isinstance(r, DrainEnd) for r in recs):
            lines.append("  still draining, or its end was not recorded")
    return lines
