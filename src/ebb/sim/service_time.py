"""The service-time request model: any GPU service, not only an LLM (order fulfilment, recommendation, diffusion).

Each request holds one of the replica's ``concurrency`` slots for its service time ``S`` and then
finishes: ``start = admission``, ``finish = start + S × slowdown`` (the injected fault's multiplier,
1 without one). There is no prefill/decode split and no batching effect: the slots are independent,
so with a constant ``S`` one replica serves exactly ``concurrency / S`` requests per second, and
arrivals above that rate wait in the router queue (FIFO, never dropped).

Where ``S`` comes from, per request:

* the trace's own ``service_s`` column (``--service-time-column``, e.g. ``exec_time_seconds`` or
  ``finished-admitted``), taken as measured; or
* when the trace has none (count series, ServeGen): a lognormal fitted to two quantiles an SRE
  reads off a dashboard, the median and the p99 (``sigma = ln(p99 / median) / 2.326``; p99 equal
  to the median = a constant service time). Draws come from ``numpy.random.default_rng([seed,
  0x5E7])``, so equal traces and seeds give equal service times in every policy's run and in the
  oracle's search.

Everything else — routing to the least-loaded ready replica with a free slot, the cold start,
scale-down victims that drain, billing, the metric pipelines, the scoring — is the request engine's
(:mod:`ebb.sim.request_engine`), which calls :func:`service_admitter` instead of its LLM admitter
when ``SimSettings.service`` is set. SLO: a request's "first token" is its service start, so the
TTFT limit bounds the queue wait and the end-to-end limit bounds wait + service.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

from ebb.model.trace import RequestTrace

FloatArray = npt.NDArray[np.float64]

Z99 = 2.3263478740408408
"""The standard normal's 0.99 quantile: ``p99 = median × exp(Z99 × sigma)`` for a lognormal."""
MAX_CONCURRENCY = 100_000
"""Most slots one replica may have: past every real server's concurrency limit."""
_SEED_TAG = 0x5E7  # a second seed word, so service times never reuse the arrival generator's stream


@dataclass(frozen=True)
class ServiceTimeModel:
    """Per-replica concurrency and, for traces without a service-time column, the fitted distribution.

    ``median_s``/``p99_s`` (seconds) define the lognormal of the module docstring; None = the trace
    must carry ``service_s``. ``p99_s`` None means equal to the median (a constant service time).
    """

    concurrency: int = 1
    median_s: float | None = None
    p99_s: float | None = None

    def __post_init__(self) -> None:
        if not 1 <= self.concurrency <= MAX_CONCURRENCY:
            raise ValueError(f"concurrency must be 1..{MAX_CONCURRENCY:,} slots, got {self.concurrency!r}")
        if self.median_s is not None and not (math.isfinite(self.median_s) and self.median_s > 0):
            raise ValueError(f"median_s must be a positive finite number of seconds, got {self.median_s!r}")
        if self.p99_s is not None:
            if self.median_s is None:
                raise ValueError("p99_s needs median_s (the lognormal is fitted to both)")
            if not (math.isfinite(self.p99_s) and self.p99_s >= self.median_s):
                raise ValueError(f"p99_s must be finite and >= median_s ({self.median_s!r} s), got {self.p99_s!r}")

    @property
    def sigma(self) -> float:
        """The fitted lognormal's shape (0 = constant)."""
        if self.median_s is None:
            return math.nan
        return 0.0 if self.p99_s is None else math.log(self.p99_s / self.median_s) / Z99


def service_times(trace: RequestTrace, model: ServiceTimeModel, seed: int) -> FloatArray:
    """Service seconds of every request: the trace's column, else draws from the fitted lognormal.

    Raises :class:`ValueError` when the trace has no column and the model no distribution (the CLI
    refuses that combination up front, naming the flags)."""
    if trace.service_s is not None:
        return np.asarray(trace.service_s, dtype=np.float64)
    if model.median_s is None:
        raise ValueError(f"trace {trace.name!r} has no service-time column and the model no median_s")
    n = trace.requests
    if model.p99_s is None or model.sigma == 0.0:
        return np.full(n, model.median_s, dtype=np.float64)
    rng = np.random.default_rng([seed, _SEED_TAG])
    return rng.lognormal(math.log(model.median_s), model.sigma, n).astype(np.float64)


class AdmittingRun(Protocol):
    """What :func:`service_admitter` reads and writes of a request-level run (the request engine's is
    one): per-request token counts, service times and outcome slots, per-replica occupancy, and the
    heaps of completions and first tokens still to report."""

    active: list[int]
    busy_since: list[float]
    svc: list[float] | None
    tin: list[int]
    tout: list[int]
    first_tok: list[float]
    finish: list[float]
    where: list[int]
    fin_heap: list[tuple[float, int, int]]
    fine_ms: int | None
    kv_held: list[float]
    admit_t: list[float]
    pf_start: list[float]
    ft_heap: list[tuple[float, int]]
    active_total: int
    slow: float


def service_admitter(run: AdmittingRun) -> Callable[[int, int, float], None]:
    """``admit(req, r, t)`` for the service-time model: request ``req`` holds a slot of replica ``r``
    from ``t`` to ``t + S × slowdown``; its service start is its first token (the queue wait ends)."""
    active, busy_since, svc = run.active, run.busy_since, run.svc or []
    tin, tout, first_tok, finish, where = run.tin, run.tout, run.first_tok, run.finish, run.where
    fin_heap, fine_ms, kv_held, admit_t = run.fin_heap, run.fine_ms, run.kv_held, run.admit_t
    pf_start, ft_heap, push = run.pf_start, run.ft_heap, heapq.heappush

    def admit(req: int, r: int, t: float) -> None:
        if fine_ms:
            run.active_total += 1
            pf_start[req] = t
            push(ft_heap, (t, req))  # the wait row goes out at service start, as the LLM's at first token
        kv_held[r] += tin[req] + 0.5 * tout[req]  # the completer releases the same amount
        admit_t[req] = t
        a = active[r] + 1
        active[r] = a
        if a == 1:
            busy_since[r] = t
        fin = t + svc[req] * run.slow
        first_tok[req] = t
        finish[req] = fin
        where[req] = r
        push(fin_heap, (fin, req, r))

    return admit
