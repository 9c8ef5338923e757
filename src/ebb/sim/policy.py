"""The seam between the simulator and a scaling policy.

A :class:`Policy` (defined once, in :mod:`ebb.decide.base`, and re-exported here) is a reconcile
function on a fixed period: every ``interval_s`` of virtual time (or wall time, in the live loop)
it receives an :class:`Observation` — what the policy's metric pipeline would show it at that
instant, never the simulator's ground truth — and returns a :class:`~ebb.model.decision.Decision`.
It is synchronous, must not do I/O, and may keep state between calls (stabilisation windows,
scale events). The engine applies ``to_replicas`` and ``victims``: scale-up creates replicas that
serve after the cold start; scale-down drains (no request is dropped). The decisions worth
recording (:attr:`~ebb.model.decision.Decision.noteworthy`) are kept in the run's
:class:`~ebb.sim.fleet.FleetLog`.

Each policy declares the :class:`Pipeline` it reads through, so a baseline sees exactly as stale
and as averaged a value as it would in a real cluster.

A policy whose answers are known ahead (:class:`Scheduled`: the oracle's schedule, a fixed fleet)
tells the request engine when its next change is due; the engine skips the reconciles before it,
which would all have been plain holds.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from ebb.decide.base import Policy
from ebb.model.observation import FineSignals, Observation, Pipeline, PodView

__all__ = ["FineSignals", "Observation", "Pipeline", "PodView", "Policy", "Scheduled", "scheduled"]


@runtime_checkable
class Scheduled(Protocol):
    """A policy whose answer at a reconcile depends only on the reconcile's time and the target it
    sees: it reads no signal and keeps no state between reconciles."""

    def next_change(self, t_s: float, spec_replicas: int) -> float:
        """The first reconcile from ``t_s`` on (``t_s`` plus whole multiples of ``interval_s``) whose
        answer is not a hold at ``spec_replicas`` (``math.inf`` when none): the ones before it are
        plain holds, nothing recorded, so an engine may skip them."""
        ...


def scheduled(policy: Policy) -> Scheduled | None:
    """``policy`` as a :class:`Scheduled` whose reconciles an engine can skip exactly: it reads no fine
    samples (none pile up unread) and reconciles every whole number of seconds (the skipped times are
    whole numbers too, so the reconcile clock lands where one tick at a time would). None otherwise."""
    interval = float(policy.interval_s)
    if isinstance(policy, Scheduled) and policy.pipeline.fine_ms is None and interval >= 1 and interval.is_integer():
        return policy
    return None
