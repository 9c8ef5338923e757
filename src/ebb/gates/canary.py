"""Canary scale-down: the decision table and the run's state machine (SPEC §3.5, note ch.4).

A scale-down of ``total_remove`` replicas executes in steps. The first step is the *canary*
(``canary_replicas``, one by default or a fraction via :meth:`CanaryPlan.from_fraction`); every
later step removes up to ``step_replicas``. After each step the caller watches the step's health
and the metrics gate (:mod:`ebb.gates.metrics_gate`) and asks :func:`decide` what to do:

=====================  =====================================  ============================
step healthy           gate verdict                           action
=====================  =====================================  ============================
``False``              any                                    ``abort_and_compensate``
any                    ``fail`` or ``error``                  ``abort_and_compensate``
``True``               ``pass``                               ``proceed``
``True`` or ``None``   ``running`` or ``inconclusive``        ``wait``
``None`` (unknown)     ``pass``                               ``wait``
=====================  =====================================  ============================

``wait`` turns into ``abort_and_compensate`` once ``max_wait_s`` has passed since the step
started gating: fail safe, an undecided gate never lets the scale-down through. (A gate ``error``
aborts, as an Argo Rollout aborts on an Error AnalysisRun; ``inconclusive`` waits, as a Rollout
pauses on an Inconclusive run, but bounded.)

:class:`CanaryRun` is a frozen value; every method returns a new run. Legal moves are in
:data:`TRANSITIONS`; anything else raises ValueError. Time is passed in (``now_s``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Literal

from ebb.errors import ConfigError
from ebb.gates.metrics_gate import Verdict

__all__ = ["Action", "CanaryPlan", "CanaryRun", "DEFAULT_MAX_WAIT_S", "DECISION_TABLE", "RunState",
           "TRANSITIONS", "decide"]

Action = Literal["proceed", "wait", "abort_and_compensate"]
RunState = Literal["planned", "canary", "gating", "proceeding", "done", "aborted", "compensated"]

#: Ten gate intervals of 60 s: long enough for a count-5 gate plus retries, short enough that a
#: stuck gate does not hold half-removed capacity for long.
DEFAULT_MAX_WAIT_S = 600.0

#: (step healthy, gate verdict) → action before ``max_wait_s``; see the module table.
DECISION_TABLE: dict[tuple[bool | None, Verdict], Action] = {
    (h, v): ("abort_and_compensate" if h is False or v in ("fail", "error")
             else "proceed" if h is True and v == "pass"
             else "wait")
    for h in (True, False, None)
    for v in ("running", "pass", "fail", "inconclusive", "error")
}

#: state → states it may move to next.
TRANSITIONS: dict[RunState, frozenset[RunState]] = {
    # start: the canary replicas are being removed
    "planned": frozenset({"canary"}),
    # canary removal applied → watch it; or the removal itself failed → abort
    "canary": frozenset({"gating", "aborted"}),
    # decide() said proceed → next step (or done after the last); abort → aborted; wait = stay
    "gating": frozenset({"proceeding", "done", "aborted"}),
    # next step applied → gate it too; or the step itself failed → abort
    "proceeding": frozenset({"gating", "aborted"}),
    # terminal: all total_remove replicas removed, every step gated and passed
    "done": frozenset(),
    # the removed replicas are being restored (rollback channel)
    "aborted": frozenset({"compensated"}),
    # terminal: compensation finished
    "compensated": frozenset(),
}


@dataclass(frozen=True)
class CanaryPlan:
    """How a scale-down of ``total_remove`` replicas is split into a canary and later steps."""

    total_remove: int
    """Replicas the whole plan removes. Required, >= 1."""
    canary_replicas: int = 1
    """Replicas removed by the first (canary) step, 1..total_remove. Default 1: the smallest
    step that still exercises the change."""
    step_replicas: int = 1
    """Replicas removed by each later step (the last may be smaller), >= 1. Default 1."""
    max_wait_s: float = DEFAULT_MAX_WAIT_S
    """Longest a step may stay undecided (``wait``) before it is aborted and compensated."""

    def __post_init__(self) -> None:
        for name in ("total_remove", "canary_replicas", "step_replicas"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ConfigError(f"{name}: expected an integer >= 1, got {v!r} (fix: e.g. {name}: 1)")
        if self.canary_replicas > self.total_remove:
            raise ConfigError(f"canary_replicas: {self.canary_replicas} > total_remove "
                              f"{self.total_remove} (fix: use at most {self.total_remove})")
        if (isinstance(self.max_wait_s, bool) or not isinstance(self.max_wait_s, (int, float))
                or not math.isfinite(self.max_wait_s) or self.max_wait_s < 0):
            raise ConfigError(f"max_wait_s: expected seconds >= 0, got {self.max_wait_s!r} "
                              "(fix: e.g. max_wait_s: 600)")

    @classmethod
    def from_fraction(cls, total_remove: int, fraction: float, step_replicas: int = 1,
                      max_wait_s: float = DEFAULT_MAX_WAIT_S) -> CanaryPlan:
        """Canary = ``floor(fraction · total_remove)`` replicas, at least 1 (rounding down keeps
        the canary small). ``fraction`` in (0, 1]."""
        if not (isinstance(fraction, (int, float)) and 0.0 < fraction <= 1.0):
            raise ConfigError(f"fraction: expected a number in (0, 1], got {fraction!r} (fix: e.g. 0.1)")
        if isinstance(total_remove, bool) or not isinstance(total_remove, int) or total_remove < 1:
            raise ConfigError(f"total_remove: expected an integer >= 1, got {total_remove!r} "
                              "(fix: e.g. total_remove: 4)")
        canary = max(1, math.floor(fraction * total_remove))
        return cls(total_remove, canary, step_replicas, max_wait_s)

    def steps(self) -> tuple[int, ...]:
        """Replicas removed by each step, canary first; they sum to ``total_remove``."""
        out = [self.canary_replicas]
        left = self.total_remove - self.canary_replicas
        while left > 0:
            out.append(min(self.step_replicas, left))
            left -= out[-1]
        return tuple(out)


def decide(step_healthy: bool | None, gate: Verdict, waited_s: float,
           max_wait_s: float = DEFAULT_MAX_WAIT_S) -> Action:
    """The next action after a step (module table); ``wait`` past ``max_wait_s`` aborts."""
    if (step_healthy, gate) not in DECISION_TABLE:
        raise ValueError(f"unknown (step_healthy, gate) {(step_healthy, gate)!r}")
    if math.isnan(waited_s) or waited_s < 0:
        raise ValueError(f"waited_s must be >= 0, got {waited_s!r}")
    action = DECISION_TABLE[(step_healthy, gate)]
    if action == "wait" and waited_s >= max_wait_s:
        return "abort_and_compensate"
    return action


@dataclass(frozen=True)
class CanaryRun:
    """One execution of a :class:`CanaryPlan`. Start with ``CanaryRun(plan)``."""

    plan: CanaryPlan
    state: RunState = "planned"
    step_index: int = -1
    """Index into ``plan.steps()`` of the step being applied or gated; -1 before the canary."""
    removed: int = 0
    """Replicas whose removal has been applied (what compensation must restore)."""
    gating_since_s: float | None = None
    """When the current step started gating (for ``max_wait_s``)."""
    history: tuple[tuple[RunState, float], ...] = ()
    """Every state entered after ``planned``, with its time."""

    def transition(self, to: RunState, now_s: float) -> CanaryRun:
        """Move to ``to`` at ``now_s`` (low level; prefer the named methods below).

        Raises ValueError for a move not in :data:`TRANSITIONS` or a non-finite time.
        """
        if to not in TRANSITIONS[self.state]:
            allowed = ", ".join(sorted(TRANSITIONS[self.state])) or "none (terminal)"
            raise ValueError(f"illegal canary transition {self.state} -> {to} (allowed: {allowed})")
        if not math.isfinite(now_s):
            raise ValueError(f"now_s must be finite, got {now_s!r}")
        return replace(self, state=to, history=self.history + ((to, now_s),))

    @property
    def is_last_step(self) -> bool:
        """Whether the current step is the plan's last."""
        return self.step_index == len(self.plan.steps()) - 1

    def start(self, now_s: float) -> CanaryRun:
        """planned → canary: begin removing the canary replicas."""
        return replace(self.transition("canary", now_s), step_index=0)

    def step_applied(self, now_s: float) -> CanaryRun:
        """canary | proceeding → gating: the current step's removal took effect."""
        if self.state not in ("canary", "proceeding"):
            raise ValueError(f"illegal canary transition {self.state} -> gating (no step in flight)")
        n = self.plan.steps()[self.step_index]
        return replace(self.transition("gating", now_s), removed=self.removed + n, gating_since_s=now_s)

    def step_failed(self, now_s: float) -> CanaryRun:
        """canary | proceeding → aborted: applying the step failed."""
        if self.state not in ("canary", "proceeding"):
            raise ValueError(f"illegal canary transition {self.state} -> aborted via step_failed")
        return self.transition("aborted", now_s)

    def on_gate(self, step_healthy: bool | None, gate: Verdict,
                now_s: float) -> tuple[CanaryRun, Action]:
        """In ``gating``: apply :func:`decide`; proceed → proceeding (or done after the last
        step), abort → aborted, wait → unchanged."""
        if self.state != "gating" or self.gating_since_s is None:
            raise ValueError(f"on_gate needs state gating, got {self.state}")
        action = decide(step_healthy, gate, now_s - self.gating_since_s, self.plan.max_wait_s)
        if action == "wait":
            return self, action
        if action == "abort_and_compensate":
            return self.transition("aborted", now_s), action
        if self.is_last_step:
            return self.transition("done", now_s), action
        nxt = self.transition("proceeding", now_s)
        return replace(nxt, step_index=self.step_index + 1, gating_since_s=None), action

    def compensated(self, now_s: float) -> CanaryRun:
        """aborted → compensated: the ``removed`` replicas have been restored."""
        return self.transition("compensated", now_s)
