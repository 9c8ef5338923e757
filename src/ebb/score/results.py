"""What one simulated policy run produces: a scorecard (numbers) and a timeline (for plots).

Both fidelities (``request`` and ``fluid``) fill the same records, so reports and comparisons
never care which one ran.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from ebb.model.decision import Decision

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class Scorecard:
    """One policy on one trace. Units are in the field names; latencies over completed requests."""

    policy: str
    """The full policy spec as given (``hpa:target=0.5``)."""
    trace: str
    fidelity: str
    """``request`` or ``fluid``."""
    requests: int
    gpu_hours: float
    """Replica-seconds billed / 3600: a replica is billed from the moment it is requested
    (cold start included) until its drain finishes — and while it sleeps, with an asleep tier (a
    sleeping replica holds its GPU: :attr:`asleep_gpu_hours` of these served nothing)."""
    cost_usd: float
    slo_violations: int
    """Requests whose TTFT or end-to-end latency exceeded the SLO (dropped requests count too)."""
    slo_violation_pct: float
    ttft_p50_ms: float
    ttft_p99_ms: float
    e2e_p50_ms: float
    e2e_p99_ms: float
    scale_ups: int
    """Number of decisions that raised the replica target."""
    scale_downs: int
    dropped_requests: int
    peak_replicas: int
    mean_replicas: float
    slo_ttft_ms: float
    slo_e2e_ms: float
    wall_s: float
    """Wall time the simulation of this policy took (not part of the comparison)."""
    misjudged_scale_downs: int = 0
    """Scale-downs followed within cold start + 60 s by an SLO breach or a forced scale-up
    (definition: :mod:`ebb.sim.judgement`)."""
    sla_violation_delay_ms: float = float("nan")
    """Median time from the start of an SLO breach episode to the policy's next scale-up."""
    canary_passes: int = 0
    """Canary scale-downs whose gate passed (policies with a canary guard)."""
    canary_aborts: int = 0
    """Canary scale-downs aborted and compensated (restored to the pre-state)."""
    breach_episodes: int = 0
    """SLO breach episodes (10 s bins with ≥ 1 % violating requests, merged when consecutive)."""
    warmup_s: float = 0.0
    """Seconds at the start of the trace that fed the policy but were not judged or billed: every
    figure above counts from this time on (:mod:`ebb.sim.warmup`); 0 = the whole run."""
    asleep_gpu_hours: float = 0.0
    """Of :attr:`gpu_hours`, those billed while replicas slept (an asleep tier, :mod:`ebb.sim.sleepers`):
    held, lendable HBM, no service. Running GPU-hours = ``gpu_hours - asleep_gpu_hours``."""
    wakeups: int = 0
    """Sleeping replicas woken by scale-ups (each ready after the tier's wake time, not a cold start),
    failed wakes included."""
    failed_wakes: int = 0
    """Of :attr:`wakeups`, those that failed (the tier's ``fail``, a tier fault): the sleeper was
    released and a cold replica started instead."""
    released_replica_hours: float = 0.0
    """Replica-hours put away with their GPU released (a snapshot tier, after its save): not in
    :attr:`gpu_hours`, not billed; each comes back in the tier's restore time."""

    @property
    def running_gpu_hours(self) -> float:
        """GPU-hours of replicas starting, serving or draining (billed minus asleep)."""
        return self.gpu_hours - self.asleep_gpu_hours

    def as_dict(self) -> dict[str, Any]:
        """Every field by name; ``warmup_s`` only when a warm-up was used and the tier's fields only
        with a tier (so a run without them writes the same JSON as before they existed)."""
        out = asdict(self)
        if not self.warmup_s:
            del out["warmup_s"]
        if not self.asleep_gpu_hours and not self.wakeups and not self.released_replica_hours:
            del out["asleep_gpu_hours"], out["wakeups"], out["failed_wakes"], out["released_replica_hours"]
        return out


@dataclass(frozen=True)
class Timeline:
    """Per-bin series of one run; every array has ``len(t_s)`` entries; bins are ``bin_s`` wide.

    Latency arrays hold NaN in bins where no request (by arrival) completed.
    """

    t_s: FloatArray
    """Start of each bin, seconds since the trace start."""
    bin_s: float
    demand_rps: FloatArray
    """Arrivals per second in the bin (the same for every policy on a trace)."""
    replicas: FloatArray
    """Mean billed replicas over the bin (starting + ready + draining)."""
    ready_replicas: FloatArray
    """Mean replicas able to take new requests over the bin."""
    ttft_p50_ms: FloatArray
    ttft_p99_ms: FloatArray
    e2e_p50_ms: FloatArray
    e2e_p99_ms: FloatArray
    violations: IntArray
    """SLO-violating requests, by arrival bin."""


@dataclass(frozen=True)
class PolicyRun:
    """A scorecard with its timeline and the policy's decisions."""

    scorecard: Scorecard
    timeline: Timeline
    decisions: tuple[tuple[float, int, int], ...] = ()
    """Every change of the replica target: (time s, from, to)."""
    noteworthy: tuple[Decision, ...] = ()
    """The policy's decisions worth recording, in time order (:attr:`Decision.noteworthy`: changes,
    recorded vetoes, canary gate steps; the initial fleet excluded). Each carries its own
    explanation: Ebb's signals, weights, vetoes, victims and plan; a baseline's change and reason."""
