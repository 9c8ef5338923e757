"""L3 — cluster-level coordinated scale-down: which replicas go, and how many (SPEC §3.4).

Pure: replica snapshots in, a plan out; no clocks, no I/O, deterministic for a given input.

:func:`plan_scale_down` picks victims for one workload in one namespace:

* **Preference.** Not-ready replicas first (they serve nothing), then least ``load``
  (unknown = NaN ranks last), ties by lower ``deletion_cost`` (Kubernetes'
  ``controller.kubernetes.io/pod-deletion-cost``), then ``replica_id``.
* **Zone balance.** Skew = max − min replica count over the zones that held ≥ 1 replica of this
  workload *in this namespace* before the plan (a zone emptied by the plan still counts, at 0,
  as upstream counts a domain that still has nodes). Upstream topologySpreadConstraints count
  only pods in the pod's own namespace, so other namespaces never enter the count. After every
  removal skew ≤ ``max(max_skew, skew_before)``: within ``max_skew`` it stays within; above it,
  it never grows. A victim that would break this is passed over for the next preferred one.
* **PDB.** Granted ≤ allowed disruptions = ``max_unavailable − already_unavailable`` or
  ``ready − min_available`` (floored at 0). Every removal counts, not-ready ones included: that
  is stricter than the eviction API's ``IfHealthyBudget`` rule, and safe if a not-ready replica
  turns ready before the write lands.
* **Count.** granted = min(remove, eligible, PDB allowance, budget). Zone balance never lowers
  it: removing from a most-populated zone keeps skew ≤ max(skew, 1) ≤ the bound, so a feasible
  victim always exists. Hence granted is monotone: more ``remove`` or ``budget`` never removes
  fewer; a stricter PDB never removes more.

:func:`plan_cluster` shares one per-cycle cluster budget across workloads in L2 rank order.

**Elastic quota** (issue #5 item 4; model in :mod:`ebb.decide.quota`). With ``quota=`` (a
:class:`QuotaContext`: namespace quotas + each replica's :class:`~ebb.decide.quota.QuotaPod`),
scale-down takes borrowed capacity back first:

* :func:`plan_scale_down` prefers, in this order: borrowers (pods above their namespace's
  ``min``, see :func:`~ebb.decide.quota.borrowed`), then lowest priority, then newest, and only
  then the preference above (not-ready, least load, deletion cost, id).
* :func:`plan_cluster` spends the budget first on removals that reclaim borrowed capacity — per
  workload up to min(request, its borrowers), in rank order — then on the rest in rank order.

Precedence: PDB, zone skew, budget and L2 vetoes are *hard* constraints and bound every removal
exactly as without quota; the reclaim order is a *preference* that only decides which replicas
(and which workloads) go first. So quota never changes a count: granted with quota == granted
without it, for a single workload and for the cluster total (property-tested), and the
monotonicity above holds unchanged. Among the choices skew allows, a non-borrower is removed
only when no remaining borrower's removal would keep skew within the bound.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from ebb.decide.quota import Quota, QuotaPod, borrower_keys
from ebb.decide.semantics import Candidate

__all__ = ["ClusterGrant", "ClusterPlan", "QuotaContext", "ReplicaView", "ScaleDownPlan",
           "plan_cluster", "plan_scale_down", "zone_skew"]


@dataclass(frozen=True)
class ReplicaView:
    """One replica as L3 sees it in a snapshot."""

    replica_id: str
    """Unique id (pod name or simulator id)."""
    workload: str
    """Owning workload (Deployment / ReplicaSet name)."""
    namespace: str
    """Kubernetes namespace; topology skew is counted per namespace."""
    zone: str
    """Topology domain (``topology.kubernetes.io/zone``)."""
    load: float
    """Current load: utilisation (0..1) or in-flight requests; only the order matters. NaN =
    unknown, ranked as the most loaded (never removed before a replica with known load)."""
    ready: bool
    """Passing readiness now; not-ready replicas are removed first."""
    deletion_cost: int = 0
    """pod-deletion-cost annotation; lower goes first among equal loads. Default 0 (upstream)."""


@dataclass(frozen=True)
class ScaleDownPlan:
    """Victims for one workload and why the count is what it is."""

    workload: str
    namespace: str | None
    """The namespace planned in (None only when the workload had no replicas)."""
    requested: int
    granted: int
    victims: tuple[ReplicaView, ...]
    """In removal order; ``len(victims) == granted``."""
    limits: tuple[str, ...]
    """One line per limit that bound the count below ``requested`` or moved the choice."""
    skew_before: int
    skew_after: int
    allowed_disruptions: int | None
    """PDB allowance before the plan; None when no PDB was given."""
    reclaimed: tuple[str, ...] = ()
    """Ids of the victims that were borrowing above their namespace's quota ``min``, in removal
    order; always empty without ``quota=``."""

    @property
    def victim_ids(self) -> tuple[str, ...]:
        """Ids of the victims, in removal order."""
        return tuple(v.replica_id for v in self.victims)


@dataclass(frozen=True)
class QuotaContext:
    """Elastic quota as L3 sees it: namespace quotas and the pod record of every replica.

    Borrowing is decided over a whole namespace (:func:`~ebb.decide.quota.borrowed`), so give
    the records of *all* pods in the namespaces concerned, other workloads' included. Replica ids
    must be unique across the context (they are the keys of ``pods``).
    """

    quotas: Mapping[str, Quota]
    """namespace → its :class:`~ebb.decide.quota.Quota`; a namespace without one never borrows."""
    pods: Mapping[str, QuotaPod]
    """replica_id → that replica's pod (priority, creation time, requests, namespace)."""
    _borrowers: frozenset[str] = field(default=frozenset(), init=False, repr=False,
                                       compare=False)

    def __post_init__(self) -> None:
        quotas = MappingProxyType(dict(self.quotas))
        pods = MappingProxyType(dict(self.pods))
        keys = borrower_keys(list(pods.values()), quotas)  # validates duplicates and namespaces
        object.__setattr__(self, "quotas", quotas)
        object.__setattr__(self, "pods", pods)
        object.__setattr__(self, "_borrowers",
                           frozenset(rid for rid, p in pods.items() if p.key in keys))

    def pod_of(self, replica: ReplicaView) -> QuotaPod:
        """The pod record of ``replica``; ValueError when missing or in another namespace."""
        pod = self.pods.get(replica.replica_id)
        if pod is None:
            raise ValueError(f"quota: no QuotaPod for replica {replica.replica_id!r} of "
                             f"{replica.workload!r}; give every replica a record in "
                             "QuotaContext.pods, or plan without quota=")
        if pod.namespace != replica.namespace:
            raise ValueError(f"quota: replica {replica.replica_id!r} is in namespace "
                             f"{replica.namespace!r} but its QuotaPod is in {pod.namespace!r}")
        return pod

    def is_borrower(self, replica_id: str) -> bool:
        """Whether the replica's pod uses capacity above its namespace's ``min``."""
        return replica_id in self._borrowers


def zone_skew(counts: Mapping[str, int]) -> int:
    """max − min over the given zones' counts; 0 for no zones."""
    return max(counts.values()) - min(counts.values()) if counts else 0


def _preference(r: ReplicaView) -> tuple[bool, float, int, str]:
    load = math.inf if math.isnan(r.load) else r.load
    return (r.ready, load, r.deletion_cost, r.replica_id)


def _quota_preference(r: ReplicaView,
                      quota: QuotaContext) -> tuple[bool, int, float, bool, float, int, str]:
    pod = quota.pod_of(r)
    return (not quota.is_borrower(r.replica_id), pod.priority, -pod.created_s, *_preference(r))


def _pdb_allowance(eligible: Sequence[ReplicaView], max_unavailable: int | None,
                   min_available: int | None, already_unavailable: int) -> int | None:
    if max_unavailable is not None and min_available is not None:
        raise ValueError("a PodDisruptionBudget sets maxUnavailable or minAvailable, not both; got "
                         f"{max_unavailable!r} and {min_available!r}")
    for name, v in (("pdb_max_unavailable", max_unavailable), ("pdb_min_available", min_available),
                    ("already_unavailable", already_unavailable)):
        if v is not None and v < 0:
            raise ValueError(f"{name} must be >= 0, got {v!r}")
    if max_unavailable is not None:
        return max(0, max_unavailable - already_unavailable)
    if min_available is not None:
        return max(0, sum(r.ready for r in eligible) - min_available)
    return None


def _eligible(replicas: Iterable[ReplicaView], workload: str,
              namespace: str | None) -> tuple[list[ReplicaView], str | None]:
    eligible = [r for r in replicas if r.workload == workload
                and (namespace is None or r.namespace == namespace)]
    ids = Counter(r.replica_id for r in eligible)
    dup = [i for i, n in ids.items() if n > 1]
    if dup:
        raise ValueError(f"duplicate replica ids for {workload!r}: {sorted(dup)}")
    namespaces = sorted({r.namespace for r in eligible})
    if len(namespaces) > 1:
        raise ValueError(f"workload {workload!r} has replicas in namespaces {namespaces}; "
                         "pass namespace= to plan one of them")
    return eligible, namespace if namespace is not None else (namespaces[0] if namespaces else None)


def plan_scale_down(replicas: Iterable[ReplicaView], workload: str, remove: int, *,
                    namespace: str | None = None, max_skew: int = 1,
                    pdb_max_unavailable: int | None = None, pdb_min_available: int | None = None,
                    already_unavailable: int = 0, budget: int | None = None,
                    quota: QuotaContext | None = None) -> ScaleDownPlan:
    """Choose up to ``remove`` victims of ``workload`` under zone skew, PDB and budget limits.

    ``quota``: when given, borrowers go first, then lowest priority, then newest (module
    docstring); every eligible replica then needs a pod record, else ValueError.
    """
    if remove < 0:
        raise ValueError(f"remove must be >= 0, got {remove!r}")
    if max_skew < 1:  # upstream validation: maxSkew must be greater than zero
        raise ValueError(f"max_skew must be >= 1, got {max_skew!r}")
    if budget is not None and budget < 0:
        raise ValueError(f"budget must be >= 0 or None, got {budget!r}")
    eligible, ns = _eligible(replicas, workload, namespace)
    allowance = _pdb_allowance(eligible, pdb_max_unavailable, pdb_min_available,
                               already_unavailable)
    counts: dict[str, int] = dict(Counter(r.zone for r in eligible))
    skew_before = zone_skew(counts)
    bound = max(max_skew, skew_before)

    limits: list[str] = []
    target = remove
    caps: list[tuple[int | None, str]] = [
        (len(eligible), f"eligible: only {len(eligible)} replicas of {workload!r} in namespace "
                        f"{ns!r}"),
        (allowance, f"pdb: {allowance} disruptions allowed"
                    + (f" (maxUnavailable {pdb_max_unavailable} − {already_unavailable} already "
                       "unavailable)" if pdb_max_unavailable is not None
                       else f" (ready − minAvailable {pdb_min_available})")),
        (budget, f"budget: at most {budget} victims this cycle"),
    ]
    for cap, why in caps:
        if cap is not None and cap < remove:
            limits.append(why)
            target = min(target, cap)

    if quota is None:
        pool = sorted(eligible, key=_preference)
    else:
        pool = sorted(eligible, key=lambda r: _quota_preference(r, quota))
    victims: list[ReplicaView] = []
    while len(victims) < target:
        chosen = None
        for i, r in enumerate(pool):
            counts[r.zone] -= 1
            if zone_skew(counts) <= bound:
                chosen = i
                break
            counts[r.zone] += 1
        if chosen is None:  # unreachable by the module's argument; kept as a fail-safe stop
            limits.append(f"skew: no victim keeps skew <= {bound}")
            break
        if chosen > 0:
            limits.append(f"skew: passed over {', '.join(p.replica_id for p in pool[:chosen])} "
                          f"to keep zone skew <= {bound}")
        victims.append(pool.pop(chosen))
    reclaimed = () if quota is None else tuple(v.replica_id for v in victims
                                                if quota.is_borrower(v.replica_id))
    return ScaleDownPlan(workload=workload, namespace=ns, requested=remove, granted=len(victims),
                         victims=tuple(victims), limits=tuple(limits), skew_before=skew_before,
                         skew_after=zone_skew(counts), allowed_disruptions=allowance,
                         reclaimed=reclaimed)


@dataclass(frozen=True)
class ClusterGrant:
    """How many removals one workload may plan this cycle."""

    workload: str
    requested: int
    granted: int
    reason: str
    reclaim: int = 0
    """Of ``granted``, how many were granted ahead of rank order because the workload holds
    that many quota borrowers (0 without ``quota=``)."""


@dataclass(frozen=True)
class ClusterPlan:
    """A cycle's cluster budget split across workloads, in candidate rank order."""

    budget: int
    grants: tuple[ClusterGrant, ...]

    @property
    def total_granted(self) -> int:
        """Sum of grants; never above ``budget``."""
        return sum(g.granted for g in self.grants)

    @property
    def remaining(self) -> int:
        """Budget left unused this cycle."""
        return self.budget - self.total_granted

    def granted(self, workload: str) -> int:
        """Removals granted to ``workload`` (0 when it got no grant)."""
        return sum(g.granted for g in self.grants if g.workload == workload)


def plan_cluster(candidates: Sequence[Candidate], per_workload_requests: Mapping[str, int],
                 cluster_budget: int, *, quota: QuotaContext | None = None,
                 replicas: Iterable[ReplicaView] | None = None) -> ClusterPlan:
    """Grant requests in candidate order until the cluster budget is spent.

    Vetoed candidates get 0 whatever they asked. Requests for workloads that are not candidates
    get 0 ("not ranked"): without L2 signals there is no evidence that shrinking them is safe.
    Pass each grant as ``budget=`` (and the same ``quota=``) to :func:`plan_scale_down`.

    ``quota`` (with ``replicas``, every replica of the requesting workloads): first, in rank
    order, each workload gets up to min(request, its borrowers) to reclaim borrowed capacity;
    what budget is left then goes in rank order as without quota. Totals do not change.
    """
    if cluster_budget < 0:
        raise ValueError(f"cluster_budget must be >= 0, got {cluster_budget!r}")
    for w, n in per_workload_requests.items():
        if n < 0:
            raise ValueError(f"request for {w!r} must be >= 0, got {n!r}")
    borrowers = _borrowers_per_workload(quota, replicas, per_workload_requests)
    ranked: list[Candidate] = []
    seen: set[str] = set()
    for c in candidates:
        if c.workload in seen:
            raise ValueError(f"duplicate candidate {c.workload!r}")
        seen.add(c.workload)
        if c.workload in per_workload_requests:
            ranked.append(c)
    left = cluster_budget
    first: dict[str, int] = {}
    for c in ranked:  # reclaim pass: borrowed capacity before rank order
        if not c.vetoed:
            first[c.workload] = min(per_workload_requests[c.workload],
                                    borrowers.get(c.workload, 0), left)
            left -= first[c.workload]
    grants: list[ClusterGrant] = []
    for c in ranked:
        asked = per_workload_requests[c.workload]
        if c.vetoed:
            grants.append(ClusterGrant(c.workload, asked, 0, c.reason))
            continue
        reclaim = first[c.workload]
        more = min(asked - reclaim, left)
        left -= more
        got = reclaim + more
        why = ("granted in full" if got == asked
               else f"cluster budget: {got} of {asked} ({cluster_budget} per cycle)")
        if reclaim:
            why += f"; {reclaim} reclaim borrowed quota first"
        grants.append(ClusterGrant(c.workload, asked, got, why, reclaim))
    for w in sorted(set(per_workload_requests) - seen):
        grants.append(ClusterGrant(w, per_workload_requests[w], 0, "not ranked: no L2 signals"))
    return ClusterPlan(budget=cluster_budget, grants=tuple(grants))


def _borrowers_per_workload(quota: QuotaContext | None, replicas: Iterable[ReplicaView] | None,
                            requests: Mapping[str, int]) -> Counter[str]:
    if quota is None:
        return Counter()
    if replicas is None:
        raise ValueError("plan_cluster: quota= needs replicas= (the replicas of the requesting "
                         "workloads) to know which workloads hold borrowers")
    listed = list(replicas)
    ids = Counter(r.replica_id for r in listed)
    dup = sorted(i for i, n in ids.items() if n > 1)
    if dup:
        raise ValueError(f"plan_cluster: duplicate replica ids {dup}")
    out: Counter[str] = Counter()
    for r in listed:
        if r.workload in requests:
            quota.pod_of(r)  # a replica without a record has unknown priority: refuse, not guess
            if quota.is_borrower(r.replica_id):
                out[r.workload] += 1
    return out
