"""``ebb plan FLEET.yaml``: what one L2 → L3 cycle would remove from a cluster snapshot.

The snapshot (read with the bounded YAML reader, :mod:`ebb.config.yamlio`) lists each workload
with its class, the removals it asks for, its PDB, its L2 signals and its replicas; optionally
namespace quotas, the pods behind the replicas and pods waiting for admission. The command then
runs, unchanged, the code a cluster cycle runs:

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
``len(victims) == granted``. Nothing is written anywhere; a bad snapshot stops the command with
the file, the key path (``workloads[0].replicas[2].zone``) and the fix, exit 2.

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

A pod's QoS class is computed from its requests and limits as Kubernetes does
(:func:`~ebb.gates.qos.compute_pod_qos`, one container).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

from ebb.cli.app import app
from ebb.cli.output_option import OutputOpt, wants_json
from ebb.config.workloads import WorkloadClass, default_workload_classes, load_workload_classes
from ebb.config.yamlio import config_error, describe, finite_number, load_mapping, read_config_text
from ebb.decide.coordinate import ClusterPlan, QuotaContext, ReplicaView, ScaleDownPlan, plan_cluster, plan_scale_down
from ebb.decide.semantics import WorkloadSignals, rank_candidates
from ebb.errors import ConfigError
from ebb.gates.qos import ContainerResources, PodSpec, compute_pod_qos
from ebb.gates.quota import Quota, QuotaPod, QuotaPolicy, admit

__all__ = ["PendingVerdict", "Snapshot", "WorkloadEntry", "admit_pending", "load_snapshot", "plan_snapshot"]

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
class WorkloadEntry:
    """One workload of the snapshot, validated: its ask, PDB and L2 signals."""

    name: str
    namespace: str
    remove: int
    """Removals asked for (>= 0)."""
    weight: float | None
    """Current L2 weight; None = the class's ``base_weight``."""
    pdb_max_unavailable: int | None
    pdb_min_available: int | None
    already_unavailable: int
    signals: WorkloadSignals


@dataclass(frozen=True)
class Snapshot:
    """A validated cluster snapshot: what :func:`plan_snapshot` plans over."""

    budget: int
    """Removals the whole cluster may make this cycle (>= 0)."""
    max_skew: int
    """Topology maxSkew (>= 1)."""
    workloads: tuple[WorkloadEntry, ...]
    replicas: tuple[ReplicaView, ...]
    """Every workload's replicas; ids unique across the snapshot."""
    quota: QuotaContext | None
    pending: tuple[QuotaPod, ...] = ()
    """Pods waiting for admission, in the order the snapshot lists them (only with ``quota``)."""
    quota_policy: QuotaPolicy = QuotaPolicy()
    """Which QoS classes may borrow (``quota_policy:``; default the note's)."""


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


def _milli(src: str, key: str, raw: Any) -> dict[str, int]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise config_error(src, key, f"expected a mapping, got {describe(raw)}", "write {resource: milli-units}")
    return {str(r): _int(src, f"{key}.{r}", v, 0) for r, v in raw.items()}


def _signals(src: str, key: str, raw: Any, name: str, cls: str, replicas: list[ReplicaView]) -> WorkloadSignals:
    s = _mapping(src, key, raw if raw is not None else {}, _SIGNAL_KEYS, "write {latency_p99_ms: ..., ...}")
    burst = s.get("burst_active", False)
    if not isinstance(burst, bool):
        raise config_error(src, f"{key}.burst_active", f"expected true or false, got {describe(burst)}",
                           "write true or false")

    def value(k: str) -> float:
        # Left out = not measured: NaN, which veto() treats as unknown (fail safe).
        return _number(src, f"{key}.{k}", s[k]) if k in s else math.nan

    return WorkloadSignals(workload=name, class_name=cls, replicas=len(replicas),
                           ready_replicas=sum(r.ready for r in replicas),
                           latency_p99_ms=value("latency_p99_ms"), latency_p95_ms=value("latency_p95_ms"),
                           success_ratio=value("success_ratio"), burst_active=burst,
                           utilisation_ratio=value("utilisation_ratio"), staleness_s=value("staleness_s"))


def _replica(src: str, key: str, raw: Any, workload: str, namespace: str) -> ReplicaView:
    r = _mapping(src, key, raw, _REPLICA_KEYS, "write {id: ..., zone: ..., load: ..., ready: ...}")
    for req in ("id", "zone"):
        if req not in r:
            raise config_error(src, f"{key}.{req}", "missing", f"add {req}: ...")
    ready = r.get("ready", True)
    if not isinstance(ready, bool):
        raise config_error(src, f"{key}.ready", f"expected true or false, got {describe(ready)}", "write true or false")
    load = _number(src, f"{key}.load", r["load"]) if "load" in r else math.nan
    cost = r.get("deletion_cost", 0)
    if isinstance(cost, bool) or not isinstance(cost, int):
        raise config_error(src, f"{key}.deletion_cost", f"expected an integer, got {describe(cost)}",
                           "write the pod-deletion-cost annotation's integer")
    return ReplicaView(replica_id=_text(src, f"{key}.id", r["id"]), workload=workload, namespace=namespace,
                       zone=_text(src, f"{key}.zone", r["zone"]), load=load, ready=ready, deletion_cost=cost)


def _workload(src: str, key: str, raw: Any, classes: dict[str, WorkloadClass],
              out_replicas: list[ReplicaView]) -> WorkloadEntry:
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
    replicas = [_replica(src, f"{key}.replicas[{i}]", r, name, namespace)
                for i, r in enumerate(_list(src, f"{key}.replicas", w["replicas"], "list the replicas"))]
    out_replicas.extend(replicas)
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
    return WorkloadEntry(name=name, namespace=namespace, remove=_int(src, f"{key}.remove", w["remove"], 0),
                         weight=weight, pdb_max_unavailable=max_u, pdb_min_available=min_a,
                         already_unavailable=_int(src, f"{key}.already_unavailable",
                                                  w.get("already_unavailable", 0), 0),
                         signals=_signals(src, f"{key}.signals", w.get("signals"), name, cls, replicas))


def _pod(src: str, key: str, raw: Any) -> QuotaPod:
    p = _mapping(src, key, raw, _POD_KEYS, "write {name: ..., namespace: ..., requests: {...}}")
    name = _text(src, f"{key}.name", p.get("name"))
    requests, limits = _milli(src, f"{key}.requests", p.get("requests")), _milli(src, f"{key}.limits", p.get("limits"))
    priority = p.get("priority", 0)
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise config_error(src, f"{key}.priority", f"expected an integer, got {describe(priority)}",
                           "write spec.priority's integer")
    qos = compute_pod_qos(PodSpec(containers=(ContainerResources(requests=requests, limits=limits),)))
    return QuotaPod(name=name, namespace=_text(src, f"{key}.namespace", p.get("namespace", "default")),
                    qos=qos, priority=priority, created_s=_number(src, f"{key}.created_s", p.get("created_s", 0.0)),
                    requests=requests)


def _pending(src: str, doc: dict[str, Any], quota: QuotaContext | None) -> tuple[QuotaPod, ...]:
    if "pending" not in doc:
        return ()
    if quota is None:
        raise config_error(src, "pending", "pending pods without quotas", "add quotas: [...] or drop pending:")
    out: list[QuotaPod] = []
    seen = {p.key for p in quota.pods.values()}
    for i, raw in enumerate(_list(src, "pending", doc["pending"], "list the pods waiting for admission")):
        pod = _pod(src, f"pending[{i}]", raw)
        if pod.key in seen:
            raise config_error(src, f"pending[{i}].name", f"pod {pod.namespace}/{pod.name} is already listed",
                               "a pending pod is not yet running: give it its own name")
        seen.add(pod.key)
        out.append(pod)
    return tuple(out)


def _quota_policy(src: str, doc: dict[str, Any]) -> QuotaPolicy:
    raw = _mapping(src, "quota_policy", doc.get("quota_policy", {}), _POLICY_KEYS,
                   "write {guaranteed_may_borrow: true, burstable_may_borrow: false, ...}")
    for k, v in raw.items():
        if not isinstance(v, bool):
            raise config_error(src, f"quota_policy.{k}", f"expected true or false, got {describe(v)}",
                               "write true or false")
    return QuotaPolicy(**raw)


def _quota(src: str, doc: dict[str, Any], replicas: list[ReplicaView]) -> QuotaContext | None:
    if "quotas" not in doc:
        for k in ("pods", "quota_policy"):
            if k in doc:
                raise config_error(src, k, f"{k} without quotas", f"add quotas: [...] or drop {k}:")
        return None
    quotas: dict[str, Quota] = {}
    for i, raw in enumerate(_list(src, "quotas", doc["quotas"], "list {namespace, min, max}")):
        key = f"quotas[{i}]"
        q = _mapping(src, key, raw, _QUOTA_KEYS, "write {namespace: ..., min: {...}, max: {...}}")
        ns = _text(src, f"{key}.namespace", q.get("namespace"))
        if ns in quotas:
            raise config_error(src, f"{key}.namespace", f"second quota for {ns!r}", "one quota per namespace")
        try:
            quotas[ns] = Quota(ns, min=_milli(src, f"{key}.min", q.get("min")),
                               max=_milli(src, f"{key}.max", q.get("max")))
        except ValueError as exc:
            raise config_error(src, key, str(exc), "list only cpu, memory, nvidia.com/gpu with min <= max") from exc
    pods: dict[str, QuotaPod] = {}
    for i, raw in enumerate(_list(src, "pods", doc.get("pods", []), "list the pods behind the replicas")):
        pod = _pod(src, f"pods[{i}]", raw)
        if pod.name in pods:
            raise config_error(src, f"pods[{i}].name", f"second pod named {pod.name!r}",
                               "pod names are replica ids: unique")
        pods[pod.name] = pod
    for r in replicas:
        held = pods.get(r.replica_id)
        if held is None or held.namespace != r.namespace:
            raise config_error(src, "pods", f"no pod {r.replica_id!r} in namespace {r.namespace!r} for a replica of "
                               f"{r.workload!r}", "with quotas, list one pod per replica (name: the replica id)")
    return QuotaContext(quotas=quotas, pods=pods)


def load_snapshot(path: Path, classes: tuple[WorkloadClass, ...]) -> Snapshot:
    """Read and validate a snapshot file; ConfigError names the file, the key path and the fix."""
    src = str(path)
    doc = load_mapping(read_config_text(path, "cluster snapshot"), src, "write budget: N and workloads: [...]")
    unknown = sorted((str(k) for k in doc if k not in _TOP_KEYS), key=str)
    if unknown:
        raise config_error(src, unknown[0][:60], "unknown key", f"use only {', '.join(_TOP_KEYS)}")
    for req in ("budget", "workloads"):
        if req not in doc:
            raise config_error(src, req, "missing", f"add {req}: ...")
    by_name = {c.name: c for c in classes}
    replicas: list[ReplicaView] = []
    entries = tuple(_workload(src, f"workloads[{i}]", w, by_name, replicas)
                    for i, w in enumerate(_list(src, "workloads", doc["workloads"], "list the workloads")))
    seen: set[str] = set()
    for i, e in enumerate(entries):
        if e.name in seen:
            raise config_error(src, f"workloads[{i}].name", f"second workload named {e.name!r}",
                               "one entry per workload")
        seen.add(e.name)
    ids: set[str] = set()
    for r in replicas:
        if r.replica_id in ids:
            raise config_error(src, "workloads", f"replica id {r.replica_id!r} appears twice",
                               "replica ids (pod names) are unique in a snapshot")
        ids.add(r.replica_id)
    quota = _quota(src, doc, replicas)
    return Snapshot(budget=_int(src, "budget", doc["budget"], 0),
                    max_skew=_int(src, "max_skew", doc.get("max_skew", 1), 1),
                    workloads=entries, replicas=tuple(replicas), quota=quota,
                    pending=_pending(src, doc, quota), quota_policy=_quota_policy(src, doc))


def plan_snapshot(snap: Snapshot, classes: tuple[WorkloadClass, ...]) -> tuple[ClusterPlan, dict[str, ScaleDownPlan], dict[str, str]]:
    """Rank (L2), split the budget (L3 cluster) and pick victims (L3 per workload).

    Returns the cluster plan, each workload's victim plan, and each workload's L2 rank reason.
    """
    weights = {e.name: e.weight for e in snap.workloads if e.weight is not None}
    candidates = rank_candidates(classes, [e.signals for e in snap.workloads], weights)
    requests = {e.name: e.remove for e in snap.workloads}
    plan = plan_cluster(candidates, requests, snap.budget, quota=snap.quota,
                        replicas=snap.replicas if snap.quota is not None else None)
    victims = {
        e.name: plan_scale_down(snap.replicas, e.name, e.remove, namespace=e.namespace, max_skew=snap.max_skew,
                                pdb_max_unavailable=e.pdb_max_unavailable, pdb_min_available=e.pdb_min_available,
                                already_unavailable=e.already_unavailable, budget=plan.granted(e.name),
                                quota=snap.quota)
        for e in snap.workloads
    }
    return plan, victims, {c.workload: c.reason for c in candidates}


def admit_pending(snap: Snapshot, victims: dict[str, ScaleDownPlan]) -> list[PendingVerdict]:
    """Each pending pod's verdict under its namespace quota, after this cycle's victims leave.

    Usage per namespace is the requests of the snapshot's ``pods`` less the victims'; pending pods
    go in the order listed, and each one admitted adds its requests to its namespace's usage.
    """
    if snap.quota is None:
        return []
    gone = {v for plan in victims.values() for v in plan.victim_ids}
    usage: dict[str, dict[str, int]] = {}
    for rid, pod in snap.quota.pods.items():
        if rid not in gone:
            used = usage.setdefault(pod.namespace, {})
            for r, v in pod.requests.items():
                used[r] = used.get(r, 0) + v
    out: list[PendingVerdict] = []
    for pod in snap.pending:
        quota = snap.quota.quotas.get(pod.namespace)
        if quota is None:
            out.append(PendingVerdict(pod.name, pod.namespace, pod.qos.value, "admitted",
                                      f"allowed: namespace {pod.namespace!r} has no quota"))
            continue
        used = usage.setdefault(pod.namespace, {})
        got = admit(quota, used, pod.requests, pod.qos, snap.quota_policy)
        if got.allowed:
            for r, v in pod.requests.items():
                used[r] = used.get(r, 0) + v
        verdict = "borrowing" if got.borrows else "admitted" if got.allowed else "refused"
        out.append(PendingVerdict(pod.name, pod.namespace, pod.qos.value, verdict, got.reason))
    return out


@app.command("plan")
def plan_cmd(
    snapshot: Annotated[Path, typer.Argument(help="cluster snapshot YAML: budget, workloads (replicas, PDB, "
                                                  "signals), optional quotas, pods and pending pods")],
    workloads: Annotated[Path | None, typer.Option("--workloads", help="workload class YAML "
                                                   "(default: the note's three classes)")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="same as -o json (the plan)")] = False,
    output: OutputOpt = "table",
) -> None:
    """Plan one scale-down cycle over a cluster snapshot: rank, split the budget, pick victims."""
    as_json = wants_json(output, as_json)
    classes = load_workload_classes(workloads) if workloads is not None else default_workload_classes()
    snap = load_snapshot(snapshot, classes)
    try:
        plan, victims, ranks = plan_snapshot(snap, classes)
    except ValueError as exc:  # the planners' own argument checks, on values the reader let through
        raise ConfigError(f"{snapshot}: {exc} (fix: correct the snapshot)") from exc
    rows: list[dict[str, Any]] = []
    for g in plan.grants:
        v = victims[g.workload]
        rows.append({"workload": g.workload, "namespace": v.namespace, "requested": g.requested,
                     "granted": v.granted, "cluster_grant": g.granted, "victims": list(v.victim_ids),
                     "reclaimed": list(v.reclaimed), "rank": ranks.get(g.workload, ""), "reason": g.reason,
                     "limits": list(v.limits), "skew_before": v.skew_before, "skew_after": v.skew_after,
                     "allowed_disruptions": v.allowed_disruptions})
    total = sum(r["granted"] for r in rows)
    admissions = [{"pod": a.pod, "namespace": a.namespace, "qos": a.qos, "verdict": a.verdict, "reason": a.reason}
                  for a in admit_pending(snap, victims)]
    if as_json:
        typer.echo(json.dumps({"budget": plan.budget, "granted": total, "workloads": rows,
                               "pending": admissions}))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{total} of {plan.budget} removal(s) planned in {snapshot.name} (rank order)")
    for col in ("workload", "requested", "granted", "victims", "why"):
        table.add_column(col, justify="right" if col in ("requested", "granted") else "left")
    for r in rows:
        # A vetoed workload's rank line carries the veto reasons; an eligible one's limits say why fewer.
        why = str(r["rank"]) if str(r["rank"]).startswith("vetoed") else "; ".join([r["reason"], *r["limits"]])
        table.add_row(str(r["workload"]), str(r["requested"]), str(r["granted"]),
                      ", ".join(r["victims"]) or "–", why)
    console = Console(soft_wrap=True)
    console.print(table)
    if admissions:
        pending = Table(title=f"{len(admissions)} pending pod(s) after this cycle (quota admission, in order)")
        for col in ("pod", "namespace", "qos", "verdict", "reason"):
            pending.add_column(col)
        for a in admissions:
            pending.add_row(a["pod"], a["namespace"], a["qos"], a["verdict"], a["reason"])
        console.print(pending)
