"""L3 for a whole fleet at once: the cluster budget, PDBs, zone skew and quota reclaim as counts.

:mod:`ebb.decide.coordinate` plans replica by replica (:func:`~ebb.decide.coordinate.plan_cluster`
splits the budget, :func:`~ebb.decide.coordinate.plan_scale_down` picks victims). A simulator
whose replicas of one workload in one zone are interchangeable (equal load, same deletion cost)
only needs counts: :func:`plan_fleet` takes ``ready[N, Z]`` and ``starting[N, Z]`` (not ready yet)
and answers how many of each to remove per zone, with numpy over all N workloads at once (a loop
over the removal step ``k``, never over workloads; cost O(N × Z × max granted)).

**Budget** (as ``plan_cluster`` with ``quota=``): in rank order ``order``, each non-vetoed
workload first gets up to ``min(request, borrowed)`` (reclaim borrowed quota first), then what
budget is left goes in rank order up to ``request``. Vetoed workloads get 0. This is
``cluster_granted``; like ``plan_cluster`` it does not know replica counts or PDBs, so a request
above what can be removed still takes budget (cap ``request`` first if that matters).

**Count** (as ``plan_scale_down``): ``granted = min(cluster_granted, ready + starting, PDB
allowance)``; ``pdb_allowance = −1`` means no PDB. Every removal counts against the PDB, starting
ones included.

**Zones** (per removal, like ``plan_scale_down``'s loop): skew = max − min over the zones that
held ≥ 1 replica before the plan (a zone emptied by it still counts, at 0). A starting replica
goes first, from the most-populated zone among those holding one whose removal keeps skew ≤
``max(max_skew, skew_before)``; when none does, a ready replica from the most-populated zone
(ties: lowest zone index). Removing from a most-populated zone never breaks the bound, so the
zone rule never lowers the count.

Guarantees (property-tested against ``plan_cluster`` + ``plan_scale_down`` on materialised
:class:`~ebb.decide.coordinate.ReplicaView` lists with equal loads and a
:class:`~ebb.decide.coordinate.QuotaContext` holding ``borrowed[i]`` borrowers per workload):

* per workload, ``cluster_granted`` == ``plan_cluster``'s grant (``reclaim_first`` its reclaim) and ``granted`` ==
  ``plan_scale_down``'s with that budget; ``skew_before`` equal;
* ``skew_after ≤ max(max_skew, skew_before)``; ``sum(granted) ≤ cluster_budget``; vetoed
  workloads get 0; ``remove_starting ≤ starting``, ``remove_ready ≤ ready`` element-wise;
* ``reclaimed = min(granted, borrowed)``: removals that take borrowed capacity back, as
  ``plan_scale_down(quota=)`` removes borrowers first (here any replica may be the borrower, so
  skew never passes one over; the per-replica planner may reclaim fewer when it does).

The victims' zones need not match ``plan_scale_down``'s (that one breaks ties by replica id, this
one by population); the counts and the skew bound do. Bad arguments raise :class:`ValueError`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

__all__ = ["FleetPlan", "plan_fleet"]

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

_BIG = np.iinfo(np.int64).max // 4


@dataclass(frozen=True)
class FleetPlan:
    """One L3 cycle over N workloads and Z zones (arrays indexed by workload, then zone)."""

    budget: int
    """The cluster budget this cycle."""
    cluster_granted: IntArray
    """[N] removals the budget split allows (``plan_cluster``'s grant)."""
    reclaim_first: IntArray
    """[N] of ``cluster_granted``, what the reclaim pass granted ahead of rank order
    (``plan_cluster``'s :attr:`~ebb.decide.coordinate.ClusterGrant.reclaim`)."""
    granted: IntArray
    """[N] removals planned: ``min(cluster_granted, ready + starting, PDB allowance)``."""
    remove_starting: IntArray
    """[N, Z] not-ready replicas to remove per zone."""
    remove_ready: IntArray
    """[N, Z] ready replicas to remove per zone."""
    reclaimed: IntArray
    """[N] removals that take borrowed quota back: ``min(granted, borrowed)``."""
    skew_before: IntArray
    """[N] zone skew before the plan (0 for a workload with no replicas)."""
    skew_after: IntArray
    """[N] zone skew after it, over the same zones."""

    @property
    def total_granted(self) -> int:
        """Removals planned over the fleet; never above ``budget``."""
        return int(self.granted.sum())


def _ints(v: npt.ArrayLike, shape: tuple[int, ...], name: str, lo: int) -> IntArray:
    a = np.asarray(v)
    if a.shape != shape:
        raise ValueError(f"{name} must have shape {shape}, got {a.shape}")
    if a.size and not np.issubdtype(a.dtype, np.integer):
        raise ValueError(f"{name} must hold integers, got dtype {a.dtype}")
    out = a.astype(np.int64)
    if out.size and out.min() < lo:
        i = np.unravel_index(int(np.argmin(out)), shape)
        raise ValueError(f"{name} must be >= {lo}; entry {tuple(int(j) for j in i)} is {int(out[i])}")
    return out


def _greedy(asks: IntArray, budget: int) -> IntArray:
    """``min(ask, what is left)`` granted in array order: a prefix sum, no loop."""
    before = np.cumsum(asks) - asks
    out: IntArray = np.minimum(asks, np.maximum(0, budget - before))
    return out


def _skew(counts: IntArray, counted: BoolArray) -> IntArray:
    hi = np.where(counted, counts, -1).max(axis=1, initial=-1)
    lo = np.where(counted, counts, _BIG).min(axis=1, initial=_BIG)
    out: IntArray = np.where(counted.any(axis=1), hi - lo, 0)
    return out


def plan_fleet(*, ready: npt.ArrayLike, starting: npt.ArrayLike, request: npt.ArrayLike,
               order: npt.ArrayLike, vetoed: npt.ArrayLike, cluster_budget: int,
               pdb_allowance: npt.ArrayLike | None = None, max_skew: int = 1,
               borrowed: npt.ArrayLike | None = None,
               zone_mask: npt.ArrayLike | None = None) -> FleetPlan:
    """Split ``cluster_budget`` and pick per-zone removals for N workloads (module docstring).

    ``ready``/``starting``: [N, Z] replica counts. ``request``: [N] removals wanted. ``order``:
    [N] L2 rank order (a permutation of ``range(N)``, first = shrunk first). ``vetoed``: [N] bool.
    ``pdb_allowance``: [N] disruptions allowed, −1 = no PDB (default: none). ``borrowed``: [N]
    replicas of each workload that are quota borrowers, ≤ its replicas (default 0). ``zone_mask``:
    [N, Z] zones each workload may use (default all); replicas outside it are refused, and skew
    is counted over the zones that held ≥ 1 replica, as in ``plan_scale_down``.
    """
    r0 = np.asarray(ready)
    if r0.ndim != 2:
        raise ValueError(f"ready must be 2-D [workloads, zones], got shape {r0.shape}")
    n, z = r0.shape
    rdy = _ints(r0, (n, z), "ready", 0)
    sta = _ints(starting, (n, z), "starting", 0)
    req = _ints(request, (n,), "request", 0)
    pdb = np.full(n, -1, dtype=np.int64) if pdb_allowance is None else _ints(pdb_allowance, (n,),
                                                                              "pdb_allowance", -1)
    rank = _ints(order, (n,), "order", 0)
    if n and (rank.max() >= n or np.any(np.bincount(rank, minlength=n) != 1)):
        raise ValueError(f"order must be a permutation of range({n})")
    veto = np.asarray(vetoed, dtype=np.bool_)
    if veto.shape != (n,):
        raise ValueError(f"vetoed must have shape ({n},), got {veto.shape}")
    if isinstance(cluster_budget, bool) or int(cluster_budget) != cluster_budget or cluster_budget < 0:
        raise ValueError(f"cluster_budget must be an integer >= 0, got {cluster_budget!r}")
    if isinstance(max_skew, bool) or int(max_skew) != max_skew or max_skew < 1:
        raise ValueError(f"max_skew must be an integer >= 1, got {max_skew!r}")
    budget = int(cluster_budget)
    held = rdy + sta
    total = held.sum(axis=1)
    bor = np.zeros(n, dtype=np.int64) if borrowed is None else _ints(borrowed, (n,), "borrowed", 0)
    if np.any(bor > total):
        i = int(np.flatnonzero(bor > total)[0])
        raise ValueError(f"borrowed must be <= the workload's replicas; workload {i} has "
                         f"{int(bor[i])} borrowed of {int(total[i])}")
    if zone_mask is not None:
        mask = np.asarray(zone_mask, dtype=np.bool_)
        if mask.shape != (n, z):
            raise ValueError(f"zone_mask must have shape ({n}, {z}), got {mask.shape}")
        if np.any(held[~mask] > 0):
            i = int(np.flatnonzero(((held > 0) & ~mask).any(axis=1))[0])
            raise ValueError(f"workload {i} has replicas in a zone outside its zone_mask")

    # -- budget: reclaim pass, then rank order (plan_cluster with quota=) --------------------------
    ok = ~veto[rank]
    asks = req[rank]
    first = _greedy(np.where(ok, np.minimum(asks, bor[rank]), 0), budget)
    more = _greedy(np.where(ok, asks - first, 0), budget - int(first.sum()))
    cluster = np.empty(n, dtype=np.int64)
    cluster[rank] = first + more
    reclaim_first = np.empty(n, dtype=np.int64)
    reclaim_first[rank] = first

    # -- count: eligible replicas and PDB (plan_scale_down) ---------------------------------------
    granted = np.minimum(cluster, total)
    granted = np.where(pdb >= 0, np.minimum(granted, pdb), granted)

    # -- zones: one removal per step for every workload still owed one -----------------------------
    counted = held > 0
    skew_before = _skew(held, counted)
    bound = np.maximum(max_skew, skew_before)
    count = held.copy()
    s_left = sta.copy()
    owed = granted.copy()
    active = np.flatnonzero(owed > 0)
    while active.size:
        c = count[active]
        cnt = counted[active]
        hi = np.where(cnt, c, -1)
        cmax = hi.max(axis=1, keepdims=True)
        cmin = np.where(cnt, c, _BIG).min(axis=1, keepdims=True)
        top = hi == cmax
        sole_top = top & (top.sum(axis=1, keepdims=True) == 1)
        # skew if one replica left zone j: max drops only when j was the sole top zone
        fits = (cmax - sole_top) - np.minimum(cmin, c - 1) <= bound[active, None]
        cand = fits & (s_left[active] > 0)
        take_starting = cand.any(axis=1)
        zone = np.where(take_starting, np.where(cand, c, -1).argmax(axis=1), hi.argmax(axis=1))
        rows_s, zone_s = active[take_starting], zone[take_starting]
        s_left[rows_s, zone_s] -= 1
        count[active, zone] -= 1
        owed[active] -= 1
        active = active[owed[active] > 0]

    remove_starting = sta - s_left
    remove_ready = held - count - remove_starting
    if np.any(remove_ready > rdy):  # unreachable (a most-populated zone holds only ready ones then)
        raise AssertionError("plan_fleet removed more ready replicas than a zone holds")
    return FleetPlan(budget=budget, cluster_granted=cluster, reclaim_first=reclaim_first, granted=granted,
                     remove_starting=remove_starting, remove_ready=remove_ready,
                     reclaimed=np.minimum(granted, bor), skew_before=skew_before,
                     skew_after=_skew(count, counted))
