"""Distribution of one resource: histogram, summary quantiles and the modes it is made of.

A *mode* is a local maximum of the Gaussian-smoothed histogram whose topographic prominence
(height above the higher of the two lowest points separating it from any higher peak) is at
least ``min_prominence`` x the tallest smoothed bin. Its *range* grows from the peak while the
smoothed density stays >= ``rel_height`` x the peak height, and never crosses the lowest point
between it and a neighbouring mode; its *share* is the fraction of raw samples in that range.

Guarantees (tested as properties): mode ranges are disjoint and ordered, each contains its peak,
shares are in [0, 1] and sum to <= 1. Pure numpy; no I/O. Percent-like series (unit ``pct``,
``percent``) are binned over [0, 100] when every value lies there, so modes read as in the note
("35-55 %").

Dominant exact values come first (:mod:`ebb.analysis.modes`): every value holding >= 5 % of the
sample is an :class:`~ebb.analysis.modes.Atom` (``gpu_milli`` 1000 and 0 in the Alibaba pod
list), and the histogram and its modes describe only the rest, binned in log10 space when that
rest is positive and skewed. Atom and mode shares are fractions of the whole sample and together
sum to <= 1.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ebb.analysis.modes import (
    ATOM_MIN_SHARE,
    Atom,
    find_atoms,
    prefers_log_scale,
    split_atoms,
)

__all__ = ["Mode", "Distribution", "histogram", "smooth", "distribution"]

FloatArray = npt.NDArray[np.float64]
_PERCENT_UNITS = frozenset({"pct", "percent"})


@dataclass(frozen=True)
class Mode:
    """One mode: the peak's value, the value range ``[lo, hi)`` it spans and its share of samples."""

    peak: float
    lo: float
    hi: float
    share: float
    count: int
    prominence: float  # relative to the tallest smoothed bin, in (0, 1]


@dataclass(frozen=True)
class Distribution:
    """One resource's summary. ``edges``/``counts``/``smoothed`` cover the continuous part only
    (the samples that are no atom); ``edges`` are in the value's unit, geometric when
    ``log_scale``. ``n`` counts every finite sample, atoms included."""

    name: str
    n: int
    edges: FloatArray
    counts: npt.NDArray[np.int64]
    smoothed: FloatArray
    modes: tuple[Mode, ...]
    atoms: tuple[Atom, ...]
    log_scale: bool
    mean: float
    p50: float
    p95: float
    p99: float
    lo: float
    hi: float


def _is_percent(name: str) -> bool:
    return re.split(r"[_/]", name)[-1].lower() in _PERCENT_UNITS


def histogram(values: FloatArray, *, bins: int = 100,
              value_range: tuple[float, float] | None = None) -> tuple[FloatArray, npt.NDArray[np.int64]]:
    """(edges, counts); a constant series gets a unit-wide range around its value."""
    if bins < 3:
        raise ValueError(f"bins must be >= 3, got {bins}")
    v = np.asarray(values, dtype=np.float64)
    if value_range is None:
        lo, hi = (float(v.min()), float(v.max())) if len(v) else (0.0, 1.0)
        if hi <= lo:
            lo, hi = lo - 0.5, hi + 0.5
        value_range = (lo, hi)
    counts, edges = np.histogram(v, bins=bins, range=value_range)
    return edges.astype(np.float64), counts.astype(np.int64)


def smooth(counts: npt.ArrayLike, sigma_bins: float = 1.5) -> FloatArray:
    """Gaussian smoothing with mirrored edges (so a mode at 0 % or 100 % keeps its height)."""
    c = np.asarray(counts, dtype=np.float64)
    if sigma_bins <= 0 or len(c) < 2:
        return c.copy()
    half = min(int(np.ceil(3 * sigma_bins)), len(c) - 1)
    x = np.arange(-half, half + 1, dtype=np.float64)
    kernel = np.exp(-0.5 * (x / sigma_bins) ** 2)
    kernel /= kernel.sum()
    padded = np.concatenate([c[half:0:-1], c, c[-2:-half - 2:-1]])
    return np.convolve(padded, kernel, mode="valid")


def _peaks(s: FloatArray) -> list[int]:
    """Local maxima; a flat top counts once, at its middle."""
    peaks: list[int] = []
    n, i = len(s), 0
    while i < n:
        j = i
        while j + 1 < n and s[j + 1] == s[i]:
            j += 1
        left_lower = i == 0 or s[i - 1] < s[i]
        right_lower = j == n - 1 or s[j + 1] < s[i]
        if left_lower and right_lower and s[i] > 0:
            peaks.append((i + j) // 2)
        i = j + 1
    return peaks


def _prominence(s: FloatArray, p: int) -> float:
    h = s[p]
    left = p
    while left > 0 and s[left - 1] <= h:
        left -= 1
    right = p
    while right < len(s) - 1 and s[right + 1] <= h:
        right += 1
    base_left = float(s[left:p + 1].min())
    base_right = float(s[p:right + 1].min())
    return float(h - max(base_left, base_right))


def _modes(n: int, edges: FloatArray, counts: npt.NDArray[np.int64], s: FloatArray,
           min_prominence: float, rel_height: float, min_share: float) -> tuple[Mode, ...]:
    top = float(s.max()) if len(s) else 0.0
    if top <= 0:
        return ()
    peaks = [p for p in _peaks(s) if _prominence(s, p) >= min_prominence * top]
    # valleys[k] separates peaks[k] and peaks[k+1]: the lowest bin strictly between them
    valleys = [a + 1 + int(np.argmin(s[a + 1:b])) for a, b in zip(peaks, peaks[1:])]
    modes: list[Mode] = []
    for k, p in enumerate(peaks):
        floor = rel_height * s[p]
        lo_lim = valleys[k - 1] + 1 if k > 0 else 0
        hi_lim = valleys[k] - 1 if k < len(valleys) else len(s) - 1
        left = p
        while left - 1 >= lo_lim and s[left - 1] >= floor:
            left -= 1
        right = p
        while right + 1 <= hi_lim and s[right + 1] >= floor:
            right += 1
        count = int(counts[left:right + 1].sum())
        share = count / n
        if share < min_share:
            continue
        centre = 0.5 * (edges[p] + edges[p + 1])
        modes.append(Mode(peak=float(centre), lo=float(edges[left]), hi=float(edges[right + 1]),
                          share=share, count=count, prominence=_prominence(s, p) / top))
    return tuple(modes)


def distribution(name: str, values: FloatArray, *, bins: int = 100, sigma_bins: float = 1.5,
                 min_prominence: float = 0.1, rel_height: float = 0.25,
                 min_share: float = 0.01, atom_min_share: float = ATOM_MIN_SHARE) -> Distribution:
    """Histogram, quantiles, atoms and modes of one resource; non-finite values are ignored."""
    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v)]
    if len(v) == 0:
        raise ValueError(f"series {name!r} has no finite values")
    atoms = find_atoms(v, min_share=atom_min_share)
    rest = split_atoms(v, atoms)
    log_scale = prefers_log_scale(rest)
    vr: tuple[float, float] | None = None
    if log_scale:
        vr = (float(np.log10(rest.min())), float(np.log10(rest.max())))
    elif _is_percent(name) and v.min() >= 0 and v.max() <= 100:
        vr = (0.0, 100.0)
    else:
        lo, hi = float(v.min()), float(v.max())
        vr = (lo, hi) if hi > lo else (lo - 0.5, hi + 0.5)
    # bin the continuous part over the whole sample's range, so atoms and bars share one x axis
    binned = np.log10(rest) if log_scale else rest
    edges, counts = histogram(binned, bins=bins, value_range=vr)
    s = smooth(counts, sigma_bins)
    modes = _modes(len(v), edges, counts, s, min_prominence, rel_height, min_share)
    if log_scale:
        edges = np.power(10.0, edges)
        modes = tuple(Mode(peak=float(10.0 ** m.peak), lo=float(10.0 ** m.lo), hi=float(10.0 ** m.hi),
                           share=m.share, count=m.count, prominence=m.prominence) for m in modes)
    q50, q95, q99 = (float(x) for x in np.percentile(v, [50, 95, 99]))
    return Distribution(name=name, n=len(v), edges=edges, counts=counts, smoothed=s, modes=modes,
                        atoms=atoms, log_scale=log_scale, mean=float(v.mean()), p50=q50, p95=q95,
                        p99=q99, lo=float(v.min()), hi=float(v.max()))
