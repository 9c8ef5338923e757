"""A seeded family of bursty traces with known physics, for ``bench/bursts_family.py`` and tests.

A :class:`TrafficShape` states a trace's physics in numbers: a Poisson base rate (req/s), an
optional sinusoidal cycle, bursts (one-off, random, periodic or irregularly recurring), a step
change, lulls to zero, the duration, and for the long-service variant the service-time range.
From it, with no other randomness than ``shape.seed``:

* :func:`rate_curve` — the expected arrivals per second, second by second (no noise);
* :func:`per_second_counts` — Poisson draws of that curve (``rng.poisson``, vectorised);
* :func:`requests` — those counts as requests (uniform within their second, via
  :func:`~ebb.model.trace_ops.counts_to_requests`), token pairs resampled from the bundled Azure
  2023 slices, and for long-service shapes a service time per request;
* :func:`write_csv` / :func:`simulate_input` / :func:`simulate_argv` — the file and the
  ``ebb simulate --format csv ...`` settings and flags that read it back.

:func:`family` draws ``n`` diverse shapes over :data:`CATEGORIES`; :func:`issue_poisson_burst`
and :func:`issue_counts_burst` are the two hand-made traces of issue #31's "Why".

Guarantees: the same shape always yields the same arrays; the family's ranges are those of
:data:`RANGES` (checked by ``tests/unit/testing/test_traffic_family.py``); a burst adds
``(burst_mult - 1) * base_rate_rps`` req/s (so a 10x burst on a flat base is 10x the base), a lull
sets the rate to 0, bursts that overlap do not add up. Product code never imports this module.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import numpy.typing as npt

from ebb.config.simulate_settings import TraceInputSettings
from ebb.model.ids import TraceName
from ebb.model.trace import CountSeries, FloatArray, IntArray, RequestTrace
from ebb.model.trace_ops import counts_to_requests
from ebb.sim.settings import SloSettings
from ebb.sources.traces import bundled_trace

__all__ = ["CATEGORIES", "RANGES", "BurstKind", "TrafficShape", "burst_onsets_s", "family", "issue_counts_burst",
           "issue_poisson_burst", "per_second_counts", "rate_curve", "requests", "simulate_argv", "simulate_input",
           "slo", "tags", "trace", "write_csv"]

BurstKind = Literal["none", "one-off", "random", "periodic", "irregular"]
BURST_KINDS: tuple[BurstKind, ...] = ("none", "one-off", "random", "periodic", "irregular")
TokenSource = Literal["azure-conv", "azure-code"]

RANGES: dict[str, tuple[float, float]] = {
    "base_rate_rps": (0.5, 50.0),
    "long_service_rate_rps": (0.02, 0.1),  # 1.2-6 requests a minute
    "burst_mult": (2.0, 30.0),
    "burst_len_s": (5.0, 600.0),
    "bursts_per_h": (0.0, 6.0),
    "recurrence_s": (1_200.0, 14_400.0),  # periodic period and irregular gaps: 20-240 min
    "service_s": (5.0, 600.0),
    "duration_s": (1_800.0, 7_200.0),  # 30 min - 2 h
    "recurring_duration_s": (21_600.0, 28_800.0),  # 6-8 h
}
"""The family's stated ranges (units in the keys); every shape :func:`family` draws lies inside them."""


@dataclass(frozen=True)
class TrafficShape:
    """One trace's physics. Times in seconds from the trace start, rates in requests per second."""

    name: str
    seed: int
    duration_s: int
    base_rate_rps: float
    per_second: bool = True
    """True: a per-second count series (``t_s,count``); False: a request log with tokens."""
    diurnal_amplitude: float = 0.0
    """Relative amplitude of a sinusoidal cycle of the base rate, 0 (flat) to < 1."""
    diurnal_period_s: float = 86_400.0
    diurnal_phase_rad: float = 0.0
    burst_kind: BurstKind = "none"
    burst_mult: float = 1.0
    """During a burst the rate gains ``(burst_mult - 1) * base_rate_rps``."""
    burst_len_s: float = 0.0
    burst_at_s: float = 0.0
    """Onset of a one-off burst; the first onset of periodic and irregular ones."""
    bursts_per_h: float = 0.0
    """Random bursts: Poisson onsets at this rate."""
    period_s: float = 0.0
    """Periodic bursts: time between onsets."""
    gap_mean_s: float = 0.0
    """Irregular bursts: mean time between onsets (lognormal, clipped to 20-240 min)."""
    gap_cv: float = 0.0
    """Irregular bursts: coefficient of variation of that gap (the spread)."""
    step_at_s: float | None = None
    step_mult: float = 1.0
    """From ``step_at_s`` on, the base rate is multiplied by this."""
    lull_count: int = 0
    lull_len_s: float = 0.0
    """Lulls: ``lull_count`` stretches of this length at seeded places where the rate is 0."""
    long_service: bool = False
    """One request per replica (``--concurrency 1``), service times log-uniform in the range below."""
    service_min_s: float = 0.0
    service_max_s: float = 0.0
    tokens: TokenSource = "azure-conv"
    """Bundled slice whose (prompt, output) token pairs the requests resample."""

    def __post_init__(self) -> None:
        if self.duration_s < 1 or self.base_rate_rps <= 0 or not 0 <= self.diurnal_amplitude < 1:
            raise ValueError(f"{self.name}: duration_s >= 1, base_rate_rps > 0 and 0 <= diurnal_amplitude < 1 needed")
        if self.burst_kind != "none" and not (self.burst_mult >= 1 and self.burst_len_s >= 1):
            raise ValueError(f"{self.name}: a burst needs burst_mult >= 1 and burst_len_s >= 1")
        if (self.burst_kind == "periodic" and self.period_s <= 0) or (self.burst_kind == "irregular" and self.gap_mean_s <= 0):
            raise ValueError(f"{self.name}: periodic bursts need period_s > 0, irregular ones gap_mean_s > 0")
        if self.long_service and (self.per_second or not 0 < self.service_min_s <= self.service_max_s):
            raise ValueError(f"{self.name}: long service needs a request log and 0 < service_min_s <= service_max_s")


CATEGORIES: tuple[str, ...] = ("flat", "diurnal", "one-off", "one-off-requests", "random", "random-diurnal",
                               "periodic", "irregular", "step", "lulls", "long-service", "irregular-diurnal")
"""What :func:`family` cycles through: shape ``i`` is of category ``CATEGORIES[i % 12]``. Per-second
counts except ``one-off-requests`` (30-60 min request logs) and ``long-service``; ``step`` shapes
carry a one-off burst every other round; ``lulls`` ones random bursts; ``long-service`` ones no burst,
a one-off or random bursts (2-5x, 60-600 s) in turn."""


def _log_uniform(rng: np.random.Generator, lo: float, hi: float) -> float:
    return float(math.exp(rng.uniform(math.log(lo), math.log(hi))))


def _draw(category: str, index: int, seed: int) -> TrafficShape:
    """Shape ``index`` of the family: the category's features, every number drawn from ``[seed, index]``."""
    rng = np.random.default_rng([seed, index])
    recurring = category in ("periodic", "irregular", "irregular-diurnal")
    lo, hi = RANGES["recurring_duration_s" if recurring else "duration_s"]
    if category == "one-off-requests":
        hi = 3_600.0  # request-level replays cost ~15 s of CPU per simulated hour: keep them short
    duration = int(round(rng.uniform(lo, hi) / 60.0)) * 60
    base = _log_uniform(rng, *RANGES["base_rate_rps"])
    mult, length = _log_uniform(rng, *RANGES["burst_mult"]), _log_uniform(rng, *RANGES["burst_len_s"])
    shape = TrafficShape(name=f"{index:03d}-{category}", seed=int(rng.integers(2**31)), duration_s=duration,
                         base_rate_rps=base, tokens="azure-code" if index % 2 else "azure-conv")
    kw: dict[str, object] = {}
    if "diurnal" in category:
        kw.update(diurnal_amplitude=float(rng.uniform(0.2, 0.7)),
                  diurnal_period_s=float(duration if duration <= 7_200 else 86_400),
                  diurnal_phase_rad=float(rng.uniform(0, 2 * math.pi)))
    if category in ("one-off", "one-off-requests") or (category == "step" and index // len(CATEGORIES) % 2):
        kw.update(burst_kind="one-off", burst_mult=mult, burst_len_s=length,
                  burst_at_s=float(rng.uniform(0.15, 0.75) * duration))
    elif category in ("random", "random-diurnal", "lulls"):
        kw.update(burst_kind="random", burst_mult=mult, burst_len_s=length,
                  bursts_per_h=float(rng.uniform(*RANGES["bursts_per_h"])))
    elif category == "periodic":
        kw.update(burst_kind="periodic", burst_mult=mult, burst_len_s=length,
                  period_s=_log_uniform(rng, *RANGES["recurrence_s"]), burst_at_s=float(rng.uniform(600, 3_600)))
    elif category in ("irregular", "irregular-diurnal"):
        kw.update(burst_kind="irregular", burst_mult=mult, burst_len_s=length,
                  gap_mean_s=float(rng.uniform(2_400, 10_800)), gap_cv=float(rng.uniform(0.2, 0.8)),
                  burst_at_s=float(rng.uniform(600, 3_600)))
    if category == "one-off-requests":
        kw.update(per_second=False)
    if category == "step":
        kw.update(step_at_s=float(rng.uniform(0.3, 0.7) * duration), step_mult=_log_uniform(rng, 0.25, 4.0))
    if category == "lulls":
        kw.update(lull_count=int(rng.integers(1, 4)), lull_len_s=float(rng.uniform(60, 900)))
    if category == "long-service":
        kw.update(per_second=False, long_service=True, base_rate_rps=_log_uniform(rng, *RANGES["long_service_rate_rps"]),
                  service_min_s=_log_uniform(rng, 5.0, 30.0), service_max_s=_log_uniform(rng, 120.0, 600.0),
                  burst_kind=("none", "one-off", "random")[index // len(CATEGORIES) % 3], burst_mult=min(mult, 5.0),
                  burst_len_s=max(length, 60.0), burst_at_s=float(rng.uniform(0.2, 0.7) * duration),
                  bursts_per_h=float(rng.uniform(1.0, 3.0)))
    drawn = dataclasses.replace(shape, **kw)  # type: ignore[arg-type]
    if drawn.burst_kind == "none":  # no burst: no burst numbers either
        drawn = dataclasses.replace(drawn, burst_mult=1.0, burst_len_s=0.0, burst_at_s=0.0, bursts_per_h=0.0)
    return drawn


def family(n: int = 60, seed: int = 0) -> list[TrafficShape]:
    """``n`` shapes cycling through :data:`CATEGORIES` (12), each drawn from ``(seed, index)``: at
    ``n >= 60`` every category has at least 5 shapes and the recurring ones (periodic, irregular)
    last 6-8 h. The same ``(n, seed)`` always gives the same list; a larger ``n`` extends it."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    return [_draw(CATEGORIES[i % len(CATEGORIES)], i, seed) for i in range(n)]


def issue_poisson_burst() -> TrafficShape:
    """Issue #31's first trace: 30 min of Poisson requests at 3-5 req/s (a cycle over the half hour),
    one 60 s burst of +15 req/s at minute 10; tokens from the bundled conversation slice."""
    return TrafficShape(name="issue-poisson-burst", seed=31, duration_s=1_800, base_rate_rps=4.0, per_second=False,
                        diurnal_amplitude=0.25, diurnal_period_s=1_800.0, burst_kind="one-off",
                        burst_mult=1.0 + 15.0 / 4.0, burst_len_s=60.0, burst_at_s=600.0)


def issue_counts_burst() -> TrafficShape:
    """Issue #31's second trace: 1 h of per-second counts at 5 req/s with one 30 s 10x burst at minute 30."""
    return TrafficShape(name="issue-counts-burst", seed=32, duration_s=3_600, base_rate_rps=5.0,
                        burst_kind="one-off", burst_mult=10.0, burst_len_s=30.0, burst_at_s=1_800.0)


def tags(shape: TrafficShape) -> tuple[str, ...]:
    """The groups a shape is summarised in: its burst kind, then diurnal / step / lulls / long-service."""
    extra = (("diurnal", shape.diurnal_amplitude > 0), ("step", shape.step_at_s is not None),
             ("lulls", shape.lull_count > 0), ("long-service", shape.long_service))
    return (shape.burst_kind, *(name for name, on in extra if on))


def _lognormal_gaps(rng: np.random.Generator, mean_s: float, cv: float, n: int) -> FloatArray:
    sigma2 = math.log1p(cv * cv)
    gaps = rng.lognormal(math.log(mean_s) - sigma2 / 2.0, math.sqrt(sigma2), n)
    return np.clip(gaps, *RANGES["recurrence_s"])


def burst_onsets_s(shape: TrafficShape) -> FloatArray:
    """Onset times (s, ascending, inside the trace) of the shape's bursts, from ``[seed, 1]``."""
    rng = np.random.default_rng([shape.seed, 1])
    end = float(shape.duration_s)
    if shape.burst_kind == "none":
        return np.zeros(0)
    if shape.burst_kind == "one-off":
        onsets = np.array([shape.burst_at_s])
    elif shape.burst_kind == "random":
        k = int(rng.poisson(shape.bursts_per_h * end / 3_600.0))
        onsets = np.sort(rng.uniform(0.0, max(end - shape.burst_len_s, 1.0), k))
    elif shape.burst_kind == "periodic":
        onsets = shape.burst_at_s + shape.period_s * np.arange(int(end // shape.period_s) + 1)
    else:
        gaps = _lognormal_gaps(rng, shape.gap_mean_s, shape.gap_cv, int(end // RANGES["recurrence_s"][0]) + 1)
        onsets = shape.burst_at_s + np.concatenate(([0.0], np.cumsum(gaps)))
    return onsets[onsets < end]


def _mask(n: int, starts_s: FloatArray, length_s: float) -> npt.NDArray[np.bool_]:
    """Seconds ``[floor(start), floor(start) + max(1, round(length)))`` of each start, as one boolean array."""
    diff = np.zeros(n + 1, dtype=np.int64)
    lo = np.clip(np.floor(starts_s).astype(np.int64), 0, n)
    hi = np.clip(lo + max(1, round(length_s)), 0, n)
    np.add.at(diff, lo, 1)
    np.add.at(diff, hi, -1)
    return np.cumsum(diff[:n]) > 0



def rate_curve(shape: TrafficShape) -> FloatArray:
    """Expected arrivals in each second ``[t, t+1)`` of the trace (req/s, >= 0, ``duration_s`` values)."""
    n = shape.duration_s
    t = np.arange(n, dtype=np.float64) + 0.5
    base = shape.base_rate_rps * (1.0 + shape.diurnal_amplitude
                                  * np.sin(2.0 * math.pi * t / shape.diurnal_period_s + shape.diurnal_phase_rad))
    if shape.step_at_s is not None:
        base = np.where(t >= shape.step_at_s, base * shape.step_mult, base)
    bursting = _mask(n, burst_onsets_s(shape), shape.burst_len_s)
    rate = base + bursting * (shape.burst_mult - 1.0) * shape.base_rate_rps
    if shape.lull_count > 0:
        rng = np.random.default_rng([shape.seed, 4])
        starts = rng.uniform(0.0, max(n - shape.lull_len_s, 1.0), shape.lull_count)
        rate = np.where(_mask(n, starts, shape.lull_len_s), 0.0, rate)
    return np.asarray(rate, dtype=np.float64)


def per_second_counts(shape: TrafficShape) -> IntArray:
    """Poisson arrivals per second of :func:`rate_curve`, drawn from ``[seed, 0]``."""
    return np.random.default_rng([shape.seed, 0]).poisson(rate_curve(shape)).astype(np.int64)


@functools.lru_cache(maxsize=2)
def _token_pool(source: TokenSource) -> tuple[IntArray, IntArray]:
    tr = bundled_trace(source)
    return np.asarray(tr.tokens_in), np.asarray(tr.tokens_out)


def requests(shape: TrafficShape) -> RequestTrace:
    """The shape's requests: :func:`per_second_counts` spread uniformly within their seconds, each
    with a (prompt, output) token pair drawn with replacement from the bundled ``shape.tokens`` slice
    and, for long-service shapes, a service time log-uniform in ``[service_min_s, service_max_s]``."""
    counts = CountSeries(name=TraceName(shape.name), counts=per_second_counts(shape), source=f"family:{shape.name}")
    base = counts_to_requests(counts, seed=shape.seed)
    rng = np.random.default_rng([shape.seed, 2])
    pool_in, pool_out = _token_pool(shape.tokens)
    pick = rng.integers(0, len(pool_in), base.requests)
    service = None
    if shape.long_service:
        lo, hi = math.log(shape.service_min_s), math.log(shape.service_max_s)
        service = np.exp(np.random.default_rng([shape.seed, 3]).uniform(lo, hi, base.requests))
    return RequestTrace(name=base.name, arrival_s=np.array(base.arrival_s), tokens_in=pool_in[pick],
                        tokens_out=pool_out[pick], source=base.source, service_s=service)


def trace(shape: TrafficShape) -> RequestTrace | CountSeries:
    """The shape as the simulator takes it: a per-second :class:`CountSeries` or :func:`requests`."""
    if shape.per_second:
        return CountSeries(name=TraceName(shape.name), counts=per_second_counts(shape), source=f"family:{shape.name}")
    return requests(shape)


def write_csv(shape: TrafficShape, path: Path) -> Path:
    """Write the shape as a CSV that :func:`simulate_input`'s settings read back: ``t_s,count`` for
    each second (zeros included), or ``t_s,tokens_in,tokens_out[,service_s]`` per request (times to
    the microsecond, service times to the millisecond). Returns ``path``."""
    tr = trace(shape)
    if isinstance(tr, CountSeries):
        table = np.column_stack((np.arange(len(tr.counts)), tr.counts))
        np.savetxt(path, table, fmt="%d", delimiter=",", header="t_s,count", comments="")
    elif tr.service_s is None:
        rows = np.rec.fromarrays((tr.arrival_s, tr.tokens_in, tr.tokens_out))
        np.savetxt(path, rows, fmt="%.6f,%d,%d", header="t_s,tokens_in,tokens_out", comments="")
    else:
        rows = np.rec.fromarrays((tr.arrival_s, tr.tokens_in, tr.tokens_out, tr.service_s))
        np.savetxt(path, rows, fmt="%.6f,%d,%d,%.3f", header="t_s,tokens_in,tokens_out,service_s", comments="")
    return path


def simulate_input(shape: TrafficShape, path: Path, *, peak_replicas: int | None = 20) -> TraceInputSettings:
    """``ebb simulate``'s input settings for the file :func:`write_csv` wrote at ``path``; the load is
    calibrated to an oracle peak of ``peak_replicas`` (None: ``--peak-replicas off``, the load as drawn)."""
    peak = "off" if peak_replicas is None else str(peak_replicas)
    if shape.per_second:
        return TraceInputSettings(trace=str(path), format="csv", time_col="t_s", count_col="count",
                                  peak_replicas=peak)
    return TraceInputSettings(trace=str(path), format="csv", time_col="t_s", tokens_in_col="tokens_in",
                              tokens_out_col="tokens_out",
                              service_time_column="service_s" if shape.long_service else None,
                              concurrency=1 if shape.long_service else None, peak_replicas=peak)


LONG_SERVICE_WAIT_MS = 30_000.0
"""Long-service SLO: a request waits at most 30 s for its replica (its "first token" is its start)."""


def slo(shape: TrafficShape) -> SloSettings:
    """The SLO the shape is judged against: the default (TTFT 2 s, end-to-end 60 s) for LLM traffic;
    for long service a 30 s wait and an end-to-end limit of that wait plus ``service_max_s`` (so the
    longest job can meet it: the default 60 s would fail every job over a minute)."""
    if not shape.long_service:
        return SloSettings()
    return SloSettings(ttft_ms=LONG_SERVICE_WAIT_MS, e2e_ms=LONG_SERVICE_WAIT_MS + 1000.0 * math.ceil(shape.service_max_s))


_FLAGS = (("format", "--format"), ("time_col", "--time-col"), ("count_col", "--count-col"),
          ("tokens_in_col", "--tokens-in-col"), ("tokens_out_col", "--tokens-out-col"),
          ("service_time_column", "--service-time-column"), ("concurrency", "--concurrency"),
          ("peak_replicas", "--peak-replicas"))


def simulate_argv(settings: TraceInputSettings, objective: SloSettings | None = None) -> list[str]:
    """The ``ebb simulate`` flags that give ``settings`` (``--trace FILE --format csv ...``) and, when it
    is not the default, the SLO ``objective`` (``--slo-ttft-ms``, ``--slo-e2e-ms``)."""
    argv = ["--trace", settings.trace]
    for field, flag in _FLAGS:
        value = getattr(settings, field)
        if value is not None:
            argv += [flag, str(value)]
    if objective is not None and objective != SloSettings():
        argv += ["--slo-ttft-ms", f"{objective.ttft_ms:g}", "--slo-e2e-ms", f"{objective.e2e_ms:g}"]
    return argv
