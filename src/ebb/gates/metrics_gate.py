"""A metrics gate with Argo Rollouts AnalysisRun semantics (SPEC §3.5; ``docs/gates.md``).

One gate is one Argo *metric*: a query measured every ``interval_s`` seconds, each measurement
classified, and the counters compared with the limits after every measurement.

Measurement phase (Argo ``evaluate.EvaluateResult``):

=====================  ==============================  =========================================
conditions given       value                           phase
=====================  ==============================  =========================================
any                    query failed (``error`` set)    Error
any                    ``None`` (no data) or NaN       Inconclusive (never Successful)
success and failure    failure holds                   Failed (failure wins if both hold)
success and failure    only success holds              Successful
success and failure    neither holds                   Inconclusive
success only           success holds / does not        Successful / Failed
failure only           failure holds / does not        Failed / Successful
=====================  ==============================  =========================================

Metric phase after each measurement (Argo ``assessMetricStatus``; limits are *exceeded*, ``>``):

* ``consecutive_errors > consecutive_error_limit`` (default 4, so the 5th error in a row) → Error;
  any non-error measurement resets the consecutive-error counter to 0;
* else ``inconclusive > inconclusive_limit`` (default 0) → Inconclusive;
* else ``failed > failure_limit`` (default 0) → Failed;
* else ``count`` given and ``count`` non-error measurements taken → Successful;
* else Running (with no ``count`` the gate runs until a limit is exceeded or it is stopped).

Errors do not count towards ``count``. (Argo retries an Error after 10 s instead of ``interval``;
the callers here, :mod:`ebb.gates.guard`, measure every ``interval_s`` regardless.)
Once the metric has completed, later measurements are ignored, as Argo takes none.

The run phase maps to :data:`Verdict`: Successful → ``"pass"``, Failed → ``"fail"``,
Inconclusive → ``"inconclusive"``, Error → ``"error"``, Pending/Running → ``"running"``. A Rollout
aborts on Failed *and* on Error and pauses on Inconclusive; :mod:`ebb.gates.canary` does the same,
bounded by a maximum wait.

One deliberate deviation, fail-safe: Argo calls a metric that is stopped before its first
measurement Successful; :func:`stop` makes it Inconclusive — a gate that saw no data never passes.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any, Literal

from ebb.config.yamlio import load_mapping
from ebb.errors import ConfigError

__all__ = [
    "DEFAULT_CONSECUTIVE_ERROR_LIMIT",
    "DEFAULT_INTERVAL_S",
    "Condition",
    "GateResult",
    "GateSpec",
    "GateState",
    "Measurement",
    "MeasurementPhase",
    "MetricPhase",
    "Stage",
    "Verdict",
    "classify",
    "evaluate",
    "gate_spec_from_mapping",
    "load_gates",
    "parse_condition",
    "step",
    "stop",
    "verdict",
]

MeasurementPhase = Literal["Successful", "Failed", "Inconclusive", "Error"]
MetricPhase = Literal["Pending", "Running", "Successful", "Failed", "Inconclusive", "Error"]
Verdict = Literal["running", "pass", "fail", "inconclusive", "error"]
Stage = Literal["canary", "after_scale_down"]
"""When a gate is measured: while a canary step is gated, or after a whole (non-canary) scale-down."""
Op = Literal["<", "<=", ">", ">=", "==", "!="]

#: Argo has no default interval; the design note measures every 60 s.
DEFAULT_INTERVAL_S = 60.0
#: Argo's ``DefaultConsecutiveErrorLimit``: the 5th query error in a row ends the metric.
DEFAULT_CONSECUTIVE_ERROR_LIMIT = 4

_VERDICT: dict[MetricPhase, Verdict] = {
    "Pending": "running", "Running": "running", "Successful": "pass", "Failed": "fail",
    "Inconclusive": "inconclusive", "Error": "error",
}
_COMPLETED: frozenset[MetricPhase] = frozenset({"Successful", "Failed", "Inconclusive", "Error"})

# result OP number; `result[0]` is accepted because Argo's Prometheus examples index the vector.
_NUMBER = r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?"
_CONDITION_RE = re.compile(rf"^\s*result(?:\s*\[\s*0\s*\])?\s*(<=|>=|==|!=|<|>)\s*({_NUMBER})\s*$")


@dataclass(frozen=True)
class Condition:
    """``result <op> threshold``, parsed from text such as ``result >= 0.9995``; never eval'd."""

    op: Op
    threshold: float
    text: str

    def holds(self, value: float) -> bool:
        """Whether ``value`` satisfies the condition (``value`` is a finite or infinite float)."""
        t = self.threshold
        if self.op == "<":
            return value < t
        if self.op == "<=":
            return value <= t
        if self.op == ">":
            return value > t
        if self.op == ">=":
            return value >= t
        if self.op == "==":
            return value == t
        return value != t


def parse_condition(text: str, *, key: str = "condition") -> Condition:
    """Parse ``result <op> <number>`` (ops ``< <= > >= == !=``); ConfigError names ``key`` and text."""
    if not isinstance(text, str):
        raise ConfigError(f"{key}: expected text such as 'result < 800', got {text!r} "
                          "(fix: quote the condition)")
    m = _CONDITION_RE.match(text)
    if m is None:
        raise ConfigError(f"{key}: cannot parse condition {text!r} (fix: write 'result <op> <number>' "
                          "with op one of < <= > >= == !=, e.g. 'result >= 0.9995'; "
                          "'and'/'or' and functions are not supported: use two gates)")
    threshold = float(m.group(2))
    if not math.isfinite(threshold):
        raise ConfigError(f"{key}: threshold in {text!r} is not finite (fix: use a plain number)")
    op: Op = m.group(1)  # type: ignore[assignment]  # the regex admits only the six Op values
    return Condition(op=op, threshold=threshold, text=text.strip())


@dataclass(frozen=True)
class GateSpec:
    """One gated metric, field for field an Argo Rollouts ``Metric`` (camelCase names in brackets)."""

    query: str
    """What to measure (PromQL or a series name); opaque here, run by the layer above. Required."""
    success_condition: str | None = None
    """[successCondition] e.g. ``result < 800``. At least one of success/failure is required."""
    failure_condition: str | None = None
    """[failureCondition] e.g. ``result >= 800``; wins over success when both hold."""
    interval_s: float = DEFAULT_INTERVAL_S
    """[interval] seconds between measurements (also after an Error).
    Default 60 s, the design note's cadence."""
    count: int | None = None
    """[count] measurements (errors excluded) after which the gate passes; ``None`` = until stopped
    or a limit is exceeded."""
    failure_limit: int = 0
    """[failureLimit] Failed measurements tolerated; the gate fails at ``failure_limit + 1``.
    Default 0, Argo's: one failure fails the gate. The design note's "every 60 s, 3 failures
    block" is ``failure_limit=2``. Argo counts failures in total, not in a row, which blocks at
    least as early as the note's consecutive-failure reading."""
    inconclusive_limit: int = 0
    """[inconclusiveLimit] Inconclusive measurements tolerated. Default 0, Argo's: one
    inconclusive measurement (including no data) makes the gate inconclusive."""
    consecutive_error_limit: int = DEFAULT_CONSECUTIVE_ERROR_LIMIT
    """[consecutiveErrorLimit] query errors in a row tolerated. Default 4, Argo's: a flaky source
    is retried, a dead one ends the gate in Error on the 5th error in a row."""
    stage: Stage = "canary"
    """When the gate is measured (not an Argo field; set by the gates file's section, never per
    entry): ``canary`` (under ``gates:``) — after the canary step of every scale-down, before the
    rest; ``after_scale_down`` (under ``after_scale_down:``) — after every scale-down, taken whole,
    which is compensated through the rollback channel if the gate fails (``docs/gates.md``)."""
    success: Condition | None = field(init=False, repr=False, compare=False)
    """Parsed :attr:`success_condition`."""
    failure: Condition | None = field(init=False, repr=False, compare=False)
    """Parsed :attr:`failure_condition`."""

    def __post_init__(self) -> None:
        if not isinstance(self.query, str) or not self.query.strip():
            raise ConfigError(f"query: expected a non-empty query, got {self.query!r} "
                              "(fix: e.g. query: 'histogram_quantile(0.99, ...)')")
        if self.stage not in ("canary", "after_scale_down"):
            raise ConfigError(f"stage: expected canary or after_scale_down, got {self.stage!r}")
        if self.success_condition is None and self.failure_condition is None:
            raise ConfigError("success_condition/failure_condition: neither given (fix: add at least "
                              "one, e.g. success_condition: 'result < 800')")
        succ = (None if self.success_condition is None
                else parse_condition(self.success_condition, key="success_condition"))
        fail = (None if self.failure_condition is None
                else parse_condition(self.failure_condition, key="failure_condition"))
        object.__setattr__(self, "success", succ)
        object.__setattr__(self, "failure", fail)
        if (isinstance(self.interval_s, bool) or not isinstance(self.interval_s, (int, float))
                or not math.isfinite(self.interval_s) or self.interval_s <= 0):
            raise ConfigError(f"interval_s: expected seconds > 0, got {self.interval_s!r} "
                              "(fix: e.g. interval_s: 60)")
        for name in ("failure_limit", "inconclusive_limit", "consecutive_error_limit"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ConfigError(f"{name}: expected an integer >= 0, got {v!r} (fix: e.g. {name}: 2)")
        if self.count is not None:
            if isinstance(self.count, bool) or not isinstance(self.count, int) or self.count < 1:
                raise ConfigError(f"count: expected an integer >= 1 or none, got {self.count!r} "
                                  "(fix: e.g. count: 5, or omit it to run until stopped)")
            # Argo's validation: a count below a limit could never reach that limit.
            for name in ("failure_limit", "inconclusive_limit"):
                if self.count < getattr(self, name):
                    raise ConfigError(f"count: {self.count} < {name} {getattr(self, name)} "
                                      f"(fix: raise count or lower {name})")


_SPEC_KEYS = tuple(f.name for f in fields(GateSpec) if f.init and f.name != "stage")
_SECTIONS: dict[str, Stage] = {"gates": "canary", "after_scale_down": "after_scale_down"}


def gate_spec_from_mapping(raw: Mapping[str, Any], source: str = "<gate>", *,
                           stage: Stage = "canary") -> GateSpec:
    """Build a :class:`GateSpec` from an already-parsed YAML/JSON mapping (snake_case keys), measured
    at ``stage``.

    Unknown keys, missing ``query`` and bad values raise :class:`ConfigError` naming ``source``.
    """
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{source}: expected a mapping, got {type(raw).__name__} "
                          "(fix: write query: ..., success_condition: ...)")
    unknown = sorted(set(raw) - set(_SPEC_KEYS))
    if unknown:
        raise ConfigError(f"{source}: {unknown[0]}: unknown key (fix: use only {', '.join(_SPEC_KEYS)})")
    if "query" not in raw:
        raise ConfigError(f"{source}: query: missing (fix: add query: ...)")
    try:
        return GateSpec(**dict(raw), stage=stage)
    except ConfigError as exc:
        raise ConfigError(f"{source}: {exc}") from exc


def load_gates(text: str, source: str = "<gates>") -> tuple[GateSpec, ...]:
    """Gates from YAML text (the ConfigMap's ``gates.yaml``): ``gates: [{query: ...,
    success_condition: ...}, ...]`` — canary gates — and/or ``after_scale_down: [...]`` —
    post-scale-down SLO checks (their :attr:`GateSpec.stage`). Broken YAML, no
    gate at all, both sections (a scale-down is either canaried or checked whole), an unknown
    section or a bad gate raise :class:`ConfigError` naming ``source`` and the entry."""
    fix = "write gates: [{query: ..., success_condition: ...}] or after_scale_down: [...]"
    doc = load_mapping(text, source, fix)
    unknown = sorted(str(k) for k in doc if k not in _SECTIONS)
    if unknown:
        raise ConfigError(f"{source}: {unknown[0][:60]}: unknown key (fix: use gates: (canary) or "
                          "after_scale_down: (a check after every scale-down))")
    present = [k for k in _SECTIONS if k in doc]
    if len(present) > 1:
        raise ConfigError(f"{source}: both gates: and after_scale_down: given (fix: one of them — a canaried "
                          "scale-down is gated by gates:, after_scale_down: checks scale-downs taken whole)")
    if not present or not isinstance(doc[present[0]], list) or not doc[present[0]]:
        key = present[0] if present else "gates"
        raise ConfigError(f"{source}: expected a non-empty list under '{key}:' (fix: {key}: [{{query: ..., "
                          "success_condition: ...}}])")
    key = present[0]
    return tuple(gate_spec_from_mapping(g, f"{source}: {key}[{i}]", stage=_SECTIONS[key])
                 for i, g in enumerate(doc[key]))


@dataclass(frozen=True)
class Measurement:
    """One query result at ``ts_s``: a value, no data (``value=None``), or a query ``error``."""

    ts_s: float
    """When the measurement finished, in seconds on the caller's clock."""
    value: float | None
    """The scalar result; ``None`` or NaN = no data (Inconclusive)."""
    error: str | None = None
    """Why the query failed (source down, timeout); set → Error, whatever ``value`` says."""


@dataclass(frozen=True)
class GateState:
    """Counters of one gate run (Argo ``MetricResult``). Start from ``GateState()``."""

    phase: MetricPhase = "Pending"
    count: int = 0
    """Completed non-error measurements (Successful + Failed + Inconclusive)."""
    successful: int = 0
    failed: int = 0
    inconclusive: int = 0
    error: int = 0
    consecutive_error: int = 0
    last_ts_s: float | None = None
    last_phase: MeasurementPhase | None = None
    message: str = ""
    """Why the gate completed (Argo's wording, e.g. ``failed (3) > failureLimit (2)``)."""
    ignored: int = 0
    """Measurements offered after completion and ignored."""


@dataclass(frozen=True)
class GateResult:
    """Outcome of :func:`evaluate`: the verdict, the counters and one reason per measurement."""

    verdict: Verdict
    state: GateState
    phases: tuple[MeasurementPhase, ...]
    """Phase of each measurement used, in order (ignored ones excluded)."""
    reasons: tuple[str, ...]
    """One line per measurement used, then the completion message if any."""


def classify(spec: GateSpec, m: Measurement) -> MeasurementPhase:
    """The phase of one measurement (table in the module docstring)."""
    if m.error is not None:
        return "Error"
    if m.value is None or math.isnan(m.value):
        return "Inconclusive"
    v = float(m.value)
    succ = spec.success.holds(v) if spec.success is not None else None
    fail = spec.failure.holds(v) if spec.failure is not None else None
    if succ is None:
        succ = not fail
    if fail is None:
        fail = not succ
    if fail:
        return "Failed"
    return "Successful" if succ else "Inconclusive"


def _assess(spec: GateSpec, s: GateState) -> tuple[MetricPhase, str]:
    # Argo assessMetricFailureInconclusiveOrError: later checks override earlier ones.
    phase: MetricPhase = "Running"
    message = ""
    if s.failed > spec.failure_limit:
        phase, message = "Failed", f"failed ({s.failed}) > failureLimit ({spec.failure_limit})"
    if s.inconclusive > spec.inconclusive_limit:
        phase, message = ("Inconclusive",
                          f"inconclusive ({s.inconclusive}) > inconclusiveLimit ({spec.inconclusive_limit})")
    if s.consecutive_error > spec.consecutive_error_limit:
        phase, message = ("Error", f"consecutiveErrors ({s.consecutive_error}) > "
                                   f"consecutiveErrorLimit ({spec.consecutive_error_limit})")
    if phase == "Running" and spec.count is not None and s.count >= spec.count:
        phase, message = "Successful", f"count ({spec.count}) reached"
    return phase, message


def step(spec: GateSpec, state: GateState, m: Measurement) -> GateState:
    """Fold one measurement into ``state``; ignored (counted in ``ignored``) once completed.

    Raises ValueError when ``m.ts_s`` is not finite or goes back before the last measurement.
    """
    if not math.isfinite(m.ts_s):
        raise ValueError(f"measurement ts_s must be finite, got {m.ts_s!r}")
    if state.last_ts_s is not None and m.ts_s < state.last_ts_s:
        raise ValueError(f"measurement ts_s {m.ts_s!r} is before the last one {state.last_ts_s!r}")
    if state.phase in _COMPLETED:
        return replace(state, ignored=state.ignored + 1)
    p = classify(spec, m)
    if p == "Error":
        s = replace(state, error=state.error + 1, consecutive_error=state.consecutive_error + 1)
    else:
        s = replace(state, count=state.count + 1, consecutive_error=0,
                    successful=state.successful + (p == "Successful"),
                    failed=state.failed + (p == "Failed"),
                    inconclusive=state.inconclusive + (p == "Inconclusive"))
    phase, message = _assess(spec, s)
    return replace(s, phase=phase, message=message, last_ts_s=m.ts_s, last_phase=p)


def stop(state: GateState) -> GateState:
    """Stop a running gate (Argo ``terminate``): no limit exceeded → Successful.

    Fail-safe deviation from Argo: stopped before any non-error measurement → Inconclusive.
    A completed gate is returned unchanged.
    """
    if state.phase in _COMPLETED:
        return state
    if state.count == 0:
        return replace(state, phase="Inconclusive",
                       message="stopped before any measurement (fail-safe: no data never passes)")
    return replace(state, phase="Successful", message="stopped with no limit exceeded")


def verdict(state: GateState) -> Verdict:
    """``running`` | ``pass`` | ``fail`` | ``inconclusive`` | ``error`` for ``state.phase``."""
    return _VERDICT[state.phase]


def _describe(spec: GateSpec, m: Measurement, p: MeasurementPhase) -> str:
    if p == "Error":
        return f"t={m.ts_s:g}s Error: {m.error}"
    if m.value is None or math.isnan(m.value):
        return f"t={m.ts_s:g}s Inconclusive: no data"
    conds = [c.text for c in (spec.success, spec.failure) if c is not None]
    return f"t={m.ts_s:g}s {p}: value {m.value:g} vs {' / '.join(conds)}"


def evaluate(spec: GateSpec, measurements: Iterable[Measurement], *,
             stopped: bool = False) -> GateResult:
    """Fold ``measurements`` (in time order) from ``GateState()``; ``stopped`` applies :func:`stop`."""
    state = GateState()
    phases: list[MeasurementPhase] = []
    reasons: list[str] = []
    for m in measurements:
        before = state.phase
        state = step(spec, state, m)
        if before in _COMPLETED:
            continue
        p = state.last_phase
        assert p is not None
        phases.append(p)
        reasons.append(_describe(spec, m, p))
    if stopped:
        state = stop(state)
    if state.message:
        reasons.append(state.message)
    return GateResult(verdict=verdict(state), state=state, phases=tuple(phases),
                      reasons=tuple(reasons))
