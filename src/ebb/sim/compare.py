"""One trace, many policies, one comparison: load scaling, the oracle search, then every policy.

Order of work (each step deterministic for ``settings.seed``):

1. Build the workload at the requested fidelity: a :class:`RequestTrace` (``request``) or a
   :class:`FluidDemand` (``fluid``). Count series become requests (``request`` fidelity) with
   Poisson arrivals within each bin and token sizes from the documented default distribution.
2. Scale load: ``--load-scale K`` multiplies it; ``--peak-replicas N`` picks K with
   :func:`calibrate`, from the trace itself and never from the prepared workload, so one file
   gets one K whatever the fidelity (the reference: a request log's requests, a count series'
   1 s fluid copy; see there).
3. Search the oracle's schedule (perfect foresight; see :mod:`ebb.sim.baselines.oracle`); under
   ``--peak-replicas N`` no second of it holds more than N replicas. With a warm-up
   (``settings.warmup_s``, :mod:`ebb.sim.warmup`) its SLO and cost are judged after the warm-up,
   as every scorecard is; the calibration of step 2 measures the whole trace.
4. Run every requested policy on the same workload and score it. A workload with no request,
   or a run whose scorecard would hold NaN cost or violation figures, is refused with
   :class:`~ebb.errors.InputError` (exit 2) naming the reason, never printed as NaN.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from ebb.errors import ConfigError, InputError
from ebb.gates.guard import canary_counts
from ebb.model.trace import CountSeries, RequestTrace
from ebb.model.trace_ops import (
    DEFAULT_TOKENS,
    counts_to_requests,
    refuse_long_span,
    refuse_many_bins,
    scale_counts,
    scale_requests,
)
from ebb.sim.baselines.oracle import (
    OraclePolicy,
    OracleSearch,
    forward_mean,
    occupancy_rate,
    reactive_schedule_for,
    schedule_for,
    search_oracle,
    work_per_request,
    work_rate,
)
from ebb.sim.fluid_engine import FloatArray, FluidDemand, simulate_fluid
from ebb.sim.fluid_scoring import score_fluid
from ebb.sim.policies import build_policy
from ebb.sim.policy_context import PolicyContext
from ebb.sim.policy import Policy
from ebb.sim.request_engine import simulate_requests
from ebb.sim.service_time import service_times
from ebb.score.results import PolicyRun
from ebb.score.percentiles import timeline_edges
from ebb.sim.scoring import score_requests
from ebb.sim.settings import SimSettings
from ebb.sim.warmup import check_warmup, scored_arrivals, scored_bins
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
_REFERENCE_BIN_S = 1.0
"""Bin width (s) of the fluid reference copy every ``--peak-replicas`` calibration runs on."""
_CALIBRATION_ROUNDS = 6
"""Most oracle searches the calibration runs on the reference (each rescales by N / found peak)."""


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
    reactive: OracleSearch | None = None
    """With ``reactive_comeback_s``: the perfect reactor's cheapest schedule (:func:`search_reactive`)."""
    reactors: tuple[ReactorRun, ...] = ()
    """With ``reactive_comeback_s`` and ``reactors``: each fixed-headroom reactor's run (:func:`run_reactors`)."""


def _to_fluid(trace: RequestTrace | CountSeries, bin_s: float, seed: int) -> FluidDemand:
    # the span was checked by prepare, its only caller; the bins depend on the width chosen here
    refuse_many_bins(_source(trace), *_fluid_bins(trace, bin_s))
    if isinstance(trace, CountSeries):
        rng = np.random.default_rng(seed)
        tin, tout = DEFAULT_TOKENS.sample(_TOKEN_SAMPLE, rng)
        if trace.bin_s > bin_s + 1e-9 and abs(trace.bin_s / bin_s - round(trace.bin_s / bin_s)) < 1e-9:
            # Split a coarse bin evenly (fluid counts are real numbers): the request fidelity spreads
            # a bin's arrivals uniformly over it, and 60 s engine steps would hide every burst.
            r = round(trace.bin_s / bin_s)
            c = np.repeat(trace.counts.astype(np.float64) / r, r)
            return FluidDemand(str(trace.name), bin_s, c, np.sort(tin.astype(np.float64)),
                               np.sort(tout.astype(np.float64)))
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


def _fluid_bins(trace: RequestTrace | CountSeries, bin_s: float) -> tuple[float, float]:
    """``(bins, bin width in s)`` of :func:`_to_fluid`'s demand, counted before it is built."""
    if isinstance(trace, RequestTrace):
        return np.ceil(max(trace.duration_s, bin_s) / bin_s) + 1, bin_s
    ratio = trace.bin_s / bin_s
    if ratio > 1 + 1e-9 and abs(ratio - round(ratio)) < 1e-9:
        return len(trace.counts) * round(ratio), bin_s
    if abs(trace.bin_s - bin_s) > 1e-9 and 1 / ratio >= 1 and abs(1 / ratio - round(1 / ratio)) < 1e-9:
        return np.ceil(len(trace.counts) / round(1 / ratio)), bin_s
    return len(trace.counts), trace.bin_s


def _rate(w: Workload, settings: SimSettings) -> np.ndarray:
    lat = settings.cluster.latency
    svc = settings.cluster.service
    if isinstance(w, RequestTrace) and svc is not None:  # each request holds 1/c replica for its service time
        return occupancy_rate(w.arrival_s, service_times(w, svc, settings.seed), w.duration_s, 1.0 / svc.concurrency)
    if isinstance(w, RequestTrace):
        work = work_per_request(w.tokens_in.astype(np.float64), w.tokens_out.astype(np.float64), lat)
        return work_rate(w.arrival_s, work, w.duration_s)
    mean_work = float(work_per_request(w.tokens_in_sample, w.tokens_out_sample, lat).mean())
    per_s = w.counts * mean_work / w.bin_s
    if w.bin_s == 1.0:
        return np.asarray(per_s, dtype=np.float64)
    t = (np.arange(len(per_s)) * w.bin_s).astype(np.int64)
    return np.bincount(t, weights=per_s * w.bin_s, minlength=int(t[-1]) + 1 if len(t) else 1).astype(np.float64)


def simulate_one(w: Workload, policy: Policy, settings: SimSettings, *,
                 on_progress: Callable[[float], None] | None = None) -> PolicyRun:
    """Run and score one policy on a prepared workload (``on_progress``: told the share of a request
    log's span simulated, :func:`~ebb.sim.request_engine.simulate_requests`)."""
    t0 = time.perf_counter()
    if isinstance(w, RequestTrace):
        out, fleet = simulate_requests(w, policy, settings, on_progress=on_progress)
        run = score_requests(policy.spec, w, out, fleet, settings, wall_s=time.perf_counter() - t0)
    else:
        fout, fleet = simulate_fluid(w, policy, settings)
        run = score_fluid(policy.spec, w, fout, fleet, settings, wall_s=time.perf_counter() - t0)
    passes, aborts = canary_counts(fleet.noteworthy)
    card = replace(run.scorecard, canary_passes=passes, canary_aborts=aborts)
    return replace(run, scorecard=card, decisions=fleet.decisions, noteworthy=fleet.noteworthy)


def _evaluate(w: Workload, settings: SimSettings) -> Callable[[np.ndarray], tuple[float, float]]:
    """A schedule's (replica-seconds, violation %), both over the scored span (after the warm-up)."""
    slo, warm = settings.slo, settings.warmup_s

    def ev(schedule: np.ndarray) -> tuple[float, float]:
        pol = OraclePolicy(schedule)
        if isinstance(w, RequestTrace):
            out, fleet = simulate_requests(w, pol, settings)
            ttft = (out.first_token_s - w.arrival_s) * 1000.0
            e2e = (out.finish_s - w.arrival_s) * 1000.0
            judged = scored_arrivals(w.arrival_s, warm)
            bad = (np.isnan(out.finish_s) | (ttft > slo.ttft_ms) | (e2e > slo.e2e_ms)) & judged
            return fleet.replica_seconds(warm), 100.0 * float(bad.sum()) / max(1, int(judged.sum()))
        fout, fleet = simulate_fluid(w, pol, settings)
        judged = scored_bins(len(w.counts), w.bin_s, warm)
        v = float(np.where(judged, fout.violations, 0.0).sum()) + fout.dropped
        return fleet.replica_seconds(warm), 100.0 * v / max(1.0, float(np.where(judged, w.counts, 0.0).sum()))

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
        parts_a, parts_i, parts_o, parts_s = [], [], [], []
        for j, sidx in enumerate(chosen):
            m = (w.arrival_s >= sidx * seg) & (w.arrival_s < (sidx + 1) * seg)
            parts_a.append(w.arrival_s[m] - sidx * seg + j * seg)
            parts_i.append(w.tokens_in[m])
            parts_o.append(w.tokens_out[m])
            parts_s.append(w.service_s[m] if w.service_s is not None else np.zeros(0))
        return RequestTrace(w.name, np.concatenate(parts_a), np.concatenate(parts_i), np.concatenate(parts_o),
                            source=w.source, service_s=None if w.service_s is None else np.concatenate(parts_s))
    per = max(1, int(round(seg / w.bin_s)))
    counts = np.concatenate([w.counts[sidx * per:(sidx + 1) * per] for sidx in chosen])
    return FluidDemand(w.name, w.bin_s, counts, w.tokens_in_sample, w.tokens_out_sample)


def search(w: Workload, settings: SimSettings, near: OracleSearch | None = None, *,
           verify: bool = True, max_replicas: int | None = None) -> OracleSearch:
    """The oracle's verified schedule for ``w``. Long workloads: search the headroom on a digest
    of the busiest segments, then verify on the whole workload (raising headroom ×1.15 until
    it meets the SLO), so the result is always checked on the full run. ``max_replicas``: no
    second of the schedule exceeds it (a capped run that cannot meet the SLO reports its rate)."""
    rate = _rate(w, settings)
    cold = settings.cluster.cold_start_s
    hint = (near.headroom, near.smoothing_s) if near is not None else None
    if w.duration_s <= _DIGEST_SECONDS:
        return search_oracle(rate, cold, _evaluate(w, settings), target_violation_pct=_TARGET_VIOLATION_PCT,
                             near=hint, max_replicas=max_replicas)
    sub = _digest(w, rate)  # segments out of time order: no warm-up there; the full workload is judged with it
    found = search_oracle(_rate(sub, settings), cold, _evaluate(sub, replace(settings, warmup_s=0.0)),
                          target_violation_pct=_TARGET_VIOLATION_PCT, near=hint, max_replicas=max_replicas)
    h = found.headroom
    if not verify:
        # Only the schedule's shape is wanted (load calibration); it is verified after rescaling.
        sched = schedule_for(rate, h, found.smoothing_s, cold, max_replicas)
        return OracleSearch(sched, h, found.smoothing_s, float("nan"), float("nan"), found.tried)
    full = _evaluate(w, settings)
    for attempt in range(1, 9):
        sched = schedule_for(rate, h, found.smoothing_s, cold, max_replicas)
        cost, viol = full(sched)
        if viol <= _TARGET_VIOLATION_PCT or (max_replicas is not None and attempt == 8):
            # Capped: the eighth attempt is reported with its violation rate rather than exceed N.
            return OracleSearch(sched, h, found.smoothing_s, cost, viol, found.tried + attempt)
        h *= 1.15
    # Permanent: the digest met the SLO, the full workload does not even at 1.15^8 = 3.06x that headroom
    # (or within the cap): the reference every policy is judged against would itself fail.
    cap = f" within {max_replicas} replicas" if max_replicas is not None else ""
    raise ConfigError(f"oracle: the schedule found on the busiest segments of {w.name!r} misses the SLO "
                      f"(violations > {_TARGET_VIOLATION_PCT:g} %) on the full workload{cap} even at "
                      f"{h / 1.15:.3g}x headroom (fix: relax --slo-ttft-ms/--slo-e2e-ms, or lower "
                      "--load-scale or --peak-replicas)")


def search_reactive(w: Workload, settings: SimSettings, comeback_s: float,
                    max_replicas: int | None = None) -> OracleSearch:
    """The **perfect reactor**'s cheapest schedule on ``w`` that meets the SLO: it knows each second's
    work exactly once the second has passed (:func:`~ebb.sim.baselines.oracle.reactive_schedule_for`)
    and its rises serve ``comeback_s`` later (run on an engine whose cold start is ``comeback_s``;
    no tier). The headroom and smoothing are searched with hindsight, per trace, as the oracle's are,
    so no policy that only reacts to demand, with that comeback, runs fewer replica-seconds at the
    same violations within this family of schedules: a lower bound on what reacting can save, the
    oracle's with foresight taken away. Searched on the whole workload (no digest): one simulation
    per candidate, about 10 candidates."""
    rate, evaluate = _reacting(w, settings, comeback_s)
    return search_oracle(rate, comeback_s, evaluate, target_violation_pct=_TARGET_VIOLATION_PCT,
                         max_replicas=max_replicas, smoothing_s=(1, 10), steps=5,
                         build=lambda h, s: reactive_schedule_for(rate, h, s, max_replicas))


def _reacting(w: Workload, settings: SimSettings,
              comeback_s: float) -> tuple[np.ndarray, Callable[[np.ndarray], tuple[float, float]]]:
    """A reactor's inputs on ``w``: its work rate, and a schedule's evaluation on an engine whose cold
    start is ``comeback_s`` (no tier: the reactor's sleepers are unlimited)."""
    run_on = replace(settings, cluster=replace(settings.cluster, cold_start_s=comeback_s, sleep=None))
    return _rate(w, settings), _evaluate(w, run_on)


@dataclass(frozen=True)
class ReactorRun:
    """One memoryless reactor with a fixed headroom on one workload (:func:`run_reactors`)."""

    headroom: float
    hold_s: int
    gpu_hours: float
    """Replica-hours over the scored span (all running: a reactor holds nothing asleep)."""
    violation_pct: float


def run_reactors(w: Workload, settings: SimSettings, comeback_s: float, reactors: Sequence[tuple[float, int]],
                 max_replicas: int | None = None) -> tuple[ReactorRun, ...]:
    """**Memoryless reactors**, one per ``(headroom, hold_s)``, each with that headroom for every
    trace (no hindsight): each second it runs ``ceil(headroom × the work rate of the last second)``
    replicas, holds each rise ``hold_s`` seconds, and its rises serve ``comeback_s`` later
    (:func:`~ebb.sim.baselines.oracle.reactive_schedule_for`, on an engine whose cold start is
    ``comeback_s``). Over a family of traces, their (SLO met, GPU-h) points are the frontier that
    reacting to demand, with that comeback, can reach. One simulation per reactor."""
    rate, evaluate = _reacting(w, settings, comeback_s)
    runs = []
    for headroom, hold_s in reactors:
        cost, viol = evaluate(reactive_schedule_for(rate, headroom, 1, max_replicas, hold_s))
        runs.append(ReactorRun(headroom, hold_s, cost / 3600.0, viol))
    return tuple(runs)


def arrivals_per_second(trace: RequestTrace | CountSeries) -> FloatArray:
    """Expected arrivals in each 1 s of the unscaled trace: requests counted by arrival second,
    or a count series' bins spread evenly over their seconds (as :func:`counts_to_requests`
    spreads them, uniformly within each bin). Sums to the trace's request count (to 1e-9)."""
    _refuse_oversized(trace)
    if isinstance(trace, RequestTrace):
        n = int(np.ceil(max(trace.duration_s, 1.0))) + 1
        return np.bincount(trace.arrival_s.astype(np.int64), minlength=n).astype(np.float64)
    c = trace.counts.astype(np.float64)
    end_s = len(c) * trace.bin_s
    edges = np.arange(len(c) + 1, dtype=np.float64) * trace.bin_s
    cum = np.concatenate([[0.0], np.cumsum(c)])
    # The cumulative count is piecewise linear in time; its increments over whole seconds.
    seconds = np.arange(int(np.ceil(max(end_s, 1.0))) + 1, dtype=np.float64)
    return np.asarray(np.diff(np.interp(seconds, edges, cum), append=cum[-1]), dtype=np.float64)


def reference_demand(trace: RequestTrace | CountSeries, settings: SimSettings) -> FluidDemand:
    """The unscaled trace as 1 s fluid demand: what :func:`calibrate` measures, for both fidelities.

    Token sizes: the trace's own for a request log; for a count series a sample of the default
    distribution (the one :func:`counts_to_requests` draws from), seeded by ``settings.seed``.
    """
    if isinstance(trace, RequestTrace):
        tin, tout = trace.tokens_in.astype(np.float64), trace.tokens_out.astype(np.float64)
    else:
        si, so = DEFAULT_TOKENS.sample(_TOKEN_SAMPLE, np.random.default_rng(settings.seed))
        tin, tout = si.astype(np.float64), so.astype(np.float64)
    return FluidDemand(str(trace.name), _REFERENCE_BIN_S, arrivals_per_second(trace), np.sort(tin), np.sort(tout))


def calibration_reference(trace: RequestTrace | CountSeries, settings: SimSettings) -> Callable[[float], Workload]:
    """The workload :func:`calibrate` searches at load multiple ``k``: a request log's (or, under the
    service-time model, any trace's) own requests in request fidelity, else :func:`reference_demand`
    times ``k``."""
    requests = settings.cluster.service is not None or isinstance(trace, RequestTrace)
    base = None if requests else reference_demand(trace, settings)

    def reference(k: float) -> Workload:
        return prepare(trace, "request", settings, load_scale=k) if base is None else replace(base, counts=base.counts * k)

    return reference


def unit_peak_replicas(trace: RequestTrace | CountSeries, settings: SimSettings) -> float:
    """The 5 s peak of work of the unscaled trace's :func:`calibration_reference`, in replicas 100 %
    busy (0.0 for a trace with no request): the fleet at load ``k`` peaks near ``k`` times it, so a
    run's size is known from this number before anything is simulated."""
    unit = calibration_reference(trace, settings)(1.0)
    return float(forward_mean(_rate(unit, settings), 5).max()) if unit.requests else 0.0


def first_load_guess(peak_replicas: int, unit_peak: float) -> float:
    """The load multiple :func:`calibrate` starts from for ``--peak-replicas N``: N replicas 80 % busy
    at the 5 s peak of work (``unit_peak``, :func:`unit_peak_replicas`)."""
    return _PEAK_REF_UTIL * peak_replicas / unit_peak


def probe_schedule(w: Workload, settings: SimSettings) -> np.ndarray:
    """A plausible oracle schedule for ``w`` without the search (headroom ×1.2, 10 s smoothing): what a
    time estimate runs the policies against on a slice of the trace (:mod:`ebb.sim.estimate`)."""
    return schedule_for(_rate(w, settings), 1.2, 10, settings.cluster.cold_start_s)


def search_share(duration_s: float) -> float:
    """The share of a ``duration_s`` workload each candidate of :func:`search` simulates: 1.0, or for a
    workload longer than 4 days the digest's ``4 × 6 h`` over its span (then one or more full checks)."""
    return 1.0 if duration_s <= _DIGEST_SECONDS else min(1.0, _DIGEST_SEGMENTS * _SEGMENT_S / duration_s)


def calibrate(trace: RequestTrace | CountSeries, peak_replicas: int, settings: SimSettings,
              on_step: Callable[[str], None] | None = None) -> tuple[float, OracleSearch]:
    """The load multiple K for ``--peak-replicas N``: one number per (trace, N, settings),
    whatever the fidelity that is simulated afterwards.

    The reference: a request log's own requests in request fidelity (the oracle that judges a run
    replays them; the service-time model has no fluid form either), a count series'
    :func:`reference_demand` (its 1 s fluid copy, scaled exactly: a 58-day series expanded to
    requests would cost more than the run). Pass 1: K so that the reference's 5 s peak of work
    needs N replicas at 80 % busy (under the service-time model, work is the busy curve: each
    request holds its slot for its whole service time, so a 100 s job counts one replica for 100 s).
    Then up to :data:`_CALIBRATION_ROUNDS` oracle searches on the
    reference at K, each rescaling K by N / the oracle's peak; the largest K whose reference oracle
    peaks at most N is kept (exactly N when found). The simulated fidelity's own oracle is then
    searched at this K under a hard cap of N replicas.
    """
    settings = replace(settings, warmup_s=0.0)  # the calibration measures the whole trace, warm-up included
    reference = calibration_reference(trace, settings)
    base_peak = unit_peak_replicas(trace, settings)
    if not base_peak > 0:
        raise InputError("--peak-replicas needs a trace with some requests; this one has none",
                         path=str(trace.source or trace.name), fix="point at a trace with requests, or use --load-scale")
    k = first_load_guess(peak_replicas, base_peak)
    best: tuple[float, OracleSearch] | None = None
    found: OracleSearch | None = None
    for rnd in range(_CALIBRATION_ROUNDS):
        found = search(reference(k), settings, near=found, verify=False)
        peak = int(found.schedule.max())
        if peak <= peak_replicas and (best is None or k > best[0]):
            best = (k, found)
        if peak == peak_replicas or (best is not None and rnd >= _CALIBRATION_ROUNDS // 2):
            break
        k = k * peak_replicas / peak
        if on_step is not None:
            on_step(f"calibrating: load x{k:.3g} for a peak of {peak_replicas} replicas")
    if best is None:
        # Each round shrinks K by N / peak < 1, so an over-peak oracle after all rounds means the
        # trace needs more than N replicas even almost empty: N is too small for its bursts.
        raise ConfigError(f"--peak-replicas {peak_replicas}: the oracle still needs "
                          f"{int(found.schedule.max()) if found is not None else 0} replicas at load x{k:.3g} "
                          "(fix: a larger --peak-replicas, or --peak-replicas off with --load-scale)")
    return best


def _source(trace: RequestTrace | CountSeries) -> str:
    return trace.source or str(trace.name)


def _refuse_oversized(trace: RequestTrace | CountSeries) -> None:
    """Per-second state over a span past :data:`~ebb.model.trace_ops.MAX_SPAN_S` is refused before
    any of it is allocated (one InputError naming the trace)."""
    refuse_long_span(_source(trace), trace.duration_s)


def prepare(trace: RequestTrace | CountSeries, fidelity: str, settings: SimSettings, *,
            load_scale: float = 1.0, fluid_bin_s: float | None = None) -> Workload:
    """The workload at ``fidelity``, with load multiplied by ``load_scale``.

    ``fluid_bin_s`` (fluid only): None = 0.1 s for request logs (sub-second bursts matter; the
    fidelity-agreement test is run at this width) and, for count series, the series' own bin up
    to 1 s (a coarser bin is split evenly into 1 s bins, as request fidelity spreads its arrivals).
    """
    if fidelity not in FIDELITIES:
        raise ConfigError(f"--fidelity {fidelity!r}: choose one of {', '.join(FIDELITIES)}")
    if not (load_scale > 0 and np.isfinite(load_scale)):
        raise ConfigError(f"--load-scale must be a positive number, got {load_scale!r}")
    if fidelity == "fluid" and settings.cluster.service is not None:
        raise ConfigError("the service-time model runs at request fidelity only (fix: drop --fidelity fluid, "
                          "or drop the service-time flags for the LLM model)")
    _refuse_oversized(trace)
    seed = settings.seed
    if isinstance(trace, CountSeries):
        series = trace if load_scale == 1.0 else scale_counts(trace, load_scale, seed=seed)
        if fidelity == "fluid":
            return _to_fluid(series, fluid_bin_s or min(series.bin_s, 1.0), seed)
        return counts_to_requests(series, seed=seed)
    req = trace if load_scale == 1.0 else scale_requests(trace, load_scale, seed=seed)
    if fidelity == "fluid":
        return _to_fluid(req, fluid_bin_s or _REQUEST_LOG_FLUID_BIN_S, seed)
    return req


def _check_figures(runs: Sequence[PolicyRun], w: Workload, k: float, source: str) -> None:
    """Refuse a comparison whose figures would print as NaN or describe no served request."""
    for run in runs:
        c = run.scorecard
        bad = [name for name, v in (("GPU-hours", c.gpu_hours), ("cost", c.cost_usd),
                                    ("SLO violation %", c.slo_violation_pct)) if not np.isfinite(v)]
        if bad:
            raise InputError(f"policy {c.policy!r}: {', '.join(bad)} came out NaN/inf at load x{k:.3g} on "
                             f"{w.requests:,} requests", path=source,
                             fix="check the trace's token counts and times, or change --load-scale/--peak-replicas")
        if c.requests > 0 and c.dropped_requests >= c.requests:
            raise InputError(f"policy {c.policy!r} served none of the {c.requests:,} requests at load x{k:.3g} "
                             "(every one dropped: no replica can finish them within the drain horizon), so "
                             "latency percentiles would be NaN", path=source,
                             fix="check the trace's token counts (implausibly long requests?), or relax the SLO")


def compare(trace: RequestTrace | CountSeries, items: Sequence[PolicySpecItem], settings: SimSettings, *,
            fidelity: str, load_scale: float = 1.0, peak_replicas: int | None = None,
            fluid_bin_s: float | None = None, on_step: Callable[[str], None] | None = None,
            on_progress: Callable[[float], None] | None = None,
            on_workload: Callable[[int, float, float], None] | None = None,
            reactive_comeback_s: float | None = None,
            reactors: Sequence[tuple[float, int]] = ()) -> Comparison:
    """Steps 1–4 of the module docstring; ``on_step`` is told what runs next (progress bars),
    ``on_progress`` how far each policy's run is (the share of a request log's span simulated),
    ``on_workload`` the prepared workload's requests, span (s) and load multiple once they are known
    (after the calibration, before the oracle's search: what a time estimate needs);
    ``reactive_comeback_s``: also :func:`search_reactive` with that comeback (``Comparison.reactive``),
    and :func:`run_reactors` for each ``(headroom, hold_s)`` of ``reactors`` (``Comparison.reactors``)."""
    def step(msg: str) -> None:
        if on_step is not None:
            on_step(msg)

    if peak_replicas is not None and peak_replicas < 1:
        raise ConfigError(f"--peak-replicas must be >= 1, got {peak_replicas}")
    if fidelity not in FIDELITIES:
        raise ConfigError(f"--fidelity {fidelity!r}: choose one of {', '.join(FIDELITIES)}")
    source = str(trace.source or trace.name)
    check_warmup(settings.warmup_s, trace.duration_s)
    k = load_scale
    ref: OracleSearch | None = None
    if peak_replicas is not None:
        step(f"calibrating: load for an oracle peak of {peak_replicas} replicas")
        k0, ref = calibrate(trace, peak_replicas, settings, on_step)
        k = k * k0
    w = prepare(trace, fidelity, settings, load_scale=k, fluid_bin_s=fluid_bin_s)
    if w.requests == 0:
        raise InputError(f"the workload has no request at load x{k:.3g} ({trace.requests:,} in the trace), "
                         "so there is nothing to compare", path=source,
                         fix="use a larger --load-scale or --peak-replicas, or a trace with more requests")
    duration = w.duration_s
    if on_workload is not None:
        on_workload(w.requests, duration, k)
    bin_s = settings.timeline_bin_s or float(timeline_edges(duration + settings.cluster.cold_start_s, None)[1])
    settings = replace(settings, timeline_bin_s=bin_s)

    step("oracle: searching the cheapest schedule that meets the SLO")
    found = search(w, settings, near=ref, max_replicas=peak_replicas)

    ctx = PolicyContext(settings=settings, oracle_schedule=found.schedule)
    runs: list[PolicyRun] = []
    for item in items:
        policy = build_policy(item, ctx)
        step(f"simulating {item.text}")
        runs.append(simulate_one(w, policy, settings, on_progress=on_progress))
    _check_figures(runs, w, k, source)
    reactive: OracleSearch | None = None
    fixed: tuple[ReactorRun, ...] = ()
    if reactive_comeback_s is not None:
        step(f"perfect reactor: searching its cheapest schedule with a {reactive_comeback_s:g} s comeback")
        reactive = search_reactive(w, settings, reactive_comeback_s, max_replicas=peak_replicas)
        fixed = run_reactors(w, settings, reactive_comeback_s, reactors, peak_replicas)
    return Comparison(tuple(runs), str(w.name), w.requests, duration, k, fidelity, found, reactive, fixed)
