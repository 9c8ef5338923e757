"""Properties of the sliding window (ebb.window.sliding): exact forgetting, late samples, merge."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ebb.model.samples import SampleBatch
from ebb.window.sketch import ColumnarSketch
from ebb.window.sliding import SlidingWindow
from ebb.window.stream import windowed_quantiles

B, W_MS = 4, 100
W_NS = W_MS * 1_000_000
S = 3

sample = st.tuples(
    st.integers(0, S - 1),
    st.floats(min_value=-1e3, max_value=1e3, allow_nan=False).map(lambda x: round(x, 3)),
    st.integers(0, 20 * W_NS),
)
batches = st.lists(st.lists(sample, min_size=1, max_size=40), min_size=1, max_size=6)


def _arrays(rows: list[tuple[int, float, int]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return (np.array([r[0] for r in rows], dtype=np.int64), np.array([r[1] for r in rows]),
            np.array([r[2] for r in rows], dtype=np.int64))


def _reference(all_rows: list[tuple[int, float, int]]) -> tuple[list[tuple[int, float]], np.ndarray, int]:
    """Brute force, one sample at a time: (in-window samples, late per series, head)."""
    head: int | None = None
    kept: list[tuple[int, float, int]] = []
    late = np.zeros(S, dtype=np.int64)
    for s, v, t in all_rows:
        b = t // W_NS
        if head is not None and b <= head - B:
            late[s] += 1
            continue
        head = b if head is None else max(head, b)
        kept.append((s, v, b))
    assert head is not None
    return [(s, v) for s, v, b in kept if b > head - B], late, head


@settings(max_examples=150, deadline=None)
@given(batches=batches)
def test_the_window_forgets_exactly_what_has_aged_out_and_counts_late_samples(
    batches: list[list[tuple[int, float, int]]],
) -> None:
    win = SlidingWindow(S, buckets=B, bucket_ms=W_MS)
    for rows in batches:
        win.ingest(*_arrays(rows))
    expected, late, head = _reference([r for rows in batches for r in rows])
    ref = ColumnarSketch(S)
    if expected:
        ref.ingest(np.array([e[0] for e in expected]), np.array([e[1] for e in expected]))
    assert win.head == head
    np.testing.assert_array_equal(win.total.counts, ref.counts)
    np.testing.assert_array_equal(win.dropped_late, late)
    assert win.dropped_late_total == int(late.sum())
    for q in (0.0, 0.5, 0.99, 1.0):
        np.testing.assert_array_equal(win.quantile(q), ref.quantile(q))


@settings(max_examples=100, deadline=None)
@given(a=batches, b=batches)
def test_merging_two_windows_equals_one_window_of_both_streams_when_nothing_is_late(
    a: list[list[tuple[int, float, int]]], b: list[list[tuple[int, float, int]]],
) -> None:
    # sort each stream so that neither side drops late samples; then merge == union
    ra = sorted((r for rows in a for r in rows), key=lambda r: r[2])
    rb = sorted((r for rows in b for r in rows), key=lambda r: r[2])
    wa, wb, wu = (SlidingWindow(S, buckets=B, bucket_ms=W_MS) for _ in range(3))
    wa.ingest(*_arrays(ra))
    wb.ingest(*_arrays(rb))
    wa.merge(wb)
    head = max(r[2] for r in ra + rb) // W_NS
    inside = [r for r in ra + rb if r[2] // W_NS > head - B]
    if inside:
        wu.ingest(*_arrays(inside))
    np.testing.assert_array_equal(wa.total.counts, wu.total.counts)
    assert wa.head == head


def test_a_query_with_now_forgets_buckets_that_aged_out_in_silence() -> None:
    win = SlidingWindow(1)  # 10 x 100 ms
    win.ingest(np.array([0, 0]), np.array([5.0, 7.0]), np.array([0, 950_000_000]))
    assert win.count()[0] == 2
    assert win.count(now_ns=1_050_000_000)[0] == 1  # bucket 0 left, bucket 9 still in
    assert np.isnan(win.quantile(0.5, now_ns=2_000_000_000)[0])
    assert win.count()[0] == 0


def test_late_samples_are_counted_per_series_not_raised() -> None:
    win = SlidingWindow(2)
    win.ingest(np.array([0]), np.array([1.0]), np.array([5_000_000_000]))
    win.ingest(np.array([1, 1, 0]), np.array([1.0, 2.0, 3.0]), np.array([0, 3_000_000_000, 4_950_000_000]))
    assert list(win.dropped_late) == [0, 2]
    assert win.count().tolist() == [2, 0]


def test_out_of_order_samples_inside_the_window_land_in_their_own_bucket() -> None:
    win = SlidingWindow(1)
    win.ingest(np.array([0, 0]), np.array([1.0, 2.0]), np.array([900_000_000, 150_000_000]))
    assert win.bucket_ids() == [1, 9]
    win.advance(1_150_000_000)  # bucket 1 leaves, bucket 9 stays
    assert win.count()[0] == 1 and win.quantile(0.5)[0] == pytest.approx(1.0, rel=0.01)


def test_a_sample_batch_is_accepted_directly() -> None:
    batch = SampleBatch(("a", "b"), np.array([0, 1]), np.array([1.0, 2.0]), np.array([0, 10]))
    win = SlidingWindow(2)
    win.ingest(batch)
    assert win.count().tolist() == [1, 1]


def test_bad_timestamps_and_values_are_rejected_before_any_state_changes() -> None:
    win = SlidingWindow(1)
    with pytest.raises(ValueError, match="ts_ns must be integer"):
        win.ingest(np.array([0]), np.array([1.0]), np.array([0.5]))
    with pytest.raises(ValueError, match="non-finite"):
        win.ingest(np.array([0, 0]), np.array([1.0, float("nan")]), np.array([0, 1]))
    assert win.head is None and win.count()[0] == 0


def test_replaying_a_stream_reads_the_window_at_every_bucket_boundary() -> None:
    win = SlidingWindow(1, buckets=2, bucket_ms=100)
    ts = np.array([0, 50, 310], dtype=np.int64) * 1_000_000
    times, qs = windowed_quantiles(win, np.zeros(3, dtype=np.int64), np.array([10.0, 20.0, 30.0]), ts, 1.0)
    assert (times // 1_000_000).tolist() == [100, 200, 300, 400]
    assert np.isnan(qs[3 - 1, 0])  # at 300 ms the window [100, 300) is empty
    assert qs[0, 0] == pytest.approx(20.0, rel=0.01) and qs[1, 0] == pytest.approx(20.0, rel=0.01)
    assert qs[3, 0] == pytest.approx(30.0, rel=0.01)
