"""What really happened in a live run, as the simulator's records: a scorecard and a timeline.

``ebb demo --live`` writes the same HTML report as ``ebb simulate`` (:mod:`ebb.score.report`) from
measurements, not from a model:

* requests — the load generator's client-side view: send time, success, TTFT and end-to-end
  latency (a failed request counts as an SLO violation and as dropped);
* replicas — the controller's per-cycle reading of the fleet (requested = starting + ready, plus
  draining), so GPU-hours bill a replica from its request until its drain ends, as in the simulator.

Times are wall seconds since the run started. Guarantee: every number is computed from the inputs;
bins with no completed request hold NaN latency (drawn as gaps), never 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ebb.score.results import PolicyRun, Scorecard, Timeline
from ebb.score.percentiles import grouped_percentiles, percentile_or_nan

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True)
class FleetSample:
    """The fleet at one controller cycle."""

    t_s: float
    spec_replicas: int
    ready_replicas: int
    draining: int = 0


@dataclass(frozen=True)
class LiveRun:
    """Raw measurements of one live run (all arrays of equal length per group)."""

    policy: str
    trace: str
    sent_s: FloatArray
    ok: BoolArray
    ttft_ms: FloatArray
    e2e_ms: FloatArray
    fleet: Sequence[FleetSample]
    decisions: tuple[tuple[float, int, int], ...]
    """(t_s, from, to) of every applied change."""
    duration_s: float
    slo_ttft_ms: float = 2000.0
    slo_e2e_ms: float = 60000.0
    gpu_usd_per_hour: float = 3.0


def live_policy_run(run: LiveRun, *, bin_s: float = 5.0) -> PolicyRun:
    """Score a live run exactly as the simulator scores a simulated one."""
    n = len(run.sent_s)
    dur = max(run.duration_s, float(run.sent_s.max()) if n else 0.0, bin_s)
    nb = int(np.ceil(dur / bin_s))
    edges = np.arange(nb + 1, dtype=np.float64) * bin_s
    viol = ~run.ok | ~(run.ttft_ms <= run.slo_ttft_ms) | ~(run.e2e_ms <= run.slo_e2e_ms)
    bins = np.minimum((run.sent_s / bin_s).astype(np.int64), nb - 1) if n else np.zeros(0, np.int64)
    ft = np.array([f.t_s for f in run.fleet], dtype=np.float64)
    billed = np.array([f.spec_replicas + f.draining for f in run.fleet], dtype=np.float64)
    ready = np.array([f.ready_replicas for f in run.fleet], dtype=np.float64)
    # Step functions between cycles: each reading holds until the next one.
    grid = (edges[:-1] + edges[1:]) / 2
    idx = np.clip(np.searchsorted(ft, grid, side="right") - 1, 0, max(len(ft) - 1, 0))
    billed_b = billed[idx] if len(ft) else np.zeros(nb)
    ready_b = ready[idx] if len(ft) else np.zeros(nb)
    dt = np.diff(np.append(ft, dur)) if len(ft) else np.zeros(0)
    replica_s = float(np.sum(billed * np.clip(dt, 0, None)))
    # Latency over answered requests only, as the simulator scores completed ones.
    ok = run.ok & np.isfinite(run.ttft_ms) & np.isfinite(run.e2e_ms)
    ttft, e2e = run.ttft_ms[ok], run.e2e_ms[ok]
    tt50, tt99 = grouped_percentiles(bins[ok], ttft, nb, (50.0, 99.0))
    e50, e99 = grouped_percentiles(bins[ok], e2e, nb, (50.0, 99.0))
    timeline = Timeline(
        t_s=edges[:-1], bin_s=bin_s, demand_rps=np.bincount(bins, minlength=nb).astype(np.float64) / bin_s,
        replicas=billed_b, ready_replicas=ready_b, ttft_p50_ms=tt50, ttft_p99_ms=tt99, e2e_p50_ms=e50,
        e2e_p99_ms=e99, violations=np.bincount(bins[viol], minlength=nb).astype(np.int64))
    ups = sum(1 for _, a, b in run.decisions if b > a)
    card = Scorecard(
        policy=run.policy, trace=run.trace, fidelity="live", requests=n, gpu_hours=replica_s / 3600.0,
        cost_usd=replica_s / 3600.0 * run.gpu_usd_per_hour, slo_violations=int(viol.sum()),
        slo_violation_pct=100.0 * float(viol.mean()) if n else 0.0, ttft_p50_ms=percentile_or_nan(ttft, 50),
        ttft_p99_ms=percentile_or_nan(ttft, 99), e2e_p50_ms=percentile_or_nan(e2e, 50),
        e2e_p99_ms=percentile_or_nan(e2e, 99), scale_ups=ups,
        scale_downs=len(run.decisions) - ups, dropped_requests=int((~run.ok).sum()),
        peak_replicas=int(billed.max()) if len(billed) else 0,
        mean_replicas=replica_s / dur if dur > 0 else 0.0, slo_ttft_ms=run.slo_ttft_ms,
        slo_e2e_ms=run.slo_e2e_ms, wall_s=dur)
    return PolicyRun(card, timeline, run.decisions)
