"""The live controller: the simulator's decision code on the wall clock (``ebb run``).

One cycle every ``interval_s`` (1 s), in data-flow order::

    source.read ─► fleet ─► [resume] ─► Observation ─► policy.decide (L1 → L2 → L3 [→ gate])
        ─► Decision ─► clamp ─► stale-data lock ─► ledger ─► actuator ─► ledger (outcome)
                                     └─ a gate failed ─► rollback channel (ebb.live.rollback_channel)

The policy is any :class:`ebb.decide.base.Policy`; the controller uses its protocol and nothing
else (``decide``, ``observe``, ``gate_queries``, ``spec``). It runs the cycle and delegates each
concern to the module that owns it and states its guarantees: the read of the source and the fleet
(:mod:`ebb.live.sensed`), its own locks on a decision (:mod:`ebb.live.locks`), the ledger's side of
a cycle — numbering, fenced write-ahead records, outcomes, the resume after a restart
(:mod:`ebb.live.cycle_ledger`) —, the metrics gates (:mod:`ebb.live.gate_probe`), rollbacks
(:mod:`ebb.live.rollback_channel`), the fast path between cycles (:mod:`ebb.live.fast_path`), a
cycle held open between its halves (:mod:`ebb.live.open_cycle`) and the pacing (:mod:`ebb.live.pacing`).

Guarantees:

* **Same decisions as the simulator.** The policy object is the one ``ebb simulate`` runs
  (:mod:`ebb.decide.policy`); the controller only converts wall time to seconds since its start
  and live signals to an :class:`~ebb.model.observation.Observation`.
* **Fail static on bad data.** A source that is unreachable, or whose freshest sample is older
  than ``max_staleness_s`` (5 s), contributes no samples (the freshest sample any read returned
  since the last clock step: a read with nothing newer than the one before is not stale by
  itself); the policy then vetoes scale-down (stale data). The controller also refuses, by
  itself, to execute a scale-down planned while data is stale (:mod:`ebb.live.locks`) — two
  independent locks. Scale-ups still go through: adding capacity is the safe side.
* **Fleet completeness.** A read whose samples cover fewer replicas than are ready
  (``LiveSignals.replicas_seen``: a target vanished from Prometheus, a worker an agent cannot poll)
  understates demand: it blocks every scale-down, like stale data, and is said in the cycle's note.
* **Write-ahead, exactly once, never a blind replay** (:mod:`ebb.live.cycle_ledger`). A decision is
  appended to the ledger *before* the actuator is called (``mode=act``), its outcome after; holds
  are not written; a decision the ledger refused is never acted on, nor one whose leader was
  deposed between the write and the act (the successor's resume reconciles it). A controller
  restarted after a crash at any point re-checks its last decision without an outcome in its first
  leading cycle, after that cycle's read of the source and the fleet (:mod:`ebb.live.resume`); a
  cycle that applied a resumed decision ends there (no decision of its own; its cycle number is
  skipped): the next cycle decides on the new fleet. Victims are recorded by the actuator's names.
* **Replica bounds hold.** No decision, from the policy or the ledger, takes the fleet below
  ``min_replicas`` or above ``max_replicas`` (:class:`ControllerSettings`): the policy's and the
  fast path's are clamped (:mod:`ebb.live.locks`), a resumed one too (:mod:`ebb.live.resume`), and
  a rollback's steps — scale-ups back to a recorded pre-state — are planned within
  ``max_replicas``; steps a predecessor (or a forged row) recorded are checked against it before
  they are applied, and one over it sends the rollback to review (:mod:`ebb.live.compensation`).
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
* **Gates measured only when asked** (:mod:`ebb.live.gate_probe`): once per cycle, while the
  policy names ``gate_queries()``.
* **One rollback channel** (SPEC §3.5, :mod:`ebb.live.rollback_channel`). A failed gate's rollback,
  a resumed one or an operator's retry is carried out before the policy decides again: the cycle
  proposes it instead of a plain scale-up and its commit carries it out; a cycle that carries out
  a retried or resumed request shows the policy its data (``observe``) without asking it to decide.
  In ``recommend`` mode nothing is compensated: the guard's ``compensate`` is recorded as the
  scale-up it would be.
* **An asleep tier, as in the simulator.** With a :class:`~ebb.actuate.base.SleepingActuator` that
  has a tier, the policy sees the fleet's sleepers (``Observation.asleep_replicas``); with a policy
  that :class:`~ebb.decide.base.Sleeps` (Ebb, given the tier's ``wake_s`` and ``max`` by
  :func:`~ebb.live.policy_spec.build_live_policy`), every decision acted on in ``act`` mode — a
  hold, a veto, a change, the fast path's — is followed by
  ``actuator.keep_asleep(policy.asleep_wanted(replicas after))``: the sleepers the policy no longer
  counts on are released, oldest first (the simulator's ``keep_asleep`` after each decision). A
  release that fails is logged and retried after the next decision; it never fails the cycle.
* **Every drain in the ledger.** In ``act`` mode an actuator that :class:`~ebb.actuate.base.ReportsDrains`
  gets a :class:`~ebb.live.drain_ledger.DrainLedger`: each drain's start, bounded in-flight steps and
  end become fenced ledger cycles of the run (:mod:`ebb.model.drains`), written off its threads.
* **Telemetry never changes behaviour.** One trace per cycle (root span ``ebb.cycle``); the policy
  opens its layer spans (``ebb.l1``, ``ebb.l2``, ``ebb.l3``, gate spans) around its real work under
  ``ebb.decide``; metrics and logs are best effort. Followers emit no traces (:data:`NO_SPANS`).

Ids: decisions ``<run_id>-<n>``, cycles ``<run_id>-c<n>``, continuing the run's sequence across
restarts and fail-overs (:mod:`ebb.live.cycle_ledger`); rollback records' are derived from their
root event and take no cycle number (:mod:`ebb.live.compensation`).

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
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from ebb.actuate.base import Actuator, ReportsDrains, SleepingActuator
from ebb.decide.base import Policy, Sleeps
from ebb.errors import EbbError
from ebb.ledger.base import Ledger
from ebb.ledger.review import CompensationLog
from ebb.live.cycle_ledger import CycleLedger
from ebb.live.drain_ledger import DrainLedger
from ebb.live.fast_path import FastPath, onto_fleet
from ebb.live.gate_probe import gated_observation
from ebb.live.locks import locked, narrowed
from ebb.live.open_cycle import OpenCycle, Proposal
from ebb.live.pacing import paced_loop
from ebb.live.rollback_channel import RollbackChannel
from ebb.live.sensed import Sensed as _Sensed
from ebb.live.sensed import Sensor
from ebb.live.sensed import observation as _observation
from ebb.live.settings import ControllerSettings, CycleOutcome, Elector
from ebb.live.timeline import Tick, Timeline
from ebb.model.decision import Decision
from ebb.model.decisions import CycleRecord
from ebb.model.ids import CycleId
from ebb.model.observation import Observation, ScaleRequest
from ebb.model.spans import NO_SPANS, Spans
from ebb.sources.live import ClockedSource, SignalSource
from ebb.telemetry.metrics import EbbMetrics
from ebb.telemetry.tracing import CycleSpan, CycleTracer

__all__ = ["Controller", "ControllerSettings", "CycleOutcome", "Elector", "Proposal"]

log = logging.getLogger(__name__)


class Controller:
    """The live loop for one workload. Not thread-safe: one thread calls :meth:`cycle` / :meth:`run`."""

    def __init__(self, policy: Policy, source: SignalSource, actuator: Actuator, ledger: Ledger,
                 settings: ControllerSettings, *, tracer: CycleTracer | None = None,
                 metrics: EbbMetrics | None = None, elector: Elector | None = None,
                 clock: Callable[[], float] = time.time, monotonic: Callable[[], float] | None = None,
                 fault_point: Callable[[str], None] | None = None,
                 gate_probe: Callable[[str], float | None] | None = None,
                 compensation_log: CompensationLog | None = None,
                 watchers: Sequence[Callable[[CycleOutcome], None]] = ()) -> None:
        self.policy = policy
        self.source = source
        self.actuator = actuator
        self.ledger = ledger
        self.settings = settings
        self.tracer = tracer or CycleTracer()
        self.metrics = metrics
        self.elector = elector
        self.gate_probe = gate_probe
        """Measures a metrics-gate query (PromQL) while the policy names gate queries; None = unmeasured."""
        self.watchers = tuple(watchers)
        """Called with every cycle's outcome (a cycle, a fast-path tick, a follower's, an error) after it is
        kept: the desired-replicas gauge, the KEDA scaler's board, the shadow recorder. A watcher that
        raises is logged and skipped; it never changes the cycle (telemetry never changes behaviour)."""
        self._fault = fault_point or (lambda where: None)
        """Called at ``before_plan``, ``after_ledger`` and ``after_actuation`` of every acting cycle, and at
        ``after_compensation_ledger`` / ``after_compensation_actuation`` of every rollback step: crash
        tests kill the process there (the crash-point matrix); a no-op otherwise."""
        self._timeline = Timeline(clock, monotonic, interval_s=settings.interval_s,
                                  max_gap_s=max(settings.lookback_s, 10 * settings.interval_s))
        """Wall clock for stamps (sources, ledger), monotonic for the policy (a step moves neither)."""
        self.t0 = clock()
        self._sensor = Sensor(self.t0, lookback_s=settings.lookback_s, max_staleness_s=settings.max_staleness_s)
        self._was_leader = False
        self._books = CycleLedger(ledger, settings, elector=elector, clock=clock, metrics=metrics)
        """The ledger's side of the cycles: numbering, fenced write-ahead records, outcomes, resume."""
        self._rollback = RollbackChannel(ledger, settings, clock=clock, metrics=metrics, fence=self._books.fence,
                                         still_fenced=self._books.still_fenced, fault=self._fault,
                                         review_log=compensation_log)
        """Rollbacks to carry out before the policy decides again, and how (the compensation log is
        opened next to the ledger on first use unless given, and closed by :meth:`close`)."""
        self.outcomes: deque[CycleOutcome] = deque(maxlen=settings.keep_outcomes)
        self._fast = FastPath(policy, react_interval_s=settings.react_interval_s)
        """The fast path between cycles, and the fleet counts a quiet tick compares the policy's wish with."""
        tiered = isinstance(actuator, SleepingActuator) and actuator.tier is not None
        self._sleeps: tuple[Sleeps, SleepingActuator] | None = (
            (policy, actuator) if tiered and isinstance(policy, Sleeps) and policy.sleeps
            and isinstance(actuator, SleepingActuator) else None)
        """The policy that says which sleepers it counts on and the actuator that keeps them (module
        docstring: an asleep tier); None without a tier or for a policy that does not sleep."""
        self.drains: DrainLedger | None = None
        """The writer of the actuator's drain records in ``act`` mode (module docstring); None otherwise."""
        if settings.mode == "act" and isinstance(actuator, ReportsDrains):
            self.drains = DrainLedger(ledger, settings.run_id, fence=self._books.fence)
            actuator.observe_drains(self.drains)

    def close(self) -> None:
        """Close what the controller opened itself (the compensation log, the drain writer after it wrote
        what was queued: at most 5 s); the ledger is the caller's."""
        if self.drains is not None and isinstance(self.actuator, ReportsDrains):
            self.actuator.observe_drains(None)
            self.drains.close()
        self._rollback.close()

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
            if step.compensation is not None:  # a poison request must not block the loop, nor come back on resume
                self._rollback.abandon(step.compensation.request,
                                       f"rollback failed: internal error: {type(exc).__name__}: {exc}")
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
            self._rollback.queue.clear()  # recorded ones are the new leader's to resume; unrecorded ones lapse
            return self._follow(tick, start)
        try:
            if not self._was_leader or not self._books.resumed:
                self._books.resume(self._rollback.queue)
            self._was_leader = True
        except EbbError as exc:
            log.error("cannot resume from the ledger (%s); not acting this cycle", exc)
            self._was_leader = False
            return self._finish(CycleOutcome(0, tick.t_s, "error", 0, 0, 0, None, note=str(exc)), start)
        n, cid = self._books.next_cycle()
        held = OpenCycle.open(self.tracer, owner=self, n=n, cycle_id=cid, run_id=self.settings.run_id,
                              target=self.settings.target, tick=tick, started_s=start)
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
                decided = narrowed(p.decision, decided)
            if p.compensation is not None:
                out = self._rolled_back(p, decided)
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
        for watch in self.watchers:
            try:
                watch(out)
            except Exception:  # a watcher's bug must not end the cycle
                log.exception("cycle watcher %r failed; the cycle is unaffected", watch)
        if self.metrics is not None:
            self.metrics.observe_cycle(out.action, time.perf_counter() - start, out.staleness_s)
            if isinstance(self.source, ClockedSource):
                self.metrics.agent_clock_offsets(self.source.clock_offsets_s())
        return out

    def _follow(self, tick: Tick, start: float) -> CycleOutcome:
        """A follower keeps the policy's windows warm and never writes or acts (nor traces)."""
        try:
            seen = self._sensor.sense(self.source, self.actuator, NO_SPANS, tick)
        except EbbError as exc:
            return self._finish(CycleOutcome(0, tick.t_s, "follower", 0, 0, 0, None, note=str(exc)), start)
        self._fast.saw(seen.state)
        self.policy.observe(_observation(seen, tick))
        spec = seen.state.spec_replicas
        return self._finish(seen.outcome(0, tick.t_s, "follower", spec, note=seen.note or "not the leader"), start)

    def _sense(self, span: Spans, tick: Tick) -> _Sensed:
        seen = self._sensor.sense(self.source, self.actuator, span, tick)
        self._fast.saw(seen.state)
        return seen

    def _sense_and_decide(self, held: OpenCycle) -> CycleOutcome | Proposal:
        """One leading cycle up to its proposal: sense, settle a predecessor's unfinished decision,
        carry out a pending rollback or observe (and measure gates), decide, lock (bounds, stale data)."""
        span, n, tick = held.span, held.n, held.tick
        seen = self._sense(span, tick)
        if self._books.pending and \
                (resumed := self._books.settle_pending(span, seen, n, tick, self.actuator)) is not None:
            return resumed  # the fleet changed under this cycle's read: the next cycle decides on it
        obs = _observation(seen, tick)
        if self.settings.mode == "act" and (req := self._rollback.queue.next(tick.t_s)) is not None:
            self.policy.observe(obs)  # the policy keeps its windows; it decides again next cycle
            return self._rollback.proposal(held, req, seen, self.actuator, policy=self.policy.spec, gate=None)
        obs = gated_observation(obs, self.policy.gate_queries(), self.gate_probe, span)
        self._fault("before_plan")
        d = self._decide(span, obs)
        if d.gate is not None and d.gate.step == "compensate" and self.settings.mode == "act":
            if (req := self._rollback.queue.for_gate("; ".join(d.reasons))) is not None:
                return self._rollback.proposal(held, req, seen, self.actuator, policy=self.policy.spec,
                                                gate=d.gate)
            log.warning("gate asked to compensate, but the run has no acted scale-down to undo: a plain scale-up")
        proposed, blocked = self._locked(d, seen)
        return Proposal(proposed, seen, held, blocked)

    def _decide(self, span: CycleSpan, obs: Observation) -> Decision:
        """The policy's decision; its layers open their spans under ``ebb.decide``."""
        with span.layer("ebb.decide", **{"ebb.policy": self.policy.spec}) as ds:
            d = self.policy.decide(obs, spans=span)
            ds.set(**{"ebb.decision.action": d.action})
        if d.gate is not None and self.metrics is not None:
            self.metrics.gate_result("canary", d.gate.step)
        return d if d.policy else replace(d, policy=self.policy.spec)

    def _locked(self, d: Decision, seen: _Sensed) -> tuple[Decision, str]:
        """The controller's own locks on ``d`` (:mod:`ebb.live.locks`) and the lock's veto ("" if none)."""
        return locked(d, seen.unfit, min_replicas=self.settings.min_replicas, max_replicas=self.settings.max_replicas)

    # -- the rollback channel -------------------------------------------------------------------
    def _rolled_back(self, p: Proposal, decided: Decision) -> CycleOutcome:
        """Commit a rollback proposal through the rollback channel."""
        out = self._rollback.committed(p, decided, self.actuator)
        if out.decision_id is not None:  # a step applied on this target: the last change, the fleet's new size
            self._books.last_action = out.decision_id
            self._fast.applied(out.to_replicas)
        return out

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
            self._keep_asleep(d.to_replicas)
            return seen.outcome(n, tick.t_s, "hold", d.to_replicas, note=seen.note)
        fence = self._books.fence()
        cycle = self._books.record(d, n, cid, tick, seen.state, fence, policy=self.policy.spec,
                                   gated_root=self._rollback.queue.gated_root)
        rec = cycle.decisions[0]
        if (refused := self._books.write(span, cycle, fence)) is not None:
            return seen.outcome(n, tick.t_s, "error", seen.state.spec_replicas, rec.decision_id,
                                note=f"ledger: {refused}")
        self._fault("after_ledger")
        self._books.count(rec)
        if self.settings.mode != "act" or not d.changes:
            if d.action == "scale_up":
                # recommended, not applied: until the next cycle reads the fleet, the fast path takes
                # this size as asked for, so a saturated fleet in recommend mode writes a row a cycle,
                # not one every 100 ms tick
                self._fast.applied(rec.to_replicas)
            self._keep_asleep(rec.to_replicas)
            return replace(seen.outcome(n, tick.t_s, d.action, rec.to_replicas, rec.decision_id,
                                        note=blocked or seen.note, signals=rec.signals), fast=fast)
        return replace(self._act(span, cycle, d, fence, seen, n, tick.t_s), fast=fast)

    def _act(self, span: Spans, cycle: CycleRecord, d: Decision, fence: Any, seen: _Sensed, n: int,
             t_s: float) -> CycleOutcome:
        """Apply a recorded change (unless deposed since the write), then record its outcome."""
        rec = cycle.decisions[0]
        did = rec.decision_id
        if not self._books.still_fenced(fence):
            # Deposed between the write and the act: the successor's resume reconciles this decision.
            log.error("lost leadership after recording %s: not acting", did)
            return seen.outcome(n, t_s, "error", seen.state.spec_replicas, did, note="lost leadership before acting")
        with span.layer("ebb.actuate") as a:
            res = self.actuator.apply(did, ScaleRequest(d.to_replicas, d.victims))
            a.set(**{"ebb.actuate.applied": res.applied, "ebb.replicas.after": res.replicas_after})
        self._books.last_action = did
        if d.gate is not None and d.gate.step in ("canary", "watch") and d.action == "scale_down":
            self._rollback.queue.gated(did)
        self._fast.applied(res.replicas_after)
        self._fault("after_actuation")
        self._books.write_outcome(span, cycle, res, fence)
        self._keep_asleep(res.replicas_after)
        return seen.outcome(n, t_s, d.action, res.replicas_after, did, acted=res.applied, signals=rec.signals)

    def _keep_asleep(self, running: int) -> None:
        """After a decision in ``act`` mode: release the sleepers the policy no longer counts on beside
        ``running`` replicas (module docstring: an asleep tier). Never raises for the actuator's trouble."""
        if self._sleeps is None or self.settings.mode != "act":
            return
        policy, actuator = self._sleeps
        keep = policy.asleep_wanted(running)
        try:
            released = actuator.keep_asleep(keep)
        except EbbError as exc:
            log.warning("could not release sleepers past %s: %s (retried after the next decision)", keep, exc)
            return
        if released:
            log.info("released %d sleeper(s) the policy no longer counts on (keeps %s): %s", len(released), keep,
                     ", ".join(released))

    # -- the fast path ---------------------------------------------------------------------------
    def react(self) -> CycleOutcome | None:
        """One fast-path tick between cycles (:mod:`ebb.live.fast_path`): read the source's new samples
        and let a :class:`~ebb.decide.base.Reactive` policy ask for capacity at once. None when it asks
        for nothing, or cannot be asked (no fast path, not the leader, no cycle yet, data not fresh:
        the next cycle decides) — no trace, no ledger row. A tick that fires reads the fleet afresh
        and goes the cycle's way: a cycle number, a trace, write-ahead ledger, actuator, outcome.
        Never raises (like :meth:`cycle`)."""
        if not self._fast.armed or not self._books.resumed or not self._was_leader:
            return None
        start = time.perf_counter()
        tick = self._timeline.tick()
        try:
            return self._react(tick, start)
        except Exception as exc:  # the same last resort as a cycle's: log, no action
            log.exception("fast path failed unexpectedly (%s: %s); no action taken", type(exc).__name__, exc)
            self._was_leader = False
            return None

    def _react(self, tick: Tick, start: float) -> CycleOutcome | None:
        if self.elector is not None and not self.elector.is_leader():
            self._was_leader = False
            return None
        if (wished := self._fast.wish(self._sensor, self.source, tick)) is None:
            return None
        sig, wish = wished
        n, cid = self._books.next_cycle()
        with self.tracer.cycle(cid, self.settings.run_id, self.settings.target) as span:
            span.set(**{"ebb.fast": True})
            try:
                with span.layer("ebb.actuate.state"):
                    state = self.actuator.state()
                seen = _Sensed(sig, state, "", self._sensor.staleness(tick), self.settings.max_staleness_s)
                self._fast.saw(state)
                out = self._carry_out(span, onto_fleet(wish, state), seen, n, cid, tick, fast=True)
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
                   react_s=self.settings.react_interval_s if self._fast.reactive is not None else 0.0,
                   tick=tick, max_cycles=max_cycles, on_cycle=on_cycle)
