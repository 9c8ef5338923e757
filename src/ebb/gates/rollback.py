"""Rollback channel, pure part (SPEC §3.5): scale events in a causal graph and the order to undo them.

Every scale-down is a :class:`ScaleEvent` (id, target, pre-state, reason, config snapshot pointer)
with ``caused_by`` edges to the events that triggered it. :class:`EventGraph` checks that the edges
form a DAG; :func:`compensation_order` lists the events to undo for a set of roots — the roots and
everything caused by them, transitively — children before parents, ties broken by ``event_id`` so the
order is deterministic. :func:`plan_compensation` turns that into :class:`CompensationStep` s
("set ``target`` back to ``restore_replicas``").

:func:`scale_events` reads the events out of a run's ledger records — every acted scale-down, with its
pre-state — so the live controller plans from what the ledger says happened, and :func:`restored`
says where each target ends once a plan ran (the live rollback channel's proposal).

Pure: no I/O, no clocks. Applying the steps idempotently, the time budget and the manual review queue
live in :mod:`ebb.ledger.review`; the live controller executes them through its actuator
(:mod:`ebb.live.compensation`).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from ebb.model.decisions import JSON, CycleRecord, DecisionRecord

__all__ = ["ScaleEvent", "EventGraph", "CompensationStep", "COMPENSATES", "compensation_order",
           "plan_compensation", "restored", "scale_events"]

COMPENSATES = "compensates"
"""The ``plan`` key of a compensation step's ledger decision: the event id it undoes. Such a decision
is never itself an event (undoing an undo is the policy's business, not the rollback channel's)."""


@dataclass(frozen=True, slots=True)
class ScaleEvent:
    """One applied scale change and what is needed to undo it.

    ``pre_replicas``/``pre_util_ratio``: the target's state before the change; ``post_replicas``: after.
    ``config_snapshot_ref``: pointer to the config snapshot to restore. ``caused_by``: parent event ids.
    """

    event_id: str
    target: str
    pre_replicas: int
    post_replicas: int
    pre_util_ratio: float
    reason: str
    config_snapshot_ref: str
    caused_by: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.event_id:
            raise ValueError(f"event_id must be non-empty, got {self.event_id!r}")
        if not self.target:
            raise ValueError(f"event {self.event_id!r}: target must be non-empty, got {self.target!r}")
        for name in ("pre_replicas", "post_replicas"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"event {self.event_id!r}: {name} must be an integer >= 0, got {value!r}")
        if not math.isfinite(self.pre_util_ratio) or self.pre_util_ratio < 0:
            raise ValueError(f"event {self.event_id!r}: pre_util_ratio must be finite and >= 0, "
                             f"got {self.pre_util_ratio!r}")
        if not isinstance(self.caused_by, tuple):
            raise ValueError(f"event {self.event_id!r}: caused_by must be a tuple, got {self.caused_by!r}")
        if self.event_id in self.caused_by:
            raise ValueError(f"event {self.event_id!r} lists itself in caused_by (a cycle of length 1)")


@dataclass(frozen=True, slots=True)
class CompensationStep:
    """Undo one event: set ``target`` back to ``restore_replicas`` (the event's ``pre_replicas``)."""

    event_id: str
    target: str
    restore_replicas: int


class EventGraph:
    """Scale events and their causal edges; must be a DAG whose edges point at known events.

    Raises :class:`ValueError` on a duplicate id, an edge to an unknown event, or a cycle (the message
    names the events on it).
    """

    __slots__ = ("_events", "_children")

    def __init__(self, events: Iterable[ScaleEvent]) -> None:
        by_id: dict[str, ScaleEvent] = {}
        for ev in events:
            if not isinstance(ev, ScaleEvent):
                raise ValueError(f"EventGraph expects ScaleEvent items, got {ev!r}")
            if ev.event_id in by_id:
                raise ValueError(f"duplicate event id {ev.event_id!r}")
            by_id[ev.event_id] = ev
        children: dict[str, list[str]] = {eid: [] for eid in by_id}
        for ev in by_id.values():
            for parent in ev.caused_by:
                if parent not in by_id:
                    raise ValueError(f"event {ev.event_id!r} is caused_by unknown event {parent!r}")
                children[parent].append(ev.event_id)
        self._events: Mapping[str, ScaleEvent] = by_id
        self._children: Mapping[str, tuple[str, ...]] = {k: tuple(sorted(set(v))) for k, v in children.items()}
        self._check_acyclic()

    def _check_acyclic(self) -> None:
        indeg = {eid: len(set(ev.caused_by)) for eid, ev in self._events.items()}
        ready = [eid for eid, d in indeg.items() if d == 0]
        seen = 0
        while ready:
            eid = ready.pop()
            seen += 1
            for child in self._children[eid]:
                indeg[child] -= 1
                if indeg[child] == 0:
                    ready.append(child)
        if seen != len(self._events):
            stuck = sorted(eid for eid, d in indeg.items() if d > 0)
            raise ValueError(f"causal edges form a cycle among events {stuck[:10]}"
                             f"{' ...' if len(stuck) > 10 else ''}")

    def __len__(self) -> int:
        return len(self._events)

    def __contains__(self, event_id: object) -> bool:
        return event_id in self._events

    def event(self, event_id: str) -> ScaleEvent:
        """The event with this id; :class:`KeyError` if unknown."""
        return self._events[event_id]

    def events(self) -> list[ScaleEvent]:
        """All events, ordered by id."""
        return [self._events[k] for k in sorted(self._events)]

    def children(self, event_id: str) -> tuple[str, ...]:
        """Ids of the events directly caused by ``event_id`` (sorted)."""
        return self._children[event_id]

    def closure(self, root_ids: Iterable[str]) -> set[str]:
        """The roots and every event they cause, transitively. Unknown root → :class:`ValueError`."""
        stack = []
        for rid in root_ids:
            if rid not in self._events:
                raise ValueError(f"unknown root event {rid!r}")
            stack.append(rid)
        found: set[str] = set()
        while stack:
            eid = stack.pop()
            if eid in found:
                continue
            found.add(eid)
            stack.extend(self._children[eid])
        return found


def compensation_order(graph: EventGraph, root_ids: Iterable[str]) -> list[ScaleEvent]:
    """Events to undo for ``root_ids``: the roots and their descendants, children before parents.

    A reverse topological order of the causal DAG restricted to that set; among events that are ready
    at the same time the smallest ``event_id`` comes first, so the order is deterministic.
    """
    keep = graph.closure(root_ids)
    pending_children = {eid: sum(1 for c in graph.children(eid) if c in keep) for eid in keep}
    ready = [eid for eid, n in pending_children.items() if n == 0]
    heapq.heapify(ready)
    out: list[ScaleEvent] = []
    while ready:
        eid = heapq.heappop(ready)
        ev = graph.event(eid)
        out.append(ev)
        for parent in set(ev.caused_by):
            if parent in keep:
                pending_children[parent] -= 1
                if pending_children[parent] == 0:
                    heapq.heappush(ready, parent)
    return out


def plan_compensation(graph: EventGraph, root_ids: Iterable[str]) -> list[CompensationStep]:
    """:func:`compensation_order` as steps: each event's target back to its ``pre_replicas``."""
    return [CompensationStep(ev.event_id, ev.target, ev.pre_replicas)
            for ev in compensation_order(graph, root_ids)]


def restored(steps: Sequence[CompensationStep]) -> dict[str, int]:
    """Where each target ends once ``steps`` ran in order: its last step's ``restore_replicas`` (the
    pre-state of the oldest event undone on it). The live rollback channel proposes its scale-up
    with it (:meth:`ebb.live.compensation.CompensationPlan.restored`)."""
    return {st.target: st.restore_replicas for st in steps}


def scale_events(cycles: Iterable[CycleRecord]) -> list[ScaleEvent]:
    """Every acted scale-down among ``cycles`` (a run's ledger cycles, outcome cycles included) as a
    :class:`ScaleEvent`, in ledger order.

    A scale-down is an event when its outcome cycle (``snapshot.outcome_of`` = its id) shows the fleet
    below ``from``: the actuator applied it (``applied``, or ``replicas_after`` equal to its ``to``: found
    applied by a successor), or a resume found it applied (note ``found applied ...``). A decision
    without an outcome (recommend mode, a refused write, a crash before the outcome), one superseded by
    another writer, a veto and a compensation step (``plan.compensates``) are not events. Fields:
    ``event_id`` = decision id; ``pre_replicas`` = ``from``; ``post_replicas`` = the replicas after;
    ``pre_util_ratio`` = ``need_replicas`` / ``from`` when recorded, else 0; ``reason`` = its reasons;
    ``config_snapshot_ref`` = its cycle id (the cycle's snapshot holds the fleet it saw);
    ``caused_by`` = its recorded causes that are events too (edges to anything else are dropped)."""
    cycles = list(cycles)
    outcomes = {str(c.snapshot["outcome_of"]): c.snapshot for c in cycles if "outcome_of" in c.snapshot}
    found: list[tuple[DecisionRecord, int]] = []
    for c in cycles:
        for d in c.decisions:
            out = outcomes.get(d.decision_id)
            if d.action != "scale_down" or COMPENSATES in d.plan or out is None:
                continue
            post = _reached(d, out)
            if post is not None and post < d.from_replicas:
                found.append((d, post))
    ids = {d.decision_id for d, _ in found}
    return [ScaleEvent(d.decision_id, d.target, d.from_replicas, post, _util(d), "; ".join(d.reasons),
                       d.cycle_id, tuple(dict.fromkeys(p for p in d.caused_by if p in ids and p != d.decision_id)))
            for d, post in found]


def _reached(d: DecisionRecord, out: Mapping[str, JSON]) -> int | None:
    """The replicas a scale-down's outcome shows after it; None when it did not take effect."""
    after = out.get("replicas_after")
    if isinstance(after, int) and not isinstance(after, bool):
        return after if out.get("applied") is True or after == d.to_replicas else None
    note = out.get("note")
    return d.to_replicas if isinstance(note, str) and note.startswith("found applied") else None


def _util(d: DecisionRecord) -> float:
    need = d.signals.get("need_replicas")
    if need is None or d.from_replicas <= 0 or not math.isfinite(need) or need < 0:
        return 0.0
    return need / d.from_replicas
