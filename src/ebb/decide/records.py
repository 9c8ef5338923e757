"""Decisions as ledger records — the one place both clocks turn a :class:`Decision` into rows.

``ebb simulate --ledger`` (:mod:`ebb.sim.decision_log`) and the live controller
(:mod:`ebb.live.controller`) both call these functions, so a decision reads the same in
``ebb explain`` whichever clock made it. Pure: decisions in, frozen records out, no I/O.

Guarantees:

* :func:`decision_record` keeps every field of the decision; non-finite signals and weights (NaN =
  not measured) are dropped here and nowhere else; victims become the names ``victim_name`` gives
  (the actuator's worker or pod names live, ``replica-<id>`` in the simulator); the gate step, when
  any, is in ``plan`` as ``gate`` (query) and ``step``; ``plan.policy`` is the policy spec.
* :func:`caused_by` chains a scale-up to the last change before it (the event graph's causal edge:
  a scale-up after a scale-down is what a misjudged scale-down looks like).
* :func:`stale_data_veto` and :func:`clamp` are the controller's own locks as decisions: a vetoed
  scale-down keeps ``from``; a clamped decision stays inside ``[lo, hi]`` and says so in its reasons.
* :func:`outcome_cycle` is the second, write-ahead-closing record of an acted decision
  (``<cycle>-outcome``, snapshot ``outcome_of``, ``note`` and what the actuator reported).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

from ebb.model.decision import Decision
from ebb.model.decisions import JSON, CycleRecord, DecisionRecord
from ebb.model.ids import CycleId, DecisionId, ReplicaId, RunId

__all__ = ["caused_by", "clamp", "cycle_record", "decision_record", "outcome_cycle", "sim_victim_name",
           "stale_data_veto"]


def sim_victim_name(replica: ReplicaId) -> str:
    """The simulator's replica names (``replica-7``): its replicas have no other."""
    return f"replica-{int(replica)}"


def _finite(values: Mapping[str, float]) -> dict[str, float]:
    return {k: float(v) for k, v in values.items() if isinstance(v, (int, float)) and not isinstance(v, bool)
            and math.isfinite(float(v))}


def _plan(d: Decision, extra: Mapping[str, JSON] | None) -> dict[str, JSON]:
    plan: dict[str, JSON] = {"policy": d.policy}
    plan.update({k: v for k, v in d.plan.items()
                 if isinstance(v, (str, int, float)) and not isinstance(v, bool)
                 and not (isinstance(v, float) and not math.isfinite(v))})
    if d.gate is not None:
        plan["gate"] = d.gate.query
        plan["step"] = d.gate.step
        if d.gate.verdict:
            plan["verdict"] = d.gate.verdict
    if extra:
        plan.update(extra)
    return plan


def caused_by(d: Decision, previous_change: DecisionId | None) -> tuple[DecisionId, ...]:
    """``(previous_change,)`` for a scale-up that follows a recorded change; () otherwise."""
    return (previous_change,) if previous_change is not None and d.action == "scale_up" else ()


def decision_record(d: Decision, *, decision_id: DecisionId, cycle_id: CycleId, run_id: RunId, ts_ns: int,
                    target: str, victim_name: Callable[[ReplicaId], str] = sim_victim_name,
                    caused: tuple[DecisionId, ...] = (),
                    extra_plan: Mapping[str, JSON] | None = None) -> DecisionRecord:
    """The ledger's :class:`DecisionRecord` of ``d`` (see the module docstring)."""
    return DecisionRecord(
        decision_id=decision_id, cycle_id=cycle_id, run_id=run_id, ts_ns=ts_ns, target=target,
        action=d.action, from_replicas=d.from_replicas, to_replicas=d.to_replicas, reasons=d.reasons,
        signals=_finite(d.signals), weights=_finite(d.weights), vetoes=d.vetoes,
        victims=tuple(victim_name(v) for v in d.victims), plan=_plan(d, extra_plan), caused_by=caused)


def cycle_record(rec: DecisionRecord, *, policy: str, snapshot: Mapping[str, JSON],
                 fencing_token: int = 0) -> CycleRecord:
    """The cycle holding the one decision ``rec`` (its ids and time), with the state it saw."""
    return CycleRecord(cycle_id=rec.cycle_id, run_id=rec.run_id, ts_ns=rec.ts_ns, policy=policy,
                       decisions=(rec,), snapshot=snapshot, fencing_token=fencing_token)


def outcome_cycle(cycle: CycleRecord, of: DecisionId, *, ts_ns: int, note: str,
                  result: Mapping[str, JSON] | None = None, fencing_token: int = 0) -> CycleRecord:
    """The outcome of decision ``of`` of ``cycle``: cycle ``<cycle>-outcome`` with no decisions and a
    snapshot of ``outcome_of``, ``note`` and the actuator's ``result`` fields (applied, replicas
    before/after, removed, added) when it was called."""
    snap: dict[str, JSON] = {"outcome_of": of, "note": note}
    if result is not None:
        snap.update(result)
    return CycleRecord(cycle_id=CycleId(f"{cycle.cycle_id}-outcome"), run_id=cycle.run_id, ts_ns=ts_ns,
                       policy="actuator", decisions=(), snapshot=snap, fencing_token=fencing_token)


def stale_data_veto(d: Decision, why: str) -> Decision:
    """``d`` with a scale-down turned into a veto (``from`` kept): the controller's own lock against
    scaling down on data it cannot trust. Any other decision is returned unchanged."""
    if d.action != "scale_down":
        return d
    return d.retarget(d.from_replicas, veto=f"scale-down blocked by the controller: {why}")


def clamp(d: Decision, lo: int, hi: int) -> Decision:
    """``d`` with ``to_replicas`` inside ``[lo, hi]``; unchanged when it already is."""
    if lo <= d.to_replicas <= hi:
        return d
    return d.retarget(min(hi, max(lo, d.to_replicas)), reason=f"clamped to [{lo}, {hi}] replicas")
