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
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from ebb.decide.semantics import Candidate

__all__ = ["ClusterGrant", "ClusterPlan", "ReplicaView", "ScaleDownPlan", "plan_cluster",
           "plan_scale_down", "zone_skew"]


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

    @property
    def victim_ids(self) -> tuple[str, ...]:
        """Ids of the victims, in removal order."""
        return tuple(v.replica_id for v in self.victims)


def zone_skew(counts: Mapping[str, int]) -> int:
    """max − min over the given zones' counts; 0 for no zones."""
    return max(counts.values()) - min(counts.values()) if counts else 0


def _preference(r: ReplicaView) -> tuple[bool, float, int, str]:
    load = math.inf if math.isnan(r.load) else r.load
    return (r.ready, load, r.deletion_cost, r.replica_id)


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
                    already_unavailable: int = 0, budget: int | None = None) -> ScaleDownPlan:
    """Choose up to ``remove`` victims of ``workload`` under zone skew, PDB and budget limits."""
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

    pool = sorted(eligible, key=_preference)
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
    return ScaleDownPlan(workload=workload, namespace=ns, requested=remove, granted=len(victims),
                         victims=tuple(victims), limits=tuple(limits), skew_before=skew_before,
                         skew_after=zone_skew(counts), allowed_disruptions=allowance)


@dataclass(frozen=True)
class ClusterGrant:
    """How many removals one workload may plan this cycle."""

    workload: str
    requested: int
    granted: int
    reason: str


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
                 cluster_budget: int) -> ClusterPlan:
    """Grant requests in candidate order until the cluster budget is spent.

    Vetoed candidates get 0 whatever they asked. Requests for workloads that are not candidates
    get 0 ("not ranked"): without L2 signals there is no evidence that shrinking them is safe.
    Pass each grant as ``budget=`` to :func:`plan_scale_down`.
    """
    if cluster_budget < 0:
        raise ValueError(f"cluster_budget must be >= 0, got {cluster_budget!r}")
    for w, n in per_workload_requests.items():
        if n < 0:
            raise ValueError(f"request for {w!r} must be >= 0, got {n!r}")
    left = cluster_budget
    grants: list[ClusterGrant] = []
    seen: set[str] = set()
    for c in candidates:
        if c.workload in seen:
            raise ValueError(f"duplicate candidate {c.workload!r}")
        seen.add(c.workload)
        asked = per_workload_requests.get(c.workload)
        if asked is None:
            continue
        if c.vetoed:
            grants.append(ClusterGrant(c.workload, asked, 0, c.reason))
            continue
        got = min(asked, left)
        left -= got
        why = ("granted in full" if got == asked
               else f"cluster budget: {got} of {asked} ({cluster_budget} per cycle)")
        grants.append(ClusterGrant(c.workload, asked, got, why))
    for w in sorted(set(per_workload_requests) - seen):
        grants.append(ClusterGrant(w, per_workload_requests[w], 0, "not ranked: no L2 signals"))
    return ClusterPlan(budget=cluster_budget, grants=tuple(grants))
