"""One live controller for many workloads (``ebb run --workloads FLEET.yaml``): L1/L2 per workload,
one L3 step across all of them, writes batched.

Built from N single-workload :class:`~ebb.live.controller.Controller` objects — one per managed
Deployment, each with its own signal source, actuator, policy instance, ledger run id
(``<run_id>-<namespace>-<deployment>``) and cycle numbering — composed through the controller's
cycle in two plain calls (:meth:`Controller.propose` / :meth:`Controller.commit`). Per cycle:

1. **Per workload** (``propose``): read the source and the fleet, settle a predecessor's unfinished
   decision, decide with that workload's own policy (L1 → L2 → its own victims), then the
   controller's locks (replica bounds, stale data). Every single-workload guarantee holds
   unchanged: fail static, write-ahead, exactly once, resume, fencing, one trace per workload cycle.
2. **The fleet step** (pure, :func:`~ebb.decide.fleet_step.fleet_step`: the code ``ebb simulate
   --cluster`` runs, so a cluster what-if predicts this loop's decisions): every member's proposal
   as arrays; scale-ups within their namespace's quota ``max`` (counted over the managed
   Deployments' replicas; **never budgeted** otherwise); the workloads proposing a scale-down vetoed
   and ranked by L2 (lowest weight, then most headroom, then name) and granted the cluster's
   ``disruption_budget`` (replicas per cycle) in that order, borrowed quota reclaimed first, within
   each one's replicas and zone skew. Then :func:`~ebb.decide.coordinate.plan_scale_down` names each
   grant's victims (borrowers first, then not-ready, least loaded, zone skew ≤ ``max_skew`` within
   its namespace; the same count, property-tested). A scale-down granted less is narrowed
   (``L3: ...`` in its reasons, the fleet's victims); one granted nothing becomes a veto naming why.
3. **Per workload** (``commit``): record, act, record the outcome — scale-ups first, then
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
  decision (:func:`~ebb.decide.fleet_step.proposal_row`): the weight its policy recalibrated
  (``weights["workload"]``, else its class's base weight; the step never recalibrates), its
  TTFT P99 against its TTFT SLO (a proposed scale-down without a P99 is one its policy judged
  idle: no completions while fresh samples showed no demand — latency 0), the age of its data,
  replicas against its floor. The live loop measures no success ratio or CTR, so class floors on
  those are not evaluated here (as in the single-workload loop).
* **Quota counts what the controller reads.** Borrowing is computed over the pods of the managed
  Deployments of a namespace, from each one's actuator read this cycle (a workload whose cycle
  ended before deciding contributes none). The reclaim order is a preference: it never changes a
  count (:mod:`ebb.decide.coordinate`).
* **One leader.** The members share one elector (one lease for the whole controller); the fleet
  record is written only while leading, with the fence (:func:`~ebb.live.cycle_ledger.leader_fence`,
  the members' own).

The fleet's ledger cycle (run id ``run_id``, cycle ``<run_id>-c<n>``, numbered like a member's:
:func:`~ebb.live.cycle_ledger.last_cycle_number`, past malformed rows' keys too; no decisions) is written
after the writes when anything was planned or written; its snapshot holds the budget, the grants
in rank order, each member decision of the cycle and the write batches (times in ms from the
first write). Best effort: a refused write is logged, the member decisions are already recorded.
"""

from __future__ import annotations

import contextvars
import logging
import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from ebb.actuate.base import FleetState
from ebb.actuate.batching import WriteBatch, WriteBatcher
from ebb.config.fleet import GPU, FleetWorkload, NamespaceQuota
from ebb.decide.coordinate import (
    ClusterGrant,
    ClusterPlan,
    QuotaContext,
    ReplicaView,
    plan_scale_down,
)
from ebb.decide.fleet_rank import FleetClasses
from ebb.decide.fleet_step import FleetProposals, FleetRules, FleetStep, decision_proposals, fleet_step
from ebb.decide.quota import QoSClass, Quota, QuotaPod
from ebb.errors import EbbError
from ebb.ledger.base import Ledger, fence_token
from ebb.live.controller import Controller, CycleOutcome, Proposal
from ebb.live.cycle_ledger import last_cycle_number, leader_fence
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


_Paused = tuple[FleetMember, contextvars.Context, Controller, Proposal]
"""A member whose cycle proposed: its context (the open cycle's trace), the controller to commit with, the proposal."""


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
        steps: list[tuple[FleetMember, contextvars.Context, CycleOutcome | Proposal]] = []
        for m in self.members:
            ctx = contextvars.copy_context()  # each member's trace context stays its own between halves
            steps.append((m, ctx, ctx.run(m.controller.propose)))
        paused: list[_Paused] = [(m, ctx, m.controller, s) for m, ctx, s in steps if isinstance(s, Proposal)]
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
        by_target = {m.target: (ctx, c, p) for m, ctx, c, p in paused}
        order = [t for t, d in decided.items() if d.action == "scale_up"]
        order += [t for t in rank if t in decided and decided[t].action == "scale_down"]
        order += [t for t in decided if t not in order]
        done: dict[str, CycleOutcome] = {}
        for t in order:
            ctx, ctl, p = by_target[t]
            done[t] = ctx.run(ctl.commit, p, decided[t])
        outcomes = tuple(done[m.target] if m.target in done else m.controller.commit(s) for m, _, s in steps)
        batches = self.batcher.take() if self.batcher is not None else ()
        n = self._record(outcomes, plan, batches, notes)
        return FleetOutcome(n, outcomes, plan, batches, tuple(notes))

    def _plan(self, paused: list[_Paused], notes: list[str]) -> tuple[dict[str, Decision], ClusterPlan | None, list[str]]:
        """Each paused member's decision after the fleet step, the cluster plan of the scale-downs and
        their rank order (targets). The step (:func:`~ebb.decide.fleet_step.fleet_step`) is the
        simulator's: quota on scale-ups, L2 vetoes and rank, L3 counts; the victims of each grant are
        named here (:func:`~ebb.decide.coordinate.plan_scale_down`, borrowers first)."""
        decided = {m.target: p.decision for m, _, _, p in paused}
        if not any(d.changes for d in decided.values()):
            return decided, None, []
        by_target = {m.target: p for m, _, _, p in paused}
        quota = self._quota_context(paused) if self.quotas else None
        step = fleet_step(self._proposals(by_target, quota), self._rules(by_target))
        for i, m in enumerate(self.members):
            if (p := by_target.get(m.target)) is not None:
                decided[m.target] = self._carried(i, m, p, step, quota, notes)
        ranked = [i for i in step.rank.order.tolist() if step.request[i] > 0]
        if not ranked:
            return decided, None, []
        names = [m.target for m in self.members]
        plan = ClusterPlan(budget=step.plan.budget, grants=tuple(
            ClusterGrant(names[i], int(step.request[i]), int(step.plan.cluster_granted[i]), step.words(i),
                         int(step.plan.reclaim_first[i])) for i in ranked))
        return decided, plan, [names[i] for i in ranked]

    def _carried(self, i: int, m: FleetMember, p: Proposal, step: FleetStep, quota: QuotaContext | None,
                 notes: list[str]) -> Decision:
        """Member ``i``'s decision after the step, with the victims of a granted scale-down named."""
        d = p.decision
        nd = step.decided(i, d)
        if nd is d:
            return d
        words = step.words(i)
        if d.action == "scale_up":
            notes.append(f"{m.target}: scale-up {d.from_replicas}→{d.to_replicas} capped at {nd.to_replicas} "
                         f"({words})")
            return nd
        if nd.action == "veto":
            notes.append(f"{m.target}: scale-down vetoed ({words})")
            return nd
        got = d.from_replicas - nd.to_replicas
        sp = plan_scale_down(_views(m, p.seen.state, p.seen.sig.inflight_by_replica), m.target, got,
                             namespace=m.workload.namespace, max_skew=self.settings.max_skew, budget=got, quota=quota)
        if sp.granted < got:  # the counts are equal (property-tested): a shortfall is a planner bug, fail safe
            why = "; ".join(sp.limits) or "no victim"
            log.error("%s: L3 granted %d removals but found %d victims (%s): vetoed", m.target, got, sp.granted, why)
            notes.append(f"{m.target}: scale-down vetoed ({why})")
            return d.retarget(d.from_replicas, veto=f"L3: {why}")
        ids = {f"{m.target}/{r.name}": r.replica for r in p.seen.state.replicas}
        if sp.reclaimed:
            nd = replace(nd, reasons=(*nd.reasons, f"L3: reclaims borrowed quota: {', '.join(sp.reclaimed)}"))
        if got < int(step.request[i]):
            notes.append(f"{m.target}: scale-down {int(step.request[i])} → {got} ({words})")
        return replace(nd, victims=tuple(ReplicaId(ids[v]) for v in sp.victim_ids))

    def _proposals(self, by_target: Mapping[str, Proposal], quota: QuotaContext | None) -> FleetProposals:
        """Every member's proposal as the step's arrays: a member that did not decide this cycle holds at
        its last ``spec.replicas`` (it still counts against its namespace's quota) with no replicas."""
        zones = sorted({r.zone for p in by_target.values() for r in p.seen.state.replicas})
        col = {z: k for k, z in enumerate(zones)}
        n = len(self.members)
        ready = np.zeros((n, max(1, len(zones))), dtype=np.int64)
        starting = np.zeros_like(ready)
        borrowed = np.zeros(n, dtype=np.int64)
        decisions: list[Decision] = []
        stale: list[float] = []
        zone_veto: list[str] = []
        for i, m in enumerate(self.members):
            p = by_target.get(m.target)
            if p is None:
                spec = self._spec.get(m.target, 0)
                decisions.append(Decision(0.0, "hold", spec, spec))
                stale.append(math.nan)
                zone_veto.append("")
                continue
            decisions.append(p.decision)
            stale.append(math.nan if p.seen.stale_s is None else max(0.0, p.seen.stale_s))
            zone_veto.append(_zone_veto(m, p.seen.state))
            for r in p.seen.state.replicas:
                (ready if r.ready_s is not None else starting)[i, col[r.zone]] += 1
                borrowed[i] += quota is not None and quota.is_borrower(f"{m.target}/{r.name}")
        return decision_proposals(decisions, base_weight=[m.workload.workload_class.base_weight for m in self.members],
                                  staleness_s=stale, ready=ready, starting=starting, borrowed=borrowed,
                                  zone_veto=zone_veto)

    def _rules(self, by_target: Mapping[str, Proposal]) -> FleetRules:
        """The step's rules over every member: its class as the live loop measures it (the class's
        weight, α and veto margin, its own TTFT SLO as the P99 bound, its replica floor), namespace
        quotas in milli-GPUs, the cluster budget."""
        ms = self.members
        namespaces = tuple(sorted({m.workload.namespace for m in ms}))
        caps = [q.max_of(GPU) if (q := self.quotas.get(ns)) is not None else None for ns in namespaces]
        classes = FleetClasses.guarding(
            base_weight=[m.workload.workload_class.base_weight for m in ms],
            alpha=[m.workload.workload_class.alpha for m in ms],
            veto_margin=[m.workload.workload_class.veto_margin for m in ms], slo_ms=[m.slo_ttft_ms for m in ms],
            min_replicas=[m.workload.min_replicas for m in ms])
        return FleetRules(classes=classes, namespace=np.array([namespaces.index(m.workload.namespace) for m in ms]),
                          namespace_names=namespaces,
                          gpu_milli=np.array([m.workload.gpu_milli_per_replica for m in ms]),
                          quota_max_milli=np.array([-1 if c is None else c for c in caps], dtype=np.int64),
                          cluster_budget=self.settings.disruption_budget, max_skew=self.settings.max_skew,
                          max_staleness_s=max(p.seen.max_staleness_s for p in by_target.values()),
                          names=tuple(m.target for m in ms))

    def _quota_context(self, paused: list[_Paused]) -> QuotaContext:
        pods = {}
        for m, _, _, p in paused:
            w = m.workload
            for r in p.seen.state.replicas:
                pods[f"{m.target}/{r.name}"] = QuotaPod(
                    name=f"{w.deployment}/{r.name}", namespace=w.namespace, qos=QoSClass.GUARANTEED,
                    priority=w.priority, created_s=r.created_s, requests={GPU: w.gpu_milli_per_replica})
        return QuotaContext(self.quotas, pods)

    # -- the fleet's ledger cycle ----------------------------------------------------------------
    def _leading(self) -> bool:
        return self.elector is None or self.elector.is_leader()

    def _next_n(self) -> int:
        if self._n is None:
            _, self._n = last_cycle_number(self.ledger, self.settings.run_id)
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
            fence = leader_fence(self.elector, self.settings.run_id)
            n = self._next_n()
            snap: dict[str, JSON] = {"budget": self.settings.disruption_budget,
                                     "decisions": _decisions(self.members, outcomes),
                                     "batches": _batches(batches), "notes": list(notes)}
            if plan is not None:
                snap["grants"] = [{"workload": g.workload, "requested": g.requested, "granted": g.granted,
                                   "reclaim": g.reclaim, "reason": g.reason} for g in plan.grants]
            cycle = CycleRecord(cycle_id=CycleId(f"{self.settings.run_id}-c{n}"), run_id=RunId(self.settings.run_id),
                                ts_ns=int(self._clock() * 1e9), policy="fleet-l3", snapshot=snap,
                                fencing_token=fence_token(fence))
            self.ledger.append_cycle(cycle, fence)
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

