"""LatencyWindow (ebb.decide.latency): P99s over 30 s, breaches that waiting caused, the long window."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ebb.decide.latency import E2E, TTFT, LatencyWindow

NAN = float("nan")


def window() -> LatencyWindow:
    return LatencyWindow(30.0, slo_ms=2000.0, slo_e2e_ms=60_000.0, long_window_s=600.0)


def ttft_rows(lat: LatencyWindow, t: float, ttft_ms: list[float], wait_ms: list[float]) -> None:
    n = len(ttft_ms)
    lat.add(np.full(n, t), np.array(ttft_ms), np.full(n, NAN), np.ones(n), np.array(wait_ms))


def e2e_rows(lat: LatencyWindow, t: float, e2e_ms: list[float]) -> None:
    n = len(e2e_ms)
    lat.add(np.full(n, t), np.full(n, NAN), np.array(e2e_ms), np.ones(n))


def test_a_long_prompt_late_by_its_own_prefill_is_no_breach_and_one_late_by_waiting_is() -> None:
    lat = window()
    ttft_rows(lat, 1.0, [100.0] * 10 + [2500.0, 2500.0, 2500.0], [10.0] * 10 + [100.0, 1500.0, 1500.0])
    # The first 2.5 s TTFT spent 2.4 s in its own prefill; the other two waited 1.5 s.
    assert lat.breaches(2000.0, min_weight=2.0, share=0.1)
    assert not lat.breaches(2000.0, min_weight=3.0, share=0.1)


def test_end_to_end_breaches_count_in_the_long_window_even_in_a_batch_without_ttft_rows() -> None:
    lat = window()
    ttft_rows(lat, 1.0, [100.0] * 100, [10.0] * 100)
    # The simulator reports each request's end at its completion, apart from its first token: a
    # batch holding only end-to-end rows (here two past the 60 s SLO) still brings its breaches.
    e2e_rows(lat, 70.0, [61_000.0])
    assert not lat.long_breaches(min_weight=2.0, share=0.005)
    e2e_rows(lat, 90.0, [75_000.0, 5_000.0])
    assert lat.long_breaches(min_weight=2.0, share=0.005)  # 2 of 100 requests
    lat.forget_breaches()
    assert not lat.long_breaches(min_weight=1.0, share=0.0)


def test_the_long_window_forgets_batches_older_than_it() -> None:
    lat = window()
    ttft_rows(lat, 1.0, [100.0] * 10, [10.0] * 10)
    e2e_rows(lat, 2.0, [61_000.0, 62_000.0])
    assert lat.long_breaches(min_weight=2.0, share=0.01)
    lat.trim(2.0 + 600.0 + 1.0)
    assert not lat.long_breaches(min_weight=1.0, share=0.0)


def test_p99_is_nan_without_rows_and_reads_each_column_apart() -> None:
    lat = window()
    assert math.isnan(lat.p99(TTFT))
    ttft_rows(lat, 1.0, [float(v) for v in range(1, 101)], [0.0] * 100)
    e2e_rows(lat, 1.0, [5000.0])
    assert lat.p99(TTFT) == 99.0 and lat.p99(E2E) == 5000.0


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.floats(0.0, 1e6), st.floats(0.0, 1e6), st.booleans()), min_size=1, max_size=60))
def test_the_long_window_sees_exactly_the_end_to_end_breaches_and_forgets_them_all(
        rows: list[tuple[float, float, bool]]) -> None:
    lat = window()
    for k, (ttft, e2e, first) in enumerate(rows):
        if first:
            ttft_rows(lat, float(k), [ttft], [0.0])  # no wait: a late TTFT is its own prefill's
        else:
            e2e_rows(lat, float(k), [e2e])
    slow = sum(1 for _, e2e, first in rows if not first and e2e > 60_000.0)
    assert lat.long_breaches(min_weight=1.0, share=0.0) == (slow > 0)
    assert not lat.long_breaches(min_weight=slow + 0.5, share=0.0)
    lat.trim(float(len(rows)) + 601.0)
    assert not lat.long_breaches(min_weight=1e-9, share=0.0)


class _Reference:
    """The window as first written (concatenate on add, mask on trim, numpy sums on every batch):
    the buffered window must keep the same rows in the same order and the same long-window counts."""

    def __init__(self, slo_ms: float, slo_e2e_ms: float) -> None:
        self.slo_ms, self.slo_e2e_ms = slo_ms, slo_e2e_ms
        self.t, self.w, self.ms = np.zeros(0), np.zeros(0), np.zeros((3, 0))
        self.rows = self.bad = 0.0

    def add(self, t: np.ndarray, ttft: np.ndarray, e2e: np.ndarray, w: np.ndarray, wait: np.ndarray) -> None:
        block = np.array([ttft, e2e, wait])
        self.t, self.w = np.concatenate([self.t, t]), np.concatenate([self.w, w])
        self.ms = np.concatenate([self.ms, block], axis=1)
        own = np.where(np.isnan(block[2]), 0.0, block[0] - block[2])
        late = (block[0] > self.slo_ms) & (own <= self.slo_ms)
        slow = (block[1] > self.slo_e2e_ms) & ~(block[0] > self.slo_ms)
        self.bad += float(w[late | slow].sum())
        self.rows += float(w[~np.isnan(block[0])].sum())

    def trim(self, now: float, window_s: float) -> None:
        if len(self.t) and self.t.min() < now - window_s:
            keep = self.t >= now - window_s
            self.t, self.w, self.ms = self.t[keep], self.w[keep], self.ms[:, keep]


_value = st.one_of(st.floats(0.0, 5000.0), st.just(NAN))
_row = st.tuples(st.floats(-3.0, 3.0), _value, _value, st.floats(0.0, 10.0), _value)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.lists(_row, min_size=1, max_size=5), st.floats(0.0, 2.0)), min_size=1, max_size=40))
def test_the_buffered_window_keeps_the_rows_and_counts_of_the_concatenating_one(
        steps: list[tuple[list[tuple[float, float, float, float, float]], float]]) -> None:
    # Times drift forward with jitter of ±3 s (out of order sometimes: the mask path), batches of one
    # or two rows take the scalar counts, larger ones the masks; the long window never expires here.
    lat = LatencyWindow(5.0, slo_ms=2000.0, slo_e2e_ms=3000.0, long_window_s=1e9)
    ref = _Reference(2000.0, 3000.0)
    now = 0.0
    for batch, advance in steps:
        now += advance
        cols = [np.array(c, dtype=np.float64) for c in zip(*batch, strict=True)]
        t = now + cols[0]
        lat.add(t, cols[1], cols[2], cols[3], cols[4])
        ref.add(t, cols[1], cols[2], cols[3], cols[4])
        lat.trim(now)
        ref.trim(now, 5.0)
        assert np.array_equal(lat._t, ref.t) and np.array_equal(lat._w, ref.w)
        assert np.array_equal(lat._ms, ref.ms, equal_nan=True)
        assert lat._long_rows == ref.rows and lat._long_bad == ref.bad
        for col in (TTFT, E2E):
            a, b = lat.p99(col), ref.ms[col]
            assert (math.isnan(a) and np.isnan(b).all()) or a in b


def _tick_by_tick_and_at_once(one: LatencyWindow, many: LatencyWindow, start_s: float,
                              blocks: list[list[tuple[float, float, float, float, float]]]) -> None:
    """Rows of one tick a second from ``start_s`` + 1: added and trimmed tick by tick to ``one``,
    at once (``add_ticks``) to ``many``."""
    now, times, ends, rows = start_s, [], [], []
    for block in blocks:
        now += 1.0
        times.append(now)
        rows.extend(block)
        ends.append(len(rows))
        if block:
            c = [np.array(col, dtype=np.float64) for col in zip(*block, strict=True)]
            one.add(c[0], c[1], c[2], c[3], c[4])
        one.trim(now)
    c = [np.array(col, dtype=np.float64) for col in zip(*rows, strict=True)] if rows else [np.zeros(0)] * 5
    many.add_ticks(times, ends, c[0], c[1], c[2], c[3], c[4])


@settings(max_examples=120, deadline=None)
@given(st.lists(st.lists(_row, min_size=0, max_size=3), min_size=1, max_size=50), st.floats(1.0, 40.0))
def test_ticks_added_at_once_leave_what_adding_and_trimming_tick_by_tick_leaves(
        ticks: list[list[tuple[float, float, float, float, float]]], long_window_s: float) -> None:
    one = LatencyWindow(5.0, slo_ms=2000.0, slo_e2e_ms=3000.0, long_window_s=long_window_s)
    many = LatencyWindow(5.0, slo_ms=2000.0, slo_e2e_ms=3000.0, long_window_s=long_window_s)
    blocks = [[(1.0 + k + dt, ttft, e2e, w, wait) for dt, ttft, e2e, w, wait in batch] for k, batch in enumerate(ticks)]
    _tick_by_tick_and_at_once(one, many, 0.0, blocks)
    assert np.array_equal(many._t, one._t) and np.array_equal(many._w, one._w)
    assert np.array_equal(many._ms, one._ms, equal_nan=True)
    assert repr(list(many._long)) == repr(list(one._long))
    assert repr((many._long_rows, many._long_bad)) == repr((one._long_rows, one._long_bad))
    assert many.long_breach_weight == one.long_breach_weight


@pytest.mark.parametrize("seed", range(8))
def test_the_fluid_engines_ticks_added_at_once_are_counted_as_tick_by_tick(seed: int) -> None:
    # One or two rows a tick timed at it (the vectorised count), breaches among them, minutes long.
    rng = np.random.default_rng(seed)
    long_window_s = float(rng.choice([3.0, 17.5, 60.0]))
    one = LatencyWindow(5.0, slo_ms=2000.0, slo_e2e_ms=3000.0, long_window_s=long_window_s)
    many = LatencyWindow(5.0, slo_ms=2000.0, slo_e2e_ms=3000.0, long_window_s=long_window_s)
    for lat in (one, many):  # the same history
        lat.add(np.array([0.5, 0.7]), np.array([2500.0, 30.0]), np.array([2600.0, 3500.0]), np.array([0.4, 0.6]))
    blocks = [[(2.0 + k, float(rng.choice([30.0, 900.0, 2500.0, np.nan])), float(rng.choice([100.0, 3500.0])),
                float(rng.random()), float(rng.choice([0.0, 10.0, np.nan]))) for _ in range(int(rng.choice([0, 1, 2, 2])))]
              for k in range(int(rng.integers(1, 300)))]
    _tick_by_tick_and_at_once(one, many, 1.0, blocks)
    assert repr(list(many._long)) == repr(list(one._long))
    assert repr((many._long_rows, many._long_bad)) == repr((one._long_rows, one._long_bad))
    assert np.array_equal(many._ms, one._ms, equal_nan=True)


def test_the_peak_of_a_column_skips_nan_rows_and_is_minus_infinity_without_any() -> None:
    lat = window()
    assert lat.peak(TTFT) == -math.inf
    e2e_rows(lat, 1.0, [5000.0])
    assert lat.peak(TTFT) == -math.inf and lat.peak(E2E) == 5000.0
    ttft_rows(lat, 2.0, [30.0, 70.0], [0.0, 0.0])
    assert lat.peak(TTFT) == 70.0


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.floats(0.0, 200.0), st.booleans()), min_size=0, max_size=30), st.floats(0.0, 300.0),
       st.floats(0.0, 100.0))
def test_the_newest_row_says_whether_a_later_trim_keeps_any(rows: list[tuple[float, bool]], first_trim: float,
                                                            later: float) -> None:
    # Rows in any order, some with only an end-to-end latency: a trim at `now` keeps a TTFT row
    # exactly when the newest one is at or after now − window (what a quiet stretch's proof reads).
    lat = window()
    for t, has_ttft in rows:
        (ttft_rows(lat, t, [100.0], [1.0]) if has_ttft else e2e_rows(lat, t, [1000.0]))
    lat.trim(first_trim)
    newest = lat.newest_s(TTFT)
    now = first_trim + later
    lat.trim(now)
    assert (newest >= now - lat.window_s) == (not math.isnan(lat.p99(TTFT)))
