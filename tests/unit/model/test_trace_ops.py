"""Trace transformations: counts to requests, load scaling, windows, and the default token fit."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ebb.model.ids import TraceName
from ebb.model.trace import CountSeries, RequestTrace
from ebb.model.trace_ops import (
    DEFAULT_TOKENS,
    TokenDistribution,
    counts_to_requests,
    scale_counts,
    scale_requests,
    window,
)

SHARED = Path(__file__).resolve().parents[3] / ".." / "shared"
CONV = SHARED / "data" / "traces" / "azure-llm-2023" / "AzureLLMInferenceTrace_conv.csv"


def series(counts: list[int], bin_s: float = 1.0) -> CountSeries:
    return CountSeries(name=TraceName("t"), counts=np.asarray(counts, dtype=np.int64), bin_s=bin_s,
                       start_epoch_s=1000.0)


def requests(arrivals: list[float]) -> RequestTrace:
    n = len(arrivals)
    return RequestTrace(name=TraceName("r"), arrival_s=np.asarray(arrivals, dtype=np.float64),
                        tokens_in=np.arange(n, dtype=np.int64), tokens_out=np.arange(n, dtype=np.int64) * 2,
                        start_epoch_s=500.0)


def poisson_trace(n: int = 20_000, seed: int = 0) -> RequestTrace:
    rng = np.random.default_rng(seed)
    arrivals = np.sort(rng.uniform(0, 3600, n))
    return RequestTrace(name=TraceName("p"), arrival_s=arrivals, tokens_in=rng.integers(1, 100, n),
                        tokens_out=rng.integers(1, 100, n))


def rebin(trace: RequestTrace, bin_s: float, bins: int) -> list[int]:
    idx = np.floor(trace.arrival_s / bin_s).astype(np.int64)
    counts: list[int] = np.bincount(idx, minlength=bins).tolist()
    return counts


# --- counts_to_requests -------------------------------------------------------------------------


def test_counts_to_requests_preserves_every_bins_count_exactly() -> None:
    s = series([3, 0, 7, 1, 0, 0, 12])
    trace = counts_to_requests(s, seed=1)
    assert trace.requests == 23
    assert rebin(trace, 1.0, 7) == [3, 0, 7, 1, 0, 0, 12]
    assert bool(np.all(np.diff(trace.arrival_s) >= 0))
    assert trace.start_epoch_s == 1000.0


@settings(max_examples=80, deadline=None)
@given(counts=st.lists(st.integers(min_value=0, max_value=30), min_size=1, max_size=60),
       bin_s=st.sampled_from([1.0, 0.1, 0.3, 2.5, 60.0, 1e-3]),
       offset=st.integers(min_value=0, max_value=10**7),
       seed=st.integers(min_value=0, max_value=2**32))
def test_binning_the_synthesised_arrivals_reproduces_the_counts(counts: list[int], bin_s: float, offset: int,
                                                               seed: int) -> None:
    # Leading empty bins push arrivals to large times, where float rounding at bin edges bites.
    padded = [0] * (offset % 50_000) + counts
    trace = counts_to_requests(series(padded, bin_s), seed=seed)
    assert rebin(trace, bin_s, len(padded)) == padded
    assert bool(np.all(np.diff(trace.arrival_s) >= 0))
    assert bool(np.all(trace.tokens_in >= 1)) and bool(np.all(trace.tokens_out >= 1))


def test_counts_to_requests_is_deterministic_per_seed() -> None:
    s = series([5, 9, 2])
    a, b, c = counts_to_requests(s, seed=7), counts_to_requests(s, seed=7), counts_to_requests(s, seed=8)
    assert np.array_equal(a.arrival_s, b.arrival_s) and np.array_equal(a.tokens_in, b.tokens_in)
    assert not np.array_equal(a.arrival_s, c.arrival_s)


def test_counts_to_requests_uses_the_token_distribution_it_is_given() -> None:
    fixed = TokenDistribution(in_mu=np.log(100.0), in_sigma=0.0, out_mu=np.log(10.0), out_sigma=0.0)
    trace = counts_to_requests(series([4, 4]), seed=0, tokens=fixed)
    assert trace.tokens_in.tolist() == [100] * 8
    assert trace.tokens_out.tolist() == [10] * 8


def test_default_tokens_follow_the_fitted_lognormal_within_bounds() -> None:
    tin, tout = DEFAULT_TOKENS.sample(200_000, np.random.default_rng(0))
    assert int(tin.min()) >= 1 and int(tin.max()) <= 8192
    assert int(tout.min()) >= 1 and int(tout.max()) <= 2048
    assert np.median(tin) == pytest.approx(np.exp(DEFAULT_TOKENS.in_mu), rel=0.02)
    assert np.median(tout) == pytest.approx(np.exp(DEFAULT_TOKENS.out_mu), rel=0.02)


@pytest.mark.skipif(not CONV.is_file(), reason=f"shared Azure conv trace not present at {CONV}")
def test_default_token_constants_are_the_fit_to_the_azure_conv_trace() -> None:
    with CONV.open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    log_in = np.log(np.clip([int(r["ContextTokens"]) for r in rows], 1, 8192))
    log_out = np.log(np.clip([int(r["GeneratedTokens"]) for r in rows], 1, 2048))
    assert DEFAULT_TOKENS.in_mu == pytest.approx(log_in.mean(), abs=1e-9)
    assert DEFAULT_TOKENS.in_sigma == pytest.approx(log_in.std(), abs=1e-9)
    assert DEFAULT_TOKENS.out_mu == pytest.approx(log_out.mean(), abs=1e-9)
    assert DEFAULT_TOKENS.out_sigma == pytest.approx(log_out.std(), abs=1e-9)


def test_token_distribution_rejects_nonsense_parameters() -> None:
    with pytest.raises(ValueError, match="sigma"):
        TokenDistribution(in_mu=1.0, in_sigma=-1.0, out_mu=1.0, out_sigma=1.0)
    with pytest.raises(ValueError, match="bounds"):
        TokenDistribution(in_mu=1.0, in_sigma=1.0, out_mu=1.0, out_sigma=1.0, in_min=10, in_max=5)


# --- scale_requests -----------------------------------------------------------------------------


def test_scaling_requests_by_two_and_a_half_gives_about_two_and_a_half_times_the_load() -> None:
    base = poisson_trace()
    scaled = scale_requests(base, 2.5, seed=3)
    assert scaled.requests / base.requests == pytest.approx(2.5, rel=0.02)
    assert bool(np.all(np.diff(scaled.arrival_s) >= 0))


def test_scaling_below_one_thins_the_original_without_moving_it() -> None:
    base = poisson_trace()
    scaled = scale_requests(base, 0.3, seed=3)
    assert scaled.requests / base.requests == pytest.approx(0.3, rel=0.05)
    assert bool(np.all(np.isin(scaled.arrival_s, base.arrival_s)))


def test_scaling_by_one_is_the_identity_and_by_zero_is_empty() -> None:
    base = requests([0.0, 1.0, 1.5])
    same = scale_requests(base, 1.0, seed=0)
    assert np.array_equal(same.arrival_s, base.arrival_s) and np.array_equal(same.tokens_in, base.tokens_in)
    assert scale_requests(base, 0.0, seed=0).requests == 0


def test_copies_are_jittered_so_they_never_coincide_with_the_original() -> None:
    base = requests([0.0, 10.0, 20.0])
    scaled = scale_requests(base, 3.0, seed=5, jitter_s=0.05)
    assert scaled.requests == 9
    assert len(np.unique(scaled.arrival_s)) == 9
    # Each request's copies lie within [t, t + jitter) of it and keep its tokens.
    for t, tok in zip(base.arrival_s, base.tokens_in):
        near = (scaled.arrival_s >= t) & (scaled.arrival_s < t + 0.05)
        assert int(near.sum()) == 3
        assert set(scaled.tokens_in[near].tolist()) == {int(tok)}


def test_scale_requests_is_deterministic_per_seed_and_leaves_its_input_alone() -> None:
    base = poisson_trace(2000)
    before = base.arrival_s.copy()
    a, b = scale_requests(base, 1.7, seed=11), scale_requests(base, 1.7, seed=11)
    assert np.array_equal(a.arrival_s, b.arrival_s) and np.array_equal(a.tokens_out, b.tokens_out)
    assert not np.array_equal(a.arrival_s, scale_requests(base, 1.7, seed=12).arrival_s)
    assert np.array_equal(base.arrival_s, before)


@pytest.mark.parametrize("k", [-1.0, float("nan"), float("inf")])
def test_scale_factors_that_are_negative_or_not_finite_are_rejected(k: float) -> None:
    with pytest.raises(ValueError, match="scale factor"):
        scale_requests(requests([0.0]), k, seed=0)
    with pytest.raises(ValueError, match="scale factor"):
        scale_counts(series([1]), k, seed=0)


# --- scale_counts -------------------------------------------------------------------------------


def test_scaling_counts_by_an_integer_is_exact() -> None:
    assert scale_counts(series([1, 0, 5]), 3, seed=0).counts.tolist() == [3, 0, 15]


def test_scaling_counts_keeps_integers_and_the_expected_total() -> None:
    base = series(np.random.default_rng(0).poisson(20, 5000).tolist())
    scaled = scale_counts(base, 2.5, seed=4)
    assert scaled.counts.dtype == np.int64
    assert scaled.requests / base.requests == pytest.approx(2.5, rel=0.01)
    assert bool(np.all(scaled.counts >= 2 * base.counts)) and bool(np.all(scaled.counts <= 3 * base.counts))
    assert np.array_equal(scaled.counts, scale_counts(base, 2.5, seed=4).counts)


# --- window -------------------------------------------------------------------------------------


def test_a_request_window_keeps_the_half_open_interval_and_rebases_it() -> None:
    base = requests([0.0, 1.0, 2.0, 3.0, 4.0])
    part = window(base, 1.0, 3.0)
    assert part.arrival_s.tolist() == [0.0, 1.0]
    assert part.tokens_in.tolist() == [1, 2]
    assert part.start_epoch_s == 501.0


def test_a_count_window_keeps_the_bins_starting_inside_it() -> None:
    base = series([1, 2, 3, 4, 5], bin_s=10.0)
    part = window(base, 15.0, 40.0)
    assert part.counts.tolist() == [3, 4]
    assert part.start_epoch_s == 1020.0
    assert window(base, 100.0, 200.0).counts.tolist() == []


def test_a_reversed_window_is_rejected() -> None:
    with pytest.raises(ValueError, match="start_s"):
        window(requests([0.0]), 5.0, 1.0)


_real_default_rng = np.random.default_rng


class _EdgeRng:
    """A generator whose uniforms sit on the bin edges (0 and the largest double below 1)."""

    def __init__(self, seed: int) -> None:
        self._rng = _real_default_rng(seed)

    def random(self, n: int) -> npt.NDArray[np.float64]:
        return np.resize(np.array([0.0, np.nextafter(1.0, 0.0)]), n)

    def normal(self, mu: float, sigma: float, n: int) -> npt.NDArray[np.float64]:
        return self._rng.normal(mu, sigma, n)


@pytest.mark.parametrize("bin_s", [1.0, 0.1, 0.3, 1e-3, 7.7])
def test_arrivals_drawn_on_the_bin_edges_still_land_in_their_own_bin(
        monkeypatch: pytest.MonkeyPatch, bin_s: float) -> None:
    # trace_ops calls np.random.default_rng, so patching numpy's attribute reaches it.
    monkeypatch.setattr(np.random, "default_rng", _EdgeRng)
    padded = [0] * 99_990 + [2] * 10  # large bin indices make (i + u) * bin_s round across edges
    trace = counts_to_requests(series(padded, bin_s), seed=0)
    assert rebin(trace, bin_s, len(padded)) == padded
