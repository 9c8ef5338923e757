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

from dataclasses import dataclass
from typing import Protocol

from ebb.model.ids import ReplicaId


@dataclass(frozen=True)
class Pipeline:
    """How a metric reaches the policy: sampled every ``period_s`` and averaged over ``window_s``.

    The value a policy sees at time t is the average of the true signal over
    ``[s − window_s, s]`` where ``s`` is the last sample instant ≤ t (multiples of ``period_s``
    shifted by ``offset_s``). Examples: Prometheus scraping every 30 s a gauge averaged by its
    exporter over 30 s (DCGM defaults) → ``Pipeline(30, 30)``; metrics-server at
    ``--metric-resolution=60s`` → ``Pipeline(60, 60)``; an Ebb agent → ``Pipeline(1, 1)``.
    """

    period_s: int = 30
    """Sampling period (s) of the last hop before the policy (scrape / resolution). Integer."""
    window_s: int = 30
    """Averaging window (s) of the sampled value (exporter interval / rate() range). Integer."""
    offset_s: int = 0
    """Phase of the sampling grid (s); real scrapes are not aligned with the policy's sync."""
    per_pod: bool = True
    """Whether the policy reads per-pod values; False skips building them (the oracle reads none)."""

    def __post_init__(self) -> None:
        if self.period_s < 1 or self.window_s < 1 or self.offset_s < 0:
            raise ValueError(f"Pipeline needs period_s>=1, window_s>=1, offset_s>=0; got {self!r}")


@dataclass(frozen=True)
class PodView:
    """One replica as the policy sees it (values through its pipeline; None = no sample yet)."""

    replica: ReplicaId
    created_s: float
    """When the replica was requested (pod creation)."""
    ready_s: float | None
    """When it became ready to serve; None while it is cold-starting."""
    util_ratio: float | None
    """GPU busy fraction in [0, 1] (NVML/DCGM ``GPU_UTIL`` / 100) averaged over the pipeline window."""
    inflight: float | None
    """Requests running or queued on the replica at the sample instant (vLLM-style gauge)."""
    qps: float | None
    """Requests completed per second on the replica over the pipeline window."""


@dataclass(frozen=True)
class Observation:
    """What a policy sees at one reconcile."""

    t_s: float
    spec_replicas: int
    """The current target (``scale.spec.replicas``): starting + ready, draining excluded."""
    ready_replicas: int
    pods: tuple[PodView, ...]
    """Replicas counted in ``spec_replicas``, oldest first."""
    total_qps: float | None
    """Arrivals per second over the pipeline window, as a Prometheus ``sum(rate(...))`` shows it."""
    total_inflight: float | None
    """Requests running or queued anywhere (router queue included), at the last sample."""
    queued: float | None
    """Requests waiting at the router for a free slot, at the last sample."""


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

    def decide(self, obs: Observation) -> int:
        """Desired replica count (≥ 0) given the observation."""
        ...
