"""``static``: a fixed replica count — by default the oracle's peak (what a careful team
provisions without autoscaling). Upper bound on cost among policies that meet the SLO."""

from __future__ import annotations

from dataclasses import dataclass, field

from ebb.sim.policy import Observation, Pipeline


@dataclass
class StaticPolicy:
    """Always answers ``replicas``."""

    replicas: int
    spec: str = "static"
    interval_s: float = 15.0
    pipeline: Pipeline = field(default_factory=Pipeline)

    def decide(self, obs: Observation) -> int:
        return self.replicas
