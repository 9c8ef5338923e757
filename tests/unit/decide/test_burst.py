"""Burst detection over windowed quantiles (ebb.decide.burst)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ebb.decide.burst import Burst, BurstDetector, detect_bursts


def test_a_run_over_threshold_long_enough_is_one_burst_with_its_delay_and_peak() -> None:
    t = np.arange(10) * 0.1
    q = np.array([0, 0, 96, 97, 99, 98, 0, 0, 0, 0], dtype=float)
    (b,) = detect_bursts(t, q[:, None], 95.0, 200.0)
    assert b == Burst(series=0, start_s=pytest.approx(0.2), end_s=pytest.approx(0.6), peak=99.0,
                      detect_delay_ms=200.0)


def test_a_run_shorter_than_the_min_duration_is_not_a_burst() -> None:
    t = np.arange(6) * 0.1
    q = np.array([[0], [96], [96], [0], [0], [0]], dtype=float)
    assert detect_bursts(t, q, 95.0, 200.0) == []
    assert len(detect_bursts(t, q, 95.0, 100.0)) == 1


def test_empty_windows_never_count_as_over_threshold() -> None:
    q = np.array([[np.nan], [np.nan]])
    assert detect_bursts(np.array([0.0, 0.1]), q, -1.0, 0.0) == []


def test_the_relative_tolerance_lets_an_estimate_just_under_threshold_count() -> None:
    q = np.array([[94.6]])
    assert detect_bursts(np.array([0.0]), q, 95.0, 0.0) == []
    assert len(detect_bursts(np.array([0.0]), q, 95.0, 0.0, rel_tolerance=0.01)) == 1


def test_bad_inputs_are_refused_with_the_value_named() -> None:
    with pytest.raises(ValueError, match="strictly increasing"):
        detect_bursts(np.array([0.0, 0.0]), np.zeros((2, 1)), 1.0, 0.0)
    with pytest.raises(ValueError, match="min_duration_ms"):
        detect_bursts(np.array([0.0]), np.zeros((1, 1)), 1.0, -5.0)
    with pytest.raises(ValueError, match="rel_tolerance"):
        detect_bursts(np.array([0.0]), np.zeros((1, 1)), 1.0, 0.0, rel_tolerance=2.0)


@settings(max_examples=150, deadline=None)
@given(
    data=st.lists(st.lists(st.sampled_from([0.0, 50.0, 96.0, np.nan]), min_size=3, max_size=3),
                  min_size=1, max_size=40),
    min_ms=st.sampled_from([0.0, 100.0, 200.0, 350.0]),
)
def test_the_streaming_detector_finds_the_same_bursts_as_the_batch_form(
    data: list[list[float]], min_ms: float,
) -> None:
    q = np.array(data)
    t = np.arange(len(data)) * 0.1
    det = BurstDetector(3, 90.0, min_ms)
    got: list[Burst] = []
    for i in range(len(t)):
        got += det.update(float(t[i]), q[i])
    got += det.finish()
    got.sort(key=lambda b: (b.start_s, b.series))
    assert got == detect_bursts(t, q, 90.0, min_ms)


def test_the_streaming_detector_reports_declared_series_and_refuses_time_going_back() -> None:
    det = BurstDetector(2, 1.0, 0.0)
    det.update(0.0, np.array([2.0, 0.0]))
    assert det.declared().tolist() == [True, False]
    with pytest.raises(ValueError, match="must increase"):
        det.update(0.0, np.array([0.0, 0.0]))
