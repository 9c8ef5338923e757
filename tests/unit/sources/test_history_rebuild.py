"""The trace rebuilt from per-step counter and histogram increases: counts, sizes within a bucket, the as-run record."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ebb.errors import InputError
from ebb.model.measured import BucketSeries
from ebb.sources.history_rebuild import (
    StepHistory,
    arrivals_ms,
    assign_buckets,
    measured_fleet,
    rebuild_trace,
    sample_in_buckets,
    window_counts,
)

TOKENS = (1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 2000.0, 5000.0, math.inf)


def _bucket_of(values: np.ndarray, bounds: tuple[float, ...]) -> np.ndarray:
    return np.searchsorted(np.asarray(bounds), values, side="left")


def _history(step_s: float, completions: list[np.ndarray], tin: list[np.ndarray], tout: list[np.ndarray],
             replicas: np.ndarray | None = None, e2e_mean_s: float = 0.0, lag_s: float = 0.0) -> StepHistory:
    """Per-step increases of a fleet whose step k finished ``len(completions[k])`` requests of these sizes."""
    n = len(completions)
    counts_in = np.stack([np.bincount(_bucket_of(v, TOKENS), minlength=len(TOKENS)) for v in tin]).astype(float)
    counts_out = np.stack([np.bincount(_bucket_of(v, TOKENS), minlength=len(TOKENS)) for v in tout]).astype(float)
    done = np.array([len(c) for c in completions], dtype=float)
    e2e = BucketSeries((1.0, math.inf), np.stack([done, np.zeros(n)], axis=1), done * e2e_mean_s)
    return StepHistory(start_unix_s=1.7e9, step_s=step_s, requests=done,
                       tokens_in=BucketSeries(TOKENS, counts_in, np.array([v.sum() for v in tin])),
                       tokens_out=BucketSeries(TOKENS, counts_out, np.array([v.sum() for v in tout])), ttft_s=e2e,
                       e2e_s=e2e, service_s=None, replicas=replicas, lag_s=lag_s)


def test_each_step_gets_exactly_its_finished_requests_spread_inside_it() -> None:
    rng = np.random.default_rng(1)
    ms = arrivals_ms(np.array([3.0, 0.0, 5.0]), 10.0, np.zeros(3), rng)
    assert len(ms) == 8
    steps = ms // 10_000
    assert np.bincount(steps, minlength=3).tolist() == [3, 0, 5]
    assert ms.dtype == np.int64


def test_arrivals_move_back_by_the_latency_and_the_sample_lag_but_never_before_the_range() -> None:
    rng = np.random.default_rng(2)
    ms = arrivals_ms(np.array([0.0, 0.0, 100.0]), 10.0, np.full(3, 4.0), rng)
    assert ms.min() >= 16_000 and ms.max() < 26_000
    early = arrivals_ms(np.array([50.0]), 10.0, np.full(1, 30.0), rng)
    assert early.min() == 0


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.integers(0, 6), min_size=4, max_size=4), min_size=1, max_size=6), st.integers(0, 99))
def test_a_window_whose_histogram_matches_its_requests_gets_exactly_that_multiset(rows: list[list[int]],
                                                                                   seed: int) -> None:
    counts = np.array(rows, dtype=float)
    per_window = counts.sum(axis=1).astype(int)
    window_of = np.repeat(np.arange(len(rows)), per_window)
    got = assign_buckets(window_of, counts, np.random.default_rng(seed)) if per_window.sum() else np.zeros(0)
    for w, row in enumerate(rows):
        assert np.bincount(got[window_of == w].astype(int), minlength=4).tolist() == row


def test_a_window_without_observations_draws_from_the_whole_range() -> None:
    counts = np.array([[0.0, 0.0, 10.0], [0.0, 0.0, 0.0]])
    window_of = np.array([1] * 50)
    got = assign_buckets(window_of, counts, np.random.default_rng(0))
    assert set(got.tolist()) == {2}


def test_a_histogram_empty_over_the_whole_range_is_refused() -> None:
    with pytest.raises(ValueError, match="no observation"):
        assign_buckets(np.array([0]), np.zeros((1, 3)), np.random.default_rng(0))


def test_values_fall_inside_their_bucket_integers_for_tokens() -> None:
    rng = np.random.default_rng(3)
    bucket = rng.integers(0, len(TOKENS), 10_000)
    v = sample_in_buckets(bucket, TOKENS, rng, integer=True)
    assert np.all(v == np.floor(v))
    assert np.array_equal(_bucket_of(v, TOKENS), bucket)
    lat = sample_in_buckets(bucket, TOKENS, rng, integer=False)
    lo = np.concatenate([[0.0], np.asarray(TOKENS[:-1])])[bucket]
    assert np.all(lat >= lo)


def test_a_window_s_sizes_add_up_to_its_histogram_sum_inside_their_buckets() -> None:
    rng = np.random.default_rng(6)
    bucket = rng.integers(3, 10, 3000)
    window_of = np.repeat(np.arange(3), 1000)
    base = sample_in_buckets(bucket, TOKENS, np.random.default_rng(0), integer=True)
    lo = np.concatenate([[0.0], np.asarray(TOKENS[:-1])])[bucket]
    hi = np.asarray(TOKENS)[bucket]
    # targets a fifth of the way from each window's floor to its ceiling, and one unknown window
    floor, ceil = (np.bincount(window_of, weights=x) for x in (lo + 1, hi))
    target = floor + 0.2 * (ceil - floor)
    target[2] = np.nan
    got = sample_in_buckets(bucket, TOKENS, np.random.default_rng(0), integer=True, window_of=window_of,
                            window_sums=target)
    assert np.array_equal(_bucket_of(got, TOKENS), bucket)
    sums = np.bincount(window_of, weights=got)
    assert sums[:2] == pytest.approx(target[:2], rel=1e-3)
    assert np.array_equal(got[window_of == 2], base[window_of == 2])  # unknown sum: the plain draw


def test_window_counts_sum_whole_windows_and_keep_the_partial_last() -> None:
    assert window_counts(np.arange(7.0), 3).tolist() == [3.0, 12.0, 6.0]


def test_the_rebuilt_trace_keeps_counts_per_step_and_every_quantile_in_the_true_bucket() -> None:
    rng = np.random.default_rng(4)
    n_steps, step = 120, 30.0
    comps = [np.sort(rng.random(rng.integers(0, 40)) * step + k * step) for k in range(n_steps)]
    tin = [np.floor(rng.lognormal(6.5, 1.2, len(c))) + 1 for c in comps]
    tout = [np.floor(rng.lognormal(3.0, 1.0, len(c))) + 1 for c in comps]
    tr = rebuild_trace(_history(step, comps, tin, tout), name="fleet", source="test", seed=0)
    assert tr.requests == sum(len(c) for c in comps)
    assert np.all(np.diff(tr.arrival_s) >= 0)
    assert np.array_equal(np.rint(tr.arrival_s * 1000) / 1000, tr.arrival_s)  # whole milliseconds
    per_step = np.bincount((tr.arrival_s // step).astype(int), minlength=n_steps)[:n_steps]
    assert per_step.tolist() == [len(c) for c in comps]
    for truth, got in ((np.concatenate(tin), tr.tokens_in), (np.concatenate(tout), tr.tokens_out)):
        for q in (0.1, 0.5, 0.9, 0.99):
            assert _bucket_of(np.quantile(got, q, method="lower"), TOKENS) == \
                _bucket_of(np.quantile(truth, q, method="lower"), TOKENS)


def test_the_same_history_and_seed_rebuild_the_same_trace() -> None:
    rng = np.random.default_rng(5)
    comps = [np.zeros(rng.integers(1, 9)) for _ in range(30)]
    sizes = [np.full(len(c), 300.0) for c in comps]
    h = _history(15.0, comps, sizes, sizes, e2e_mean_s=2.0)
    a, b = (rebuild_trace(h, name="x", source="s", seed=7) for _ in range(2))
    assert np.array_equal(a.arrival_s, b.arrival_s) and np.array_equal(a.tokens_in, b.tokens_in)


def test_a_history_without_finished_requests_is_refused_with_the_fix() -> None:
    h = _history(30.0, [np.zeros(0)] * 3, [np.zeros(0)] * 3, [np.zeros(0)] * 3)
    with pytest.raises(InputError, match="no finished request.*fix: widen the range"):
        rebuild_trace(h, name="x", source="s", seed=0)


def test_the_as_run_record_holds_the_last_replica_value_over_gaps() -> None:
    comps = [np.zeros(2)] * 40
    sizes = [np.full(2, 50.0)] * 40
    reps = np.array([np.nan, 2.0, np.nan, np.nan, 3.0] + [1.0] * 35)
    m = measured_fleet(_history(30.0, comps, sizes, sizes, replicas=reps))
    assert m is not None
    assert m.replicas[:6].tolist() == [2.0, 2.0, 2.0, 2.0, 3.0, 1.0]
    assert m.bin_s == 300.0 and m.bins == 4
    assert any("no replica value" in n for n in m.notes)
    assert measured_fleet(_history(30.0, comps, sizes, sizes, replicas=None)) is None
