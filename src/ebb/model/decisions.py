"""Records of the decision ledger: one :class:`CycleRecord` per control-loop pass, holding its decisions.

Guarantees:

* Records are frozen and validated on construction (:class:`ValueError` quoting the bad value):
  ids are non-empty strings; ``ts_ns``, replica counts and ``fencing_token`` are integers in
  ``[0, 2**63)``; ``action`` is one of :data:`ACTIONS`; signal and weight values are finite numbers (stored as ``float``), and ``plan``
  and ``snapshot`` are JSON values (``str`` keys, finite numbers; tuples become lists).
* A cycle's decisions carry the cycle's ``cycle_id`` and ``run_id`` and have distinct ids.
* ``Record.from_json(record.to_json()) == record`` for every valid record; ``to_json`` is canonical
  (sorted keys, no whitespace), so equal records serialise to equal text.

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

from ebb.model.ids import CycleId, DecisionId, RunId

__all__ = [
    "JSON",
    "Action",
    "ACTIONS",
    "DecisionRecord",
    "CycleRecord",
]

JSON: TypeAlias = "None | bool | int | float | str | list[JSON] | dict[str, JSON]"
"""A JSON value as Python holds it after :func:`json.loads`."""

Action = Literal["scale_down", "scale_up", "hold", "veto"]
ACTIONS: Final[tuple[str, ...]] = get_args(Action)


def _check_id(name: str, value: object) -> None:
    if not isinstance(value, str) or not value:
        raise ValueError(f"{name} must be a non-empty string, got {value!r}")


_INT64_MAX: Final = 2**63 - 1


def _check_nonneg_int(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= _INT64_MAX:
        raise ValueError(f"{name} must be an integer in [0, 2**63 - 1], got {value!r}")


def _str_tuple(name: str, value: object) -> tuple[str, ...]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise ValueError(f"{name} must be a sequence of strings, got {value!r}")
    for item in value:
        if not isinstance(item, str):
            raise ValueError(f"{name} must hold strings only, got {item!r} in {value!r}")
    return tuple(value)


def _float_map(name: str, value: object) -> Mapping[str, float]:
    if not isinstance(value, Mapping):
        raise ValueError(f"{name} must be a mapping of name to number, got {value!r}")
    out: dict[str, float] = {}
    for k, v in value.items():
        if not isinstance(k, str):
            raise ValueError(f"{name} keys must be strings, got {k!r}")
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise ValueError(f"{name}[{k!r}] must be a finite number, got {v!r}")
        out[k] = float(v)
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


def _loads_object(kind: str, text: str | bytes) -> dict[str, Any]:
    try:
        data = json.loads(text)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f"{kind}: not valid JSON ({exc}): {text[:80]!r}") from exc
    if not isinstance(data, dict):
        raise ValueError(f"{kind}: expected a JSON object, got {data!r}")
    return data


def _field(kind: str, data: Mapping[str, Any], key: str) -> Any:
    try:
        return data[key]
    except KeyError:
        raise ValueError(f"{kind}: missing field {key!r} in {sorted(data)!r}") from None


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
    def from_dict(cls, data: Mapping[str, Any]) -> DecisionRecord:
        """Inverse of :meth:`to_dict`; ValueError names a missing or invalid field."""
        k = "DecisionRecord"
        return cls(
            decision_id=DecisionId(_field(k, data, "decision_id")),
            cycle_id=CycleId(_field(k, data, "cycle_id")),
            run_id=RunId(_field(k, data, "run_id")),
            ts_ns=_field(k, data, "ts_ns"),
            target=_field(k, data, "target"),
            action=_field(k, data, "action"),
            from_replicas=_field(k, data, "from_replicas"),
            to_replicas=_field(k, data, "to_replicas"),
            reasons=_field(k, data, "reasons"),
            signals=_field(k, data, "signals"),
            weights=_field(k, data, "weights"),
            vetoes=_field(k, data, "vetoes"),
            victims=_field(k, data, "victims"),
            plan=_field(k, data, "plan"),
            caused_by=_field(k, data, "caused_by"),
        )

    @classmethod
    def from_json(cls, text: str | bytes) -> DecisionRecord:
        """Parse :meth:`to_json` output; ValueError quotes what is wrong."""
        return cls.from_dict(_loads_object("DecisionRecord", text))


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
    def from_dict(cls, data: Mapping[str, Any]) -> CycleRecord:
        """Inverse of :meth:`to_dict`; ValueError names a missing or invalid field."""
        k = "CycleRecord"
        raw = _field(k, data, "decisions")
        if not isinstance(raw, list):
            raise ValueError(f"{k}: decisions must be a list, got {raw!r}")
        for d in raw:
            if not isinstance(d, Mapping):
                raise ValueError(f"{k}: each decision must be an object, got {d!r}")
        return cls(
            cycle_id=CycleId(_field(k, data, "cycle_id")),
            run_id=RunId(_field(k, data, "run_id")),
            ts_ns=_field(k, data, "ts_ns"),
            policy=_field(k, data, "policy"),
            decisions=tuple(DecisionRecord.from_dict(d) for d in raw),
            snapshot=_field(k, data, "snapshot"),
            fencing_token=data.get("fencing_token", 0),
        )

    @classmethod
    def from_json(cls, text: str | bytes) -> CycleRecord:
        """Parse :meth:`to_json` output; ValueError quotes what is wrong."""
        return cls.from_dict(_loads_object("CycleRecord", text))
