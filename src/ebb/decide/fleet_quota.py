"""Elastic quota for N workloads at once: scale-ups within ``max``, borrowers above ``min``.

A namespace's elastic quota caps what its pods may request (:class:`~ebb.decide.quota.Quota`'s
``max``). A controller that asks for more than the cap gets pods the quota admission refuses:
Pending forever, counted in ``spec.replicas``, serving nothing. So the fleet step narrows each
scale-up to what fits before it is written (the live fleet controller and the cluster simulator
alike, :mod:`ebb.decide.fleet_step`); the cluster's own admission (the simulator's placement) stays
the backstop for pods the controller does not manage.

Rule (:func:`cap_scale_ups`): a namespace's usage is ``Σ spec × GPUs per replica`` over the
workloads given (the managed Deployments: their ``spec.replicas``, starting and pending replicas
included). Scale-ups of a capped namespace are taken in workload order; each gets
``min(asked, max(0, (cap − used) // GPUs per replica))`` more replicas (all it asked when its pods
request no GPU), and what it got counts as used for the ones after it. Scale-downs and holds are
never changed; a namespace without a cap never limits.

**Borrowers** (:func:`borrowed_replicas`): how many replicas of each workload sit above their
namespace's ``min`` — :func:`ebb.decide.quota.borrowed`'s first fit in protection order (highest
priority first), counted per workload. The pods of one workload are interchangeable here, so the
order among workloads of equal priority is the workload order (the per-pod rule breaks those ties
by pod age, then name: give it pods whose age and names follow the workload order and the two
agree). Exact where the pods of a namespace request equal GPUs (then first fit is a prefix sum);
with mixed sizes a replica counts as borrowed once any of its GPUs is past ``min``, where first fit
would still let a smaller later pod in: never fewer borrowers than first fit (property-tested).

Guarantees (property-tested against the rules above written replica by replica in plain Python, and
the borrowers against :func:`ebb.decide.quota.borrowed`):
the result is between ``spec`` and ``target`` for every scale-up, equal to ``target`` for every other
workload; ``used`` after the step ≤ ``max(cap, used before)`` per capped namespace (it never grows
past the cap, and a namespace already past it gets nothing more). Cost: numpy over the scale-ups —
a prefix sum where a namespace's pods request equal GPUs, else one pass per scale-up *rank within
its namespace* (the most scale-ups one such namespace has in a cycle) — never a pass per workload.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ebb.decide.columns import column

__all__ = ["QuotaCap", "borrowed_replicas", "cap_scale_ups"]

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True)
class QuotaCap:
    """The scale-ups after the quota cap (arrays of length N)."""

    target: IntArray
    """Replicas per workload after the cap (only scale-ups of capped namespaces change)."""
    capped: BoolArray
    """Scale-ups the cap narrowed (to fewer replicas, or to none: then ``target == spec``)."""
    used_before_milli: IntArray
    """Milli-GPUs of the workload's namespace already used when its scale-up was taken (0 where
    the namespace has no cap): the number the words of a capped scale-up quote."""


def cap_scale_ups(*, spec: npt.ArrayLike, target: npt.ArrayLike, namespace: npt.ArrayLike,
                  gpu_milli: npt.ArrayLike, quota_max_milli: npt.ArrayLike) -> QuotaCap:
    """Narrow scale-ups to their namespace's ``max`` (module docstring for the rule).

    ``spec``/``target``: [N] replicas now and wanted. ``namespace``: [N] index into
    ``quota_max_milli`` ([namespaces] milli-GPUs, −1 = no cap). ``gpu_milli``: [N] milli-GPUs one
    replica requests (≥ 0). Bad shapes or values raise :class:`ValueError`.
    """
    sp = np.asarray(spec, dtype=np.int64)
    n = sp.shape[0] if sp.ndim == 1 else -1
    if n < 0:
        raise ValueError(f"spec must be 1-D, got shape {sp.shape}")
    tg = _col(target, n, "target")
    ns = _col(namespace, n, "namespace")
    each = _col(gpu_milli, n, "gpu_milli")
    cap = np.asarray(quota_max_milli, dtype=np.int64)
    if cap.ndim != 1:
        raise ValueError(f"quota_max_milli must be 1-D, got shape {cap.shape}")
    if n and (ns.min() < 0 or ns.max() >= cap.shape[0]):
        raise ValueError(f"namespace must index quota_max_milli (0..{cap.shape[0] - 1})")
    if n and (each.min() < 0 or sp.min() < 0 or tg.min() < 0):
        raise ValueError("spec, target and gpu_milli must be >= 0")
    out = tg.copy()
    used_before = np.zeros(n, dtype=np.int64)
    capped = np.zeros(n, dtype=np.bool_)
    ups = np.flatnonzero((tg > sp) & (cap[ns] >= 0)) if n else np.zeros(0, dtype=np.int64)
    if not ups.size:
        return QuotaCap(out, capped, used_before)
    left = cap - np.bincount(ns, weights=sp * each, minlength=cap.shape[0]).astype(np.int64)
    free = ups[each[ups] == 0]  # pods that request no GPU: never limited, use nothing
    used_before[free] = cap[ns[free]] - left[ns[free]]
    ups = ups[each[ups] > 0]
    by_ns = ups[np.argsort(ns[ups], kind="stable")]  # workload order within each namespace
    g = ns[by_ns]
    lo = np.bincount(g, weights=each[by_ns], minlength=cap.shape[0])  # sum, then compare to count × min
    cnt = np.bincount(g, minlength=cap.shape[0])
    mn = np.full(cap.shape[0], np.iinfo(np.int64).max)
    np.minimum.at(mn, g, each[by_ns])
    uniform = (cnt > 0) & (lo == cnt * np.where(cnt > 0, mn, 0))
    one = by_ns[uniform[g]]
    if one.size:  # equal pods in the namespace: the greedy is a prefix sum over replicas
        o_ns, o_each = ns[one], each[one]
        ask = tg[one] - sp[one]
        first = np.r_[0, np.flatnonzero(o_ns[1:] != o_ns[:-1]) + 1]
        starts = np.repeat(first, np.diff(np.r_[first, one.size]))
        cum = np.cumsum(ask)
        before = cum - ask - (cum[starts] - ask[starts])
        room = np.maximum(left[o_ns], 0) // o_each
        got = np.minimum(ask, np.maximum(room - before, 0))
        used_before[one] = cap[o_ns] - left[o_ns] + o_each * np.minimum(before, room)
        out[one] = sp[one] + got
        capped[one] = got < ask
    mixed = by_ns[~uniform[g]]
    if mixed.size:  # pods of different sizes: one pass per scale-up rank within its namespace
        m_ns = ns[mixed]
        first = np.r_[0, np.flatnonzero(m_ns[1:] != m_ns[:-1]) + 1]
        rank = np.arange(mixed.size) - np.repeat(first, np.diff(np.r_[first, mixed.size]))
        for k in range(int(rank.max()) + 1):
            rows = mixed[rank == k]  # at most one per namespace
            r_ns, r_each = ns[rows], each[rows]
            ask = tg[rows] - sp[rows]
            got = np.minimum(ask, np.maximum(left[r_ns], 0) // r_each)
            used_before[rows] = cap[r_ns] - left[r_ns]
            left[r_ns] -= got * r_each
            out[rows] = sp[rows] + got
            capped[rows] = got < ask
    return QuotaCap(out, capped, used_before)


def _col(v: npt.ArrayLike, n: int, name: str) -> IntArray:
    return column(v, n, name, np.int64)


def borrowed_replicas(*, replicas: npt.ArrayLike, namespace: npt.ArrayLike, priority: npt.ArrayLike,
                      gpu_milli: npt.ArrayLike, quota_min_milli: npt.ArrayLike,
                      governed: npt.ArrayLike) -> IntArray:
    """Replicas of each workload above its namespace's quota ``min`` (module docstring).

    ``replicas``/``namespace``/``priority``/``gpu_milli``: [N]. ``quota_min_milli``/``governed``:
    [namespaces]; a namespace without a quota (``governed`` False) has no borrowers.
    """
    reps = np.asarray(replicas, dtype=np.int64)
    n = reps.shape[0]
    ns = _col(namespace, n, "namespace")
    prio = _col(priority, n, "priority")
    each = _col(gpu_milli, n, "gpu_milli")
    qmin = np.asarray(quota_min_milli, dtype=np.int64)
    gov = np.asarray(governed, dtype=np.bool_)
    out = np.zeros(n, dtype=np.int64)
    if not n or not gov.any():
        return out
    # protection order: namespace, then highest priority, then workload order
    order = np.lexsort((np.arange(n), -prio, ns))
    o_ns = ns[order]
    held = reps[order] * each[order]
    cum = np.cumsum(held)
    first = np.flatnonzero(np.r_[True, o_ns[1:] != o_ns[:-1]])
    start = np.zeros(qmin.shape[0], dtype=np.int64)
    start[o_ns[first]] = cum[first] - held[first]
    over = np.clip(cum - start[o_ns] - qmin[o_ns], 0, held)
    per = np.maximum(each[order], 1)
    out[order] = np.where(gov[o_ns], -(-over // per), 0)
    return out
