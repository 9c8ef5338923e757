"""The live controller: the simulator's decision code on the wall clock (``ebb run``).

One cycle every ``interval_s`` (1 s), in data-flow order::

    source.read ─► fleet ─► [resume] ─► Observation ─► policy.decide (L1 → L2 → L3 [→ gate])
        ─► Decision ─► clamp ─► stale-data lock ─► ledger ─► actuator ─► ledger (outcome)
                                     └─ a gate failed ─► rollback channel (ebb.live.compensation)

The policy is any :class:`ebb.decide.base.Policy`; the controller uses its protocol and nothing
else (``decide``, ``observe``, ``gate_queries``, ``spec``). The decision's records are
:mod:`ebb.decide.records`' — the same functions ``ebb simulate --ledger`` uses.

Guarantees:

* **Same decisions as the simulator.** The policy object is the one ``ebb simulate`` runs
  (:mod:`ebb.decide.policy`); the controller only converts wall time to seconds since its start
  and live signals to an :class:`~ebb.model.observation.Observation`.
* **Fail static on bad data.** A source that is unreachable, or whose freshest sample is older
  than ``max_staleness_s`` (5 s), contributes no samples (the freshest sample any read returned
  since the last clock step: a read with nothing newer than the one before is not stale by
  itself); the policy then vetoes scale-down (stale data). The controller also refuses, by
  itself, to execute a scale-down planned while data is stale
  (:func:`ebb.decide.records.stale_data_veto`) — two independent locks. Scale-ups still go
  through: adding capacity is the safe side.
* **Fleet completeness.** A read whose samples cover fewer replicas than are ready
  (``LiveSignals.replicas_seen``: a target vanished from Prometheus, a worker an agent cannot poll)
  understates demand: it blocks every scale-down, like stale data, and is said in the cycle's note.
* **Write-ahead, exactly once, never a blind replay.** A decision is appended to the ledger *before*
  the actuator is called (``mode=act``); the actuator is idempotent by decision id; the outcome is
  appended as a second cycle ``<cycle>-outcome``. Holds (:attr:`Decision.noteworthy` false) are not
  written. A controller restarted after a crash at any point finds its last decision without an
  outcome and, in its first leading cycle — after that cycle's read of the source and the fleet —
  re-checks it (:mod:`ebb.live.resume`): the fleet already at ``to`` → recorded as done; at
  ``from`` → a decision at most ``resume_max_age_s`` (60 s) old and not from the future is applied
  with the same id, clamped to ``[min_replicas, max_replicas]`` — a scale-up always, a scale-down
  only on fresh, complete data with every recorded victim still in the fleet (its victims first);
  otherwise "not resumed" and the policy re-decides on fresh data; anything else → superseded.
  A cycle that applied a resumed decision ends there (no decision of its own; its cycle number is
  skipped): the next cycle decides on the new fleet. A decision the ledger refused (unreachable
  store, lost leadership) is never acted on.
* **Victims by name.** The ledger records victims under the actuator's names
  (:attr:`~ebb.actuate.base.ReplicaState.name`: ``worker-N``, pod names), never as replica ids; a
  resumed decision's victims are mapped back to the ids of the fleet read *now*, so a restarted
  actuator that numbers the same replicas differently still removes exactly those.
* **Replica bounds hold.** No decision, from the policy or the ledger, is applied below
  ``min_replicas`` or above ``max_replicas`` (:class:`ControllerSettings`).
* **Monotonic time.** The policy's time is the monotonic clock (:mod:`ebb.live.timeline`); Unix
  stamps of samples and pods are mapped onto it by their age. A wall-clock step is logged, and the
  source cursor and freshness reference are reset so neither a forward nor a backward step blinds
  the loop or erases its peak memory (:class:`~ebb.live.sensed.Sensor`).
* **Never exits on a peer's answer.** Every error of a cycle — of the tree or, as a last resort,
  any other — ends that cycle as ``error`` (logged with its traceback when unexpected), with no
  action taken; the next cycle starts afresh.
* **One actor.** With an elector, only the leader decides; followers keep the policy's windows warm
  (``observe``) so a take-over decides on full history. Every ledger write carries the leader's
  fencing token, so a deposed leader's write fails atomically (etcd backend).
* **Gates measured only when asked.** While the policy names ``gate_queries()`` (a gated step is
  in flight), each is measured once per cycle through ``gate_probe`` into ``Observation.gate_values``
  (a failed query is NaN: no data); otherwise nothing is queried.
* **One rollback channel** (SPEC §3.5, ``docs/rollback.md``). A gate that fails after a scale-down —
  the canary's metrics gate, a gates file's post-scale-down check (both answer with a ``compensate``
  gate step, :mod:`ebb.gates.guard`) — or an operator's ``ebb review retry`` of a review item of
  this run becomes a :class:`~ebb.live.compensation.CompensationRequest` for the gated scale-down
  (the root event): the cycle proposes it instead of a plain scale-up, and its commit hands it to
  :class:`~ebb.live.compensation.Compensator`, which walks the event graph of the run's recorded
  scale-downs and compensates in dependency order through the actuator, each step a write-ahead
  ledger decision with an id derived from its event, idempotent, within the 0.8 s budget; what
  cannot be compensated (over ``max_replicas`` or what a cluster step left room for, the actuator
  refusing, the budget out) goes to the review queue with the reason. A request the ledger or the
  leadership refused is kept and tried again next cycle; a controller restarted mid-compensation
  finds the request without its done record and resumes it — each step applied exactly once.
  Retried review items are looked for every ``review_poll_s`` (5 s); a cycle that carries out a
  retried or resumed request shows the policy its data (``observe``) without asking it to decide
  (the queue of pending rollbacks: :mod:`ebb.live.rollback_queue`).
  In ``recommend`` mode nothing is compensated: the guard's ``compensate`` is recorded as the
  scale-up it would be.
* **Telemetry never changes behaviour.** One trace per cycle (root span ``ebb.cycle``); the policy
  opens its layer spans (``ebb.l1``, ``ebb.l2``, ``ebb.l3``, gate spans) around its real work under
  ``ebb.decide``; metrics and logs are best effort. Followers emit no traces (:data:`NO_SPANS`).

Decision ids are ``<run_id>-<n>`` and cycle ids ``<run_id>-c<n>``, ``n`` continuing from the
ledger's last cycle of ``run_id``, so a successor (after a restart or a fail-over) extends the
same sequence. Rollback records have ids derived from their root event (``<event>-rollback``,
``<event>-undo``) and take no cycle number.

**One cycle in two plain calls** (for a controller of many workloads, :mod:`ebb.live.fleet_controller`):
:meth:`Controller.propose` runs a cycle up to its decision — sensed, decided and through the
controller's own locks (bounds, stale data), not yet recorded or acted on — and returns either the
cycle's :class:`CycleOutcome` (it ended before deciding: a follower's, a resumed decision's, an
error) or a :class:`Proposal`. :meth:`Controller.commit` takes the proposal and the decision to
carry out — the proposal's, or one a cluster-level step narrowed (fewer replicas removed or added,
other victims, a veto; a wider one is refused: a scale-down then becomes a veto, anything else goes
as proposed, logged as the bug it is) — and finishes the cycle the usual way: write-ahead ledger,
actuator, outcome (or the rollback channel). Between the two the cycle's trace span stays open,
held by the proposal's :class:`~ebb.live.open_cycle.OpenCycle`; a proposal is committed once (a
second commit returns the first outcome). :meth:`Controller.cycle` is ``commit(propose())``. Every
guarantee above holds for both halves; the last-resort error handling covers each.
"""

from __future__ import annotations

import logging
import math
import re
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from ebb.actuate.base import ActuationResult, Actuator, FleetState
from ebb.decide.base import Policy, Reactive, react_of
from ebb.decide.records import caused_by, clamp, cycle_record, decision_record, outcome_cycle, stale_data_veto
from ebb.errors import EbbError, NotLeader, PermanentError, TransientError
from ebb.gates.rollback import COMPENSATES
from ebb.ledger.base import Ledger
from ebb.ledger.review import CompensationDeferred, CompensationLog, compensation_log_for
from ebb.live.compensation import CompensationReport, CompensationRequest, Compensator
from ebb.live.open_cycle import OpenCycle
from ebb.live.pacing import paced_loop
from ebb.live.resume import resume_verdict
from ebb.live.rollback_queue import RollbackQueue
from ebb.live.sensed import Sensed as _Sensed
from ebb.live.sensed import Sensor
from ebb.live.sensed import actuated as _actuated
from ebb.live.sensed import observation as _observation
from ebb.live.sensed import rebase as _rebase
from ebb.live.sensed import victim_names as _victim_names
from ebb.live.settings import ControllerSettings, CycleOutcome, Elector
from ebb.live.timeline import Tick, Timeline
from ebb.model.decision import Decision, GateStep, action_between
from ebb.model.decisions import CycleRecord, DecisionRecord
from ebb.model.ids import CycleId, DecisionId, RunId
from ebb.model.observation import Observation, ScaleRequest
from ebb.model.spans import NO_SPANS, Spans
from ebb.sources.live import SignalSource
from ebb.telemetry.metrics import EbbMetrics
from ebb.telemetry.tracing import CycleSpan, CycleTracer

__all__ = ["Controller", "ControllerSettings", "CycleOutcome", "Elector", "Proposal"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Proposal:
    """A leading cycle's decision after the controller's own locks, before it is recorded or acted on.

    Hand it back to :meth:`Controller.commit` of the controller that proposed it."""

    decision: Decision
    """The policy's decision, clamped to the replica bounds and stale-data locked (for a rollback:
    the scale-up back to the root event's pre-state)."""
    seen: _Sensed
    """What the cycle read: the source's signals (``seen.sig``) and the fleet (``seen.state``)."""
    n: int
    """The cycle's number."""
    cycle: OpenCycle
    """The cycle, still open (its trace span), until :meth:`Controller.commit` ends it."""
    blocked: str = ""
    """The controller lock's veto ("" when none blocked the decision)."""
    compensation: CompensationRequest | None = None
    """Set when the cycle proposes a rollback (the rollback channel carries it out on commit)."""


class Controller:
    """The live loop for one workload. Not thread-safe: one thread calls :meth:`cycle` / :meth:`run`."""

    def __init__(self, policy: Policy, source: SignalSource, actuator: Actuator, ledger: Ledger,
                 settings: ControllerSettings, *, tracer: CycleTracer | None = None,
                 metrics: EbbMetrics | None = None, elector: Elector | None = None,
                 clock: Callable[[], float] = time.time, monotonic: Callable[[], float] | None = None,
                 fault_point: Callable[[str], None] | None = None,
                 gate_probe: Callable[[str], float | None] | None = None,
                 compensation_log: CompensationLog | None = None) -> None:
        self.policy = policy
        self.source = source
        self.actuator = actuator
        self.ledger = ledger
        self.settings = settings
        self.tracer = tracer or CycleTracer()
        self.metrics = metrics
        self.elector = elector
        self._clock = clock
        self.gate_probe = gate_probe
        """Measures a metrics-gate query (PromQL) while the policy names gate queries; None = unmeasured."""
        self._fault = fault_point or (lambda where: None)
        """Called at ``before_plan``, ``after_ledger`` and ``after_actuation`` of every acting cycle, and at
        ``after_compensation_ledger`` / ``after_compensation_actuation`` of every rollback step: crash
        tests kill the process there (the crash-point matrix); a no-op otherwise."""
        self._timeline = Timeline(clock, monotonic, interval_s=settings.interval_s,
                                  max_gap_s=max(settings.lookback_s, 10 * settings.interval_s))
        """Wall clock for stamps (sources, ledger), monotonic for the policy (a step moves neither)."""
        self.t0 = clock()
        self._sensor = Sensor(self.t0, lookback_s=settings.lookback_s, max_staleness_s=settings.max_staleness_s)
        self._n: int | None = None
        self._was_leader = False
        self._prev_action: DecisionId | None = None
        self._pending: tuple[CycleRecord, DecisionRecord] | None = None
        """The last acted decision found without an outcome on resume; settled by the next cycle."""
        self._log = compensation_log
        self._own_log = compensation_log is None
        """The compensation log is opened (next to the ledger) on first use, and closed by :meth:`close`."""
        self._rollbacks = RollbackQueue(ledger, settings.run_id, self._compensation_log, clock=clock,
                                        poll_s=settings.review_poll_s)
        """Rollbacks to carry out before the policy decides again: a failed gate's, resumed, retried."""
        self.outcomes: deque[CycleOutcome] = deque(maxlen=settings.keep_outcomes)
        self._counts: tuple[int, int] | None = None
        """(spec, ready) replicas as the last read or act left them: what a quiet fast-path tick
        compares the policy's wish with (a tick that fires reads the fleet afresh)."""
        self._fast = react_of(policy) if settings.react_interval_s > 0 else None

    def close(self) -> None:
        """Close what the controller opened itself (the compensation log); the ledger is the caller's."""
        if self._own_log and self._log is not None:
            self._log.close()
            self._log = None

    # -- ledger bookkeeping -----------------------------------------------------------------
    def _fence(self) -> Any:
        if self.elector is None:
            return None
        fence = self.elector.fence()
        if fence is None:  # lapsed since is_leader(): an unfenced write could land after a successor's
            raise NotLeader(f"{self.settings.run_id}: leadership lapsed before the ledger write; not writing")
        return fence

    def _token(self, fence: Any) -> int:
        return int(getattr(fence, "token", 0) or 0)

    def _append(self, cycle: CycleRecord, fence: Any) -> None:
        if fence is None:
            self.ledger.append_cycle(cycle)
        else:
            self.ledger.append_cycle(cycle, fence=fence)

    def _compensation_log(self) -> CompensationLog:
        if self._log is None:
            self._log = compensation_log_for(self.ledger)
        return self._log

    def _compensator(self) -> Compensator:
        s = self.settings
        return Compensator(self.ledger, self._compensation_log, {s.target: self.actuator}, s.run_id,
                           caps={s.target: s.max_replicas}, clock=self._clock, metrics=self.metrics,
                           fence=self._fence, fault=self._fault)

    def _resume(self) -> None:
        """Continue the cycle numbering, find the last acted decision left without an outcome
        (:attr:`_pending`; the next cycle settles it once it has read the source and the fleet) and
        the rollbacks left without their done record (carried out before the policy decides again).

        Malformed rows of this run (the ledger skips and lists them) are left in place and named in
        an ERROR; numbering continues past any cycle number their keys still show, so no id is
        reused. Skipping loses nothing that matters for safety: a skipped unfinished decision is
        not resumed, and the policy re-decides on fresh data.
        """
        mine = [c for c in self.ledger.cycles(RunId(self.settings.run_id)) if not c.cycle_id.endswith("-outcome")]
        bad = tuple(self.ledger.skipped)
        nums = [int(c.cycle_id.rsplit("-c", 1)[1]) for c in mine
                if c.cycle_id.rsplit("-c", 1)[-1].isdigit()]
        for row in bad:
            found = re.findall(r"-c(\d{1,18})(?!\d)", row.key)
            nums.extend(int(x) for x in found)
        if bad:
            log.error("ledger: %d malformed row(s) of run %s skipped on resume (left as they are; fix or remove "
                      "them with the store's own tools): %s", len(bad), self.settings.run_id,
                      "; ".join(r.error for r in bad[:3])[:1000])
        self._n = max(nums, default=0)
        self._pending = None
        self._rollbacks.resume(mine)
        acts = [c for c in mine for d in c.decisions
                if d.action in ("scale_up", "scale_down") and d.plan.get("mode") == "act" and COMPENSATES not in d.plan]
        if not acts:
            return
        last = acts[-1]
        self._prev_action = last.decisions[0].decision_id
        if self.ledger.get_cycle(CycleId(f"{last.cycle_id}-outcome")) is None:
            self._pending = (last, last.decisions[0])

    def _settle_pending(self, span: Spans, seen: _Sensed, n: int, tick: Tick) -> CycleOutcome | None:
        """Apply or close the decision a predecessor left without an outcome (:mod:`ebb.live.resume`)
        and record its outcome. This cycle's outcome when it changed the fleet; None to go on deciding."""
        assert self._pending is not None
        cycle, d = self._pending
        verdict = resume_verdict(d, seen.state, int(self._clock() * 1e9), self.settings.resume_limits,
                                 data_note=seen.unfit)
        if verdict.apply and self.settings.mode != "act":
            # Restarted to only recommend: a predecessor's act-mode decision is not carried out.
            verdict = replace(verdict, apply=False, to_replicas=seen.state.spec_replicas, victims=(),
                              note="not resumed: the controller now runs in recommend mode")
        fence = self._fence()  # NotLeader when leadership lapsed meanwhile: the next leader reconciles it
        res = None
        if verdict.apply:
            with span.layer("ebb.actuate", **{"ebb.resume": True}) as a:
                res = self.actuator.apply(d.decision_id, ScaleRequest(verdict.to_replicas, verdict.victims))
                a.set(**{"ebb.actuate.applied": res.applied, "ebb.replicas.after": res.replicas_after})
        self._append(outcome_cycle(cycle, d.decision_id, ts_ns=int(self._clock() * 1e9), note=verdict.note,
                                   result=None if res is None else _actuated(res),
                                   fencing_token=self._token(fence)), fence)
        self._pending = None
        log.warning("decision %s (%s %d→%d) was left without an outcome: %s", d.decision_id, d.action,
                    d.from_replicas, d.to_replicas, verdict.note)
        if res is None:
            return None
        return seen.outcome(n, tick.t_s, d.action, res.replicas_after, d.decision_id, acted=res.applied,
                            note=verdict.note)

    def _write_outcome(self, span: Spans, cycle: CycleRecord, res: ActuationResult, fence: Any) -> None:
        """The acted decision's outcome, best effort: unrecorded, the next leader's resume finds the
        fleet at ``to`` and records it then."""
        did = cycle.decisions[0].decision_id
        try:
            with span.layer("ebb.ledger.outcome"):
                self._append(outcome_cycle(cycle, did, ts_ns=int(self._clock() * 1e9), note="applied",
                                           result=_actuated(res), fencing_token=self._token(fence)), fence)
        except (TransientError, NotLeader) as exc:
            log.error("outcome of %s not recorded (%s); a restart reconciles it", did, exc)

    # -- one cycle, in two halves ------------------------------------------------------------------
    def cycle(self) -> CycleOutcome:
        """Run one cycle; never raises for source, ledger or actuator trouble (logged, counted), nor
        for anything else a peer's answer can provoke (logged with its traceback, no action)."""
        return self.commit(self.propose())

    def propose(self) -> CycleOutcome | Proposal:
        """Run one cycle up to its decision (module docstring: one cycle in two plain calls): the
        cycle's outcome when it ended before deciding, else its :class:`Proposal`. Never raises."""
        start = time.perf_counter()
        tick = self._timeline.tick()
        try:
            return self._propose(tick, start)
        except Exception as exc:  # last resort: a bug or an unforeseen answer must not crash-loop the fleet
            return self._internal_error(exc, tick, start)

    def commit(self, step: CycleOutcome | Proposal, decision: Decision | None = None) -> CycleOutcome:
        """Carry out ``decision`` (default: the proposal's) and return the cycle's outcome; an outcome
        passed in is returned as it is. A proposal is committed once: again, it returns its outcome.
        Never raises (like :meth:`cycle`).

        ``decision`` may only narrow the proposal: the same ``from_replicas`` and a target between
        the proposal's ``from`` and ``to`` (fewer removals or additions, other victims, a veto).
        The proposal already passed the controller's locks (replica bounds, stale data), and a
        narrower decision keeps passing them; a wider one is refused — a scale-down proposal then
        becomes a veto, a scale-up goes as proposed — and logged as the bug it is. For a rollback,
        the narrowed target is the most replicas it may restore (a fleet's namespace quota)."""
        if isinstance(step, CycleOutcome):
            return step
        held = step.cycle
        if held.outcome is not None:
            return held.outcome
        if held.owner is not self:
            log.error("cycle %s was proposed by another controller; not committed here", held.cycle_id)
            return CycleOutcome(0, held.tick.t_s, "error", 0, 0, 0, None, note="proposal of another controller")
        try:
            out = self._commit(step, step.decision if decision is None else decision)
        except Exception as exc:  # last resort, as in propose; the span already recorded it
            out = self._internal_error(exc, held.tick, held.started_s)
            if step.compensation is not None:
                self._rollbacks.done(step.compensation)  # a poison request must not block the loop
        if held.outcome is None:
            held.outcome = out
        return held.outcome

    def _internal_error(self, exc: Exception, tick: Tick, start: float) -> CycleOutcome:
        log.exception("cycle failed unexpectedly (%s: %s); no action taken", type(exc).__name__, exc)
        self._was_leader = False  # re-read the ledger before the next action
        return self._finish(CycleOutcome(0, tick.t_s, "error", 0, 0, 0, None,
                                         note=f"internal error: {type(exc).__name__}: {exc}"[:300]), start)

    def _propose(self, tick: Tick, start: float) -> CycleOutcome | Proposal:
        leader = self.elector is None or self.elector.is_leader()
        if self.metrics is not None:
            self.metrics.set_leader(leader)
        if not leader:
            self._was_leader = False
            self._rollbacks.clear()  # recorded ones are the new leader's to resume; unrecorded ones lapse
            return self._follow(tick, start)
        try:
            if not self._was_leader or self._n is None:
                self._resume()
            self._was_leader = True
        except EbbError as exc:
            log.error("cannot resume from the ledger (%s); not acting this cycle", exc)
            self._was_leader = False
            return self._finish(CycleOutcome(0, tick.t_s, "error", 0, 0, 0, None, note=str(exc)), start)
        assert self._n is not None
        self._n += 1
        n = self._n
        held = OpenCycle.open(self.tracer, owner=self, n=n, cycle_id=CycleId(f"{self.settings.run_id}-c{n}"),
                              run_id=self.settings.run_id, target=self.settings.target, tick=tick, started_s=start)
        try:
            step = self._sense_and_decide(held)
        except EbbError as exc:
            return self._end(held, self._errored(held, exc))
        except BaseException as exc:  # recorded on the span, then the last resort (or a kill) goes on
            held.close(exc)
            raise
        return self._end(held, step) if isinstance(step, CycleOutcome) else step

    def _commit(self, p: Proposal, decided: Decision) -> CycleOutcome:
        held = p.cycle
        try:
            if decided is not p.decision:
                decided = _narrowed(p.decision, decided)
            if p.compensation is not None:
                out = self._rolled_back(held, p, decided)
            else:
                blocked = p.blocked or (decided.vetoes[-1] if decided.action == "veto" and decided.vetoes
                                        and p.decision.action != "veto" else "")
                out = self._recorded_and_acted(held.span, decided, blocked, p.seen, held.n, held.cycle_id, held.tick)
        except EbbError as exc:
            out = self._errored(held, exc)
        except BaseException as exc:
            held.close(exc)
            raise
        return self._end(held, out)

    def _errored(self, held: OpenCycle, exc: EbbError) -> CycleOutcome:
        held.span.record_error(exc)
        log.error("cycle %s failed: %s", held.cycle_id, exc)
        return CycleOutcome(held.n, held.tick.t_s, "error", 0, 0, 0, None, note=str(exc))

    def _end(self, held: OpenCycle, out: CycleOutcome) -> CycleOutcome:
        """Close the cycle: its span's attributes, the span, the outcome kept and counted."""
        held.span.set(**{"ebb.decision.action": out.action, "ebb.replicas.from": out.spec_replicas,
                         "ebb.replicas.to": out.to_replicas, "ebb.data.staleness_s": out.staleness_s})
        held.end(out)
        return self._finish(out, held.started_s)

    def _finish(self, out: CycleOutcome, start: float) -> CycleOutcome:
        self.outcomes.append(out)
        if self.metrics is not None:
            self.metrics.observe_cycle(out.action, time.perf_counter() - start, out.staleness_s)
        return out

    def _follow(self, tick: Tick, start: float) -> CycleOutcome:
        """A follower keeps the policy's windows warm and never writes or acts (nor traces)."""
        try:
            seen = self._sensor.sense(self.source, self.actuator, NO_SPANS, tick)
        except EbbError as exc:
            return self._finish(CycleOutcome(0, tick.t_s, "follower", 0, 0, 0, None, note=str(exc)), start)
        self._counts = (seen.state.spec_replicas, seen.state.ready_replicas)
        self.policy.observe(_observation(seen, tick))
        spec = seen.state.spec_replicas
        return self._finish(seen.outcome(0, tick.t_s, "follower", spec, note=seen.note or "not the leader"), start)

    def _sense(self, span: Spans, tick: Tick) -> _Sensed:
        seen = self._sensor.sense(self.source, self.actuator, span, tick)
        self._counts = (seen.state.spec_replicas, seen.state.ready_replicas)
        return seen

    def _sense_and_decide(self, held: OpenCycle) -> CycleOutcome | Proposal:
        """One leading cycle up to its proposal: sense, settle a predecessor's unfinished decision,
        carry out a pending rollback or observe (and measure gates), decide, lock (bounds, stale data)."""
        span, n, tick = held.span, held.n, held.tick
        seen = self._sense(span, tick)
        if self._pending is not None and (resumed := self._settle_pending(span, seen, n, tick)) is not None:
            return resumed  # the fleet changed under this cycle's read: the next cycle decides on it
        obs = _observation(seen, tick)
        if self.settings.mode == "act" and (req := self._rollbacks.next(tick.t_s)) is not None:
            self.policy.observe(obs)  # the policy keeps its windows; it decides again next cycle
            return self._rollback_proposal(held, req, seen, None)
        obs = self._gated_obs(span, obs)
        self._fault("before_plan")
        d = self._decide(span, obs)
        if d.gate is not None and d.gate.step == "compensate" and self.settings.mode == "act":
            if (req := self._rollbacks.for_gate("; ".join(d.reasons))) is not None:
                return self._rollback_proposal(held, req, seen, d.gate)
            log.warning("gate asked to compensate, but the run has no acted scale-down to undo: a plain scale-up")
        proposed, blocked = self._locked(d, seen)
        return Proposal(proposed, seen, n, held, blocked)

    # -- the rollback channel -------------------------------------------------------------------
    def _rollback_proposal(self, held: OpenCycle, req: CompensationRequest, seen: _Sensed,
                           gate: GateStep | None) -> Proposal:
        """The cycle's proposal for a rollback: the scale-up back to the root's pre-state (planned from
        the ledger), through the replica bounds."""
        spec = seen.state.spec_replicas
        try:
            planned = self._compensator().planned(req.root)
        except PermanentError as exc:  # a malformed causal graph: the commit sends it to review
            log.error("rollback of %s cannot be planned: %s", req.root, exc)
            planned = {}
        to = max(spec, planned.get(self.settings.target, spec))
        d = Decision(held.tick.t_s, action_between(spec, to), spec, to, policy=self.policy.spec,
                     reasons=(f"rollback of {req.root}" + (f": {req.reason}" if req.reason else ""),),
                     gate=gate or GateStep("compensate", "rollback"))
        proposed, blocked = self._locked(d, seen)
        return Proposal(proposed, seen, held.n, held, blocked, req)

    def _rolled_back(self, held: OpenCycle, p: Proposal, decided: Decision) -> CycleOutcome:
        """Commit a rollback proposal: the rollback channel carries it out (module docstring)."""
        req, seen, s = p.compensation, p.seen, self.settings
        assert req is not None
        clamped = [r for r in p.decision.reasons if r.startswith("clamped to")]
        cap_reason = "; ".join((*decided.vetoes, *decided.reasons[len(p.decision.reasons):])) or (
            clamped[-1] if clamped else "the replicas this cycle proposed")
        cap = decided.from_replicas if decided.action == "veto" else decided.to_replicas
        try:
            report = self._compensator().run(req, own=s.target, cap=cap, cap_reason=cap_reason, spans=held.span)
        except CompensationDeferred as exc:  # kept: the next cycle tries again (or a successor resumes it)
            if self.metrics is not None:
                self.metrics.ledger_write_error()
            log.error("rollback of %s deferred: %s", req.root, exc)
            return seen.outcome(held.n, held.tick.t_s, "error", seen.state.spec_replicas, note=f"rollback: {exc}")
        self._rollbacks.done(req)
        return self._rollback_outcome(held, seen, report)

    def _rollback_outcome(self, held: OpenCycle, seen: _Sensed, report: CompensationReport) -> CycleOutcome:
        last = report.last_on(self.settings.target)
        if last is not None:
            self._prev_action = last.decision_id
            if self._counts is not None:
                self._counts = (last.replicas_after, self._counts[1])
            return seen.outcome(held.n, held.tick.t_s, "scale_up", last.replicas_after, last.decision_id,
                                acted=last.applied, note=report.note)
        action = "hold" if report.completed else "veto"
        return seen.outcome(held.n, held.tick.t_s, action, seen.state.spec_replicas, note=report.note)

    # -- record and act -------------------------------------------------------------------------
    def _carry_out(self, span: CycleSpan, decided: Decision, seen: _Sensed, n: int, cid: CycleId,
                   tick: Tick, *, fast: bool = False) -> CycleOutcome:
        """A decision's way out: lock (bounds, stale data), record, act, record the outcome. Holds end here."""
        d, blocked = self._locked(decided, seen)
        return self._recorded_and_acted(span, d, blocked, seen, n, cid, tick, fast=fast)

    def _recorded_and_acted(self, span: CycleSpan, d: Decision, blocked: str, seen: _Sensed, n: int,
                            cid: CycleId, tick: Tick, *, fast: bool = False) -> CycleOutcome:
        """Record a locked decision, act on it (``act`` mode), record the outcome. Holds end here."""
        if not d.noteworthy:
            return seen.outcome(n, tick.t_s, "hold", d.to_replicas, note=seen.note)
        fence = self._fence()
        cycle = self._cycle_record(d, n, cid, tick, seen.state, fence)
        rec = cycle.decisions[0]
        if (refused := self._write(span, cycle, fence)) is not None:
            return seen.outcome(n, tick.t_s, "error", seen.state.spec_replicas, rec.decision_id,
                                note=f"ledger: {refused}")
        self._fault("after_ledger")
        self._count(rec)
        if self.settings.mode != "act" or not d.changes:
            return replace(seen.outcome(n, tick.t_s, d.action, rec.to_replicas, rec.decision_id,
                                        note=blocked or seen.note, signals=rec.signals), fast=fast)
        return replace(self._act(span, cycle, d, fence, seen, n, tick.t_s), fast=fast)

    def _gated_obs(self, span: Spans, obs: Observation) -> Observation:
        """``obs`` with each of the policy's gate queries measured once (only while it names any)."""
        queries = self.policy.gate_queries()
        if not queries or self.gate_probe is None:
            return obs
        return replace(obs, gate_values=self._measure_gates(span, queries))

    def _measure_gates(self, span: Spans, queries: tuple[str, ...]) -> dict[str, float]:
        """One measurement of every gate query; a failed query is no data (NaN)."""
        assert self.gate_probe is not None
        values: dict[str, float] = {}
        for q in queries:
            with span.layer("ebb.gate.measure", **{"ebb.gate.query": q}) as gs:
                try:
                    v = self.gate_probe(q)
                except EbbError as exc:
                    log.warning("gate query %r failed: %s (counted as no data)", q, exc)
                    v = None
                values[q] = math.nan if v is None else float(v)
                gs.set(**{"ebb.gate.value": v})
        return values

    def _decide(self, span: CycleSpan, obs: Observation) -> Decision:
        """The policy's decision; its layers open their spans under ``ebb.decide``."""
        with span.layer("ebb.decide", **{"ebb.policy": self.policy.spec}) as ds:
            d = self.policy.decide(obs, spans=span)
            ds.set(**{"ebb.decision.action": d.action})
        if d.gate is not None and self.metrics is not None:
            self.metrics.gate_result("canary", d.gate.step)
        return d if d.policy else replace(d, policy=self.policy.spec)

    def _locked(self, d: Decision, seen: _Sensed) -> tuple[Decision, str]:
        """The controller's own locks on ``d``: the replica bounds, then no scale-down on data it
        cannot trust, whatever the policy said. Returns the decision and the lock's veto ("" if none)."""
        s = self.settings
        bounded = clamp(d, s.min_replicas, s.max_replicas)
        if bounded is not d:
            log.warning("policy asked for %d replicas; clamped to [%d, %d]", d.to_replicas, s.min_replicas,
                        s.max_replicas)
        locked = stale_data_veto(bounded, seen.unfit) if seen.unfit else bounded
        return locked, (locked.vetoes[-1] if locked is not bounded else "")

    def _cycle_record(self, d: Decision, n: int, cid: CycleId, tick: Tick, state: FleetState,
                      fence: Any) -> CycleRecord:
        """The ledger cycle of ``d``: victims under the actuator's names, caused by the last change (a
        canary's ``proceed`` by its canary step: the event graph's edge)."""
        s = self.settings
        caused = caused_by(d, self._prev_action)
        if d.gate is not None and d.gate.step == "proceed" and d.action == "scale_down" and \
                (gated := self._rollbacks.gated_root) is not None:
            caused = (gated,)
        rec = decision_record(d, decision_id=DecisionId(f"{s.run_id}-{n}"), cycle_id=cid, run_id=RunId(s.run_id),
                              ts_ns=int(tick.wall_s * 1e9), target=s.target, victim_name=_victim_names(state),
                              caused=caused, extra_plan={"mode": s.mode, "controller": "live"})
        return cycle_record(rec, policy=self.policy.spec, fencing_token=self._token(fence),
                            snapshot={"replicas": state.spec_replicas, "ready": state.ready_replicas,
                                      "draining": state.draining})

    def _write(self, span: Spans, cycle: CycleRecord, fence: Any) -> str | None:
        """Append the decision's cycle; the ledger's refusal (counted, logged) or None when written."""
        try:
            with span.layer("ebb.ledger"):
                self._append(cycle, fence)
        except (TransientError, NotLeader) as exc:
            if self.metrics is not None:
                self.metrics.ledger_write_error()
            log.error("ledger refused decision %s (%s): not acting", cycle.decisions[0].decision_id, exc)
            return str(exc)
        return None

    def _count(self, rec: DecisionRecord) -> None:
        if self.metrics is not None:
            self.metrics.decision(rec.action, list(rec.vetoes))
        log.info("decision %s: %s %d→%d (%s)", rec.decision_id, rec.action, rec.from_replicas, rec.to_replicas,
                 "; ".join(rec.reasons + rec.vetoes))

    def _act(self, span: Spans, cycle: CycleRecord, d: Decision, fence: Any, seen: _Sensed, n: int,
             t_s: float) -> CycleOutcome:
        """Apply a recorded change (unless deposed since the write), then record its outcome."""
        rec = cycle.decisions[0]
        did = rec.decision_id
        if self.elector is not None and self._token(self.elector.fence()) != self._token(fence):
            # Deposed between the write and the act: the successor's resume reconciles this decision.
            log.error("lost leadership after recording %s: not acting", did)
            return seen.outcome(n, t_s, "error", seen.state.spec_replicas, did, note="lost leadership before acting")
        with span.layer("ebb.actuate") as a:
            res = self.actuator.apply(did, ScaleRequest(d.to_replicas, d.victims))
            a.set(**{"ebb.actuate.applied": res.applied, "ebb.replicas.after": res.replicas_after})
        self._prev_action = did
        if d.gate is not None and d.gate.step in ("canary", "watch") and d.action == "scale_down":
            self._rollbacks.gated(did)
        if self._counts is not None:
            self._counts = (res.replicas_after, self._counts[1])
        self._fault("after_actuation")
        self._write_outcome(span, cycle, res, fence)
        return seen.outcome(n, t_s, d.action, res.replicas_after, did, acted=res.applied, signals=rec.signals)

    # -- the fast path ---------------------------------------------------------------------------
    def react(self) -> CycleOutcome | None:
        """One fast-path tick between cycles: read the source's new samples and let a
        :class:`~ebb.decide.base.Reactive` policy ask for capacity at once. None when it asks for
        nothing, or cannot be asked (no fast path, not the leader, no cycle yet, data not fresh: the
        next cycle decides) — no trace, no ledger row. A tick that fires reads the fleet afresh and
        goes the cycle's way: a cycle number, a trace, write-ahead ledger, actuator, outcome. Never
        raises (like :meth:`cycle`)."""
        if self._fast is None or self._counts is None or self._n is None or not self._was_leader:
            return None
        start = time.perf_counter()
        tick = self._timeline.tick()
        try:
            return self._react(self._fast, tick, start)
        except Exception as exc:  # the same last resort as a cycle's: log, no action
            log.exception("fast path failed unexpectedly (%s: %s); no action taken", type(exc).__name__, exc)
            self._was_leader = False
            return None

    def _react(self, fast: Reactive, tick: Tick, start: float) -> CycleOutcome | None:
        if self.elector is not None and not self.elector.is_leader():
            self._was_leader = False
            return None
        sig, note = self._sensor.read(self.source, NO_SPANS, tick, quiet=True)
        if note or not len(sig.fine.t_s) or self._counts is None:
            return None
        spec, ready = self._counts
        obs = Observation(t_s=tick.t_s, spec_replicas=spec, ready_replicas=ready, pods=(), total_qps=sig.total_qps,
                          total_inflight=None, queued=sig.queued, fine=_rebase(sig.fine, tick))
        wish = fast.react(obs)
        if wish is None:
            return None
        assert self._n is not None
        self._n += 1
        n = self._n
        cid = CycleId(f"{self.settings.run_id}-c{n}")
        with self.tracer.cycle(cid, self.settings.run_id, self.settings.target) as span:
            span.set(**{"ebb.fast": True})
            try:
                with span.layer("ebb.actuate.state"):
                    state = self.actuator.state()
                seen = _Sensed(sig, state, "", self._sensor.staleness(tick), self.settings.max_staleness_s)
                self._counts = (state.spec_replicas, state.ready_replicas)
                to = max(wish.to_replicas, state.spec_replicas)
                d = wish if wish.from_replicas == state.spec_replicas else \
                    replace(wish, from_replicas=state.spec_replicas, to_replicas=to,
                            action="scale_up" if to > state.spec_replicas else "hold")
                out = self._carry_out(span, d, seen, n, cid, tick, fast=True)
            except EbbError as exc:
                span.record_error(exc)
                log.error("fast path %s failed: %s", cid, exc)
                out = CycleOutcome(n, tick.t_s, "error", 0, 0, 0, None, note=str(exc), fast=True)
            span.set(**{"ebb.decision.action": out.action, "ebb.replicas.from": out.spec_replicas,
                        "ebb.replicas.to": out.to_replicas, "ebb.data.staleness_s": out.staleness_s})
        return self._finish(out, start)

    # -- the loop -------------------------------------------------------------------------------
    def run(self, stop: threading.Event, *, max_cycles: int | None = None,
            on_cycle: Callable[[CycleOutcome], None] | None = None) -> None:
        """Cycle every ``interval_s`` on the wall clock until ``stop`` is set (or ``max_cycles``); in
        between, the fast path ticks every ``react_interval_s`` when the policy has one."""
        def tick() -> None:
            fired = self.react()
            if fired is not None and on_cycle is not None:
                on_cycle(fired)

        paced_loop(stop, cycle=self.cycle, interval_s=self.settings.interval_s,
                   react_s=self.settings.react_interval_s if self._fast is not None else 0.0,
                   tick=tick, max_cycles=max_cycles, on_cycle=on_cycle)


def _narrowed(proposed: Decision, decided: Decision) -> Decision:
    """``decided`` when it narrows ``proposed`` (:meth:`Controller.commit`); otherwise the safe side."""
    lo, hi = sorted((proposed.from_replicas, proposed.to_replicas))
    if decided.from_replicas == proposed.from_replicas and lo <= decided.to_replicas <= hi:
        return decided
    log.error("refused a decision %d→%d that widens the proposal %d→%d", decided.from_replicas,
              decided.to_replicas, proposed.from_replicas, proposed.to_replicas)
    if proposed.action != "scale_down":
        return proposed
    return proposed.retarget(proposed.from_replicas, veto="scale-down blocked by the controller: a cluster step "
                             f"asked {decided.from_replicas}→{decided.to_replicas}, beyond the proposal")
