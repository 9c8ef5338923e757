"""A :class:`~ebb.config.scenario.Scenario` turned into the engine's arrays (the CLI layer: it reads traces
through :mod:`ebb.sources` and hands arrays to the offline simulator), and the sweep's cluster job.

Arrival sources (``arrivals:`` of a service):

* ``{azure: code|conv}`` — the full Azure LLM 2023 file under ``data_root/azure-llm-2023/``; both
  services share one clock (``load_azure_services``: the earlier file's first request is t = 0).
* ``{bundled: azure-code|azure-conv}`` — the 30-minute slices shipped in the package (needs no data).
* ``{trace: FILE}`` — any trace ``ebb simulate`` reads (request log or counts), binned per second.
* ``{servegen: MODEL_FOLDER, client: ID, rate_scale: X}`` — one ServeGen client's rate windows turned
  into arrivals as ServeGen's generator does (``load_servegen_clients``; seed = the scenario's).
* ``generate:`` entries expand into one service per ServeGen client (the k busiest, or listed ids).

Demand sources (``demand:``): ``{alibaba_gpu: POD_LIST, qos: [BE], time_scale: K}`` — GPUs held by live
pods of those QoS classes (Alibaba GPU 2023), time compressed by ``K`` (149 days / 149 = 1 day), and
``gpu_scale: M`` for a tenant M times the trace's size (default 1).

Every series is cut or zero-padded to the scenario's ``duration_s``. Loading errors keep their
type (:class:`~ebb.errors.InputError` naming the file) and gain the service that asked for it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from ebb.config.scenario import (
    ClusterSettings,
    Scenario,
    ServiceSpec,
    load_scenario,
    service_from,
)
from ebb.decide.quota import QoSClass, QuotaPolicy
from ebb.errors import ConfigError, InputError
from ebb.model.trace import CountSeries, RequestTrace
from ebb.sim.cluster.engine import ClusterInputs
from ebb.sim.cluster.run import JOB_KNOBS, run_policy
from ebb.sources.traces import bundled_trace, load_trace
from ebb.sources.traces.alibaba_gpu import gpu_demand_series, load_alibaba_gpu_pods
from ebb.sources.traces.azure_pair import load_azure_services
from ebb.sources.traces.servegen import load_servegen_clients, servegen_client_rates

__all__ = ["build_inputs", "cluster_job", "expand_services"]


def expand_services(sc: Scenario) -> tuple[ServiceSpec, ...]:
    """The scenario's services plus one per generated ServeGen client (validated like the rest)."""
    out = list(sc.services)
    names = {c.name for c in sc.classes}
    for g in sc.generate:
        ids = servegen_client_rates(g["path"], g.get("clients", 10)).client_ids
        keys = {k: v for k, v in g.items() if k not in ("servegen", "clients", "rate_scale", "path", "where")}
        for i, cid in enumerate(ids):
            entry = {k: (v.format(i=i, client=cid) if isinstance(v, str) else v) for k, v in keys.items()}
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


def build_inputs(sc: Scenario) -> ClusterInputs:
    """Arrays for the engine: arrivals and demand per second over ``[0, duration_s)``."""
    services = expand_services(sc)
    online = [s for s in services if s.online]
    batch = [s for s in services if not s.online]
    t = sc.duration_s
    arrivals = _arrivals(sc, online, t)
    demand = np.zeros((len(batch), t))
    for k, s in enumerate(batch):
        demand[k] = _demand(s, t)
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
    # start each service at the replicas its first minute needs (a warmed-up cluster, not a cold one)
    first = arrivals[:, :60].mean(axis=1) if t else np.zeros(len(online))
    lo, hi = col([s.min_replicas for s in online], np.int64), col([s.max_replicas for s in online], np.int64)
    initial = np.clip(np.ceil(first / np.maximum(capacity, 1e-9) / 0.7), np.maximum(lo, 1), hi).astype(np.int64)
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
        zone_gpus=col([sc.zones[z] for z in zones], np.int64), namespace_names=ns_names, quota_min=qmin * 1,
        quota_max=qmax, class_names=class_names, initial=initial)


def _fit(counts: np.ndarray, t: int) -> np.ndarray:
    out = np.zeros(t, dtype=np.int32)
    n = min(t, len(counts))
    out[:n] = counts[:n]
    return out


def _per_second(trace: RequestTrace | CountSeries, t: int) -> np.ndarray:
    if isinstance(trace, RequestTrace):
        return _fit(np.bincount(trace.arrival_s.astype(np.int64), minlength=1), t)
    if trace.bin_s == 1.0:
        return _fit(trace.counts, t)
    edges = (np.arange(len(trace.counts)) * trace.bin_s).astype(np.int64)  # a bin's arrivals at its start
    return _fit(np.bincount(edges, weights=trace.counts, minlength=1).astype(np.int32), t)


def _arrivals(sc: Scenario, online: list[ServiceSpec], t: int) -> np.ndarray:
    out = np.zeros((len(online), t), dtype=np.int32)
    servegen: dict[tuple[str, float], list[tuple[int, int]]] = {}
    azure: dict[str, RequestTrace] | None = None
    for i, s in enumerate(online):
        src: Mapping[str, Any] = s.arrivals or {}
        kind = src["kind"]
        try:
            if kind == "servegen":
                servegen.setdefault((src["path"], float(src.get("rate_scale", 1.0))), []).append((i, int(src["client"])))
            elif kind == "azure":
                if azure is None:
                    root = sc.data_root / "azure-llm-2023"
                    azure = load_azure_services(root / "AzureLLMInferenceTrace_code.csv",
                                                root / "AzureLLMInferenceTrace_conv.csv")
                which = str(src["azure"])
                if which not in azure:
                    raise InputError(f"unknown Azure service {which!r}", path=sc.source, fix=f"use one of {sorted(azure)}")
                out[i] = _per_second(azure[which], t)
            elif kind == "bundled":
                out[i] = _per_second(bundled_trace(str(src["bundled"])), t)
            else:
                out[i] = _per_second(load_trace(src["path"]), t)
        except InputError as exc:
            raise InputError(f"service {s.name!r}: {exc}", path=sc.source, fix="check the service's arrivals:") from exc
    for (path, scale), rows in servegen.items():
        got = load_servegen_clients(path, clients=sorted({c for _, c in rows}), start_s=0.0, end_s=float(t),
                                    rate_scale=scale, seed=sc.seed)
        where = {cid: k for k, cid in enumerate(got.client_ids)}
        for i, cid in rows:
            out[i] = _fit(got.counts[where[cid]], t)
    return out


def _demand(s: ServiceSpec, t: int) -> np.ndarray:
    src: Mapping[str, Any] = s.demand or {}
    pods = load_alibaba_gpu_pods(src["path"])
    qos = src.get("qos", ["BE"])
    series = gpu_demand_series(pods, qos=tuple(qos) if qos is not None else None, start_s=float(src.get("start_s", 0.0)),
                               end_s=float(src.get("start_s", 0.0)) + t, bin_s=1.0,
                               time_scale=float(src.get("time_scale", 1.0)))
    out = np.zeros(t)
    n = min(t, len(series.gpus))
    out[:n] = series.gpus[:n] * float(src.get("gpu_scale", 1.0))
    return out


def cluster_job(path: str, policy: str, knobs: Mapping[str, float], seed: int) -> dict[str, Any]:
    """One sweep job: the scenario at ``path`` with ``knobs`` (:data:`JOB_KNOBS`) under ``policy``."""
    sc = load_scenario(Path(path))
    bad = sorted(set(knobs) - set(JOB_KNOBS))
    if bad:
        raise ConfigError(f"cluster sweep: unknown knob {bad[0]!r} (fix: use {', '.join(JOB_KNOBS)})")
    cluster = ClusterSettings(
        disruption_budget=int(knobs.get("disruption_budget", sc.cluster.disruption_budget)),
        writes_per_100ms=int(knobs.get("writes_per_100ms", sc.cluster.writes_per_100ms)))
    sc = replace(sc, seed=seed, cluster=cluster,
                 duration_s=int(knobs.get("duration_s", sc.duration_s)))
    res = run_policy(sc, build_inputs(sc), policy, record_batches=False)
    card = dict(res.scorecard)
    card.pop("per_service")
    return card
