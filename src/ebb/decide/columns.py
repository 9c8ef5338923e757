"""Per-workload columns for the fleet-wide (vectorised) rules: one shape check for all of them.

:func:`column` turns an argument into a length-N array of one dtype, a scalar broadcast to N; any
other shape is a :class:`ValueError` naming the argument. Pure.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["column"]


def column(v: npt.ArrayLike, n: int, name: str, dtype: type[np.generic]) -> npt.NDArray[Any]:
    """``v`` as an ``(n,)`` array of ``dtype`` (a scalar broadcast to ``n``); ValueError otherwise."""
    a = np.asarray(v, dtype=dtype)
    if a.ndim == 0:
        return np.full(n, a, dtype=dtype)
    if a.shape != (n,):
        raise ValueError(f"{name} must have shape ({n},), got {a.shape}")
    return a
