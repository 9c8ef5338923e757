"""PeriodicRises (ebb.decide.forecast): a period in the rises, and the rise due at a phase."""

from __future__ import annotations

import math

import numpy as np

from ebb.decide.forecast import PeriodicRises


def fed(rises: np.ndarray, **kw: float) -> PeriodicRises:
    p = PeriodicRises(kw.pop("horizon_s", 30.0), **kw)  # type: ignore[arg-type]
    for t, r in enumerate(rises):
        p.record(float(t), float(r))
    return p


def periodic(period: int, n: int, width: int = 30, height: float = 8.0, noise: float = 0.0,
             seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.normal(0.0, noise, n) if noise else np.zeros(n)
    for start in range(period // 2, n, period):
        x[start:start + width] += height
    return x


def test_a_burst_every_ten_minutes_is_found_with_its_period() -> None:
    p = fed(periodic(600, 2400, noise=0.3))
    assert p.detect(2400.0) == 600.0 and p.acf > 0.6


def test_the_period_is_the_smallest_divisor_that_correlates_as_well() -> None:
    p = fed(periodic(300, 3000))
    assert p.detect(3000.0) == 300.0  # not 600 or 900, which correlate as well


def test_noise_has_no_period() -> None:
    p = fed(np.random.default_rng(3).exponential(1.0, 5000))
    assert p.detect(5000.0) is None and p.phase_rise(5000.0) == (math.nan, 0) or \
        math.isnan(p.phase_rise(5000.0)[0])


def test_fewer_than_three_periods_of_history_are_no_period() -> None:
    assert fed(periodic(600, 1700)).detect(1700.0) is None


def test_the_phase_rise_is_the_burst_just_before_it_and_small_in_between() -> None:
    x = periodic(600, 2400)
    p = fed(x)
    assert p.detect(2400.0) == 600.0
    burst_start = 300 + 3 * 600  # the next burst after the history
    rise, periods = p.phase_rise(float(burst_start - 10))
    assert periods >= 3 and rise == 8.0
    calm, _ = p.phase_rise(float(burst_start + 200))
    assert calm == 0.0


def test_detection_is_redone_only_every_redetect_s() -> None:
    p = fed(periodic(600, 2400), redetect_s=100.0)
    assert p.detect(2400.0) == 600.0
    for t in range(2400, 2450):
        p.record(float(t), 0.0)
    assert p.detect(2450.0) == 600.0  # within redetect_s: the cached answer
