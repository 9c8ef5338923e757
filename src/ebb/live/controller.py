"""The live controller: the simulator's decision code on the wall clock (``ebb run``).

One cycle every ``interval_s`` (1 s), in data-flow order::

    source.read ─► Observation ─► policy.decide (L1 → L2 → L3 [→ canary gate]) ─► ledger ─► actuator ─► ledger

Guarantees:

* **Same decisions as the simulator.** The policy object is the one ``ebb simulate`` runs
  (:mod:`ebb.decide.policy`); the controller only converts wall time to seconds since its start
  and live signals to an :class:`~ebb.model.observation.Observation`.
* **Fail static on bad data.** A source that is unreachable, or whose freshest sample is older
  than ``max_staleness_s`` (5 s), contributes no samples; the policy then vetoes scale-down
  (stale data). The controller also refuses, by itself, to execute a scale-down planned while data
  is stale — two independent locks. Scale-ups still go through: adding capacity is the safe side.
* **Fleet completeness.** A read whose samples cover fewer replicas than are ready
  (``LiveSignals.replicas_seen``: a target vanished from Prometheus, a worker an agent cannot poll)
  understates demand: it blocks every scale-down, like stale data, and is said in the cycle's note.
* **Write-ahead, exactly once, never a blind replay.** A decision is appended to the ledger *before*
  the actuator is called (``mode=act``); the actuator is idempotent by decision id; the outcome is
  appended as a second cycle ``<cycle>-outcome``. A controller restarted after a crash at any point
  finds its last decision without an outcome and re-checks it (:mod:`ebb.live.resume`): the fleet
  already at ``to`` → recorded as done; at ``from`` → a young scale-up is applied with the same id,
  clamped to ``[min_replicas, max_replicas]``; a scale-down, an old or a future-stamped decision is
  recorded as "not resumed" and the policy re-decides on fresh data; anything else → superseded.
  A decision the ledger refused (unreachable store, lost leadership) is never acted on.
* **Replica bounds hold.** No decision, from the policy or the ledger, is applied below
  ``min_replicas`` or above ``max_replicas`` (:class:`ControllerSettings`).
* **Monotonic time.** The policy's time is the monotonic clock (:mod:`ebb.live.timeline`); Unix
  stamps of samples and pods are mapped onto it by their age. A wall-clock step is logged, and the
  source cursor and freshness reference are reset so neither a forward nor a backward step blinds
  the loop or erases its peak memory.
* **Never exits on a peer's answer.** Every error of a cycle — of the tree or, as a last resort,
  any other — ends that cycle as ``error`` (logged with its traceback when unexpected), with no
  action taken; the next cycle starts afresh.
* **One actor.** With an elector, only the leader decides; followers keep the policy's windows warm
  (``observe``) so a take-over decides on full history. Every ledger write carries the leader's
  fencing token, so a deposed leader's write fails atomically (etcd backend).
* **Telemetry never changes behaviour.** One trace per cycle (root span ``ebb.cycle``, children per
  layer); metrics and logs are best effort.

Decision ids are ``<run_id>-<n>`` and cycle ids ``<run_id>-c<n>``, ``n`` continuing from the
ledger's last cycle of ``run_id``, so a successor (after a restart or a fail-over) extends the
same sequence.
"""

from __future__ import annotations

import logging
import math
import re
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Protocol

import numpy as np

from ebb.actuate.base import ActuationResult, Actuator, FleetState
from ebb.decide.records import decision_from_explanation
from ebb.errors import EbbError, NotLeader, TransientError
from ebb.gates.guard import L1_TTFT_QUERY
from ebb.ledger.base import Ledger
from ebb.live.policy_spec import LivePolicy
from ebb.live.resume import ResumeLimits, resume_verdict
from ebb.live.timeline import Tick, Timeline
from ebb.model.decisions import JSON, CycleRecord, DecisionRecord
from ebb.model.ids import CycleId, DecisionId, RunId
from ebb.model.live import LiveSignals
from ebb.model.observation import FineSignals, Observation, PodView, ScaleRequest, replicas_of
from ebb.sources.live import SignalSource
from ebb.telemetry.metrics import EbbMetrics
from ebb.telemetry.tracing import CycleTracer

__all__ = ["Controller", "ControllerSettings", "CycleOutcome", "Elector"]

log = logging.getLogger(__name__)

Mode = Literal["recommend", "act"]


class Elector(Protocol):
    """What the controller needs from leader election (:class:`ebb.ledger.election.LeaderElector`)."""

    def is_leader(self) -> bool: ...

    def fence(self) -> Any: ...


@dataclass(frozen=True)
class ControllerSettings:
    """How the live loop runs. Every field: unit, default, why."""

    run_id: str = "live"
    """Ledger run id; decisions are ``<run_id>-<n>``. Keep it stable across restarts and replicas of
    one controller so a successor continues the sequence."""
    target: str = "serving"
    """The scaled workload's name in the ledger (``namespace/deployment``)."""
    mode: Mode = "recommend"
    """``recommend`` records decisions without acting (the safe default); ``act`` applies them."""
    interval_s: float = 1.0
    """Cycle period (s): the policy's reconcile interval (it sizes on 100 ms samples)."""
    max_staleness_s: float = 5.0
    """Samples older than this (s) count as missing: no scale-down (fail static)."""
    lookback_s: float = 30.0
    """On start (and after an outage) read at most this much history (s) from the source."""
    keep_outcomes: int | None = 3600
    """Cycle outcomes kept in memory for views and reports (an hour at 1 s); None keeps all (a
    bounded demo run). A long-running controller must not grow without bound."""
    min_replicas: int = 1
    """Floor for every applied decision, the policy's and a resumed one (the policy's own ``min``)."""
    max_replicas: int = 1000
    """Ceiling for every applied decision."""
    resume_max_age_s: float = 60.0
    """An unfinished scale-up older than this is not replayed after a restart (re-decided instead)."""

    def __post_init__(self) -> None:
        if self.mode not in ("recommend", "act"):
            raise ValueError(f"mode must be 'recommend' or 'act', got {self.mode!r}")
        if not (self.interval_s > 0 and self.max_staleness_s > 0 and self.lookback_s > 0):
            raise ValueError(f"interval_s, max_staleness_s and lookback_s must be > 0: {self!r}")
        if not 1 <= self.min_replicas <= self.max_replicas:
            raise ValueError(f"need 1 <= min_replicas <= max_replicas: {self!r}")
        if not self.resume_max_age_s > 0:
            raise ValueError(f"resume_max_age_s must be > 0: {self!r}")

    @property
    def resume_limits(self) -> ResumeLimits:
        return ResumeLimits(min_replicas=self.min_replicas, max_replicas=self.max_replicas,
                            max_age_s=self.resume_max_age_s)


@dataclass(frozen=True)
class CycleOutcome:
    """What one cycle did (returned by :meth:`Controller.cycle`, also drawn in the demo's view)."""

    n: int
    """Cycle number (0 for a follower's or a skipped cycle)."""
    t_s: float
    """Seconds since the controller started (monotonic)."""
    action: str
    """``hold``, ``scale_up``, ``scale_down``, ``veto``, ``follower`` or ``error``."""
    spec_replicas: int
    to_replicas: int
    ready_replicas: int
    staleness_s: float | None
    """Age of the freshest sample (s); None when the source has never answered."""
    decision_id: DecisionId | None = None
    acted: bool = False
    note: str = ""
    signals: dict[str, float] = field(default_factory=dict)


def _empty_fine() -> FineSignals:
    return FineSignals()


def _rebase(f: FineSignals, tick: Tick) -> FineSignals:
    """Unix sample stamps onto the policy's monotonic timeline (by age; vectorised)."""
    offset = tick.wall_s - tick.t_s
    return FineSignals(t_s=f.t_s - offset, prefill_replicas=f.prefill_replicas, slot_replicas=f.slot_replicas,
                       queued=f.queued, done_t_s=f.done_t_s - offset, done_ttft_ms=f.done_ttft_ms,
                       done_e2e_ms=f.done_e2e_ms, done_weight=f.done_weight)


class Controller:
    """The live loop for one workload. Not thread-safe: one thread calls :meth:`cycle` / :meth:`run`."""

    def __init__(self, policy: LivePolicy, source: SignalSource, actuator: Actuator, ledger: Ledger,
                 settings: ControllerSettings, *, tracer: CycleTracer | None = None,
                 metrics: EbbMetrics | None = None, elector: Elector | None = None,
                 clock: Callable[[], float] = time.time, monotonic: Callable[[], float] | None = None,
                 fault_point: Callable[[str], None] | None = None,
                 gate_probe: Callable[[str], float | None] | None = None) -> None:
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
        """Measures a metrics-gate query (PromQL) while a canary step is gated; None = gates read L1."""
        self._fault = fault_point or (lambda where: None)
        """Called at ``before_plan``, ``after_ledger`` and ``after_actuation`` of every acting cycle:
        crash tests kill the process there (the crash-point matrix); a no-op otherwise."""
        self._timeline = Timeline(clock, monotonic, interval_s=settings.interval_s,
                                  max_gap_s=max(settings.lookback_s, 10 * settings.interval_s))
        """Wall clock for stamps (sources, ledger), monotonic for the policy (a step moves neither)."""
        self.t0 = clock()
        self._cursor = self.t0 - settings.lookback_s
        self._newest: float | None = None
        self._n: int | None = None
        self._was_leader = False
        self._prev_action: DecisionId | None = None
        self.outcomes: deque[CycleOutcome] = deque(maxlen=settings.keep_outcomes)

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

    def _resume(self) -> None:
        """Continue the cycle numbering and reconcile a decision left without an outcome.

        Malformed rows of this run (the ledger skips and lists them) are left in place and named in
        an ERROR; numbering continues past any cycle number their keys still show, so no id is
        reused. Skipping loses nothing that matters for safety: a skipped unfinished decision is
        not replayed, and a scale-down never is anyway — every action is decided on fresh data.
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
        acts = [c for c in mine for d in c.decisions
                if d.action in ("scale_up", "scale_down") and d.plan.get("mode") == "act"]
        if not acts:
            return
        last = acts[-1]
        self._prev_action = last.decisions[0].decision_id
        if self.ledger.get_cycle(CycleId(f"{last.cycle_id}-outcome")) is not None:
            return
        d = last.decisions[0]
        state = self.actuator.state()
        verdict = resume_verdict(d, state.spec_replicas, int(self._clock() * 1e9), self.settings.resume_limits)
        if verdict.apply:
            self._fence()  # NotLeader when leadership lapsed meanwhile: the next leader reconciles it
            # Only scale-ups are replayed, and they name no victims.
            res = self.actuator.apply(d.decision_id, ScaleRequest(verdict.to_replicas))
            self._record_outcome(last, d, res, verdict.note, self._fence())
        else:
            self._record_outcome(last, d, None, verdict.note, self._fence())
        log.warning("decision %s (%s %d→%d) was left without an outcome: %s", d.decision_id, d.action,
                    d.from_replicas, d.to_replicas, verdict.note)

    def _record_outcome(self, cycle: CycleRecord, d: DecisionRecord, res: ActuationResult | None, note: str,
                        fence: Any) -> None:
        snap: dict[str, JSON] = {"outcome_of": d.decision_id, "note": note}
        if res is not None:
            snap.update({"applied": res.applied, "replicas_before": res.replicas_before,
                         "replicas_after": res.replicas_after, "removed": list(res.removed),
                         "added": list(res.added)})
        self._append(CycleRecord(cycle_id=CycleId(f"{cycle.cycle_id}-outcome"), run_id=cycle.run_id,
                                 ts_ns=int(self._clock() * 1e9), policy="actuator", decisions=(),
                                 snapshot=snap, fencing_token=self._token(fence)), fence)

    # -- one cycle ----------------------------------------------------------------------------
    def _on_clock_step(self, tick: Tick) -> None:
        """The wall clock stepped: samples are re-read from a fresh cursor, freshness re-measured."""
        assert tick.step_s is not None
        log.warning("wall clock stepped by %+.1f s: source cursor and data freshness reset "
                    "(the policy's windows run on the monotonic clock and keep their history)", tick.step_s)
        self._cursor = tick.wall_s - self.settings.lookback_s
        self._newest = None

    def _read(self, span: Any, tick: Tick) -> tuple[LiveSignals, str]:
        now = tick.wall_s
        if tick.step_s is not None:
            self._on_clock_step(tick)
        since = max(self._cursor, now - self.settings.lookback_s)
        try:
            with span.layer("ebb.source") as s:
                sig = self.source.read(since)
                s.set(**{"ebb.source.samples": int(len(sig.fine.t_s))})
        except EbbError as exc:  # unreachable or malformed: no data this cycle (fail static)
            log.warning("source: %s — no data this cycle, scale-down blocked", exc)
            return LiveSignals(_empty_fine()), f"source: {exc}"
        newest = sig.newest_sample_s
        if newest is not None and newest > now + self.settings.max_staleness_s:
            # From the future by more than the staleness bound: a clock we cannot trust.
            log.warning("source: newest sample is %.1f s in the future — ignored, scale-down blocked", newest - now)
            return LiveSignals(_empty_fine()), "samples from the future"
        if newest is not None:
            self._newest = max(self._newest or -math.inf, newest)
        if len(sig.fine.t_s):
            self._cursor = max(self._cursor, min(float(np.max(sig.fine.t_s)), now))
        stale = newest is None or now - newest > self.settings.max_staleness_s
        if stale:
            return LiveSignals(_empty_fine(), newest_sample_s=newest), "stale data"
        return sig, ""

    def _completeness(self, sig: LiveSignals, state: FleetState, data_note: str) -> tuple[LiveSignals, str]:
        """Samples over fewer replicas than are ready understate demand: no data for scale-down."""
        seen = sig.replicas_seen
        if data_note or seen is None or seen >= state.ready_replicas:
            return sig, data_note
        log.warning("source covers %d of %d ready replicas — scale-down blocked", seen, state.ready_replicas)
        return LiveSignals(_empty_fine(), newest_sample_s=sig.newest_sample_s), \
            f"incomplete fleet: {seen} of {state.ready_replicas} ready replicas reported"

    def _observation(self, sig: LiveSignals, state: FleetState, tick: Tick) -> Observation:
        pods = tuple(PodView(replica=r.replica, created_s=tick.policy_time(r.created_s),
                             ready_s=None if r.ready_s is None else tick.policy_time(r.ready_s), util_ratio=None,
                             inflight=sig.inflight_by_replica.get(r.name), qps=None, zone=r.zone)
                     for r in state.replicas)
        inflight = sum(sig.inflight_by_replica.values()) if sig.inflight_by_replica else None
        if inflight is not None and sig.queued is not None:
            inflight += sig.queued
        return Observation(t_s=tick.t_s, spec_replicas=state.spec_replicas,
                           ready_replicas=state.ready_replicas, pods=pods, total_qps=sig.total_qps,
                           total_inflight=inflight, queued=sig.queued, fine=_rebase(sig.fine, tick))

    def cycle(self) -> CycleOutcome:
        """Run one cycle; never raises for source, ledger or actuator trouble (logged, counted), nor
        for anything else a peer's answer can provoke (logged with its traceback, no action)."""
        start = time.perf_counter()
        tick = self._timeline.tick()
        try:
            return self._cycle(tick, start)
        except Exception as exc:  # last resort: a bug or an unforeseen answer must not crash-loop the fleet
            log.exception("cycle failed unexpectedly (%s: %s); no action taken", type(exc).__name__, exc)
            self._was_leader = False  # re-read the ledger before the next action
            return self._finish(CycleOutcome(0, tick.t_s, "error", 0, 0, 0, None,
                                             note=f"internal error: {type(exc).__name__}: {exc}"[:300]), start)

    def _cycle(self, tick: Tick, start: float) -> CycleOutcome:
        leader = self.elector is None or self.elector.is_leader()
        if self.metrics is not None:
            self.metrics.set_leader(leader)
        if not leader:
            self._was_leader = False
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
        cid = CycleId(f"{self.settings.run_id}-c{n}")
        with self.tracer.cycle(cid, self.settings.run_id, self.settings.target) as span:
            try:
                out = self._decide_and_act(span, n, cid, tick)
            except EbbError as exc:
                span.record_error(exc)
                log.error("cycle %s failed: %s", cid, exc)
                out = CycleOutcome(n, tick.t_s, "error", 0, 0, 0, None, note=str(exc))
            span.set(**{"ebb.decision.action": out.action, "ebb.replicas.from": out.spec_replicas,
                        "ebb.replicas.to": out.to_replicas,
                        "ebb.data.staleness_s": out.staleness_s})
        return self._finish(out, start)

    def _finish(self, out: CycleOutcome, start: float) -> CycleOutcome:
        self.outcomes.append(out)
        if self.metrics is not None:
            self.metrics.observe_cycle(out.action, time.perf_counter() - start, out.staleness_s)
        return out

    def _follow(self, tick: Tick, start: float) -> CycleOutcome:
        """A follower keeps the policy's windows warm and never writes or acts."""
        now = tick.wall_s
        sig, note = self._read(_NoSpan(), tick)
        try:
            state = self.actuator.state()
        except EbbError as exc:
            return self._finish(CycleOutcome(0, tick.t_s, "follower", 0, 0, 0, None, note=str(exc)), start)
        sig, note = self._completeness(sig, state, note)
        obs = self._observation(sig, state, tick)
        inner = self.policy.inner if hasattr(self.policy, "inner") else self.policy
        inner.observe(obs)
        self.policy.log.clear()  # a guard's notes while following are not decisions of ours
        stale = None if self._newest is None else now - self._newest
        return self._finish(CycleOutcome(0, tick.t_s, "follower", state.spec_replicas, state.spec_replicas,
                                         state.ready_replicas, stale, note=note or "not the leader"), start)

    def _decide_and_act(self, span: Any, n: int, cid: CycleId, tick: Tick) -> CycleOutcome:
        s = self.settings
        now = tick.wall_s
        sig, data_note = self._read(span, tick)
        with span.layer("ebb.actuate.state"):
            state = self.actuator.state()
        sig, data_note = self._completeness(sig, state, data_note)
        obs = self._observation(sig, state, tick)
        stale = None if self._newest is None else now - self._newest
        if self.gate_probe is not None and getattr(self.policy, "active", False):
            obs = replace(obs, gate_values=self._measure_gates(span))
        self._fault("before_plan")
        with span.layer("ebb.decide") as ds:
            answer = self.policy.decide(obs)
            # Consume the explanations: they go to the ledger, and the list must not grow forever.
            entries = list(self.policy.log)
            self.policy.log.clear()
            ds.set(**{"ebb.policy": self.policy.spec, "ebb.log_entries": len(entries)})
        self._layer_spans(span, entries)
        want = replicas_of(answer)
        if not s.min_replicas <= want <= s.max_replicas:
            # Third lock: the bounds hold whatever the policy computed.
            log.warning("policy asked for %d replicas; clamped to [%d, %d]", want, s.min_replicas, s.max_replicas)
            want = min(s.max_replicas, max(s.min_replicas, want))
            answer = ScaleRequest(want) if want != state.spec_replicas else want
        base = CycleOutcome(n, obs.t_s, "hold", state.spec_replicas, want, state.ready_replicas, stale,
                            note=data_note)
        if not entries and want == state.spec_replicas:
            return base
        e: dict[str, Any] = dict(entries[-1]) if entries else {
            "action": "scale_up" if want > state.spec_replicas else "scale_down", "from": state.spec_replicas,
            "to": want, "reasons": ["policy changed its target"]}
        action = str(e.get("action", "hold"))
        if action in ("scale_up", "scale_down") and e.get("to") != want:  # clamped above
            action = "hold" if want == state.spec_replicas else action
            e = {**e, "action": action, "to": want,
                 "reasons": [*e.get("reasons", ()), f"clamped to [{s.min_replicas}, {s.max_replicas}] replicas"]}
        blocked = ""
        if want < state.spec_replicas and (data_note or stale is None or stale > s.max_staleness_s):
            # Second lock: never scale down on data we cannot trust, whatever the policy said.
            blocked = f"scale-down blocked by the controller: {data_note or 'no fresh data'}"
            e = {**e, "action": "veto", "to": state.spec_replicas, "vetoes": [*e.get("vetoes", ()), blocked]}
            action, want = "veto", state.spec_replicas
        did = DecisionId(f"{s.run_id}-{n}")
        acting = s.mode == "act" and action in ("scale_up", "scale_down")
        fence = self._fence()
        rec = decision_from_explanation(
            e, decision_id=did, cycle_id=cid, run_id=RunId(s.run_id), ts_ns=int(now * 1e9), target=s.target,
            policy=self.policy.spec,
            caused_by=(self._prev_action,) if self._prev_action is not None and action == "scale_up" else (),
            extra_plan={"mode": s.mode, "controller": "live"})
        cycle = CycleRecord(cycle_id=cid, run_id=RunId(s.run_id), ts_ns=rec.ts_ns, policy=self.policy.spec,
                            decisions=(rec,), snapshot={"replicas": state.spec_replicas,
                                                        "ready": state.ready_replicas,
                                                        "draining": state.draining},
                            fencing_token=self._token(fence))
        try:
            with span.layer("ebb.ledger"):
                self._append(cycle, fence)
        except (TransientError, NotLeader) as exc:
            if self.metrics is not None:
                self.metrics.ledger_write_error()
            log.error("ledger refused decision %s (%s): not acting", did, exc)
            return CycleOutcome(n, obs.t_s, "error", state.spec_replicas, state.spec_replicas,
                                state.ready_replicas, stale, did, note=f"ledger: {exc}")
        self._fault("after_ledger")
        if self.metrics is not None:
            self.metrics.decision(action, list(rec.vetoes))
        log.info("decision %s: %s %d→%d (%s)", did, action, rec.from_replicas, rec.to_replicas,
                 "; ".join(rec.reasons + rec.vetoes))
        if not acting:
            return CycleOutcome(n, obs.t_s, action, state.spec_replicas, rec.to_replicas, state.ready_replicas,
                                stale, did, note=blocked or data_note, signals=dict(rec.signals))
        if self.elector is not None and self._token(self.elector.fence()) != self._token(fence):
            # Deposed between the write and the act: the successor's resume reconciles this decision.
            log.error("lost leadership after recording %s: not acting", did)
            return CycleOutcome(n, obs.t_s, "error", state.spec_replicas, state.spec_replicas, state.ready_replicas,
                                stale, did, note="lost leadership before acting")
        request = answer if isinstance(answer, ScaleRequest) else ScaleRequest(want)
        with span.layer("ebb.actuate") as a:
            res = self.actuator.apply(did, request)
            a.set(**{"ebb.actuate.applied": res.applied, "ebb.replicas.after": res.replicas_after})
        self._prev_action = did
        self._fault("after_actuation")
        try:
            with span.layer("ebb.ledger.outcome"):
                self._record_outcome(cycle, rec, res, "applied", fence)
        except (TransientError, NotLeader) as exc:
            # The decision is recorded and applied; the next leader's resume finds the fleet at `to`.
            log.error("outcome of %s not recorded (%s); a restart reconciles it", did, exc)
        return CycleOutcome(n, obs.t_s, action, state.spec_replicas, res.replicas_after, state.ready_replicas,
                            stale, did, acted=res.applied, signals=dict(rec.signals))

    def _measure_gates(self, span: Any) -> dict[str, float]:
        """One measurement of every PromQL gate of the canary guard; a failed query is no data."""
        assert self.gate_probe is not None
        values: dict[str, float] = {}
        for g in getattr(self.policy, "gates", ()):
            if g.query == L1_TTFT_QUERY:
                continue
            with span.layer("ebb.gate.measure", **{"ebb.gate.query": g.query}) as gs:
                try:
                    v = self.gate_probe(g.query)
                except EbbError as exc:
                    log.warning("gate query %r failed: %s (counted as no data)", g.query, exc)
                    v = None
                values[g.query] = math.nan if v is None else float(v)
                gs.set(**{"ebb.gate.value": v})
        return values

    def _layer_spans(self, span: Any, entries: list[dict[str, Any]]) -> None:
        """One span per layer carrying its result (the policy runs L1→L3 in one pure call)."""
        e = entries[-1] if entries else {}
        sig = e.get("signals", {})
        with span.layer("ebb.l1", **{"ebb.l1.demand_p99_replicas": float(sig.get("demand_p99_replicas") or 0.0)}):
            pass
        with span.layer("ebb.l2", **{"ebb.veto.reasons": [str(v).split(":")[0] for v in e.get("vetoes", ())],
                                     "ebb.l2.weight": float(e.get("weights", {}).get("workload", 0.0))}):
            pass
        with span.layer("ebb.l3", **{"ebb.l3.victims": len(e.get("victims", ()))}) as l3:
            l3.set(**{"ebb.victims": [str(v) for v in e.get("victims", ())]})  # sampled: high cardinality
        plan = e.get("plan", {})
        if "gate" in plan:
            with span.layer("ebb.gate.canary", **{"ebb.gate.result": str(plan.get("step", ""))}):
                pass
            if self.metrics is not None:
                self.metrics.gate_result("canary", str(plan.get("step", "")))

    # -- the loop -------------------------------------------------------------------------------
    def run(self, stop: threading.Event, *, max_cycles: int | None = None,
            on_cycle: Callable[[CycleOutcome], None] | None = None) -> None:
        """Cycle every ``interval_s`` on the wall clock until ``stop`` is set (or ``max_cycles``)."""
        k = 0
        next_t = time.monotonic()
        while not stop.is_set() and (max_cycles is None or k < max_cycles):
            out = self.cycle()
            k += 1
            if on_cycle is not None:
                on_cycle(out)
            next_t += self.settings.interval_s
            stop.wait(max(0.0, next_t - time.monotonic()))


class _NoSpan:
    """Stand-in span for a follower's read (followers emit no traces)."""

    def layer(self, name: str, **attrs: Any) -> _NoSpan:
        return self

    def set(self, **attrs: Any) -> None:
        return None

    def __enter__(self) -> _NoSpan:
        return self

    def __exit__(self, *exc: object) -> None:
        return None
