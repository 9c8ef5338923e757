"""Judging scale decisions after the fact: misjudged scale-downs and SLA-violation reaction delay.

Definitions (both fidelities, every policy):

* **Attributable violation.** A violating request that an idle replica would have served within
  the SLO (its own prefill within the TTFT limit, its own service within the end-to-end limit).
  A prompt whose prefill alone takes longer than the TTFT limit violates under every fleet size:
  it says nothing about a scale decision, so it starts no episode (it still counts in the
  scorecard's violation rate).
* **SLO breach episode.** Arrivals are grouped in ``BREACH_BIN_S`` = 10 s bins; a bin breaches
  when at least ``BREACH_FRACTION`` = 1 % of its requests, and at least ``BREACH_MIN_REQUESTS`` =
  3, violate the SLO attributably (one slow request among the 40 of a quiet bin is 2.5 % of it,
  and no episode: alerting rules ask for several errors for the same reason). Consecutive breaching bins form one episode. Its **start** is its first bin's
  start; its **onset** is the arrival of its first attributably violating request (request
  fidelity) or the start of the first fluid bin with a violation in that first 10 s bin.
* **Misjudged scale-down.** A decision that lowers the replica target from a to b at time t,
  followed within ``window_s`` (default: cold start + 60 s — the time to notice and undo it) by
  the start of a breach episode, or by a forced scale-up that undoes it (the target returns to
  ≥ a). The design note's "misjudgement rate" is misjudged / scale-downs.
* **SLA-violation delay.** For each episode, the time from its onset to the policy's first
  scale-up request at or after it. A scale-up requested less than a cold start before the onset
  is capacity already on its way when the breach began: the policy reacted first, delay 0. A
  policy that does not react within ``REACT_CAP_S`` = 600 s is charged 600 s.
  ``sla_violation_delay_ms`` is the median over episodes (NaN without any).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]

BREACH_BIN_S = 10.0
BREACH_FRACTION = 0.01
BREACH_MIN_REQUESTS = 3.0
REACT_CAP_S = 600.0


def breach_starts(arrivals: FloatArray, violations: FloatArray) -> FloatArray:
    """Episode start times (s) from per-10 s-bin arrival and violation counts."""
    return breach_bins(arrivals, violations).astype(np.float64) * BREACH_BIN_S


def breach_bins(arrivals: FloatArray, violations: FloatArray) -> npt.NDArray[np.int64]:
    """Index of each episode's first 10 s bin."""
    bad = (violations >= BREACH_MIN_REQUESTS) & (violations >= BREACH_FRACTION * np.maximum(arrivals, 1e-12))
    return np.flatnonzero(bad & ~np.concatenate([[False], bad[:-1]])).astype(np.int64)


def episode_onsets(first_bins: npt.NDArray[np.int64], t_s: FloatArray, violated: FloatArray) -> FloatArray:
    """Each episode's onset: the earliest time in ``t_s`` with ``violated > 0`` inside its first
    10 s bin (``t_s`` arrival or fluid-bin start times, in any order)."""
    hit = violated > 0
    tv = np.sort(t_s[hit])
    lo = first_bins.astype(np.float64) * BREACH_BIN_S
    k = np.searchsorted(tv, lo, side="left")
    found = k < len(tv)
    onset = np.where(found, tv[np.minimum(k, max(len(tv) - 1, 0))] if len(tv) else lo, lo)
    return np.where(found & (onset < lo + BREACH_BIN_S), onset, lo)


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


def violation_delay_ms(decisions: Sequence[tuple[float, int, int]], onsets: FloatArray,
                       cold_start_s: float = 0.0) -> float:
    """Median delay (ms) from episode onset to the policy's scale-up (see the module docstring:
    capacity requested less than ``cold_start_s`` before the onset counts as 0; capped at 600 s);
    NaN without episodes."""
    if len(onsets) == 0:
        return float("nan")
    ups = np.sort(np.array([t for t, a, b in decisions if b > a], dtype=np.float64))
    delays = []
    for s in onsets:
        k = int(np.searchsorted(ups, s, side="left"))
        if k > 0 and cold_start_s > 0 and ups[k - 1] > s - cold_start_s:
            delays.append(0.0)
            continue
        d = ups[k] - s if k < len(ups) else REACT_CAP_S
        delays.append(min(d, REACT_CAP_S))
    return float(np.median(delays) * 1000.0)
