"""Drain records: a victim's way out of routing, as the decision ledger keeps it (issue #33, item 6).

Before a replica sleeps or goes, it leaves routing and drains: the actuator waits until its in-flight
work reads zero or its drain budget runs out. Each drain leaves three kinds of record, one frozen
dataclass each, all carrying ``ts_ns`` (Unix ns of the event), ``started_ns`` (Unix ns the drain
began: with ``worker``, the drain's identity, :attr:`DrainStart.drain_id`), ``target``, ``worker``
(the pod or worker name) and ``decision_id`` (the scale-down that chose it; ``""`` when unknown):

* :class:`DrainStart` — ``reason`` (``sleep``: it sleeps if its drain ends with room in the tier;
  ``release``: it goes) and ``budget_s``.
* :class:`DrainStep` — ``inflight`` at one read while draining (requests running + waiting; ``None``:
  the count could not be read, which the actuators take as work in flight) and ``elapsed_s`` since
  the start. The actuators record a bounded number of steps (:mod:`ebb.actuate.drain_report`).
* :class:`DrainEnd` — ``outcome`` (``drained``: in-flight read zero; ``budget``: the budget ran out
  with work in flight or unread; ``vanished``: the pod or process was gone before either), ``then``
  (``slept``; ``released``: Kubernetes deletion cost + ``/scale`` − 1, local SIGTERM; ``gone``:
  nothing left to act on), the last ``inflight`` read, ``elapsed_s`` and a free-text ``note``.

Guarantees:

* Records are validated on construction (:class:`ValueError` naming the field): times are integers in
  ``[0, 2**63)`` with ``started_ns <= ts_ns`` (``==`` for a start); ``elapsed_s`` and ``budget_s`` are
  finite, ``elapsed_s >= 0`` and ``budget_s > 0``; ``inflight`` is ``None`` or an integer ``>= 0``;
  the literals are one of theirs; every string is valid Unicode, ``worker`` and ``target`` non-empty,
  ``note`` at most :data:`NOTE_MAX` (500) characters.
* ``drain_from_dict(event.to_dict()) == event``. The dict carries ``"v": 1``
  (:data:`DRAIN_RECORD_VERSION`) and ``"kind"``; fields added later get defaults, so this reader keeps
  reading older records, and a record of a newer version is refused by name, never misread.
* **Decoding stored rows never crashes:** :func:`drain_from_dict` and :func:`drain_of` return a valid
  record (or ``None``: the cycle is no drain) or raise :class:`~ebb.errors.InputError` naming the row,
  what is wrong and the fix — never another exception (``tests/fuzz/test_fuzz_ledger_rows.py``).
* **In the ledger** a record is one cycle (:func:`drain_cycle`), as outcomes are: no decisions, policy
  ``actuator``, ``snapshot = {"drain": record}``, id ``<run_id>-drain-<worker>-<started_ns>-<kind>``
  (a step's id ends ``-step-<ts_ns>``). So a drain record is atomic, fenced, idempotent and skipped
  when malformed exactly as every cycle is, and a ledger written before drains existed reads unchanged
  (no schema change).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any, ClassVar, Final, Literal, TypeAlias, get_args

from ebb.errors import InputError
from ebb.model.decisions import JSON, ROW_FIX, CycleRecord
from ebb.model.ids import CycleId, RunId
from ebb.untrusted import checked_int

__all__ = ["DRAIN_KEY", "DRAIN_RECORD_VERSION", "NOTE_MAX", "DrainEnd", "DrainEvent", "DrainObserver", "DrainOutcome",
           "DrainReason", "DrainStart", "DrainStep", "DrainThen", "drain_cycle", "drain_from_dict", "drain_of"]

DrainReason = Literal["sleep", "release"]
DrainOutcome = Literal["drained", "budget", "vanished"]
DrainThen = Literal["slept", "released", "gone"]
DRAIN_RECORD_VERSION: Final = 1
DRAIN_KEY: Final = "drain"
"""The snapshot key of a drain cycle."""
NOTE_MAX: Final = 500
_INT64_MAX: Final = 2**63 - 1


def _check(ok: bool, what: str, value: object) -> None:
    if not ok:
        raise ValueError(f"{what}, got {value!r:.80}")


def _text(name: str, value: object, *, empty: bool = False, limit: int = 253 * 4) -> None:
    _check(isinstance(value, str) and (empty or bool(value)) and len(value) <= limit,
           f"{name} must be a{'' if empty else ' non-empty'} string of at most {limit} characters", value)
    try:
        str(value).encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"{name} holds text that is not valid Unicode") from None


def _time(name: str, value: object) -> None:
    _check(not isinstance(value, bool) and isinstance(value, int) and 0 <= value <= _INT64_MAX,
           f"{name} must be an integer in [0, 2**63 - 1]", value)


def _seconds(name: str, value: object, *, positive: bool) -> None:
    ok = not isinstance(value, bool) and isinstance(value, (int, float)) and abs(value) < 1e18 \
        and (value > 0 if positive else value >= 0)  # NaN fails every comparison; no float() of a huge int
    _check(ok, f"{name} must be a finite number {'>' if positive else '>='} 0 (below 1e18)", value)


@dataclass(frozen=True)
class _Drain:
    ts_ns: int
    started_ns: int
    target: str
    worker: str
    decision_id: str

    kind: ClassVar[str] = ""

    def __post_init__(self) -> None:
        _time("ts_ns", self.ts_ns)
        _time("started_ns", self.started_ns)
        _check(self.started_ns <= self.ts_ns, f"started_ns must be <= ts_ns ({self.ts_ns})", self.started_ns)
        _text("target", self.target)
        _text("worker", self.worker)
        _text("decision_id", self.decision_id, empty=True)

    @property
    def drain_id(self) -> str:
        """``<worker>@<started_ns>``: the same for every record of one drain."""
        return f"{self.worker}@{self.started_ns}"

    def to_dict(self) -> dict[str, JSON]:
        """Plain JSON-ready dict with ``v`` and ``kind``; :func:`drain_from_dict` inverts it exactly."""
        out: dict[str, JSON] = {"v": DRAIN_RECORD_VERSION, "kind": self.kind}
        out.update({f.name: getattr(self, f.name) for f in fields(self)})
        return out


@dataclass(frozen=True)
class DrainStart(_Drain):
    """A victim left routing and began to drain (module docstring)."""

    reason: DrainReason = "release"
    budget_s: float = 120.0

    kind: ClassVar[str] = "start"

    def __post_init__(self) -> None:
        super().__post_init__()
        _check(self.started_ns == self.ts_ns, f"a start's started_ns must equal its ts_ns ({self.ts_ns})",
               self.started_ns)
        _check(self.reason in get_args(DrainReason), f"reason must be one of {get_args(DrainReason)}", self.reason)
        _seconds("budget_s", self.budget_s, positive=True)
        object.__setattr__(self, "budget_s", float(self.budget_s))


def _inflight(value: object) -> None:
    _check(value is None or (not isinstance(value, bool) and isinstance(value, int) and 0 <= value <= _INT64_MAX),
           "inflight must be null or an integer in [0, 2**63 - 1]", value)


@dataclass(frozen=True)
class DrainStep(_Drain):
    """One read of a draining victim's in-flight work (module docstring)."""

    inflight: int | None = None
    elapsed_s: float = 0.0

    kind: ClassVar[str] = "step"

    def __post_init__(self) -> None:
        super().__post_init__()
        _inflight(self.inflight)
        _seconds("elapsed_s", self.elapsed_s, positive=False)
        object.__setattr__(self, "elapsed_s", float(self.elapsed_s))


@dataclass(frozen=True)
class DrainEnd(_Drain):
    """How a drain ended and what became of its victim (module docstring)."""

    outcome: DrainOutcome = "drained"
    then: DrainThen = "released"
    inflight: int | None = None
    elapsed_s: float = 0.0
    note: str = ""

    kind: ClassVar[str] = "end"

    def __post_init__(self) -> None:
        super().__post_init__()
        _check(self.outcome in get_args(DrainOutcome), f"outcome must be one of {get_args(DrainOutcome)}",
               self.outcome)
        _check(self.then in get_args(DrainThen), f"then must be one of {get_args(DrainThen)}", self.then)
        _inflight(self.inflight)
        _seconds("elapsed_s", self.elapsed_s, positive=False)
        _text("note", self.note, empty=True, limit=NOTE_MAX)
        object.__setattr__(self, "elapsed_s", float(self.elapsed_s))


DrainEvent: TypeAlias = DrainStart | DrainStep | DrainEnd
DrainObserver: TypeAlias = Callable[[DrainEvent], None]
"""What an actuator calls with each drain record (``ReportsDrains.observe_drains``); must not block."""
_KINDS: Final[dict[str, type[DrainStart] | type[DrainStep] | type[DrainEnd]]] = {
    "start": DrainStart, "step": DrainStep, "end": DrainEnd}
_INTS: Final = frozenset({"ts_ns", "started_ns", "inflight"})


def _decode(data: object) -> DrainEvent:
    if not isinstance(data, Mapping):
        raise ValueError(f"a drain record must be a JSON object, got {type(data).__name__}")
    v = checked_int(data.get("v"), "drain.v", lo=1, hi=_INT64_MAX)
    if v > DRAIN_RECORD_VERSION:
        raise ValueError(f"drain record version {v} is newer than this ebb reads ({DRAIN_RECORD_VERSION})")
    kind = data.get("kind")
    cls = _KINDS.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise ValueError(f"drain.kind must be one of {', '.join(_KINDS)}, got {data.get('kind')!r:.40}")
    args: dict[str, Any] = {}
    for f in fields(cls):
        if f.name not in data:
            if f.name in ("ts_ns", "started_ns", "target", "worker", "decision_id"):
                raise ValueError(f"missing field drain.{f.name}")
            continue  # a field added after the record was written: its default
        value = data[f.name]
        if f.name in _INTS and value is not None:
            value = checked_int(value, f"drain.{f.name}", lo=0, hi=_INT64_MAX)
        args[f.name] = value
    event: DrainEvent = cls(**args)
    return event


def drain_from_dict(data: object, *, where: str | None = None, fix: str | None = None) -> DrainEvent:
    """The record in ``data`` (:meth:`_Drain.to_dict`'s output); any bad input raises
    :class:`~ebb.errors.InputError` naming ``where`` (the row), the field and ``fix`` (default :data:`ROW_FIX`)."""
    try:
        return _decode(data)
    except (ValueError, TypeError, RecursionError) as exc:
        raise InputError(f"malformed drain record: {exc}", path=where,
                         fix=fix or f"{ROW_FIX}; a newer ebb reads newer drain records") from exc


def drain_cycle(event: DrainEvent, run_id: RunId, *, fencing_token: int = 0) -> CycleRecord:
    """The ledger cycle holding ``event`` (module docstring: id, policy, snapshot)."""
    tail = f"step-{event.ts_ns}" if isinstance(event, DrainStep) else event.kind
    return CycleRecord(cycle_id=CycleId(f"{run_id}-drain-{event.worker}-{event.started_ns}-{tail}"), run_id=run_id,
                       ts_ns=event.ts_ns, policy="actuator", decisions=(), snapshot={DRAIN_KEY: event.to_dict()},
                       fencing_token=fencing_token)


def drain_of(cycle: CycleRecord, *, where: str | None = None) -> DrainEvent | None:
    """The drain record a ledger cycle holds; None for any other cycle (no decisions and a ``drain``
    snapshot key make a drain cycle); :class:`~ebb.errors.InputError` for a malformed one."""
    if cycle.decisions or DRAIN_KEY not in cycle.snapshot:
        return None
    return drain_from_dict(cycle.snapshot[DRAIN_KEY], where=where or f"cycle {cycle.cycle_id!r}")
