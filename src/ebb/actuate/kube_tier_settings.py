"""The Kubernetes asleep tier's settings, names and what it needs of its actuator (:mod:`ebb.actuate.kube_tier`).

Every name here is re-exported by :mod:`ebb.actuate.kube_tier`, whose docstring states the tier's
guarantees; :class:`TierSettings` validates every field on construction (:class:`~ebb.errors.ConfigError`
naming the bound).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Protocol

from ebb.actuate.base import ActuationResult
from ebb.actuate.kube_client import KubeDeployment, KubePod
from ebb.config.tiers import SleepTier
from ebb.errors import ConfigError
from ebb.model.ids import DecisionId, ReplicaId

__all__ = ["ASLEEP_ANNOTATION", "DEFAULT_DRAIN_BUDGET_S", "DRAINING_ANNOTATION", "RELEASE_COST", "ROUTABLE_LABEL",
           "SLEEPER_COST", "VICTIM_ANNOTATION", "WAKING_ANNOTATION", "TierOps", "TierSettings", "annotation_time"]

if TYPE_CHECKING:
    from contextlib import AbstractContextManager


class TierOps(Protocol):
    """What the tier needs of its actuator: its API calls (rate-limited, retried) and its lock."""

    target: str
    lock: AbstractContextManager[Any]
    max_retries: int
    backoff_s: float

    def clock(self) -> float: ...
    def read_deployment(self) -> KubeDeployment: ...
    def pods(self, selector: str) -> list[KubePod]: ...
    def patch_pod(self, name: str, annotations: Mapping[str, str | None],
                  labels: Mapping[str, str | None] | None = None) -> None: ...
    def patch_scale(self, want: int, resource_version: str) -> None: ...
    def write_intent(self, decision_id: DecisionId, dep: KubeDeployment, what: str) -> None: ...
    def added(self, selector: str, existing: set[str]) -> tuple[str, ...]: ...
    def emit_event(self, decision_id: DecisionId, dep: KubeDeployment, result: ActuationResult) -> None: ...
    def finish(self, result: ActuationResult, reason: str) -> ActuationResult: ...
    def replica_id(self, name: str) -> ReplicaId: ...
    def replica_names(self) -> dict[ReplicaId, str]: ...
    def zone(self, node: str) -> str: ...


ROUTABLE_LABEL: Final = "ebb.io/routable"
"""The label the workload's Service selects on (``"true"``); ``"false"`` takes a pod out of it."""
DRAINING_ANNOTATION: Final = "ebb.io/draining"
ASLEEP_ANNOTATION: Final = "ebb.io/asleep"
WAKING_ANNOTATION: Final = "ebb.io/waking"
VICTIM_ANNOTATION: Final = "ebb.dev/victim-of"
"""The decision that chose a draining pod."""
SLEEPER_COST: Final = -1000
"""``pod-deletion-cost`` of a sleeper: below a running pod's default 0."""
RELEASE_COST: Final = -2000
"""``pod-deletion-cost`` of a pod being released: below every sleeper's."""
DEFAULT_DRAIN_BUDGET_S: Final = 120.0
"""Longest drain (s) before the pod is released instead of slept: vLLM's own graceful shutdown
budget is its pod's ``terminationGracePeriodSeconds`` (30 s by default); long generations need more."""


@dataclass(frozen=True)
class TierSettings:
    """How the Kubernetes actuator runs its asleep tier (module docstring)."""

    tier: SleepTier
    engine_port: int = 8000
    """The engine's HTTP port in each pod (vLLM ``--port``, 8000 by default)."""
    drain_budget_s: float = DEFAULT_DRAIN_BUDGET_S
    settle_s: float = 2.0
    """Least drain time (s) before in-flight work is read: the endpoint leaves routers first."""
    sleep_level: int = 1
    tick_s: float = 0.2
    """How often drains are read from their engines (no API call), s."""
    scan_s: float = 5.0
    """How often the pods are listed (a drain resumed after a restart, the TTL), s: 2 API calls."""
    engine_timeout_s: float = 5.0
    """Bound on each engine call but ``/wake_up`` (which the wake deadline bounds), s."""

    def __post_init__(self) -> None:
        if not 1 <= self.engine_port <= 65535:
            raise ConfigError(f"engine port must be in [1, 65535], got {self.engine_port!r}")
        if not (0 < self.drain_budget_s <= 86400 and 0 <= self.settle_s <= self.drain_budget_s):
            raise ConfigError(f"drain budget must be in (0, 86400] s and the settle time in [0, budget], got "
                              f"{self.drain_budget_s!r} / {self.settle_s!r}")
        if self.sleep_level not in (1, 2):
            raise ConfigError(f"sleep level must be 1 or 2, got {self.sleep_level!r}")
        if not (0 < self.tick_s <= 10 and 0 < self.engine_timeout_s <= 60 and self.tick_s <= self.scan_s <= 3600):
            raise ConfigError(f"tick must be in (0, 10] s, the scan in [tick, 3600] s and the engine timeout in "
                              f"(0, 60] s, got {self.tick_s!r} / {self.scan_s!r} / {self.engine_timeout_s!r}")

    @property
    def wake_deadline_s(self) -> float:
        """A wake not done by then falls back to a cold start (:attr:`SleepTier.wake_deadline_s`)."""
        return self.tier.wake_deadline_s


def annotation_time(p: KubePod, key: str) -> float | None:
    """The Unix time (s) an annotation of ``p`` holds; None without it, 0.0 when unreadable."""
    try:
        return float(p.annotations[key]) if key in p.annotations else None
    except ValueError:
        return 0.0  # present but unreadable: the oldest possible, never blocks a release
