"""Turn a request-level run into a :class:`Scorecard` and a :class:`Timeline` (vectorised).

Definitions: a request violates the SLO when its TTFT or its end-to-end latency exceeds the
limit, or when it never completed (dropped). Percentiles are over completed requests, by
numpy's linear interpolation. Timeline latencies are grouped by *arrival* bin. With a warm-up
(``settings.warmup_s``, :mod:`ebb.sim.warmup`) the scorecard judges only requests arriving after it
and bills from it on; the timeline still shows the whole run.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from ebb.model.trace import RequestTrace
from ebb.sim import judgement
from ebb.sim.fleet import FleetLog, billed_sleep
from ebb.sim.request_engine import RequestOutcome
from ebb.sim.service_time import service_times
from ebb.score.percentiles import grouped_percentiles, percentile_or_nan, timeline_edges
from ebb.score.results import PolicyRun, Scorecard, Timeline
from ebb.sim.settings import SimSettings
from ebb.sim.warmup import scored_arrivals

FloatArray = npt.NDArray[np.float64]


def score_requests(policy: str, trace: RequestTrace, outcome: RequestOutcome, fleet: FleetLog,
                   settings: SimSettings, *, wall_s: float, fidelity: str = "request") -> PolicyRun:
    """Scorecard and timeline of one request-level run."""
    slo = settings.slo
    arr = trace.arrival_s
    done = ~np.isnan(outcome.finish_s)
    ttft_ms = (outcome.first_token_s - arr) * 1000.0
    e2e_ms = (outcome.finish_s - arr) * 1000.0
    viol = ~done | (ttft_ms > slo.ttft_ms) | (e2e_ms > slo.e2e_ms)
    warm = settings.warmup_s
    judged = scored_arrivals(arr, warm)
    n = int(judged.sum())
    asleep_s, released_s = billed_sleep(fleet, settings.cluster.sleep, warm)
    replica_s = fleet.replica_seconds(warm) + asleep_s  # a sleeping replica holds its GPU
    gpu_hours = replica_s / 3600.0

    edges = timeline_edges(max(fleet.end_s, trace.duration_s), settings.timeline_bin_s)
    nb = len(edges) - 1
    bin_s = float(edges[1] - edges[0])
    bins = np.minimum((arr / bin_s).astype(np.int64), nb - 1)
    demand = np.bincount(bins, minlength=nb).astype(np.float64) / bin_s
    billed, ready = fleet.per_bin(edges)
    tt50, tt99 = grouped_percentiles(bins[done], ttft_ms[done], nb, (50.0, 99.0))
    e50, e99 = grouped_percentiles(bins[done], e2e_ms[done], nb, (50.0, 99.0))
    vbin = np.bincount(bins[viol], minlength=nb).astype(np.int64)
    dur = max(fleet.end_s, trace.duration_s)
    attributable = viol & _serviceable(trace, settings) & judged
    judged_run = judgement.judge(arr, judged.astype(np.float64), attributable.astype(np.float64), fleet,
                                 duration_s=dur, span_s=trace.duration_s - warm,
                                 cold_start_s=settings.cluster.cold_start_s, from_s=warm)
    ups, downs = fleet.scale_counts(warm)
    card = Scorecard(
        policy=policy,
        trace=str(trace.name),
        fidelity=fidelity,
        requests=n,
        gpu_hours=gpu_hours,
        cost_usd=gpu_hours * settings.cluster.gpu_hour_usd,
        slo_violations=int((viol & judged).sum()),
        slo_violation_pct=100.0 * float((viol & judged).sum()) / n if n else 0.0,
        ttft_p50_ms=percentile_or_nan(ttft_ms[done & judged], 50),
        ttft_p99_ms=percentile_or_nan(ttft_ms[done & judged], 99),
        e2e_p50_ms=percentile_or_nan(e2e_ms[done & judged], 50),
        e2e_p99_ms=percentile_or_nan(e2e_ms[done & judged], 99),
        scale_ups=ups,
        scale_downs=downs,
        dropped_requests=int((~done & judged).sum()),
        peak_replicas=fleet.peak_replicas(warm),
        mean_replicas=(replica_s - asleep_s) / (fleet.end_s - warm) if fleet.end_s > warm else 0.0,
        slo_ttft_ms=slo.ttft_ms,
        slo_e2e_ms=slo.e2e_ms,
        wall_s=wall_s,
        misjudged_scale_downs=judged_run.misjudged_scale_downs,
        sla_violation_delay_ms=judged_run.sla_violation_delay_ms,
        breach_episodes=judged_run.breach_episodes,
        warmup_s=warm,
        asleep_gpu_hours=asleep_s / 3600.0,
        released_replica_hours=released_s / 3600.0,
        wakeups=fleet.wakeups,
        failed_wakes=fleet.failed_wakes,
    )
    tl = Timeline(edges[:-1].copy(), bin_s, demand, billed, ready, tt50, tt99, e50, e99, vbin)
    return PolicyRun(card, tl)


def _serviceable(trace: RequestTrace, settings: SimSettings) -> npt.NDArray[np.bool_]:
    """Requests an idle replica serves within the SLO (own prefill and own decode at batch 1)."""
    lat, slo = settings.cluster.latency, settings.slo
    if settings.cluster.service is not None:  # an idle slot starts at once: only the service time counts
        own_s = service_times(trace, settings.cluster.service, settings.seed)
        return np.asarray(own_s * 1000.0 <= slo.e2e_ms, dtype=np.bool_)
    pf = lat.prefill_ms(trace.tokens_in.astype(np.float64))
    own = pf + np.maximum(trace.tokens_out.astype(np.float64) - 1.0, 0.0) * lat.step_ms(1.0)
    return np.asarray((pf <= slo.ttft_ms) & (own <= slo.e2e_ms), dtype=np.bool_)
