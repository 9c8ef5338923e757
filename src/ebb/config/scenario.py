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
        tier: asleep:wake_s=2,max=8   # optional asleep tier (the --tier syntax): Ebb puts the replicas
                                      # it removes to sleep on their GPU (held, lendable to best-effort
                                      # work) and wakes them first; peers never use it
      - name: training
        namespace: research
        class: offline-training
        qos: Guaranteed
        priority: 0                   # lowest: its borrowed GPUs are preempted first
        demand: {alibaba_gpu: alibaba-gpu-2023/openb_pod_list_default.csv, qos: [BE], time_scale: 149}
                                      # or {gpus: 24}: an elastic job that wants 24 GPUs all the time
    lending:                          # optional: what taking a GPU back from best-effort work costs
      checkpoint_s: 30                # grace before a preempted job's GPU is free (reclaim delay)
      restart_gpu_s: 120              # work lost per GPU preempted (subtracted from work done)
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

Hostile-input guarantees (each a one-line ConfigError naming the key and the fix, raised while parsing,
before any trace is read or any array allocated):

* ``generate:`` text fields may hold only the placeholders ``{i}`` and ``{client}`` (and ``{{``/``}}``
  for literal braces): no attribute or index access, no format spec, no conversion, so expanding them
  costs at most the text's length plus 20 characters per placeholder.
* ``arrivals:`` and ``demand:`` take only their documented keys, with types and ranges checked:
  ``rate_scale``, ``gpu_scale`` and ``time_scale`` finite and in (0, 10**6], ``start_s`` in
  [0, 10**10], ``client`` an integer id, ``qos`` a list of short class names (or null for all).
* Paths: a relative ``trace``, ``servegen`` or ``alibaba_gpu`` path may not climb out of
  ``data_root`` (``..`` past it, judged on the path as written: symlinks inside may point anywhere);
  write an absolute path to read elsewhere, which states the intent. A path that exists must be a
  regular file (a folder for ``servegen``, either for ``trace``): ``/dev/zero``, FIFOs and sockets are
  refused before they are opened. A ``workloads:`` file (relative to the scenario's folder) must be
  a regular file of at most :data:`MAX_WORKLOADS_BYTES` and not the scenario itself.
* Names, namespaces and zones are at most 253 characters, without control or invisible format
  characters (the bidi override U+202E, zero-width spaces): they are printed in tables and reports.
* Sizes: at most :data:`MAX_SERVICES` services after ``generate:`` expansion (a ``clients:`` list
  counts its ids), at most :data:`MAX_ZONES` zones, at most :data:`MAX_SERVICE_SECONDS` service-seconds
  (services × ``duration_s``: the simulator allocates per-second arrays of that many cells, 4-8 bytes
  each) and quota ``min_gpus``/``max_gpus`` at most the pool's GPU count bound (10**9).
"""

from __future__ import annotations

import os
import string
import unicodedata
from stat import S_ISDIR as stat_is_dir
from stat import S_ISREG as stat_is_file
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ebb.config.scenario_tiers import LendingSettings, parse_lending, parse_service_tier
from ebb.config.tiers import SleepTier
from ebb.config.workloads import (
    WorkloadClass,
    default_workload_classes,
    load_workload_classes,
)
from ebb.config.yamlio import (
    config_error,
    describe,
    finite_number,
    finite_value,
    known_keys,
    load_mapping,
    read_config_text,
    whole_number,
)

__all__ = ["ClusterSettings", "LendingSettings", "QuotaSpec", "Scenario", "ServiceSpec", "load_scenario", "parse_scenario"]

QOS_CLASSES = ("Guaranteed", "Burstable", "BestEffort")
ARRIVAL_KINDS = ("azure", "bundled", "trace", "servegen")
DEMAND_KINDS = ("alibaba_gpu", "gpus")
MAX_SERVICES = 20_000
"""Services in one scenario, written plus generated."""
MAX_ZONES = 64
"""Zones in one scenario (real clusters have 3 to 6 per region)."""
MAX_SERVICE_SECONDS = 200_000_000
"""Services × ``duration_s`` allowed: the per-second arrival array alone is 4 bytes per cell (800 MB
here) and the engine keeps several such arrays; ``servegen-422.yaml`` (422 services × a day) is 36 M."""
MAX_WORKLOADS_BYTES = 1 << 20
"""Largest ``workloads:`` class file read (1 MiB; the default classes' file is under 2 KiB)."""
MAX_NAME_CHARS = 253
"""Longest service name, namespace or zone (a Kubernetes DNS subdomain name)."""
MAX_SCALE = 1e6
"""Largest ``rate_scale``, ``gpu_scale`` or ``time_scale``."""
_ARRIVAL_KEYS: Mapping[str, tuple[str, ...]] = {
    "azure": ("azure",), "bundled": ("bundled",), "trace": ("trace",),
    "servegen": ("servegen", "client", "rate_scale")}
_DEMAND_KEYS = ("alibaba_gpu", "qos", "time_scale", "gpu_scale", "start_s")
_CONSTANT_KEYS = ("gpus",)
MAX_CONSTANT_GPUS = 1_000_000
"""Largest ``demand: {gpus: N}``."""
_PLACEHOLDERS = ("i", "client")


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
    tier: SleepTier | None = None
    """The asleep tier of an online service (``tier: asleep:wake_s=2,max=8``): replicas a policy that
    decides tiers (Ebb) removes sleep on their GPU, which best-effort work may borrow; None = none."""

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
    lending: LendingSettings = field(default_factory=LendingSettings)
    """What preempting best-effort work costs (``lending:``); zero costs without the key."""



_TOP = {"name", "duration_s", "seed", "data_root", "zones", "cluster", "quotas", "services", "generate",
        "workloads", "warmup_s", "lending"}
_SERVICE = {"name", "namespace", "class", "qos", "priority", "arrivals", "demand", "capacity_rps", "service_ms",
            "slo_ms", "min_replicas", "max_replicas", "zones", "gpus_per_replica", "cold_start_s", "tier"}
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
    classes = tuple(load_workload_classes(_workloads_file(doc["workloads"], source, base))) if "workloads" in doc \
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
    _check_size(source, len(services) + sum(_client_count(g) for g in generate), duration)
    warmup = whole_number(source, "warmup_s", doc.get("warmup_s", 0), 0, duration - 1,
                          fix=f"a whole number of seconds below duration_s ({duration:,}), e.g. "
                              f"warmup_s: {duration // 4}, or 0 for none")
    return Scenario(name=str(doc.get("name", Path(source).stem)), source=source, duration_s=duration,
                    seed=_int(doc, "seed", 0, "", source, lo=0), data_root=root, zones=zones, cluster=settings,
                    quotas=quotas, services=services, generate=generate, classes=classes, warmup_s=warmup,
                    lending=parse_lending(doc.get("lending"), source))


def _client_count(g: Mapping[str, Any]) -> int:
    """Services a generate entry can expand into (at most: the folder may have fewer clients)."""
    clients = g.get("clients", 10)
    return len(clients) if isinstance(clients, list) else int(clients)


def _check_size(source: str, n_services: int, duration: int) -> None:
    """Refuse a scenario whose per-second arrays would pass the documented bounds, before any is allocated."""
    if n_services > MAX_SERVICES:
        raise config_error(source, "services", f"{n_services:,} services with generate: expanded",
                           f"at most {MAX_SERVICES:,} in one scenario: split it or generate fewer clients")
    cells = n_services * duration
    if cells > MAX_SERVICE_SECONDS:
        raise config_error(source, "duration_s",
                           f"{n_services:,} services x {duration:,} s = {cells:,} service-seconds, over the "
                           f"limit of {MAX_SERVICE_SECONDS:,} (the simulator holds per-second arrays of that size)",
                           f"shorten duration_s to at most {max(1, MAX_SERVICE_SECONDS // max(n_services, 1)):,} s "
                           "or simulate fewer services")


def _workloads_file(raw: Any, source: str, base: Path) -> str:
    """The ``workloads:`` path, checked before it is read: a small regular file, not the scenario itself."""
    path = _path(raw, "workloads", source, base, "the workload class YAML, e.g. workloads: classes.yaml",
                 folder_ok=False, contained=False)
    p = Path(path)
    try:
        same = Path(source).exists() and p.exists() and os.path.samefile(p, source)
        size = p.stat().st_size if p.exists() else 0
    except OSError:  # unreadable: the class loader names the file and the reason
        return path
    if same:
        raise config_error(source, "workloads", "points at this scenario file itself",
                           "point workloads: at a workload class file (classes: [...]), or drop it for the defaults")
    if size > MAX_WORKLOADS_BYTES:
        raise config_error(source, "workloads", f"{path} is {size:,} bytes, over the {MAX_WORKLOADS_BYTES:,}-byte limit",
                           "point workloads: at a workload class file (a few classes, a few KiB)")
    return path


def _path(raw: Any, where: str, source: str, base: Path, example: str, *, folder_ok: bool,
          file_ok: bool = True, contained: bool = True) -> str:
    """``base / raw`` as text, refused (ConfigError naming ``where``) when ``raw`` is not a path, when a
    relative one climbs out of ``base`` (where ``contained``; checked on the path as written, so a
    symlink inside ``base`` may point anywhere), or when it names something that exists but is not a
    regular file (or a folder, where ``folder_ok``): a device such as /dev/zero or a FIFO never ends."""
    if not isinstance(raw, str) or not raw or "\x00" in raw or len(raw) > 4096:
        raise config_error(source, where, f"expected a path, got {describe(raw)}", f"write {example}")
    joined = base / raw
    if contained and not Path(raw).is_absolute():
        top, full = os.path.abspath(base), os.path.abspath(joined)
        if os.path.commonpath([top, full]) != top:
            raise config_error(source, where, f"{describe(raw)} climbs out of {top}",
                               "put the file under that folder, or write its absolute path to read it elsewhere")
    try:
        mode = joined.stat().st_mode
    except (OSError, ValueError):  # missing or unreadable: its reader names the file and the fix
        return str(joined)
    kind_ok = (file_ok and stat_is_file(mode)) or (folder_ok and stat_is_dir(mode))
    if not kind_ok:
        wanted = " or ".join(w for w, ok in (("a regular file", file_ok), ("a folder", folder_ok)) if ok)
        raise config_error(source, where, f"{describe(raw)} is not {wanted} (a device, FIFO or socket is never read)",
                           f"write {example}")
    return str(joined)


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
        _name(s[key], f"{where}.{key}", source)
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
    if not isinstance(s.get("zones", []), list) or not all(isinstance(z, str) for z in s.get("zones", [])):
        raise config_error(source, f"{where}.zones", f"expected a list of zones, got {describe(s.get('zones'))}",
                           f"use zones from {sorted(zones)}")
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
        cold_start_s=_num(s, "cold_start_s", 60.0, where, source),
        tier=parse_service_tier(s.get("tier"), f"{where}.tier", source, arrivals is not None))


def _source(v: Any, where: str, source: str, kinds: tuple[str, ...], root: Path) -> Mapping[str, Any]:
    if not isinstance(v, dict):
        raise config_error(source, where, f"expected a mapping, got {describe(v)}", f"name one of {list(kinds)}")
    kind = [k for k in kinds if k in v]
    if len(kind) != 1:
        raise config_error(source, where, f"expected exactly one of {list(kinds)}, got {describe(sorted(map(str, v)))}",
                           "e.g. {servegen: language/m-large, client: 7} or {trace: FILE}")
    k = kind[0]
    allowed = _ARRIVAL_KEYS[k] if k in _ARRIVAL_KEYS else _CONSTANT_KEYS if k == "gpus" else _DEMAND_KEYS
    known_keys(source, where, v, allowed, "see the scenario format")
    out = dict(v)
    out["kind"] = k
    if k == "azure" and v[k] not in ("code", "conv"):
        raise config_error(source, f"{where}.azure", f"unknown Azure service {describe(v[k])}", "use code or conv")
    if k == "bundled" and v[k] not in ("azure-code", "azure-conv"):
        raise config_error(source, f"{where}.bundled", f"unknown bundled trace {describe(v[k])}",
                           "use azure-code or azure-conv")
    if k in ("trace", "servegen", "alibaba_gpu"):
        out["path"] = _path(v[k], f"{where}.{k}", source, root, f"{k}: a path under data_root",
                            folder_ok=k != "alibaba_gpu", file_ok=k != "servegen")
    if k == "gpus":
        out["gpus"] = whole_number(source, f"{where}.gpus", v["gpus"], 1, MAX_CONSTANT_GPUS,
                                   fix="the GPUs the job wants all the time, e.g. demand: {gpus: 24}")
    if k == "servegen":
        out["client"] = whole_number(source, f"{where}.client", v.get("client"), 0, 2**31 - 1,
                                     fix="name the ServeGen client id, e.g. client: 7")
    for key in ("rate_scale", "gpu_scale", "time_scale"):
        if key in v:
            out[key] = _scale(v[key], f"{where}.{key}", source)
    if "start_s" in v:
        out["start_s"] = finite_value(source, f"{where}.start_s", v["start_s"], 0.0, 1e10,
                                      fix="seconds into the trace, e.g. start_s: 75600")
    if "qos" in v:
        qos = v["qos"]
        if qos is not None and not (isinstance(qos, list) and qos and len(qos) <= 16 and all(
                isinstance(q, str) and 0 < len(q) <= 32 for q in qos)):
            raise config_error(source, f"{where}.qos", f"expected a list of QoS class names, got {describe(qos)}",
                               "write e.g. qos: [BE] (classes from the trace), or qos: null for all")
    return out


def _scale(raw: Any, where: str, source: str) -> float:
    x = finite_number(raw)
    if x is None or not 0 < x <= MAX_SCALE:
        raise config_error(source, where, f"expected a number > 0 and <= {MAX_SCALE:g}, got {describe(raw)}",
                           "write a positive factor, e.g. 0.5")
    return x


def _name(text: str, where: str, source: str) -> str:
    """``text`` when it is a printable name of at most :data:`MAX_NAME_CHARS` characters."""
    bad = next((c for c in text if unicodedata.category(c) in ("Cc", "Cf", "Cs", "Co", "Zl", "Zp")), None)
    if len(text) > MAX_NAME_CHARS or bad is not None:
        what = (f"{len(text):,} characters, over {MAX_NAME_CHARS}" if bad is None
                else f"holds the control or invisible character U+{ord(bad):04X}")
        raise config_error(source, where, f"{describe(text)} {what}",
                           "use a short printable name, e.g. letters, digits, '-' and '.'")
    return text


def _placeholders(text: str, where: str, source: str) -> None:
    """Refuse any ``{...}`` in a generate: text other than ``{i}`` and ``{client}``: the simulator
    expands it with ``str.format``, where ``{client.__class__}`` reads attributes and ``{i:>900000000}``
    builds a 900 MB string."""
    fix = "use only {i} and {client} as placeholders (write {{ and }} for literal braces)"
    try:
        fields = [(f, spec, conv) for _, f, spec, conv in string.Formatter().parse(text) if f is not None]
    except ValueError as exc:  # a lone { or }
        raise config_error(source, where, f"{describe(text)}: {exc}", fix) from exc
    for f, spec, conv in fields:
        if f not in _PLACEHOLDERS or spec or conv:
            field = "{" + f + (f"!{conv}" if conv else "") + (f":{spec}" if spec else "") + "}"
            raise config_error(source, where, f"placeholder {describe(field)} is not allowed", fix)


def _generate(g: Any, where: str, source: str, root: Path) -> Mapping[str, Any]:
    g = known_keys(source, where, g, _GENERATE, "see the scenario format")
    if "servegen" not in g:
        raise config_error(source, f"{where}.servegen", "missing", "name a ServeGen model folder, e.g. language/m-mid")
    clients = g.get("clients", 10)
    if not (isinstance(clients, int) and not isinstance(clients, bool) and 1 <= clients <= MAX_SERVICES) and \
            not (isinstance(clients, list) and 0 < len(clients) <= MAX_SERVICES and all(
                isinstance(c, int) and not isinstance(c, bool) and 0 <= c < 2**31 for c in clients)):
        raise config_error(source, f"{where}.clients", f"expected a count or a list of client ids, got {describe(clients)}",
                           f"use e.g. clients: 400, or a list of at most {MAX_SERVICES:,} ids >= 0")
    for key, value in g.items():
        if isinstance(value, str) and key != "servegen":
            _placeholders(value, f"{where}.{key}", source)
    out = dict(g)
    out["path"] = _path(g["servegen"], f"{where}.servegen", source, root, "servegen: a ServeGen model folder "
                        "under data_root, e.g. servegen/language/m-mid", folder_ok=True, file_ok=False)
    if "rate_scale" in g:
        out["rate_scale"] = _scale(g["rate_scale"], f"{where}.rate_scale", source)
    out["where"] = where
    return out


def _zones(v: Any, source: str) -> dict[str, int]:
    if not isinstance(v, dict) or not v:
        raise config_error(source, "zones", f"expected a mapping zone → GPUs, got {describe(v)}",
                           "e.g. zones: {zone-a: 40, zone-b: 40, zone-c: 40}")
    if len(v) > MAX_ZONES:
        raise config_error(source, "zones", f"{len(v):,} zones, over the limit of {MAX_ZONES}",
                           f"model at most {MAX_ZONES} zones (merge small ones)")
    out: dict[str, int] = {}
    for z, n in v.items():
        if not isinstance(z, str) or isinstance(n, bool) or not isinstance(n, int) or not 0 < n <= 1_000_000:
            raise config_error(source, f"zones.{str(z)[:60]}", f"GPUs must be an integer in 1..1,000,000, got {describe(n)}",
                               "give each zone its GPU count")
        out[_name(z, "zones", source)] = n
    return out


def _quota(q: Any, where: str, source: str) -> QuotaSpec:
    q = known_keys(source, where, q, ("namespace", "min_gpus", "max_gpus"), "e.g. {namespace: shop, min_gpus: 8}")
    if not isinstance(q.get("namespace"), str) or not q["namespace"]:
        raise config_error(source, f"{where}.namespace", "missing", "name the namespace")
    _name(q["namespace"], f"{where}.namespace", source)
    # 10**9 GPUs: far past any pool (64 zones x 1,000,000), and int64 sums of them cannot overflow.
    lo = _int(q, "min_gpus", 0, where + ".", source, lo=0, hi=10**9)
    hi = _int(q, "max_gpus", -1, where + ".", source, lo=-1, hi=10**9)
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
