"""A fleet's past read from Prometheus' HTTP API: per step, what its engines' counters and histograms added.

``ebb simulate --from-prometheus URL`` reads a range (:class:`HistoryRange`) of one fleet's series
(its engine's, :data:`HISTORY_METRICS`, scoped by a selector) and hands a
:class:`~ebb.sources.history_rebuild.StepHistory` to the reconstruction.

Queries (``S`` = the selector's matchers, ``step`` the step; ``INC(x) = (x{S} - x{S} offset step)
>= 0 or x{S}``: per series, the increase since the previous step; after a counter reset, or for a
series that starts inside the range (a new pod, whose counters start at 0), its whole value)::

    sum(INC(REQUESTS))                       finished requests per step (every finished_reason)
    sum by (le) (INC(PROMPT_bucket))         prompt / output tokens, TTFT, E2E, running time per bucket
    sum(INC(PROMPT_sum))                     their sums per step (all but TTFT's): sizes' window
                                             totals, the E2E mean that shifts arrivals back
    sum(kube_deployment_status_replicas{namespace="NS",deployment="NAME"})   with a Deployment
    sum(up{S})                               without one: the engine targets up
    max(count_over_time(REQUESTS{S}[1h]))    at 24 points: the scrape interval (no --step-s)
    time() - timestamp(REQUESTS{S})          at 24 points: how far samples lag the steps (median)

Guarantees:

* **Increments are exact** where every series has a sample at least every step and no gap over
  Prometheus' 5-minute lookback: the per-step values telescope to the counters' total increase, resets
  included (a reset loses only what was counted between the last sample and the reset). A series
  back after a gap of more than 5 minutes is counted as new (its whole value once more).
* **Bounded requests.** The range is split into chunks of at most :data:`MAX_POINTS` (11,000)
  evaluation steps, Prometheus' own limit per query; every answer is capped by the client
  (:data:`MAX_ANSWER_BYTES`, 64 MiB; :data:`QUERY_TIMEOUT_S`, 60 s); a range longer than
  :data:`MAX_RANGE_S` (31 days) or over :data:`MAX_STEPS` steps is refused before any query.
* **One line for bad input** (exit 2): an unreachable server, a refused query, a malformed answer, no
  series for the engine under the selector, no replica series — an :class:`~ebb.errors.InputError`
  naming the URL or the query and the fix.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final, Protocol

import numpy as np
import numpy.typing as npt

from ebb.errors import ConfigError, InputError, SourceUnavailable
from ebb.model.measured import BucketSeries
from ebb.sources.history_rebuild import StepHistory
from ebb.sources.prometheus_api import PromSeries
from ebb.sources.prometheus_grid import bucket_bound, lay
from ebb.sources.promql import LabelMatcher, Selector, check_metric_name, duration

__all__ = ["HISTORY_METRICS", "MAX_ANSWER_BYTES", "MAX_POINTS", "MAX_RANGE_S", "MAX_STEPS", "QUERY_TIMEOUT_S",
           "HistoryMetrics", "HistoryRange", "chunks", "deployment_selector", "increase_query", "read_history",
           "sample_lag_s", "scrape_interval_s"]

FloatArray = npt.NDArray[np.float64]
MAX_POINTS: Final = 11_000
"""Evaluation steps per range query: Prometheus refuses more than 11,000 points per series."""
MAX_RANGE_S: Final = 31 * 86_400
"""Longest range read (s): a month, the longest a fleet's Prometheus usually keeps."""
MAX_STEPS: Final = 1_000_000
"""Most steps in a range (31 days at 2.7 s): the reconstruction holds a few arrays of this length per bucket."""
MAX_ANSWER_BYTES: Final = 64 * 1024 * 1024
"""Body cap of one answer: a chunk of 11,000 points for 30 buckets is about 10 MB of JSON."""
QUERY_TIMEOUT_S: Final = 60.0
"""Per query, connect to last byte: a week's counters are read in seconds by a healthy server."""

_DATA = "../shared/data/engine-metrics"


@dataclass(frozen=True)
class HistoryMetrics:
    """One engine's series for a history: names in preference order (the first present wins)."""

    engine: str
    source: str
    """Citation: the engine files the names come from."""
    requests: tuple[str, ...]
    """Counter of finished requests (its sample name, ``_total`` included)."""
    prompt_tokens: tuple[str, ...]
    """Histogram families (without ``_bucket``) of prompt tokens per finished request."""
    output_tokens: tuple[str, ...]
    ttft: tuple[str, ...]
    """Time to first token (s)."""
    e2e: tuple[str, ...]
    """End-to-end latency (s)."""
    service: tuple[str, ...] = ()
    """Running time per request (s), optional: the service-time model's input."""
    hint: str = ""
    """How to make the engine export what is missing."""


HISTORY_METRICS: Final = {
    "vllm": HistoryMetrics(
        engine="vllm",
        source=(f"{_DATA}/vllm/source/vllm-project__vllm__vllm__v1__metrics__loggers.py (v0.20.1, V1) and "
                f"{_DATA}/vllm/source/v0.5.4/vllm-project__vllm__vllm__engine__metrics.py (V0)"),
        requests=("vllm:request_success_total",),
        prompt_tokens=("vllm:request_prompt_tokens",),
        output_tokens=("vllm:request_generation_tokens",),
        ttft=("vllm:time_to_first_token_seconds",),
        e2e=("vllm:e2e_request_latency_seconds",),
        service=("vllm:request_inference_time_seconds",),
        hint="vLLM's OpenAI server exports these on /metrics by default; point --selector at its pods"),
    "sglang": HistoryMetrics(
        engine="sglang",
        source=f"{_DATA}/sglang/source/sgl-project__sglang__python__sglang__srt__metrics__collector.py (v0.5.8)",
        requests=("sglang:num_requests_total",),
        prompt_tokens=("sglang:prompt_tokens_histogram",),
        output_tokens=("sglang:generation_tokens_histogram",),
        ttft=("sglang:time_to_first_token_seconds",),
        e2e=("sglang:e2e_request_latency_seconds",),
        hint="start SGLang with --enable-metrics --collect-tokens-histogram"),
}
"""Engines whose history Ebb reads, with the series it needs."""


@dataclass(frozen=True)
class HistoryRange:
    """``[start_s, end_s]`` (Unix s) in steps of ``step_s``: step ``k`` is ``(start + k·step, start + (k+1)·step]``."""

    start_s: float
    end_s: float
    step_s: float

    def __post_init__(self) -> None:
        if not (math.isfinite(self.step_s) and self.step_s > 0):
            raise ConfigError(f"--step-s {self.step_s!r}: must be > 0 seconds (fix: e.g. --step-s 15, the scrape "
                              "interval)")
        span = self.end_s - self.start_s
        if not (math.isfinite(span) and span >= self.step_s):
            raise ConfigError(f"the range {_stamp(self.start_s)} .. {_stamp(self.end_s)} is shorter than one step "
                              f"of {self.step_s:g} s (fix: --end after --start, or a longer --since)")
        if span > MAX_RANGE_S:
            raise ConfigError(f"the range {_stamp(self.start_s)} .. {_stamp(self.end_s)} spans {span / 86400:.1f} "
                              f"days, longer than the {MAX_RANGE_S // 86400} days Ebb reads (fix: a shorter --since, "
                              "or read it in parts with --start/--end)")
        if self.steps > MAX_STEPS:
            raise ConfigError(f"the range holds {self.steps:,} steps of {self.step_s:g} s, more than {MAX_STEPS:,} "
                              f"(fix: a larger --step-s, or a shorter range)")

    @property
    def steps(self) -> int:
        return int(math.floor((self.end_s - self.start_s) / self.step_s + 1e-9))


def _stamp(t: float) -> str:
    try:
        return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    except (OverflowError, OSError, ValueError):
        return repr(t)


def chunks(steps: int, max_points: int = MAX_POINTS) -> list[tuple[int, int]]:
    """``[(first, last), ...]`` step indexes (inclusive) of each query: consecutive, at most ``max_points`` each."""
    if max_points < 1:
        raise ValueError(f"max_points must be >= 1, got {max_points!r}")
    return [(a, min(a + max_points, steps) - 1) for a in range(0, steps, max_points)]


def increase_query(name: str, selector: Selector, step_s: float, *, by_le: bool) -> str:
    """``sum [by (le)] ((x - x offset step) >= 0 or x)`` of ``name`` under ``selector`` (module docstring)."""
    x = selector.select(check_metric_name(name, "--engine"))
    inner = f"({x} - {x} offset {duration(step_s)}) >= 0 or {x}"
    return f"sum by (le) ({inner})" if by_le else f"sum({inner})"


def deployment_selector(text: str) -> Selector:
    """``NAMESPACE/NAME`` as kube-state-metrics' matchers; ConfigError otherwise."""
    ns, sep, name = text.partition("/")
    ok = sep and all(p and len(p) <= 253 and all(c.isalnum() or c in "-." for c in p) for p in (ns, name))
    if not ok:
        raise ConfigError(f"--deployment {text[:120]!r}: expected NAMESPACE/NAME (fix: e.g. --deployment "
                          "serving/vllm-llama)")
    return Selector((LabelMatcher("namespace", "=", ns), LabelMatcher("deployment", "=", name)))


class RangeClient(Protocol):
    """What the reader asks of :class:`~ebb.sources.prometheus_api.PrometheusClient`."""

    base_url: str

    def range(self, query: str, start_s: float, end_s: float, step_s: float, *,
              timeout_s: float | None = None) -> tuple[PromSeries, ...]: ...


def _ask(client: RangeClient, query: str, start_s: float, end_s: float, step_s: float) -> tuple[PromSeries, ...]:
    try:
        return client.range(query, start_s, end_s, step_s, timeout_s=QUERY_TIMEOUT_S)
    except SourceUnavailable as exc:
        raise InputError(f"{exc}", fix=f"check that --from-prometheus {client.base_url} answers (curl "
                         f"{client.base_url}/-/ready) and is reachable from here") from exc


def _probe(client: RangeClient, query: str, rng: HistoryRange, look_s: float) -> FloatArray:
    """``query``'s finite values at up to 24 points spread over the range (after its first ``look_s``)."""
    span = rng.end_s - rng.start_s
    got = _ask(client, query, rng.start_s + min(look_s, span), rng.end_s, max(span / 24.0, 1.0))
    vals = [s.value[np.isfinite(s.value)] for s in got]
    return np.concatenate(vals) if vals else np.zeros(0)


def scrape_interval_s(client: RangeClient, name: str, selector: Selector, rng: HistoryRange) -> float | None:
    """The engine's scrape interval (s), from the densest series' samples per hour at up to 24 points
    of the range; None when there are too few samples to tell."""
    look = min(3600.0, rng.end_s - rng.start_s)
    x = selector.select(check_metric_name(name, "--engine"))
    counts = _probe(client, f"max(count_over_time({x}[{duration(look)}]))", rng, look)
    best = float(counts.max()) if len(counts) else 0.0
    return look / best if best >= 2 else None


def sample_lag_s(client: RangeClient, name: str, selector: Selector, rng: HistoryRange) -> float:
    """How long (s) the newest sample of ``name`` typically is before an evaluation step: the median of
    ``time() - timestamp(x)`` over the series at 24 points, within ``[0, step)``; 0 when none answers.

    A step's increase was counted by samples this much before the step's end, so the rebuilt
    arrivals are moved back by it (targets scraped at other phases stay within a scrape interval)."""
    x = selector.select(check_metric_name(name, "--engine"))
    lags = _probe(client, f"time() - timestamp({x})", rng, 0.0)
    lags = lags[(lags >= 0) & (lags < 300.0)]  # past the 5-minute lookback: a stale series, not a phase
    return float(np.median(lags) % rng.step_s) if len(lags) else 0.0


def _grid(client: RangeClient, query: str, rng: HistoryRange, *, offset_steps: int) -> dict[float | None, FloatArray]:
    """The query's series on the range's step grid, chunk by chunk, by bucket bound (None: no ``le``);
    NaN where no series answered.

    ``offset_steps`` = 1: step ``k`` is evaluated at ``start + (k+1)·step`` (an increase over the step);
    0: at ``start + k·step`` (a gauge held over the step)."""
    n = rng.steps
    out: dict[float | None, FloatArray] = {}
    for first, last in chunks(n):
        t0 = rng.start_s + (first + offset_steps) * rng.step_s
        t1 = rng.start_s + (last + offset_steps) * rng.step_s
        series = _ask(client, query, t0, t1, rng.step_s)
        laid = lay(series, t0, last - first + 1, rng.step_s)
        for grid in laid.values():
            for key, vals in grid.values.items():
                has_le = any(k == "le" for k, _ in key)
                bound = bucket_bound(key) if has_le else None
                if has_le and bound is None:
                    continue  # an le that is no bound: not a histogram bucket
                col = out.setdefault(bound, np.full(n, np.nan))
                seg = col[first:last + 1]
                pres = grid.present[key]
                seg[pres] = np.where(np.isnan(seg[pres]), 0.0, seg[pres]) + vals[pres]
    return out


def _buckets(cumulative: dict[float | None, FloatArray], n: int) -> BucketSeries | None:
    """Per-step cumulative bucket increases as non-cumulative counts (a bound below a lower one's adds 0)."""
    bounds = sorted(b for b in cumulative if b is not None)
    if not bounds:
        return None
    counts = np.zeros((n, len(bounds)))
    below = np.zeros(n)
    for j, b in enumerate(bounds):
        c = np.nan_to_num(cumulative[b], nan=0.0)
        counts[:, j] = np.maximum(c - below, 0.0)
        below = np.maximum(below, c)
    return BucketSeries(tuple(bounds), counts)


def _first_present(client: RangeClient, names: Sequence[str], rng: HistoryRange,
                   query: Callable[[str], str]) -> tuple[str, dict[float | None, FloatArray]] | None:
    """The first of ``names`` whose query answers anywhere in the range, with its grid."""
    for name in names:
        cols = _grid(client, query(name), rng, offset_steps=1)
        if any(np.isfinite(v).any() for v in cols.values()):
            return name, cols
    return None


def read_history(client: RangeClient, metrics: HistoryMetrics, selector: Selector, rng: HistoryRange, *,
                 deployment: Selector | None = None) -> StepHistory:
    """Everything the reconstruction needs over ``rng`` (module docstring: the queries and guarantees)."""
    n, step = rng.steps, rng.step_s
    where = f"{metrics.engine} series under --selector {selector.render() or '(none)'!r} at {client.base_url}"

    def missing(what: str, names: Sequence[str]) -> InputError:
        return InputError(f"no {what} series ({', '.join(names)}) among the {where} between {_stamp(rng.start_s)} "
                          f"and {_stamp(rng.end_s)}",
                          fix=f"check --selector and the range; {metrics.hint}")

    def counter(name: str) -> str:
        return increase_query(name, selector, step, by_le=False)

    def family(name: str) -> str:
        return increase_query(name + "_bucket", selector, step, by_le=True)

    found = _first_present(client, metrics.requests, rng, counter)
    if found is None:
        raise missing("finished-request counter", metrics.requests)
    requests = np.nan_to_num(found[1][None], nan=0.0)
    lag = sample_lag_s(client, found[0], selector, rng)
    hist: dict[str, tuple[str, BucketSeries] | None] = {}
    for key, what, names, required in (("prompt_tokens", "prompt-token histogram", metrics.prompt_tokens, True),
                                       ("output_tokens", "output-token histogram", metrics.output_tokens, True),
                                       ("ttft", "TTFT histogram", metrics.ttft, False),
                                       ("e2e", "E2E histogram", metrics.e2e, False),
                                       ("service", "running-time histogram", metrics.service, False)):
        got = _first_present(client, names, rng, family) if names else None
        series = None if got is None else _buckets(got[1], n)
        if series is None and required:
            raise missing(what, names)
        if got is not None and series is not None and key != "ttft":  # sizes and the shift use the sums
            sums = _grid(client, counter(got[0] + "_sum"), rng, offset_steps=1).get(None)
            series = BucketSeries(series.bounds, series.counts,
                                  None if sums is None else np.maximum(np.nan_to_num(sums, nan=0.0), 0.0))
        hist[key] = None if series is None or got is None else (got[0], series)
    e2e = hist["e2e"]
    replicas_q = (f"sum({deployment.select('kube_deployment_status_replicas')})" if deployment is not None
                  else f"sum({selector.select('up')})")
    reps = _grid(client, replicas_q, rng, offset_steps=0).get(None)
    notes: list[str] = []
    if reps is None or not bool(np.isfinite(reps).any()):
        what = "kube_deployment_status_replicas (kube-state-metrics)" if deployment is not None else "up"
        notes.append(f"no {what} series answered {replicas_q!r}: no as-run row")
        reps = None
    hnames = {k: v[0] for k, v in hist.items() if v is not None}
    return StepHistory(
        start_unix_s=rng.start_s, step_s=step, requests=requests, lag_s=lag,
        tokens_in=_series(hist["prompt_tokens"]), tokens_out=_series(hist["output_tokens"]),
        ttft_s=_opt(hist["ttft"]), e2e_s=_opt(e2e),
        service_s=_opt(hist["service"]), replicas=reps, replicas_from=replicas_q,
        provenance={"prometheus": client.base_url, "engine": metrics.engine, "selector": selector.render(),
                    "start": _stamp(rng.start_s), "end": _stamp(rng.start_s + n * step), "step_s": f"{step:g}",
                    "lag_s": f"{lag:g}",
                    "requests": found[0], **hnames,
                    "replicas": replicas_q},
        notes=tuple(notes))


def _series(got: tuple[str, BucketSeries] | None) -> BucketSeries:
    assert got is not None  # required histograms were checked
    return got[1]


def _opt(got: tuple[str, BucketSeries] | None) -> BucketSeries | None:
    return None if got is None else got[1]
