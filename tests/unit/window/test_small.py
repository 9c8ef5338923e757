"""SmallWindow (ebb.window.small): the sliding sketch's quantile, bit for bit, from raw values."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ebb.window.sliding import SlidingWindow
from ebb.window.small import SmallWindow

_NS = 1_000_000_000


@settings(max_examples=80, deadline=None)
@given(st.lists(st.lists(st.tuples(st.floats(0.0, 3.0), st.floats(0.0, 60.0)), min_size=0, max_size=12),
                min_size=1, max_size=25),
       st.sampled_from([0.0, 0.5, 0.9, 0.99, 1.0]))
def test_it_answers_as_the_sliding_sketch_for_any_batches(batches: list[list[tuple[float, float]]], q: float) -> None:
    sketch, small = SlidingWindow(1, buckets=10, bucket_ms=100.0), SmallWindow(buckets=10, bucket_ms=100.0)
    for batch in batches:
        ts = np.array([int(t * _NS) for t, _ in batch], dtype=np.int64)
        v = np.array([v for _, v in batch], dtype=np.float64)
        sketch.ingest(np.zeros(len(v), dtype=np.int64), v, ts)
        small.ingest(v, ts)
        now = int(ts.max()) if len(ts) else None
        a, b = float(sketch.quantile(q, now)[0]), small.quantile(q, now)
        assert (math.isnan(a) and math.isnan(b)) or a == b


def test_samples_older_than_the_window_are_forgotten() -> None:
    w = SmallWindow(buckets=10, bucket_ms=100.0)
    w.ingest(np.array([5.0]), np.array([0], dtype=np.int64))
    assert w.quantile(0.99, 900_000_000) > 0
    assert math.isnan(w.quantile(0.99, 1_000_000_000))


def test_a_non_finite_sample_is_refused_with_its_value() -> None:
    with pytest.raises(ValueError, match="finite"):
        SmallWindow(buckets=10, bucket_ms=100.0).ingest(np.array([np.nan]), np.array([0], dtype=np.int64))


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.floats(0.0, 0.35), st.floats(0.0, 60.0), st.booleans()), min_size=1, max_size=200),
       st.sampled_from([0.5, 0.99]))
def test_a_stream_of_single_samples_answers_as_the_sliding_sketch(steps: list[tuple[float, float, bool]],
                                                                  q: float) -> None:
    # An agent's stream: one sample at a time, mostly in time order (the window forgets a prefix), now
    # and then one a little late (it forgets by filtering, then keeps order again).
    sketch, small = SlidingWindow(1, buckets=10, bucket_ms=100.0), SmallWindow(buckets=10, bucket_ms=100.0)
    t = 10.0
    for dt, v, late in steps:
        t += dt
        at = int((t - 0.25 if late else t) * _NS)
        sketch.ingest(np.zeros(1, dtype=np.int64), np.array([v]), np.array([at], dtype=np.int64))
        small.ingest(np.array([v]), np.array([at], dtype=np.int64))
        now = int(t * _NS)
        a, b = float(sketch.quantile(q, now)[0]), small.quantile(q, now)
        assert (math.isnan(a) and math.isnan(b)) or a == b


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.floats(0.0, 0.35), st.floats(0.0, 60.0)), min_size=0, max_size=30),
       st.lists(st.tuples(st.floats(0.0, 0.35), st.floats(0.0, 60.0)), min_size=1, max_size=40),
       st.floats(0.0, 1.0))
def test_a_run_of_samples_in_order_leaves_what_one_at_a_time_leaves(
        before: list[tuple[float, float]], run: list[tuple[float, float]], q: float) -> None:
    one, many = SmallWindow(buckets=10, bucket_ms=100.0), SmallWindow(buckets=10, bucket_ms=100.0)
    t = 5.0
    for gap, v in before:
        t += gap
        for w in (one, many):
            w.ingest_one(v, int(t * _NS))
    values, stamps = [], []
    for gap, v in run:
        t += gap
        values.append(v)
        stamps.append(int(t * _NS))
        one.ingest_one(v, stamps[-1])
    many.ingest_run(values, stamps)
    a, b = one.quantile(q), many.quantile(q)
    assert (math.isnan(a) and math.isnan(b)) or a == b
    assert one.head == many.head


def test_a_run_out_of_order_is_taken_one_at_a_time() -> None:
    one, many = SmallWindow(buckets=10, bucket_ms=100.0), SmallWindow(buckets=10, bucket_ms=100.0)
    for w in (one, many):
        w.ingest_one(4.0, 2 * _NS)
    stamps = [int(1.95 * _NS), int(2.3 * _NS), int(2.1 * _NS), int(3.05 * _NS)]
    for v, ns in zip([9.0, 1.0, 5.0, 2.0], stamps, strict=True):
        one.ingest_one(v, ns)
    many.ingest_run([9.0, 1.0, 5.0, 2.0], stamps)
    for q in (0.0, 0.5, 0.99):
        assert one.quantile(q) == many.quantile(q)


def test_a_value_asked_again_answers_as_the_sketch_and_a_new_one_is_mapped_afresh() -> None:
    small, sketch = SmallWindow(buckets=10, bucket_ms=100.0), SlidingWindow(1, buckets=10, bucket_ms=100.0)
    for k, v in enumerate([3.0, 3.0, 0.0, 0.0, 3.0, 1.0, 1.0, 7.5, 7.5, 3.0] * 3):
        ns = int((1.0 + 0.1 * k) * _NS)
        small.ingest_one(v, ns)
        sketch.ingest(np.zeros(1, dtype=np.int64), np.array([v]), np.array([ns], dtype=np.int64))
        assert small.quantile(0.99, ns) == float(sketch.quantile(0.99, ns)[0])
