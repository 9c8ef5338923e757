"""Burst detection over windowed quantiles (ebb.decide.burst)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ebb.decide.burst import Burst, detect_bursts


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


def _reference_bursts(t: list[float], q: list[list[float]], threshold: float, min_ms: float) -> list[Burst]:
    """The module docstring's definition, one evaluation at a time in plain Python."""
    out: list[Burst] = []
    for s in range(len(q[0]) if q else 0):
        start: int | None = None
        for i in range(len(t) + 1):
            over = i < len(t) and q[i][s] >= threshold  # NaN is never over
            if over and start is None:
                start = i
            if not over and start is not None:
                run = range(start, i)
                declared = next((k for k in run if t[k] - t[start] >= min_ms / 1000.0 - 1e-9), None)
                if declared is not None:
                    out.append(Burst(series=s, start_s=t[start], end_s=t[i] if i < len(t) else t[-1],
                                     peak=max(q[k][s] for k in run),
                                     detect_delay_ms=round((t[declared] - t[start]) * 1000.0, 6)))
                start = None
    return sorted(out, key=lambda b: (b.start_s, b.series))


@settings(max_examples=150, deadline=None)
@given(
    data=st.lists(st.lists(st.sampled_from([0.0, 50.0, 96.0, np.nan]), min_size=3, max_size=3),
                  min_size=1, max_size=40),
    min_ms=st.sampled_from([0.0, 100.0, 200.0, 350.0]),
)
def test_the_vectorised_form_finds_the_bursts_of_the_definition_run_step_by_step(
    data: list[list[float]], min_ms: float,
) -> None:
    t = [float(x) for x in np.arange(len(data)) * 0.1]
    assert detect_bursts(np.array(t), np.array(data), 90.0, min_ms) == _reference_bursts(t, data, 90.0, min_ms)
