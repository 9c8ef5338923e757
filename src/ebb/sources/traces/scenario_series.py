"""A cluster scenario's trace sources read as per-second arrays (the simulator's ``ScenarioSeries``).

:class:`TraceSeries` is what :func:`ebb.sim.cluster.inputs.build_inputs` reads a scenario through
(the simulator may not import this package). Arrival sources (``arrivals:`` of a service):

* ``{azure: code|conv}`` — the full Azure LLM 2023 file under ``data_root/azure-llm-2023/``; both
  services share one clock (``load_azure_services``: the earlier file's first request is t = 0).
* ``{bundled: azure-code|azure-conv}`` — the 30-minute slices shipped in the package (needs no data).
* ``{trace: FILE}`` — any trace ``ebb simulate`` reads (request log or counts), binned per second.
* ``{servegen: MODEL_FOLDER, client: ID, rate_scale: X}`` — one ServeGen client's rate windows turned
  into arrivals as ServeGen's generator does (``load_servegen_clients``; seed = the scenario's).

Demand sources (``demand:``): ``{alibaba_gpu: POD_LIST, qos: [BE], time_scale: K}`` — GPUs held by live
pods of those QoS classes (Alibaba GPU 2023), time compressed by ``K`` (149 days / 149 = 1 day), and
``gpu_scale: M`` for a tenant M times the trace's size (default 1).

Every series is cut or zero-padded to the asked length. Loading errors keep their type
(:class:`~ebb.errors.InputError` naming the file); an arrivals error also gains the service that
asked for it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ebb.config.scenario import Scenario, ServiceSpec
from ebb.errors import InputError
from ebb.model.trace import CountSeries, RequestTrace
from ebb.sources.traces import bundled_trace, load_trace
from ebb.sources.traces.alibaba_gpu import gpu_demand_series, load_alibaba_gpu_pods
from ebb.sources.traces.azure_pair import load_azure_services
from ebb.sources.traces.servegen import load_servegen_clients, servegen_client_rates

__all__ = ["TraceSeries", "per_second"]


def _fit(counts: np.ndarray, t: int) -> np.ndarray:
    out = np.zeros(t, dtype=np.int32)
    n = min(t, len(counts))
    out[:n] = counts[:n]
    return out


def per_second(trace: RequestTrace | CountSeries, t: int) -> np.ndarray:
    """Arrivals per second over ``[0, t)``, ``int32[t]``: a request log binned by arrival second, a
    count series re-binned (a bin's arrivals at its start)."""
    if isinstance(trace, RequestTrace):
        return _fit(np.bincount(trace.arrival_s.astype(np.int64), minlength=1), t)
    if trace.bin_s == 1.0:
        return _fit(trace.counts, t)
    edges = (np.arange(len(trace.counts)) * trace.bin_s).astype(np.int64)
    return _fit(np.bincount(edges, weights=trace.counts, minlength=1).astype(np.int32), t)


class TraceSeries:
    """Reads a scenario's sources from the trace files (``ebb.sim.cluster.inputs.ScenarioSeries``)."""

    def client_ids(self, path: str, clients: int | Sequence[int]) -> tuple[int, ...]:
        """The ServeGen clients ``clients`` selects in the folder ``path`` (:func:`servegen_client_rates`)."""
        return tuple(servegen_client_rates(path, clients).client_ids)

    def arrivals(self, sc: Scenario, online: Sequence[ServiceSpec], seconds: int) -> np.ndarray:
        """Requests per second, ``int32[len(online), seconds]``; ServeGen clients of one folder and
        scale are sampled together (one generator, the scenario's seed)."""
        t = seconds
        out = np.zeros((len(online), t), dtype=np.int32)
        servegen: dict[tuple[str, float], list[tuple[int, int]]] = {}
        azure: dict[str, RequestTrace] | None = None
        for i, s in enumerate(online):
            src: Mapping[str, Any] = s.arrivals or {}
            kind = src["kind"]
            try:
                if kind == "servegen":
                    servegen.setdefault((src["path"], float(src.get("rate_scale", 1.0))), []).append(
                        (i, int(src["client"])))
                elif kind == "azure":
                    if azure is None:
                        root = sc.data_root / "azure-llm-2023"
                        azure = load_azure_services(root / "AzureLLMInferenceTrace_code.csv",
                                                    root / "AzureLLMInferenceTrace_conv.csv")
                    which = str(src["azure"])
                    if which not in azure:
                        raise InputError(f"unknown Azure service {which!r}", path=sc.source,
                                         fix=f"use one of {sorted(azure)}")
                    out[i] = per_second(azure[which], t)
                elif kind == "bundled":
                    out[i] = per_second(bundled_trace(str(src["bundled"])), t)
                else:
                    out[i] = per_second(load_trace(src["path"]), t)
            except InputError as exc:
                raise InputError(f"service {s.name!r}: {exc}", path=sc.source,
                                 fix="check the service's arrivals:") from exc
        for (path, scale), rows in servegen.items():
            got = load_servegen_clients(path, clients=sorted({c for _, c in rows}), start_s=0.0, end_s=float(t),
                                        rate_scale=scale, seed=sc.seed)
            where = {cid: k for k, cid in enumerate(got.client_ids)}
            for i, cid in rows:
                out[i] = _fit(got.counts[where[cid]], t)
        return out

    def demand(self, service: ServiceSpec, seconds: int) -> np.ndarray:
        """GPUs held per second by the trace's live pods of the asked QoS classes, ``float64[seconds]``;
        ``{gpus: N}`` (an elastic job that always wants N) is N every second."""
        t = seconds
        src: Mapping[str, Any] = service.demand or {}
        if src.get("kind") == "gpus":
            return np.full(t, float(src["gpus"]))
        pods = load_alibaba_gpu_pods(src["path"])
        qos = src.get("qos", ["BE"])
        start = float(src.get("start_s", 0.0))
        series = gpu_demand_series(pods, qos=tuple(qos) if qos is not None else None, start_s=start,
                                   end_s=start + t, bin_s=1.0, time_scale=float(src.get("time_scale", 1.0)))
        out = np.zeros(t)
        n = min(t, len(series.gpus))
        out[:n] = series.gpus[:n] * float(src.get("gpu_scale", 1.0))
        return out
