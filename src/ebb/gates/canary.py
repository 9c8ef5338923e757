"""Canary scale-down: the decision table (SPEC §3.5, note ch.4).

A scale-down executes in steps, the first being the *canary*. After each step the caller watches
the step's health and the metrics gate (:mod:`ebb.gates.metrics_gate`) and asks :func:`decide`
what to do (the caller is :class:`ebb.gates.guard.CanaryGuard`, which keeps its own run state):

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
"""

from __future__ import annotations

import math
from typing import Literal

from ebb.gates.metrics_gate import Verdict

__all__ = ["Action", "DEFAULT_MAX_WAIT_S", "DECISION_TABLE", "decide"]

Action = Literal["proceed", "wait", "abort_and_compensate"]

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
