"""A fleet Ebb observes but does not own: what ``ebb run --mode recommend`` uses for a local fleet.

Recommend mode records decisions and changes nothing, so it must not start a router or worker
processes either (the local actuator spawns its fleet when created). :class:`ObservedFleet` stands
for the ``N`` workers someone else runs (``--workers N``, named ``worker-1`` … ``worker-N`` as the
local actuator names them, zones ``a, b, c`` in turn, ready since the controller started):

* ``state()`` is that fleet, unchanged: no I/O, no process, no port.
* ``apply()`` is refused with a :class:`~ebb.errors.PermanentError`: a controller in recommend mode
  never applies (``Controller`` checks its mode first), so reaching it is a wiring bug, and failing
  loudly is better than pretending the fleet changed.
"""

from __future__ import annotations

import time

from ebb.actuate.base import ActuationResult, FleetState, ReplicaState
from ebb.errors import ConfigError, PermanentError
from ebb.model.ids import DecisionId, ReplicaId
from ebb.model.observation import ScaleRequest

__all__ = ["ObservedFleet"]


class ObservedFleet:
    """``replicas`` workers observed, never changed (see the module docstring)."""

    def __init__(self, replicas: int, *, name: str = "local/serving", zones: tuple[str, ...] = ("a", "b", "c")) -> None:
        if replicas < 0 or not zones:
            raise ConfigError(f"an observed fleet needs replicas >= 0 and one zone at least; got {replicas}, {zones!r}")
        since = time.time()
        self.target = name
        self._state = FleetState(name, replicas, tuple(
            ReplicaState(ReplicaId(i), f"worker-{i}", since, since, zones[i % len(zones)]) for i in range(1, replicas + 1)))

    def state(self) -> FleetState:
        return self._state

    def apply(self, decision_id: DecisionId, request: ScaleRequest) -> ActuationResult:
        raise PermanentError(f"{self.target}: the fleet is observed in recommend mode, never changed "
                             f"(decision {decision_id} asked for {request.replicas} replicas); run with --mode act "
                             "to let Ebb scale a fleet it starts")
