"""Dynamo SLA planner's load predictors: constant, ARIMA, Kalman — in numpy, no forecasting libraries.

Upstream: ``ai-dynamo/dynamo``, ``components/src/dynamo/planner/utils/load_predictor.py`` (commit
``0ff5001282458c8804ee72c78a9658e3bf27a011``) with defaults from
``components/src/dynamo/planner/defaults.py`` (commit ``01127723af550cba4698ac5a875f02dabaa1994a``):
``load_predictor = "arima"``, ``load_predictor_log1p = False``, Kalman ``q_level = 1.0``,
``q_trend = 0.1``, ``r = 10.0``, ``min_points = 5``. One predictor each forecasts the next interval's
request count, mean ISL and mean OSL.

Shared rules (``BasePredictor``): NaN counts as 0; leading zeros (the idle period after deploy) are
not stored; with no data the forecast is 0.

* ``constant`` — the last value.
* ``kalman`` — local linear trend (state [level, trend], F = [[1, 1], [0, 1]], H = [1, 0],
  P₀ = 1000·I, Q = diag(q_level, q_trend), R = r), initialised at the first observation; each later
  observation runs predict + update (filterpy's Joseph-form covariance update); the forecast is one
  predict step's level, cached until the next observation. Optional log1p space.
* ``arima`` — upstream calls ``pmdarima.auto_arima(buffer, suppress_warnings=True,
  error_action="ignore")`` once (order chosen by AIC, differencing d by the KPSS test at α = 0.05,
  intercept when d ≤ 1), then ``model.update(new points)`` (same order, parameters refitted); fewer
  than 5 points → last value; constant history → that value; a (0, d, 0) pick in raw space →
  refit on log1p(y). Forecasts are clamped at 0. **Simplification:** our fit is conditional least
  squares (Hannan–Rissanen for MA terms) instead of exact Kalman-filter MLE, over p, q ≤ 2 instead of
  pmdarima's stepwise search up to 5; d is chosen by the same KPSS rule (max 2). The selected order
  is kept after the first fit, as upstream's ``update`` keeps it.

Prophet (upstream's fourth option) is not emulated: it needs Stan; ``prophet`` is rejected as a knob.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]

PREDICTORS = ("constant", "arima", "kalman")
DEFAULT_PREDICTOR = "arima"


class LoadPredictor(Protocol):
    def add_data_point(self, value: float) -> None: ...
    def predict_next(self) -> float: ...


@dataclass
class _Buffer:
    """Upstream ``BasePredictor``'s buffer: NaN → 0, leading zeros skipped."""

    data: list[float] = field(default_factory=list)
    seen_nonzero: bool = False

    def add(self, value: float) -> bool:
        """Store ``value``; False when skipped as part of the leading idle period."""
        v = 0.0 if math.isnan(value) else float(value)
        if v == 0.0 and not self.seen_nonzero:
            return False
        if v != 0.0:
            self.seen_nonzero = True
        self.data.append(v)
        return True

    def last(self) -> float:
        return self.data[-1] if self.data else 0.0


@dataclass
class ConstantPredictor:
    """Forecast = the most recent stored value (0 before any)."""

    buf: _Buffer = field(default_factory=_Buffer)

    def add_data_point(self, value: float) -> None:
        self.buf.add(value)

    def predict_next(self) -> float:
        return self.buf.last()


@dataclass
class KalmanPredictor:
    """Local-linear-trend Kalman filter, one step ahead (upstream ``KalmanPredictor``)."""

    q_level: float = 1.0
    q_trend: float = 0.1
    r: float = 10.0
    min_points: int = 5
    log1p: bool = False
    buf: _Buffer = field(default_factory=_Buffer)
    _x: FloatArray = field(default_factory=lambda: np.zeros((2, 1)))
    _p: FloatArray = field(default_factory=lambda: np.eye(2) * 1000.0)
    _initialized: bool = False
    _cached: float | None = None

    _F = np.array([[1.0, 1.0], [0.0, 1.0]])
    _H = np.array([[1.0, 0.0]])

    def _q(self) -> FloatArray:
        return np.diag([max(1e-12, self.q_level), max(1e-12, self.q_trend)])

    def _predict(self) -> None:
        self._x = self._F @ self._x
        self._p = self._F @ self._p @ self._F.T + self._q()

    def _update(self, z: float) -> None:
        r = max(1e-9, self.r)
        s = float((self._H @ self._p @ self._H.T)[0, 0]) + r
        k = self._p @ self._H.T / s
        self._x = self._x + k * (z - float((self._H @ self._x)[0, 0]))
        i_kh = np.eye(2) - k @ self._H
        # Joseph form, as filterpy: keeps P symmetric positive definite.
        self._p = i_kh @ self._p @ i_kh.T + (k * r) @ k.T

    def add_data_point(self, value: float) -> None:
        if not self.buf.add(value):
            return
        raw = self.buf.last()
        z = math.log1p(max(0.0, raw)) if self.log1p else raw
        if not self._initialized:
            self._x = np.array([[z], [0.0]])
            self._initialized = True
        else:
            if self._cached is None:  # the forecast already advanced the filter one step
                self._predict()
            self._update(z)
        self._cached = None

    def _out(self, level: float) -> float:
        return max(0.0, math.expm1(level)) if self.log1p else level

    def predict_next(self) -> float:
        if not self._initialized:
            return self.buf.last()
        if self._cached is None:
            self._predict()
            self._cached = float(self._x[0, 0])
        return self._out(self._cached)


# ---- ARIMA ---------------------------------------------------------------------------------------

_KPSS_CRIT_5PCT = 0.463
"""KPSS level-stationarity critical value at α = 0.05 (Kwiatkowski et al. 1992, table 1)."""
_MAX_D = 2
_MAX_PQ = 2


def _kpss_stationary(y: FloatArray) -> bool:
    """KPSS level test (pmdarima's ``ndiffs(test="kpss")`` default: lags = ⌊3√n / 13⌋)."""
    n = len(y)
    if n < 3 or float(np.ptp(y)) == 0.0:
        return True
    e = y - y.mean()
    s = np.cumsum(e)
    lags = int(3 * math.sqrt(n) / 13)
    var = float(e @ e) / n
    for k in range(1, lags + 1):
        var += 2.0 * (1.0 - k / (lags + 1.0)) * float(e[k:] @ e[:-k]) / n
    if var <= 0.0:
        return True
    return float(s @ s) / (n * n * var) < _KPSS_CRIT_5PCT


def ndiffs(y: FloatArray) -> int:
    """Smallest d ≤ 2 after which the KPSS test no longer rejects stationarity."""
    d = 0
    while d < _MAX_D and len(y) > 3 and not _kpss_stationary(y):
        y = np.diff(y)
        d += 1
    return d


@dataclass(frozen=True)
class ArimaFit:
    """A fitted ARMA(p, q) on the d-times differenced series (conditional least squares)."""

    p: int
    q: int
    d: int
    coef: FloatArray
    """[intercept?] + p AR + q MA coefficients."""
    intercept: bool
    aic: float


def _design(w: FloatArray, eps: FloatArray, p: int, q: int, intercept: bool) -> tuple[FloatArray, FloatArray]:
    start = max(p, q)
    rows = []
    for t in range(start, len(w)):
        r = [1.0] if intercept else []
        r += [w[t - i] for i in range(1, p + 1)] + [eps[t - j] for j in range(1, q + 1)]
        rows.append(r)
    return np.array(rows, dtype=np.float64).reshape(len(rows), -1), w[start:]


def fit_arma(w: FloatArray, p: int, q: int, d: int, intercept: bool) -> ArimaFit | None:
    """Fit ARMA(p, q) to ``w`` by Hannan–Rissanen least squares; None when too few points."""
    k = p + q + int(intercept)
    if len(w) - max(p, q) <= k + 1:
        return None
    eps = np.zeros(len(w))
    if q > 0:
        # Stage 1: a long AR gives innovation estimates for the MA regressors.
        m = min(len(w) // 2, max(p, q) + 2)
        x1, y1 = _design(w, eps, m, 0, intercept)
        if len(y1) <= x1.shape[1]:
            return None
        b1, *_ = np.linalg.lstsq(x1, y1, rcond=None)
        eps[m:] = y1 - x1 @ b1
    x, y = _design(w, eps, p, q, intercept)
    coef: FloatArray = np.zeros(0)
    resid: FloatArray = y
    if x.shape[1] > 0:
        sol, *_ = np.linalg.lstsq(x, y, rcond=None)
        coef = np.asarray(sol, dtype=np.float64)
        resid = np.asarray(y - x @ coef, dtype=np.float64)
    n = len(y)
    sigma2 = max(float(resid @ resid) / n, 1e-12)
    aic = n * math.log(sigma2) + 2.0 * (k + 1)
    return ArimaFit(p, q, d, coef, intercept, aic)


def auto_arima(y: FloatArray, order: tuple[int, int, int] | None = None) -> ArimaFit:
    """Best-AIC ARIMA(p, d, q), p, q ≤ 2 (or refit of a fixed ``order``)."""
    d = ndiffs(y) if order is None else order[1]
    w = np.diff(y, n=d) if d else y
    intercept = d <= 1
    grid = [(order[0], order[2])] if order is not None else \
        [(p, q) for p in range(_MAX_PQ + 1) for q in range(_MAX_PQ + 1)]
    best: ArimaFit | None = None
    for p, q in grid:
        f = fit_arma(w, p, q, d, intercept)
        if f is not None and (best is None or f.aic < best.aic):
            best = f
    if best is None:
        best = fit_arma(w, 0, 0, d, intercept) or ArimaFit(0, 0, d, np.zeros(0), False, 0.0)
    return best


def forecast_one(y: FloatArray, fit: ArimaFit) -> float:
    """One-step-ahead forecast in the original (undifferenced) scale."""
    w = np.diff(y, n=fit.d) if fit.d else y
    eps = np.zeros(len(w))
    c = fit.coef
    off = int(fit.intercept)
    ar, ma = c[off:off + fit.p], c[off + fit.p:]
    start = max(fit.p, fit.q)
    for t in range(start, len(w)):
        pred = (c[0] if fit.intercept else 0.0) + sum(ar[i] * w[t - 1 - i] for i in range(fit.p)) \
            + sum(ma[j] * eps[t - 1 - j] for j in range(fit.q))
        eps[t] = w[t] - pred
    n = len(w)
    nxt = (c[0] if fit.intercept else 0.0) + sum(ar[i] * w[n - 1 - i] for i in range(fit.p) if n - 1 - i >= 0) \
        + sum(ma[j] * eps[n - 1 - j] for j in range(fit.q) if n - 1 - j >= 0)
    # Undo the differencing: the next level is the last level plus the forecast differences.
    if fit.d == 0:
        return float(nxt)
    if fit.d == 1:
        return float(y[-1] + nxt)
    return float(y[-1] + (y[-1] - y[-2]) + nxt)


@dataclass
class ArimaPredictor:
    """Upstream ``ARIMAPredictor`` (auto-ARIMA once, then refits with the same order)."""

    log1p: bool = False
    minimum_data_points: int = 5
    buf: _Buffer = field(default_factory=_Buffer)
    _order: tuple[int, int, int] | None = None
    _log_mode: bool = False

    def add_data_point(self, value: float) -> None:
        self.buf.add(value)

    def predict_next(self) -> float:
        raw = np.maximum(np.asarray(self.buf.data, dtype=np.float64), 0.0)
        if len(raw) < self.minimum_data_points:
            return self.buf.last()
        if len(set(raw.tolist())) == 1:
            return float(raw[0])
        if self._order is None:
            self._log_mode = self.log1p
            fit = auto_arima(np.log1p(raw) if self._log_mode else raw)
            if fit.p == 0 and fit.q == 0 and not self.log1p:
                # Upstream: a raw-space (0, d, 0) collapse is refit on log1p(y) for spiky series.
                self._log_mode = True
                fit = auto_arima(np.log1p(raw))
            self._order = (fit.p, fit.d, fit.q)
        else:
            fit = auto_arima(np.log1p(raw) if self._log_mode else raw, order=self._order)
        y = np.log1p(raw) if self._log_mode else raw
        f = forecast_one(y, fit)
        if not math.isfinite(f):
            return self.buf.last()
        return max(0.0, math.expm1(f)) if self._log_mode else max(0.0, f)


def make_predictor(name: str, *, log1p: bool = False) -> LoadPredictor:
    """A fresh predictor ``name`` (one of :data:`PREDICTORS`) with upstream's defaults."""
    if name == "constant":
        return ConstantPredictor()
    if name == "kalman":
        return KalmanPredictor(log1p=log1p)
    if name == "arima":
        return ArimaPredictor(log1p=log1p)
    raise ValueError(f"unknown load predictor {name!r}; choose one of {', '.join(PREDICTORS)}")
