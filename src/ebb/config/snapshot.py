"""Cluster snapshots (``ebb plan FLEET.yaml``): what one L2 → L3 cycle plans over, parsed once.

Read with the bounded YAML reader (:mod:`ebb.config.yamlio`). A snapshot lists each workload with
its class, the removals it asks for, its PDB, its L2 signals and its replicas; optionally
namespace quotas, the pods behind the replicas and pods waiting for admission. What a cycle does
with it is :mod:`ebb.sim.snapshot_plan`'s.

Format::

    budget: 3                      # removals the whole cluster may make this cycle (>= 0)
    max_skew: 1                    # topology maxSkew (>= 1; default 1)
    workloads:
      - name: chat
        class: order-fulfilment    # a class of --workloads (default: the note's three)
        namespace: serving
        remove: 2                  # removals this workload asks for (>= 0)
        weight: 0.65               # current weight (default: the class's base_weight)
        pdb: {max_unavailable: 1}  # or {min_available: 2}; optional
        already_unavailable: 0
        signals: {latency_p99_ms: 310, success_ratio: 0.9999, burst_active: false,
                  utilisation_ratio: 0.3, staleness_s: 0.5}
        replicas:
          - {id: chat-0, zone: a, load: 0.2, ready: true, deletion_cost: 0}
    quotas:                        # optional elastic quota (milli-units)
      - {namespace: serving, min: {nvidia.com/gpu: 2000}, max: {nvidia.com/gpu: 4000}}
    pods:                          # with quotas: one per replica (name = replica id)
      - {name: chat-0, namespace: serving, priority: 0, created_s: 100,
         requests: {nvidia.com/gpu: 1000, cpu: 4000}, limits: {nvidia.com/gpu: 1000, cpu: 4000}}
    pending:                       # with quotas: pods waiting for admission (same keys as pods)
      - {name: chat-9, namespace: serving, requests: {nvidia.com/gpu: 1000}, limits: {nvidia.com/gpu: 1000}}
    quota_policy: {guaranteed_may_borrow: true, burstable_may_borrow: false,
                   best_effort_may_borrow: false}   # optional; these are the defaults

A signal the snapshot leaves out is unknown (NaN), as a missing metric is live; a replica's
``load`` left out is unknown too. Guarantees of :func:`load_snapshot`: unknown keys, wrong types,
negative counts, a class that ``--workloads`` does not define, two workloads or two replicas of
one name, a PDB with both bounds, ``pods``/``pending``/``quota_policy`` without ``quotas``, a
replica without its pod (with quotas) and a pending pod already running are each one
:class:`~ebb.errors.ConfigError` naming the file, the key path (``workloads[0].replicas[2].zone``)
and the fix. The quota's own rules (resources it governs, ``min <= max``) are checked where the
quota is built (:mod:`ebb.sim.snapshot_plan`), with the key path ``quotas[i]``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ebb.config.workloads import WorkloadClass
from ebb.config.yamlio import config_error, describe, finite_number, load_mapping, read_config_text

__all__ = ["ClusterSnapshot", "SnapshotPod", "SnapshotQuota", "SnapshotReplica", "SnapshotSignals",
           "SnapshotWorkload", "load_snapshot"]

_TOP_KEYS = ("budget", "max_skew", "workloads", "quotas", "pods", "pending", "quota_policy")
_WORKLOAD_KEYS = ("name", "class", "namespace", "remove", "weight", "pdb", "already_unavailable",
                  "signals", "replicas")
_SIGNAL_KEYS = ("latency_p99_ms", "latency_p95_ms", "success_ratio", "burst_active",
                "utilisation_ratio", "staleness_s")
_REPLICA_KEYS = ("id", "zone", "load", "ready", "deletion_cost")
_QUOTA_KEYS = ("namespace", "min", "max")
_POD_KEYS = ("name", "namespace", "priority", "created_s", "requests", "limits")
_POLICY_KEYS = ("guaranteed_may_borrow", "burstable_may_borrow", "best_effort_may_borrow")


@dataclass(frozen=True)
class SnapshotSignals:
    """A workload's L2 signals as the snapshot gives them; NaN = left out (unknown, vetoes as live)."""

    latency_p99_ms: float = math.nan
    """Windowed P99 latency (ms). Default NaN: not measured."""
    latency_p95_ms: float = math.nan
    """Windowed P95 latency (ms). Default NaN: not measured."""
    success_ratio: float = math.nan
    """Share of requests that succeeded (fraction). Default NaN: not measured."""
    burst_active: bool = False
    """L1 has a declared burst for this workload. Default false: none declared."""
    utilisation_ratio: float = math.nan
    """Mean utilisation of its replicas (fraction). Default NaN: not measured."""
    staleness_s: float = math.nan
    """Age of the newest sample behind the signals (s). Default NaN: unknown, which vetoes (fail safe)."""


@dataclass(frozen=True)
class SnapshotReplica:
    """One replica of a workload (a pod, by name)."""

    replica_id: str
    """``id:``, the pod name; unique across the snapshot."""
    workload: str
    """The workload that lists it."""
    namespace: str
    """Its workload's namespace."""
    zone: str
    """Topology domain (``topology.kubernetes.io/zone``)."""
    load: float
    """Utilisation or in-flight requests (only the order matters); NaN when left out (unknown)."""
    ready: bool
    """Passing readiness. Default true."""
    deletion_cost: int
    """The pod-deletion-cost annotation; lower goes first among equal loads. Default 0 (upstream)."""


@dataclass(frozen=True)
class SnapshotWorkload:
    """One workload of the snapshot: its ask, PDB, signals and replicas."""

    name: str
    """Workload (Deployment) name; unique in the snapshot."""
    class_name: str
    """``class:``, a class of the ``--workloads`` classes (default: the note's three)."""
    namespace: str
    """Kubernetes namespace. Default ``default``."""
    remove: int
    """Removals asked for this cycle (>= 0)."""
    weight: float | None
    """Current L2 weight (>= 0); None = the class's ``base_weight``."""
    pdb_max_unavailable: int | None
    """PDB ``maxUnavailable`` (>= 0); None when not given. Never set together with min_available."""
    pdb_min_available: int | None
    """PDB ``minAvailable`` (>= 0); None when not given."""
    already_unavailable: int
    """Replicas already disrupted, counted against the PDB (>= 0). Default 0."""
    signals: SnapshotSignals
    """Its L2 signals; the ones left out are unknown."""
    replicas: tuple[SnapshotReplica, ...]
    """Its replicas, in the order listed."""


@dataclass(frozen=True)
class SnapshotQuota:
    """An elastic quota of one namespace, as written (the quota's own rules are checked when built)."""

    namespace: str
    """The namespace it governs; one quota per namespace."""
    min: Mapping[str, int]
    """Guaranteed milli-units per resource (>= 0 each); empty when not given."""
    max: Mapping[str, int]
    """Hard cap in milli-units per resource (>= 0 each); empty when not given."""


@dataclass(frozen=True)
class SnapshotPod:
    """A pod as the quota sees it: running behind a replica (``pods:``) or waiting (``pending:``)."""

    name: str
    """Pod name: a replica id for ``pods:``; unique within its namespace."""
    namespace: str
    """Kubernetes namespace. Default ``default``."""
    priority: int
    """``spec.priority``; higher is more important. Default 0 (upstream)."""
    created_s: float
    """Creation time (s, any clock shared by the pods); larger = newer. Default 0."""
    requests: Mapping[str, int]
    """Requested milli-units per resource (>= 0 each); empty when not given."""
    limits: Mapping[str, int]
    """Limits in milli-units per resource (>= 0 each); with ``requests`` they give the QoS class."""


@dataclass(frozen=True)
class ClusterSnapshot:
    """A validated cluster snapshot: what one L2 → L3 cycle plans over."""

    source: str
    """The file it was read from, for error messages."""
    budget: int
    """Removals the whole cluster may make this cycle (>= 0)."""
    max_skew: int
    """Topology maxSkew (>= 1). Default 1."""
    workloads: tuple[SnapshotWorkload, ...]
    """Every workload, in the order listed; names unique."""
    quotas: tuple[SnapshotQuota, ...] | None
    """The namespace quotas; None when the snapshot has no ``quotas:`` (then no pods either)."""
    pods: tuple[SnapshotPod, ...] = ()
    """With quotas: one pod per replica (name = replica id, same namespace), names unique."""
    pending: tuple[SnapshotPod, ...] = ()
    """Pods waiting for admission, in the order listed (only with quotas); none already running."""
    quota_policy: Mapping[str, bool] = field(default_factory=dict)
    """The ``quota_policy:`` flags given (``guaranteed_may_borrow`` ...); the rest keep the note's defaults."""

    @property
    def replicas(self) -> tuple[SnapshotReplica, ...]:
        """Every workload's replicas, workload by workload; ids unique across the snapshot."""
        return tuple(r for w in self.workloads for r in w.replicas)


def _mapping(src: str, key: str, raw: Any, allowed: tuple[str, ...], hint: str) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise config_error(src, key, f"expected a mapping, got {describe(raw)}", hint)
    unknown = sorted((str(k) for k in raw if k not in allowed), key=str)
    if unknown:
        raise config_error(src, f"{key}.{unknown[0][:60]}", "unknown key", f"use only {', '.join(allowed)}")
    return raw


def _list(src: str, key: str, raw: Any, hint: str) -> list[Any]:
    if not isinstance(raw, list):
        raise config_error(src, key, f"expected a list, got {describe(raw)}", hint)
    return raw


def _int(src: str, key: str, raw: Any, lo: int) -> int:
    if isinstance(raw, bool) or not isinstance(raw, int) or raw < lo:
        raise config_error(src, key, f"expected an integer >= {lo}, got {describe(raw)}", f"write a whole number >= {lo}")
    return raw


def _text(src: str, key: str, raw: Any) -> str:
    if not isinstance(raw, str) or not raw:
        raise config_error(src, key, f"expected a non-empty name, got {describe(raw)}", "quote the name")
    return raw


def _number(src: str, key: str, raw: Any) -> float:
    x = finite_number(raw)
    if x is None:
        raise config_error(src, key, f"expected a finite number, got {describe(raw)}", "write a plain number")
    return x


def _bool(src: str, key: str, raw: Any) -> bool:
    if not isinstance(raw, bool):
        raise config_error(src, key, f"expected true or false, got {describe(raw)}", "write true or false")
    return raw


def _milli(src: str, key: str, raw: Any) -> dict[str, int]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise config_error(src, key, f"expected a mapping, got {describe(raw)}", "write {resource: milli-units}")
    return {str(r): _int(src, f"{key}.{r}", v, 0) for r, v in raw.items()}


def _signals(src: str, key: str, raw: Any) -> SnapshotSignals:
    s = _mapping(src, key, raw if raw is not None else {}, _SIGNAL_KEYS, "write {latency_p99_ms: ..., ...}")
    burst = _bool(src, f"{key}.burst_active", s.get("burst_active", False))
    # Left out = not measured: the default NaN, which L2's veto treats as unknown (fail safe).
    given = {k: _number(src, f"{key}.{k}", s[k]) for k in _SIGNAL_KEYS if k in s and k != "burst_active"}
    return SnapshotSignals(burst_active=burst, **given)


def _replica(src: str, key: str, raw: Any, workload: str, namespace: str) -> SnapshotReplica:
    r = _mapping(src, key, raw, _REPLICA_KEYS, "write {id: ..., zone: ..., load: ..., ready: ...}")
    for req in ("id", "zone"):
        if req not in r:
            raise config_error(src, f"{key}.{req}", "missing", f"add {req}: ...")
    ready = _bool(src, f"{key}.ready", r.get("ready", True))
    load = _number(src, f"{key}.load", r["load"]) if "load" in r else math.nan
    cost = r.get("deletion_cost", 0)
    if isinstance(cost, bool) or not isinstance(cost, int):
        raise config_error(src, f"{key}.deletion_cost", f"expected an integer, got {describe(cost)}",
                           "write the pod-deletion-cost annotation's integer")
    return SnapshotReplica(replica_id=_text(src, f"{key}.id", r["id"]), workload=workload, namespace=namespace,
                           zone=_text(src, f"{key}.zone", r["zone"]), load=load, ready=ready, deletion_cost=cost)


def _workload(src: str, key: str, raw: Any, classes: set[str]) -> SnapshotWorkload:
    w = _mapping(src, key, raw, _WORKLOAD_KEYS, "write {name: ..., class: ..., remove: ..., replicas: [...]}")
    for req in ("name", "class", "remove", "replicas"):
        if req not in w:
            raise config_error(src, f"{key}.{req}", "missing", f"add {req}: ...")
    name = _text(src, f"{key}.name", w["name"])
    cls = _text(src, f"{key}.class", w["class"])
    if cls not in classes:
        raise config_error(src, f"{key}.class", f"unknown class {cls!r}",
                           f"use one of {', '.join(sorted(classes))}, or pass --workloads FILE defining it")
    namespace = _text(src, f"{key}.namespace", w.get("namespace", "default"))
    replicas = tuple(_replica(src, f"{key}.replicas[{i}]", r, name, namespace)
                     for i, r in enumerate(_list(src, f"{key}.replicas", w["replicas"], "list the replicas")))
    weight = _number(src, f"{key}.weight", w["weight"]) if "weight" in w else None
    if weight is not None and weight < 0:
        raise config_error(src, f"{key}.weight", f"negative: {weight:g}", "use a weight >= 0")
    pdb = _mapping(src, f"{key}.pdb", w.get("pdb", {}), ("max_unavailable", "min_available"),
                   "write {max_unavailable: N} or {min_available: N}")
    if len(pdb) > 1:
        raise config_error(src, f"{key}.pdb", "sets both max_unavailable and min_available",
                           "keep one: a PodDisruptionBudget sets maxUnavailable or minAvailable, not both")
    max_u = _int(src, f"{key}.pdb.max_unavailable", pdb["max_unavailable"], 0) if "max_unavailable" in pdb else None
    min_a = _int(src, f"{key}.pdb.min_available", pdb["min_available"], 0) if "min_available" in pdb else None
    return SnapshotWorkload(name=name, class_name=cls, namespace=namespace,
                            remove=_int(src, f"{key}.remove", w["remove"], 0),
                            weight=weight, pdb_max_unavailable=max_u, pdb_min_available=min_a,
                            already_unavailable=_int(src, f"{key}.already_unavailable",
                                                     w.get("already_unavailable", 0), 0),
                            signals=_signals(src, f"{key}.signals", w.get("signals")), replicas=replicas)


def _pod(src: str, key: str, raw: Any) -> SnapshotPod:
    p = _mapping(src, key, raw, _POD_KEYS, "write {name: ..., namespace: ..., requests: {...}}")
    name = _text(src, f"{key}.name", p.get("name"))
    requests, limits = _milli(src, f"{key}.requests", p.get("requests")), _milli(src, f"{key}.limits", p.get("limits"))
    priority = p.get("priority", 0)
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise config_error(src, f"{key}.priority", f"expected an integer, got {describe(priority)}",
                           "write spec.priority's integer")
    return SnapshotPod(name=name, namespace=_text(src, f"{key}.namespace", p.get("namespace", "default")),
                       priority=priority, created_s=_number(src, f"{key}.created_s", p.get("created_s", 0.0)),
                       requests=requests, limits=limits)


def _pending(src: str, doc: dict[str, Any], pods: tuple[SnapshotPod, ...] | None) -> tuple[SnapshotPod, ...]:
    if "pending" not in doc:
        return ()
    if pods is None:
        raise config_error(src, "pending", "pending pods without quotas", "add quotas: [...] or drop pending:")
    out: list[SnapshotPod] = []
    seen = {(p.namespace, p.name) for p in pods}
    for i, raw in enumerate(_list(src, "pending", doc["pending"], "list the pods waiting for admission")):
        pod = _pod(src, f"pending[{i}]", raw)
        if (pod.namespace, pod.name) in seen:
            raise config_error(src, f"pending[{i}].name", f"pod {pod.namespace}/{pod.name} is already listed",
                               "a pending pod is not yet running: give it its own name")
        seen.add((pod.namespace, pod.name))
        out.append(pod)
    return tuple(out)


def _quota_policy(src: str, doc: dict[str, Any]) -> dict[str, bool]:
    raw = _mapping(src, "quota_policy", doc.get("quota_policy", {}), _POLICY_KEYS,
                   "write {guaranteed_may_borrow: true, burstable_may_borrow: false, ...}")
    return {k: _bool(src, f"quota_policy.{k}", v) for k, v in raw.items()}


def _quotas(src: str, doc: dict[str, Any], workloads: tuple[SnapshotWorkload, ...]
            ) -> tuple[tuple[SnapshotQuota, ...] | None, tuple[SnapshotPod, ...] | None]:
    if "quotas" not in doc:
        for k in ("pods", "quota_policy"):
            if k in doc:
                raise config_error(src, k, f"{k} without quotas", f"add quotas: [...] or drop {k}:")
        return None, None
    quotas: dict[str, SnapshotQuota] = {}
    for i, raw in enumerate(_list(src, "quotas", doc["quotas"], "list {namespace, min, max}")):
        key = f"quotas[{i}]"
        q = _mapping(src, key, raw, _QUOTA_KEYS, "write {namespace: ..., min: {...}, max: {...}}")
        ns = _text(src, f"{key}.namespace", q.get("namespace"))
        if ns in quotas:
            raise config_error(src, f"{key}.namespace", f"second quota for {ns!r}", "one quota per namespace")
        quotas[ns] = SnapshotQuota(ns, min=_milli(src, f"{key}.min", q.get("min")),
                                   max=_milli(src, f"{key}.max", q.get("max")))
    pods: dict[str, SnapshotPod] = {}
    for i, raw in enumerate(_list(src, "pods", doc.get("pods", []), "list the pods behind the replicas")):
        pod = _pod(src, f"pods[{i}]", raw)
        if pod.name in pods:
            raise config_error(src, f"pods[{i}].name", f"second pod named {pod.name!r}",
                               "pod names are replica ids: unique")
        pods[pod.name] = pod
    for w in workloads:
        for r in w.replicas:
            held = pods.get(r.replica_id)
            if held is None or held.namespace != r.namespace:
                raise config_error(src, "pods", f"no pod {r.replica_id!r} in namespace {r.namespace!r} for a "
                                   f"replica of {r.workload!r}",
                                   "with quotas, list one pod per replica (name: the replica id)")
    return tuple(quotas.values()), tuple(pods.values())


def load_snapshot(path: Path, classes: tuple[WorkloadClass, ...]) -> ClusterSnapshot:
    """Read and validate a snapshot file; ConfigError names the file, the key path and the fix."""
    src = str(path)
    doc = load_mapping(read_config_text(path, "cluster snapshot"), src, "write budget: N and workloads: [...]")
    unknown = sorted((str(k) for k in doc if k not in _TOP_KEYS), key=str)
    if unknown:
        raise config_error(src, unknown[0][:60], "unknown key", f"use only {', '.join(_TOP_KEYS)}")
    for req in ("budget", "workloads"):
        if req not in doc:
            raise config_error(src, req, "missing", f"add {req}: ...")
    names = {c.name for c in classes}
    workloads = tuple(_workload(src, f"workloads[{i}]", w, names)
                      for i, w in enumerate(_list(src, "workloads", doc["workloads"], "list the workloads")))
    seen: set[str] = set()
    for i, w in enumerate(workloads):
        if w.name in seen:
            raise config_error(src, f"workloads[{i}].name", f"second workload named {w.name!r}",
                               "one entry per workload")
        seen.add(w.name)
    ids: set[str] = set()
    for r in (r for w in workloads for r in w.replicas):
        if r.replica_id in ids:
            raise config_error(src, "workloads", f"replica id {r.replica_id!r} appears twice",
                               "replica ids (pod names) are unique in a snapshot")
        ids.add(r.replica_id)
    quotas, pods = _quotas(src, doc, workloads)
    return ClusterSnapshot(source=src, budget=_int(src, "budget", doc["budget"], 0),
                           max_skew=_int(src, "max_skew", doc.get("max_skew", 1), 1),
                           workloads=workloads, quotas=quotas, pods=pods or (),
                           pending=_pending(src, doc, pods), quota_policy=_quota_policy(src, doc))
