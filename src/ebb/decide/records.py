"""A policy's explanation (the dicts :class:`~ebb.decide.policy.EbbPolicy` appends to ``log``) as
ledger records — shared by the simulator's decision log and the live controller, so a decision reads
the same in ``ebb explain`` whichever clock made it. Pure: dicts in, frozen records out."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ebb.model.decisions import JSON, DecisionRecord
from ebb.model.ids import CycleId, DecisionId, RunId

__all__ = ["decision_from_explanation", "finite_floats"]

_ACTIONS = {"scale_up", "scale_down", "hold", "veto"}


def finite_floats(d: Mapping[str, Any]) -> dict[str, float]:
    """The finite numeric entries of ``d`` as floats (NaN, None, strings and booleans dropped)."""
    return {k: float(v) for k, v in d.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(float(v))}


def decision_from_explanation(e: Mapping[str, Any], *, decision_id: DecisionId, cycle_id: CycleId,
                              run_id: RunId, ts_ns: int, target: str, policy: str,
                              caused_by: tuple[DecisionId, ...] = (),
                              extra_plan: Mapping[str, JSON] | None = None) -> DecisionRecord:
    """One :class:`DecisionRecord` from one explanation entry; unknown actions become ``hold``."""
    action = str(e.get("action", "hold"))
    plan: dict[str, JSON] = {"policy": policy}
    plan.update({k: v for k, v in dict(e.get("plan", {})).items()
                 if isinstance(v, (str, int, float)) and not isinstance(v, bool)})
    if extra_plan:
        plan.update(extra_plan)
    return DecisionRecord(
        decision_id=decision_id, cycle_id=cycle_id, run_id=run_id, ts_ns=ts_ns, target=target,
        action=action if action in _ACTIONS else "hold",  # type: ignore[arg-type]
        from_replicas=int(e.get("from", 0)), to_replicas=int(e.get("to", 0)),
        reasons=tuple(str(r) for r in e.get("reasons", ())), signals=finite_floats(dict(e.get("signals", {}))),
        weights=finite_floats(dict(e.get("weights", {}))), vetoes=tuple(str(v) for v in e.get("vetoes", ())),
        victims=tuple(str(v) for v in e.get("victims", ())), plan=plan, caused_by=caused_by)
