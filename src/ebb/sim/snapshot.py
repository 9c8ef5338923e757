"""Cluster snapshots (``ebb plan FLEET.yaml``): read once into the decision code's own records, checked once.

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

The records are the planners' own: each replica a :class:`~ebb.decide.coordinate.ReplicaView`,
each workload's signals a :class:`~ebb.decide.semantics.WorkloadSignals`, each quota a
:class:`~ebb.decide.quota.Quota` and each pod a :class:`~ebb.decide.quota.QuotaPod`, its QoS class
computed from its requests and limits as Kubernetes does (:func:`~ebb.gates.qos.compute_pod_qos`,
one container). A signal the snapshot leaves out is unknown (NaN), as a missing metric is live; a
replica's ``load`` left out is unknown too.

Guarantees of :func:`load_snapshot`, the one place a snapshot is checked: unknown keys; wrong
types; negative counts; a ``max_skew`` below 1; a weight, a latency or a staleness below 0 or not
finite; a ratio outside 0-1; a class that ``--workloads`` does not define; two workloads or two
replicas of one name; a PDB with both bounds; ``pods``/``pending``/``quota_policy`` without
``quotas``; a quota the quota model refuses (a resource it does not govern, ``min`` above ``max``,
named ``quotas[i]``); a resource name that is empty; a replica without its pod (with quotas) and a pending pod already
running are each one :class:`~ebb.errors.ConfigError` naming the file, the key path
(``workloads[0].replicas[2].zone``) and the fix. A snapshot it returns is one the planners accept:
planning it raises nothing.

Size and range bounds, checked before the work they guard: a file over :data:`MAX_SNAPSHOT_BYTES`
(512 KiB) is refused from its size alone, in milliseconds, before it is read or parsed (the bounded
YAML reader parses about 0.2 MB/s on one busy core: 10,000 replicas, 409 KB, load in 1.9 s and plan
in 0.01 s); more than :data:`MAX_SNAPSHOT_REPLICAS`
replicas (10,000), workloads or pods in all is refused before any is checked. Counts (``budget``,
``remove``, ``already_unavailable``, PDB bounds) are at most :data:`MAX_COUNT` (10**6); a weight,
a ``load`` and ``utilisation_ratio`` at most 10**6 (load >= 0); latencies at most 10**7 ms (2.8 h);
``staleness_s`` at most 10**9; ``created_s`` within ±10**11 s; resource amounts at most 10**15
milli-units. Each refusal names the figure and the limit.
"""

from __future__ import annotations

import math
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ebb.config.workloads import WorkloadClass
from ebb.config.yamlio import (
    config_error,
    describe,
    finite_value,
    known_keys,
    load_mapping,
    read_config_text,
    whole_number,
)
from ebb.decide.coordinate import ReplicaView
from ebb.decide.quota import QUOTA_RESOURCES, Quota, QuotaPod
from ebb.decide.semantics import WorkloadSignals
from ebb.gates.qos import ContainerResources, PodSpec, compute_pod_qos

__all__ = ["ClusterSnapshot", "SnapshotWorkload", "load_snapshot"]

_TOP_KEYS = ("budget", "max_skew", "workloads", "quotas", "pods", "pending", "quota_policy")
_WORKLOAD_KEYS = ("name", "class", "namespace", "remove", "weight", "pdb", "already_unavailable",
                  "signals", "replicas")
_SIGNAL_KEYS = ("latency_p99_ms", "latency_p95_ms", "success_ratio", "burst_active",
                "utilisation_ratio", "staleness_s")
_SIGNAL_RANGES: Mapping[str, tuple[float, float, str]] = {
    "latency_p99_ms": (0.0, 1e7, "milliseconds from 0 to 1e7, e.g. latency_p99_ms: 310"),
    "latency_p95_ms": (0.0, 1e7, "milliseconds from 0 to 1e7, e.g. latency_p95_ms: 250"),
    "success_ratio": (0.0, 1.0, "a fraction from 0 to 1, e.g. success_ratio: 0.999"),
    "utilisation_ratio": (0.0, 1e6, "a ratio from 0 to 1e6, e.g. utilisation_ratio: 0.3"),
    "staleness_s": (0.0, 1e9, "seconds from 0 to 1e9, e.g. staleness_s: 0.5")}
"""Each numeric signal's range and the fix: latencies and the age in their units (>= 0), the success
ratio a fraction; left out, a signal is unknown."""
_REPLICA_KEYS = ("id", "zone", "load", "ready", "deletion_cost")
_QUOTA_KEYS = ("namespace", "min", "max")
_POD_KEYS = ("name", "namespace", "priority", "created_s", "requests", "limits")
_POLICY_KEYS = ("guaranteed_may_borrow", "burstable_may_borrow", "best_effort_may_borrow")
MAX_SNAPSHOT_BYTES = 512 << 10
"""Largest snapshot file read (512 KiB: :data:`MAX_SNAPSHOT_REPLICAS` replica lines of about 50 bytes)."""
MAX_SNAPSHOT_REPLICAS = 10_000
"""Replicas (and, separately, workloads, pods and pending pods) one snapshot may list."""
MAX_COUNT = 1_000_000
"""Largest budget, removal count, unavailable count or PDB bound."""
_MAX_MILLI = 10**15
_INT32 = 2**31 - 1
"""Kubernetes' int32 range: ``spec.priority`` and the pod-deletion-cost annotation."""


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
    """Current L2 weight (finite, >= 0); None = the class's ``base_weight``."""
    pdb_max_unavailable: int | None
    """PDB ``maxUnavailable`` (>= 0); None when not given. Never set together with min_available."""
    pdb_min_available: int | None
    """PDB ``minAvailable`` (>= 0); None when not given."""
    already_unavailable: int
    """Replicas already disrupted, counted against the PDB (>= 0). Default 0."""
    signals: WorkloadSignals
    """Its L2 signals (replica counts from ``replicas``); the ones left out are NaN, unknown."""
    replicas: tuple[ReplicaView, ...]
    """Its replicas, in the order listed."""


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
    quotas: tuple[Quota, ...] | None
    """The namespace quotas, one per namespace; None when the snapshot has no ``quotas:`` (then no pods either)."""
    pods: tuple[QuotaPod, ...] = ()
    """With quotas: one pod per replica (name = replica id, same namespace), names unique."""
    pending: tuple[QuotaPod, ...] = ()
    """Pods waiting for admission, in the order listed (only with quotas); none already running."""
    quota_policy: Mapping[str, bool] = field(default_factory=dict)
    """The ``quota_policy:`` flags given (``guaranteed_may_borrow`` ...); the rest keep the note's defaults."""

    @property
    def replicas(self) -> tuple[ReplicaView, ...]:
        """Every workload's replicas, workload by workload; ids unique across the snapshot."""
        return tuple(r for w in self.workloads for r in w.replicas)


def _list(src: str, key: str, raw: Any, hint: str) -> list[Any]:
    if not isinstance(raw, list):
        raise config_error(src, key, f"expected a list, got {describe(raw)}", hint)
    return raw


def _text(src: str, key: str, raw: Any) -> str:
    if not isinstance(raw, str) or not raw:
        raise config_error(src, key, f"expected a non-empty name, got {describe(raw)}", "quote the name")
    return raw


def _bool(src: str, key: str, raw: Any) -> bool:
    if not isinstance(raw, bool):
        raise config_error(src, key, f"expected true or false, got {describe(raw)}", "write true or false")
    return raw


def _required(src: str, key: str, raw: dict[Any, Any], names: tuple[str, ...]) -> None:
    for req in names:
        if req not in raw:
            raise config_error(src, f"{key}.{req}" if key else req, "missing", f"add {req}: ...")


def _milli(src: str, key: str, raw: Any) -> dict[str, int]:
    """``{resource: milli-units}``: named resources, whole numbers >= 0."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise config_error(src, key, f"expected a mapping, got {describe(raw)}", "write {resource: milli-units}")
    out: dict[str, int] = {}
    for r, v in raw.items():
        name = str(r)
        if not name:
            raise config_error(src, f"{key}.''", "empty resource name", "name the resource, e.g. cpu or nvidia.com/gpu")
        out[name] = whole_number(src, f"{key}.{name[:60]}", v, 0, _MAX_MILLI)
    return out


def _signals(src: str, key: str, raw: Any, workload: str, class_name: str,
             replicas: tuple[ReplicaView, ...]) -> WorkloadSignals:
    s = known_keys(src, key, raw if raw is not None else {}, _SIGNAL_KEYS, "write {latency_p99_ms: ..., ...}")
    # Left out = not measured: NaN, which L2's veto treats as unknown (fail safe).
    given = {k: finite_value(src, f"{key}.{k}", s[k], lo, hi, fix=f"write {fix}, or leave it out (unknown)")
             if k in s else math.nan for k, (lo, hi, fix) in _SIGNAL_RANGES.items()}
    return WorkloadSignals(workload=workload, class_name=class_name, replicas=len(replicas),
                           ready_replicas=sum(r.ready for r in replicas),
                           burst_active=_bool(src, f"{key}.burst_active", s.get("burst_active", False)), **given)


def _replica(src: str, key: str, raw: Any, workload: str, namespace: str) -> ReplicaView:
    r = known_keys(src, key, raw, _REPLICA_KEYS, "write {id: ..., zone: ..., load: ..., ready: ...}")
    _required(src, key, r, ("id", "zone"))
    return ReplicaView(replica_id=_text(src, f"{key}.id", r["id"]), workload=workload, namespace=namespace,
                       zone=_text(src, f"{key}.zone", r["zone"]),
                       load=finite_value(src, f"{key}.load", r["load"], 0.0, 1e6,
                                         fix="write the replica's load, a number from 0 to 1e6") if "load" in r
                       else math.nan,
                       ready=_bool(src, f"{key}.ready", r.get("ready", True)),
                       deletion_cost=whole_number(src, f"{key}.deletion_cost", r.get("deletion_cost", 0), -_INT32 - 1,
                                                  _INT32, fix="write the pod-deletion-cost annotation's integer"))


def _workload(src: str, key: str, raw: Any, classes: set[str]) -> SnapshotWorkload:
    w = known_keys(src, key, raw, _WORKLOAD_KEYS, "write {name: ..., class: ..., remove: ..., replicas: [...]}")
    _required(src, key, w, ("name", "class", "remove", "replicas"))
    name = _text(src, f"{key}.name", w["name"])
    cls = _text(src, f"{key}.class", w["class"])
    if cls not in classes:
        raise config_error(src, f"{key}.class", f"unknown class {cls!r}",
                           f"use one of {', '.join(sorted(classes))}, or pass --workloads FILE defining it")
    namespace = _text(src, f"{key}.namespace", w.get("namespace", "default"))
    replicas = tuple(_replica(src, f"{key}.replicas[{i}]", r, name, namespace)
                     for i, r in enumerate(_list(src, f"{key}.replicas", w["replicas"], "list the replicas")))
    weight = finite_value(src, f"{key}.weight", w["weight"], 0.0, 1e6,
                          fix="use a weight from 0 to 1e6") if "weight" in w else None
    pdb = known_keys(src, f"{key}.pdb", w.get("pdb", {}), ("max_unavailable", "min_available"),
                     "write {max_unavailable: N} or {min_available: N}")
    if len(pdb) > 1:
        raise config_error(src, f"{key}.pdb", "sets both max_unavailable and min_available",
                           "keep one: a PodDisruptionBudget sets maxUnavailable or minAvailable, not both")
    bound = {k: whole_number(src, f"{key}.pdb.{k}", v, 0, MAX_COUNT) for k, v in pdb.items()}
    return SnapshotWorkload(name=name, class_name=cls, namespace=namespace,
                            remove=whole_number(src, f"{key}.remove", w["remove"], 0, MAX_COUNT),
                            weight=weight, pdb_max_unavailable=bound.get("max_unavailable"),
                            pdb_min_available=bound.get("min_available"),
                            already_unavailable=whole_number(src, f"{key}.already_unavailable",
                                                             w.get("already_unavailable", 0), 0, MAX_COUNT),
                            signals=_signals(src, f"{key}.signals", w.get("signals"), name, cls, replicas),
                            replicas=replicas)


def _pod(src: str, key: str, raw: Any) -> QuotaPod:
    p = known_keys(src, key, raw, _POD_KEYS, "write {name: ..., namespace: ..., requests: {...}}")
    requests, limits = _milli(src, f"{key}.requests", p.get("requests")), _milli(src, f"{key}.limits", p.get("limits"))
    qos = compute_pod_qos(PodSpec(containers=(ContainerResources(requests=requests, limits=limits),)))
    return QuotaPod(name=_text(src, f"{key}.name", p.get("name")),
                    namespace=_text(src, f"{key}.namespace", p.get("namespace", "default")), qos=qos,
                    priority=whole_number(src, f"{key}.priority", p.get("priority", 0), -_INT32 - 1, _INT32,
                                          fix="write spec.priority's integer"),
                    created_s=finite_value(src, f"{key}.created_s", p.get("created_s", 0.0), -1e11, 1e11,
                                           fix="write seconds, e.g. created_s: 100"), requests=requests)


def _pending(src: str, doc: dict[str, Any], pods: tuple[QuotaPod, ...] | None) -> tuple[QuotaPod, ...]:
    if "pending" not in doc:
        return ()
    if pods is None:
        raise config_error(src, "pending", "pending pods without quotas", "add quotas: [...] or drop pending:")
    out: list[QuotaPod] = []
    seen = {p.key for p in pods}
    for i, raw in enumerate(_list(src, "pending", doc["pending"], "list the pods waiting for admission")):
        pod = _pod(src, f"pending[{i}]", raw)
        if pod.key in seen:
            raise config_error(src, f"pending[{i}].name", f"pod {pod.namespace}/{pod.name} is already listed",
                               "a pending pod is not yet running: give it its own name")
        seen.add(pod.key)
        out.append(pod)
    return tuple(out)


def _quota_policy(src: str, doc: dict[str, Any]) -> dict[str, bool]:
    raw = known_keys(src, "quota_policy", doc.get("quota_policy", {}), _POLICY_KEYS,
                     "write {guaranteed_may_borrow: true, burstable_may_borrow: false, ...}")
    return {k: _bool(src, f"quota_policy.{k}", v) for k, v in raw.items()}


def _quota(src: str, key: str, raw: Any) -> Quota:
    q = known_keys(src, key, raw, _QUOTA_KEYS, "write {namespace: ..., min: {...}, max: {...}}")
    namespace = _text(src, f"{key}.namespace", q.get("namespace"))
    lo, hi = _milli(src, f"{key}.min", q.get("min")), _milli(src, f"{key}.max", q.get("max"))
    try:  # the quota model's own rules: the resources it governs, min <= max
        return Quota(namespace, min=lo, max=hi)
    except ValueError as exc:
        raise config_error(src, key, str(exc), f"list only {', '.join(sorted(QUOTA_RESOURCES))} with min <= max"
                           ) from exc


def _quotas(src: str, doc: dict[str, Any], workloads: tuple[SnapshotWorkload, ...]
            ) -> tuple[tuple[Quota, ...] | None, tuple[QuotaPod, ...] | None]:
    if "quotas" not in doc:
        for k in ("pods", "quota_policy"):
            if k in doc:
                raise config_error(src, k, f"{k} without quotas", f"add quotas: [...] or drop {k}:")
        return None, None
    quotas: dict[str, Quota] = {}
    for i, raw in enumerate(_list(src, "quotas", doc["quotas"], "list {namespace, min, max}")):
        quota = _quota(src, f"quotas[{i}]", raw)
        if quota.namespace in quotas:
            raise config_error(src, f"quotas[{i}].namespace", f"second quota for {quota.namespace!r}",
                               "one quota per namespace")
        quotas[quota.namespace] = quota
    pods: dict[str, QuotaPod] = {}
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


def _unique(src: str, workloads: tuple[SnapshotWorkload, ...]) -> None:
    """Workload names and replica ids (pod names) are unique across the snapshot."""
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


def _check_counts(src: str, doc: dict[str, Any]) -> None:
    """Refuse more than :data:`MAX_SNAPSHOT_REPLICAS` workloads, replicas, pods or pending pods before
    any is validated or planned (the planners' cost grows with the replica count)."""
    fix = "split the snapshot by namespace"
    for key in ("workloads", "pods", "pending"):
        if isinstance(doc.get(key), list) and len(doc[key]) > MAX_SNAPSHOT_REPLICAS:
            raise config_error(src, key, f"{len(doc[key]):,} entries, over the limit of {MAX_SNAPSHOT_REPLICAS:,}",
                               fix)
    if isinstance(doc["workloads"], list):
        n = sum(len(w["replicas"]) for w in doc["workloads"]
                if isinstance(w, dict) and isinstance(w.get("replicas"), list))
        if n > MAX_SNAPSHOT_REPLICAS:
            raise config_error(src, "workloads", f"{n:,} replicas in all, over the limit of "
                               f"{MAX_SNAPSHOT_REPLICAS:,}", fix)


def load_snapshot(path: Path, classes: tuple[WorkloadClass, ...]) -> ClusterSnapshot:
    """Read and validate a snapshot file; ConfigError names the file, the key path and the fix."""
    src = str(path)
    try:
        st = path.stat()
    except OSError:
        st = None  # read_config_text names the file and the reason
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise config_error(src, "<file>", "not a regular file (a device or FIFO is never read)",
                           "point at a snapshot YAML file")
    if st is not None and st.st_size > MAX_SNAPSHOT_BYTES:
        raise config_error(src, "<file>", f"{st.st_size:,} bytes, over the {MAX_SNAPSHOT_BYTES:,}-byte limit "
                           "for a snapshot", f"plan at most {MAX_SNAPSHOT_REPLICAS:,} replicas at a time: "
                           "split the snapshot by namespace")
    doc = load_mapping(read_config_text(path, "cluster snapshot"), src, "write budget: N and workloads: [...]")
    known_keys(src, "<top>", doc, _TOP_KEYS, "write budget: N and workloads: [...]")
    _required(src, "", doc, ("budget", "workloads"))
    _check_counts(src, doc)
    names = {c.name for c in classes}
    workloads = tuple(_workload(src, f"workloads[{i}]", w, names)
                      for i, w in enumerate(_list(src, "workloads", doc["workloads"], "list the workloads")))
    _unique(src, workloads)
    quotas, pods = _quotas(src, doc, workloads)
    return ClusterSnapshot(source=src, budget=whole_number(src, "budget", doc["budget"], 0, MAX_COUNT),
                           max_skew=whole_number(src, "max_skew", doc.get("max_skew", 1), 1, MAX_COUNT),
                           workloads=workloads, quotas=quotas, pods=pods or (),
                           pending=_pending(src, doc, pods), quota_policy=_quota_policy(src, doc))
