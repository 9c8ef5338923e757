"""Fake :class:`~ebb.decide.base.Policy` implementations for engine tests: fixed, stepped, recording.

Each answers a :class:`~ebb.model.decision.Decision` from the observed target (from 0 at t = 0
with no pods, like every real policy) to its count, negative counts clamped to 0.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ebb.model.decision import Decision
from ebb.model.spans import NO_SPANS, Spans
from ebb.sim.policy import Observation, Pipeline

__all__ = ["FixedPolicy", "RecordingPolicy", "StepPolicy", "answer"]


def answer(obs: Observation, n: int, spec: str) -> Decision:
    """The decision that moves the observed target to ``n`` (≥ 0)."""
    frm = obs.spec_replicas  # 0 at the engines' initial call (no pods yet)
    return Decision.change(obs.t_s, frm, n, policy=spec, reasons=(f"{spec}: desired {n}",))


class _NoHistory:
    """``observe`` and ``gate_queries`` of a fake without history or gates."""

    def observe(self, obs: Observation) -> None:
        """Nothing to ingest: a fake's answer depends on the clock (or nothing) only."""

    def gate_queries(self) -> tuple[str, ...]:
        return ()


@dataclass
class FixedPolicy(_NoHistory):
    """Always the same count."""

    replicas: int
    spec: str = "fixed"
    interval_s: float = 1.0
    pipeline: Pipeline = field(default_factory=lambda: Pipeline(1, 1))

    def decide(self, obs: Observation, *, spans: Spans = NO_SPANS) -> Decision:
        return answer(obs, self.replicas, self.spec)


@dataclass
class StepPolicy(_NoHistory):
    """``steps`` = ((t0, n0), (t1, n1), ...): answers the count of the last step at or before t."""

    steps: tuple[tuple[float, int], ...]
    spec: str = "step"
    interval_s: float = 1.0
    pipeline: Pipeline = field(default_factory=lambda: Pipeline(1, 1))

    def decide(self, obs: Observation, *, spans: Spans = NO_SPANS) -> Decision:
        n = self.steps[0][1]
        for t, k in self.steps:
            if obs.t_s >= t:
                n = k
        return answer(obs, n, self.spec)


@dataclass
class RecordingPolicy(_NoHistory):
    """A fixed count that keeps every observation it was shown."""

    replicas: int
    pipeline: Pipeline
    spec: str = "recording"
    interval_s: float = 1.0
    seen: list[Observation] = field(default_factory=list)

    def decide(self, obs: Observation, *, spans: Spans = NO_SPANS) -> Decision:
        self.seen.append(obs)
        return answer(obs, self.replicas, self.spec)
