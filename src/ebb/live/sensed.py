"""What a controller cycle read, and the small conversions around it (pure, no I/O).

:class:`Sensed` is one cycle's (or fast-path tick's) read of the source and the fleet, with why the
data cannot back a scale-down; :func:`rebase` maps an agent's Unix-stamped samples onto the policy's
monotonic timeline; :func:`actuated` and :func:`victim_names` turn the actuator's answers into ledger
fields.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from ebb.actuate.base import ActuationResult, FleetState
from ebb.live.settings import CycleOutcome
from ebb.live.timeline import Tick
from ebb.model.decisions import JSON
from ebb.model.ids import DecisionId, ReplicaId
from ebb.model.live import LiveSignals
from ebb.model.observation import FineSignals

__all__ = ["Sensed", "actuated", "empty_fine", "rebase", "victim_names"]


@dataclass(frozen=True)
class Sensed:
    """What one cycle read before deciding: the source's signals and the fleet."""

    sig: LiveSignals
    state: FleetState
    note: str
    """Why the data is not fresh and complete (stale, unreachable, incomplete fleet); "" when it is."""
    stale_s: float | None
    """Age of the freshest sample ever seen (s); None when the source has never answered."""
    max_staleness_s: float

    @property
    def unfit(self) -> str:
        """Why this data must not back a scale-down; "" when it may."""
        if self.note:
            return self.note
        return "no fresh data" if self.stale_s is None or self.stale_s > self.max_staleness_s else ""

    def outcome(self, n: int, t_s: float, action: str, to_replicas: int, decision_id: DecisionId | None = None,
                *, acted: bool = False, note: str = "", signals: Mapping[str, float] | None = None) -> CycleOutcome:
        return CycleOutcome(n, t_s, action, self.state.spec_replicas, to_replicas, self.state.ready_replicas,
                            self.stale_s, decision_id, acted, note, dict(signals or {}))


def empty_fine() -> FineSignals:
    return FineSignals()


def rebase(f: FineSignals, tick: Tick) -> FineSignals:
    """Unix sample stamps onto the policy's monotonic timeline (by age; vectorised)."""
    offset = tick.wall_s - tick.t_s
    return FineSignals(t_s=f.t_s - offset, prefill_replicas=f.prefill_replicas, slot_replicas=f.slot_replicas,
                       queued=f.queued, done_t_s=f.done_t_s - offset, done_ttft_ms=f.done_ttft_ms,
                       done_e2e_ms=f.done_e2e_ms, done_weight=f.done_weight, done_wait_ms=f.done_wait_ms)


def actuated(res: ActuationResult) -> dict[str, JSON]:
    """The actuator's report as outcome snapshot fields."""
    return {"applied": res.applied, "replicas_before": res.replicas_before, "replicas_after": res.replicas_after,
            "removed": list(res.removed), "added": list(res.added)}


def victim_names(state: FleetState) -> Callable[[ReplicaId], str]:
    """Replica id → the actuator's name for it. An id the fleet does not hold (no policy should
    name one) gets a name no actuator gives, so a resume can never match it to a replica."""
    names = {r.replica: r.name for r in state.replicas}
    return lambda rid: names.get(rid, f"<unknown replica {int(rid)}>")
