"""Split a sample into *atoms* (dominant exact values) and a continuous part, and choose its scale.

Real resource columns are often mixtures: the Alibaba GPU pod list's ``gpu_milli`` holds 1000 in
48.9 % and 0 in 13.3 % of its 8,152 rows, the rest spread between. A histogram with smoothing
blurs such spikes into a neighbouring bump (or loses a spike sitting on the range's edge), so
they are found first, exactly:

* an **atom** is a value held by at least ``min_share`` of the finite samples (default 5 %);
  every such value is reported, whatever its position, so an atom never goes missing;
* the **continuous part** is what remains; its modes come from the smoothed histogram
  (:mod:`ebb.analysis.distribution`), binned on a **log scale** when the part is positive and
  skewed (sample skewness > 1 on the linear scale and smaller in magnitude on the log scale,
  e.g. request sizes spanning decades).

Pure numpy (one ``np.unique``); no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

__all__ = ["ATOM_MIN_SHARE", "Atom", "find_atoms", "prefers_log_scale", "split_atoms"]

FloatArray = npt.NDArray[np.float64]
ATOM_MIN_SHARE = 0.05
"""Default share of the sample a single value must hold to be reported as an atom (5 %)."""
_SKEWED = 1.0  # linear-scale skewness above which a log scale is considered


@dataclass(frozen=True)
class Atom:
    """One exact value holding ``share`` (``count`` / n) of the sample."""

    value: float
    count: int
    share: float


def find_atoms(values: FloatArray, *, min_share: float = ATOM_MIN_SHARE) -> tuple[Atom, ...]:
    """Every value held by ``>= min_share`` of ``values``, in increasing value order.

    ``min_share`` must be in (0, 1]; at most ``floor(1 / min_share)`` atoms exist. Non-finite
    values must be removed by the caller (they are not counted).
    """
    if not 0.0 < min_share <= 1.0:
        raise ValueError(f"min_share must be in (0, 1], got {min_share!r}")
    v = np.asarray(values, dtype=np.float64)
    if len(v) == 0:
        return ()
    uniq, counts = np.unique(v, return_counts=True)
    # the relative slack absorbs rounding in min_share * n, so exactly 5 % of 20 rows is an atom
    keep = counts >= min_share * len(v) * (1 - 1e-12)
    return tuple(Atom(value=float(u), count=int(c), share=int(c) / len(v))
                 for u, c in zip(uniq[keep], counts[keep]))


def split_atoms(values: FloatArray, atoms: tuple[Atom, ...]) -> FloatArray:
    """The samples that are not one of ``atoms`` (the continuous part), order kept."""
    v = np.asarray(values, dtype=np.float64)
    if not atoms:
        return v
    rest: FloatArray = v[~np.isin(v, np.array([a.value for a in atoms]))]
    return rest


def _skewness(x: FloatArray) -> float:
    sd = float(x.std())
    if len(x) < 3 or sd <= 0:
        return 0.0
    return float(np.mean(((x - x.mean()) / sd) ** 3))


def prefers_log_scale(values: FloatArray) -> bool:
    """True when every value is > 0, linear skewness > 1 and the log10 values are less skewed."""
    v = np.asarray(values, dtype=np.float64)
    if len(v) < 3 or float(v.min()) <= 0:
        return False
    lin = _skewness(v)
    return lin > _SKEWED and abs(_skewness(np.log10(v))) < abs(lin)
