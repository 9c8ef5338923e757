"""The scorecard's "as run" row: what the fleet really did over a history, measured, not simulated.

Input: a :class:`~ebb.model.measured.MeasuredFleet` (the replica curve and the engine's own TTFT and
end-to-end histograms, :mod:`ebb.sources.prometheus_history`) and the arrivals reconstructed from
the same history. Output: a :class:`~ebb.score.results.PolicyRun` whose policy is :data:`AS_RUN`
(``as-run``) and fidelity :data:`MEASURED`, shown beside the simulated rows, and the verdict's
sentence against it (:func:`as_run_lines`). Pure: no I/O.

Definitions (every figure counts from the warm-up on, as the simulated rows do; the warm-up is
rounded up to whole histogram bins for the latency figures, to whole steps for the replicas):

* **GPU-hours**: the integral of the replica curve, ``Σ replicas_k · step_s / 3600`` (a replica
  is one GPU, as in the simulated rows); **cost** that times the GPU-hour price.
* **Violations**: TTFT observations above the TTFT SLO in the engine's own histogram, exact when the
  SLO is a bucket bound (vLLM's 1 s, 2.5 s, 5 s, ...). An SLO inside a bucket reads the count above
  it off an exponential decay between the counts above the bucket's two edges (a latency tail falls
  off fast inside a wide bucket: on the week of the acceptance test, 1.00 % for a true 0.91 % at
  2 s inside (1, 2.5], where spreading the bucket evenly would say 2.23 %); linearly when nothing
  lies above the bucket. Only TTFT is judged: a histogram cannot say which requests broke both SLOs,
  so end-to-end breaches are not added (the E2E percentiles are shown). The percentage is over the
  TTFT observations.
* **Percentiles**: Prometheus' ``histogram_quantile`` rule over the range's buckets (linear within
  the bucket holding the rank; the ``+Inf`` bucket answers its lower bound).
* **Scale-ups / downs**: the steps at which the replica curve rose / fell; peak and mean from the curve.
* Not measured, and 0 in the row: dropped requests, misjudged scale-downs, canary steps, breach
  episodes, wall time.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from ebb.model.measured import BucketSeries, MeasuredFleet
from ebb.score.results import PolicyRun, Scorecard, Timeline
from ebb.score.verdict import verdict

__all__ = ["AS_RUN", "AS_RUN_LEGEND", "MEASURED", "as_run", "as_run_lines", "bucket_exceed", "bucket_quantiles", "is_as_run"]

FloatArray = npt.NDArray[np.float64]
AS_RUN = "as-run"
"""The policy name of the measured row."""
MEASURED = "measured"
"""Its fidelity: read from the engine's histograms, not simulated."""
AS_RUN_LEGEND = ("as-run = the fleet as it ran, measured, not simulated: GPU-h from its replica curve, violations "
                 "from the engine's own TTFT histogram (TTFT only), latencies from its histograms")
"""The table's legend line for the measured row."""


def is_as_run(card: Scorecard) -> bool:
    """Whether ``card`` is the measured row (never a candidate for the verdict's pick)."""
    return card.policy == AS_RUN and card.fidelity == MEASURED


def _lower_bounds(bounds: Sequence[float]) -> FloatArray:
    return np.concatenate([[0.0], np.asarray(bounds[:-1], dtype=np.float64)])


def bucket_exceed(bounds: Sequence[float], counts: FloatArray, limit: float) -> FloatArray:
    """Observations above ``limit`` per row of ``counts`` (rows × buckets, non-cumulative): exact when
    ``limit`` is a bucket bound; inside a bucket, the count above falls exponentially from the bucket's
    lower edge to its upper one (linearly when none lies above the bucket); inside ``+Inf``, all of it."""
    up = np.asarray(bounds, dtype=np.float64)
    lo = _lower_bounds(bounds)
    above_hi = np.cumsum(counts[:, ::-1], axis=1)[:, ::-1] - counts  # observations above each upper bound
    above_lo = above_hi + counts
    if limit <= 0:
        return np.asarray(above_lo[:, 0], dtype=np.float64)
    j = int(np.searchsorted(up, limit, side="left"))
    if j == len(up):  # above the last (finite) bound: every observation was at most that bound
        return np.zeros(len(counts))
    if up[j] == limit:
        return np.asarray(above_hi[:, j], dtype=np.float64)
    if np.isinf(up[j]):
        return np.asarray(above_lo[:, j], dtype=np.float64)
    frac = (limit - lo[j]) / (up[j] - lo[j])
    a, b = above_lo[:, j], above_hi[:, j]
    with np.errstate(invalid="ignore", divide="ignore"):
        tail = a * np.power(np.where(a > 0, b / a, 1.0), frac)
    return np.asarray(np.where(b > 0, tail, b + counts[:, j] * (1.0 - frac)), dtype=np.float64)


def bucket_quantiles(bounds: Sequence[float], counts: FloatArray, q: float) -> FloatArray:
    """The ``q``-quantile of each row of ``counts`` by ``histogram_quantile``'s rule; NaN for an empty row."""
    up = np.asarray(bounds, dtype=np.float64)
    lo = _lower_bounds(bounds)
    cum = np.cumsum(counts, axis=1)
    total = cum[:, -1] if cum.shape[1] else np.zeros(len(counts))
    rank = q * total
    j = np.argmax(cum >= rank[:, None], axis=1)
    below = np.where(j > 0, cum[np.arange(len(j)), np.maximum(j - 1, 0)], 0.0)
    inside = counts[np.arange(len(j)), j]
    with np.errstate(invalid="ignore", divide="ignore"):
        frac = np.where(inside > 0, (rank - below) / inside, 1.0)
    value = lo[j] + (up[j] - lo[j]) * frac
    value = np.where(np.isinf(up[j]), lo[j], value)
    return np.where(total > 0, value, np.nan)


def _from_bin(m: MeasuredFleet, warmup_s: float) -> int:
    return min(m.bins, int(math.ceil(warmup_s / m.bin_s - 1e-9))) if warmup_s > 0 else 0


def _total(h: BucketSeries, first_bin: int) -> FloatArray:
    return np.asarray(h.counts[first_bin:].sum(axis=0, keepdims=True), dtype=np.float64)


def _ms(h: BucketSeries | None, first_bin: int, q: float) -> float:
    if h is None:
        return math.nan
    return float(bucket_quantiles(h.bounds, _total(h, first_bin), q)[0]) * 1000.0


def _per_bin_ms(h: BucketSeries | None, n: int, q: float) -> FloatArray:
    if h is None:
        return np.full(n, np.nan)
    return bucket_quantiles(h.bounds, np.asarray(h.counts, dtype=np.float64), q) * 1000.0


def as_run(m: MeasuredFleet, arrivals_s: FloatArray, *, trace: str, slo_ttft_ms: float, slo_e2e_ms: float,
           gpu_hour_usd: float, warmup_s: float = 0.0) -> PolicyRun:
    """The measured row over ``m`` (its TTFT histogram required: ValueError without one).

    ``arrivals_s`` are the requests reconstructed from the same history (seconds from
    ``m.start_unix_s``): the row's request count and the timeline's demand."""
    if m.ttft_s is None:
        raise ValueError("the as-run row needs the engine's TTFT histogram")
    first_step = min(len(m.replicas), int(math.ceil(warmup_s / m.step_s - 1e-9))) if warmup_s > 0 else 0
    first_bin = _from_bin(m, warmup_s)
    reps = np.asarray(m.replicas[first_step:], dtype=np.float64)
    replica_s = float(reps.sum() * m.step_s)
    gpu_h = replica_s / 3600.0
    ttft_total = _total(m.ttft_s, first_bin)
    observed = float(ttft_total.sum())
    exceed = float(bucket_exceed(m.ttft_s.bounds, ttft_total, slo_ttft_ms / 1000.0)[0])
    moves = np.diff(reps) if len(reps) > 1 else np.zeros(0)
    arr = np.asarray(arrivals_s, dtype=np.float64)
    card = Scorecard(
        policy=AS_RUN, trace=trace, fidelity=MEASURED, requests=int((arr >= warmup_s).sum()),
        gpu_hours=gpu_h, cost_usd=gpu_h * gpu_hour_usd, slo_violations=int(round(exceed)),
        slo_violation_pct=100.0 * exceed / observed if observed > 0 else math.nan,
        ttft_p50_ms=_ms(m.ttft_s, first_bin, 0.5), ttft_p99_ms=_ms(m.ttft_s, first_bin, 0.99),
        e2e_p50_ms=_ms(m.e2e_s, first_bin, 0.5), e2e_p99_ms=_ms(m.e2e_s, first_bin, 0.99),
        scale_ups=int((moves > 0).sum()), scale_downs=int((moves < 0).sum()), dropped_requests=0,
        peak_replicas=int(math.ceil(float(reps.max()))) if len(reps) else 0,
        mean_replicas=float(reps.mean()) if len(reps) else 0.0,
        slo_ttft_ms=slo_ttft_ms, slo_e2e_ms=slo_e2e_ms, wall_s=0.0, warmup_s=warmup_s)
    return PolicyRun(card, _timeline(m, arr, slo_ttft_ms))


def _timeline(m: MeasuredFleet, arrivals_s: FloatArray, slo_ttft_ms: float) -> Timeline:
    """Per histogram bin: demand from the arrivals, mean replicas, the bins' own percentiles and violations."""
    assert m.ttft_s is not None
    n, k = m.bins, m.steps_per_bin
    padded = np.concatenate([m.replicas, np.full(n * k - len(m.replicas), np.nan)]).reshape(n, k)
    replicas = np.nanmean(padded, axis=1)
    demand = np.bincount(np.clip((arrivals_s // m.bin_s).astype(np.int64), 0, n - 1), minlength=n)[:n] / m.bin_s
    viol = bucket_exceed(m.ttft_s.bounds, np.asarray(m.ttft_s.counts, dtype=np.float64), slo_ttft_ms / 1000.0)
    return Timeline(t_s=np.arange(n, dtype=np.float64) * m.bin_s, bin_s=m.bin_s,
                    demand_rps=demand.astype(np.float64), replicas=replicas, ready_replicas=replicas,
                    ttft_p50_ms=_per_bin_ms(m.ttft_s, n, 0.5), ttft_p99_ms=_per_bin_ms(m.ttft_s, n, 0.99),
                    e2e_p50_ms=_per_bin_ms(m.e2e_s, n, 0.5), e2e_p99_ms=_per_bin_ms(m.e2e_s, n, 0.99),
                    violations=np.rint(viol).astype(np.int64))


def as_run_lines(measured: Scorecard, cards: Sequence[Scorecard]) -> list[str]:
    """The verdict's sentences against the fleet as it ran: what it used, then Ebb's default variant
    (else the verdict's pick) against its GPU-hours, violations beside each (simulated vs measured)."""
    v = verdict([c for c in cards if not is_as_run(c)])
    other = v.ebb if v.ebb is not None else v.pick
    head = (f"As run: your fleet used {measured.gpu_hours:,.2f} GPU-h at {measured.slo_violation_pct:.3f} % TTFT "
            f"violations (measured from the engine's own histogram, not simulated).")
    if other is None or not measured.gpu_hours > 0:
        return [head]
    saved = 100.0 * (measured.gpu_hours - other.gpu_hours) / measured.gpu_hours
    word = "fewer" if saved >= 0 else "more"
    who = f"Ebb ({other.policy})" if v.ebb is not None else f"The pick, {other.policy},"
    return [head, f"{who} would have used {abs(saved):.0f} % {word} GPU-hours than your fleet did "
                  f"({other.gpu_hours:,.2f} vs {measured.gpu_hours:,.2f} GPU-h), at {other.slo_violation_pct:.3f} % "
                  f"simulated violations vs {measured.slo_violation_pct:.3f} % measured."]
