"""A live controller's rollback channel: a rollback proposed as the cycle's decision, carried out on commit.

SPEC §3.5, ``docs/rollback.md``. A gate that fails after a scale-down — the canary's metrics gate, a
gates file's post-scale-down check (both answer with a ``compensate`` gate step,
:mod:`ebb.gates.guard`) — or an operator's ``ebb review retry`` of a review item of this run becomes
a :class:`~ebb.live.compensation.CompensationRequest` for the gated scale-down (the root event),
queued in :attr:`RollbackChannel.queue` (:mod:`ebb.live.rollback_queue`). The controller's cycle
proposes :meth:`RollbackChannel.proposal` instead of a plain scale-up; its commit hands the proposal
to :meth:`RollbackChannel.committed`.

Guarantees:

* **Planned from the ledger, once.** The proposed decision is the scale-up back to the root's
  pre-state for this controller's target (:meth:`~ebb.live.compensation.Compensator.plan`, the
  event graph of the run's recorded scale-downs: one read of the ledger); a malformed causal graph
  plans nothing (logged) and the commit sends the root to review. The controller then puts it
  through its own locks (replica bounds, stale data). The proposal carries the plan and the fleet
  the cycle read; the commit carries them out without planning or reading them again.
* **Within the commit's cap.** :meth:`RollbackChannel.committed` restores at most the replicas the
  committed decision allows (a veto: none beyond ``from``; a cluster step's narrowing: a fleet's
  namespace quota), the reason being the veto, the cluster step's reasons or the clamp.
* **Exactly once, within budget.** :class:`~ebb.live.compensation.Compensator` walks the event graph
  and compensates in dependency order through the actuator, each step a write-ahead ledger
  decision with an id derived from its event, idempotent, within the 0.8 s budget, every write
  fenced with the leader's token; what cannot be compensated (over ``max_replicas`` or what a
  cluster step left room for, the actuator refusing, the budget out) goes to the review queue
  with the reason. Steps a predecessor recorded are checked before they are applied (this
  request's ids, this run, the target, within ``max_replicas`` and the cap); a record that fails
  the check sends the root to review. The request then leaves the queue.
* **Kept when refused, final otherwise.** A request the ledger, the compensation log or the
  leadership refused stays queued and is tried again next cycle (counted in
  ``ebb_ledger_write_errors_total``, logged); a controller restarted mid-compensation finds the
  request without its done record and resumes it — each step applied exactly once. Any other
  error ends the request (:meth:`RollbackChannel.abandon`): its root goes to the review queue (best
  effort, logged) and the policy decides again next cycle; a restart does not resume it
  (:meth:`~ebb.live.rollback_queue.RollbackQueue.resume`).
* **One review log.** The compensation log (:func:`~ebb.ledger.review.compensation_log_for`, next
  to the ledger) is opened on first use unless one was given, and closed by
  :meth:`RollbackChannel.close` when the channel opened it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from ebb.actuate.base import Actuator
from ebb.errors import EbbError
from ebb.ledger.base import Ledger
from ebb.ledger.review import CompensationDeferred, CompensationLog, compensation_log_for
from ebb.live.compensation import CompensationRequest, Compensator
from ebb.live.locks import locked
from ebb.live.open_cycle import OpenCycle, Proposal
from ebb.live.rollback_queue import RollbackQueue
from ebb.live.sensed import Sensed
from ebb.live.settings import ControllerSettings, CycleOutcome
from ebb.model.decision import Decision, GateStep, action_between
from ebb.telemetry.metrics import EbbMetrics

__all__ = ["RollbackChannel"]

log = logging.getLogger("ebb.live.controller")


class RollbackChannel:
    """The rollbacks of one controller's run, proposed and carried out (module docstring).

    ``fence`` is the fence for every ledger write (:meth:`~ebb.live.cycle_ledger.CycleLedger.fence`),
    ``still_fenced`` whether a fence is still the leader's before a step is applied
    (:meth:`~ebb.live.cycle_ledger.CycleLedger.still_fenced`); ``fault`` the crash tests' hook
    (``after_compensation_ledger``, ``after_compensation_actuation``)."""

    def __init__(self, ledger: Ledger, settings: ControllerSettings, *, clock: Callable[[], float],
                 metrics: EbbMetrics | None, fence: Callable[[], Any], still_fenced: Callable[[Any], bool],
                 fault: Callable[[str], None], review_log: CompensationLog | None = None) -> None:
        self.ledger = ledger
        self.settings = settings
        self.metrics = metrics
        self._clock = clock
        self._fence = fence
        self._still_fenced = still_fenced
        self._fault = fault
        self._log = review_log
        self._own_log = review_log is None
        self.queue = RollbackQueue(ledger, settings.run_id, self.review_log, clock=clock,
                                   poll_s=settings.review_poll_s)
        """Rollbacks to carry out before the policy decides again: a failed gate's, resumed, retried."""

    def review_log(self) -> CompensationLog:
        """The compensation log (opened next to the ledger on first use when none was given)."""
        if self._log is None:
            self._log = compensation_log_for(self.ledger)
        return self._log

    def close(self) -> None:
        """Close the compensation log if the channel opened it."""
        if self._own_log and self._log is not None:
            self._log.close()
            self._log = None

    def proposal(self, held: OpenCycle, req: CompensationRequest, seen: Sensed, actuator: Actuator, *,
                 policy: str, gate: GateStep | None) -> Proposal:
        """The cycle's proposal for ``req``: the scale-up back to the root's pre-state (planned from the
        ledger), through the controller's locks (:mod:`ebb.live.locks`); it carries the plan."""
        s, spec = self.settings, seen.state.spec_replicas
        plan = self._compensator(actuator).plan(req)
        if plan.error:  # a malformed causal graph: the commit sends it to review
            log.error("rollback of %s cannot be planned: %s", req.root, plan.error)
        to = max(spec, plan.restored().get(s.target, spec))
        d = Decision(held.tick.t_s, action_between(spec, to), spec, to, policy=policy,
                     reasons=(f"rollback of {req.root}" + (f": {req.reason}" if req.reason else ""),),
                     gate=gate or GateStep("compensate", "rollback"))
        proposed, blocked = locked(d, seen.unfit, min_replicas=s.min_replicas, max_replicas=s.max_replicas)
        return Proposal(proposed, seen, held, blocked, plan)

    def committed(self, p: Proposal, decided: Decision, actuator: Actuator) -> CycleOutcome:
        """Carry out ``p``'s request within what ``decided`` (the commit's narrowing of the proposal)
        allows. The cycle's outcome: the last step applied on this controller's target (``scale_up``,
        its decision id: the controller's last change); none — ``hold`` when the rollback completed,
        else ``veto``; ``error`` when it was deferred (kept: the next cycle tries again, or a
        successor resumes it) or failed otherwise (ended: :meth:`abandon`)."""
        plan, seen, held = p.compensation, p.seen, p.cycle
        assert plan is not None
        req = plan.request
        clamped = [r for r in p.decision.reasons if r.startswith("clamped to")]
        cap_reason = "; ".join((*decided.vetoes, *decided.reasons[len(p.decision.reasons):])) or (
            clamped[-1] if clamped else "the replicas this cycle proposed")
        cap = decided.from_replicas if decided.action == "veto" else decided.to_replicas
        try:
            report = self._compensator(actuator).run(plan, own=self.settings.target, cap=cap, cap_reason=cap_reason,
                                                     replicas={self.settings.target: seen.state.spec_replicas},
                                                     spans=held.span)
        except CompensationDeferred as exc:
            if self.metrics is not None:
                self.metrics.ledger_write_error()
            log.error("rollback of %s deferred: %s", req.root, exc)
            return seen.outcome(held.n, held.tick.t_s, "error", seen.state.spec_replicas, note=f"rollback: {exc}")
        except EbbError as exc:  # final: a request that fails every cycle must not stop the policy deciding
            self.abandon(req, f"rollback failed: {exc}")
            return seen.outcome(held.n, held.tick.t_s, "error", seen.state.spec_replicas,
                                note=f"rollback of {req.root} sent to review: {exc}"[:300])
        self.queue.done(req)
        last = report.last_on(self.settings.target)
        if last is not None:
            return seen.outcome(held.n, held.tick.t_s, "scale_up", last.replicas_after, last.decision_id,
                                acted=last.applied, note=report.note)
        action = "hold" if report.completed else "veto"
        return seen.outcome(held.n, held.tick.t_s, action, seen.state.spec_replicas, note=report.note)

    def abandon(self, req: CompensationRequest, why: str) -> None:
        """End ``req`` without carrying it out: its root to the review queue with ``why`` (best effort,
        logged), the request out of the queue. A restart does not resume it: its root is under
        review (:meth:`~ebb.live.rollback_queue.RollbackQueue.resume`)."""
        try:
            self.review_log().enqueue(req.root, why[:1000], self._clock())
        except Exception as exc:  # best effort on a path that must end the request whatever happens
            log.error("review item %s not enqueued (%s: %s); its rollback is dropped: %s", req.root,
                      type(exc).__name__, exc, why)
        else:
            log.error("rollback of %s (attempt %d) sent to review: %s", req.root, req.attempt, why)
        self.queue.done(req)

    def _compensator(self, actuator: Actuator) -> Compensator:
        s = self.settings
        return Compensator(self.ledger, self.review_log, {s.target: actuator}, s.run_id,
                           caps={s.target: s.max_replicas}, clock=self._clock, metrics=self.metrics,
                           fence=self._fence, still_fenced=self._still_fenced, fault=self._fault)
