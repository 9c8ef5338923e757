"""One fleet step: every workload's proposal in, the cluster's L2 and L3 out — for N workloads at once.

The one implementation of the cluster rules that the live fleet controller (``ebb run --workloads``,
:mod:`ebb.live.fleet_controller`) and the cluster simulator (``ebb simulate --cluster``,
:mod:`ebb.sim.cluster.policies`) both call, so a cluster what-if predicts what the live controller
does. Each workload's L1 (its :class:`~ebb.decide.policy.EbbPolicy`, or the vectorised
:class:`~ebb.decide.fleet_policy.FleetEbb` at simulator scale) has already decided — sized, vetoed
its own scale-down on its own signals, recalibrated its weight — and proposes a target. The step:

1. **Quota on scale-ups** (:func:`~ebb.decide.fleet_quota.cap_scale_ups`): scale-ups within their
   namespace's ``max``; never budgeted otherwise.
2. **L2** (:func:`~ebb.decide.fleet_rank.rank_fleet`): the vetoes of the class columns on each
   workload's latency (its P99 against the SLO its policy guards), staleness, burst and replica
   floor, plus the caller's zone veto; the rank order — lowest weight, then most headroom, then name.
   The weight is each workload's policy's own, taken as given: recalibrated once, by the policy.
3. **L3** (:func:`~ebb.decide.fleet_plan.plan_fleet`): the cluster disruption budget in rank order,
   borrowed quota reclaimed first, each grant capped by the workload's replicas and PDB; per-zone
   counts that keep zone skew ≤ ``max(max_skew, skew before)``.

Out: the target of every workload (scale-ups capped, scale-downs narrowed or vetoed), the grants,
the rank and plan, and — for the few workloads a caller records — the reasons in words
(:meth:`FleetStep.words`) and the proposal's :class:`~ebb.model.decision.Decision` narrowed with them
(:meth:`FleetStep.decided`). Victims are the caller's: the live controller names them with
:func:`~ebb.decide.coordinate.plan_scale_down` for the granted count (the counts are equal,
property-tested), the simulator removes by count per zone (``plan.remove_ready`` /
``plan.remove_starting``).

Guarantees: pure, arrays in and out, no Python loop per workload (the words are built only when
asked, per workload); a vetoed workload is granted nothing; ``Σ granted ≤ cluster_budget``;
scale-ups are never reduced except by their namespace's quota ``max``; holds and vetoes pass
through unchanged. Property-tested equal, on generated fleets, to the scalar path —
:func:`~ebb.decide.semantics.rank_candidates`, :func:`~ebb.decide.coordinate.plan_cluster` and
:func:`~ebb.decide.coordinate.plan_scale_down` with a :class:`~ebb.decide.coordinate.QuotaContext`
(``tests/unit/decide/test_fleet_step.py``). Cost: about ``rank_fleet`` + ``plan_fleet``
(``bench/cluster_cycle.py``: a 10,000-workload cycle well under 50 ms).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt

from ebb.decide.columns import column
from ebb.decide.fleet_plan import FleetPlan, plan_fleet
from ebb.decide.fleet_quota import QuotaCap, cap_scale_ups
from ebb.decide.fleet_rank import FleetClasses, FleetRank, rank_fleet
from ebb.decide.semantics import DEFAULT_MAX_STALENESS_S, WorkloadSignals, veto
from ebb.model.decision import Decision

__all__ = ["FleetProposals", "FleetRules", "FleetStep", "decision_proposals", "fleet_step", "proposal_row"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True)
class FleetProposals:
    """One cycle's proposals of N workloads over Z zones (arrays indexed by workload, then zone)."""

    spec: IntArray
    """[N] ``spec.replicas`` now (ready + starting + pending): what each proposal moves from."""
    target: IntArray
    """[N] the replicas each workload's L1 proposes (above ``spec``: scale up; below: scale down)."""
    weight: FloatArray
    """[N] each workload's L2 weight as its policy recalibrated it (finite)."""
    latency_ms: FloatArray
    """[N] the latency the L2 veto reads: the P99 against the SLO its policy guards (ms); NaN = unknown
    (vetoes a scale-down)."""
    staleness_s: FloatArray
    """[N] age of the newest sample behind the proposal (s); NaN = unknown (vetoes)."""
    burst: BoolArray
    """[N] an L1 burst is active (vetoes)."""
    ready: IntArray
    """[N, Z] ready replicas per zone."""
    starting: IntArray
    """[N, Z] replicas not ready yet per zone (cold-starting; pending ones in a zone of their own)."""
    borrowed: IntArray | None = None
    """[N] replicas above their namespace's quota ``min`` (reclaimed first); None = none."""
    pdb_allowance: IntArray | None = None
    """[N] disruptions a PodDisruptionBudget allows (−1 = none); None = no PDBs."""
    zone_veto: Sequence[str] | None = None
    """[N] why a workload's zone view cannot back a scale-down ("" = it can); None = no zone checks."""

    def __len__(self) -> int:
        return int(self.spec.shape[0])


@dataclass(frozen=True)
class FleetRules:
    """What the step applies to every proposal: classes, quotas, the budget."""

    classes: FleetClasses
    """L2 columns per workload (:meth:`FleetClasses.guarding`: what both loops measure)."""
    namespace: IntArray
    """[N] each workload's namespace, an index into ``namespace_names``."""
    namespace_names: tuple[str, ...]
    gpu_milli: IntArray
    """[N] milli-GPUs one replica requests (what it counts against its namespace's quota)."""
    quota_max_milli: IntArray
    """[namespaces] quota ``max`` in milli-GPUs; −1 = uncapped."""
    cluster_budget: int
    """Replicas removed per cycle across the fleet (≥ 0); scale-ups never count."""
    max_skew: int = 1
    """Zone skew bound of every workload's removals (≥ 1)."""
    max_staleness_s: float = DEFAULT_MAX_STALENESS_S
    """Data older than this vetoes a scale-down (s)."""
    names: tuple[str, ...] | None = None
    """[N] workload names: rank ties break by name (by index when None)."""


def proposal_row(d: Decision, base_weight: float) -> tuple[float, float]:
    """``(weight, latency_ms)`` of one policy decision as the step reads them: the weight the policy
    recalibrated (``weights["workload"]``, else ``base_weight``) and the latency its own L2 judged
    by (``signals["l2_latency_ms"]``: its TTFT P99, 0 for a fleet it judged idle). A decision of a
    policy that records no such signal gives its TTFT P99 — 0 for a scale-down without one (a
    policy only proposes that for an idle fleet), NaN otherwise."""
    if "l2_latency_ms" in d.signals:
        return float(d.weights.get("workload", base_weight)), float(d.signals["l2_latency_ms"])
    p99 = float(d.signals.get("ttft_p99_ms", math.nan))
    if math.isnan(p99) and d.action == "scale_down":
        p99 = 0.0
    return float(d.weights.get("workload", base_weight)), p99


def decision_proposals(decisions: Sequence[Decision], *, base_weight: npt.ArrayLike, staleness_s: npt.ArrayLike,
                       ready: npt.ArrayLike, starting: npt.ArrayLike, borrowed: npt.ArrayLike | None = None,
                       zone_veto: Sequence[str] | None = None) -> FleetProposals:
    """The proposals of N workloads whose L1 is a scalar policy (one :class:`Decision` each, from its
    ``from_replicas`` to its ``to_replicas``; :func:`proposal_row` for the L2 columns). A policy
    vetoes its own bursts, so no burst is proposed; the step checks its other vetoes again."""
    n = len(decisions)
    rows = [proposal_row(d, float(b)) for d, b in zip(decisions, np.broadcast_to(np.asarray(base_weight), (n,)))]
    return FleetProposals(
        spec=np.array([d.from_replicas for d in decisions], dtype=np.int64),
        target=np.array([d.to_replicas for d in decisions], dtype=np.int64),
        weight=np.array([r[0] for r in rows], dtype=np.float64).reshape(n),
        latency_ms=np.array([r[1] for r in rows], dtype=np.float64).reshape(n),
        staleness_s=np.broadcast_to(np.asarray(staleness_s, dtype=np.float64), (n,)).copy(),
        burst=np.zeros(n, dtype=np.bool_), ready=np.asarray(ready, dtype=np.int64),
        starting=np.asarray(starting, dtype=np.int64),
        borrowed=None if borrowed is None else np.asarray(borrowed, dtype=np.int64), zone_veto=zone_veto)


@dataclass(frozen=True)
class FleetStep:
    """One fleet step's answer (arrays of length N; see :func:`fleet_step`)."""

    target: IntArray
    """[N] replicas each workload goes to: scale-ups within quota, scale-downs as granted."""
    request: IntArray
    """[N] removals proposed (``spec − target`` where the proposal was a scale-down, else 0)."""
    granted: IntArray
    """[N] removals granted (``plan.granted``)."""
    quota: QuotaCap
    rank: FleetRank
    plan: FleetPlan
    vetoed: BoolArray
    """[N] L2 or zone vetoes (of the workloads proposing a scale-down, these got nothing)."""
    proposals: FleetProposals
    rules: FleetRules

    def words(self, i: int) -> str:
        """Why workload ``i``'s proposal was changed (or kept), in the words the ledger records:
        ``quota: ...`` for a capped scale-up; for a scale-down ``vetoed: <L2 reasons>``,
        ``vetoed: zones: ...``, ``cluster budget: 1 of 2 (1 per cycle)`` or ``granted in full``,
        with ``; N reclaim borrowed quota first``; "" for a hold or an uncapped scale-up."""
        p, r = self.proposals, self.rules
        if self.quota.capped[i]:
            ns = int(r.namespace[i])
            return (f"quota: namespace {r.namespace_names[ns]} at max_gpus {r.quota_max_milli[ns] / 1000:g} "
                    f"({self.quota.used_before_milli[i] / 1000:g} GPUs used by managed Deployments)")
        asked = int(self.request[i])
        if asked == 0:
            return ""
        if self.rank.vetoed[i]:
            return "vetoed: " + "; ".join(self._veto_words(i))
        if p.zone_veto is not None and p.zone_veto[i]:
            return f"vetoed: {p.zone_veto[i]}"
        got = int(self.plan.cluster_granted[i])
        why = "granted in full" if got == asked else \
            f"cluster budget: {got} of {asked} ({r.cluster_budget} per cycle)"
        reclaim = int(self.plan.reclaim_first[i])
        return why + (f"; {reclaim} reclaim borrowed quota first" if reclaim else "")

    def _veto_words(self, i: int) -> tuple[str, ...]:
        """The scalar :func:`~ebb.decide.semantics.veto`'s words for workload ``i`` (its reasons with
        their numbers; the vectorised codes are tested equal to them)."""
        p, r = self.proposals, self.rules
        cls = r.classes.workload_class(i)
        sig = WorkloadSignals(workload=str(i), class_name=cls.name, replicas=int(p.spec[i]),
                              ready_replicas=int(p.ready[i].sum()), latency_p99_ms=float(p.latency_ms[i]),
                              latency_p95_ms=float(p.latency_ms[i]), success_ratio=math.nan,
                              burst_active=bool(p.burst[i]), utilisation_ratio=math.nan,
                              staleness_s=float(p.staleness_s[i]))
        return veto(cls, sig, r.max_staleness_s)

    def decided(self, i: int, d: Decision) -> Decision:
        """Workload ``i``'s decision ``d`` (its proposal) after the step: a capped scale-up moved to
        what fits (a veto when nothing does), a scale-down narrowed to its grant with ``L3: <words>``
        among its reasons, or turned into a veto naming why (``L3: cluster budget: 0 of 2 ...``);
        anything else unchanged. Victims are cut to the grant (the caller names its own)."""
        if d.action == "scale_up" and self.quota.capped[i]:
            to = int(self.target[i])
            why = self.words(i)
            return d.retarget(d.from_replicas, veto=why) if to <= d.from_replicas else d.retarget(to, reason=why)
        if d.action != "scale_down" or not self.request[i]:
            return d
        got = int(self.granted[i])
        if got == 0:
            return d.retarget(d.from_replicas, veto=f"L3: {self.words(i)}")
        narrowed = d.retarget(d.from_replicas - got, reason=f"L3: {self.words(i)}")
        return replace(narrowed, plan={**narrowed.plan, "l3_budget": float(self.plan.budget),
                                       "l3_granted": float(got)})


def fleet_step(p: FleetProposals, r: FleetRules) -> FleetStep:
    """Quota on scale-ups, L2 vetoes and rank, L3 budget/PDB/zones (module docstring)."""
    n = len(p)
    spec = column(p.spec, n, "spec", np.int64)
    target = column(p.target, n, "target", np.int64)
    if r.names is not None and len(r.names) != n:
        raise ValueError(f"names must have {n} entries, got {len(r.names)}")
    quota = cap_scale_ups(spec=spec, target=target, namespace=r.namespace, gpu_milli=r.gpu_milli,
                          quota_max_milli=r.quota_max_milli)
    request = np.where(target < spec, spec - target, 0).astype(np.int64)
    rank = rank_fleet(r.classes, weight=p.weight, latency_p99_ms=p.latency_ms, staleness_s=p.staleness_s,
                      success_ratio=np.nan, burst_active=p.burst, replicas=spec, names=r.names,
                      max_staleness_s=r.max_staleness_s)
    vetoed = rank.vetoed
    if p.zone_veto is not None:
        if len(p.zone_veto) != n:
            raise ValueError(f"zone_veto must have {n} entries, got {len(p.zone_veto)}")
        vetoed = vetoed | (np.asarray(p.zone_veto, dtype=str) != "")
    plan = plan_fleet(ready=p.ready, starting=p.starting, request=request, order=rank.order, vetoed=vetoed,
                      cluster_budget=r.cluster_budget, pdb_allowance=p.pdb_allowance, max_skew=r.max_skew,
                      borrowed=p.borrowed)
    out = np.where(request > 0, spec - plan.granted, quota.target).astype(np.int64)
    return FleetStep(target=out, request=request, granted=plan.granted, quota=quota, rank=rank, plan=plan,
                     vetoed=vetoed, proposals=p, rules=r)

