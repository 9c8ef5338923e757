"""What a policy builder may use besides its spec: the run's settings and the oracle's schedule."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ebb.sim.settings import SimSettings


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
