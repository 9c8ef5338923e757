"""Scorecard and timeline of a fluid run (same records as the request engine's).

Latency percentiles: each bin's arrivals are spread over ``_LEVELS`` equally likely token
sizes (quantiles of the empirical prompt and output distributions, paired by rank — a
conservative pairing: long prompts with long outputs); each contributes
``ttft = base + prefill(in)`` and ``e2e = ttft + out × τ``; the run's percentiles are
count-weighted quantiles over all of them (vectorised in chunks, no loop per bin). With a warm-up
(``settings.warmup_s``, :mod:`ebb.sim.warmup`) the scorecard judges only bins starting after it and
bills from it on; the timeline still shows the whole run.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from ebb.sim import judgement
from ebb.sim.fleet import FleetLog, billed_sleep
from ebb.sim.fluid_engine import FluidDemand, FluidOutcome
from ebb.score.results import PolicyRun, Scorecard, Timeline
from ebb.score.percentiles import timeline_edges
from ebb.sim.settings import SimSettings
from ebb.sim.warmup import scored_bins

FloatArray = npt.NDArray[np.float64]
_LEVELS = 16
_CHUNK = 500_000


def _weighted_quantiles(values: FloatArray, weights: FloatArray, qs: tuple[float, ...]) -> list[float]:
    if weights.sum() <= 0:
        return [float("nan")] * len(qs)
    order = np.argsort(values, kind="stable")
    v, w = values[order], weights[order]
    cw = np.cumsum(w)
    return [float(v[min(int(np.searchsorted(cw, q / 100.0 * cw[-1])), len(v) - 1)]) for q in qs]


def score_fluid(policy: str, demand: FluidDemand, out: FluidOutcome, fleet: FleetLog,
                settings: SimSettings, *, wall_s: float) -> PolicyRun:
    """Build the scorecard and timeline of one fluid run."""
    lat = settings.cluster.latency
    levels = (np.arange(_LEVELS) + 0.5) / _LEVELS
    q_in = np.quantile(demand.tokens_in_sample, levels) if len(demand.tokens_in_sample) else np.zeros(_LEVELS)
    q_out = np.quantile(demand.tokens_out_sample, levels) if len(demand.tokens_out_sample) else np.ones(_LEVELS)
    pf = lat.prefill_ms(q_in) / 1000.0
    counts = demand.counts
    nb = len(counts)
    has = np.flatnonzero(counts > 0)
    warm = settings.warmup_s
    judged = scored_bins(nb, demand.bin_s, warm)
    scored = np.where(judged, counts, 0.0)  # arrivals the scorecard judges (the warm-up's are not)
    # Coarse log-spaced histogram of latencies (ms), weighted by requests.
    edges = np.logspace(-1, 7, 4001)
    h_ttft = np.zeros(len(edges) - 1)
    h_e2e = np.zeros(len(edges) - 1)
    tl_edges = timeline_edges(max(fleet.end_s, demand.duration_s), settings.timeline_bin_s)
    ntl = len(tl_edges) - 1
    tl_bin = float(tl_edges[1] - tl_edges[0])
    tl_idx = np.minimum((np.arange(nb) * demand.bin_s / tl_bin).astype(np.int64), ntl - 1)
    tt50 = np.full(ntl, np.nan)
    tt99 = np.full(ntl, np.nan)
    e50 = np.full(ntl, np.nan)
    e99 = np.full(ntl, np.nan)
    for c0 in range(0, len(has), _CHUNK):
        idx = has[c0:c0 + _CHUNK]
        base = out.ttft_base_s[idx][:, None]
        tau = out.tau_s[idx][:, None]
        ttft = (base + pf[None, :]) * 1000.0
        e2e = ttft + q_out[None, :] * tau * 1000.0
        w = np.repeat(scored[idx] / _LEVELS, _LEVELS)
        h_ttft += np.bincount(np.clip(np.searchsorted(edges, ttft.ravel()) - 1, 0, len(edges) - 2),
                              weights=w, minlength=len(edges) - 1)
        h_e2e += np.bincount(np.clip(np.searchsorted(edges, e2e.ravel()) - 1, 0, len(edges) - 2),
                             weights=w, minlength=len(edges) - 1)
        # Timeline: per-bin median/p99 from the levels; p99 = max over the timeline bin.
        t_ix = tl_idx[idx]
        for arr, src, col, agg in ((tt50, ttft, _LEVELS // 2, np.fmax), (tt99, ttft, _LEVELS - 1, np.fmax),
                                   (e50, e2e, _LEVELS // 2, np.fmax), (e99, e2e, _LEVELS - 1, np.fmax)):
            vals = src[:, col]
            tmp = np.full(ntl, np.nan)
            np.fmax.at(tmp, t_ix, vals)
            arr[:] = agg(arr, tmp)
    mids = np.sqrt(edges[:-1] * edges[1:])
    ttft_q = _weighted_quantiles(mids, h_ttft, (50.0, 99.0))
    e2e_q = _weighted_quantiles(mids, h_e2e, (50.0, 99.0))
    requests = int(round(float(scored.sum())))
    # Every arrival's bin already scored its violation, the never-served ones' too (their wait is
    # the queue's), so adding the dropped can count a request twice; the sum is an upper bound
    # (never an understatement), capped at the arrivals so the rate stays within 0–100 %. The
    # dropped are the last arrivals (FIFO), after any warm-up.
    v = min(float(np.where(judged, out.violations, 0.0).sum()) + out.dropped, float(scored.sum()))
    asleep_s, released_s = billed_sleep(fleet, settings.cluster.sleep, warm)
    replica_s = fleet.replica_seconds(warm) + asleep_s  # a sleeping replica holds its GPU
    gpu_hours = replica_s / 3600.0
    billed, ready = fleet.per_bin(tl_edges)
    demand_tl = np.bincount(tl_idx, weights=counts, minlength=ntl) / tl_bin
    viol_tl = np.rint(np.bincount(tl_idx, weights=out.violations, minlength=ntl)).astype(np.int64)
    t_bins = np.arange(nb, dtype=np.float64) * float(demand.bin_s)
    dur = max(fleet.end_s, demand.duration_s)
    # Attributable violations: less the share an idle replica would violate anyway (judgement).
    attributable = np.maximum(np.where(judged, out.violations, 0.0) - scored * _unserviceable_share(demand, settings),
                              0.0)
    judged_run = judgement.judge(t_bins, scored, attributable, fleet, duration_s=dur,
                                 span_s=demand.duration_s - warm, cold_start_s=settings.cluster.cold_start_s,
                                 from_s=warm)
    ups, downs = fleet.scale_counts(warm)
    card = Scorecard(
        policy=policy, trace=demand.name, fidelity="fluid", requests=requests,
        gpu_hours=gpu_hours, cost_usd=gpu_hours * settings.cluster.gpu_hour_usd,
        slo_violations=int(round(v)), slo_violation_pct=100.0 * v / requests if requests else 0.0,
        ttft_p50_ms=ttft_q[0], ttft_p99_ms=ttft_q[1], e2e_p50_ms=e2e_q[0], e2e_p99_ms=e2e_q[1],
        scale_ups=ups, scale_downs=downs,
        dropped_requests=int(round(out.dropped)), peak_replicas=fleet.peak_replicas(warm),
        mean_replicas=(replica_s - asleep_s) / (fleet.end_s - warm) if fleet.end_s > warm else 0.0,
        slo_ttft_ms=settings.slo.ttft_ms, slo_e2e_ms=settings.slo.e2e_ms, wall_s=wall_s,
        misjudged_scale_downs=judged_run.misjudged_scale_downs,
        sla_violation_delay_ms=judged_run.sla_violation_delay_ms,
        breach_episodes=judged_run.breach_episodes, warmup_s=warm,
        asleep_gpu_hours=asleep_s / 3600.0, released_replica_hours=released_s / 3600.0, wakeups=fleet.wakeups,
        failed_wakes=fleet.failed_wakes,
    )
    tl = Timeline(tl_edges[:-1].copy(), tl_bin, demand_tl, billed, ready, tt50, tt99, e50, e99, viol_tl)
    return PolicyRun(card, tl)


def _unserviceable_share(demand: FluidDemand, settings: SimSettings) -> float:
    """Share of requests an idle replica would serve past the SLO (own prefill past the TTFT limit,
    or own service at batch 1 past the end-to-end limit; prompt and output lengths independent)."""
    tin, tout = demand.tokens_in_sample, demand.tokens_out_sample
    if not len(tin) or not len(tout):
        return 0.0
    lat, slo = settings.cluster.latency, settings.slo
    pf = lat.prefill_ms(tin)
    ok_ttft = float(np.mean(pf <= slo.ttft_ms))
    dec = np.maximum(tout - 1.0, 0.0) * float(lat.step_ms(1.0))
    ok_e2e = float(np.mean(float(np.median(pf)) + dec <= slo.e2e_ms))
    return 1.0 - ok_ttft * ok_e2e
