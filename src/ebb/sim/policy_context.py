"""What a policy builder may use besides its spec: the run's settings and the oracle's schedule."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ebb.config.policy_specs import PolicySpecItem, param_int
from ebb.errors import ConfigError
from ebb.sim.settings import SimSettings

MAX_REPLICAS = 10_000
"""Most replicas a simulated policy may ask for (``max``, ``static:replicas``): the engines keep
per-replica state and snapshots, so a million-replica ``max`` hangs a run instead of answering; the
largest fleets serving one model are in the thousands of GPUs."""


@dataclass(frozen=True)
class PolicyContext:
    """What builders may use besides the spec: settings and the oracle's verified schedule."""

    settings: SimSettings
    oracle_schedule: npt.NDArray[np.int64]

    @property
    def initial_replicas(self) -> int:
        """Warm fleet at t=0 for every reactive policy: the static size (the oracle's peak), as
        when an autoscaler is switched on over an existing fleet — the same start for all, and
        the situation scale-down exists for. The oracle starts from its own schedule."""
        return self.oracle_peak

    @property
    def oracle_peak(self) -> int:
        return int(self.oracle_schedule.max()) if len(self.oracle_schedule) else 1

    def bounds(self, item: PolicySpecItem, *, min_lo: int = 0, min_default: int = 1) -> tuple[int, int]:
        """The spec's ``min`` (default ``min_default``, at least ``min_lo``) and ``max`` (default
        ``max(4, 2 × the oracle's peak)``: room to double the fleet); ConfigError when min > max."""
        mn = param_int(item, "min", min_default, lo=min_lo)
        mx = param_int(item, "max", min(MAX_REPLICAS, max(4, 2 * self.oracle_peak)), lo=1)
        if mx > MAX_REPLICAS:
            raise ConfigError(f"policy {item.text!r}: max={mx} exceeds the simulator's {MAX_REPLICAS:,} replicas")
        if mn > mx:
            raise ConfigError(f"policy {item.text!r}: min={mn} exceeds max={mx}")
        return mn, mx
