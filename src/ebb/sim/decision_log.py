"""A simulated run's decisions as ledger records (pure: records out, the CLI writes them).

One :class:`~ebb.model.decisions.CycleRecord` per decision cycle that did something: Ebb's
cycles carry its own explanation (signals, weights, vetoes, victims, plan); a baseline's
cycles carry what can be known from outside — the change and the policy that made it.
Decision ids are short and stable within a run: ``<run>-<policy#>-<n>`` (e.g. ``r7f3a-2-15``).
Timestamps are virtual seconds since the trace start, as nanoseconds.
"""

from __future__ import annotations

from typing import Any

from ebb.decide.records import decision_from_explanation
from ebb.model.decisions import CycleRecord
from ebb.model.ids import CycleId, DecisionId, RunId
from ebb.sim.results import PolicyRun


def run_cycles(run_id: str, policy_index: int, run: PolicyRun, target: str = "serving") -> list[CycleRecord]:
    """Ledger cycles for one policy's run, in time order."""
    pol = run.scorecard.policy
    out: list[CycleRecord] = []
    items: list[tuple[float, dict[str, Any]]] = []
    if run.explanations:
        items = [(float(e["t_s"]), e) for e in run.explanations]
    else:
        items = [(t, {"action": "scale_up" if b > a else "scale_down", "from": a, "to": b,
                      "reasons": [f"{pol} changed its target"]}) for t, a, b in run.decisions]
    prev: DecisionId | None = None
    for n, (t, e) in enumerate(items, start=1):
        did = DecisionId(f"{run_id}-{policy_index}-{n}")
        cid = CycleId(f"{run_id}-{policy_index}-c{n}")
        action = str(e.get("action", "hold"))
        rec = decision_from_explanation(
            e, decision_id=did, cycle_id=cid, run_id=RunId(run_id), ts_ns=int(round(t * 1e9)), target=target,
            policy=pol, caused_by=(prev,) if prev is not None and action == "scale_up" else ())
        out.append(CycleRecord(cycle_id=cid, run_id=RunId(run_id), ts_ns=rec.ts_ns, policy=pol, decisions=(rec,),
                               snapshot={"replicas": rec.from_replicas}))
        if action in ("scale_down", "scale_up"):
            prev = did
    return out
