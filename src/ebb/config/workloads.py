"""Workload classes for L2 semantic weighting (SPEC §3.3), parsed once into frozen dataclasses.

Format (a list under ``classes``; unknown keys are errors so a typo never silently disables an SLO)::

    classes:
      - name: order-fulfilment
        base_weight: 0.65
        alpha: 1.2
        p99_latency_ms: 800
        success_rate_min: 0.9995

The defaults (:data:`DEFAULT_WORKLOADS_YAML`) are the design note's three classes: order fulfilment
(0.65 / α 1.2 / P99 < 800 ms, success > 99.95 %), real-time recommendation (0.25 / α 0.9 /
P95 < 300 ms, CTR decay < 3 %) and offline training (0.10 / α 0.3 / GPU util > 70 %, epoch
completion ≥ 98 %). All ratios are fractions in [0, 1], never percent.

Errors: broken YAML, unknown or missing keys, bad values, duplicate names →
:class:`ebb.errors.ConfigError` naming the file, the key path (``classes[1].alpha``) and the fix.
The rules that use these classes live in :mod:`ebb.decide.semantics` (pure).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any


from ebb.config.yamlio import config_error, describe, finite_number, load_mapping, read_config_text

__all__ = ["DEFAULT_WORKLOADS_YAML", "WorkloadClass", "default_workload_classes",
           "load_workload_classes", "parse_classes_document", "parse_workload_classes", "workload_classes_from"]

#: The design note's §3.2 table. Weights sum to 1.0; success/utilisation floors are fractions.
DEFAULT_WORKLOADS_YAML = """\
classes:
  - name: order-fulfilment
    base_weight: 0.65
    alpha: 1.2
    p99_latency_ms: 800
    success_rate_min: 0.9995
  - name: realtime-recommendation
    base_weight: 0.25
    alpha: 0.9
    p95_latency_ms: 300
    ctr_decay_max: 0.03
  - name: offline-training
    base_weight: 0.10
    alpha: 0.3
    gpu_util_min: 0.70
    epoch_completion_min: 0.98
"""


@dataclass(frozen=True)
class WorkloadClass:
    """One kind of work with its scale-down priority and SLA constraints."""

    name: str
    """Unique class name, shown in decisions and logs. Required."""
    base_weight: float
    """Scale-down resistance at rest (dimensionless, > 0). Required. Lower weight = scaled down
    first; the note's defaults are 0.65 / 0.25 / 0.10 for critical / sensitive / offline work."""
    alpha: float
    """Elasticity coefficient α (dimensionless, ≥ 0). Required. Damps weight recalibration:
    each step moves 1/(1+α) of the way to the target, so α = 0 jumps at once and a larger α
    reacts slower but never oscillates (see :func:`ebb.decide.semantics.recalibrate_weight`)."""
    p99_latency_ms: float | None = None
    """P99 latency SLO (ms, > 0), or None when the class has no P99 objective. Default None.
    Why P99: averages hide the sub-second bursts that breach SLAs (note §2.3)."""
    p95_latency_ms: float | None = None
    """P95 latency SLO (ms, > 0), or None. Default None. The note states the recommendation SLO
    at P95."""
    success_rate_min: float | None = None
    """Lowest acceptable success ratio (fraction in (0, 1]; 0.9995 = 99.95 %), or None. Default
    None. Below it scale-down is vetoed: the service is already failing requests."""
    gpu_util_min: float | None = None
    """GPU utilisation the class should stay above (fraction in [0, 1]), or None. Default None.
    Scale-down raises per-replica utilisation, so this floor never vetoes a scale-down; it is
    the efficiency goal that makes offline work the first to shed replicas."""
    ctr_decay_max: float | None = None
    """Largest tolerated click-through-rate decay (fraction; 0.03 = 3 %), or None. Default None.
    A business constraint documented for gates and reports; L2 has no CTR signal, so it does
    not evaluate it."""
    epoch_completion_min: float | None = None
    """Lowest acceptable share of training epochs completed on schedule (fraction), or None.
    Default None. Documented, evaluated by gates/reports rather than L2 (no per-tick signal)."""
    veto_margin: float = 0.8
    """Fraction of each latency SLO at which scale-down is vetoed (in (0, 1]). Default 0.8:
    veto when P99 ≥ 80 % of its SLO, because removing a replica raises everyone else's load and
    the last 20 % is consumed within one metric period in a burst."""
    min_replicas: int = 1
    """Never scale this class below this many replicas (≥ 0). Default 1: Ebb does not scale to
    zero on its own; that is a separate, explicit decision."""

    @property
    def latency_slo(self) -> tuple[str, float] | None:
        """The governing latency objective as (quantile name, ms): P99 if set, else P95, else None."""
        if self.p99_latency_ms is not None:
            return ("p99", self.p99_latency_ms)
        if self.p95_latency_ms is not None:
            return ("p95", self.p95_latency_ms)
        return None


_KEYS = tuple(f.name for f in fields(WorkloadClass))
_REQUIRED = ("name", "base_weight", "alpha")
# key → (lowest, lowest inclusive, highest or None, example fix)
_RANGES: dict[str, tuple[float, bool, float | None, str]] = {
    "base_weight": (0.0, False, None, "use a weight > 0, e.g. 0.65"),
    "alpha": (0.0, True, None, "use α >= 0, e.g. 1.2"),
    "p99_latency_ms": (0.0, False, None, "use milliseconds > 0, e.g. 800"),
    "p95_latency_ms": (0.0, False, None, "use milliseconds > 0, e.g. 300"),
    "success_rate_min": (0.0, False, 1.0, "use a fraction in (0, 1], e.g. 0.9995 for 99.95 %"),
    "gpu_util_min": (0.0, True, 1.0, "use a fraction in [0, 1], e.g. 0.70 for 70 %"),
    "ctr_decay_max": (0.0, True, 1.0, "use a fraction in [0, 1], e.g. 0.03 for 3 %"),
    "epoch_completion_min": (0.0, True, 1.0, "use a fraction in [0, 1], e.g. 0.98 for 98 %"),
    "veto_margin": (0.0, False, 1.0, "use a fraction in (0, 1], e.g. 0.8"),
}


_fail = config_error

MAX_MIN_REPLICAS = 100_000
"""Largest ``min_replicas`` accepted: 100 times the Ebb policy's default ``max_replicas`` (1,000),
so only a typo or a hostile file is refused, and the value always fits numpy's int64."""


def _number(source: str, key: str, v: Any, spec: tuple[float, bool, float | None, str]) -> float:
    lo, lo_incl, hi, fix = spec
    x = finite_number(v)
    if x is None:
        raise _fail(source, key, f"expected a finite number, got {describe(v)}", fix)
    if (x < lo if lo_incl else x <= lo) or (hi is not None and x > hi):
        raise _fail(source, key, f"{x:g} out of range", fix)
    return x


def _class(source: str, where: str, raw: Any) -> WorkloadClass:
    if not isinstance(raw, dict):
        raise _fail(source, where, f"expected a mapping, got {describe(raw)}",
                    "write {name: ..., base_weight: ..., alpha: ...}")
    unknown = sorted(set(raw) - set(_KEYS), key=str)
    if unknown:
        raise _fail(source, f"{where}.{str(unknown[0])[:60]}", "unknown key", f"use only {', '.join(_KEYS)}")
    for req in _REQUIRED:
        if req not in raw:
            raise _fail(source, f"{where}.{req}", "missing", f"add {req}: ...")
        if raw[req] is None:  # `alpha:` with nothing after it
            raise _fail(source, f"{where}.{req}", "has no value", f"write a value after {req}:")
    name = raw["name"]
    if not isinstance(name, str) or not name:
        raise _fail(source, f"{where}.name", f"expected a non-empty name, got {describe(name)}",
                    "e.g. name: order-fulfilment")
    values: dict[str, float | None] = {}
    for key, spec in _RANGES.items():
        v = raw.get(key)
        values[key] = None if v is None else _number(source, f"{where}.{key}", v, spec)
    min_rep = raw.get("min_replicas", 1)
    if isinstance(min_rep, bool) or not isinstance(min_rep, int) or not 0 <= min_rep <= MAX_MIN_REPLICAS:
        raise _fail(source, f"{where}.min_replicas",
                    f"expected an integer >= 0 and <= {MAX_MIN_REPLICAS:,}, got {describe(min_rep)}",
                    "e.g. min_replicas: 2")
    base, alpha, margin = values["base_weight"], values["alpha"], values["veto_margin"]
    if base is None or alpha is None:  # unreachable: required and non-null, checked above
        raise _fail(source, where, "base_weight and alpha are required", "add base_weight: and alpha:")
    return WorkloadClass(
        name=name, base_weight=base, alpha=alpha,
        p99_latency_ms=values["p99_latency_ms"], p95_latency_ms=values["p95_latency_ms"],
        success_rate_min=values["success_rate_min"], gpu_util_min=values["gpu_util_min"],
        ctr_decay_max=values["ctr_decay_max"], epoch_completion_min=values["epoch_completion_min"],
        veto_margin=0.8 if margin is None else margin, min_replicas=min_rep,
    )


def parse_workload_classes(text: str, source: str = "<string>") -> tuple[WorkloadClass, ...]:
    """Parse workload classes from YAML text; ``source`` names the file in errors."""
    return parse_classes_document(load_mapping(text, source, "write classes: [...]"), source)


def parse_classes_document(doc: dict[Any, Any], source: str = "<string>") -> tuple[WorkloadClass, ...]:
    """Classes from an already-loaded classes file (a mapping with only ``classes:``); ``source``
    names the file in errors. What ``ebb run --workloads`` uses once it has read the file as YAML."""
    unknown = sorted(set(doc) - {"classes"}, key=str)
    if unknown:
        raise _fail(source, str(unknown[0])[:60], "unknown key", "use only classes")
    return workload_classes_from(doc.get("classes"), source)


def workload_classes_from(raw: Any, source: str, key: str = "classes") -> tuple[WorkloadClass, ...]:
    """Classes from an already-loaded YAML list (the value of ``key`` in a larger document, such as
    a fleet file's ``classes:``); errors name ``source`` and ``key[i].field``."""
    if not isinstance(raw, list) or not raw:
        raise _fail(source, key, "expected a non-empty list of classes",
                    f"add at least one class under {key}:")
    out = tuple(_class(source, f"{key}[{i}]", r) for i, r in enumerate(raw))
    seen: set[str] = set()
    for i, c in enumerate(out):
        if c.name in seen:
            raise _fail(source, f"{key}[{i}].name", f"duplicate class name {c.name!r}",
                        "give every class a unique name")
        seen.add(c.name)
    return out


def _looks_like_path(s: str) -> bool:
    # One-line strings ending in .yaml/.yml, or naming an existing file, are paths; anything
    # else (multi-line, or `classes: [...]` inline) is YAML text.
    if "\n" in s:
        return False
    return s.endswith((".yaml", ".yml")) or Path(s).is_file()


def load_workload_classes(path_or_text: str | Path) -> tuple[WorkloadClass, ...]:
    """Classes from a file (a :class:`~pathlib.Path`, or a one-line ``*.yaml``/``*.yml`` or
    existing-file string) or from YAML text (anything else). ConfigError names the file."""
    if isinstance(path_or_text, str) and not _looks_like_path(path_or_text):
        return parse_workload_classes(path_or_text, "<string>")
    p = Path(path_or_text)
    return parse_workload_classes(read_config_text(p, "workload class file"), str(p))


def default_workload_classes() -> tuple[WorkloadClass, ...]:
    """The note's three classes: order fulfilment, real-time recommendation, offline training."""
    return parse_workload_classes(DEFAULT_WORKLOADS_YAML, "<defaults>")
