"""The Deployments one live controller manages (``ebb run --workloads FILE``), parsed once.

Format (YAML; unknown keys are errors, so a typo never silently drops a quota or a bound)::

    workloads:                         # required: one entry per managed Deployment
      - namespace: shop                # Kubernetes namespace (DNS-1123 label)
        deployment: checkout           # Deployment name (DNS-1123 subdomain); unique per namespace
        class: order-fulfilment        # an L2 class of classes: below (default: the note's three)
        slo_ttft_ms: 800               # optional; default the class's latency SLO (P99, else P95),
                                       #   else ebb run --slo-ttft-ms
        slo_e2e_ms: 60000              # optional; default ebb run --slo-e2e-ms
        min_replicas: 2                # default 1 (>= 1: Ebb never scales to zero on its own)
        max_replicas: 16               # default 64
        zones: [zone-a, zone-b]        # optional: the zones its pods spread over (see below)
        gpus_per_replica: 1            # default 1; what one pod counts against its namespace's quota
        priority: 1000                 # default 0; the pods' priority (lower is reclaimed first)
        policy: ebb:profile=cautious   # optional; default ebb run --policy
        agents: [http://10.0.0.7:9401] # its signal source with --source agents
        prometheus_selector: 'namespace="shop",job="shop/checkout"'   # ... with --source prometheus
        tier: asleep:wake_s=2,max=4    # optional, act mode: victims sleep on their GPU (docs/tiers.md)
    quotas:                            # optional: elastic quota per namespace, in GPUs
      - {namespace: shop, min_gpus: 4, max_gpus: 12}
    cluster:                           # optional
      disruption_budget: 1             # replicas removed per cycle across all workloads (default 1)
      writes_per_100ms: 3              # scale writes issued per 100 ms, in batches (default 3)
    classes:                           # optional: L2 classes, the format of a classes file
      - {name: order-fulfilment, base_weight: 0.65, alpha: 1.2, p99_latency_ms: 800}

The top-level key is ``workloads:`` (a cluster *simulation* scenario lists ``services:``,
:mod:`ebb.config.scenario`): a file with ``workloads:`` is a fleet file, one with only ``classes:``
is a classes file (:mod:`ebb.config.workloads`), and ``ebb run --workloads`` takes either.

What each key means for the controller (:mod:`ebb.live.fleet_controller`):

* ``min_gpus`` / ``max_gpus`` become an :class:`ebb.decide.quota.Quota` on ``nvidia.com/gpu`` in
  milli-units (1 GPU = 1000). Scale-down reclaims pods above ``min`` first; ``max`` caps
  scale-ups of the namespace's managed Deployments. Only those Deployments' pods are counted.
* ``zones``: when given, a scale-down of the workload is planned only while every replica's zone
  is known and listed — zone balance computed over a zone view that is wrong is no balance.
* ``disruption_budget`` bounds scale-down only: scale-ups are never budgeted.

Errors: broken YAML, unknown or missing keys, bad values, duplicates → one-line
:class:`~ebb.errors.ConfigError` naming the file, the key path (``workloads[2].max_replicas``) and
the fix. Pure: no I/O beyond reading the file.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ebb.config.scenario_tiers import parse_service_tier
from ebb.config.tiers import SleepTier
from ebb.config.workloads import (
    MAX_MIN_REPLICAS,
    WorkloadClass,
    default_workload_classes,
    workload_classes_from,
)
from ebb.config.yamlio import (
    config_error,
    describe,
    finite_number,
    known_keys,
    load_mapping,
    read_config_text,
    whole_number,
)

__all__ = [
    "GPU",
    "ClusterLimits",
    "FleetConfig",
    "FleetWorkload",
    "NamespaceQuota",
    "is_fleet_document",
    "load_fleet",
    "parse_fleet",
    "parse_fleet_document",
]

GPU = "nvidia.com/gpu"
"""The resource a fleet file's quotas govern (milli-units: 1 GPU = 1000)."""
MAX_WORKLOADS = 10_000
"""Largest number of Deployments one fleet file may name (a typo or a hostile file, not a fleet)."""
MAX_GPUS = 1_000_000
_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
_TOP = ("workloads", "quotas", "cluster", "classes")
_WORKLOAD = ("namespace", "deployment", "class", "slo_ttft_ms", "slo_e2e_ms", "min_replicas", "max_replicas",
             "zones", "gpus_per_replica", "priority", "policy", "agents", "prometheus_selector", "tier")
_QUOTA = ("namespace", "min_gpus", "max_gpus")
_CLUSTER = ("disruption_budget", "writes_per_100ms")


@dataclass(frozen=True)
class FleetWorkload:
    """One managed Deployment and how it is scaled."""

    namespace: str
    """Kubernetes namespace of the Deployment. Required."""
    deployment: str
    """Deployment name, unique within its namespace. Required."""
    workload_class: WorkloadClass
    """Its L2 class (``class:``, resolved against the file's ``classes:`` or the defaults). Required."""
    slo_ttft_ms: float | None = None
    """TTFT SLO (ms, > 0); None = the class's latency SLO, else the controller's default."""
    slo_e2e_ms: float | None = None
    """End-to-end SLO (ms, > 0); None = the controller's default."""
    min_replicas: int = 1
    """Floor (>= 1, and at least the class's ``min_replicas``): no decision goes below it. Default 1."""
    max_replicas: int = 64
    """Ceiling (>= ``min_replicas``). Default 64."""
    zones: tuple[str, ...] = ()
    """Zones the pods spread over; () = not checked. See the module docstring."""
    gpu_milli_per_replica: int = 1000
    """``nvidia.com/gpu`` milli-units one pod requests (``gpus_per_replica`` × 1000). Default 1000."""
    priority: int = 0
    """Pod priority (``spec.priority``); among quota borrowers the lowest goes first. Default 0."""
    policy: str | None = None
    """Policy spec (``ebb:profile=cautious``); None = the controller's ``--policy``."""
    agents: tuple[str, ...] = ()
    """``ebb agent`` URLs reading this workload (``--source agents``)."""
    prometheus_selector: str | None = None
    """PromQL label matchers selecting this workload's series (``--source prometheus``)."""
    tier: SleepTier | None = None
    """Its asleep tier (``tier: asleep:wake_s=2,max=4``; act mode, Kubernetes): the victims Ebb
    removes drain and sleep on their GPU and scale-ups wake them first (docs/tiers.md); None: none."""

    @property
    def target(self) -> str:
        """``namespace/deployment``: the name of this workload in the ledger and in L3."""
        return f"{self.namespace}/{self.deployment}"

    def ttft_slo_ms(self, default: float) -> float:
        """The TTFT SLO the workload's policy guards: ``slo_ttft_ms``, else the class's P99, else its
        P95 (a P99 held under a P95 bound is the safe side), else ``default``."""
        if self.slo_ttft_ms is not None:
            return self.slo_ttft_ms
        slo = self.workload_class.latency_slo
        return default if slo is None else slo[1]


@dataclass(frozen=True)
class NamespaceQuota:
    """Elastic GPU quota of one namespace, in ``nvidia.com/gpu`` milli-units."""

    namespace: str
    min_milli: int = 0
    """Guaranteed GPUs × 1000 (``min_gpus``). Default 0: every pod borrows."""
    max_milli: int | None = None
    """Hard cap × 1000 (``max_gpus``); None = uncapped."""


@dataclass(frozen=True)
class ClusterLimits:
    """Limits shared by every workload of the fleet."""

    disruption_budget: int = 1
    """Replicas removed per cycle across the whole fleet (>= 0); scale-ups never count. Default 1:
    one removal per cycle, so every removal is judged on the fleet the previous one left."""
    writes_per_100ms: int = 3
    """Scale writes started in any 100 ms (>= 1). Default 3: the design note's bound, so a
    rebalance does not amplify API-server / etcd writes."""


@dataclass(frozen=True)
class FleetConfig:
    """A parsed fleet file. Workloads keep the file's order (the order of equal-rank ties)."""

    workloads: tuple[FleetWorkload, ...]
    quotas: tuple[NamespaceQuota, ...] = ()
    cluster: ClusterLimits = field(default_factory=ClusterLimits)
    classes: tuple[WorkloadClass, ...] = ()
    """The L2 classes the workloads were resolved against."""
    source: str = "<string>"
    """The file it came from (for messages)."""

    def quota(self, namespace: str) -> NamespaceQuota | None:
        """The quota of ``namespace``; None when it has none."""
        return next((q for q in self.quotas if q.namespace == namespace), None)


_fail = config_error


def _name(source: str, key: str, v: Any, pattern: re.Pattern[str], what: str, example: str) -> str:
    if not isinstance(v, str) or not pattern.match(v):
        raise _fail(source, key, f"expected a Kubernetes {what}, got {describe(v)}",
                    f"lowercase letters, digits and '-', e.g. {example}")
    return v


def _positive(source: str, key: str, v: Any, example: str) -> float:
    x = finite_number(v)
    if x is None or x <= 0:
        raise _fail(source, key, f"expected milliseconds > 0, got {describe(v)}", f"e.g. {key.rsplit('.', 1)[-1]}: {example}")
    return x


def _milli(source: str, key: str, v: Any, example: str) -> int:
    """GPUs (a number >= 0, at most 3 decimals) as milli-units."""
    x = finite_number(v)
    if x is None or not 0 <= x <= MAX_GPUS or abs(x * 1000 - round(x * 1000)) > 1e-6:
        raise _fail(source, key, f"expected GPUs >= 0 (at most 3 decimals), got {describe(v)}", f"e.g. {example}")
    return round(x * 1000)


def _strings(source: str, key: str, v: Any, example: str) -> tuple[str, ...]:
    if not isinstance(v, list) or not all(isinstance(s, str) and s.strip() for s in v):
        raise _fail(source, key, f"expected a list of non-empty strings, got {describe(v)}", f"e.g. {example}")
    if len(set(v)) != len(v):
        raise _fail(source, key, "lists a value twice", "list each once")
    return tuple(v)


def _workload(source: str, where: str, raw: Any, classes: dict[str, WorkloadClass]) -> FleetWorkload:
    doc = known_keys(source, where, raw, _WORKLOAD, "write {namespace: ..., deployment: ..., class: ...}")
    for req in ("namespace", "deployment", "class"):
        if doc.get(req) is None:
            raise _fail(source, f"{where}.{req}", "missing", f"add {req}: ...")
    ns = _name(source, f"{where}.namespace", doc["namespace"], _LABEL, "namespace (DNS-1123 label)", "serving")
    dep = _name(source, f"{where}.deployment", doc["deployment"], _SUBDOMAIN, "Deployment name", "llm-serving")
    cls = classes.get(doc["class"]) if isinstance(doc["class"], str) else None
    if cls is None:
        raise _fail(source, f"{where}.class", f"no class named {describe(doc['class'])}",
                    f"one of {', '.join(classes)} (or define it under classes:)")
    ttft = None if doc.get("slo_ttft_ms") is None else _positive(source, f"{where}.slo_ttft_ms",
                                                                  doc["slo_ttft_ms"], "2000")
    e2e = None if doc.get("slo_e2e_ms") is None else _positive(source, f"{where}.slo_e2e_ms",
                                                                doc["slo_e2e_ms"], "60000")
    lo = whole_number(source, f"{where}.min_replicas", doc.get("min_replicas", 1), 1, MAX_MIN_REPLICAS,
                      fix="e.g. min_replicas: 1")
    if lo < cls.min_replicas:
        raise _fail(source, f"{where}.min_replicas", f"{lo} is below class {cls.name!r}'s min_replicas "
                    f"{cls.min_replicas}", f"use min_replicas >= {cls.min_replicas}")
    hi = whole_number(source, f"{where}.max_replicas", doc.get("max_replicas", max(64, lo)), lo, MAX_MIN_REPLICAS,
                      fix=f"e.g. max_replicas: {max(lo, 8)} (>= min_replicas)")
    zones = () if doc.get("zones") is None else _strings(source, f"{where}.zones", doc["zones"], "[zone-a, zone-b]")
    gpus = _milli(source, f"{where}.gpus_per_replica", doc.get("gpus_per_replica", 1), "gpus_per_replica: 1")
    prio = whole_number(source, f"{where}.priority", doc.get("priority", 0), -(2**31), 1_000_000_000,
                        fix="e.g. priority: 1000")
    policy = doc.get("policy")
    if policy is not None and (not isinstance(policy, str) or not policy.strip()):
        raise _fail(source, f"{where}.policy", f"expected a policy spec, got {describe(policy)}",
                    "e.g. policy: ebb:profile=cautious")
    agents = () if doc.get("agents") is None else _strings(source, f"{where}.agents", doc["agents"],
                                                           "agents: [http://10.0.0.7:9401]")
    selector = doc.get("prometheus_selector")
    if selector is not None and (not isinstance(selector, str) or not selector.strip()):
        raise _fail(source, f"{where}.prometheus_selector", f"expected label matchers, got {describe(selector)}",
                    "e.g. prometheus_selector: 'namespace=\"shop\",job=\"shop/checkout\"'")
    tier = parse_service_tier(doc.get("tier"), f"{where}.tier", source, True,
                              asleep_only="the live actuators sleep engines; a snapshot tier is simulator-only")
    return FleetWorkload(namespace=ns, deployment=dep, workload_class=cls, slo_ttft_ms=ttft, slo_e2e_ms=e2e,
                         min_replicas=lo, max_replicas=hi, zones=zones, gpu_milli_per_replica=gpus, priority=prio,
                         policy=policy, agents=agents, prometheus_selector=selector, tier=tier)


def _quota(source: str, where: str, raw: Any) -> NamespaceQuota:
    doc = known_keys(source, where, raw, _QUOTA, "write {namespace: ..., min_gpus: ..., max_gpus: ...}")
    if doc.get("namespace") is None:
        raise _fail(source, f"{where}.namespace", "missing", "add namespace: ...")
    ns = _name(source, f"{where}.namespace", doc["namespace"], _LABEL, "namespace (DNS-1123 label)", "serving")
    lo = _milli(source, f"{where}.min_gpus", doc.get("min_gpus", 0), "min_gpus: 4")
    hi = None if doc.get("max_gpus") is None else _milli(source, f"{where}.max_gpus", doc["max_gpus"], "max_gpus: 12")
    if hi is not None and lo > hi:
        raise _fail(source, f"{where}.min_gpus", f"{lo / 1000:g} exceeds max_gpus {hi / 1000:g}",
                    "use min_gpus <= max_gpus")
    return NamespaceQuota(ns, lo, hi)


def _cluster(source: str, raw: Any) -> ClusterLimits:
    doc = known_keys(source, "cluster", raw, _CLUSTER, "write {disruption_budget: 1, writes_per_100ms: 3}")
    return ClusterLimits(
        disruption_budget=whole_number(source, "cluster.disruption_budget", doc.get("disruption_budget", 1), 0,
                                       MAX_MIN_REPLICAS, fix="e.g. disruption_budget: 1"),
        writes_per_100ms=whole_number(source, "cluster.writes_per_100ms", doc.get("writes_per_100ms", 3), 1, 1000,
                                      fix="e.g. writes_per_100ms: 3"))


def is_fleet_document(doc: Any) -> bool:
    """Whether a loaded YAML document is a fleet file (it has ``workloads:``)."""
    return isinstance(doc, dict) and "workloads" in doc


def parse_fleet_document(doc: dict[Any, Any], source: str = "<string>") -> FleetConfig:
    """A fleet from an already-loaded YAML mapping; ``source`` names the file in errors."""
    known_keys(source, "<top>", doc, _TOP, "write workloads: [...] (and quotas:, cluster:, classes:)")
    classes = (default_workload_classes() if doc.get("classes") is None
               else workload_classes_from(doc["classes"], source))
    by_name = {c.name: c for c in classes}
    raw = doc.get("workloads")
    if not isinstance(raw, list) or not raw:
        raise _fail(source, "workloads", "expected a non-empty list of Deployments",
                    "add - {namespace: ..., deployment: ..., class: ...} under workloads:")
    if len(raw) > MAX_WORKLOADS:
        raise _fail(source, "workloads", f"{len(raw):,} entries (at most {MAX_WORKLOADS:,})",
                    "split the fleet over several controllers")
    workloads = tuple(_workload(source, f"workloads[{i}]", w, by_name) for i, w in enumerate(raw))
    seen: set[str] = set()
    for i, w in enumerate(workloads):
        if w.target in seen:
            raise _fail(source, f"workloads[{i}].deployment", f"{w.target} is listed twice", "list each Deployment once")
        seen.add(w.target)
    raw_q = doc.get("quotas") or []
    if not isinstance(raw_q, list):
        raise _fail(source, "quotas", f"expected a list, got {describe(raw_q)}",
                    "write - {namespace: ..., min_gpus: ..., max_gpus: ...}")
    quotas = tuple(_quota(source, f"quotas[{i}]", q) for i, q in enumerate(raw_q))
    namespaces = {w.namespace for w in workloads}
    named: set[str] = set()
    for i, q in enumerate(quotas):
        if q.namespace in named:
            raise _fail(source, f"quotas[{i}].namespace", f"namespace {q.namespace!r} has two quotas",
                        "give each namespace one quota")
        if q.namespace not in namespaces:
            raise _fail(source, f"quotas[{i}].namespace", f"no workload runs in namespace {q.namespace!r}",
                        f"one of {', '.join(sorted(namespaces))}")
        named.add(q.namespace)
    cluster = ClusterLimits() if doc.get("cluster") is None else _cluster(source, doc["cluster"])
    return FleetConfig(workloads=workloads, quotas=quotas, cluster=cluster, classes=classes, source=source)


def parse_fleet(text: str, source: str = "<string>") -> FleetConfig:
    """A fleet from YAML text; ``source`` names the file in errors."""
    return parse_fleet_document(load_mapping(text, source, "write workloads: [...]"), source)


def load_fleet(path: Path) -> FleetConfig:
    """A fleet from a file; :class:`~ebb.errors.ConfigError` names it."""
    return parse_fleet(read_config_text(path, "fleet file"), str(path))
