"""Fake :class:`~ebb.sim.policy.Policy` implementations for engine tests: fixed, stepped, recording."""

from __future__ import annotations

from dataclasses import dataclass, field

from ebb.sim.policy import Observation, Pipeline

__all__ = ["FixedPolicy", "RecordingPolicy", "StepPolicy"]


@dataclass
class FixedPolicy:
    """Always the same count."""

    replicas: int
    spec: str = "fixed"
    interval_s: float = 1.0
    pipeline: Pipeline = field(default_factory=lambda: Pipeline(1, 1))

    def decide(self, obs: Observation) -> int:
        return self.replicas


@dataclass
class StepPolicy:
    """``steps`` = ((t0, n0), (t1, n1), ...): answers the count of the last step at or before t."""

    steps: tuple[tuple[float, int], ...]
    spec: str = "step"
    interval_s: float = 1.0
    pipeline: Pipeline = field(default_factory=lambda: Pipeline(1, 1))

    def decide(self, obs: Observation) -> int:
        n = self.steps[0][1]
        for t, k in self.steps:
            if obs.t_s >= t:
                n = k
        return n


@dataclass
class RecordingPolicy:
    """A fixed count that keeps every observation it was shown."""

    replicas: int
    pipeline: Pipeline
    spec: str = "recording"
    interval_s: float = 1.0
    seen: list[Observation] = field(default_factory=list)

    def decide(self, obs: Observation) -> int:
        self.seen.append(obs)
        return self.replicas
