"""How long ``ebb simulate --cluster`` will take, measured before it runs and revised as it goes.

The cluster engine (:mod:`ebb.sim.cluster.engine`) steps every service once a simulated second, so
a policy's run costs about its cost per simulated second times the scenario's seconds; what one
second costs depends on the policy (Ebb's L1–L3 against a per-Deployment HPA), the number of services
and zones, and this machine as it is now. :func:`measure_cluster` runs each policy on the scenario's
first :func:`slice_seconds` seconds — the same inputs cut there — and scales each measured wall time
by the seconds ratio. The slice is at most :data:`SLICE_SHARE` of the scenario (so measuring costs at
most 5 % of the run) and at most :data:`SLICE_S_MAX` seconds; a scenario shorter than
:data:`SLICE_S_MIN` is measured whole. :meth:`ClusterEstimate.left_s` revises the time left from the
policies done: their wall time over their estimate scales the rest.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Final

from ebb.config.scenario import Scenario
from ebb.score.units import human_span, plural
from ebb.sim.cluster.records import ClusterInputs
from ebb.sim.cluster.run import run_policy

__all__ = ["SLICE_SHARE", "SLICE_S_MAX", "SLICE_S_MIN", "ClusterEstimate", "measure_cluster", "slice_inputs",
           "slice_seconds"]

SLICE_SHARE: Final = 0.05
"""The most of the scenario's seconds the measuring slice covers."""
SLICE_S_MAX: Final = 300
"""The longest measuring slice (simulated seconds)."""
SLICE_S_MIN: Final = 30
"""The shortest measuring slice (simulated seconds), unless the scenario is shorter."""


@dataclass(frozen=True)
class ClusterEstimate:
    """Each policy's expected wall time (s) for the whole scenario, and what it was measured on."""

    scenario: str
    seconds: int
    """The scenario's simulated seconds."""
    slice_s: int
    """The measuring slice (simulated seconds from the start)."""
    policies: tuple[str, ...]
    per_policy_s: tuple[float, ...]
    """Expected wall seconds per policy, in run order."""

    @property
    def expected_s(self) -> float:
        """The whole run's expected wall time (s)."""
        return float(sum(self.per_policy_s))

    def line(self) -> str:
        """The estimate, as said before the run: ``lending: 13 policies over 30 min: expected ≈ 8.7 s
        (measured on 5 % of the scenario)``."""
        share = 100.0 * self.slice_s / self.seconds if self.seconds else 100.0
        return (f"{self.scenario}: {plural(len(self.policies), 'policy', 'policies')} over {human_span(self.seconds)}: "
                f"expected ≈ {human_span(self.expected_s)} (measured on {share:.2g} % of the scenario)")

    def left_s(self, done: int, elapsed_s: float) -> float:
        """Time left (s) after the first ``done`` policies took ``elapsed_s``: the rest's estimate
        times how much slower (or faster) than estimated the done ones ran."""
        before = sum(self.per_policy_s[:done])
        ratio = elapsed_s / before if done and before > 0 else 1.0
        return float(sum(self.per_policy_s[done:])) * ratio


def slice_seconds(seconds: int) -> int:
    """The measuring slice for a scenario of ``seconds`` (see the module docstring)."""
    if seconds <= SLICE_S_MIN:
        return seconds
    return max(SLICE_S_MIN, min(SLICE_S_MAX, int(seconds * SLICE_SHARE)))


def slice_inputs(inp: ClusterInputs, seconds: int) -> ClusterInputs:
    """``inp`` cut to its first ``seconds`` (arrivals and batch demand), scored from its start."""
    return replace(inp, arrivals=inp.arrivals[:, :seconds], batch_demand=inp.batch_demand[:, :seconds],
                   warmup_s=0)


def measure_cluster(sc: Scenario, inp: ClusterInputs, policies: Sequence[str], *,
                    clock: Callable[[], float] = time.perf_counter) -> ClusterEstimate:
    """Each of ``policies`` run on the slice of ``inp`` (:func:`slice_inputs`), its wall time scaled
    to the scenario's seconds. A policy that cannot be built fails here as it would in the run."""
    seconds = inp.seconds
    k = slice_seconds(seconds)
    part = slice_inputs(inp, k) if k < seconds else inp
    per: list[float] = []
    for p in policies:
        t0 = clock()
        run_policy(sc, part, p, record_batches=False)
        per.append((clock() - t0) * (seconds / k if k else 1.0))
    return ClusterEstimate(sc.name, seconds, k, tuple(policies), tuple(per))
