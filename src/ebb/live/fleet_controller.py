"""One live controller for many workloads (``ebb run --workloads FLEET.yaml``): L1/L2 per workload,
one L3 step across all of them, writes batched.

Built from N single-workload :class:`~ebb.live.controller.Controller` objects — one per managed
Deployment, each with its own signal source, actuator, policy instance, ledger run id
(``<run_id>-<namespace>-<deployment>``) and cycle numbering — composed through the controller's
two-halves cycle (:meth:`Controller.begin` / :meth:`CycleStep.proceed`). Per cycle:

1. **Per workload** (``begin``): read the source and the fleet, settle a predecessor's unfinished
   decision, decide with that workload's own policy (L1 → L2 → its own victims), then the
   controller's locks (replica bounds, stale data). Every single-workload guarantee holds
   unchanged: fail static, write-ahead, exactly once, resume, fencing, one trace per workload cycle.
2. **L3 across the fleet** (pure, :mod:`ebb.decide`): the workloads proposing a scale-down are
   ranked by L2 (:func:`~ebb.decide.semantics.rank_candidates`: lowest weight, then most headroom;
   vetoed ones marked); :func:`~ebb.decide.coordinate.plan_cluster` shares the cluster's
   ``disruption_budget`` (replicas per cycle) in that order, borrowed quota reclaimed first; then
   :func:`~ebb.decide.coordinate.plan_scale_down` picks each granted workload's victims (borrowers
   first, then not-ready, least loaded, zone skew ≤ ``max_skew`` within its namespace). A
   scale-down granted less is narrowed (``L3: ...`` in its reasons, the fleet's victims); one
   granted nothing becomes a veto naming why. **Scale-ups are never budgeted**; they are only
   capped by their namespace's quota ``max`` (counted over the managed Deployments' replicas).
3. **Per workload** (``proceed``): record, act, record the outcome — scale-ups first, then
   scale-downs in rank order, then vetoes. Every write goes through the shared
   :class:`~ebb.actuate.batching.WriteBatcher` (≤ ``writes_per_100ms`` started per 100 ms); the
   cycle's batches are recorded in the fleet's own ledger cycle.

Guarantees, beyond each workload's:

* **The budget holds.** Replicas removed across the fleet in one cycle ≤ ``disruption_budget``;
  a narrowed or vetoed scale-down is recorded as such, with the plan's reason.
* **Fail safe.** A workload whose cycle fails (source, ledger, actuator: ``TransientError``,
  ``PermanentError``, anything) ends that workload's cycle as ``error``; the others go on. If the
  L3 step itself fails, every scale-down of the cycle becomes a veto (scale-ups go on).
* **L2 signals are the cycle's measurements.** A workload's rank inputs are its policy's
  decision: its recalibrated weight (``weights["workload"]``, else its class's base weight), its
  TTFT P99 against its TTFT SLO (a proposed scale-down without a P99 is one its policy judged
  idle: no completions while fresh samples showed no demand — latency 0), the age of its data,
  replicas against its floor. The live loop measures no success ratio or CTR, so class floors on
  those are not evaluated here (as in the single-workload loop).
* **Quota counts what the controller reads.** Borrowing is computed over the pods of the managed
  Deployments of a namespace, from each one's actuator read this cycle (a workload whose cycle
  ended before deciding contributes none). The reclaim order is a preference: it never changes a
  count (:mod:`ebb.decide.coordinate`).
* **One leader.** The members share one elector (one lease for the whole controller); the fleet
  record is written only while leading, with the fence.

The fleet's ledger cycle (run id ``run_id``, cycle ``<run_id>-c<n>``, no decisions) is written
after the writes when anything was planned or written; its snapshot holds the budget, the grants
in rank order, each member decision of the cycle and the write batches (times in ms from the
first write). Best effort: a refused write is logged, the member decisions are already recorded.
"""

from __future__ import annotations

import contextvars
import logging
import math
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from ebb.actuate.base import FleetState
from ebb.actuate.batching import WriteBatch, WriteBatcher
from ebb.config.fleet import GPU, FleetWorkload, NamespaceQuota
from ebb.config.workloads import WorkloadClass
from ebb.decide.coordinate import (
    ClusterPlan,
    QuotaContext,
    ReplicaView,
    plan_cluster,
    plan_scale_down,
)
from ebb.decide.quota import QoSClass, Quota, QuotaPod
from ebb.decide.semantics import Candidate, WorkloadSignals, rank_candidates
from ebb.errors import EbbError, NotLeader
from ebb.ledger.base import Ledger
from ebb.live.controller import Controller, CycleOutcome, CycleStep, Proposal
from ebb.live.pacing import paced_loop
from ebb.live.settings import Elector
from ebb.model.decision import Decision
from ebb.model.decisions import JSON, CycleRecord
from ebb.model.ids import CycleId, ReplicaId, RunId

__all__ = ["FleetController", "FleetMember", "FleetOutcome", "FleetSettings", "quota_of"]

log = logging.getLogger(__name__)


def quota_of(q: NamespaceQuota) -> Quota:
    """A fleet file's GPU quota as the planner's :class:`~ebb.decide.quota.Quota` (milli-units)."""
    return Quota(q.namespace, min={GPU: q.min_milli}, max={} if q.max_milli is None else {GPU: q.max_milli})


@dataclass(frozen=True)
class FleetMember:
    """One managed workload: its controller and what L3 needs to know about it."""

    controller: Controller
    """Its single-workload controller, built on a batched actuator (:meth:`WriteBatcher.wrap`)."""
    workload: FleetWorkload
    """Its entry in the fleet file (namespace, Deployment, class, zones, GPUs, priority)."""
    slo_ttft_ms: float
    """The TTFT SLO its policy guards (:meth:`FleetWorkload.ttft_slo_ms`): L2 ranks against it."""

    @property
    def target(self) -> str:
        return self.workload.target

    @property
    def rank_class(self) -> WorkloadClass:
        """Its L2 class as the live loop measures it: the class's weight, α and veto margin, the
        workload's TTFT SLO as the P99 bound, its replica floor; named after the workload (two
        workloads of one class may guard different SLOs)."""
        c = self.workload.workload_class
        return WorkloadClass(name=self.target, base_weight=c.base_weight, alpha=c.alpha,
                             p99_latency_ms=self.slo_ttft_ms, veto_margin=c.veto_margin,
                             min_replicas=self.workload.min_replicas)


@dataclass(frozen=True)
class FleetSettings:
    """How the fleet's L3 step runs. Every field: unit, default, why."""

    run_id: str = "fleet"
    """Ledger run id of the fleet's own cycles (its members use ``<run_id>-<ns>-<deployment>``)."""
    disruption_budget: int = 1
    """Replicas removed per cycle across all workloads (>= 0); scale-ups never count. Default 1."""
    max_skew: int = 1
    """Zone skew bound of each workload's victims (>= 1, per namespace). Default 1 (upstream's usual)."""
    interval_s: float = 1.0
    """Cycle period (s)."""
    react_interval_s: float = 0.0
    """Period (s) of the members' fast paths between cycles (0 = off)."""

    def __post_init__(self) -> None:
        if self.disruption_budget < 0 or self.max_skew < 1:
            raise ValueError(f"need disruption_budget >= 0 and max_skew >= 1: {self!r}")
        if not (self.interval_s > 0 and 0 <= self.react_interval_s < self.interval_s):
            raise ValueError(f"need interval_s > 0 and 0 <= react_interval_s < interval_s: {self!r}")


@dataclass(frozen=True)
class FleetOutcome:
    """What one fleet cycle did."""

    n: int
    """The fleet cycle's number (0 when it recorded nothing)."""
    outcomes: tuple[CycleOutcome, ...]
    """Each member's cycle outcome, in member order."""
    plan: ClusterPlan | None = None
    """The cluster plan, when any workload proposed a scale-down."""
    batches: tuple[WriteBatch, ...] = ()
    """The writes since the previous cycle (fast-path ones included), as batches."""
    notes: tuple[str, ...] = field(default_factory=tuple)
    """What L3 changed, one line each."""

    @property
    def removed(self) -> int:
        """Replicas this cycle's acted scale-downs removed."""
        return sum(o.spec_replicas - o.to_replicas for o in self.outcomes if o.action == "scale_down" and o.acted)


_Paused = tuple[FleetMember, contextvars.Context, CycleStep, Proposal]


class FleetController:
    """The live loop for a fleet of workloads. Not thread-safe: one thread calls :meth:`cycle` / :meth:`run`."""

    def __init__(self, members: Sequence[FleetMember], ledger: Ledger, settings: FleetSettings, *,
                 quotas: Sequence[NamespaceQuota] = (), batcher: WriteBatcher | None = None,
                 elector: Elector | None = None, clock: Callable[[], float] = time.time) -> None:
        if not members:
            raise ValueError("a fleet controller needs at least one member")
        targets = [m.target for m in members]
        if len(set(targets)) != len(targets):
            raise ValueError(f"fleet members must be distinct workloads, got {targets}")
        self.members = tuple(members)
        self.ledger = ledger
        self.settings = settings
        self.quotas: Mapping[str, Quota] = {q.namespace: quota_of(q) for q in quotas}
        self.batcher = batcher
        self.elector = elector
        self._clock = clock
        self._n: int | None = None
        self._spec: dict[str, int] = {}
        """Each member's ``spec.replicas`` as last read (a quota ``max`` counts members that did not decide)."""

    # -- the cycle --------------------------------------------------------------------------------
    def cycle(self) -> FleetOutcome:
        """One cycle of every member with one L3 step across them; never raises for a member's trouble."""
        steps: list[tuple[FleetMember, contextvars.Context, CycleStep]] = []
        for m in self.members:
            ctx = contextvars.copy_context()  # each member's trace context stays its own between halves
            steps.append((m, ctx, ctx.run(m.controller.begin)))
        paused: list[_Paused] = [(m, ctx, s, s.proposal) for m, ctx, s in steps if s.proposal is not None]
        for m, _, _, p in paused:
            self._spec[m.target] = p.seen.state.spec_replicas
        notes: list[str] = []
        try:
            decided, plan, rank = self._plan(paused, notes)
        except Exception as exc:  # a planner refusal (or a bug) must not let a scale-down through unbudgeted
            log.exception("fleet L3 failed (%s): every scale-down of this cycle is vetoed", type(exc).__name__)
            why = f"L3: cluster plan failed: {exc}"[:300]
            decided = {m.target: p.decision.retarget(p.decision.from_replicas, veto=why)
                       if p.decision.action == "scale_down" else p.decision for m, _, _, p in paused}
            plan, rank = None, []
            notes.append(why)
        by_target = {m.target: (ctx, s) for m, ctx, s, _ in paused}
        order = [t for t, d in decided.items() if d.action == "scale_up"]
        order += [t for t in rank if t in decided and decided[t].action == "scale_down"]
        order += [t for t in decided if t not in order]
        done: dict[str, CycleOutcome] = {}
        for t in order:
            ctx, s = by_target[t]
            done[t] = ctx.run(s.proceed, decided[t])
        outcomes = tuple(done[m.target] if m.target in done else s.proceed() for m, _, s in steps)
        batches = self.batcher.take() if self.batcher is not None else ()
        n = self._record(outcomes, plan, batches, notes)
        return FleetOutcome(n, outcomes, plan, batches, tuple(notes))

    def _plan(self, paused: list[_Paused], notes: list[str]) -> tuple[dict[str, Decision], ClusterPlan | None, list[str]]:
        """Each paused member's decision after L3, the cluster plan and the rank order (targets)."""
        decided = {m.target: p.decision for m, _, _, p in paused}
        self._cap_scale_ups(paused, decided, notes)
        downs = {m.target: p.decision.from_replicas - p.decision.to_replicas
                 for m, _, _, p in paused if p.decision.action == "scale_down"}
        if not downs:
            return decided, None, []
        views = {m.target: _views(m, p.seen.state, p.seen.sig.inflight_by_replica) for m, _, _, p in paused}
        everyone = [v for vs in views.values() for v in vs]
        quota = self._quota_context(paused) if self.quotas else None
        candidates = self._ranked([(m, p) for m, _, _, p in paused if m.target in downs])
        plan = plan_cluster(candidates, downs, self.settings.disruption_budget, quota=quota, replicas=everyone)
        grants = {g.workload: g for g in plan.grants}
        for m, _, _, p in paused:
            if m.target not in downs:
                continue
            d, g = p.decision, grants[m.target]
            if g.granted == 0:
                decided[m.target] = d.retarget(d.from_replicas, veto=f"L3: {g.reason}")
                notes.append(f"{m.target}: scale-down vetoed ({g.reason})")
                continue
            sp = plan_scale_down(views[m.target], m.target, g.granted, namespace=m.workload.namespace,
                                 max_skew=self.settings.max_skew, budget=g.granted, quota=quota)
            if sp.granted == 0:
                why = "; ".join(sp.limits) or "no victim"
                decided[m.target] = d.retarget(d.from_replicas, veto=f"L3: {why}")
                notes.append(f"{m.target}: scale-down vetoed ({why})")
                continue
            ids = {f"{m.target}/{r.name}": r.replica for r in p.seen.state.replicas}
            victims = tuple(ReplicaId(ids[v]) for v in sp.victim_ids)
            reason = f"L3: {g.reason}" + (f"; reclaims borrowed quota: {', '.join(sp.reclaimed)}" if sp.reclaimed else "")
            narrowed = d.retarget(d.from_replicas - sp.granted, reason=reason)
            decided[m.target] = replace(narrowed, victims=victims, plan={
                **narrowed.plan, "l3_budget": float(plan.budget), "l3_granted": float(sp.granted)})
            if sp.granted < downs[m.target]:
                notes.append(f"{m.target}: scale-down {downs[m.target]} → {sp.granted} ({g.reason})")
        return decided, plan, [c.workload for c in candidates]

    def _ranked(self, proposing: list[tuple[FleetMember, Proposal]]) -> list[Candidate]:
        """L2 candidates of the workloads proposing a scale-down, in rank order (vetoed ones marked)."""
        classes: list[WorkloadClass] = []
        signals: list[WorkloadSignals] = []
        weights: dict[str, float] = {}
        for m, p in proposing:
            d, state, seen = p.decision, p.seen.state, p.seen
            p99 = float(d.signals.get("ttft_p99_ms", math.nan))
            need = float(d.signals.get("need_replicas", math.nan))
            cls = m.rank_class
            classes.append(cls)
            signals.append(WorkloadSignals(
                workload=m.target, class_name=cls.name, replicas=state.spec_replicas,
                ready_replicas=state.ready_replicas,
                latency_p99_ms=0.0 if math.isnan(p99) else p99,  # proposed without a P99: judged idle
                latency_p95_ms=math.nan, success_ratio=math.nan, burst_active=False,
                utilisation_ratio=need / max(1, state.ready_replicas),
                staleness_s=math.nan if seen.stale_s is None else max(0.0, seen.stale_s)))
            weights[m.target] = float(d.weights.get("workload", cls.base_weight))
        stale = max(p.seen.max_staleness_s for _, p in proposing)
        ranked = rank_candidates(classes, signals, weights, max_staleness_s=stale)
        members = {m.target: m for m, _ in proposing}
        states = {m.target: p.seen.state for m, p in proposing}
        out = []
        for c in ranked:
            m = members[c.workload]
            c = replace(c, class_name=m.workload.workload_class.name)
            if (why := _zone_veto(m, states[c.workload])) and not c.vetoed:
                c = replace(c, vetoes=(why,), reason=f"vetoed: {why}")
            out.append(c)
        return out

    def _quota_context(self, paused: list[_Paused]) -> QuotaContext:
        pods = {}
        for m, _, _, p in paused:
            w = m.workload
            for r in p.seen.state.replicas:
                pods[f"{m.target}/{r.name}"] = QuotaPod(
                    name=f"{w.deployment}/{r.name}", namespace=w.namespace, qos=QoSClass.GUARANTEED,
                    priority=w.priority, created_s=r.created_s, requests={GPU: w.gpu_milli_per_replica})
        return QuotaContext(self.quotas, pods)

    def _cap_scale_ups(self, paused: list[_Paused], decided: dict[str, Decision], notes: list[str]) -> None:
        """Scale-ups within their namespace's quota ``max`` (managed Deployments' replicas × GPUs each)."""
        for ns, q in self.quotas.items():
            cap = q.max_of(GPU)
            if cap is None:
                continue
            used = sum(self._spec.get(m.target, 0) * m.workload.gpu_milli_per_replica
                       for m in self.members if m.workload.namespace == ns)
            for m, _, _, p in paused:
                d = decided[m.target]
                if m.workload.namespace != ns or d.action != "scale_up":
                    continue
                each = m.workload.gpu_milli_per_replica
                room = (d.to_replicas - d.from_replicas) if each == 0 else max(0, (cap - used) // each)
                to = min(d.to_replicas, d.from_replicas + room)
                if to == d.to_replicas:
                    used += (to - d.from_replicas) * each
                    continue
                why = (f"quota: namespace {ns} at max_gpus {cap / 1000:g} ({used / 1000:g} GPUs used by "
                       "managed Deployments)")
                decided[m.target] = d.retarget(d.from_replicas, veto=why) if to <= d.from_replicas else \
                    d.retarget(to, reason=why)
                used += max(0, to - d.from_replicas) * each
                notes.append(f"{m.target}: scale-up {d.from_replicas}→{d.to_replicas} capped at {to} ({why})")

    # -- the fleet's ledger cycle ----------------------------------------------------------------
    def _leading(self) -> bool:
        return self.elector is None or self.elector.is_leader()

    def _next_n(self) -> int:
        if self._n is None:
            found = [re.findall(r"-c(\d{1,18})$", c.cycle_id) for c in self.ledger.cycles(RunId(self.settings.run_id))]
            self._n = max((int(x[0]) for x in found if x), default=0)
        self._n += 1
        return self._n

    def _record(self, outcomes: tuple[CycleOutcome, ...], plan: ClusterPlan | None,
                batches: tuple[WriteBatch, ...], notes: list[str]) -> int:
        """The fleet's ledger cycle (module docstring); its number, or 0 when nothing was written."""
        if plan is None and not batches and not notes:
            return 0
        if not self._leading():
            self._n = None  # a successor may have written: re-read the numbering when leading again
            return 0
        try:
            fence = None if self.elector is None else self.elector.fence()
            if self.elector is not None and fence is None:
                raise NotLeader(f"{self.settings.run_id}: leadership lapsed before the fleet record")
            n = self._next_n()
            snap: dict[str, JSON] = {"budget": self.settings.disruption_budget,
                                     "decisions": _decisions(self.members, outcomes),
                                     "batches": _batches(batches), "notes": list(notes)}
            if plan is not None:
                snap["grants"] = [{"workload": g.workload, "requested": g.requested, "granted": g.granted,
                                   "reclaim": g.reclaim, "reason": g.reason} for g in plan.grants]
            cycle = CycleRecord(cycle_id=CycleId(f"{self.settings.run_id}-c{n}"), run_id=RunId(self.settings.run_id),
                                ts_ns=int(self._clock() * 1e9), policy="fleet-l3", snapshot=snap,
                                fencing_token=int(getattr(fence, "token", 0) or 0))
            if fence is None:
                self.ledger.append_cycle(cycle)
            else:
                self.ledger.append_cycle(cycle, fence=fence)
        except (EbbError, ValueError) as exc:
            log.error("fleet record not written (%s); the member decisions are recorded", exc)
            self._n = None
            return 0
        return n

    # -- the loop -------------------------------------------------------------------------------
    def run(self, stop: threading.Event, *, max_cycles: int | None = None,
            on_cycle: Callable[[FleetOutcome], None] | None = None) -> None:
        """Cycle every ``interval_s`` until ``stop`` is set (or ``max_cycles``); in between, each
        member's fast path ticks every ``react_interval_s`` (its writes are batched like the rest)."""
        def tick() -> None:
            for m in self.members:
                m.controller.react()

        paced_loop(stop, cycle=self.cycle, interval_s=self.settings.interval_s,
                   react_s=self.settings.react_interval_s, tick=tick, max_cycles=max_cycles, on_cycle=on_cycle)


def _views(m: FleetMember, state: FleetState, inflight: Mapping[str, float]) -> list[ReplicaView]:
    """The member's replicas as L3 sees them (ids ``<namespace>/<deployment>/<pod>``, unique fleet-wide)."""
    return [ReplicaView(replica_id=f"{m.target}/{r.name}", workload=m.target, namespace=m.workload.namespace,
                        zone=r.zone, load=float(inflight.get(r.name, math.nan)), ready=r.ready_s is not None)
            for r in state.replicas]


def _zone_veto(m: FleetMember, state: FleetState) -> str:
    """Why the member's zone view cannot back a scale-down ("" when it can, or no zones are listed)."""
    zones = m.workload.zones
    if not zones:
        return ""
    outside = sorted({r.zone or "<unknown>" for r in state.replicas if r.zone not in zones})
    if not outside:
        return ""
    return f"zones: replicas in {', '.join(outside)}, outside the listed {', '.join(zones)}"


def _decisions(members: tuple[FleetMember, ...], outcomes: tuple[CycleOutcome, ...]) -> list[JSON]:
    return [{"target": m.target, "decision_id": str(o.decision_id), "action": o.action, "from": o.spec_replicas,
             "to": o.to_replicas, "acted": o.acted} for m, o in zip(members, outcomes) if o.decision_id is not None]


def _batches(batches: tuple[WriteBatch, ...]) -> list[JSON]:
    if not batches:
        return []
    t0 = batches[0].started_s

    def ms(t: float) -> float:
        return round((t - t0) * 1000.0, 3)
    out: list[JSON] = []
    for b in batches:
        writes: list[JSON] = [{"target": w.target, "decision_id": str(w.decision_id), "start_ms": ms(w.started_s),
                               "end_ms": ms(w.ended_s), "waited_ms": round(w.waited_s * 1000.0, 3), "ok": w.ok,
                               **({"error": w.error} if w.error else {})} for w in b.writes]
        out.append({"batch": b.index, "start_ms": ms(b.started_s), "end_ms": ms(b.ended_s), "writes": writes})
    return out

