"""Pure evaluation of multi-signal triggers (:mod:`ebb.config.triggers`) over windowed quantiles.

Input per rule: the stream of the rule's windowed quantile for its signal, as (times_s, values)
arrays in time order (e.g. from :func:`ebb.window.stream.windowed_quantiles`). A rule **holds at
time t** iff its comparison held at every evaluation in ``[t − sustain_s, t]`` and the unbroken run
of true evaluations began at or before ``t − sustain_s`` (so a stream shorter than sustain_s never
holds). NaN (empty window) breaks a run. A missing signal makes its rule not hold — fail safe:
no scale action on data we do not have.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ebb.config.triggers import Rule, Trigger

__all__ = ["RuleResult", "TriggerResult", "evaluate_rule", "evaluate_trigger"]

_OPS: dict[str, Callable[[npt.NDArray[np.float64], float], npt.NDArray[np.bool_]]] = {
    ">": operator.gt, ">=": operator.ge, "<": operator.lt, "<=": operator.le,
}

Stream = tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]


@dataclass(frozen=True)
class RuleResult:
    rule: Rule
    holds: bool
    """Condition held for at least sustain_s up to the last evaluation."""
    held_s: float
    """Length of the current unbroken run (s); 0 when the last evaluation is false."""
    last_value: float
    """Last windowed quantile seen (NaN if none)."""


@dataclass(frozen=True)
class TriggerResult:
    trigger: Trigger
    fired: bool
    rules: tuple[RuleResult, ...]


def evaluate_rule(rule: Rule, times_s: npt.ArrayLike, values: npt.ArrayLike) -> RuleResult:
    """Does ``rule`` hold at the last evaluation of its stream?"""
    t = np.asarray(times_s, dtype=np.float64)
    v = np.asarray(values, dtype=np.float64)
    if t.shape != v.shape or t.ndim != 1:
        raise ValueError(f"times_s and values must be equal 1-D arrays, got {t.shape} and {v.shape}")
    if t.size == 0:
        return RuleResult(rule, False, 0.0, float("nan"))
    with np.errstate(invalid="ignore"):
        ok = _OPS[rule.op](v, rule.threshold) & ~np.isnan(v)
    if not ok[-1]:
        return RuleResult(rule, False, 0.0, float(v[-1]))
    false_idx = np.flatnonzero(~ok)
    start = int(false_idx[-1]) + 1 if false_idx.size else 0
    held = float(t[-1] - t[start])
    return RuleResult(rule, held >= rule.sustain_s - 1e-9, held, float(v[-1]))


def evaluate_trigger(trigger: Trigger, streams: Mapping[str, Stream]) -> TriggerResult:
    """Evaluate every rule on ``streams[rule.signal]`` and combine with the trigger's all/any."""
    results = tuple(
        evaluate_rule(r, *streams[r.signal]) if r.signal in streams
        else RuleResult(r, False, 0.0, float("nan"))
        for r in trigger.rules
    )
    holds = [r.holds for r in results]
    fired = all(holds) if trigger.combine == "all" else any(holds)
    return TriggerResult(trigger, fired, results)
