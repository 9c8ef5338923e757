"""The live controller's own locks on a decision: replica bounds, no scale-down on untrusted data, narrowing only.

Pure functions (logging aside) the controller applies to every decision after the policy's, whatever
the policy said:

* **Replica bounds hold.** :func:`locked` clamps the target to ``[min_replicas, max_replicas]``
  (:func:`ebb.decide.records.clamp`, logged) — for the policy's decisions and a rollback's alike.
* **No scale-down on data it cannot trust.** :func:`locked` then turns a scale-down planned while the
  cycle's data is stale, unreachable or an incomplete fleet into a veto
  (:func:`ebb.decide.records.stale_data_veto`): the second of two independent locks (the policy
  vetoes it too). Scale-ups go through: adding capacity is the safe side.
* **A commit may only narrow.** :func:`narrowed` accepts a decision a cluster-level step made of a
  proposal only when it has the same ``from_replicas`` and a target between the proposal's ``from``
  and ``to`` (fewer replicas removed or added, other victims, a veto), which keeps it within both
  locks; a wider one is refused and logged as the bug it is — a scale-down proposal then becomes a
  veto, anything else goes as proposed.
"""

from __future__ import annotations

import logging

from ebb.decide.records import clamp, stale_data_veto
from ebb.model.decision import Decision

__all__ = ["locked", "narrowed"]

log = logging.getLogger("ebb.live.controller")


def locked(d: Decision, unfit: str, *, min_replicas: int, max_replicas: int) -> tuple[Decision, str]:
    """``d`` within the replica bounds, then a scale-down vetoed when ``unfit`` says why the data
    cannot back one ("" when it can). Returns the decision and the lock's veto ("" if none)."""
    bounded = clamp(d, min_replicas, max_replicas)
    if bounded is not d:
        log.warning("policy asked for %d replicas; clamped to [%d, %d]", d.to_replicas, min_replicas, max_replicas)
    out = stale_data_veto(bounded, unfit) if unfit else bounded
    return out, (out.vetoes[-1] if out is not bounded else "")


def narrowed(proposed: Decision, decided: Decision) -> Decision:
    """``decided`` when it narrows ``proposed`` (module docstring); otherwise the safe side."""
    lo, hi = sorted((proposed.from_replicas, proposed.to_replicas))
    if decided.from_replicas == proposed.from_replicas and lo <= decided.to_replicas <= hi:
        return decided
    log.error("refused a decision %d→%d that widens the proposal %d→%d", decided.from_replicas,
              decided.to_replicas, proposed.from_replicas, proposed.to_replicas)
    if proposed.action != "scale_down":
        return proposed
    return proposed.retarget(proposed.from_replicas, veto="scale-down blocked by the controller: a cluster step "
                             f"asked {decided.from_replicas}→{decided.to_replicas}, beyond the proposal")
