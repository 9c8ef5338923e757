"""Multi-signal scale triggers as declarative YAML, parsed once into frozen dataclasses.

Format (one trigger per file; ``all`` or ``any`` holds a list of rules)::

    name: chapter1-scale-out
    any:
      - {signal: gpm_sm_util_pct, op: ">=", threshold: 75, sustain_s: 60, quantile: 0.5}
      - {signal: pcie_bw_util_pct, op: ">", threshold: 90, sustain_s: 30}
      - {signal: nccl_allreduce_latency_ms, op: ">", threshold: 12, sustain_s: 0, quantile: 0.99}

Errors: broken YAML, unknown or missing keys, bad values → :class:`ebb.errors.ConfigError`
naming the file, the key path (``any[1].op``) and the fix. Evaluation lives in
:mod:`ebb.decide.triggers` (pure).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Literal


from ebb.config.yamlio import config_error, describe, finite_number, load_mapping, read_config_text

__all__ = ["DEFAULT_TRIGGERS_YAML", "OPS", "Rule", "Trigger", "default_triggers", "load_triggers",
           "parse_triggers"]

OPS = (">", ">=", "<", "<=")

#: The design note's chapter-1 scale-out triggers (any one fires).
DEFAULT_TRIGGERS_YAML = """\
name: chapter1-scale-out
any:
  - {signal: gpm_sm_util_pct, op: ">=", threshold: 75, sustain_s: 60, quantile: 0.5}
  - {signal: pcie_bw_util_pct, op: ">", threshold: 90, sustain_s: 30, quantile: 0.5}
  - {signal: nccl_allreduce_latency_ms, op: ">", threshold: 12, sustain_s: 0, quantile: 0.99}
"""


@dataclass(frozen=True)
class Rule:
    """One condition on one signal's windowed quantile."""

    signal: str
    """Series name; the unit is in the name (``_pct``, ``_ms``). Required."""
    op: Literal[">", ">=", "<", "<="]
    """Comparison of the windowed quantile with ``threshold``. Required."""
    threshold: float
    """In the signal's unit. Required."""
    sustain_s: float = 0.0
    """Seconds the condition must hold without a break (0 = one evaluation suffices). Default 0:
    latency spikes matter at once; utilisation rules set 30–60 s to ignore transients."""
    quantile: float = 0.5
    """Which windowed quantile (0–1) is compared. Default 0.5: the median is robust to one bad
    sample; use 0.99 for tail-latency signals."""


@dataclass(frozen=True)
class Trigger:
    """Rules combined with ``all`` (every rule holds) or ``any`` (at least one holds)."""

    name: str
    """Shown in decisions and logs. Default: the file name."""
    combine: Literal["all", "any"]
    """How rule results combine."""
    rules: tuple[Rule, ...]
    """At least one rule."""


_RULE_KEYS = tuple(f.name for f in fields(Rule))


_fail = config_error


def _number(source: str, key: str, v: Any) -> float:
    x = finite_number(v)
    if x is None:
        raise _fail(source, key, f"expected a finite number, got {describe(v)}", "write a plain number")
    return x


def _rule(source: str, where: str, raw: Any) -> Rule:
    if not isinstance(raw, dict):
        raise _fail(source, where, f"expected a mapping, got {describe(raw)}",
                    "write {signal: ..., op: ..., threshold: ...}")
    unknown = sorted(set(raw) - set(_RULE_KEYS), key=str)
    if unknown:
        raise _fail(source, f"{where}.{str(unknown[0])[:60]}", "unknown key",
                    f"use only {', '.join(_RULE_KEYS)}")
    for req in ("signal", "op", "threshold"):
        if req not in raw:
            raise _fail(source, f"{where}.{req}", "missing", f"add {req}: ...")
    if not isinstance(raw["signal"], str) or not raw["signal"]:
        raise _fail(source, f"{where}.signal", f"expected a series name, got {describe(raw['signal'])}",
                    "e.g. signal: gpm_sm_util_pct")
    if raw["op"] not in OPS:
        raise _fail(source, f"{where}.op", f"unknown operator {describe(raw['op'])}",
                    f"use one of {', '.join(OPS)} (quote it in YAML)")
    sustain = _number(source, f"{where}.sustain_s", raw.get("sustain_s", 0.0))
    if sustain < 0:
        raise _fail(source, f"{where}.sustain_s", f"negative: {sustain:g}", "use seconds >= 0")
    q = _number(source, f"{where}.quantile", raw.get("quantile", 0.5))
    if not 0.0 <= q <= 1.0:
        raise _fail(source, f"{where}.quantile", f"{q:g} not in [0, 1]", "e.g. 0.5 or 0.99")
    return Rule(signal=raw["signal"], op=raw["op"],
                threshold=_number(source, f"{where}.threshold", raw["threshold"]),
                sustain_s=sustain, quantile=q)


def parse_triggers(text: str, source: str = "<string>") -> Trigger:
    """Parse one trigger from YAML text; ``source`` names the file in errors."""
    doc = load_mapping(text, source, "write name: ... and all: [...] or any: [...]")
    unknown = sorted(set(doc) - {"name", "all", "any"}, key=str)
    if unknown:
        raise _fail(source, str(unknown[0])[:60], "unknown key", "use only name, all, any")
    combos = [k for k in ("all", "any") if k in doc]
    if len(combos) != 1:
        raise _fail(source, "all/any", f"need exactly one of all/any, got {combos or 'none'}",
                    "put the rules under one of all: or any:")
    combine = combos[0]
    raw_rules = doc[combine]
    if not isinstance(raw_rules, list) or not raw_rules:
        raise _fail(source, combine, "expected a non-empty list of rules", "add at least one rule")
    rules = tuple(_rule(source, f"{combine}[{i}]", r) for i, r in enumerate(raw_rules))
    name = doc.get("name", Path(source).stem)
    if not isinstance(name, str):
        raise _fail(source, "name", f"expected text, got {describe(name)}", "quote the name")
    return Trigger(name=name, combine="all" if combine == "all" else "any", rules=rules)


def load_triggers(path: str | Path) -> Trigger:
    """Read and parse a trigger file; ConfigError names the file when it cannot be read."""
    p = Path(path)
    return parse_triggers(read_config_text(p, "trigger file"), str(p))


def default_triggers() -> Trigger:
    """The note's three chapter-1 triggers: SM ≥ 75 % for 60 s, PCIe > 90 % for 30 s, AllReduce > 12 ms."""
    return parse_triggers(DEFAULT_TRIGGERS_YAML, "<defaults>")
