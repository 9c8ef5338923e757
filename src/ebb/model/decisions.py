"""Records of the decision ledger: one :class:`CycleRecord` per control-loop pass, holding its decisions.

Guarantees:

* Records are frozen and validated on construction (:class:`ValueError` quoting the bad value):
  ids are non-empty strings; ``ts_ns``, replica counts and ``fencing_token`` are integers in
  ``[0, 2**63)``; ``action`` is one of :data:`ACTIONS`; signal and weight values are finite numbers (stored as ``float``), and ``plan``
  and ``snapshot`` are JSON values (``str`` keys, finite numbers; tuples become lists).
* A cycle's decisions carry the cycle's ``cycle_id`` and ``run_id`` and have distinct ids.
* ``Record.from_json(record.to_json()) == record`` for every valid record; ``to_json`` is canonical
  (sorted keys, no whitespace), so equal records serialise to equal text.
* **Decoding stored rows never crashes.** ``from_json`` / ``from_dict`` read text Ebb may not have
  written (a damaged or forged ledger row): whatever the input, they return a valid record or raise
  :class:`~ebb.errors.InputError` — never another exception. JSON is parsed by
  :func:`ebb.untrusted.loads_json` (at most 64 levels deep, 64 MiB); integers are range-checked by
  :func:`ebb.untrusted.checked_int` (ids and counts in ``[0, 2**63 - 1]``); ``action`` must be one of
  :data:`ACTIONS`; every string must be encodable as UTF-8 (no lone surrogates). The error names the
  row (``where``, given by the ledger: its location and the row's key), what is wrong, and the fix.

Units live in field names: ``ts_ns`` is nanoseconds since the Unix epoch; signal names carry
their own unit (``p99_ttft_ms``, ``util``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final, Literal, TypeAlias, cast, get_args

from ebb.errors import InputError
from ebb.model.ids import CycleId, DecisionId, RunId
from ebb.untrusted import checked_int, loads_json

__all__ = [
    "JSON",
    "Action",
    "ACTIONS",
    "DecisionRecord",
    "CycleRecord",
    "ROW_FIX",
]

JSON: TypeAlias = "None | bool | int | float | str | list[JSON] | dict[str, JSON]"
"""A JSON value as Python holds it after :func:`json.loads`."""

Action = Literal["scale_down", "scale_up", "hold", "veto"]
ACTIONS: Final[tuple[str, ...]] = get_args(Action)


def _check_id(name: str, value: object) -> None:
    if not isinstance(value, str) or not value:
        raise ValueError(f"{name} must be a non-empty string, got {value!r}")


_INT64_MAX: Final = 2**63 - 1

ROW_FIX: Final = ("ebb never rewrites a recorded row: restore the ledger from a backup, or remove this one row "
                  "(the others stay readable)")
"""Default fix of a malformed stored row; each ledger passes a more specific one."""


def _check_nonneg_int(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= _INT64_MAX:
        raise ValueError(f"{name} must be an integer in [0, 2**63 - 1], got {value!r}")


def _str_tuple(name: str, value: object) -> tuple[str, ...]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise ValueError(f"{name} must be a sequence of strings, got {_brief(value)}")
    for i, item in enumerate(value):
        if not isinstance(item, str):
            raise ValueError(f"{name} must hold strings only, got {_brief(item)} at [{i}]")
    return tuple(value)


def _float_map(name: str, value: object) -> Mapping[str, float]:
    if not isinstance(value, Mapping):
        raise ValueError(f"{name} must be a mapping of name to number, got {value!r}")
    out: dict[str, float] = {}
    for k, v in value.items():
        if not isinstance(k, str):
            raise ValueError(f"{name} keys must be strings, got {k!r}")
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise ValueError(f"{name}[{k!r}] must be a finite number, got {v!r:.60}")
        try:
            f = float(v)
        except OverflowError:  # an int past the float range
            raise ValueError(f"{name}[{k!r}] must be a finite number, got an integer of "
                             f"{int(v).bit_length()} bits") from None
        if not math.isfinite(f):
            raise ValueError(f"{name}[{k!r}] must be a finite number, got {v!r}")
        out[k] = f
    return MappingProxyType(out)


def _json_value(where: str, value: object) -> JSON:
    """A deep copy of ``value`` as plain JSON (lists, str-keyed dicts); ValueError otherwise."""
    if value is None or isinstance(value, (bool, str, int)):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{where} must be a finite number, got {value!r}")
        return value
    if isinstance(value, Mapping):
        out: dict[str, JSON] = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise ValueError(f"{where} keys must be strings, got {k!r}")
            out[k] = _json_value(f"{where}[{k!r}]", v)
        return out
    if isinstance(value, (list, tuple)):
        return [_json_value(f"{where}[{i}]", v) for i, v in enumerate(value)]
    raise ValueError(f"{where} is not a JSON value: {value!r}")


def _json_map(name: str, value: object) -> Mapping[str, JSON]:
    if not isinstance(value, Mapping):
        raise ValueError(f"{name} must be a JSON object (mapping), got {value!r}")
    return MappingProxyType(cast(dict[str, JSON], _json_value(name, value)))


def _plain(value: object) -> JSON:
    """Mapping proxies and tuples back to plain dicts and lists, for serialisation."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return cast(JSON, value)


def _loads_object(kind: str, text: object) -> dict[str, Any]:
    """The JSON object in ``text`` (depth- and size-capped); ValueError quoting its start otherwise."""
    if not isinstance(text, (str, bytes)):
        raise ValueError(f"expected JSON text for a {kind}, got {type(text).__name__}")
    try:
        data = loads_json(text)
    except (ValueError, RecursionError) as exc:
        raise ValueError(f"not valid JSON ({exc}): {text[:80]!r}") from exc
    if not isinstance(data, dict):
        raise ValueError(f"expected a JSON object for a {kind}, got {type(data).__name__} {_brief(data)}")
    return data


def _brief(value: object) -> str:
    """``repr`` cut to 80 characters (hostile values can be huge)."""
    try:
        text = repr(value)
    except (ValueError, RecursionError):  # ints past Python's str-conversion limit, deep values
        return f"<{type(value).__name__}>"
    return text if len(text) <= 80 else text[:77] + "..."


def _field(kind: str, data: Mapping[str, Any], key: str) -> Any:
    try:
        return data[key]
    except KeyError:
        raise ValueError(f"missing field {kind}.{key} (fields: {_brief(sorted(str(k) for k in data))})") from None


def _count(kind: str, data: Mapping[str, Any], key: str) -> int:
    """An integer field in ``[0, 2**63 - 1]`` (whole floats such as ``3.0`` are taken as ints)."""
    return checked_int(_field(kind, data, key), f"{kind}.{key}", lo=0, hi=_INT64_MAX)


def _text_field(kind: str, data: Mapping[str, Any], key: str) -> str:
    value = _field(kind, data, key)
    if not isinstance(value, str):
        raise ValueError(f"{kind}.{key} must be a string, got {type(value).__name__} {_brief(value)}")
    return value


def _list_field(kind: str, data: Mapping[str, Any], key: str) -> list[Any]:
    value = _field(kind, data, key)
    if not isinstance(value, list):
        raise ValueError(f"{kind}.{key} must be a JSON list, got {type(value).__name__} {_brief(value)}")
    return value


def _object_field(kind: str, data: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = _field(kind, data, key)
    if not isinstance(value, Mapping):
        raise ValueError(f"{kind}.{key} must be a JSON object, got {type(value).__name__} {_brief(value)}")
    return value


def _row_id(data: object, key: str) -> str:
    """The row's own id for the error message, when it has a readable one."""
    if isinstance(data, Mapping):
        value = data.get(key)
        if isinstance(value, str) and value:
            return f" {_brief(value)}"
    return ""


def _malformed(kind: str, ident: str, exc: BaseException, where: str | None, fix: str | None) -> InputError:
    return InputError(f"malformed {kind}{ident}: {exc}", path=where, fix=fix or ROW_FIX)


def _unicode_ok(*values: object) -> None:
    """ValueError unless every string in ``values`` (walked through lists, tuples and mappings, keys
    included) is valid Unicode: JSON's ``\\ud800`` escapes decode to lone surrogates, which no UTF-8
    writer (SQLite, etcd, a terminal) accepts. ASCII strings cost one C-level check each."""
    stack: list[object] = list(values)
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            if not v.isascii():
                try:
                    v.encode("utf-8")
                except UnicodeEncodeError as exc:
                    raise ValueError(f"holds text that is not valid Unicode ({exc.reason}): {v[:40]!r}") from None
        elif isinstance(v, Mapping):
            stack.extend(v.keys())
            stack.extend(v.values())
        elif isinstance(v, (list, tuple)):
            stack.extend(v)


def _encodable(record: DecisionRecord | CycleRecord) -> None:
    """ValueError unless every string of ``record`` is valid Unicode (a cycle's decisions are checked
    when they are decoded, so only the cycle's own fields are walked here)."""
    if isinstance(record, DecisionRecord):
        _unicode_ok(record.decision_id, record.cycle_id, record.run_id, record.target, record.reasons,
                    record.signals, record.weights, record.vetoes, record.victims, record.plan, record.caused_by)
    else:
        _unicode_ok(record.cycle_id, record.run_id, record.policy, record.snapshot)


def _dumps(obj: JSON) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=False, ensure_ascii=False)


@dataclass(frozen=True)
class DecisionRecord:
    """One decision about one workload in one cycle, with everything needed to explain it.

    ``signals`` are the inputs the policy saw (``p99_ttft_ms``, ``inflight_p99``, ``util``, ...);
    ``weights`` how it weighed them; ``vetoes`` the gates that blocked or shrank the step;
    ``victims`` the replicas chosen for removal; ``plan`` the free-form execution plan;
    ``caused_by`` the decisions this one follows from (causal edges of the event graph).
    """

    decision_id: DecisionId
    cycle_id: CycleId
    run_id: RunId
    ts_ns: int
    target: str
    action: Action
    from_replicas: int
    to_replicas: int
    reasons: tuple[str, ...] = ()
    signals: Mapping[str, float] = field(default_factory=dict, hash=False)
    weights: Mapping[str, float] = field(default_factory=dict, hash=False)
    vetoes: tuple[str, ...] = ()
    victims: tuple[str, ...] = ()
    plan: Mapping[str, JSON] = field(default_factory=dict, hash=False)
    caused_by: tuple[DecisionId, ...] = ()

    def __post_init__(self) -> None:
        for name in ("decision_id", "cycle_id", "run_id", "target"):
            _check_id(name, getattr(self, name))
        for name in ("ts_ns", "from_replicas", "to_replicas"):
            _check_nonneg_int(name, getattr(self, name))
        if self.action not in ACTIONS:
            raise ValueError(f"action must be one of {ACTIONS}, got {self.action!r}")
        s = object.__setattr__
        for name in ("reasons", "vetoes", "victims", "caused_by"):
            s(self, name, _str_tuple(name, getattr(self, name)))
        for i in self.caused_by:
            _check_id("caused_by entry", i)
        if self.decision_id in self.caused_by:
            raise ValueError(f"decision {self.decision_id!r} cannot be caused by itself")
        s(self, "signals", _float_map("signals", self.signals))
        s(self, "weights", _float_map("weights", self.weights))
        s(self, "plan", _json_map("plan", self.plan))

    def to_dict(self) -> dict[str, JSON]:
        """Plain JSON-ready dict (tuples as lists, mappings as dicts)."""
        return {
            "decision_id": self.decision_id,
            "cycle_id": self.cycle_id,
            "run_id": self.run_id,
            "ts_ns": self.ts_ns,
            "target": self.target,
            "action": self.action,
            "from_replicas": self.from_replicas,
            "to_replicas": self.to_replicas,
            "reasons": _plain(self.reasons),
            "signals": _plain(self.signals),
            "weights": _plain(self.weights),
            "vetoes": _plain(self.vetoes),
            "victims": _plain(self.victims),
            "plan": _plain(self.plan),
            "caused_by": _plain(self.caused_by),
        }

    def to_json(self) -> str:
        """Canonical JSON text (sorted keys, compact); ``from_json`` inverts it exactly."""
        return _dumps(self.to_dict())

    @classmethod
    def _decode(cls, data: object) -> DecisionRecord:
        """The record in ``data`` (a parsed JSON object); ValueError naming the bad field."""
        k = "decision"
        if not isinstance(data, Mapping):
            raise ValueError(f"a decision must be a JSON object, got {type(data).__name__} {_brief(data)}")
        action = _text_field(k, data, "action")
        if action not in ACTIONS:
            raise ValueError(f"{k}.action must be one of {', '.join(ACTIONS)}, got {_brief(action)}")
        record = cls(
            decision_id=DecisionId(_text_field(k, data, "decision_id")),
            cycle_id=CycleId(_text_field(k, data, "cycle_id")),
            run_id=RunId(_text_field(k, data, "run_id")),
            ts_ns=_count(k, data, "ts_ns"),
            target=_text_field(k, data, "target"),
            action=cast(Action, action),
            from_replicas=_count(k, data, "from_replicas"),
            to_replicas=_count(k, data, "to_replicas"),
            reasons=tuple(_list_field(k, data, "reasons")),
            signals=_object_field(k, data, "signals"),
            weights=_object_field(k, data, "weights"),
            vetoes=tuple(_list_field(k, data, "vetoes")),
            victims=tuple(_list_field(k, data, "victims")),
            plan=_object_field(k, data, "plan"),
            caused_by=tuple(_list_field(k, data, "caused_by")),
        )
        _encodable(record)
        return record

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, where: str | None = None,
                  fix: str | None = None) -> DecisionRecord:
        """Inverse of :meth:`to_dict`. Any bad input raises :class:`~ebb.errors.InputError` naming
        ``where`` (the row: ledger location and key), the field, and ``fix`` (default :data:`ROW_FIX`)."""
        try:
            return cls._decode(data)
        except (ValueError, RecursionError) as exc:
            raise _malformed("decision", _row_id(data, "decision_id"), exc, where, fix) from exc

    @classmethod
    def from_json(cls, text: str | bytes, *, where: str | None = None, fix: str | None = None) -> DecisionRecord:
        """Parse :meth:`to_json` output; any bad text raises :class:`~ebb.errors.InputError` (see
        :meth:`from_dict`)."""
        try:
            data = _loads_object("decision", text)
        except ValueError as exc:
            raise _malformed("decision", "", exc, where, fix) from exc
        return cls.from_dict(data, where=where, fix=fix)


@dataclass(frozen=True)
class CycleRecord:
    """One pass of the control loop: when, under which policy, what it decided, and the state it saw.

    ``snapshot`` is the state snapshot taken for the cycle (e.g. ``{"replicas": {"chat": 4}}``);
    ``fencing_token`` is the leader-lock epoch of the writer (0 when there is no lock).
    """

    cycle_id: CycleId
    run_id: RunId
    ts_ns: int
    policy: str
    decisions: tuple[DecisionRecord, ...] = ()
    snapshot: Mapping[str, JSON] = field(default_factory=dict, hash=False)
    fencing_token: int = 0

    def __post_init__(self) -> None:
        _check_id("cycle_id", self.cycle_id)
        _check_id("run_id", self.run_id)
        _check_nonneg_int("ts_ns", self.ts_ns)
        _check_nonneg_int("fencing_token", self.fencing_token)
        if not isinstance(self.policy, str):
            raise ValueError(f"policy must be a string, got {self.policy!r}")
        if isinstance(self.decisions, (str, bytes)) or not isinstance(self.decisions, Sequence):
            raise ValueError(f"decisions must be a sequence of DecisionRecord, got {self.decisions!r}")
        decisions = tuple(self.decisions)
        seen: set[str] = set()
        for d in decisions:
            if not isinstance(d, DecisionRecord):
                raise ValueError(f"decisions must hold DecisionRecord only, got {d!r}")
            if d.cycle_id != self.cycle_id or d.run_id != self.run_id:
                raise ValueError(
                    f"decision {d.decision_id!r} has cycle_id={d.cycle_id!r} run_id={d.run_id!r}, "
                    f"expected those of its cycle: {self.cycle_id!r} {self.run_id!r}"
                )
            if d.decision_id in seen:
                raise ValueError(f"decision id {d.decision_id!r} appears twice in cycle {self.cycle_id!r}")
            seen.add(d.decision_id)
        object.__setattr__(self, "decisions", decisions)
        object.__setattr__(self, "snapshot", _json_map("snapshot", self.snapshot))

    def to_dict(self) -> dict[str, JSON]:
        """Plain JSON-ready dict; decisions nested in cycle order."""
        return {
            "cycle_id": self.cycle_id,
            "run_id": self.run_id,
            "ts_ns": self.ts_ns,
            "policy": self.policy,
            "decisions": [d.to_dict() for d in self.decisions],
            "snapshot": _plain(self.snapshot),
            "fencing_token": self.fencing_token,
        }

    def to_json(self) -> str:
        """Canonical JSON text; ``from_json`` inverts it exactly."""
        return _dumps(self.to_dict())

    @classmethod
    def _decode(cls, data: object, decisions: Sequence[DecisionRecord] | None = None) -> CycleRecord:
        """The record in ``data``; ``decisions`` replaces ``data["decisions"]`` when given (the SQLite
        path decodes them from their own rows). ValueError naming the bad field."""
        k = "cycle"
        if not isinstance(data, Mapping):
            raise ValueError(f"a cycle must be a JSON object, got {type(data).__name__} {_brief(data)}")
        if decisions is None:
            decoded: list[DecisionRecord] = []
            for i, d in enumerate(_list_field(k, data, "decisions")):
                try:
                    decoded.append(DecisionRecord._decode(d))
                except (ValueError, RecursionError) as exc:
                    raise ValueError(f"decisions[{i}]{_row_id(d, 'decision_id')}: {exc}") from exc
            decisions = decoded
        token = data.get("fencing_token", 0)
        record = cls(
            cycle_id=CycleId(_text_field(k, data, "cycle_id")),
            run_id=RunId(_text_field(k, data, "run_id")),
            ts_ns=_count(k, data, "ts_ns"),
            policy=_text_field(k, data, "policy"),
            decisions=tuple(decisions),
            snapshot=_object_field(k, data, "snapshot"),
            fencing_token=checked_int(token, f"{k}.fencing_token", lo=0, hi=_INT64_MAX),
        )
        _encodable(record)
        return record

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, where: str | None = None, fix: str | None = None,
                  decisions: Sequence[DecisionRecord] | None = None) -> CycleRecord:
        """Inverse of :meth:`to_dict`. Any bad input raises :class:`~ebb.errors.InputError` naming
        ``where``, the field (``decisions[i]`` for a bad decision) and ``fix`` (default :data:`ROW_FIX`).
        ``decisions``, when given, are the cycle's already decoded decisions (``data`` then needs no
        ``decisions`` field)."""
        try:
            return cls._decode(data, decisions)
        except (ValueError, RecursionError) as exc:
            raise _malformed("cycle", _row_id(data, "cycle_id"), exc, where, fix) from exc

    @classmethod
    def from_json(cls, text: str | bytes, *, where: str | None = None, fix: str | None = None) -> CycleRecord:
        """Parse :meth:`to_json` output; any bad text raises :class:`~ebb.errors.InputError` (see
        :meth:`from_dict`)."""
        try:
            data = _loads_object("cycle", text)
        except ValueError as exc:
            raise _malformed("cycle", "", exc, where, fix) from exc
        return cls.from_dict(data, where=where, fix=fix)
