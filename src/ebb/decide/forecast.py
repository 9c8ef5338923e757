"""Periodic structure in the need's rises: when the next rise is due, so capacity can leave between.

A comeback bound (:mod:`ebb.decide.comeback`) that only knows the distribution of rises must hold,
at every moment, capacity for the largest rise it has seen — between two bursts of a cron-driven
job just as right before one. Where rises recur with a period (a batch every 10 minutes, a daily
peak), the rise expected *now* is the one seen at the same phase of the previous periods, and the
fleet may shrink in between and grow back one horizon before the next burst.

Detection, from the rises themselves (one per second, as the bound completes them):

* rises are kept as their maximum per ``bin_s`` (10 s) bin over the last ``span_s`` (two days);
* every ``redetect_s`` the autocorrelation of that series is searched over lags
  from ``2 × horizon`` (rises of overlapping windows correlate below one horizon by construction)
  up to a third of the history; the **period** is the lag of the largest autocorrelation — or the
  smallest divisor of it that correlates at least ``0.9 ×`` as well (a multiple of a period
  correlates as well as the period) — when it reaches ``min_acf`` (0.6), at least ``min_periods``
  (3) periods are in the history and the history spans ``min_history_horizons`` (30) horizons
  (over a few dozen bins a strong autocorrelation is noise); otherwise there is none;
* the **phase rise** at time ``t`` is the largest rise in the bin of ``t − k·P`` and the two after
  it, for every past period ``k``: two bins of lead for timing jitter and so that capacity asked now
  is ready when the rise comes (a bin *before* would carry a past burst's rise into the burst).

The comeback bound uses the phase rise instead of its quantile only while a period is detected;
any doubt (weak autocorrelation, too little history) leaves the unconditional bound in charge.
The autocorrelation comes from lag products kept as bins finish and leave the span (O(lags) numpy
per finished bin, O(n) per search, an exact FFT rebuild once a day of bins; within 1e-9 of the FFT
over the whole series, ``tests/unit/decide/test_forecast.py``): over 58 days a search every minute
on two days of bins cost ~3 ms as an FFT. Pure and deterministic; no library beyond numpy (``bench/forecast.py`` measures Holt-Winters and
ARIMA on the same traces and rises against this).
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

__all__ = ["PeriodicRises"]

FloatArray = npt.NDArray[np.float64]
_REBUILD_BINS = 8640
"""Finished bins (a day at 10 s) between exact rebuilds of the lag sums: ~10⁻¹³ of drift at most."""


class PeriodicRises:
    """Binned rise history, its detected period, and the rise at a phase (see the module docstring)."""

    def __init__(self, horizon_s: float, *, bin_s: float = 10.0, span_s: float = 2 * 86_400.0,
                 min_acf: float = 0.6, min_periods: int = 3, redetect_s: float = 60.0,
                 min_history_horizons: float = 30.0) -> None:
        if not (horizon_s > 0 and bin_s > 0 and span_s > 4 * bin_s and 0 < min_acf <= 1 and min_periods >= 2
                and redetect_s > 0):
            raise ValueError(f"PeriodicRises: bad settings horizon_s={horizon_s!r}, bin_s={bin_s!r}, "
                             f"span_s={span_s!r}, min_acf={min_acf!r}, min_periods={min_periods!r}")
        self.horizon_s = float(horizon_s)
        self.bin_s = float(bin_s)
        self.min_acf = float(min_acf)
        self.min_periods = int(min_periods)
        self.redetect_s = float(redetect_s)
        self.min_history_s = float(min_history_horizons) * float(horizon_s)
        self._cap = int(math.ceil(span_s / bin_s))
        self._bins = np.full(self._cap, np.nan)  # ring of per-bin max rises, indexed by absolute bin % cap
        self._bins0 = np.zeros(self._cap)  # the same ring with NaN as 0 (what the lag products read)
        self._first_bin: int | None = None
        self._last_bin = -1
        # Lag products of the finished bins (all but the newest, which may still rise), kept as bins
        # finish and leave the span: sum of x_i·x_(i+τ) for τ ≤ _max_lag, so a search costs O(n), not an FFT.
        self._max_lag = self._cap // self.min_periods + 2
        self._lag_sums = np.zeros(self._max_lag + 1)
        self._finished = 0  # bins finished since the lag sums were last rebuilt exactly
        self._next_detect_s = -math.inf
        self.period_s: float | None = None
        """The detected period (s); None while there is none."""
        self.acf = math.nan
        """The autocorrelation at the detected period (or the best one found when it was too weak)."""

    @property
    def next_detect_s(self) -> float:
        """The first ``now`` at which :meth:`detect` searches again (before it, it answers its last period)."""
        return self._next_detect_s

    def record(self, tau_s: float, rise: float) -> None:
        """The rise of the decision at ``tau_s`` (its horizon is complete); times never go back."""
        b = int(math.floor(tau_s / self.bin_s))
        if self._first_bin is None:
            self._first_bin = b
        if b > self._last_bin:
            if self._last_bin >= 0:
                self._finish(b)
            # Bins skipped without a rise hold no evidence: NaN (they count as "no rise" in the ACF).
            lo = max(self._last_bin + 1, b - self._cap + 1)
            for k in range(lo, b + 1):
                self._bins[k % self._cap] = np.nan
                self._bins0[k % self._cap] = 0.0
            self._last_bin = b
        if b <= self._last_bin - self._cap:
            return
        if b < self._last_bin:
            self._finished = -1  # a finished bin changed (times went back): rebuild at the next search
        j = b % self._cap
        cur = self._bins[j]
        self._bins[j] = rise if math.isnan(cur) else max(cur, rise)
        self._bins0[j] = 0.0 if math.isnan(self._bins[j]) else self._bins[j]

    def _finish(self, b: int) -> None:
        """The newest bin is finished (bin ``b`` starts): add its lag products with the bins before
        it, then take out those of the bins that leave the span (before their slots are reused)."""
        cap, last = self._cap, self._last_bin
        start = max(self._first_bin if self._first_bin is not None else last, last - cap + 1)
        x_last = self._bins[last % cap]
        if not math.isnan(x_last) and x_last != 0.0:
            lo = last - min(self._max_lag, last - start)
            self._lag_sums[:last - lo + 1] += x_last * self._values(lo, last)[::-1]
        for a in range(start, min(b - cap + 1, last + 1)):  # leaving: pairs with the finished bins after it
            x_a = self._bins[a % cap]
            if math.isnan(x_a) or x_a == 0.0:
                continue
            hi = a + min(self._max_lag, last - a)
            self._lag_sums[:hi - a + 1] -= x_a * self._values(a, hi)
        if self._finished >= 0:
            self._finished += 1

    def _values(self, lo: int, hi: int) -> FloatArray:
        """Bins ``lo`` … ``hi`` (absolute, within the ring), NaN as 0: one or two slices of the zero
        ring, no gather (a view: callers only read it)."""
        cap = self._cap
        i, j = lo % cap, hi % cap
        return self._bins0[i:j + 1] if i <= j else np.concatenate((self._bins0[i:], self._bins0[:j + 1]))

    def _rebuild_lag_sums(self, fin: FloatArray) -> None:
        """The finished bins' lag products from scratch (an FFT): after a bin changed behind the
        newest, and every ``_REBUILD_BINS`` finished bins (rounding drift)."""
        n = len(fin)
        self._lag_sums[:] = 0.0
        if n:
            f = np.fft.rfft(fin, n=2 * n)
            full = np.fft.irfft(f * np.conj(f))[:n]
            m = min(n, self._max_lag + 1)
            self._lag_sums[:m] = full[:m]
        self._finished = 0

    def _acf(self, v0: FloatArray, top: int, denom: float) -> FloatArray:
        """The unbiased autocorrelation of ``v0`` (the series with NaN as 0) at lags 0 … ``top``,
        over ``denom`` (its squared deviations): the lag sums of the finished bins plus the newest
        bin's, centred by the mean."""
        n = len(v0)
        if self._finished < 0 or self._finished >= _REBUILD_BINS:
            self._rebuild_lag_sums(v0[:-1])
        lags = np.arange(top + 1)
        r = self._lag_sums[:top + 1].copy()
        r += v0[-1] * v0[n - 1 - lags]  # pairs with the newest bin
        total = np.concatenate(([0.0], np.cumsum(v0)))
        mean = total[-1] / n
        head = total[n - lags]  # sum of x_0 … x_(n-1-τ)
        tail = total[-1] - total[lags]  # sum of x_τ … x_(n-1)
        centred = r - mean * (head + tail) + (n - lags) * mean * mean
        return np.asarray(centred / denom * n / np.maximum(n - lags, 1), dtype=np.float64)

    def _series(self) -> FloatArray:
        """The binned rises in time order (oldest first), NaN where a bin had none."""
        if self._first_bin is None:
            return np.zeros(0)
        first = max(self._first_bin, self._last_bin - self._cap + 1)
        idx = np.arange(first, self._last_bin + 1) % self._cap
        return np.asarray(self._bins[idx], dtype=np.float64)

    def detect(self, now_s: float) -> float | None:
        """Re-detect the period if ``redetect_s`` passed since the last time; the period (s) or None."""
        if now_s < self._next_detect_s:
            return self.period_s
        self._next_detect_s = now_s + self.redetect_s
        first = max(self._first_bin, self._last_bin - self._cap + 1) if self._first_bin is not None else 0
        n = self._last_bin - first + 1 if self._first_bin is not None else 0
        lo = max(2, int(math.ceil(2.0 * self.horizon_s / self.bin_s)))
        hi = n // self.min_periods
        self.period_s, self.acf = None, math.nan
        if hi <= lo or n * self.bin_s < self.min_history_s:
            return None  # too little history: a strong autocorrelation over a few dozen bins is noise
        v0 = self._values(first, self._last_bin)  # the series in time order, NaN as 0
        v = v0 - v0.mean()
        denom = float(np.dot(v, v))
        if denom <= 1e-12:
            return None
        # Unbiased for the shrinking overlap, so long lags are not penalised for having fewer pairs.
        acf = self._acf(v0, min(hi + 1, n - 1), denom)
        window = acf[lo:hi + 1]
        best = float(window.max())
        self.acf = best
        if best < self.min_acf:
            return None
        lag = lo + int(np.argmax(window))
        # A multiple of the true period correlates as well as the period: take the smallest divisor
        # of the best lag (±1 bin) that is nearly as strong.
        for div in range(int(lag // lo), 1, -1):
            sub = int(round(lag / div))
            near = acf[max(sub - 1, lo):sub + 2]
            if len(near) and float(near.max()) >= 0.9 * best:
                lag = max(sub - 1, lo) + int(np.argmax(near))
                break
        self.period_s = lag * self.bin_s
        self.acf = float(acf[lag])
        return self.period_s

    def phase_rise(self, now_s: float) -> tuple[float, int]:
        """The largest rise at this phase of the past periods, and how many periods it rests on;
        (NaN, 0) without a detected period."""
        if self.period_s is None:
            return math.nan, 0
        x = self._series()
        if not len(x):
            return math.nan, 0
        first = self._last_bin - len(x) + 1
        p = int(round(self.period_s / self.bin_s))
        b_now = int(math.floor(now_s / self.bin_s))
        found, periods = -math.inf, 0
        k = 1
        while True:
            c = b_now - k * p - first
            if c + 1 < 0:
                break
            seg = x[max(c, 0):c + 3]
            seg = seg[~np.isnan(seg)]
            if len(seg):
                found = max(found, float(seg.max()))
                periods += 1
            k += 1
        return (found if periods else math.nan), periods
