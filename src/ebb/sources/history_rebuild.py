"""A request trace rebuilt from a fleet's Prometheus history: arrivals from counters, sizes from histograms.

Input: a :class:`StepHistory` — per step of ``step_s`` seconds, what the engines' counters and
histograms added (summed over every engine target, resets already handled by the reader,
:mod:`ebb.sources.prometheus_history`). Output: a :class:`~ebb.model.trace.RequestTrace` and the
:class:`~ebb.model.measured.MeasuredFleet` for the "as run" row. Pure and vectorised (numpy); the
same history and ``seed`` give bit-identical outputs.

How (the reconstruction's resolution, which the tests hold it to):

* **Arrivals.** Engines count a request when it *finishes*. Step ``k`` (the interval
  ``(start + k·step, start + (k+1)·step]``) finished ``N_k`` requests (the counter's increase,
  rounded to a whole number). They are spread uniformly at random over the step — given ``N``
  arrivals in an interval, a Poisson process places them exactly so — then moved back by how long
  the samples typically lag the step (``lag_s``: the counter was read by a scrape before the step's
  end) and by the mean end-to-end latency of their window (the E2E histogram's ``_sum`` over its
  ``_count``), so they land when they arrived; with no E2E histogram they stay at completion. Counts per step are exact; per
  hour they are off only by the requests whose latency differs from the window mean across an hour
  boundary (well under 1 % for latencies of seconds to minutes). Times are whole milliseconds, so a
  saved trace replays bit for bit.
* **Token sizes.** Per window of :data:`WINDOW_S` (300 s) the prompt and output histograms say how
  many requests fell in each bucket. The window's requests get exactly that multiset of buckets,
  shuffled (when the counter and the histogram disagree, buckets are drawn in proportion to the
  counts); a window whose histogram is empty draws from the whole range's. Within its bucket
  ``(lo, hi]`` a size is log-uniform over the integers ``lo+1 .. hi`` (bounds are 1-2-5 steps, so
  density falls inside a bucket), the positions then tilted so the window's sizes add up to the
  histogram's ``_sum`` for the window (as nearly as the buckets allow; to rounding for integers):
  the window's mean size, which the simulated work is proportional to, is the real one. The ``+Inf``
  bucket is taken as ``(lo, 2·lo]``. So each request's size is within one bucket of a real request's
  of the same window, and every quantile of the range lies in the same bucket as the real one's. Prompt and output sizes are drawn independently
  (correlation 0.09 in the Azure conversation trace).
* **Service times** (when the engine exports a running-time histogram, vLLM's
  ``request_inference_time_seconds``): the same per-window draw and tilt, uniform within the bucket,
  read by ``ebb simulate``'s service-time model only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

import numpy as np
import numpy.typing as npt

from ebb.errors import InputError
from ebb.model.ids import TraceName
from ebb.model.measured import BucketSeries, MeasuredFleet
from ebb.model.trace import RequestTrace
from ebb.model.trace_ops import MAX_REQUESTS

__all__ = ["WINDOW_S", "StepHistory", "arrivals_ms", "assign_buckets", "measured_fleet", "rebuild_trace",
           "sample_in_buckets", "window_counts", "window_steps"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
WINDOW_S: Final = 300.0
"""Width of the windows whose histograms give the requests' sizes and latency shift (s), and of the
as-run row's latency bins: a whole number of steps of at least this (one step when steps are longer)."""


@dataclass(frozen=True)
class StepHistory:
    """Per step: what the fleet's counters and histograms added, and the replicas it ran.

    Bucket series here have one bin per step. ``replicas`` is NaN where the history had no value."""

    start_unix_s: float
    step_s: float
    requests: FloatArray
    tokens_in: BucketSeries
    tokens_out: BucketSeries
    ttft_s: BucketSeries | None
    e2e_s: BucketSeries | None
    service_s: BucketSeries | None
    replicas: FloatArray | None
    replicas_from: str = ""
    lag_s: float = 0.0
    """How long before a step's end its samples were typically taken (s): the arrivals move back by it."""
    provenance: Mapping[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    @property
    def steps(self) -> int:
        return len(self.requests)


def window_steps(step_s: float) -> int:
    """Steps per window: the whole number of steps nearest :data:`WINDOW_S`, at least one."""
    return max(1, int(round(WINDOW_S / step_s)))


def window_counts(per_step: FloatArray, k: int) -> FloatArray:
    """Rows of ``per_step`` (steps × columns, or steps) summed over windows of ``k`` steps (the last partial)."""
    n = per_step.shape[0]
    pad = (-n) % k
    shape = (n + pad) // k, k, *per_step.shape[1:]
    padded = np.concatenate([per_step, np.zeros((pad, *per_step.shape[1:]))]) if pad else per_step
    return np.asarray(padded.reshape(shape).sum(axis=1), dtype=np.float64)


def arrivals_ms(requests: FloatArray, step_s: float, shift_s: FloatArray, rng: np.random.Generator) -> IntArray:
    """Arrival times (whole ms from the start, in step order, not sorted) of ``requests[k]`` completions
    per step, spread uniformly over each step and moved back by ``shift_s[k]`` (clipped at 0; past
    the end of the range, clipped to it)."""
    n_k = np.rint(np.maximum(requests, 0.0)).astype(np.int64)
    total = int(n_k.sum())
    if total > MAX_REQUESTS:
        raise InputError(f"the history holds {total:,} requests, more than the {MAX_REQUESTS:,} Ebb simulates",
                         fix="read a shorter range (--since, --start/--end)")
    step_of = np.repeat(np.arange(len(n_k)), n_k)
    t = (step_of + rng.random(total)) * step_s - shift_s[step_of]
    return np.clip(np.floor(t * 1000.0), 0.0, len(n_k) * step_s * 1000.0).astype(np.int64)


def assign_buckets(window_of: IntArray, counts: FloatArray, rng: np.random.Generator) -> IntArray:
    """A bucket index for each request (``window_of[i]``: its window; sorted ascending) such that each
    window's requests carry exactly its histogram's multiset of buckets when the sizes agree, else
    buckets drawn in proportion to the window's counts (the range's when the window has none)."""
    c = np.rint(np.maximum(counts, 0.0)).astype(np.int64)
    n_req = len(window_of)
    if n_req == 0:
        return np.zeros(0, dtype=np.int64)
    overall = c.sum(axis=0)
    if overall.sum() == 0:
        raise ValueError("the histogram holds no observation over the whole range")
    nw, nb = c.shape
    per_window = np.bincount(window_of, minlength=nw)
    pool_size = c.sum(axis=1)
    # the pool: each window's bucket labels, window by window
    pool = np.repeat(np.tile(np.arange(nb), nw), c.ravel())
    pool_start = np.concatenate([[0], np.cumsum(pool_size)[:-1]])
    # rank of each request inside its window, in a random order
    order = np.lexsort((rng.random(n_req), window_of))
    win_start = np.concatenate([[0], np.cumsum(per_window)[:-1]])
    rank = np.empty(n_req, dtype=np.int64)
    rank[order] = np.arange(n_req) - win_start[window_of[order]]
    exact = pool_size[window_of] == per_window[window_of]
    has = pool_size[window_of] > 0
    u = rng.random(n_req)
    drawn = pool_start[window_of] + np.minimum((u * pool_size[window_of]).astype(np.int64),
                                               np.maximum(pool_size[window_of] - 1, 0))
    idx = np.where(exact, pool_start[window_of] + rank, drawn)
    out = np.where(has, pool[np.minimum(idx, len(pool) - 1)] if len(pool) else 0, 0)
    # windows without observations: the whole range's distribution
    none = ~has
    if bool(none.any()):
        cdf = np.cumsum(overall) / overall.sum()
        out = np.where(none, np.searchsorted(cdf, rng.random(n_req), side="right").clip(0, nb - 1), out)
    return np.asarray(out, dtype=np.int64)


def sample_in_buckets(bucket: IntArray, bounds: tuple[float, ...], rng: np.random.Generator, *, integer: bool,
                      window_of: IntArray | None = None, window_sums: FloatArray | None = None) -> FloatArray:
    """A value inside each request's bucket ``(lo, hi]`` (``+Inf`` as ``(lo, 2·lo]``) at a random
    position ``u``: integers log-uniform over ``lo+1 .. hi`` (``integer``), else uniform over the bucket.

    With ``window_sums`` (each window's sum of observations, the histogram's ``_sum``; NaN: unknown)
    the positions of a window's requests are tilted, ``u → u^a`` with one ``a`` in ``[e^-6, e^6]`` per
    window found by bisection, so that the window's values add up to its sum as nearly as their
    buckets allow (integers: to rounding). Every value stays inside its bucket either way."""
    up = np.asarray(bounds, dtype=np.float64)
    lo = np.concatenate([[0.0], up[:-1]])
    hi = np.where(np.isinf(up), np.maximum(2.0 * lo, lo + 1.0), up)
    b_lo, b_hi = lo[bucket], hi[bucket]
    first, last = np.floor(b_lo) + 1.0, np.maximum(np.floor(b_hi), np.floor(b_lo) + 1.0)
    log_first, log_span = np.log(first), np.log(last + 1.0) - np.log(first)

    def place(pos: FloatArray) -> FloatArray:
        if integer:
            return np.asarray(np.clip(np.floor(np.exp(log_first + pos * log_span)), first, last), dtype=np.float64)
        return np.asarray(b_lo + pos * (b_hi - b_lo), dtype=np.float64)

    u = rng.random(len(bucket))
    if window_sums is None or window_of is None or len(bucket) == 0:
        return place(u)
    nw = len(window_sums)
    known = np.isfinite(window_sums)
    target = np.where(known, window_sums, 0.0)
    low, high = np.full(nw, -_TILT), np.full(nw, _TILT)
    for _ in range(_BISECTIONS):
        mid = (low + high) / 2.0
        got = np.bincount(window_of, weights=place(u ** np.exp(mid)[window_of]), minlength=nw)[:nw]
        over = got > target  # too large: a larger exponent moves positions down
        low, high = np.where(over, mid, low), np.where(over, high, mid)
    a = np.where(known, np.exp((low + high) / 2.0), 1.0)
    return place(u ** a[window_of])


_TILT = 6.0
"""Bound of the log of the in-bucket tilt exponent: ``u^a`` with ``a`` from e^-6 (top of the bucket)
to e^6 (its bottom)."""
_BISECTIONS = 32
"""Bisection steps for each window's tilt: 12 / 2^32 of the log-exponent range, far below one token."""


def _shift_s(h: StepHistory, k: int) -> FloatArray:
    """Per step: the mean end-to-end latency of its window (0 without the E2E histogram or observations)."""
    if h.e2e_s is None or h.e2e_s.sums is None:
        return np.zeros(h.steps)
    count = window_counts(np.asarray(h.e2e_s.counts, dtype=np.float64).sum(axis=1), k)
    total = window_counts(np.asarray(h.e2e_s.sums, dtype=np.float64), k)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(count > 0, total / count, 0.0)
    return np.repeat(mean, k)[: h.steps]


def _sizes(window_of: IntArray, series: BucketSeries, k: int, rng: np.random.Generator, what: str,
           *, integer: bool) -> FloatArray:
    try:
        bucket = assign_buckets(window_of, window_counts(np.asarray(series.counts, dtype=np.float64), k), rng)
    except ValueError as exc:
        raise InputError(f"the {what} histogram holds no observation over the range",
                         fix="check that the engine exports it (vLLM does by default) and that the range "
                             "and --selector cover the fleet's serving time") from exc
    sums = None if series.sums is None else window_counts(np.asarray(series.sums, dtype=np.float64), k)
    return sample_in_buckets(bucket, series.bounds, rng, integer=integer, window_of=window_of, window_sums=sums)


def rebuild_trace(h: StepHistory, *, name: str, source: str, seed: int) -> RequestTrace:
    """The requests of ``h`` (module docstring: how, and to what resolution)."""
    rng = np.random.default_rng(seed)
    k = window_steps(h.step_s)
    ms = arrivals_ms(h.requests, h.step_s, _shift_s(h, k) + h.lag_s, rng)
    if len(ms) == 0:
        raise InputError("the history holds no finished request in this range",
                         fix="widen the range (--since, --start/--end) or check --selector")
    # each request's window: the window of the step it finished in (the shift keeps the pairing)
    n_k = np.rint(np.maximum(h.requests, 0.0)).astype(np.int64)
    window_of = np.repeat(np.arange(h.steps) // k, n_k)
    tin = _sizes(window_of, h.tokens_in, k, rng, "prompt-token", integer=True)
    tout = _sizes(window_of, h.tokens_out, k, rng, "output-token", integer=True)
    svc = None if h.service_s is None else _sizes(window_of, h.service_s, k, rng, "running-time", integer=False)
    order = np.argsort(ms, kind="stable")
    ms, tin, tout = ms[order], tin[order], tout[order]
    svc = None if svc is None else svc[order]
    notes = (*h.notes, f"rebuilt from Prometheus: {len(ms):,} finished requests over {h.steps:,} steps of "
             f"{h.step_s:g} s, sizes from the engine's histograms per {k * h.step_s:g} s window")
    return RequestTrace(name=TraceName(name), arrival_s=ms / 1000.0, tokens_in=tin.astype(np.int64),
                        tokens_out=tout.astype(np.int64), source=source, start_epoch_s=h.start_unix_s,
                        notes=notes, service_s=svc)


def measured_fleet(h: StepHistory) -> MeasuredFleet | None:
    """The as-run record of ``h``: its replica curve (a step without a value holds the last one, the
    first ones the first known) and its latency histograms per window; None without replicas."""
    if h.replicas is None or not bool(np.isfinite(h.replicas).any()):
        return None
    r = np.asarray(h.replicas, dtype=np.float64)
    known = np.isfinite(r)
    idx = np.where(known, np.arange(len(r)), 0)
    np.maximum.accumulate(idx, out=idx)
    filled = np.where(known, r, r[idx])
    first = int(np.flatnonzero(known)[0])
    filled[:first] = r[first]
    notes = h.notes
    if not bool(known.all()):
        notes = (*notes, f"{int((~known).sum()):,} of {len(r):,} steps had no replica value; each holds the last known")
    k = window_steps(h.step_s)

    def binned(s: BucketSeries | None) -> BucketSeries | None:
        return None if s is None else BucketSeries(s.bounds, window_counts(np.asarray(s.counts, dtype=np.float64), k))

    return MeasuredFleet(start_unix_s=h.start_unix_s, step_s=h.step_s, replicas=np.maximum(filled, 0.0),
                         bin_s=k * h.step_s, ttft_s=binned(h.ttft_s), e2e_s=binned(h.e2e_s),
                         replicas_from=h.replicas_from, notes=notes)


