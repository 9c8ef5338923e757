"""Small helpers for drawing static SVG charts in Python: scales, ticks, paths, downsampling.

The simulate report must open offline and stay small, so charts are plain inline SVG built here
instead of with a JavaScript charting library. Everything returns strings or numpy arrays; the
caller (:mod:`ebb.score.report`) decides layout and escapes any text it puts around them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

__all__ = [
    "PALETTE",
    "LinearScale",
    "LogScale",
    "downsample_minmax",
    "downsample_max",
    "nice_ticks",
    "log_ticks",
    "fmt_num",
    "time_unit",
    "line_path",
    "step_path",
    "step_area_path",
]

FloatArray = npt.NDArray[np.float64]

PALETTE: tuple[str, ...] = (
    "#0072B2",  # blue
    "#E69F00",  # orange
    "#009E73",  # bluish green
    "#D55E00",  # vermillion
    "#CC79A7",  # reddish purple
    "#56B4E9",  # sky blue
    "#000000",  # black
    "#F0E442",  # yellow: last, it has poor contrast on white
)
"""Okabe–Ito colours, ordered so the first few stay distinct for the common colour-vision
deficiencies and keep contrast against a white background."""


# --------------------------------------------------------------------------- downsampling


def _check_downsample_args(t: FloatArray, y: FloatArray, max_points: int, least: int) -> None:
    if max_points < least:
        raise ValueError(f"max_points must be >= {least}, got {max_points!r}")
    if t.shape != y.shape or t.ndim != 1:
        raise ValueError(f"t and y must be 1-D and of equal length, got shapes {t.shape} and {y.shape}")


def _buckets(y: FloatArray, n_buckets: int) -> tuple[FloatArray, int]:
    """Reshape ``y`` into ``(rows, size)`` buckets, padding the tail with NaN (never selected)."""
    size = math.ceil(len(y) / n_buckets)
    rows = math.ceil(len(y) / size)
    padded = np.full(rows * size, np.nan)
    padded[: len(y)] = y
    return padded.reshape(rows, size), size


def downsample_minmax(t: FloatArray, y: FloatArray, max_points: int) -> tuple[FloatArray, FloatArray]:
    """Reduce a series to at most ``max_points`` samples keeping each bucket's min and max.

    The samples returned are original ``(t, y)`` pairs in time order, so peaks and troughs are
    drawn exactly (a plain stride would hide the short spikes a scaling report is about).
    A bucket with only NaN yields NaN, which the path builders draw as a gap.
    """
    t = np.asarray(t, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    _check_downsample_args(t, y, max_points, 2)
    if len(y) <= max_points:
        return t.copy(), y.copy()
    grid, size = _buckets(y, max_points // 2)
    nan = np.isnan(grid)
    # argmin/argmax have no NaN-skipping variant that is silent on all-NaN rows, so mask by hand.
    imin = np.argmin(np.where(nan, np.inf, grid), axis=1)
    imax = np.argmax(np.where(nan, -np.inf, grid), axis=1)
    base = np.arange(grid.shape[0]) * size
    idx = np.stack([base + np.minimum(imin, imax), base + np.maximum(imin, imax)], axis=1).ravel()
    return t[idx], y[idx]


def downsample_max(t: FloatArray, y: FloatArray, max_points: int) -> tuple[FloatArray, FloatArray]:
    """Reduce a series to at most ``max_points`` samples, keeping each bucket's maximum.

    Used for tail latencies, where the worst value in a stretch is the one worth seeing.
    """
    t = np.asarray(t, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    _check_downsample_args(t, y, max_points, 1)
    if len(y) <= max_points:
        return t.copy(), y.copy()
    grid, size = _buckets(y, max_points)
    imax = np.argmax(np.where(np.isnan(grid), -np.inf, grid), axis=1)
    idx = np.arange(grid.shape[0]) * size + imax
    return t[idx], y[idx]


# --------------------------------------------------------------------------- scales and ticks


@dataclass(frozen=True)
class LinearScale:
    """Maps ``[lo, hi]`` in data units onto ``[r0, r1]`` pixels (``r0 > r1`` for a y axis)."""

    lo: float
    hi: float
    r0: float
    r1: float

    def __call__(self, v: FloatArray) -> FloatArray:
        span = self.hi - self.lo if self.hi != self.lo else 1.0
        out: FloatArray = self.r0 + (np.asarray(v, dtype=np.float64) - self.lo) / span * (self.r1 - self.r0)
        return out

    def at(self, v: float) -> float:
        return float(self(np.array([v]))[0])


@dataclass(frozen=True)
class LogScale:
    """Base-10 log scale; values <= 0 map to NaN so they become gaps rather than -inf pixels."""

    lo: float
    hi: float
    r0: float
    r1: float

    def __post_init__(self) -> None:
        if not (self.lo > 0 and self.hi > 0):
            raise ValueError(f"log scale domain must be positive, got [{self.lo!r}, {self.hi!r}]")

    def __call__(self, v: FloatArray) -> FloatArray:
        a = np.asarray(v, dtype=np.float64)
        safe = np.where(a > 0, a, np.nan)
        l0, l1 = math.log10(self.lo), math.log10(self.hi)
        span = l1 - l0 if l1 != l0 else 1.0
        with np.errstate(invalid="ignore", divide="ignore"):
            out: FloatArray = self.r0 + (np.log10(safe) - l0) / span * (self.r1 - self.r0)
        return out

    def at(self, v: float) -> float:
        return float(self(np.array([v]))[0])


def nice_ticks(lo: float, hi: float, target: int = 5) -> list[float]:
    """About ``target`` round tick values (1, 2, 2.5 or 5 times a power of ten) covering [lo, hi]."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return []
    if hi < lo:
        lo, hi = hi, lo
    if hi == lo:
        return [lo]
    raw = (hi - lo) / max(target, 1)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first = math.ceil(lo / step - 1e-9)
    last = math.floor(hi / step + 1e-9)
    # Rounding strips float noise such as 0.30000000000000004 from the labels.
    return [round(i * step, 12) for i in range(first, last + 1)]


def log_ticks(lo: float, hi: float) -> list[float]:
    """Decade ticks in [lo, hi]; adds 2× and 5× marks when the range spans two decades or fewer."""
    if not (lo > 0 and hi >= lo):
        return []
    d0, d1 = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    mults = (1.0, 2.0, 5.0) if d1 - d0 <= 2 else (1.0,)
    ticks = [m * 10.0**d for d in range(d0, d1 + 1) for m in mults]
    return [v for v in ticks if lo * (1 - 1e-9) <= v <= hi * (1 + 1e-9)]


def fmt_num(v: float) -> str:
    """Compact tick label: ``0.25``, ``40``, ``1.5k``, ``2M``."""
    if not math.isfinite(v):
        return "—"
    a = abs(v)
    for div, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if a >= div:
            return f"{v / div:.3g}{suffix}"
    return f"{v:.3g}"


def time_unit(span_s: float) -> tuple[float, str]:
    """Divisor and label that keep time-axis ticks readable for a span of ``span_s`` seconds."""
    if span_s <= 600:
        return 1.0, "s"
    if span_s <= 6 * 3600:
        return 60.0, "min"
    if span_s <= 4 * 86400:
        return 3600.0, "h"
    return 86400.0, "d"


# --------------------------------------------------------------------------- paths


def _runs(mask: npt.NDArray[np.bool_]) -> list[tuple[int, int]]:
    """Half-open index ranges where ``mask`` is True."""
    m = np.concatenate([[False], mask, [False]]).astype(np.int8)
    edges = np.flatnonzero(np.diff(m))
    return [(int(a), int(b)) for a, b in zip(edges[0::2], edges[1::2], strict=True)]


def _fmt(a: FloatArray) -> list[str]:
    return [f"{v:.1f}" for v in a.tolist()]


def line_path(x: FloatArray, y: FloatArray) -> str:
    """SVG path data joining points; a NaN in ``x`` or ``y`` starts a new subpath (a gap).

    A lone point becomes a zero-length segment, which ``stroke-linecap: round`` shows as a dot,
    so isolated bins between gaps stay visible.
    """
    ok = ~(np.isnan(x) | np.isnan(y))
    xs, ys = _fmt(x), _fmt(y)
    parts: list[str] = []
    for a, b in _runs(ok):
        pts = [f"{xs[i]},{ys[i]}" for i in range(a, b)]
        parts.append("M" + pts[0] + ("L" + " ".join(pts[1:]) if b - a > 1 else "h0"))
    return "".join(parts)


def step_path(x: FloatArray, y: FloatArray, x_end: float) -> str:
    """Path data for a step series: ``y[i]`` holds from ``x[i]`` until ``x[i+1]`` (or ``x_end``).

    NaN values in ``y`` end the current step at the NaN sample's ``x`` and leave a gap.
    """
    ok = ~np.isnan(y)
    xs, ys = _fmt(x), _fmt(y)
    end = f"{x_end:.1f}"
    parts: list[str] = []
    for a, b in _runs(ok):
        seg = [f"M{xs[a]},{ys[a]}"]
        for i in range(a + 1, b):
            seg.append(f"H{xs[i]}V{ys[i]}")
        seg.append(f"H{xs[b] if b < len(xs) else end}")
        parts.append("".join(seg))
    return "".join(parts)


def step_area_path(x: FloatArray, y: FloatArray, x_end: float, baseline: float) -> str:
    """Closed step-shaped areas down to ``baseline`` (pixels), one per run of non-NaN values."""
    ok = ~np.isnan(y)
    xs, ys = _fmt(x), _fmt(y)
    base = f"{baseline:.1f}"
    end = f"{x_end:.1f}"
    parts: list[str] = []
    for a, b in _runs(ok):
        seg = [f"M{xs[a]},{base}V{ys[a]}"]
        for i in range(a + 1, b):
            seg.append(f"H{xs[i]}V{ys[i]}")
        seg.append(f"H{xs[b] if b < len(xs) else end}V{base}Z")
        parts.append("".join(seg))
    return "".join(parts)
