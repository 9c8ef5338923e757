"""Judging scale decisions after the fact: misjudged scale-downs and SLA-violation reaction delay.

Definitions (both fidelities, every policy):

* **SLO breach episode.** Arrivals are grouped in ``BREACH_BIN_S`` = 10 s bins; a bin breaches
  when at least ``BREACH_FRACTION`` = 1 % of its requests (and at least one) violate the SLO.
  Consecutive breaching bins form one episode, starting at its first bin's start.
* **Misjudged scale-down.** A decision that lowers the replica target from a to b at time t,
  followed within ``window_s`` (default: cold start + 60 s — the time to notice and undo it) by
  the start of a breach episode, or by a forced scale-up that undoes it (the target returns to
  ≥ a). The design note's "misjudgement rate" is misjudged / scale-downs.
* **SLA-violation delay.** For each episode, the time from its start to the policy's first
  scale-up decision at or after it; a policy that does not react within ``REACT_CAP_S`` = 600 s
  is charged 600 s. ``sla_violation_delay_ms`` is the median over episodes (NaN without any).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]

BREACH_BIN_S = 10.0
BREACH_FRACTION = 0.01
REACT_CAP_S = 600.0


def breach_starts(arrivals: FloatArray, violations: FloatArray) -> FloatArray:
    """Episode start times (s) from per-10 s-bin arrival and violation counts."""
    bad = (violations >= 1.0) & (violations >= BREACH_FRACTION * np.maximum(arrivals, 1e-12))
    starts = np.flatnonzero(bad & ~np.concatenate([[False], bad[:-1]]))
    return starts.astype(np.float64) * BREACH_BIN_S


def bin_counts(t_s: FloatArray, weights: FloatArray | None, duration_s: float) -> FloatArray:
    """Counts per 10 s bin (weighted)."""
    n = int(np.ceil(max(duration_s, BREACH_BIN_S) / BREACH_BIN_S)) + 1
    idx = np.minimum((t_s / BREACH_BIN_S).astype(np.int64), n - 1)
    return np.bincount(idx, weights=weights, minlength=n).astype(np.float64)


def misjudged_scale_downs(decisions: Sequence[tuple[float, int, int]], starts: FloatArray,
                          window_s: float) -> int:
    """Scale-downs followed within ``window_s`` by a breach start or a scale-up that undoes them."""
    count = 0
    for i, (t, a, b) in enumerate(decisions):
        if b >= a:
            continue
        hit_breach = bool(np.any((starts > t) & (starts <= t + window_s)))
        undone = False
        j = i + 1
        while j < len(decisions) and decisions[j][0] <= t + window_s:  # decisions are time-ordered
            if decisions[j][2] >= a:
                undone = True
                break
            j += 1
        if hit_breach or undone:
            count += 1
    return count


def violation_delay_ms(decisions: Sequence[tuple[float, int, int]], starts: FloatArray) -> float:
    """Median delay (ms) from breach start to the next scale-up (capped at 600 s); NaN if none."""
    if len(starts) == 0:
        return float("nan")
    ups = np.sort(np.array([t for t, a, b in decisions if b > a], dtype=np.float64))
    delays = []
    for s in starts:
        k = int(np.searchsorted(ups, s, side="left"))
        d = ups[k] - s if k < len(ups) else REACT_CAP_S
        delays.append(min(d, REACT_CAP_S))
    return float(np.median(delays) * 1000.0)
