"""PeriodicRises (ebb.decide.forecast): a period in the rises, and the rise due at a phase."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ebb.decide import forecast
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


def _fft_acf(x: np.ndarray) -> np.ndarray:
    """The autocorrelation as first computed: an FFT of the whole centred series, every search."""
    v = np.where(np.isnan(x), 0.0, x)
    v = v - v.mean()
    n = len(v)
    f = np.fft.rfft(v, n=2 * n)
    acf = np.fft.irfft(f * np.conj(f))[:n] / float(np.dot(v, v))
    return np.asarray(acf * n / np.maximum(n - np.arange(n), 1))


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("rebuild_bins", [25, 10**9])
def test_the_kept_lag_sums_give_the_whole_series_fft_autocorrelation(
        seed: int, rebuild_bins: int, monkeypatch: pytest.MonkeyPatch) -> None:
    # A 60-bin span (bins finish and leave it), gaps of empty bins, rises changing the newest bin;
    # exact rebuilds every 25 finished bins, or never after the first search.
    monkeypatch.setattr(forecast, "_REBUILD_BINS", rebuild_bins)
    rng = np.random.default_rng(seed)
    rises = PeriodicRises(5.0, bin_s=1.0, span_s=60.0, min_history_horizons=1.0)
    t = 0.0
    for step in range(600):
        t += float(rng.choice([0.3, 1.0, 1.0, 4.0]))
        rises.record(t, float(rng.gamma(2.0, 2.0)) if rng.random() < 0.7 else 0.0)
        if step % 7 == 0:
            x = rises._series()
            v0 = np.where(np.isnan(x), 0.0, x)
            v = v0 - v0.mean()
            top = min(len(x) // rises.min_periods + 1, len(x) - 1)
            if top < 1 or float(np.dot(v, v)) <= 1e-12:
                continue
            kept = rises._acf(v0, top, float(np.dot(v, v)))
            assert np.allclose(kept, _fft_acf(x)[:top + 1], rtol=0.0, atol=1e-9)


def test_a_search_finds_the_same_period_with_kept_lag_sums_as_with_an_fft() -> None:
    rises = PeriodicRises(30.0, redetect_s=60.0)
    for i in range(3 * 86_400 // 10):
        tau = 10.0 * i
        rises.record(tau, 8.0 if (tau % 600.0) < 30.0 else 0.5)
        if i % 6 == 0:
            rises.detect(tau)
    assert rises.period_s == 600.0
    x = rises._series()
    lag = int(rises.period_s / rises.bin_s)
    assert math.isclose(rises.acf, float(_fft_acf(x)[lag]), abs_tol=1e-9)
