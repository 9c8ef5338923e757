"""One L2 → L3 cycle run offline over a cluster snapshot (``ebb plan FLEET.yaml``).

The snapshot (:mod:`ebb.sim.snapshot`, already in the planners' records: replica views, workload
signals, quotas, pods) goes, unchanged, through the code a cluster cycle runs:

1. :func:`~ebb.decide.semantics.rank_candidates` ranks the workloads (lowest weight first) and
   vetoes the unsafe ones. A signal the snapshot leaves out is unknown (NaN) and vetoes: fail safe,
   exactly as a missing metric does live.
2. :func:`~ebb.decide.coordinate.plan_cluster` splits ``budget`` across them in rank order
   (borrowed quota first when ``quotas`` are given).
3. :func:`~ebb.decide.coordinate.plan_scale_down` picks each workload's victims under its PDB and
   zone skew, with its grant as the budget.
4. With ``pending`` pods, :func:`~ebb.decide.quota.admit` gives each one its namespace quota's
   verdict: *admitted* (within ``min``), *borrowing* (allowed into the elastic share, which the
   next scale-down reclaims first) or *refused* (over ``max``, or a QoS class the
   ``quota_policy`` keeps within ``min``), with the numbers that decided. Usage is the ``pods``'
   requests after this cycle's victims leave; pending pods are admitted in the order listed, each
   admitted one adding its requests. A namespace without a quota admits every pod.

So for every workload: granted ≤ requested, Σ granted ≤ ``budget``, a vetoed workload gets 0, and
``len(victims) == granted``. Nothing is written anywhere. Every check is the reader's
(:func:`~ebb.sim.snapshot.load_snapshot`): a snapshot it returns plans without an error.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ebb.config.workloads import WorkloadClass
from ebb.decide.coordinate import ClusterPlan, QuotaContext, ScaleDownPlan, plan_cluster, plan_scale_down
from ebb.gates.quota import QuotaPolicy, admit
from ebb.decide.semantics import rank_candidates
from ebb.sim.snapshot import ClusterSnapshot

__all__ = ["PendingVerdict", "SnapshotPlan", "plan_snapshot"]


@dataclass(frozen=True)
class PendingVerdict:
    """A pending pod's admission verdict under its namespace quota."""

    pod: str
    namespace: str
    qos: str
    """QoS class (upstream string), computed from the pod's requests and limits."""
    verdict: str
    """``admitted`` (within min), ``borrowing`` (allowed into the elastic share) or ``refused``."""
    reason: str
    """One line: the rule that decided, with its numbers."""


@dataclass(frozen=True)
class SnapshotPlan:
    """What one cycle would do to the snapshot."""

    cluster: ClusterPlan
    """The budget split, one grant per workload in rank order."""
    victims: Mapping[str, ScaleDownPlan]
    """Each workload's victims (``len(victims) == granted``) and the limits that bound them."""
    ranks: Mapping[str, str]
    """Each workload's L2 rank line (the veto reasons for a vetoed one)."""
    pending: tuple[PendingVerdict, ...]
    """Each pending pod's verdict, in the order listed (empty without ``pending:``)."""


def _quota_context(snap: ClusterSnapshot) -> QuotaContext | None:
    if snap.quotas is None:
        return None
    return QuotaContext(quotas={q.namespace: q for q in snap.quotas}, pods={p.name: p for p in snap.pods})


def _admit_pending(snap: ClusterSnapshot, quota: QuotaContext | None,
                   victims: Mapping[str, ScaleDownPlan]) -> tuple[PendingVerdict, ...]:
    """Each pending pod's verdict under its namespace quota, after this cycle's victims leave."""
    if quota is None:
        return ()
    policy = QuotaPolicy(**snap.quota_policy)
    gone = {v for plan in victims.values() for v in plan.victim_ids}
    usage: dict[str, dict[str, int]] = {}
    for rid, pod in quota.pods.items():
        if rid not in gone:
            used = usage.setdefault(pod.namespace, {})
            for r, v in pod.requests.items():
                used[r] = used.get(r, 0) + v
    out: list[PendingVerdict] = []
    for pod in snap.pending:
        q = quota.quotas.get(pod.namespace)
        if q is None:
            out.append(PendingVerdict(pod.name, pod.namespace, pod.qos.value, "admitted",
                                      f"allowed: namespace {pod.namespace!r} has no quota"))
            continue
        used = usage.setdefault(pod.namespace, {})
        got = admit(q, used, pod.requests, pod.qos, policy)
        if got.allowed:
            for r, v in pod.requests.items():
                used[r] = used.get(r, 0) + v
        verdict = "borrowing" if got.borrows else "admitted" if got.allowed else "refused"
        out.append(PendingVerdict(pod.name, pod.namespace, pod.qos.value, verdict, got.reason))
    return tuple(out)


def plan_snapshot(snap: ClusterSnapshot, classes: tuple[WorkloadClass, ...]) -> SnapshotPlan:
    """Rank (L2), split the budget (L3 cluster), pick victims (L3 per workload), admit pending pods."""
    quota = _quota_context(snap)
    replicas = snap.replicas
    weights = {w.name: w.weight for w in snap.workloads if w.weight is not None}
    candidates = rank_candidates(classes, [w.signals for w in snap.workloads], weights)
    requests = {w.name: w.remove for w in snap.workloads}
    plan = plan_cluster(candidates, requests, snap.budget, quota=quota,
                        replicas=replicas if quota is not None else None)
    victims = {
        w.name: plan_scale_down(replicas, w.name, w.remove, namespace=w.namespace, max_skew=snap.max_skew,
                                pdb_max_unavailable=w.pdb_max_unavailable, pdb_min_available=w.pdb_min_available,
                                already_unavailable=w.already_unavailable, budget=plan.granted(w.name),
                                quota=quota)
        for w in snap.workloads
    }
    return SnapshotPlan(cluster=plan, victims=victims, ranks={c.workload: c.reason for c in candidates},
                        pending=_admit_pending(snap, quota, victims))
