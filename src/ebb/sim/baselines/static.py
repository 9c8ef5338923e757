"""``static``: a fixed replica count — by default the oracle's peak (what a careful team
provisions without autoscaling). Upper bound on cost among policies that meet the SLO."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ebb.model.decision import Decision
from ebb.model.spans import NO_SPANS, Spans
from ebb.sim.policy import Observation, Pipeline


@dataclass
class StaticPolicy:
    """Always answers ``replicas``."""

    replicas: int
    spec: str = "static"
    interval_s: float = 15.0
    pipeline: Pipeline = field(default_factory=Pipeline)

    def decide(self, obs: Observation, *, spans: Spans = NO_SPANS) -> Decision:
        frm = obs.spec_replicas  # 0 at the engines' initial call (no pods yet)
        return Decision.change(obs.t_s, frm, self.replicas, policy=self.spec,
                               reasons=(f"{self.spec}: fixed at {self.replicas}",))

    def next_change(self, t_s: float, spec_replicas: int) -> float:
        """``t_s`` while the target is not ``replicas``, else never (:class:`~ebb.sim.policy.Scheduled`)."""
        return t_s if max(0, self.replicas) != spec_replicas else math.inf

    def observe(self, obs: Observation) -> None:
        """Nothing to ingest: the answer never depends on what it sees."""

    def gate_queries(self) -> tuple[str, ...]:
        return ()
