"""A fleet Ebb observes but does not own: what ``ebb run --mode recommend`` uses for a local fleet.

Recommend mode records decisions and changes nothing, so it must not start a router or worker
processes either (the local actuator spawns its fleet when created). :class:`ObservedFleet` stands
for the workers someone else runs, named ``worker-1`` … ``worker-N`` as the local actuator names
them, zones ``a, b, c`` in turn:

* **Its size.** ``ObservedFleet(N)`` (``--workers N``) is ``N`` workers, ready since the controller
  started, unchanged. ``ObservedFleet()`` (no ``--workers``) has the size the signal source reports:
  the replicas behind its freshest read (:class:`~ebb.actuate.base.SizedBySource`: the controller tells
  it each cycle), never a guessed one. Until the source has reported a size, ``state()`` raises a
  :class:`~ebb.errors.TransientError` saying what is needed (the cycle ends with no action); a worker
  joining is ready from the read that first showed it, and the newest go first when the count falls.
* ``state()`` does no I/O and starts no process or port.
* ``apply()`` is refused with a :class:`~ebb.errors.PermanentError`: a controller in recommend mode
  never applies (``Controller`` checks its mode first), so reaching it is a wiring bug, and failing
  loudly is better than pretending the fleet changed.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from ebb.actuate.base import ActuationResult, FleetState, ReplicaState
from ebb.errors import ConfigError, PermanentError, TransientError
from ebb.model.ids import DecisionId, ReplicaId
from ebb.model.observation import ScaleRequest

__all__ = ["ObservedFleet", "SIZE_UNKNOWN"]

SIZE_UNKNOWN = ("the observed fleet's size is not known yet: the source has not reported how many replicas it "
                "reads (fix: wait for the source to answer, or give --workers N, or --actuator kubernetes "
                "--deployment NAME to read the Deployment)")
"""What ``state()`` says while a fleet sized by its source has no size."""


class ObservedFleet:
    """Workers observed, never changed (see the module docstring); ``replicas`` None: sized by the source."""

    def __init__(self, replicas: int | None = None, *, name: str = "local/serving",
                 zones: tuple[str, ...] = ("a", "b", "c"), clock: Callable[[], float] = time.time) -> None:
        if (replicas is not None and replicas < 0) or not zones:
            raise ConfigError(f"an observed fleet needs replicas >= 0 and one zone at least; got {replicas}, {zones!r}")
        self.target = name
        self.zones = zones
        self._clock = clock
        self.sized_by_source = replicas is None
        """Whether the size follows the source (no ``--workers``)."""
        self._replicas: list[ReplicaState] = []
        self._known = False
        if replicas is not None:
            self._resize(replicas)

    def _resize(self, n: int) -> None:
        now = self._clock()
        del self._replicas[n:]
        for i in range(len(self._replicas) + 1, n + 1):
            self._replicas.append(ReplicaState(ReplicaId(i), f"worker-{i}", now, now, self.zones[i % len(self.zones)]))
        self._known = True

    def source_saw(self, replicas: int | None) -> None:
        """The source's freshest read covered ``replicas`` (ignored with a fixed ``--workers`` size)."""
        if self.sized_by_source and replicas is not None and replicas >= 0:
            self._resize(replicas)

    def state(self) -> FleetState:
        if not self._known:
            raise TransientError(SIZE_UNKNOWN)
        return FleetState(self.target, len(self._replicas), tuple(self._replicas))

    def apply(self, decision_id: DecisionId, request: ScaleRequest) -> ActuationResult:
        raise PermanentError(f"{self.target}: the fleet is observed in recommend mode, never changed "
                             f"(decision {decision_id} asked for {request.replicas} replicas); run with --mode act "
                             "to let Ebb scale a fleet it starts")
