"""One trace, many policies, one comparison: load scaling, the oracle search, then every policy.

Order of work (each step deterministic for ``settings.seed``):

1. Build the workload at the requested fidelity: a :class:`RequestTrace` (``request``) or a
   :class:`FluidDemand` (``fluid``). Count series become requests (``request`` fidelity) with
   Poisson arrivals within each bin and token sizes from the documented default distribution.
2. Scale load: ``--load-scale K`` multiplies it; ``--peak-replicas N`` picks K so that the
   oracle's peak is about N replicas (one calibration pass, then a rescale by N / found peak).
3. Search the oracle's schedule (perfect foresight; see :mod:`ebb.sim.baselines.oracle`).
4. Run every requested policy on the same workload and score it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from ebb.errors import ConfigError
from ebb.gates.guard import canary_counts
from ebb.model.trace import CountSeries, RequestTrace
from ebb.model.trace_ops import DEFAULT_TOKENS, counts_to_requests, scale_counts, scale_requests
from ebb.sim.baselines.oracle import (
    OraclePolicy,
    OracleSearch,
    forward_mean,
    schedule_for,
    search_oracle,
    work_per_request,
    work_rate,
)
from ebb.sim.fluid_engine import FluidDemand, simulate_fluid
from ebb.sim.fluid_scoring import score_fluid
from ebb.sim.policies import build_policy
from ebb.sim.policy_context import PolicyContext
from ebb.sim.policy import Policy
from ebb.sim.request_engine import simulate_requests
from ebb.score.results import PolicyRun
from ebb.score.percentiles import timeline_edges
from ebb.sim.scoring import score_requests
from ebb.sim.settings import SimSettings
from ebb.config.policy_specs import PolicySpecItem

Workload = RequestTrace | FluidDemand
FIDELITIES = ("request", "fluid")
_PEAK_REF_UTIL = 0.8
_TOKEN_SAMPLE = 8192
_REQUEST_LOG_FLUID_BIN_S = 0.1
_DIGEST_SECONDS = 4 * 86400
"""Workloads longer than this (s) search the oracle on a digest of their busiest segments."""
_SEGMENT_S = 6 * 3600
_DIGEST_SEGMENTS = 4
_TARGET_VIOLATION_PCT = 0.1


@dataclass(frozen=True)
class Comparison:
    """Everything ``ebb simulate`` reports."""

    runs: tuple[PolicyRun, ...]
    workload_name: str
    requests: int
    duration_s: float
    load_scale: float
    fidelity: str
    oracle: OracleSearch


def _to_fluid(trace: RequestTrace | CountSeries, bin_s: float, seed: int) -> FluidDemand:
    if isinstance(trace, CountSeries):
        rng = np.random.default_rng(seed)
        tin, tout = DEFAULT_TOKENS.sample(_TOKEN_SAMPLE, rng)
        if abs(trace.bin_s - bin_s) > 1e-9:
            # Re-bin by integer ratio when possible; otherwise keep the series' own bins.
            ratio = bin_s / trace.bin_s
            if ratio >= 1 and abs(ratio - round(ratio)) < 1e-9:
                r = int(round(ratio))
                c = trace.counts.astype(np.float64)
                pad = (-len(c)) % r
                c = np.concatenate([c, np.zeros(pad)]).reshape(-1, r).sum(axis=1)
                return FluidDemand(str(trace.name), bin_s, c, np.sort(tin.astype(np.float64)),
                                   np.sort(tout.astype(np.float64)))
        return FluidDemand(str(trace.name), trace.bin_s, trace.counts.astype(np.float64),
                           np.sort(tin.astype(np.float64)), np.sort(tout.astype(np.float64)))
    nb = int(np.ceil(max(trace.duration_s, bin_s) / bin_s)) + 1
    counts = np.bincount((trace.arrival_s / bin_s).astype(np.int64), minlength=nb).astype(np.float64)
    return FluidDemand(str(trace.name), bin_s, counts, np.sort(trace.tokens_in.astype(np.float64)),
                       np.sort(trace.tokens_out.astype(np.float64)))


def _rate(w: Workload, settings: SimSettings) -> np.ndarray:
    lat = settings.cluster.latency
    if isinstance(w, RequestTrace):
        work = work_per_request(w.tokens_in.astype(np.float64), w.tokens_out.astype(np.float64), lat)
        return work_rate(w.arrival_s, work, w.duration_s)
    mean_work = float(work_per_request(w.tokens_in_sample, w.tokens_out_sample, lat).mean())
    per_s = w.counts * mean_work / w.bin_s
    if w.bin_s == 1.0:
        return np.asarray(per_s, dtype=np.float64)
    t = (np.arange(len(per_s)) * w.bin_s).astype(np.int64)
    return np.bincount(t, weights=per_s * w.bin_s, minlength=int(t[-1]) + 1 if len(t) else 1).astype(np.float64)


def simulate_one(w: Workload, policy: Policy, settings: SimSettings) -> PolicyRun:
    """Run and score one policy on a prepared workload."""
    t0 = time.perf_counter()
    if isinstance(w, RequestTrace):
        out, fleet = simulate_requests(w, policy, settings)
        run = score_requests(policy.spec, w, out, fleet, settings, wall_s=time.perf_counter() - t0)
    else:
        fout, fleet = simulate_fluid(w, policy, settings)
        run = score_fluid(policy.spec, w, fout, fleet, settings, wall_s=time.perf_counter() - t0)
    passes, aborts = canary_counts(fleet.noteworthy)
    card = replace(run.scorecard, canary_passes=passes, canary_aborts=aborts)
    return replace(run, scorecard=card, decisions=fleet.decisions, noteworthy=fleet.noteworthy)


def _evaluate(w: Workload, settings: SimSettings) -> Callable[[np.ndarray], tuple[float, float]]:
    slo = settings.slo

    def ev(schedule: np.ndarray) -> tuple[float, float]:
        pol = OraclePolicy(schedule)
        if isinstance(w, RequestTrace):
            out, fleet = simulate_requests(w, pol, settings)
            ttft = (out.first_token_s - w.arrival_s) * 1000.0
            e2e = (out.finish_s - w.arrival_s) * 1000.0
            bad = np.isnan(out.finish_s) | (ttft > slo.ttft_ms) | (e2e > slo.e2e_ms)
            return fleet.replica_seconds(), 100.0 * float(bad.sum()) / max(1, w.requests)
        fout, fleet = simulate_fluid(w, pol, settings)
        v = float(fout.violations.sum()) + fout.dropped
        return fleet.replica_seconds(), 100.0 * v / max(1.0, float(w.counts.sum()))

    return ev


def _digest(w: Workload, rate: np.ndarray) -> Workload:
    """The ``_DIGEST_SEGMENTS`` segments (``_SEGMENT_S`` long) with the highest 5 s work peak,
    concatenated in time order: where an SLO-meeting schedule is hardest to find."""
    seg = _SEGMENT_S
    nseg = max(1, int(np.ceil(len(rate) / seg)))
    peak5 = forward_mean(rate, 5)
    scores = np.array([peak5[i * seg:(i + 1) * seg].max() for i in range(nseg)])
    chosen = np.sort(np.argsort(-scores, kind="stable")[:_DIGEST_SEGMENTS])
    if isinstance(w, RequestTrace):
        parts_a, parts_i, parts_o = [], [], []
        for j, sidx in enumerate(chosen):
            m = (w.arrival_s >= sidx * seg) & (w.arrival_s < (sidx + 1) * seg)
            parts_a.append(w.arrival_s[m] - sidx * seg + j * seg)
            parts_i.append(w.tokens_in[m])
            parts_o.append(w.tokens_out[m])
        return RequestTrace(w.name, np.concatenate(parts_a), np.concatenate(parts_i), np.concatenate(parts_o),
                            source=w.source)
    per = max(1, int(round(seg / w.bin_s)))
    counts = np.concatenate([w.counts[sidx * per:(sidx + 1) * per] for sidx in chosen])
    return FluidDemand(w.name, w.bin_s, counts, w.tokens_in_sample, w.tokens_out_sample)


def search(w: Workload, settings: SimSettings, near: OracleSearch | None = None, *,
           verify: bool = True) -> OracleSearch:
    """The oracle's verified schedule for ``w``. Long workloads: search the headroom on a digest
    of the busiest segments, then verify on the whole workload (raising headroom ×1.15 until
    it meets the SLO), so the result is always checked on the full run."""
    rate = _rate(w, settings)
    cold = settings.cluster.cold_start_s
    hint = (near.headroom, near.smoothing_s) if near is not None else None
    if w.duration_s <= _DIGEST_SECONDS:
        return search_oracle(rate, cold, _evaluate(w, settings), target_violation_pct=_TARGET_VIOLATION_PCT,
                             near=hint)
    sub = _digest(w, rate)
    found = search_oracle(_rate(sub, settings), cold, _evaluate(sub, settings),
                          target_violation_pct=_TARGET_VIOLATION_PCT, near=hint)
    h = found.headroom
    if not verify:
        # Only the schedule's shape is wanted (load calibration); it is verified after rescaling.
        sched = schedule_for(rate, h, found.smoothing_s, cold)
        return OracleSearch(sched, h, found.smoothing_s, float("nan"), float("nan"), found.tried)
    full = _evaluate(w, settings)
    for attempt in range(1, 9):
        sched = schedule_for(rate, h, found.smoothing_s, cold)
        cost, viol = full(sched)
        if viol <= _TARGET_VIOLATION_PCT:
            return OracleSearch(sched, h, found.smoothing_s, cost, viol, found.tried + attempt)
        h *= 1.15
    # Permanent: the digest met the SLO, the full workload does not even at 1.15^8 = 3.06x that headroom.
    raise ConfigError(f"oracle: the schedule found on the busiest segments of {w.name!r} misses the SLO "
                      f"(violations > {_TARGET_VIOLATION_PCT:g} %) on the full workload even at "
                      f"{h / 1.15:.3g}x headroom (fix: relax --slo-ttft-ms/--slo-e2e-ms, or lower "
                      "--load-scale or --peak-replicas)")


def prepare(trace: RequestTrace | CountSeries, fidelity: str, settings: SimSettings, *,
            load_scale: float = 1.0, fluid_bin_s: float | None = None) -> Workload:
    """The workload at ``fidelity``, with load multiplied by ``load_scale``.

    ``fluid_bin_s`` (fluid only): None = 0.1 s for request logs (sub-second bursts matter; the
    fidelity-agreement test is run at this width) and the series' own bin for count series.
    """
    if fidelity not in FIDELITIES:
        raise ConfigError(f"--fidelity {fidelity!r}: choose one of {', '.join(FIDELITIES)}")
    if not (load_scale > 0 and np.isfinite(load_scale)):
        raise ConfigError(f"--load-scale must be a positive number, got {load_scale!r}")
    seed = settings.seed
    if isinstance(trace, CountSeries):
        series = trace if load_scale == 1.0 else scale_counts(trace, load_scale, seed=seed)
        if fidelity == "fluid":
            return _to_fluid(series, fluid_bin_s or series.bin_s, seed)
        return counts_to_requests(series, seed=seed)
    req = trace if load_scale == 1.0 else scale_requests(trace, load_scale, seed=seed)
    if fidelity == "fluid":
        return _to_fluid(req, fluid_bin_s or _REQUEST_LOG_FLUID_BIN_S, seed)
    return req


def compare(trace: RequestTrace | CountSeries, items: Sequence[PolicySpecItem], settings: SimSettings, *,
            fidelity: str, load_scale: float = 1.0, peak_replicas: int | None = None,
            fluid_bin_s: float | None = None, on_step: Callable[[str], None] | None = None) -> Comparison:
    """Steps 1–4 of the module docstring; ``on_step`` is told what runs next (progress bars)."""
    def step(msg: str) -> None:
        if on_step is not None:
            on_step(msg)

    if peak_replicas is not None and peak_replicas < 1:
        raise ConfigError(f"--peak-replicas must be >= 1, got {peak_replicas}")
    k = load_scale
    w = prepare(trace, fidelity, settings, load_scale=k, fluid_bin_s=fluid_bin_s)
    if peak_replicas is not None:
        # Pass 1: scale so the 5 s peak of work needs N replicas at 80 % busy.
        base_peak = float(forward_mean(_rate(w, settings), 5).max())
        if base_peak <= 0:
            raise ConfigError("--peak-replicas needs a trace with some requests")
        k = k * _PEAK_REF_UTIL * peak_replicas / base_peak
        w = prepare(trace, fidelity, settings, load_scale=k, fluid_bin_s=fluid_bin_s)
    duration = w.duration_s
    bin_s = settings.timeline_bin_s or float(timeline_edges(duration + settings.cluster.cold_start_s, None)[1])
    settings = replace(settings, timeline_bin_s=bin_s)

    step("oracle: searching the cheapest schedule that meets the SLO")
    found = search(w, settings, verify=peak_replicas is None)
    if peak_replicas is not None:
        peak = int(found.schedule.max())
        if peak != peak_replicas or np.isnan(found.violation_pct):
            # Pass 2: rescale by N / found peak and search again.
            k = k * peak_replicas / peak if peak != peak_replicas else k
            w = prepare(trace, fidelity, settings, load_scale=k, fluid_bin_s=fluid_bin_s)
            step(f"oracle: rescaling load x{k:.3g} for a peak of {peak_replicas} replicas")
            found = search(w, settings, near=found)

    ctx = PolicyContext(settings=settings, oracle_schedule=found.schedule)
    runs: list[PolicyRun] = []
    for item in items:
        policy = build_policy(item, ctx)
        step(f"simulating {item.text}")
        runs.append(simulate_one(w, policy, settings))
    return Comparison(tuple(runs), str(w.name), w.requests, duration, k, fidelity, found)
