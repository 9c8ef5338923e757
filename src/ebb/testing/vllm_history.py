"""A week of vLLM-shaped Prometheus history generated from a real trace, for ``promtool`` backfills in tests.

:func:`week_trace` builds a week of requests from a bundled 30-minute slice of the Azure LLM
inference trace (:mod:`ebb.sources.traces`): the slice is repeated 336 times back to back and each
request kept with probability ``keep · day(t) · weekend(t)``, where ``day(t) = 0.15 + 0.85 · (1 −
cos(2π (hour − 4) / 24)) / 2`` (trough at 04:00, peak at 16:00 UTC) and ``weekend(t) = 0.6`` on the
6th and 7th days (the week starts on a Monday). Arrivals, prompt and output sizes are the slice's own.

:func:`fleet_history` turns it into what a vLLM fleet behind an HPA would have exported, scraped every
``scrape_s`` seconds at a fixed phase:

* per request, synthetic latencies (documented, deterministic for ``seed``): TTFT ``(0.03 s + 120 µs
  per prompt token) · LogNormal(0, 0.6)``; time per output token ``20 ms · LogNormal(0, 0.2)``;
  end-to-end = TTFT + output tokens × that; queueing 20 % of the TTFT, running time the rest;
* the replica gauge ``kube_deployment_status_replicas`` (kube-state-metrics): the trailing 10-minute
  arrival rate over ``per_replica_rps``, rounded up, at least 1 and at most ``max_replicas``, held
  for 5 minutes after it falls (the HPA's scale-down stabilisation);
* one pod per replica slot while the gauge covers it, a new pod name (counters from 0) each time a
  slot comes back; each finished request is counted by one pod up at its completion; the pod in slot
  0 restarts once mid-week (same labels, counters reset to 0);
* per pod, vLLM V1's series (names and bucket bounds of ``vllm/v1/metrics/loggers.py`` v0.20.1,
  ``max_model_len`` 8192): ``vllm:request_success_total`` (``finished_reason`` stop/length),
  ``vllm:request_prompt_tokens``, ``vllm:request_generation_tokens``,
  ``vllm:time_to_first_token_seconds``, ``vllm:e2e_request_latency_seconds`` and
  ``vllm:request_inference_time_seconds`` histograms, and ``up``.

:func:`write_openmetrics` writes it as OpenMetrics text for ``promtool tsdb create-blocks-from
openmetrics`` and :func:`backfilled_prometheus` serves it from a real Prometheus on loopback. The
:class:`FleetHistory` keeps the truth the tests compare the reconstruction with.
"""

from __future__ import annotations

import math
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Final

import numpy as np
import numpy.typing as npt

from ebb.demo.local_prometheus import LocalPrometheus, write_config
from ebb.model.ids import TraceName
from ebb.model.trace import RequestTrace
from ebb.sources.traces import bundled_trace

__all__ = ["E2E_BOUNDS", "TOKEN_BOUNDS", "TTFT_BOUNDS", "FleetHistory", "backfilled_prometheus", "fleet_history",
           "week_trace", "write_azure_csv", "write_openmetrics"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
WEEK_S: Final = 7 * 86_400
SLICE_S: Final = 1800.0
TOKEN_BOUNDS: Final = (1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 2000.0, 5000.0, math.inf)
"""``build_1_2_5_buckets(8192)`` and ``+Inf``: vLLM's prompt and generation token buckets."""
TTFT_BOUNDS: Final = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                      20.0, 40.0, 80.0, 160.0, 640.0, 2560.0, math.inf)
E2E_BOUNDS: Final = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
                     480.0, 960.0, 1920.0, 7680.0, math.inf)


def week_trace(base: str = "azure-code", *, keep: float = 0.5, seed: int = 0) -> RequestTrace:
    """A week of requests from the bundled slice ``base`` (module docstring: the modulation)."""
    tr = bundled_trace(base)
    copies = int(WEEK_S // SLICE_S)
    arr = (tr.arrival_s[None, :] + SLICE_S * np.arange(copies)[:, None]).ravel()
    tin, tout = np.tile(tr.tokens_in, copies), np.tile(tr.tokens_out, copies)
    hour = (arr % 86_400) / 3600.0
    day = 0.15 + 0.85 * (1.0 - np.cos(2 * np.pi * (hour - 4.0) / 24.0)) / 2.0
    weekend = np.where((arr // 86_400) % 7 >= 5, 0.6, 1.0)
    kept = np.random.default_rng(seed).random(len(arr)) < keep * day * weekend
    arrival_ms = np.floor(arr[kept] * 1000.0)  # whole ms, as an Azure CSV written from it holds them
    return RequestTrace(TraceName(f"{base}-week"), arrival_ms / 1000.0, tin[kept], tout[kept],
                        source=f"bundled:{base} x{copies}, day/night thinned")


@dataclass(frozen=True)
class FleetHistory:
    """The generated fleet: scrape times, the replica gauge, and each request's latencies and pod."""

    start_unix_s: float
    scrape_unix_s: FloatArray
    replicas: IntArray
    """Gauge value at each scrape."""
    trace: RequestTrace
    ttft_s: FloatArray
    e2e_s: FloatArray
    running_s: FloatArray
    done_scrape: IntArray
    """Index of the first scrape at or after each request's completion (len(scrapes): never counted)."""
    pod: list[tuple[str, int, int]]
    """Each pod series: (pod name, first scrape, last scrape), one entry per process (a restart starts another)."""
    slot_of: IntArray
    """The slot (pod) that counted each request (-1: finished after the last scrape)."""
    restart_scrape: int

    def replica_integral_s(self, start_unix_s: float, end_unix_s: float) -> float:
        """Replica-seconds of the gauge over ``[start, end]``, each sample held until the next (the last
        until ``end``; before the first sample, nothing)."""
        edges = np.concatenate([self.scrape_unix_s, [np.inf]])
        lo = np.clip(edges[:-1], start_unix_s, end_unix_s)
        hi = np.clip(edges[1:], start_unix_s, end_unix_s)
        return float(np.sum(self.replicas * (hi - lo)))


def _replica_gauge(arrival_s: FloatArray, scrape_rel_s: FloatArray, per_replica_rps: float,
                   max_replicas: int, scrape_s: float) -> IntArray:
    per_scrape = np.bincount(np.searchsorted(scrape_rel_s, arrival_s, side="left"),
                             minlength=len(scrape_rel_s) + 1)[: len(scrape_rel_s)].astype(np.float64)
    w = max(1, int(round(600.0 / scrape_s)))
    c = np.concatenate([[0.0], np.cumsum(per_scrape)])
    rate = (c[w:] - c[:-w]) / 600.0
    rate = np.concatenate([c[1:w] / 600.0, rate])
    desired = np.clip(np.ceil(rate / per_replica_rps), 1, max_replicas)
    hold = max(1, int(round(300.0 / scrape_s)))
    padded = np.concatenate([np.full(hold - 1, desired[0]), desired])
    held = np.lib.stride_tricks.sliding_window_view(padded, hold).max(axis=1)
    return np.asarray(held, dtype=np.int64)


def _runs(up: npt.NDArray[np.bool_]) -> list[tuple[int, int]]:
    d = np.diff(np.concatenate([[0], up.astype(np.int8), [0]]))
    return list(zip(np.flatnonzero(d == 1).tolist(), (np.flatnonzero(d == -1) - 1).tolist(), strict=True))


def fleet_history(trace: RequestTrace, start_unix_s: float, *, scrape_s: float = 30.0, phase_s: float = 7.0,
                  per_replica_rps: float = 0.8, max_replicas: int = 8, seed: int = 0) -> FleetHistory:
    """The fleet serving ``trace`` from ``start_unix_s`` (module docstring: what it exports)."""
    rng = np.random.default_rng(seed)
    n = trace.requests
    tin = trace.tokens_in.astype(np.float64)
    ttft = (0.03 + 120e-6 * tin) * rng.lognormal(0.0, 0.6, n)
    tpot = 0.02 * rng.lognormal(0.0, 0.2, n)
    e2e = ttft + trace.tokens_out * tpot
    running = e2e - 0.2 * ttft
    span = WEEK_S if trace.duration_s <= WEEK_S else trace.duration_s
    scrape_rel = np.asarray(phase_s + scrape_s * np.arange(int((span - phase_s) // scrape_s) + 1), dtype=np.float64)
    replicas = _replica_gauge(trace.arrival_s, scrape_rel, per_replica_rps, max_replicas, scrape_s)
    done = np.searchsorted(scrape_rel, trace.arrival_s + e2e, side="left")
    counted = done < len(scrape_rel)
    slot = np.full(n, -1, dtype=np.int64)
    slot[counted] = rng.integers(0, 1 << 30, int(counted.sum())) % replicas[done[counted]]
    restart = len(scrape_rel) // 2 + 123
    pods: list[tuple[str, int, int]] = []
    for s in range(max_replicas):
        for k, (a, b) in enumerate(_runs(replicas > s)):
            name = f"vllm-{s}-{k}"
            if a < restart <= b and s == 0:
                pods += [(name, a, restart - 1), (name, restart, b)]
            else:
                pods.append((name, a, b))
    return FleetHistory(start_unix_s, np.asarray(start_unix_s + scrape_rel, dtype=np.float64), replicas, trace, ttft, e2e, running, done, pods,
                        slot, restart)


def _cum(idx: IntArray, weights: FloatArray | None, length: int) -> FloatArray:
    return np.cumsum(np.bincount(idx, weights=weights, minlength=length)[:length].astype(np.float64))


def _fmt(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else repr(float(v))


def _le(b: float) -> str:
    return "+Inf" if math.isinf(b) else repr(float(b))


def _lines(h: FleetHistory) -> Iterator[str]:
    """OpenMetrics lines, one family after another (module docstring)."""
    tr = h.trace
    slot_no = {name: int(name.split("-")[1]) for name, _, _ in h.pod}
    t_txt = [_fmt(round(t, 3)) for t in h.scrape_unix_s]
    reason = np.where(tr.tokens_out >= 2000, "length", "stop")
    labels = 'job="vllm"'

    def pod_requests(name: str, a: int, b: int) -> npt.NDArray[np.bool_]:
        return np.asarray((h.slot_of == slot_no[name]) & (h.done_scrape >= a) & (h.done_scrape <= b), dtype=np.bool_)

    def series(name: str, lab: str, a: int, values: FloatArray) -> Iterator[str]:
        for j, v in enumerate(values):
            yield f"{name}{{{lab}}} {_fmt(v)} {t_txt[a + j]}"

    yield "# TYPE up gauge"
    for pod, a, b in h.pod:
        yield from series("up", f'{labels},pod="{pod}"', a, np.ones(b - a + 1))
    yield "# TYPE kube_deployment_status_replicas gauge"
    yield from series("kube_deployment_status_replicas", 'namespace="serving",deployment="vllm-llama"', 0,
                      h.replicas.astype(np.float64))
    yield "# TYPE vllm:request_success counter"
    for pod, a, b in h.pod:
        mine = pod_requests(pod, a, b)
        for why in ("stop", "length"):
            m = mine & (reason == why)
            yield from series("vllm:request_success_total", f'{labels},pod="{pod}",finished_reason="{why}"', a,
                              _cum(h.done_scrape[m] - a, None, b - a + 1))
    for family, values, bounds in (("vllm:request_prompt_tokens", tr.tokens_in.astype(np.float64), TOKEN_BOUNDS),
                                   ("vllm:request_generation_tokens", tr.tokens_out.astype(np.float64), TOKEN_BOUNDS),
                                   ("vllm:time_to_first_token_seconds", h.ttft_s, TTFT_BOUNDS),
                                   ("vllm:e2e_request_latency_seconds", h.e2e_s, E2E_BOUNDS),
                                   ("vllm:request_inference_time_seconds", h.running_s, E2E_BOUNDS)):
        yield f"# TYPE {family} histogram"
        for pod, a, b in h.pod:
            m = pod_requests(pod, a, b)
            idx, v, length = h.done_scrape[m] - a, values[m], b - a + 1
            lab = f'{labels},pod="{pod}"'
            for le in bounds:
                yield from series(f"{family}_bucket", f'{lab},le="{_le(le)}"', a,
                                  _cum(idx[v <= le], None, length))
            yield from series(f"{family}_sum", lab, a, _cum(idx, v, length))
            yield from series(f"{family}_count", lab, a, _cum(idx, None, length))
    yield "# EOF"


def write_openmetrics(h: FleetHistory, path: Path) -> int:
    """Write ``h`` as OpenMetrics text at ``path``; returns the number of sample lines."""
    n = 0
    with path.open("w", encoding="utf-8") as fh:
        out: IO[str] = fh
        buf: list[str] = []
        for line in _lines(h):
            buf.append(line)
            if len(buf) >= 100_000:
                out.write("\n".join(buf) + "\n")
                n += len(buf)
                buf.clear()
        out.write("\n".join(buf) + "\n")
        n += len(buf)
    return n


@contextmanager
def backfilled_prometheus(openmetrics: Path, data_dir: Path, *, prometheus: str = "prometheus",
                          promtool: str = "promtool") -> Iterator[LocalPrometheus]:
    """A Prometheus on loopback serving ``openmetrics`` (backfilled with ``promtool tsdb create-blocks-from
    openmetrics`` into ``data_dir/tsdb``), scraping nothing, keeping ten years; stopped when the block ends."""
    tsdb = data_dir / "tsdb"
    tsdb.mkdir(parents=True, exist_ok=True)
    done = subprocess.run([promtool, "tsdb", "create-blocks-from", "openmetrics", "--max-block-duration=168h",
                           str(openmetrics), str(tsdb)], capture_output=True, text=True, check=False, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"promtool failed ({done.returncode}): {done.stderr[-2000:]}")
    config = write_config(data_dir / "prometheus.yml", [], scrape_interval_s=30.0)
    server = LocalPrometheus(prometheus, data_dir, config, log_path=data_dir / "prometheus.log", retention="10y",
                             ready_within_s=120.0)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def write_azure_csv(trace: RequestTrace, path: Path, start_unix_s: float) -> None:
    """``trace`` as an Azure LLM inference CSV (``TIMESTAMP,ContextTokens,GeneratedTokens``, UTC, µs) whose
    first row is ``start_unix_s`` plus its first arrival: the same trace given as a file."""
    ns = (np.int64(round(start_unix_s)) * 1_000_000_000 + np.rint(trace.arrival_s * 1e9).astype(np.int64))
    stamps = np.datetime_as_string(ns.astype("datetime64[ns]"), unit="us")
    rows = (f"{s.replace('T', ' ')},{a},{b}" for s, a, b in zip(stamps, trace.tokens_in, trace.tokens_out, strict=True))
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n" + "\n".join(rows) + "\n")
