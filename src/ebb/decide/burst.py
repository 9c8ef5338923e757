"""Burst detection over a stream of windowed quantiles (one evaluation per bucket boundary).

Definition (evaluations at times ``t_0 < t_1 < ...``, every W ms, one value per series):

* *over* at ``t_i``: the windowed quantile is ≥ ``threshold − rel_tolerance·|threshold|`` (NaN — an
  empty window — is not over). Pass the sketch's ``alpha`` as ``rel_tolerance``: the estimate is
  within ``alpha`` of the true quantile, so a true quantile ≥ threshold then always counts (no
  burst lost to sketch error); the price is that true values down to ``threshold·(1 − alpha)`` may
  count too. The default 0 compares the estimate as is.
* A *run* is a maximal stretch of consecutive over-evaluations ``t_a .. t_z``.
* The run is a **burst** iff it lasts ≥ ``min_duration_ms``, duration meaning ``t_i − t_a``: the
  burst is *declared* at the first ``t_d`` with ``t_d − t_a ≥ min_duration_ms`` (``t_a`` itself
  when min_duration_ms is 0).
* ``Burst.start_s = t_a``, ``end_s`` = the first evaluation back under threshold (or the last
  evaluation if the stream ends mid-burst), ``peak`` = the largest quantile of the run,
  ``detect_delay_ms = t_d − t_a`` (so it is ``ceil(min_duration / W)·W`` by construction; the
  end-to-end delay from the physical event adds the window's own lag, measured by callers).

:func:`detect_bursts` is the vectorised batch form (all series at once, no per-evaluation loop),
which ``ebb bursts`` runs; bursts come ordered by (start_s, series).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

__all__ = ["Burst", "detect_bursts"]

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Burst:
    """One detected burst of one series."""

    series: int
    """Series index (column of the quantile matrix)."""
    start_s: float
    """First evaluation over threshold (s, the stream's clock)."""
    end_s: float
    """First evaluation back under threshold, or the last evaluation if still over (s)."""
    peak: float
    """Largest windowed quantile during the run (signal's unit)."""
    detect_delay_ms: float
    """Declared time − start_s (ms): when min duration was satisfied."""


def _cut(threshold: float, rel_tolerance: float) -> float:
    if not 0.0 <= rel_tolerance < 1.0:
        raise ValueError(f"rel_tolerance must be in [0, 1), got {rel_tolerance!r}")
    return float(threshold) - rel_tolerance * abs(float(threshold))


def _validate(times_s: FloatArray, quantiles: FloatArray, min_duration_ms: float) -> None:
    if times_s.ndim != 1 or quantiles.ndim != 2 or quantiles.shape[0] != times_s.shape[0]:
        raise ValueError(
            f"need times_s (T,) and quantiles (T, S); got {times_s.shape} and {quantiles.shape}"
        )
    if times_s.size > 1 and not bool(np.all(np.diff(times_s) > 0)):
        raise ValueError("times_s must be strictly increasing")
    if not min_duration_ms >= 0:
        raise ValueError(f"min_duration_ms must be >= 0, got {min_duration_ms!r}")


def detect_bursts(
    times_s: npt.ArrayLike,
    quantiles: npt.ArrayLike,
    threshold: float,
    min_duration_ms: float,
    rel_tolerance: float = 0.0,
) -> list[Burst]:
    """All bursts in a (T, S) matrix of windowed quantiles evaluated at ``times_s`` (T,)."""
    t = np.asarray(times_s, dtype=np.float64)
    qv = np.asarray(quantiles, dtype=np.float64)
    if qv.ndim == 1:
        qv = qv[:, None]
    _validate(t, qv, min_duration_ms)
    n_t, n_s = qv.shape
    if n_t == 0:
        return []
    cut = _cut(threshold, rel_tolerance)
    with np.errstate(invalid="ignore"):
        over = qv >= cut  # NaN compares False: an empty window is never a burst
    pad = np.zeros((1, n_s), dtype=np.int8)
    edges = np.diff(np.concatenate([pad, over.astype(np.int8), pad]), axis=0)  # (T+1, S)
    # transpose so nonzero returns runs grouped by series, in time order
    s_start, i_start = np.nonzero(edges.T == 1)
    s_end, i_end = np.nonzero(edges.T == -1)  # i_end: first index not over (may be T)
    min_dur_s = min_duration_ms / 1000.0
    # declared index: first i in [a, z] with t_i - t_a >= min_dur (tolerance for float seconds)
    decl = np.searchsorted(t, t[i_start] + min_dur_s - 1e-9, side="left")
    ok = decl < i_end
    peak_src = np.where(over, qv, -np.inf)
    out: list[Burst] = []
    for s, a, z, d in zip(s_start[ok], i_start[ok], i_end[ok], decl[ok], strict=True):
        end = t[z] if z < n_t else t[n_t - 1]
        out.append(
            Burst(
                series=int(s),
                start_s=float(t[a]),
                end_s=float(end),
                peak=float(peak_src[a:z, s].max()),
                detect_delay_ms=float(round((t[d] - t[a]) * 1000.0, 6)),
            )
        )
    out.sort(key=lambda b: (b.start_s, b.series))
    return out
