"""The cluster engine's records: its inputs, what a policy sees each second, and the run's accounting.

Split from :mod:`ebb.sim.cluster.engine` (which re-exports every name) so the engine module holds the
step rules only. Arrays are numpy, indexed by online service (S), batch service (B), zone (Z) and
second (T) as each field says.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from ebb.sim.cluster.lending import ClusterTiers, Preemption, Wake

__all__ = ["ClusterInputs", "ClusterRun", "Explain", "KeepAsleep", "Policy", "PolicyStep", "WriteBatch"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True)
class ClusterInputs:
    """Everything the engine needs, as arrays (built by :mod:`ebb.sim.cluster.inputs`)."""

    names: tuple[str, ...]
    """Online service names (S)."""
    namespaces: IntArray
    """Namespace index per online service (S)."""
    class_index: IntArray
    """Workload class index per online service (S)."""
    priority: IntArray
    arrivals: npt.NDArray[np.int32]
    """Arrivals per second (S × T)."""
    capacity_rps: FloatArray
    service_s: FloatArray
    slo_s: FloatArray
    min_replicas: IntArray
    max_replicas: IntArray
    zone_mask: BoolArray
    """Zones each online service may use (S × Z)."""
    gpus: IntArray
    """GPUs per replica (S)."""
    may_borrow: BoolArray
    """Whether each online service's pods may use their namespace's elastic share (above its quota
    ``min``): by QoS class, :class:`~ebb.decide.quota.QuotaPolicy`'s rule (default: Guaranteed only)."""
    cold_start_s: IntArray
    batch_names: tuple[str, ...]
    batch_namespaces: IntArray
    batch_priority: IntArray
    batch_class_index: IntArray
    """Workload class index per batch service (B)."""
    batch_may_borrow: BoolArray
    """As ``may_borrow``, per batch service (B)."""
    batch_demand: FloatArray
    """GPUs wanted per second (B × T); whole GPUs are placed (rounded up)."""
    zones: tuple[str, ...]
    zone_gpus: IntArray
    namespace_names: tuple[str, ...]
    quota_min: IntArray
    """Guaranteed GPUs per namespace (0 = none)."""
    quota_max: IntArray
    """Cap per namespace (−1 = none)."""
    class_names: tuple[str, ...]
    initial: IntArray
    """Replicas at t = 0 per online service (started ready)."""
    warmup_s: int = 0
    """Seconds at the start that feed every policy but are not accounted (0: the whole span)."""
    tiers: ClusterTiers | None = None
    """Each online service's asleep tier (:mod:`ebb.sim.cluster.lending`); None: no service has one."""
    checkpoint_s: int = 0
    """Lending: seconds a preempted best-effort pod keeps its GPU to checkpoint (the scenario's ``lending:``)."""
    restart_gpu_s: float = 0.0
    """Lending: work a preemption costs the job per GPU taken (GPU-seconds)."""
    seed: int = 0
    """The scenario's seed (tier wake faults)."""

    @property
    def seconds(self) -> int:
        return int(self.arrivals.shape[1])


@dataclass
class PolicyStep:
    """What the engine hands the policy each second and gets back."""

    t_s: float
    arrivals: FloatArray
    served: FloatArray
    queue: FloatArray
    ready: IntArray
    starting: IntArray
    ready_by_zone: IntArray
    starting_by_zone: IntArray
    latency_ratio: FloatArray
    """Worst latency of the second / SLO per service (NaN when nothing arrived)."""
    wait_s: FloatArray
    """Per service, the wait (s) of a request arriving at the end of the second — its arrivals' longest
    (FIFO): the queue then over the service rate; inf with no ready replica."""
    wait_first_s: FloatArray
    """Per service, the wait (s) of a request arriving at its start (the queue it found); inf as above."""
    borrowed: IntArray
    """Replicas per service above their namespace's quota min, of the ones a controller reads (ready
    and starting; draining ones are leaving): :func:`ebb.decide.fleet_quota.borrowed_replicas`."""
    pending: IntArray
    """Replicas asked for but not placed yet (no free GPU in a zone the spread allows, or the quota)."""
    asleep: IntArray
    """Replicas asleep per service (an asleep tier; not in ``spec``: a scale-up wakes them first)."""

    @property
    def spec(self) -> IntArray:
        """What the Deployment's ``spec.replicas`` says: ready + starting + pending."""
        return np.asarray(self.ready + self.starting + self.pending)


Policy = Callable[[PolicyStep], "tuple[IntArray, IntArray | None]"]
"""step → (wanted replicas per service, order of scale-downs or None)."""

KeepAsleep = Callable[[], "IntArray | None"]
"""→ sleepers to keep per service after the decision just made (−1: no opinion; None: no tiers)."""

Explain = Callable[[int], "tuple[str, dict[str, float]]"]
"""service index → (one-line reason, signals) for the write being recorded now."""


@dataclass(frozen=True)
class WriteBatch:
    """Writes issued together (at most the write limit), at virtual time ``t_s``."""

    t_s: float
    services: tuple[int, ...]
    from_replicas: tuple[int, ...]
    to_replicas: tuple[int, ...]
    reasons: tuple[str, ...] = ()
    """Per write: why the policy asked (empty when the policy gives no explanation)."""
    signals: tuple[dict[str, float], ...] = ()
    """Per write: the numbers behind it (need, floor, weight, ...)."""


@dataclass
class ClusterRun:
    """Per-service and cluster accounting of one run."""

    gpu_s: FloatArray
    """GPU-seconds per online service (S)."""
    batch_gpu_s: FloatArray
    batch_unserved_gpu_s: FloatArray
    batch_demand_gpu_s: FloatArray
    requests: FloatArray
    violations: FloatArray
    max_skew: IntArray
    skew_breach_s: int
    """Seconds in which some service had zone skew > 1."""
    writes: int
    max_writes_per_100ms: int
    preemptions: int
    """Preemptions: one per (batch service, zone) evicted at once; each is in :attr:`preemption_log`."""
    quota_breach_s: int
    pending_replica_s: float
    asleep_gpu_s: FloatArray
    """Of :attr:`gpu_s`, GPU-seconds per online service held by sleeping replicas (asleep or draining to sleep)."""
    lent_gpu_s: FloatArray
    """Of :attr:`batch_gpu_s`, GPU-seconds per batch service run on sleepers' lent GPUs."""
    batch_lost_gpu_s: FloatArray
    """Work per batch service lost to preemptions (``restart_gpu_s`` per GPU preempted)."""
    batches: list[WriteBatch] = field(default_factory=list)
    series_t_s: list[float] = field(default_factory=list)
    series_gpus: list[IntArray] = field(default_factory=list)
    """GPUs per (service, zone) at each sample (S × Z), online services only."""
    series_batch_gpus: list[IntArray] = field(default_factory=list)
    preemption_log: list[Preemption] = field(default_factory=list)
    """Every preemption, in time order."""
    wakes: list[Wake] = field(default_factory=list)
    """Every wake of a sleeper, in time order (failed ones with a NaN delay)."""
