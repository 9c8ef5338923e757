"""LatencyWindow (ebb.decide.latency): P99s over 30 s, breaches that waiting caused, the long window."""

from __future__ import annotations

import math

import numpy as np
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
