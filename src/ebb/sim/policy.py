"""The seam between the simulator and a scaling policy.

A :class:`Policy` is a reconcile function on a fixed period: every ``interval_s`` of virtual time
(or wall time, in the live loop) it receives an :class:`Observation` — what the policy's metric
pipeline would show it at that instant, never the simulator's ground truth — and returns the
replica count it wants. It is synchronous, must not do I/O, and may keep state between calls
(stabilisation windows, scale events). The engine applies the answer: scale-up creates replicas
that serve after the cold start; scale-down drains (no request is dropped).

Each policy declares the :class:`Pipeline` it reads through, so a baseline sees exactly as stale
and as averaged a value as it would in a real cluster.
"""

from __future__ import annotations

from typing import Protocol

from ebb.model.observation import FineSignals, Observation, Pipeline, PodView, ScaleRequest

__all__ = ["FineSignals", "Observation", "Pipeline", "PodView", "Policy", "ScaleRequest"]


class Policy(Protocol):
    """A scaling policy: ``decide`` every ``interval_s`` seconds; synchronous, no I/O."""

    @property
    def spec(self) -> str:
        """The full spec string it was built from (``hpa:target=0.5``); the scorecard's ``policy``."""
        ...

    @property
    def interval_s(self) -> float:
        """Reconcile period (s): HPA ``--horizontal-pod-autoscaler-sync-period`` is 15 s."""
        ...

    @property
    def pipeline(self) -> Pipeline:
        """The metric pipeline this policy reads through."""
        ...

    def decide(self, obs: Observation) -> int | ScaleRequest:
        """Desired replica count (≥ 0), or a :class:`ScaleRequest` that also names victims."""
        ...
