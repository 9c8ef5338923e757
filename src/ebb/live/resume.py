"""What a controller does, after a restart or a fail-over, with a decision left without an outcome.

The ledger is write-ahead: a decision is recorded, then applied, then its outcome recorded. A
controller that died in between leaves a decision without an outcome; its successor must neither
lose it nor replay it blindly — the decision may be a day old, forged in an unauthenticated store,
or made on data that no longer holds. :func:`resume_verdict` is the whole rule, pure; the
controller asks it once, in its first leading cycle, *after* that cycle's read of the source and the
fleet (so the verdict knows whether the data is fresh and complete):

* The fleet already at the decision's ``to`` → nothing to do: "found applied after restart".
* The fleet at neither ``from`` nor ``to`` → someone else changed it: "superseded".
* At ``from``, nothing is resumed that was recorded more than ``max_age_s`` (60 s) ago or more than
  ``clock_skew_s`` (5 s) in the future of this clock: "not resumed: recorded N s ago" (a day-old
  forged 4 → 0 row lands here: red-team C2).
* At ``from``, a **scale-up** is applied with its target clamped to ``[min_replicas, max_replicas]``
  while that still adds replicas (adding capacity needs no history).
* At ``from``, a **scale-down** is applied only when, besides its age, *all* of these hold: the
  resuming cycle read fresh, complete data (``data_note`` empty); every recorded victim is still in
  the fleet, by the actuator's name (replica ids are never trusted across a restart: a new actuator
  may number the same pods differently); and the target clamped to ``[min_replicas, max_replicas]``
  still removes replicas. It is then applied towards the clamped target, its recorded victims first
  (mapped to the fleet's current ids, cut to the clamped count). Otherwise "not resumed: <why>" and
  the policy re-decides on fresh data (after its warm-up) if the scale-down still holds.
  And **demand must still fit the target**: the resuming cycle's read (``demand``, :class:`ReadDemand`)
  has no request queued and its peak served demand needs no more than the target at
  ``target_util`` — the replicas a fresh scale-up would ask for it, ``⌈peak / target_util⌉``. A
  scale-down recorded on a quiet fleet and resumed on a saturated one is "not resumed: demand
  changed" with both figures (red-team T3-H4: a 4 → 1 left by a crash and resumed within a minute
  while demand rose, then undone 1 → 2 → 4).

Whatever the verdict, it is recorded as the decision's outcome, so ``ebb explain`` shows what
became of it and the same decision is never looked at twice.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ebb.actuate.base import FleetState
from ebb.model.decisions import DecisionRecord
from ebb.model.ids import ReplicaId

__all__ = ["APPLIED_AFTER_RESTART", "ReadDemand", "ResumeLimits", "ResumeVerdict", "resume_verdict"]

APPLIED_AFTER_RESTART = "applied after restart"
"""The outcome note of a decision a successor applied."""


@dataclass(frozen=True)
class ResumeLimits:
    """Bounds on replaying a decision. Every field: unit, default, why."""

    min_replicas: int = 1
    """The fleet never goes below this, whatever a ledger row says."""
    max_replicas: int = 1000
    """Nor above this (a forged scale-up to 10⁶ replicas is a bill, not a plan)."""
    max_age_s: float = 60.0
    """Older decisions are re-decided instead: a minute is one cold start; past it the demand that
    justified the decision is history."""
    clock_skew_s: float = 5.0
    """A decision stamped further in the future than this was not made by an honest clock."""
    target_util: float = 0.9
    """A resumed scale-down's target must serve the read's peak demand at this utilisation (the
    balanced profile's ``target_util``: what a fresh scale-up would size the fleet to)."""

    def __post_init__(self) -> None:
        if not (1 <= self.min_replicas <= self.max_replicas):
            raise ValueError(f"need 1 <= min_replicas <= max_replicas, got {self.min_replicas}, {self.max_replicas}")
        if not (self.max_age_s > 0 and self.clock_skew_s >= 0 and 0 < self.target_util <= 2):
            raise ValueError(f"max_age_s must be > 0, clock_skew_s >= 0, target_util in (0, 2]: {self!r}")


@dataclass(frozen=True)
class ReadDemand:
    """What the resuming cycle's read says of demand now (replica units; requests)."""

    peak_replicas: float
    """The largest served demand over the read (:func:`ebb.decide.served.served_demand`)."""
    queued: float
    """Requests queued at the routers at the read's newest sample (0 without a router)."""


@dataclass(frozen=True)
class ResumeVerdict:
    """What to do with one unfinished decision."""

    apply: bool
    """True: apply it now (with the same decision id: the actuator is idempotent by id)."""
    to_replicas: int
    """The replica count to apply (the decision's, clamped); the fleet's when not applying."""
    note: str
    """The outcome's note in the ledger."""
    victims: tuple[ReplicaId, ...] = ()
    """The recorded victims as the fleet's *current* replica ids, at most ``from − to`` of them."""


def resume_verdict(d: DecisionRecord, fleet: FleetState, now_ns: int, limits: ResumeLimits, *,
                   data_note: str = "", demand: ReadDemand | None = None) -> ResumeVerdict:
    """The verdict for decision ``d`` with the fleet as ``fleet`` at Unix time ``now_ns``;
    ``data_note`` is why the resuming cycle's data is not fresh and complete ("" when it is);
    ``demand`` what that data says of demand now (None: nothing read, which resumes no scale-down)."""
    spec = fleet.spec_replicas
    if spec == d.to_replicas:
        return ResumeVerdict(False, spec, "found applied after restart")
    if spec != d.from_replicas:
        return ResumeVerdict(False, spec, f"superseded: fleet at {spec} replicas, "
                                          f"neither {d.from_replicas} nor {d.to_replicas}")
    age_s = (now_ns - d.ts_ns) / 1e9
    if age_s > limits.max_age_s or age_s < -limits.clock_skew_s:
        return ResumeVerdict(False, spec, f"not resumed: recorded {age_s:.0f} s ago, outside "
                                          f"[-{limits.clock_skew_s:g}, {limits.max_age_s:g}] s; "
                                          "re-decided on fresh data")
    to = min(limits.max_replicas, max(limits.min_replicas, d.to_replicas))
    if d.to_replicas > d.from_replicas:
        if to <= spec:
            return ResumeVerdict(False, spec, f"not resumed: {d.to_replicas} replicas clamped to {to}, "
                                              f"no increase over {spec}")
        return ResumeVerdict(True, to, APPLIED_AFTER_RESTART)
    return _scale_down_verdict(d, fleet, to, data_note, demand, limits.target_util)


def _scale_down_verdict(d: DecisionRecord, fleet: FleetState, to: int, data_note: str, demand: ReadDemand | None,
                        util: float) -> ResumeVerdict:
    """The scale-down checks beyond age: fresh data, demand that fits the target, victims present,
    still a decrease once clamped."""
    spec = fleet.spec_replicas
    if data_note or demand is None:
        return ResumeVerdict(False, spec, f"not resumed: a scale-down needs fresh, complete data and this "
                                          f"cycle has {data_note or 'no samples'}: no fresh data; the policy re-decides it")
    wanted = math.ceil(demand.peak_replicas / util - 1e-9)
    if demand.queued > 0 or wanted > to:
        return ResumeVerdict(False, spec, f"not resumed: demand changed: {demand.peak_replicas:.1f} replicas of "
                                          f"demand and {demand.queued:g} queued now need {max(wanted, 1)} at "
                                          f"{util:.0%}, more than the target {to}; the policy re-decides on fresh data")
    ids = {r.name: r.replica for r in fleet.replicas}
    missing = [v for v in d.victims if v not in ids]
    if missing:
        return ResumeVerdict(False, spec, f"not resumed: victim(s) {', '.join(missing)[:300]} no longer in the "
                                          "fleet; the policy re-decides on fresh data")
    if to >= spec:
        return ResumeVerdict(False, spec, f"not resumed: {d.to_replicas} replicas clamped to {to}, "
                                          f"no decrease from {spec}")
    victims = tuple(dict.fromkeys(ids[v] for v in d.victims))[: spec - to]  # a forged row may repeat one
    note = APPLIED_AFTER_RESTART if to == d.to_replicas else f"{APPLIED_AFTER_RESTART} (clamped to {to} replicas)"
    return ResumeVerdict(True, to, note, victims)
