"""The replica lifecycle both simulator engines share: four phases, an explicit transition table.

A replica is born ``STARTING`` (requested, cold-starting) — or ``READY`` when it is part of the
warm fleet at t = 0 — and then moves only along :data:`TRANSITIONS`:

* ``STARTING → READY``: its cold start ended;
* ``STARTING → STOPPED``: a scale-down cancelled its cold start, or the run ended;
* ``READY → DRAINING``: a scale-down chose it; it takes no new requests;
* ``READY → STOPPED``: the run ended while it served;
* ``DRAINING → STOPPED``: its last in-flight request finished (or its expected drain elapsed).

With an asleep tier (:mod:`ebb.sim.sleepers`), a replica whose drain ends (``DRAINING → STOPPED``)
goes to sleep in the run's :class:`~ebb.sim.sleepers.SleepPool` when there is room, and
:meth:`Lifecycles.request` wakes a sleeper before it cold-starts one: the woken replica is a new id,
``STARTING`` for the tier's wake time — or, when the wake fails (the tier's ``fail``, seeded by the
run's seed), a cold start: the sleeper is released and the new id is an ordinary cold replica. Its sleep is billed from the pool's intervals, not from a
replica's log, so every replica log keeps one ready interval.

These are exactly the moves the engines make; :meth:`Lifecycles.move` refuses every other one
(including any move out of ``STOPPED``) with a :class:`ValueError` naming the replica and both
phases, before changing anything. A move costs one tuple lookup plus list appends; removal from
the live and ready lists is O(replicas), as before the table existed.

:class:`Lifecycles` owns the fleet's per-replica phase and its requested / ready / stopped times
(seconds on the run's clock, NaN = not reached), the live list (not ``STOPPED``, oldest first)
and the ready list (``READY``, in the order they became ready), and turns them into the run's
:class:`~ebb.sim.fleet.ReplicaLog` and :class:`~ebb.sim.fleet.FleetLog`. Every produced log has
``requested_s ≤ ready_s ≤ stopped_s`` wherever those times were reached, as long as the engine
moves with non-decreasing times (both do: their clocks never go back).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from enum import IntEnum
from types import MappingProxyType
from typing import Final

from ebb.model.decision import Decision
from ebb.model.ids import ReplicaId
from ebb.sim.fleet import FleetLog, ReplicaLog
from ebb.config.tiers import SleepTier
from ebb.sim.sleepers import SleepPool

__all__ = ["DRAINING", "READY", "STARTING", "STOPPED", "TRANSITIONS", "Lifecycles", "Phase", "is_legal"]


class Phase(IntEnum):
    """Where a replica is in its life. Values index :data:`TRANSITIONS`' lookup table."""

    STARTING = 0
    READY = 1
    DRAINING = 2
    STOPPED = 3


# Plain ints for the engines' hot loops: comparing an IntEnum member takes the slow generic path.
STARTING: Final[int] = int(Phase.STARTING)
READY: Final[int] = int(Phase.READY)
DRAINING: Final[int] = int(Phase.DRAINING)
STOPPED: Final[int] = int(Phase.STOPPED)

TRANSITIONS: Final[Mapping[Phase, frozenset[Phase]]] = MappingProxyType({
    Phase.STARTING: frozenset({Phase.READY, Phase.STOPPED}),
    Phase.READY: frozenset({Phase.DRAINING, Phase.STOPPED}),
    Phase.DRAINING: frozenset({Phase.STOPPED}),
    Phase.STOPPED: frozenset(),
})
"""Every legal move, from → {to}; nothing leaves ``STOPPED``."""

# _LEGAL[from][to]: the table above as nested tuples, so a move's check is two index operations.
_LEGAL: Final[tuple[tuple[bool, ...], ...]] = tuple(
    tuple(to in TRANSITIONS[frm] for to in Phase) for frm in Phase)


def is_legal(frm: int, to: int) -> bool:
    """True when :data:`TRANSITIONS` allows ``frm → to`` (phases as :class:`Phase` or its ints)."""
    return _LEGAL[frm][to]


class Lifecycles:
    """Per-replica phases and times of one run; ids are 0, 1, 2, ... in request order, never reused.

    The engines read :attr:`phase`, :attr:`live` and :attr:`ready` directly (bound to locals in
    their loops) and change them only through :meth:`add`, :meth:`move` and :meth:`stop_all`.
    """

    __slots__ = ("phase", "requested_s", "ready_s", "stopped_s", "live", "ready", "sleep", "_woken", "_ending")

    def __init__(self, tier: SleepTier | None = None, seed: int = 0) -> None:
        self.sleep = SleepPool(tier, seed)
        """The run's sleeping replicas (:mod:`ebb.sim.sleepers`): a drained replica sleeps while there
        is room, a requested one wakes a sleeper first; no tier, no sleeper. ``seed`` (the run's)
        decides which wakes fail under the tier's ``fail``."""
        self._woken: set[int] = set()
        self._ending = False
        self.phase: list[int] = []
        """Phase of replica ``rid`` (a :class:`Phase` value as a plain int)."""
        self.requested_s: list[float] = []
        self.ready_s: list[float] = []
        """NaN until it became ready."""
        self.stopped_s: list[float] = []
        """NaN until it stopped."""
        self.live: list[int] = []
        """Replicas not ``STOPPED``, oldest first."""
        self.ready: list[int] = []
        """``READY`` replicas, in the order they became ready (also oldest first: cold starts are
        equal, so later requests become ready later)."""

    def __len__(self) -> int:
        return len(self.phase)

    def add(self, t: float, *, warm: bool) -> int:
        """A new replica requested at ``t``: ``READY`` at once when ``warm`` (the fleet at t = 0),
        else ``STARTING``. Returns its id (the number of replicas before it)."""
        rid = len(self.phase)
        self.phase.append(READY if warm else STARTING)
        self.requested_s.append(t)
        self.ready_s.append(t if warm else math.nan)
        self.stopped_s.append(math.nan)
        self.live.append(rid)
        if warm:
            self.ready.append(rid)
        return rid

    def keep_asleep(self, t: float, wanted: int | None) -> None:
        """After a decision at ``t``: release the oldest sleepers past ``wanted`` (None: keep them,
        the tier's TTL decides)."""
        if wanted is not None:
            self.sleep.release(t, wanted)

    def request(self, t: float, cold_s: float) -> tuple[int, float]:
        """A replica requested at ``t`` by a scale-up: a sleeper woken when one sleeps, else a cold
        start — also when the wake fails (a tier fault: the sleeper is released at ``t``). Returns its
        id (``STARTING``) and the seconds until it serves (the tier's wake time or ``cold_s``)."""
        wake_s = self.sleep.wake(t)
        rid = self.add(t, warm=False)
        if wake_s is None:
            return rid, cold_s
        self._woken.add(rid)
        return rid, wake_s

    def move(self, rid: int, to: int, t: float) -> None:
        """Move replica ``rid`` to phase ``to`` at time ``t``; :class:`ValueError` (naming the replica,
        its phase and ``to``) when :data:`TRANSITIONS` does not allow it, with nothing changed."""
        frm = self.phase[rid]
        if not is_legal(frm, to):
            raise ValueError(f"replica {rid}: illegal lifecycle move {Phase(frm).name} -> {Phase(to).name} "
                             f"at t={t!r} s")
        self.phase[rid] = to
        if to == READY:
            self.ready_s[rid] = t
            self.ready.append(rid)
            return
        if frm == READY:
            self.ready.remove(rid)
        if to == STOPPED:
            self.stopped_s[rid] = t
            self.live.remove(rid)
            # a drain that ended, or a woken replica cancelled before it served, sleeps (room permitting)
            if not self._ending and (frm == DRAINING or rid in self._woken):
                self.sleep.put(t)

    def starting(self) -> list[int]:
        """Replicas still ``STARTING``, oldest first."""
        phase = self.phase
        return [rid for rid in self.live if phase[rid] == STARTING]

    def stop_all(self, t: float) -> None:
        """Stop every live replica at ``t`` (the end of the run), oldest first; none goes to sleep."""
        self._ending = True
        for rid in list(self.live):
            self.move(rid, STOPPED, t)

    def logs(self) -> tuple[ReplicaLog, ...]:
        """One :class:`ReplicaLog` per replica, in id order."""
        return tuple(ReplicaLog(ReplicaId(rid), req, ready, stop)
                     for rid, (req, ready, stop) in enumerate(zip(self.requested_s, self.ready_s, self.stopped_s)))

    def fleet_log(self, *, scale_ups: int, scale_downs: int, end_s: float,
                  decisions: list[tuple[float, int, int]], noteworthy: list[Decision]) -> FleetLog:
        """The run's :class:`FleetLog`: these replicas plus the engine's decision counts and records."""
        return FleetLog(self.logs(), scale_ups, scale_downs, end_s=end_s, decisions=tuple(decisions),
                        noteworthy=tuple(noteworthy), asleep=self.sleep.close(end_s), wakeups=self.sleep.wakeups,
                        failed_wakes=self.sleep.failed_wakes)
