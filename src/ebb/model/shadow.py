"""Shadow minutes: what a fleet ran and what Ebb would have run, second by second, as the ledger keeps it.

A controller in ``recommend`` mode beside a team's own autoscaler (issue #34 item 3) runs Ebb on a
fleet of its own (:mod:`ebb.live.shadow_fleet`) and folds each cycle into the minute it falls in
(:mod:`ebb.live.shadow`). Each minute becomes one :class:`ShadowMinute`:

* ``start_s`` — Unix second the minute starts at (a multiple of 60); slot ``i`` is second ``start_s + i``.
* ``as_run`` — replicas the real fleet ran each second (its ``spec.replicas``), ``None`` where unknown.
* ``ebb`` — replicas Ebb's own fleet held each second after its decision, ``None`` where unknown
  (the controller followed, failed or was not running).
* ``ttft_p99_ms`` — p99 TTFT (ms) of the completions read each second, ``None`` where none finished;
  ``minute_ttft_p99_ms`` the same over the whole minute's completions (not a mean of the seconds'),
  ``completions`` how many there were.
* ``slo_ttft_ms`` and ``policy`` — the TTFT SLO and the policy spec Ebb ran under.

Guarantees:

* Records are validated on construction (:class:`ValueError` naming the field): the three series hold
  exactly :data:`SLOTS` (60) entries; replicas are integers in ``[0, MAX_REPLICAS]``; latencies and
  ``completions`` are finite numbers ``>= 0``; ``slo_ttft_ms > 0``; ``start_s`` is a non-negative
  multiple of 60; ``target`` and ``policy`` are valid Unicode of at most 1,000 characters. A row is
  bounded: about 2 kB of JSON.
* ``shadow_from_dict(minute.to_dict()) == minute``. The dict carries ``"v": 1``
  (:data:`SHADOW_RECORD_VERSION`); a record of a newer version is refused by name, never misread.
* **Decoding stored rows never crashes:** :func:`shadow_from_dict` and :func:`shadow_of` return a valid
  record (or ``None``: the cycle is no shadow minute) or raise :class:`~ebb.errors.InputError` naming
  the row, what is wrong and the fix — never another exception.
* **In the ledger** a minute is one cycle (:func:`shadow_cycle`), as drain records are: no decisions,
  policy ``shadow``, ``snapshot = {"shadow": record}``, id ``<run_id>-shadow-<start_s>-<first slot>``
  (the first slot holding data, so two controllers of one run that each saw part of a minute, one
  after the other, write two rows). Atomic, fenced and idempotent like every cycle; no schema change.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from ebb.errors import InputError
from ebb.model.decisions import JSON, ROW_FIX, CycleRecord
from ebb.model.ids import CycleId, RunId
from ebb.untrusted import checked_int

__all__ = ["MAX_REPLICAS", "SHADOW_KEY", "SHADOW_POLICY", "SHADOW_RECORD_VERSION", "SLOTS", "ShadowMinute",
           "shadow_cycle", "shadow_from_dict", "shadow_of"]

SHADOW_RECORD_VERSION: Final = 1
SHADOW_KEY: Final = "shadow"
"""The snapshot key of a shadow cycle."""
SHADOW_POLICY: Final = "shadow"
"""The ``policy`` field of a shadow cycle."""
SLOTS: Final = 60
"""Seconds per record."""
MAX_REPLICAS: Final = 1_000_000
"""Largest replica count a record holds (far above any fleet; bounds a forged row's arithmetic)."""
_TEXT_MAX: Final = 1000
_MS_MAX: Final = 1e12


def _check(ok: bool, what: str, value: object) -> None:
    if not ok:
        raise ValueError(f"{what}, got {value!r:.80}")


def _text(name: str, value: object) -> None:
    _check(isinstance(value, str) and len(value) <= _TEXT_MAX, f"{name} must be a string of at most "
           f"{_TEXT_MAX} characters", value)
    try:
        str(value).encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"{name} holds text that is not valid Unicode") from None


def _number(name: str, value: object, *, positive: bool = False) -> float:
    ok = not isinstance(value, bool) and isinstance(value, (int, float)) and abs(value) <= _MS_MAX \
        and (value > 0 if positive else value >= 0)  # NaN fails every comparison; no float() of a huge int
    _check(ok, f"{name} must be a finite number {'>' if positive else '>='} 0 (at most 1e12)", value)
    return float(value)  # type: ignore[arg-type]


def _series(name: str, value: object, item: str) -> tuple[Any, ...]:
    _check(isinstance(value, Sequence) and not isinstance(value, (str, bytes)) and len(value) == SLOTS,
           f"{name} must be a list of {SLOTS} entries", value)
    assert isinstance(value, Sequence)
    out: list[Any] = []
    for i, v in enumerate(value):
        if v is None:
            out.append(None)
        elif item == "replicas":
            _check(not isinstance(v, bool) and isinstance(v, int) and 0 <= v <= MAX_REPLICAS,
                   f"{name}[{i}] must be null or an integer in [0, {MAX_REPLICAS}]", v)
            out.append(int(v))
        else:
            out.append(_number(f"{name}[{i}]", v))
    return tuple(out)


@dataclass(frozen=True)
class ShadowMinute:
    """One minute of a shadow run (module docstring)."""

    start_s: int
    target: str
    as_run: tuple[int | None, ...]
    ebb: tuple[int | None, ...]
    ttft_p99_ms: tuple[float | None, ...]
    minute_ttft_p99_ms: float | None
    completions: float
    slo_ttft_ms: float
    policy: str

    def __post_init__(self) -> None:
        _check(not isinstance(self.start_s, bool) and isinstance(self.start_s, int) and 0 <= self.start_s < 2**62
               and self.start_s % SLOTS == 0, "start_s must be a non-negative multiple of 60 (Unix s)", self.start_s)
        _text("target", self.target)
        _text("policy", self.policy)
        object.__setattr__(self, "as_run", _series("as_run", self.as_run, "replicas"))
        object.__setattr__(self, "ebb", _series("ebb", self.ebb, "replicas"))
        object.__setattr__(self, "ttft_p99_ms", _series("ttft_p99_ms", self.ttft_p99_ms, "ms"))
        if self.minute_ttft_p99_ms is not None:
            object.__setattr__(self, "minute_ttft_p99_ms", _number("minute_ttft_p99_ms", self.minute_ttft_p99_ms))
        object.__setattr__(self, "completions", _number("completions", self.completions))
        object.__setattr__(self, "slo_ttft_ms", _number("slo_ttft_ms", self.slo_ttft_ms, positive=True))

    @property
    def first_slot(self) -> int:
        """The first second holding any data (0 when none does)."""
        return next((i for i in range(SLOTS) if self.as_run[i] is not None or self.ebb[i] is not None), 0)

    def to_dict(self) -> dict[str, JSON]:
        """Plain JSON-ready dict with ``v``; :func:`shadow_from_dict` inverts it exactly."""
        return {"v": SHADOW_RECORD_VERSION, "start_s": self.start_s, "target": self.target,
                "as_run": list(self.as_run), "ebb": list(self.ebb), "ttft_p99_ms": list(self.ttft_p99_ms),
                "minute_ttft_p99_ms": self.minute_ttft_p99_ms, "completions": self.completions,
                "slo_ttft_ms": self.slo_ttft_ms, "policy": self.policy}


_FIELDS: Final = ("start_s", "target", "as_run", "ebb", "ttft_p99_ms", "minute_ttft_p99_ms", "completions",
                  "slo_ttft_ms", "policy")


def _decode(data: object) -> ShadowMinute:
    if not isinstance(data, Mapping):
        raise ValueError(f"a shadow record must be a JSON object, got {type(data).__name__}")
    v = checked_int(data.get("v"), "shadow.v", lo=1, hi=2**63 - 1)
    if v > SHADOW_RECORD_VERSION:
        raise ValueError(f"shadow record version {v} is newer than this ebb reads ({SHADOW_RECORD_VERSION})")
    missing = [f for f in _FIELDS if f not in data]
    if missing:
        raise ValueError(f"missing field shadow.{missing[0]}")
    args = {f: data[f] for f in _FIELDS}
    args["start_s"] = checked_int(args["start_s"], "shadow.start_s", lo=0, hi=2**62)
    return ShadowMinute(**args)


def shadow_from_dict(data: object, *, where: str | None = None, fix: str | None = None) -> ShadowMinute:
    """The record in ``data`` (:meth:`ShadowMinute.to_dict`'s output); any bad input raises
    :class:`~ebb.errors.InputError` naming ``where`` (the row), the field and ``fix`` (default :data:`ROW_FIX`)."""
    try:
        return _decode(data)
    except (ValueError, TypeError, RecursionError) as exc:
        raise InputError(f"malformed shadow record: {exc}", path=where,
                         fix=fix or f"{ROW_FIX}; a newer ebb reads newer shadow records") from exc


def shadow_cycle(minute: ShadowMinute, run_id: RunId, *, fencing_token: int = 0) -> CycleRecord:
    """The ledger cycle holding ``minute`` (module docstring: id, policy, snapshot), stamped at its
    first second holding data (never later than the write)."""
    ts_ns = (minute.start_s + minute.first_slot) * 1_000_000_000
    return CycleRecord(cycle_id=CycleId(f"{run_id}-shadow-{minute.start_s}-{minute.first_slot:02d}"), run_id=run_id,
                       ts_ns=ts_ns, policy=SHADOW_POLICY, decisions=(), snapshot={SHADOW_KEY: minute.to_dict()},
                       fencing_token=fencing_token)


def shadow_of(cycle: CycleRecord, *, where: str | None = None) -> ShadowMinute | None:
    """The shadow minute a ledger cycle holds; None for any other cycle (no decisions, policy
    ``shadow`` and a ``shadow`` snapshot key make a shadow cycle); :class:`~ebb.errors.InputError`
    for a malformed one."""
    if cycle.decisions or cycle.policy != SHADOW_POLICY or SHADOW_KEY not in cycle.snapshot:
        return None
    return shadow_from_dict(cycle.snapshot[SHADOW_KEY], where=where or f"cycle {cycle.cycle_id!r}")
