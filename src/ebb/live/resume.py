"""What a controller does, after a restart or a fail-over, with a decision left without an outcome.

The ledger is write-ahead: a decision is recorded, then applied, then its outcome recorded. A
controller that died in between leaves a decision without an outcome; its successor must neither
lose it nor replay it blindly — the decision may be a day old, forged in an unauthenticated store,
or made on data that no longer holds. :func:`resume_verdict` is the whole rule, pure:

* The fleet already at the decision's ``to`` → nothing to do: "found applied after restart".
* The fleet at neither ``from`` nor ``to`` → someone else changed it: "superseded".
* At ``from``, a **scale-down is never replayed**: removing capacity needs the fresh, complete data
  and the warm peak memory that a restarted policy does not have yet. It is recorded as "not
  resumed" and the policy re-decides it on fresh data (after its warm-up) if it still holds.
* At ``from``, a **scale-up** is replayed only when it is younger than ``max_age_s`` (default
  60 s) and not from the future (more than ``clock_skew_s``, 5 s, ahead of this clock), with its
  target clamped to ``[min_replicas, max_replicas]``; otherwise "not resumed" (the policy
  re-decides on fresh data — adding capacity needs no history, so it does so at once).

Whatever the verdict, it is recorded as the decision's outcome, so ``ebb explain`` shows what
became of it and the same decision is never looked at twice.
"""

from __future__ import annotations

from dataclasses import dataclass

from ebb.model.decisions import DecisionRecord

__all__ = ["ResumeLimits", "ResumeVerdict", "resume_verdict"]


@dataclass(frozen=True)
class ResumeLimits:
    """Bounds on replaying a decision. Every field: unit, default, why."""

    min_replicas: int = 1
    """The fleet never goes below this, whatever a ledger row says."""
    max_replicas: int = 1000
    """Nor above this (a forged scale-up to 10⁶ replicas is a bill, not a plan)."""
    max_age_s: float = 60.0
    """Older scale-ups are re-decided instead: a minute is one cold start; past it the demand that
    justified the decision is history."""
    clock_skew_s: float = 5.0
    """A decision stamped further in the future than this was not made by an honest clock."""

    def __post_init__(self) -> None:
        if not (1 <= self.min_replicas <= self.max_replicas):
            raise ValueError(f"need 1 <= min_replicas <= max_replicas, got {self.min_replicas}, {self.max_replicas}")
        if not (self.max_age_s > 0 and self.clock_skew_s >= 0):
            raise ValueError(f"max_age_s must be > 0 and clock_skew_s >= 0: {self!r}")


@dataclass(frozen=True)
class ResumeVerdict:
    """What to do with one unfinished decision."""

    apply: bool
    """True: apply it now (with the same decision id: the actuator is idempotent by id)."""
    to_replicas: int
    """The replica count to apply (the decision's, clamped); the fleet's when not applying."""
    note: str
    """The outcome's note in the ledger."""


def resume_verdict(d: DecisionRecord, spec_replicas: int, now_ns: int, limits: ResumeLimits) -> ResumeVerdict:
    """The verdict for decision ``d`` with the fleet at ``spec_replicas`` at Unix time ``now_ns``."""
    if spec_replicas == d.to_replicas:
        return ResumeVerdict(False, spec_replicas, "found applied after restart")
    if spec_replicas != d.from_replicas:
        return ResumeVerdict(False, spec_replicas, f"superseded: fleet at {spec_replicas} replicas, "
                                                   f"neither {d.from_replicas} nor {d.to_replicas}")
    age_s = (now_ns - d.ts_ns) / 1e9
    if d.to_replicas < d.from_replicas:
        return ResumeVerdict(False, spec_replicas, f"not resumed: a scale-down is never replayed after a restart "
                                                   f"(recorded {age_s:.0f} s ago); the policy re-decides it on "
                                                   "fresh data")
    if age_s > limits.max_age_s or age_s < -limits.clock_skew_s:
        return ResumeVerdict(False, spec_replicas, f"not resumed: recorded {age_s:.0f} s ago, outside "
                                                   f"[-{limits.clock_skew_s:g}, {limits.max_age_s:g}] s; "
                                                   "re-decided on fresh data")
    to = min(limits.max_replicas, max(limits.min_replicas, d.to_replicas))
    if to <= spec_replicas:
        return ResumeVerdict(False, spec_replicas, f"not resumed: {d.to_replicas} replicas clamped to {to}, "
                                                   f"no increase over {spec_replicas}")
    return ResumeVerdict(True, to, "applied after restart")
