"""A :class:`~ebb.config.scenario.Scenario` turned into the engine's arrays (:class:`ClusterInputs`).

Reading the traces is an adapter's work and the simulator may not import :mod:`ebb.sources`
(import contract "sim-offline"), so :func:`build_inputs` reads them through a
:class:`ScenarioSeries` it is handed (``ebb.sources.traces.scenario_series.TraceSeries`` in the
CLI and the sweep) and does the rest itself:

* ``generate:`` entries expand into one service per ServeGen client (the k busiest, or the listed
  ids; :func:`expand_services`), each validated like a written service; two services of one name
  are an :class:`~ebb.errors.InputError` naming the scenario file.
* Online services (``arrivals:``) get arrivals per second, batch services (``demand:``) GPUs
  wanted per second, every series exactly ``duration_s`` long.
* Namespaces are every service's and every quota's, sorted; a namespace without a quota has
  ``min`` 0 and no ``max`` (-1). Which QoS classes may borrow is the note's
  :class:`~ebb.decide.quota.QuotaPolicy` default (Guaranteed only).
* Each online service starts at the replicas its first minute needs at 70 % of capacity, within
  ``[max(min_replicas, 1), max_replicas]``: a warmed-up cluster, not a cold one.
* Each online service's ``tier:`` becomes a column of :class:`~ebb.sim.cluster.lending.ClusterTiers`
  (None when no service has one), and ``lending:`` and ``seed`` pass through.
* The scenario's ``warmup_s`` passes through (:mod:`ebb.sim.warmup`; refused when it is not shorter
  than ``duration_s``, which a sweep's knobs may have changed).
"""

from __future__ import annotations

import re

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from ebb.config.scenario import Scenario, ServiceSpec, service_from
from ebb.decide.quota import QoSClass, QuotaPolicy
from ebb.errors import InputError
from ebb.sim.cluster.engine import ClusterInputs
from ebb.sim.cluster.lending import ClusterTiers
from ebb.sim.warmup import check_warmup

__all__ = ["ScenarioSeries", "build_inputs", "expand_services"]

_START_UTILISATION = 0.7
"""Share of capacity the initial replicas serve in the first minute (the autoscalers' usual target)."""


class ScenarioSeries(Protocol):
    """Reads a scenario's arrival and demand sources as per-second arrays.

    Guarantees: every array is exactly ``seconds`` long (cut, or zero-padded past the source's
    end); loading errors keep their type (:class:`~ebb.errors.InputError` naming the file), and an
    arrivals error also names the service that asked for it; the same scenario and seed give the
    same arrays.
    """

    def client_ids(self, path: str, clients: int | Sequence[int]) -> tuple[int, ...]:
        """The ServeGen clients a ``generate:`` entry selects in the folder ``path``: the
        ``clients`` busiest (an int) or the listed ids, in the order the generator ranks them."""
        ...

    def arrivals(self, sc: Scenario, online: Sequence[ServiceSpec], seconds: int) -> np.ndarray:
        """Requests arriving per second, ``int32[len(online), seconds]``, one row per service."""
        ...

    def demand(self, service: ServiceSpec, seconds: int) -> np.ndarray:
        """GPUs a batch service wants per second, ``float64[seconds]``."""
        ...


_PLACEHOLDER = re.compile(r"\{\{|\}\}|\{i\}|\{client\}")


def _fill(text: str, i: int, client: int) -> str:
    """``text`` with ``{i}`` and ``{client}`` filled and ``{{``/``}}`` unescaped — literally, never
    through ``str.format`` (no attribute access, no padding, whatever the scenario reader let by)."""
    values = {"{{": "{", "}}": "}", "{i}": str(i), "{client}": str(client)}
    return _PLACEHOLDER.sub(lambda m: values[m.group()], text)


def expand_services(sc: Scenario, series: ScenarioSeries) -> tuple[ServiceSpec, ...]:
    """The scenario's services plus one per generated ServeGen client (validated like the rest)."""
    out = list(sc.services)
    names = {c.name for c in sc.classes}
    for g in sc.generate:
        ids = series.client_ids(g["path"], g.get("clients", 10))
        keys = {k: v for k, v in g.items() if k not in ("servegen", "clients", "rate_scale", "path", "where")}
        for i, cid in enumerate(ids):
            entry = {k: (_fill(v, i, cid) if isinstance(v, str) else v) for k, v in keys.items()}
            entry.setdefault("name", f"{Path(g['path']).name}-{cid}")
            entry.setdefault("namespace", "default")
            entry["arrivals"] = {"servegen": g["servegen"], "client": cid, "rate_scale": g.get("rate_scale", 1.0)}
            out.append(service_from(entry, f"{g['where']} (client {cid})", sc.source, sc.zones, names, sc.data_root))
    seen: set[str] = set()
    for s in out:
        if s.name in seen:
            raise InputError(f"two services are named {s.name!r}", path=sc.source,
                             fix="give generated services a name pattern with {client}")
        seen.add(s.name)
    return tuple(out)


def build_inputs(sc: Scenario, series: ScenarioSeries) -> ClusterInputs:
    """Arrays for the engine: arrivals and demand per second over ``[0, duration_s)``."""
    check_warmup(sc.warmup_s, sc.duration_s, flag="warmup_s")
    services = expand_services(sc, series)
    online = [s for s in services if s.online]
    batch = [s for s in services if not s.online]
    t = sc.duration_s
    arrivals = series.arrivals(sc, online, t)
    demand = np.zeros((len(batch), t))
    for k, s in enumerate(batch):
        demand[k] = series.demand(s, t)
    zones = tuple(sc.zones)
    ns_names = tuple(sorted({s.namespace for s in services} | {q.namespace for q in sc.quotas}))
    ns_index = {n: i for i, n in enumerate(ns_names)}
    qmin = np.zeros(len(ns_names), dtype=np.int64)
    qmax = np.full(len(ns_names), -1, dtype=np.int64)
    for q in sc.quotas:
        qmin[ns_index[q.namespace]] = q.min_gpus
        qmax[ns_index[q.namespace]] = -1 if q.max_gpus is None else q.max_gpus
    class_names = tuple(c.name for c in sc.classes)
    policy = QuotaPolicy()  # which QoS classes may borrow: the note's defaults (Guaranteed only)

    def col(vals: list[Any], dtype: Any) -> Any:
        return np.asarray(vals, dtype=dtype)

    capacity = col([s.capacity_rps for s in online], float)
    first = arrivals[:, :60].mean(axis=1) if t else np.zeros(len(online))
    lo, hi = col([s.min_replicas for s in online], np.int64), col([s.max_replicas for s in online], np.int64)
    initial = np.clip(np.ceil(first / np.maximum(capacity, 1e-9) / _START_UTILISATION),
                      np.maximum(lo, 1), hi).astype(np.int64)
    return ClusterInputs(
        names=tuple(s.name for s in online), namespaces=col([ns_index[s.namespace] for s in online], np.int64),
        class_index=col([class_names.index(s.class_name) for s in online], np.int64),
        priority=col([s.priority for s in online], np.int64), arrivals=arrivals, capacity_rps=capacity,
        service_s=col([s.service_ms / 1000.0 for s in online], float), slo_s=col([s.slo_ms / 1000.0 for s in online], float),
        min_replicas=lo, max_replicas=hi,
        zone_mask=np.array([[z in s.zones for z in zones] for s in online], dtype=bool).reshape(len(online), len(zones)),
        gpus=col([s.gpus_per_replica for s in online], np.int64),
        may_borrow=col([policy.may_borrow(QoSClass(s.qos)) for s in online], bool),
        cold_start_s=col([int(round(s.cold_start_s)) for s in online], np.int64),
        batch_names=tuple(s.name for s in batch), batch_namespaces=col([ns_index[s.namespace] for s in batch], np.int64),
        batch_priority=col([s.priority for s in batch], np.int64),
        batch_class_index=col([class_names.index(s.class_name) for s in batch], np.int64),
        batch_may_borrow=col([policy.may_borrow(QoSClass(s.qos)) for s in batch], bool), batch_demand=demand, zones=zones,
        zone_gpus=col([sc.zones[z] for z in zones], np.int64), namespace_names=ns_names, quota_min=qmin,
        quota_max=qmax, class_names=class_names, initial=initial, warmup_s=sc.warmup_s, tiers=_tiers(online),
        checkpoint_s=sc.lending.checkpoint_s, restart_gpu_s=sc.lending.restart_gpu_s, seed=sc.seed)


def _tiers(online: Sequence[ServiceSpec]) -> ClusterTiers | None:
    """The online services' asleep tiers as columns (NaN ``wake_s``: none); None when no service has one."""
    if all(s.tier is None for s in online):
        return None
    nan = float("nan")
    return ClusterTiers(wake_s=np.array([s.tier.wake_s if s.tier else nan for s in online]),
                        max_replicas=np.array([s.tier.max_replicas if s.tier else 0 for s in online], dtype=np.int64),
                        ttl_s=np.array([s.tier.ttl_s if s.tier else nan for s in online]),
                        fail=np.array([s.tier.fail if s.tier else 0.0 for s in online]),
                        reserve=np.array([s.tier.reserve if s.tier and s.tier.reserve is not None else nan
                                          for s in online]))
