"""Running sums as a loop keeps them, for many steps at once, bit for bit.

Several windows in :mod:`ebb.decide` keep a running sum the way a loop does: each step adds its
value, then subtracts the values that leave the window, oldest first. Floating-point addition is
not associative, so a window sum recomputed from scratch differs in its last bits from the loop's,
and a decision compared against a threshold can change. :func:`running_sums` replays the loop's
additions and subtractions in the same order as one ``np.cumsum`` (a sequential left-to-right scan;
``a − b`` is ``a + (−b)`` in IEEE arithmetic), so every partial sum is the loop's.

Cost: O(steps + removals) numpy, no Python loop. Pure.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

__all__ = ["running_sums"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


def running_sums(total: float, added: FloatArray, removed: FloatArray, removed_by: IntArray) -> FloatArray:
    """The running sum after each step ``k``: ``total``, then per step ``+ added[k]`` followed by
    ``− removed[r]`` for each value removed in that step, in order. ``removed_by[k]`` is how many
    values of ``removed`` are gone by the end of step ``k`` (non-decreasing; its last entry at most
    ``len(removed)``)."""
    n = len(added)
    if n == 0:
        return np.zeros(0)
    n_gone = int(removed_by[-1])
    before = np.concatenate(([0], removed_by[:-1]))  # removals before step k
    ops = np.empty(n + n_gone)
    ops[np.arange(n) + before] = added
    if n_gone:
        r = np.arange(n_gone)
        step = np.searchsorted(removed_by, r, side="right")  # the step that removes value r
        ops[step + 1 + r] = -np.asarray(removed[:n_gone], dtype=np.float64)
    sums = np.cumsum(np.concatenate(([total], ops)))
    return np.asarray(sums[np.arange(n) + np.asarray(removed_by) + 1], dtype=np.float64)
