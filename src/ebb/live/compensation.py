"""The rollback channel, live: undo recorded scale-downs through the actuators, planned and logged in the ledger.

A :class:`CompensationRequest` names a **root event** — an acted scale-down decision of the run (the
canary or whole step a gate judged, or a review item an operator retried) — and an **attempt** (0,
or the operator's k-th ``ebb review retry``). :meth:`Compensator.plan` plans it and
:meth:`Compensator.run` carries it out:

1. **Plan** (pure, :mod:`ebb.gates.rollback`; :class:`CompensationPlan`): the run's acted
   scale-downs among its last :data:`HISTORY_CYCLES` ledger cycles
   (:func:`~ebb.gates.rollback.scale_events`: pre-state from each decision, causal edges from
   ``caused_by``), the root and everything it caused, children first. The live controller plans
   once, in the cycle that proposes the rollback, and hands the plan to ``run`` with it.
2. **Write-ahead, in one ledger write**: the request cycle ``<root>-rollback`` (``-rollback-r<k>``
   for retry k; snapshot ``rollback_of``, ``attempt``, ``reason``, ``requested_unix_s``, ``cap``,
   ``steps``) holding one decision per step with a **deterministic id** derived from its event,
   ``<event>-undo`` (``-undo-r<k>``), ``caused_by`` the event, ``plan.compensates`` = the event:
   ``scale_up`` from the target's replicas now (the controller's own target: as the proposing
   cycle read it) to the event's pre-state; ``hold`` when the target is already there; ``veto``
   when it is over the target's cap — ``max_replicas``, or what the cycle's cluster step left room
   for (a fleet's namespace quota). Steps after a veto, or from the first step whose target has no
   actuator here on, are not written (a parent is never undone before its child); ``steps`` is the
   number written, so a resume writes none of the later ones either. A plan of more than
   ``STEPS_PER_CYCLE`` steps continues in cycles ``<request>-s2``, ``-s3``, ... (one etcd
   transaction holds ~125).
3. **Steps** through :func:`ebb.ledger.review.compensate` (idempotent by the
   :class:`~ebb.ledger.review.CompensationLog`, the 0.8 s budget, the review queue): each recorded
   ``scale_up`` is applied through its target's actuator with its decision id (the actuators are
   idempotent by id), then recorded done in the log; a ``hold`` is done as it is; a ``veto``, an
   actuator that refuses (``PermanentError``, ``TransientError``), a target without an actuator
   (another controller's), a step not written (blocked) and every step left when the budget ran
   out send the root to the review queue with the reason.
4. **Done record** ``<request>-done`` (best effort: a refused or failing write is logged): each step
   applied now (decision id, target, replicas after), applied / skipped (done before) / remaining /
   enqueued ids and the elapsed time. A completed compensation resolves the root's review item, if
   any, and feeds ``ebb_compensation_seconds`` (request → last step applied) and
   ``ebb_compensations_total{result}``.

Durable writes: 2 + one per step (the log's done mark), whatever the cascade — what keeps a
50-service cascade within the note's 680 ms (``bench/rollback.py``).

**Recorded steps are checked, never applied blindly.** A request cycle found in the ledger (a
predecessor's, or a forged row) is used only when it is this run's record of this request, and each
of its steps only when its decision id is the step's (``<event>-undo[-r<k>]``), it is this run's, of
the step's target, recorded in the request or its continuation cycles, and a ``scale_up`` to at most
the event's pre-state, the target's ``max_replicas`` and the request's cap. Anything else is a
:class:`~ebb.errors.PermanentError`: the root goes to the review queue and nothing is applied.

Exactly once: a step's decision id is fixed by (event, attempt) and recorded before it is applied;
the actuator applies an id at most once (the Kubernetes actuator also across processes, through the
Deployment's annotation); the log records each step done once and a done step is skipped. A
controller killed at any point of a compensation finds, when it (or its successor) resumes, the
request without its done record and runs it again from the recorded steps: each applied exactly
once. A ledger or compensation log that is unreachable, or leadership lost mid-way (the fence of
the run's writes no longer the leader's before a step), stops the run without enqueuing
(:class:`~ebb.ledger.review.CompensationDeferred`): it is resumed, not reviewed. A request that
cannot be planned is enqueued for review; when even that is refused for now it is deferred too.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final

from ebb.actuate.base import ActuationResult, Actuator
from ebb.errors import EbbError, PermanentError, TransientError
from ebb.gates.rollback import COMPENSATES, CompensationStep, EventGraph, plan_compensation, restored, scale_events
from ebb.ledger.base import Ledger, fence_token
from ebb.ledger.review import (DEFAULT_BUDGET_S, CompensationDeferred, CompensationLog, CompensationResult,
                               compensate)
from ebb.model.decisions import JSON, CycleRecord, DecisionRecord
from ebb.model.ids import CycleId, DecisionId, RunId
from ebb.model.observation import ScaleRequest
from ebb.model.spans import NO_SPANS, Spans
from ebb.telemetry.metrics import EbbMetrics

__all__ = ["CompensationPlan", "CompensationReport", "CompensationRequest", "Compensator", "HISTORY_CYCLES",
           "ROLLBACK_SUFFIX", "STEPS_PER_CYCLE", "request_of"]

log = logging.getLogger(__name__)

STEPS_PER_CYCLE: Final = 100
"""Step decisions per ledger cycle (an etcd transaction holds ~125 records)."""

HISTORY_CYCLES: Final = 500
"""How far back (ledger cycles of the run) the event graph looks for what a root caused, and a
restarted controller for the run's last acted scale-down (:mod:`ebb.live.rollback_queue`)."""

ROLLBACK_SUFFIX = "-rollback"
"""A request cycle's id is ``<root><ROLLBACK_SUFFIX>`` (``-r<k>`` appended for retry k)."""


@dataclass(frozen=True)
class CompensationRequest:
    """Undo ``root`` and what it caused (module docstring)."""

    root: DecisionId
    """The root event: an acted scale-down decision of the run."""
    attempt: int = 0
    """0 for the first; k for the operator's k-th retry (``ebb review retry``)."""
    reason: str = ""
    """Why: the gate's verdict, or the retry and the item's last reason."""
    requested_unix_s: float = 0.0
    """When the controller decided to compensate (Unix s): ``ebb_compensation_seconds`` starts here."""

    @property
    def cycle_id(self) -> CycleId:
        """The request's ledger cycle."""
        return CycleId(f"{self.root}{ROLLBACK_SUFFIX}" + (f"-r{self.attempt}" if self.attempt else ""))

    def step_id(self, event_id: str) -> DecisionId:
        """The deterministic decision id of the step undoing ``event_id`` in this attempt."""
        return DecisionId(f"{event_id}-undo" + (f"-r{self.attempt}" if self.attempt else ""))


def _count(value: object) -> bool:
    """Whether ``value`` is a recorded count or cap: None (not recorded) or an int >= 0."""
    return value is None or (isinstance(value, int) and not isinstance(value, bool) and value >= 0)


def request_of(cycle: CycleRecord) -> CompensationRequest | None:
    """The request a ledger request cycle records (None: not one, or not readable as one)."""
    snap = cycle.snapshot
    root, attempt, reason, at = (snap.get("rollback_of"), snap.get("attempt"), snap.get("reason"),
                                 snap.get("requested_unix_s"))
    if not (isinstance(root, str) and root and isinstance(attempt, int) and not isinstance(attempt, bool)
            and attempt >= 0 and isinstance(reason, str) and isinstance(at, (int, float))
            and not isinstance(at, bool) and _count(snap.get("cap")) and _count(snap.get("steps"))):
        return None
    req = CompensationRequest(DecisionId(root), attempt, reason, float(at))
    return req if req.cycle_id == cycle.cycle_id else None


@dataclass(frozen=True)
class CompensationPlan:
    """A request planned from the ledger (:meth:`Compensator.plan`): what :meth:`Compensator.run` carries out."""

    request: CompensationRequest
    graph: EventGraph | None = None
    """The run's recent scale-downs; None when the root is not among them (nothing to undo) or on ``error``."""
    steps: tuple[CompensationStep, ...] = ()
    """The root and what it caused, children first."""
    error: str = ""
    """Why it could not be planned (a malformed ledger row or causal graph); "" when planned."""

    def restored(self) -> dict[str, int]:
        """Where each target ends once the steps ran ({} when there is nothing to undo)."""
        return restored(self.steps)


@dataclass(frozen=True)
class CompensationReport:
    """What :meth:`Compensator.run` did."""

    request: CompensationRequest
    result: CompensationResult | None
    """The steps' result; None when there was nothing to undo."""
    applied: tuple[tuple[str, ActuationResult], ...] = ()
    """(target, what its actuator reported) for each step applied now, in order."""
    note: str = ""
    """One line: compensated, nothing to undo, or enqueued for review and why."""

    @property
    def completed(self) -> bool:
        """Nothing is left to do (every step done, or nothing to undo)."""
        return self.result is None or self.result.completed

    def last_on(self, target: str) -> ActuationResult | None:
        """The last step applied now on ``target`` (None when none was)."""
        mine = [r for t, r in self.applied if t == target]
        return mine[-1] if mine else None


@dataclass
class Compensator:
    """Executes :class:`CompensationRequest` s of one run (module docstring).

    ``actuators``: the targets this controller may scale, by the ledger's ``target`` name; ``caps``:
    each one's ``max_replicas``; ``fence``: the fence for the run's ledger writes, taken once per
    :meth:`run` (None: unfenced; raises :class:`~ebb.errors.NotLeader` when leadership lapsed);
    ``still_fenced(fence)``: whether that fence is still the leader's (checked before each step
    is applied; :meth:`~ebb.live.cycle_ledger.CycleLedger.still_fenced`); ``fault``: test hook called
    at ``after_compensation_ledger`` and ``after_compensation_actuation`` of every step."""

    ledger: Ledger
    log: Callable[[], CompensationLog]
    """Opens (once) the compensation log next to the ledger."""
    actuators: Mapping[str, Actuator]
    run_id: str
    caps: Mapping[str, int] = field(default_factory=dict)
    budget_s: float = DEFAULT_BUDGET_S
    clock: Callable[[], float] = time.time
    monotonic: Callable[[], float] = time.monotonic
    metrics: EbbMetrics | None = None
    fence: Callable[[], Any] = lambda: None
    still_fenced: Callable[[Any], bool] = lambda fence: True
    fault: Callable[[str], None] = lambda where: None

    # -- planning --------------------------------------------------------------------------------
    def graph(self, root: DecisionId) -> EventGraph | None:
        """The event graph of the run's recent scale-downs; None when ``root`` is not among them.
        A malformed causal graph (a cycle: a forged ledger) raises :class:`~ebb.errors.PermanentError`."""
        cycles = self.ledger.cycles(RunId(self.run_id), limit=HISTORY_CYCLES)
        if all(d.decision_id != root for c in cycles for d in c.decisions):
            own = self.ledger.get_decision(root)
            if own is None or own.run_id != self.run_id:
                return None
            found = [self.ledger.get_cycle(own.cycle_id), self.ledger.get_cycle(CycleId(f"{own.cycle_id}-outcome"))]
            cycles = [c for c in found if c is not None] + cycles
        events = scale_events(cycles)
        if all(e.event_id != root for e in events):
            return None
        try:
            return EventGraph(events)
        except ValueError as exc:
            raise PermanentError(f"the ledger's causal edges of run {self.run_id} are malformed: {exc}") from exc

    def plan(self, req: CompensationRequest) -> CompensationPlan:
        """``req`` planned from the ledger: one read of the run's recent cycles. A malformed row or
        causal graph is the plan's ``error`` (its run sends the root to review); ledger trouble
        (:class:`~ebb.errors.TransientError`) propagates."""
        try:
            graph = self.graph(req.root)
        except PermanentError as exc:
            return CompensationPlan(req, error=str(exc))
        return CompensationPlan(req, graph, () if graph is None else tuple(plan_compensation(graph, [req.root])))

    # -- execution -------------------------------------------------------------------------------
    def run(self, what: CompensationRequest | CompensationPlan, *, own: str = "", cap: int | None = None,
            cap_reason: str = "", replicas: Mapping[str, int] | None = None,
            spans: Spans = NO_SPANS) -> CompensationReport:
        """Carry out a request, or the plan made of it (a request is planned here; module docstring).
        ``cap``: the most replicas ``own`` (the controller's target) may have after it, beyond its
        ``max_replicas`` (a cluster step's room), ``cap_reason`` why; ``replicas``: targets' replicas
        as the caller just read them (the others are read from their actuators). Raises
        :class:`~ebb.ledger.review.CompensationDeferred` when the ledger, the compensation log or the
        leadership failed (resume later); any other trouble ends in the review queue."""
        req = what.request if isinstance(what, CompensationPlan) else what
        try:
            fence = self.fence()
        except TransientError as exc:
            raise CompensationDeferred(f"rollback of {req.root}: {exc}") from exc
        why = ""
        try:
            if self.ledger.get_cycle(CycleId(f"{req.cycle_id}-done")) is not None:
                return CompensationReport(req, None, note=f"rollback of {req.root} (attempt {req.attempt}) was "
                                                          "already carried out")
            plan = what if isinstance(what, CompensationPlan) else self.plan(req)
            why = plan.error
            if not why:
                recorded = self._write_ahead(req, list(plan.steps), own, cap, cap_reason, replicas or {}, fence,
                                             spans)
        except TransientError as exc:
            raise CompensationDeferred(f"rollback of {req.root}: {exc}") from exc
        except PermanentError as exc:  # a malformed or forged ledger, an actuator that refuses to read
            why = str(exc)
        if why:
            return self._unplanned(req, why, fence)
        if plan.graph is None:
            return self._close(req, None, (), f"nothing to undo: {req.root} is not an acted scale-down of run "
                                              f"{self.run_id}", fence)
        step = _Steps(self, recorded, fence, spans)
        try:
            with spans.layer("ebb.rollback", **{"ebb.rollback.root": req.root, "ebb.rollback.attempt": req.attempt}):
                result = compensate(plan.graph, [req.root], step, self.log(), budget_s=self.budget_s,
                                    clock=self.monotonic, wall_clock=self.clock)
        except CompensationDeferred:
            raise
        except TransientError as exc:  # the compensation log unreachable: done steps stay done, resumed later
            raise CompensationDeferred(f"rollback of {req.root}: {exc}") from exc
        if result.completed:
            note = (f"compensated {req.root}: {len(result.applied)} step(s) applied, "
                    f"{len(result.skipped)} already done")
        else:
            note = f"rollback of {req.root} enqueued for review: {result.reason}"
        return self._close(req, result, tuple(step.applied), note, fence)

    def _unplanned(self, req: CompensationRequest, why: str, fence: Any) -> CompensationReport:
        """A request that could not be planned (or whose record is not to be trusted): straight to the
        review queue, with the reason. The review item is what matters: a request record the ledger
        refuses is logged; a review queue that cannot be reached now defers the request."""
        reason = f"rollback not planned: {why}"[:1000]
        try:
            if self.ledger.get_cycle(req.cycle_id) is None:  # the attempt's record: a retry is tried once
                self._write(req.cycle_id, [], self._request_snapshot(req, None, 0), fence, NO_SPANS)
        except (EbbError, ValueError) as exc:
            log.error("rollback of %s: request record not written (%s); enqueuing it for review", req.root, exc)
        try:
            self.log().enqueue(req.root, reason, self.clock())
        except TransientError as exc:
            raise CompensationDeferred(f"rollback of {req.root} not planned ({why}); review queue: {exc}") from exc
        except (EbbError, ValueError) as exc:
            log.error("review item %s not enqueued: %s", req.root, exc)
        result = CompensationResult(completed=False, applied=(), skipped=(), remaining=(req.root,),
                                    enqueued=(req.root,), elapsed_s=0.0, error=why, reason=reason)
        return self._close(req, result, (), f"rollback of {req.root} enqueued for review: {reason}", fence)

    def _write_ahead(self, req: CompensationRequest, steps: list[CompensationStep], own: str, cap: int | None,
                     cap_reason: str, replicas: Mapping[str, int], fence: Any,
                     spans: Spans) -> dict[str, DecisionRecord]:
        """The steps' decisions by event id: those a predecessor recorded (checked), the others written
        now (the request cycle first, with the first ``STEPS_PER_CYCLE``). Ledger trouble propagates;
        a record that is not to be trusted raises :class:`~ebb.errors.PermanentError`."""
        stored = self.ledger.get_cycle(req.cycle_id)
        recorded: dict[str, DecisionRecord] = {}
        if stored is not None:
            cap, steps = self._stored_plan(req, stored, steps, cap)
            kept = {str(d.plan.get(COMPENSATES)): d for d in stored.decisions}
            recorded = {st.event_id: kept[st.event_id] for st in steps if st.event_id in kept}
            missing = [st for st in steps if st.event_id not in recorded]
            if missing:  # a crash between the request and its continuation cycles
                recorded.update({st.event_id: d for st in missing
                                 if (d := self.ledger.get_decision(req.step_id(st.event_id))) is not None})
            self._check_recorded(req, steps, recorded, own, cap)
            steps = [st for st in steps if st.event_id not in recorded]
            if not steps:
                return recorded
        decisions = self._decide_steps(req, steps, own, cap, cap_reason, replicas)
        chunks = [decisions[i:i + STEPS_PER_CYCLE] for i in range(0, len(decisions), STEPS_PER_CYCLE)]
        if stored is None:
            self._write(req.cycle_id, chunks[0] if chunks else [], self._request_snapshot(req, cap, len(decisions)),
                        fence, spans)
            chunks = chunks[1:]
        for k, chunk in enumerate(chunks, start=1 if stored is None else 0):
            self._write(self._free_part(req, k + 1), chunk, {"part_of": req.cycle_id}, fence, spans)
        recorded.update({str(d.plan[COMPENSATES]): d for d in decisions})
        if self.metrics is not None:
            for d in decisions:
                self.metrics.decision(d.action, list(d.vetoes))
        return recorded

    def _stored_plan(self, req: CompensationRequest, stored: CycleRecord, steps: list[CompensationStep],
                     cap: int | None) -> tuple[int | None, list[CompensationStep]]:
        """The cap a recorded request was planned under (it holds for its resume; else ``cap``) and the
        steps it wrote (its ``steps`` count: the later ones were blocked; all for an older record)."""
        if stored.run_id != self.run_id or request_of(stored) is None:
            raise PermanentError(f"the ledger's cycle {req.cycle_id} is not run {self.run_id}'s record of the "
                                 f"rollback of {req.root}: not applied")
        recorded_cap, count = stored.snapshot.get("cap"), stored.snapshot.get("steps")
        return (recorded_cap if isinstance(recorded_cap, int) else cap,
                steps[:count] if isinstance(count, int) else steps)

    def _check_recorded(self, req: CompensationRequest, steps: list[CompensationStep],
                        recorded: Mapping[str, DecisionRecord], own: str, cap: int | None) -> None:
        """:class:`~ebb.errors.PermanentError` unless every recorded step decision is this request's
        own (module docstring: recorded steps are checked)."""
        for st in steps:
            d = recorded.get(st.event_id)
            why = "" if d is None else self._distrust(req, st, d, own, cap)
            if d is not None and why:
                raise PermanentError(f"the ledger's step {d.decision_id} of the rollback of {req.root} is not to be "
                                     f"trusted ({why}): not applied")

    def _distrust(self, req: CompensationRequest, st: CompensationStep, d: DecisionRecord, own: str,
                  cap: int | None) -> str:
        """Why ``d`` is not ``req``'s recorded step ``st`` ("" when it is)."""
        limit = min([st.restore_replicas, *([self.caps[st.target]] if st.target in self.caps else []),
                     *([cap] if cap is not None and st.target == own else [])])
        checks = (
            (d.decision_id == req.step_id(st.event_id), f"its id is not {req.step_id(st.event_id)}"),
            (d.run_id == self.run_id, f"it is run {d.run_id}'s"),
            (d.target == st.target, f"its target is {d.target}, not {st.target}"),
            (d.plan.get(COMPENSATES) == st.event_id, f"it undoes {d.plan.get(COMPENSATES)!r}"),
            (d.cycle_id == req.cycle_id or d.cycle_id.startswith(f"{req.cycle_id}-s"),
             f"it is recorded in cycle {d.cycle_id}"),
            (d.action != "scale_up" or d.to_replicas <= limit,
             f"it scales {st.target} to {d.to_replicas} replicas, over {limit} (the event's pre-state, "
             "max_replicas and the request's cap)"),
        )
        return next((why for ok, why in checks if not ok), "")

    def _decide_steps(self, req: CompensationRequest, steps: list[CompensationStep], own: str, cap: int | None,
                      cap_reason: str, replicas: Mapping[str, int]) -> list[DecisionRecord]:
        """One decision per step, in plan order, up to and including the first over its cap."""
        now = dict(replicas)
        out: list[DecisionRecord] = []
        ts = int(self.clock() * 1e9)
        for st in steps:
            act = self.actuators.get(st.target)
            if act is None:
                break  # the step raises at its turn (no actuator): nothing of it or after it is recorded
            spec = now[st.target] if st.target in now else act.state().spec_replicas
            caps = [(self.caps[st.target], "max_replicas")] if st.target in self.caps else []
            if st.target == own and cap is not None:
                caps.append((cap, cap_reason or "the cycle's cluster step"))
            over = sorted((n, why) for n, why in caps if st.restore_replicas > n)
            did = req.step_id(st.event_id)
            why = (f"compensate: undo {st.event_id} (back to {st.restore_replicas} replicas)"
                   + (f": {req.reason}" if req.reason else ""))
            plan: dict[str, JSON] = {"mode": "act", "controller": "live", "step": "compensate",
                                     COMPENSATES: st.event_id, "rollback_of": req.root, "attempt": req.attempt}
            to, action, vetoes = spec, "hold", tuple[str, ...]()
            if over:
                n, limit = over[0]
                action, vetoes = "veto", (f"rollback: restoring {st.target} to {st.restore_replicas} replicas is "
                                          f"over its cap of {n} ({limit}); the pod is gone and the budget forbids "
                                          "the scale-up",)
            elif st.restore_replicas > spec:
                to, action = st.restore_replicas, "scale_up"
            out.append(DecisionRecord(did, req.cycle_id, RunId(self.run_id), ts, st.target, action,  # type: ignore[arg-type]
                                      spec, to, reasons=(why,), vetoes=vetoes, plan=plan,
                                      caused_by=(DecisionId(st.event_id),)))
            now[st.target] = to
            if over:
                break
        return out

    @staticmethod
    def _request_snapshot(req: CompensationRequest, cap: int | None, steps: int) -> dict[str, JSON]:
        return {"rollback_of": req.root, "attempt": req.attempt, "reason": req.reason,
                "requested_unix_s": req.requested_unix_s, "cap": cap, "steps": steps}

    def _free_part(self, req: CompensationRequest, k: int) -> CycleId:
        """The first continuation cycle id from ``-s<k>`` on that is not taken."""
        while self.ledger.get_cycle(cid := CycleId(f"{req.cycle_id}-s{k}")) is not None:
            k += 1
        return cid

    def _write(self, cid: CycleId, decisions: Sequence[DecisionRecord], snap: dict[str, JSON], fence: Any,
               spans: Spans) -> None:
        decs = tuple(replace(d, cycle_id=cid) for d in decisions)
        cycle = CycleRecord(cycle_id=cid, run_id=RunId(self.run_id), ts_ns=int(self.clock() * 1e9), policy="rollback",
                            decisions=decs, snapshot=snap, fencing_token=fence_token(fence))
        with spans.layer("ebb.ledger", **{"ebb.rollback.cycle": cid}):
            self.ledger.append_cycle(cycle, fence)

    def _close(self, req: CompensationRequest, result: CompensationResult | None,
               applied: tuple[tuple[str, ActuationResult], ...], note: str, fence: Any) -> CompensationReport:
        """The done record (best effort), the review item, the metrics; the report."""
        snap: dict[str, JSON] = {"rollback_of": req.root, "attempt": req.attempt, "note": note}
        if result is not None:
            snap.update(applied=list(result.applied), skipped=list(result.skipped),
                        remaining=list(result.remaining), enqueued=list(result.enqueued),
                        elapsed_ms=round(result.elapsed_s * 1000.0, 3),
                        steps=[{"decision_id": r.decision_id, "target": t, "applied": r.applied,
                                "replicas_after": r.replicas_after} for t, r in applied])
        try:
            self._write(CycleId(f"{req.cycle_id}-done"), (), snap, fence, NO_SPANS)
        except (EbbError, ValueError) as exc:  # the steps are done and logged, the root enqueued if it must be
            log.error("rollback of %s: done record not written (%s); a restart re-checks it", req.root, exc)
        if result is None or result.completed:
            self._resolve(req, note)
        if result is not None and self.metrics is not None:
            self.metrics.compensation_result("compensated" if result.completed else "review")
            if result.completed and result.applied:
                self.metrics.compensation(max(0.0, self.clock() - req.requested_unix_s))
        (log.info if result is None or result.completed else log.error)("%s", note)
        return CompensationReport(req, result, applied, note)

    def _resolve(self, req: CompensationRequest, note: str) -> None:
        """Close the root's pending review item (an operator's retry that now succeeded)."""
        try:
            item = self.log().show(req.root)
            if item is not None and item.status == "pending":
                self.log().resolve(req.root, f"{note} (attempt {req.attempt})")
        except EbbError as exc:
            log.warning("review item %s not resolved: %s", req.root, exc)


class _Steps:
    """One request's step function for :func:`~ebb.ledger.review.compensate` (module docstring, 3)."""

    def __init__(self, owner: Compensator, recorded: Mapping[str, DecisionRecord], fence: Any,
                 spans: Spans) -> None:
        self.c, self.recorded, self.fence, self.spans = owner, recorded, fence, spans
        self.applied: list[tuple[str, ActuationResult]] = []

    def __call__(self, step: CompensationStep) -> None:
        c = self.c
        act = c.actuators.get(step.target)
        if act is None:
            raise PermanentError(f"step {step.event_id}: no actuator for {step.target} in run {c.run_id} "
                                 f"(this controller scales {', '.join(sorted(c.actuators)) or 'nothing'})")
        rec = self.recorded.get(step.event_id)
        if rec is None:
            raise PermanentError(f"step {step.event_id}: not in the recorded plan (blocked: a step before it was "
                                 "vetoed or has no actuator here, or the request was recorded unplanned)")
        if rec.action == "veto":
            raise PermanentError(rec.vetoes[-1] if rec.vetoes else f"step {rec.decision_id} was blocked")
        if rec.action != "scale_up":
            return  # already at (or above) the pre-state when planned
        c.fault("after_compensation_ledger")
        if not c.still_fenced(self.fence):  # deposed since the write: the successor resumes the request
            raise CompensationDeferred(f"step {rec.decision_id} not applied: leadership changed since the "
                                       "rollback's ledger write")
        with self.spans.layer("ebb.actuate", **{"ebb.rollback.step": rec.decision_id}) as a:
            res = act.apply(rec.decision_id, ScaleRequest(rec.to_replicas))
            a.set(**{"ebb.actuate.applied": res.applied, "ebb.replicas.after": res.replicas_after})
        self.applied.append((step.target, res))
        c.fault("after_compensation_actuation")
