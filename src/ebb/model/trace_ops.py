"""Pure transformations of traces: counts to requests, load scaling, time windows.

Guarantees (every function):

* Pure and deterministic: inputs are never modified, and the same inputs and ``seed`` give
  bit-identical outputs (numpy ``default_rng(seed)``, PCG64).
* Outputs satisfy :mod:`ebb.model.trace`'s invariants: ``arrival_s`` sorted ascending and >= 0,
  non-negative int64 tokens and counts, read-only arrays.
* Vectorised: no Python loop runs per request or per bin.
* Bad arguments (negative scale factors, reversed windows, non-finite values) raise
  :class:`ValueError` quoting the value received.
* Bounded: :func:`counts_to_requests` and :func:`scale_requests` never build more than
  :data:`MAX_REQUESTS` (50,000,000) requests, and :func:`scale_counts` never makes a bin count
  reach :data:`MAX_BIN_COUNT` (10**18). The size is computed from the counts (in float64, so a sum
  past int64 cannot wrap) *before* anything is allocated; past a bound they raise one
  :class:`~ebb.errors.InputError` naming the trace's source file, the size it would have and the fix.
* The simulator's per-second and per-bin state is bounded the same way, before it is allocated:
  :func:`refuse_long_span` (:data:`MAX_SPAN_S`, 366 days) and :func:`refuse_many_bins`
  (:data:`MAX_FLUID_BINS`, 10 M fluid bins).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Final, overload

import numpy as np

from ebb.errors import InputError
from ebb.model.trace import CountSeries, FloatArray, IntArray, RequestTrace

__all__ = [
    "AZURE_CONV_2023_TOKENS",
    "DEFAULT_TOKENS",
    "MAX_BIN_COUNT",
    "MAX_FLUID_BINS",
    "MAX_REQUESTS",
    "MAX_SPAN_S",
    "TokenDistribution",
    "counts_to_requests",
    "refuse_long_span",
    "refuse_many_bins",
    "scale_counts",
    "scale_requests",
    "window",
]


@dataclass(frozen=True)
class TokenDistribution:
    """Independent lognormal prompt (``in``) and completion (``out``) token sizes, clipped to bounds.

    A sample is ``clip(round(exp(N(mu, sigma))), lo, hi)`` per side. The two sides are drawn
    independently: in the Azure conversation trace the correlation of log sizes is only 0.09.
    """

    in_mu: float
    in_sigma: float
    out_mu: float
    out_sigma: float
    in_min: int = 1
    in_max: int = 8192
    out_min: int = 1
    out_max: int = 2048

    def __post_init__(self) -> None:
        for key in ("in_mu", "in_sigma", "out_mu", "out_sigma"):
            value = getattr(self, key)
            if not math.isfinite(value):
                raise ValueError(f"TokenDistribution.{key} must be finite, got {value!r}")
        if self.in_sigma < 0 or self.out_sigma < 0:
            raise ValueError(f"TokenDistribution sigmas must be >= 0, got in={self.in_sigma!r}, out={self.out_sigma!r}")
        if not (0 <= self.in_min <= self.in_max and 0 <= self.out_min <= self.out_max):
            raise ValueError(
                f"TokenDistribution bounds must satisfy 0 <= min <= max, got in=[{self.in_min}, {self.in_max}], "
                f"out=[{self.out_min}, {self.out_max}]")

    def sample(self, n: int, rng: np.random.Generator) -> tuple[IntArray, IntArray]:
        """Draw ``n`` (tokens_in, tokens_out) pairs; inputs first, then outputs, from ``rng``."""
        tin = np.rint(np.exp(rng.normal(self.in_mu, self.in_sigma, n)))
        tout = np.rint(np.exp(rng.normal(self.out_mu, self.out_sigma, n)))
        return (np.clip(tin, self.in_min, self.in_max).astype(np.int64),
                np.clip(tout, self.out_min, self.out_max).astype(np.int64))


AZURE_CONV_2023_TOKENS = TokenDistribution(
    in_mu=6.6332850719147425,
    in_sigma=0.9850794107779567,
    out_mu=5.018996887187218,
    out_sigma=0.8590092837592839,
)
"""Lognormal fit to the Azure LLM inference 2023 *conversation* trace (Splitwise, ISCA 2024).

How it was fitted: all 19,366 rows of ``AzureLLMInferenceTrace_conv.csv`` (Azure/AzurePublicDataset
at commit b469a113cedca53ddc3bdea71a143dc4b7d8700c); ``ContextTokens`` clipped to [1, 8192] and
``GeneratedTokens`` clipped to [1, 2048]; ``mu`` = mean and ``sigma`` = population standard deviation
(ddof=0, the maximum-likelihood estimate) of the natural log of the clipped values. Only one
context value (14,050) exceeded its clip bound. Medians: exp(6.633) ~ 760 prompt tokens,
exp(5.019) ~ 151 generated tokens (the file's means are 1,155 and 211).
"""

DEFAULT_TOKENS = AZURE_CONV_2023_TOKENS
"""Token sizes given to requests synthesised from a count series, unless the caller picks others."""


MAX_REQUESTS: Final = 50_000_000
"""Most requests one request-level trace may hold after expanding counts or scaling the load.

Why 50 M: a request-level replay peaks at about 230 bytes per request (arrival, tokens, the
engine's per-request state and results; measured as the RSS difference between 250 k- and
1 M-request replays of one policy plus the oracle), so the cap is about 11 GiB and over an hour of
replay on one core — the most a workstation gives one simulation. What is past it, e.g. the
6 * 10**10 requests of a counts file with 10**9 per second, used to fail in numpy after trying to
allocate hundreds of GiB. A bigger load is what ``--fidelity fluid`` is for: it simulates counts per
bin without materialising requests, in memory that grows with the duration, not the request count."""

_BYTES_PER_REQUEST: Final = 230

MAX_BIN_COUNT: Final = 10**18
"""Largest request count one bin may reach after scaling: the count reader's own bound, far below
int64's 9.2e18 so that sums over bins stay exact."""

_FLUID_FIX = ("use --fidelity fluid (it simulates counts without expanding them), or a --load-scale "
              f"that keeps it under {MAX_REQUESTS:,} requests")


def _refuse_size(source: str, what: str, requests: float) -> None:
    if requests > MAX_REQUESTS:
        raise InputError(f"{what} gives {requests:,.0f} requests, more than the {MAX_REQUESTS:,} a "
                         f"request-level simulation holds (about {requests * _BYTES_PER_REQUEST / 2**30:,.0f} GiB)",
                         path=source or None, fix=_FLUID_FIX)


MAX_SPAN_S: Final = 366 * 86_400
"""Longest trace (s from its first second to its last request) a simulation covers.

Why: the simulator keeps dense per-second state over the whole span (work rate, the oracle's
schedule, each policy's fleet), about 100 bytes per simulated second at request fidelity (measured
as the peak-RSS difference of 2-request traces spanning 2.3 and 11.6 days), however few requests
the trace holds. A year is then about 3 GiB; a trace whose two timestamps lie 31 years apart (a
unit mix-up: milliseconds read as seconds, an epoch next to a relative time) asked numpy for
7.45 GiB per array and was killed by the kernel before Python saw a MemoryError."""

_BYTES_PER_SPAN_S: Final = 100

MAX_FLUID_BINS: Final = 10_000_000
"""Most bins a fluid simulation holds: about 650 bytes each (peak RSS of a 2 M-bin run: 1.33 GB),
so about 6 GiB. At the 0.1 s bins a request log gets by default that is 11.6 days; ``--fluid-bin-ms
1000`` covers 116 days."""

_BYTES_PER_FLUID_BIN: Final = 650


def refuse_long_span(source: str, span_s: float) -> None:
    """Raise one :class:`~ebb.errors.InputError` when ``span_s`` is over :data:`MAX_SPAN_S` (or not finite)."""
    if not span_s <= MAX_SPAN_S:
        raise InputError(f"the trace spans {span_s / 86_400:,.1f} days, more than the {MAX_SPAN_S // 86_400} days "
                         f"a simulation covers (it keeps per-second state: about "
                         f"{span_s * _BYTES_PER_SPAN_S / 2**30:,.1f} GiB)", path=source or None,
                         fix="check the time column's unit (milliseconds read as seconds?), or simulate "
                             "a part with --window-s START:END")


def refuse_many_bins(source: str, bins: float, bin_s: float) -> None:
    """Raise one :class:`~ebb.errors.InputError` when a fluid run would hold over :data:`MAX_FLUID_BINS` bins."""
    if not bins <= MAX_FLUID_BINS:
        raise InputError(f"a fluid simulation at {bin_s:g}-s bins holds {bins:,.0f} bins, more than the "
                         f"{MAX_FLUID_BINS:,} it keeps (about {bins * _BYTES_PER_FLUID_BIN / 2**30:,.1f} GiB)",
                         path=source or None,
                         fix=f"use coarser bins (--fluid-bin-ms {_coarser_bin_ms(bins * bin_s)}), "
                             "--fidelity request, or a part of the trace with --window-s START:END")


def _coarser_bin_ms(span_s: float) -> int:
    """The smallest whole-second bin (in ms) that keeps ``span_s`` under :data:`MAX_FLUID_BINS`."""
    return 1000 * max(1, math.ceil(span_s / MAX_FLUID_BINS))


def _check_seed(seed: int) -> None:
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")


def counts_to_requests(series: CountSeries, *, seed: int, tokens: TokenDistribution = DEFAULT_TOKENS) -> RequestTrace:
    """Turn per-bin counts into individual requests.

    Each bin's ``c`` arrivals are i.i.d. uniform within the bin, which is exactly a Poisson
    process conditioned on having ``c`` events there. Guarantee: ``floor(arrival_s / bin_s)``
    reproduces every bin's count exactly (float rounding at bin edges is corrected). Token sizes
    are drawn from ``tokens``.

    Raises :class:`~ebb.errors.InputError` (before allocating) when the counts sum to more than
    :data:`MAX_REQUESTS`.
    """
    _check_seed(seed)
    counts = np.asarray(series.counts, dtype=np.int64)
    if np.any(counts < 0):
        raise ValueError(f"CountSeries.counts must be non-negative, got min {int(counts.min())}")
    _refuse_size(series.source or str(series.name), "expanding this count series to requests",
                 float(np.sum(counts, dtype=np.float64)))
    rng = np.random.default_rng(seed)
    bin_idx = np.repeat(np.arange(len(counts), dtype=np.int64), counts)
    arrival: FloatArray = (bin_idx + rng.random(len(bin_idx))) * series.bin_s
    # (i + u) * bin_s can round onto the next bin's edge (u close to 1) or, for non-integer bin_s,
    # land one ulp below its own; step those few values by one ulp until each lands in its own bin.
    for _ in range(8):
        got = np.floor(arrival / series.bin_s)
        high, low = got > bin_idx, got < bin_idx
        if not (high.any() or low.any()):
            break
        arrival[high] = np.nextafter(arrival[high], -np.inf)
        arrival[low] = np.nextafter(arrival[low], np.inf)
    # Bins are disjoint and visited in order, so sorting keeps every request in its own bin.
    arrival.sort(kind="stable")
    tin, tout = tokens.sample(len(arrival), rng)
    return RequestTrace(
        name=series.name, arrival_s=arrival, tokens_in=tin, tokens_out=tout, source=series.source,
        start_epoch_s=series.start_epoch_s,
        notes=series.notes + (f"requests synthesised from counts (uniform within {series.bin_s:g}-s bins, seed={seed})",),
    )


def _split_scale(k: float) -> tuple[int, float]:
    if not (math.isfinite(k) and k >= 0):
        raise ValueError(f"scale factor k must be finite and >= 0, got {k!r}")
    whole = int(math.floor(k))
    return whole, k - whole


def scale_requests(trace: RequestTrace, k: float, *, seed: int, jitter_s: float = 0.05) -> RequestTrace:
    """Multiply the load by ``k`` by replaying the trace ``k`` times over the same timeline.

    The result holds ``floor(k)`` full copies plus one copy thinned with keep-probability
    ``frac(k)`` (each request kept independently), so its expected size is ``k * requests``. For
    ``k < 1`` that is just thinning of the original. The first full copy keeps its exact arrival
    times; every *additional* copied request (extra full copies and the thinned copy when
    ``k >= 1``) gets an independent uniform jitter in ``[0, jitter_s)`` so copies are not
    simultaneous. Tokens travel with their request. The result is sorted (stably) by arrival.

    Raises :class:`~ebb.errors.InputError` (before allocating) when ``k * requests`` is more than
    :data:`MAX_REQUESTS`.
    """
    _check_seed(seed)
    whole, frac = _split_scale(k)
    if not (math.isfinite(jitter_s) and jitter_s >= 0):
        raise ValueError(f"jitter_s must be finite and >= 0, got {jitter_s!r}")
    _refuse_size(trace.source or str(trace.name), f"scaling the load x{k:g}",
                 k * trace.requests)
    rng = np.random.default_rng(seed)
    n = trace.requests
    # Source index of every output request: full copies first, then the survivors of thinning.
    kept = np.flatnonzero(rng.random(n) < frac) if frac > 0 else np.zeros(0, dtype=np.int64)
    src = np.concatenate([np.tile(np.arange(n, dtype=np.int64), whole), kept])
    arrival = trace.arrival_s[src].astype(np.float64, copy=True)
    # With k >= 1 the first n entries are the original; everything after them is a copy.
    first_copy = n if whole >= 1 else len(src)
    arrival[first_copy:] += rng.random(len(src) - first_copy) * jitter_s
    order = np.argsort(arrival, kind="stable")
    return RequestTrace(
        name=trace.name, arrival_s=arrival[order], tokens_in=trace.tokens_in[src[order]],
        tokens_out=trace.tokens_out[src[order]], source=trace.source, start_epoch_s=trace.start_epoch_s,
        notes=trace.notes + (f"load scaled x{k:g} (seed={seed}, jitter {jitter_s:g} s)",),
        service_s=None if trace.service_s is None else trace.service_s[src[order]],  # travels with its request
    )


def scale_counts(series: CountSeries, k: float, *, seed: int) -> CountSeries:
    """Multiply a count series by ``k``, keeping integers: ``floor(k) * c + Binomial(c, frac(k))`` per bin.

    This is the count-level twin of :func:`scale_requests` (full copies plus one thinned copy), so
    the expectation is ``k * c`` and ``k`` = integer scales exactly, with no randomness.

    Raises :class:`~ebb.errors.InputError` when a scaled bin could reach :data:`MAX_BIN_COUNT`
    (int64 arithmetic would overflow soon after).
    """
    _check_seed(seed)
    whole, frac = _split_scale(k)
    counts = np.asarray(series.counts, dtype=np.int64)
    peak = float(counts.max()) * math.ceil(k) if len(counts) else 0.0
    if peak >= MAX_BIN_COUNT:
        raise InputError(f"scaling the load x{k:g} makes a bin count of {peak:.3g} requests, past the "
                         f"{MAX_BIN_COUNT:.0e} limit", path=series.source or str(series.name),
                         fix="use a smaller --load-scale (or --peak-replicas)")
    rng = np.random.default_rng(seed)
    scaled = counts * whole
    if frac > 0:
        scaled = scaled + rng.binomial(counts, frac).astype(np.int64)
    return dataclasses.replace(series, counts=scaled.astype(np.int64),
                               notes=series.notes + (f"load scaled x{k:g} (seed={seed})",))


@overload
def window(trace: RequestTrace, start_s: float, end_s: float) -> RequestTrace: ...
@overload
def window(trace: CountSeries, start_s: float, end_s: float) -> CountSeries: ...


def window(trace: RequestTrace | CountSeries, start_s: float, end_s: float) -> RequestTrace | CountSeries:
    """The part of ``trace`` in ``[start_s, end_s)`` (trace seconds), re-based so it starts at 0.

    Requests are kept when ``start_s <= arrival_s < end_s`` and shifted by ``-start_s``. For a
    count series, bin ``i`` is kept when its start ``i * bin_s`` lies in the window, and the
    result starts at the first kept bin's start. ``start_epoch_s`` moves by the same shift.
    """
    if not (math.isfinite(start_s) and math.isfinite(end_s) and 0 <= start_s <= end_s):
        raise ValueError(f"window needs finite 0 <= start_s <= end_s, got start_s={start_s!r}, end_s={end_s!r}")
    note = f"window [{start_s:g}, {end_s:g}) s"
    if isinstance(trace, RequestTrace):
        lo, hi = np.searchsorted(trace.arrival_s, [start_s, end_s], side="left")
        epoch = None if trace.start_epoch_s is None else trace.start_epoch_s + start_s
        return RequestTrace(
            name=trace.name, arrival_s=trace.arrival_s[lo:hi] - start_s, tokens_in=trace.tokens_in[lo:hi].copy(),
            tokens_out=trace.tokens_out[lo:hi].copy(), source=trace.source, start_epoch_s=epoch,
            notes=trace.notes + (note,), service_s=None if trace.service_s is None else trace.service_s[lo:hi].copy())
    first = min(math.ceil(start_s / trace.bin_s), len(trace.counts))
    last = max(first, min(math.ceil(end_s / trace.bin_s), len(trace.counts)))
    shift = first * trace.bin_s
    epoch = None if trace.start_epoch_s is None else trace.start_epoch_s + shift
    return dataclasses.replace(trace, counts=trace.counts[first:last].copy(), start_epoch_s=epoch,
                               notes=trace.notes + (note,))
