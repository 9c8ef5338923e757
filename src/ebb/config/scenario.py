"""Cluster scenarios: many services on one GPU pool (``ebb simulate --cluster FILE``), parsed once.

Format (YAML; unknown keys are errors, so a typo never silently drops a quota)::

    name: three-classes               # shown in reports
    duration_s: 21600                 # simulated span (s); arrivals past it are ignored
    warmup_s: 1800                    # optional: the first seconds feed every policy but are not
                                      # scored or billed (default 0; below duration_s; ebb.sim.warmup)
    seed: 0                           # arrival sampling and tie-breaks
    data_root: ../../shared/data/traces  # relative paths below resolve against it (itself relative
                                      # to this file); default: this file's folder
    zones: {zone-a: 40, zone-b: 40, zone-c: 40}   # GPUs per zone (the shared pool)
    cluster:
      disruption_budget: 4            # L3: replicas removed per cycle across the cluster (default 4)
      writes_per_100ms: 3             # state writes (scale patches) per 100 ms (default 3)
    quotas:                           # elastic quota per namespace, in GPUs
      - {namespace: shop, min_gpus: 24, max_gpus: 80}
    services:
      - name: checkout                # unique
        namespace: shop
        class: order-fulfilment       # a class of workloads.yaml (default classes if omitted)
        qos: Guaranteed               # the pods' QoS class: Guaranteed | Burstable | BestEffort; only
                                      # Guaranteed pods may borrow above the namespace's min (the note's
                                      # QuotaPolicy), the others run within it
        priority: 1000                # pod priority; lower is preempted and reclaimed first
        arrivals: {azure: code}       # or {bundled: azure-conv}, {trace: FILE},
                                      #    {servegen: language/m-large, client: 7, rate_scale: 0.5}
        capacity_rps: 3.0             # requests/s one replica serves (measure: ebb probe / a sweep)
        service_ms: 300               # latency of one request on an idle replica
        slo_ms: 2000                  # latency objective of the class's percentile
        min_replicas: 1               # default 1
        max_replicas: 40              # default 64
        zones: [zone-a, zone-b, zone-c]   # spread (max skew 1); default every zone
        gpus_per_replica: 1           # default 1
        cold_start_s: 60              # request → ready (default 60)
      - name: training
        namespace: research
        class: offline-training
        qos: Guaranteed
        priority: 0                   # lowest: its borrowed GPUs are preempted first
        demand: {alibaba_gpu: alibaba-gpu-2023/openb_pod_list_default.csv, qos: [BE], time_scale: 149}
    generate:                         # many services from one multi-tenant source
      - servegen: language/m-mid
        clients: 400                  # the 400 busiest clients (or a list of client ids)
        rate_scale: 0.2
        namespace: tenants-{i}        # {i}: the 0-based index in the generated list; {client}: its id
        name: mmid-{client}
        class: realtime-recommendation
        ...                           # any service key; applies to every generated service

A service has ``arrivals`` (online, autoscaled) or ``demand`` (batch/training: GPUs wanted over time,
placed when free, preempted first; not autoscaled), never both. Errors name the file, the key path
(``services[3].capacity_rps``) and the fix (:class:`~ebb.errors.ConfigError`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ebb.config.workloads import (
    WorkloadClass,
    default_workload_classes,
    load_workload_classes,
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

__all__ = ["ClusterSettings", "QuotaSpec", "Scenario", "ServiceSpec", "load_scenario", "parse_scenario"]

QOS_CLASSES = ("Guaranteed", "Burstable", "BestEffort")
ARRIVAL_KINDS = ("azure", "bundled", "trace", "servegen")
DEMAND_KINDS = ("alibaba_gpu",)
MAX_SERVICES = 20_000


@dataclass(frozen=True)
class ServiceSpec:
    """One service of the cluster."""

    name: str
    namespace: str
    class_name: str
    qos: str
    """Pod QoS class (``Guaranteed`` | ``Burstable`` | ``BestEffort``)."""
    priority: int
    arrivals: Mapping[str, Any] | None
    """Where arrivals come from (online services); None for a demand-driven batch service."""
    demand: Mapping[str, Any] | None
    """GPU demand over time (batch/training); None for online services."""
    capacity_rps: float = 1.0
    """Requests per second one replica serves without its queue growing."""
    service_ms: float = 100.0
    """Latency of one request on an idle replica (ms)."""
    slo_ms: float = 1000.0
    """Latency objective (ms): a request slower than this is a violation."""
    min_replicas: int = 1
    max_replicas: int = 64
    zones: tuple[str, ...] = ()
    """Zones the service spreads over (max skew 1); empty = every zone."""
    gpus_per_replica: int = 1
    cold_start_s: float = 60.0

    @property
    def online(self) -> bool:
        """Autoscaled from arrivals (not a demand-driven batch service)."""
        return self.arrivals is not None


@dataclass(frozen=True)
class QuotaSpec:
    """Elastic quota of one namespace in GPUs (see :mod:`ebb.decide.quota`)."""

    namespace: str
    min_gpus: int
    """Guaranteed GPUs: never reclaimed while the namespace wants them."""
    max_gpus: int | None
    """Hard cap; None = uncapped."""


@dataclass(frozen=True)
class ClusterSettings:
    """Cluster-wide limits."""

    disruption_budget: int = 4
    """Replicas L3 may remove per cycle across every service (default 4)."""
    writes_per_100ms: int = 3
    """State writes (scale patches) per 100 ms (default 3, the design note's throttle)."""


@dataclass(frozen=True)
class Scenario:
    """A parsed cluster scenario; paths in ``services`` are already resolved against ``data_root``."""

    name: str
    source: str
    duration_s: int
    seed: int
    data_root: Path
    zones: Mapping[str, int]
    """Zone → GPUs in that zone's pool."""
    cluster: ClusterSettings
    quotas: tuple[QuotaSpec, ...]
    services: tuple[ServiceSpec, ...]
    generate: tuple[Mapping[str, Any], ...] = ()
    """Generator entries (expanded into services by the simulator, which knows the data)."""
    classes: tuple[WorkloadClass, ...] = field(default_factory=lambda: tuple(default_workload_classes()))
    warmup_s: int = 0
    """Seconds at the start that feed every policy but are not scored or billed (0 <= it < ``duration_s``)."""



_TOP = {"name", "duration_s", "seed", "data_root", "zones", "cluster", "quotas", "services", "generate",
        "workloads", "warmup_s"}
_SERVICE = {"name", "namespace", "class", "qos", "priority", "arrivals", "demand", "capacity_rps", "service_ms",
            "slo_ms", "min_replicas", "max_replicas", "zones", "gpus_per_replica", "cold_start_s"}
_GENERATE = (_SERVICE - {"arrivals", "demand"}) | {"servegen", "clients", "rate_scale"}


def load_scenario(path: str | Path) -> Scenario:
    """Read and validate a scenario file (ConfigError on any problem, naming file and key)."""
    p = Path(path)
    text = read_config_text(p, "cluster scenario")
    return parse_scenario(text, source=str(p), base=p.parent.resolve())


def parse_scenario(text: str, *, source: str = "<scenario>", base: Path | None = None) -> Scenario:
    """Parse scenario YAML ``text``; relative paths resolve against ``base`` (default: cwd)."""
    doc = load_mapping(text, source, "a mapping with zones:, services: (and quotas:, cluster:)")
    known_keys(source, "<top>", doc, _TOP, "a mapping with zones:, services: (and quotas:, cluster:)")
    base = base if base is not None else Path.cwd()
    root = base / str(doc.get("data_root", "."))
    zones = _zones(doc.get("zones"), source)
    classes = tuple(load_workload_classes(str(base / str(doc["workloads"])))) if "workloads" in doc \
        else tuple(default_workload_classes())
    names = {c.name for c in classes}
    services = tuple(_service(s, f"services[{i}]", source, zones, names, root)
                     for i, s in enumerate(_list(doc.get("services", []), "services", source)))
    generate = tuple(_generate(g, f"generate[{i}]", source, root)
                     for i, g in enumerate(_list(doc.get("generate", []), "generate", source)))
    if not services and not generate:
        raise config_error(source, "services", "no services", "list at least one service under services:")
    seen: set[str] = set()
    for s in services:
        if s.name in seen:
            raise config_error(source, "services", f"duplicate service name {s.name!r}", "give each service a unique name")
        seen.add(s.name)
    cluster = known_keys(source, "cluster", doc.get("cluster", {}) or {}, ("disruption_budget", "writes_per_100ms"),
                         "see the scenario format")
    settings = ClusterSettings(disruption_budget=_int(cluster, "disruption_budget", 4, "cluster.", source, lo=0),
                               writes_per_100ms=_int(cluster, "writes_per_100ms", 3, "cluster.", source, lo=1))
    quotas = tuple(_quota(q, f"quotas[{i}]", source) for i, q in enumerate(_list(doc.get("quotas", []), "quotas", source)))
    if len({q.namespace for q in quotas}) != len(quotas):
        raise config_error(source, "quotas", "a namespace has two quotas", "give each namespace one quota")
    duration = _int(doc, "duration_s", 3600, "", source, lo=1, hi=90 * 86_400)
    warmup = whole_number(source, "warmup_s", doc.get("warmup_s", 0), 0, duration - 1,
                          fix=f"a whole number of seconds below duration_s ({duration:,}), e.g. "
                              f"warmup_s: {duration // 4}, or 0 for none")
    return Scenario(name=str(doc.get("name", Path(source).stem)), source=source, duration_s=duration,
                    seed=_int(doc, "seed", 0, "", source, lo=0), data_root=root, zones=zones, cluster=settings,
                    quotas=quotas, services=services, generate=generate, classes=classes, warmup_s=warmup)


def service_from(entry: Mapping[str, Any], where: str, source: str, zones: Mapping[str, int],
                 class_names: set[str], root: Path) -> ServiceSpec:
    """Validate one service mapping (also used for generated services)."""
    return _service(entry, where, source, zones, class_names, root)


def _service(s: Any, where: str, source: str, zones: Mapping[str, int], class_names: set[str],
             root: Path) -> ServiceSpec:
    s = known_keys(source, where, s, _SERVICE, "see the scenario format")
    for key in ("name", "namespace", "class"):
        if not isinstance(s.get(key), str) or not s[key]:
            raise config_error(source, f"{where}.{key}", f"missing or not a string: {describe(s.get(key))}",
                               f"give the service a {key}")
    if s["class"] not in class_names:
        raise config_error(source, f"{where}.class", f"unknown class {s['class']!r}", f"use one of {sorted(class_names)}")
    qos = s.get("qos", "Guaranteed")
    if qos not in QOS_CLASSES:
        raise config_error(source, f"{where}.qos", f"unknown QoS class {describe(qos)}", f"use one of {list(QOS_CLASSES)}")
    arrivals, demand = s.get("arrivals"), s.get("demand")
    if (arrivals is None) == (demand is None):
        raise config_error(source, where, "needs exactly one of arrivals: or demand:",
                           "online services take arrivals:, batch/training services demand:")
    src = _source(arrivals if arrivals is not None else demand, f"{where}.{'arrivals' if arrivals is not None else 'demand'}",
                  source, ARRIVAL_KINDS if arrivals is not None else DEMAND_KINDS, root)
    svc_zones = tuple(s.get("zones", tuple(zones)))
    bad = [z for z in svc_zones if z not in zones]
    if bad or not svc_zones:
        raise config_error(source, f"{where}.zones", f"unknown or no zones {bad}", f"use zones from {sorted(zones)}")
    lo = _int(s, "min_replicas", 1, where + ".", source, lo=0, hi=10_000)
    hi = _int(s, "max_replicas", 64, where + ".", source, lo=max(lo, 1), hi=10_000)
    return ServiceSpec(
        name=s["name"], namespace=s["namespace"], class_name=s["class"], qos=qos,
        priority=_int(s, "priority", 0, where + ".", source, lo=-(2**31), hi=2**31 - 1),
        arrivals=src if arrivals is not None else None, demand=src if demand is not None else None,
        capacity_rps=_num(s, "capacity_rps", 1.0, where, source), service_ms=_num(s, "service_ms", 100.0, where, source),
        slo_ms=_num(s, "slo_ms", 1000.0, where, source), min_replicas=lo, max_replicas=hi, zones=svc_zones,
        gpus_per_replica=_int(s, "gpus_per_replica", 1, where + ".", source, lo=1, hi=64),
        cold_start_s=_num(s, "cold_start_s", 60.0, where, source))


def _source(v: Any, where: str, source: str, kinds: tuple[str, ...], root: Path) -> Mapping[str, Any]:
    if not isinstance(v, dict):
        raise config_error(source, where, f"expected a mapping, got {describe(v)}", f"name one of {list(kinds)}")
    kind = [k for k in kinds if k in v]
    if len(kind) != 1:
        raise config_error(source, where, f"expected exactly one of {list(kinds)}, got {sorted(v)}",
                           "e.g. {servegen: language/m-large, client: 7} or {trace: FILE}")
    out = dict(v)
    out["kind"] = kind[0]
    if kind[0] in ("trace", "servegen", "alibaba_gpu"):
        out["path"] = str(root / str(v[kind[0]]))
    return out


def _generate(g: Any, where: str, source: str, root: Path) -> Mapping[str, Any]:
    g = known_keys(source, where, g, _GENERATE, "see the scenario format")
    if "servegen" not in g:
        raise config_error(source, f"{where}.servegen", "missing", "name a ServeGen model folder, e.g. language/m-mid")
    clients = g.get("clients", 10)
    if not (isinstance(clients, int) and not isinstance(clients, bool) and 1 <= clients <= MAX_SERVICES) and \
            not (isinstance(clients, list) and all(isinstance(c, int) for c in clients)):
        raise config_error(source, f"{where}.clients", f"expected a count or a list of client ids, got {describe(clients)}",
                           f"use e.g. clients: 400 (at most {MAX_SERVICES:,})")
    out = dict(g)
    out["path"] = str(root / str(g["servegen"]))
    out["where"] = where
    return out


def _zones(v: Any, source: str) -> dict[str, int]:
    if not isinstance(v, dict) or not v:
        raise config_error(source, "zones", f"expected a mapping zone → GPUs, got {describe(v)}",
                           "e.g. zones: {zone-a: 40, zone-b: 40, zone-c: 40}")
    out: dict[str, int] = {}
    for z, n in v.items():
        if not isinstance(z, str) or isinstance(n, bool) or not isinstance(n, int) or not 0 < n <= 1_000_000:
            raise config_error(source, f"zones.{z}", f"GPUs must be an integer in 1..1,000,000, got {describe(n)}",
                               "give each zone its GPU count")
        out[z] = n
    return out


def _quota(q: Any, where: str, source: str) -> QuotaSpec:
    q = known_keys(source, where, q, ("namespace", "min_gpus", "max_gpus"), "e.g. {namespace: shop, min_gpus: 8}")
    if not isinstance(q.get("namespace"), str) or not q["namespace"]:
        raise config_error(source, f"{where}.namespace", "missing", "name the namespace")
    lo = _int(q, "min_gpus", 0, where + ".", source, lo=0)
    hi = _int(q, "max_gpus", -1, where + ".", source, lo=-1)
    if hi != -1 and hi < lo:
        raise config_error(source, f"{where}.max_gpus", f"{hi} < min_gpus {lo}", "max_gpus must be >= min_gpus")
    return QuotaSpec(q["namespace"], lo, None if hi == -1 else hi)


def _list(v: Any, key: str, source: str) -> list[Any]:
    if v is None:
        return []
    if not isinstance(v, list):
        raise config_error(source, key, f"expected a list, got {describe(v)}", f"write {key}: as a YAML list")
    if len(v) > MAX_SERVICES:
        raise config_error(source, key, f"{len(v):,} entries", f"at most {MAX_SERVICES:,}")
    return v


def _int(d: Mapping[str, Any], key: str, default: int, prefix: str, source: str, *, lo: int,
         hi: int = 2**62) -> int:
    """``d[key]`` (``default`` when absent), a whole number in ``[lo, hi]``; errors name ``prefix + key``."""
    return whole_number(source, prefix + key, d.get(key, default), lo, hi, fix=f"set {key} to a whole number in range")


def _num(d: Mapping[str, Any], key: str, default: float, where: str, source: str) -> float:
    v = d.get(key, default)
    f = finite_number(v)
    if f is None or not 0 < f <= 1e9:
        raise config_error(source, f"{where}.{key}", f"expected a finite number > 0, got {describe(v)}",
                           f"set {key} to a positive number")
    return f
