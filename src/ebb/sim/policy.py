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
"""

from __future__ import annotations

from ebb.decide.base import Policy
from ebb.model.observation import FineSignals, Observation, Pipeline, PodView

__all__ = ["FineSignals", "Observation", "Pipeline", "PodView", "Policy"]
