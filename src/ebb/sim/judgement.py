"""Judging scale decisions after the fact: misjudged scale-downs and SLA-violation reaction delay.

Definitions (both fidelities, every policy):

* **Attributable violation.** A violating request that an idle replica would have served within
  the SLO (its own prefill within the TTFT limit, its own service within the end-to-end limit).
  A prompt whose prefill alone takes longer than the TTFT limit violates under every fleet size:
  it says nothing about a scale decision, so it starts no episode (it still counts in the
  scorecard's violation rate).
* **SLO breach episode**, relative to the trace's own rate. Arrivals are grouped in bins long
  enough to hold ``BREACH_EXPECTED_REQUESTS`` = 20 requests at the trace's mean rate
  (:func:`breach_bin_s`: ``20 / rate``, clamped to ``BREACH_BIN_S`` = 10 s … ``MAX_BREACH_BIN_S``
  = 1 h): 10 s from 2 requests a second up (every LLM trace of the project), 750 s at 1.6
  requests a minute, 1 h below 20 requests an hour. A bin breaches when at least
  ``BREACH_FRACTION`` = 1 % of its requests, and at least ``BREACH_MIN_REQUESTS`` = 3, violate
  the SLO attributably (one slow request among the 40 of a quiet bin is 2.5 % of it, and no
  episode: alerting rules ask for several errors for the same reason); only a 1 h bin expecting
  fewer than 20 requests asks for fewer, ``ceil(3 × expected / 20)`` and never below 1
  (:func:`breach_min_requests`: 5 an hour → 1). So at 1.6 requests a minute three late requests
  within 12.5 minutes are an episode (before, no 10 s bin could ever hold three). Consecutive
  breaching bins form one episode. Its **start** is its first bin's start, its **end** its last
  bin's end; its **onset** is the arrival of its first attributably violating request (request
  fidelity) or the start of the first fluid bin with a violation in its first bin.
* **Need of an episode.** The replicas it showed necessary: one more than were ready at its onset
  (it breached with those), or as many as were ready at its end if more (the fleet that ended it).
* **Misjudged scale-down.** A decision that lowers the replica target from a to b at time t and
  either (short) is followed within ``window_s`` (cold start + 60 s = 120 s by default: the time
  to notice and undo it) by the start of a breach episode or by a forced scale-up that undoes it
  (the target returns to ≥ a); or (long) left the fleet below the need of an episode whose onset
  comes within the memory horizon after it (``memory_s``, default :func:`memory_horizon_s` =
  the Ebb policy's comeback memory, 60 horizons × (cold start + 1 s decision period + 0.1 s fine
  sample) = 3,666 s ≈ 1 h at the default 60 s cold start): b < need, and fewer than a replicas
  were ready at that onset (the capacity it removed was still missing). A scale-down at 12:00
  from 10 to 4 replicas followed at 12:40 by a breach with 4 ready that ended with 9 is misjudged;
  one whose fleet was back at 10 when the breach came is not. The design note's "misjudgement
  rate" is misjudged / scale-downs.
* **SLA-violation delay.** For each episode, the time from its onset to the policy's first
  scale-up request at or after it. A scale-up requested less than a cold start before the onset
  is capacity already on its way when the breach began: the policy reacted first, delay 0. A
  policy that does not react within ``REACT_CAP_S`` = 600 s is charged 600 s.
  ``sla_violation_delay_ms`` is the median over episodes (NaN without any).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ebb.decide.profiles import EbbProfile
from ebb.sim.fleet import FleetLog

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

BREACH_BIN_S = 10.0
"""Shortest breach bin (s): the bin of every trace at 2 requests a second or more."""
MAX_BREACH_BIN_S = 3600.0
"""Longest breach bin (s): a breach is judged within an hour however sparse the trace."""
BREACH_EXPECTED_REQUESTS = 20.0
"""Requests a breach bin holds at the trace's mean rate (unless clamped)."""
BREACH_FRACTION = 0.01
BREACH_MIN_REQUESTS = 3.0
REACT_CAP_S = 600.0
DECISION_PERIOD_S = 1.0
"""The simulated Ebb policy's decision period (s), one term of its comeback horizon."""
FINE_SAMPLE_S = 0.1
"""The simulated fine (100 ms) sample, the other term of the comeback horizon besides the cold start."""


def memory_horizon_s(cold_start_s: float, horizons: float = EbbProfile.memory_horizons) -> float:
    """The Ebb policy's comeback memory (s): ``horizons`` (60, the balanced profile's) × its horizon
    ``cold start + 1 s + 0.1 s`` — 3,666 s at a 60 s cold start."""
    return float(horizons) * (float(cold_start_s) + DECISION_PERIOD_S + FINE_SAMPLE_S)


def breach_bin_s(requests: float, span_s: float) -> float:
    """Breach bin (s) holding ``BREACH_EXPECTED_REQUESTS`` at the mean rate ``requests / span_s``,
    clamped to [10 s, 1 h]; 10 s for an empty or instantaneous trace."""
    if not (requests > 0 and span_s > 0):
        return BREACH_BIN_S
    return float(min(MAX_BREACH_BIN_S, max(BREACH_BIN_S, BREACH_EXPECTED_REQUESTS * span_s / requests)))


def breach_min_requests(bin_s: float, requests: float, span_s: float) -> float:
    """Attributable violations a bin needs to breach: 3, or ``ceil(3 × expected / 20)`` (≥ 1) when
    even a ``bin_s`` bin expects fewer than 20 requests at the mean rate."""
    expected = requests * bin_s / span_s if span_s > 0 else BREACH_EXPECTED_REQUESTS
    if expected >= BREACH_EXPECTED_REQUESTS:
        return BREACH_MIN_REQUESTS
    return float(max(1, math.ceil(BREACH_MIN_REQUESTS * expected / BREACH_EXPECTED_REQUESTS - 1e-9)))


@dataclass(frozen=True)
class Episodes:
    """A run's SLO breach episodes (see the module docstring), times in seconds on the run's clock."""

    bin_s: float
    """Breach bin width (s) for this trace's rate."""
    min_requests: float
    """Attributable violations a bin needs to breach."""
    starts_s: FloatArray
    ends_s: FloatArray
    onsets_s: FloatArray


def find_episodes(t_s: FloatArray, arrived: FloatArray, violated: FloatArray, duration_s: float,
                  span_s: float) -> Episodes:
    """Episodes of a run: ``t_s`` arrival (or fluid-bin start) times, ``arrived`` the judged
    arrivals at each, ``violated`` the attributable violations at each; ``duration_s`` the run's
    span (bins to count), ``span_s`` the judged span of the trace (its mean rate's denominator)."""
    requests = float(np.sum(arrived))
    bin_s = breach_bin_s(requests, span_s)
    need = breach_min_requests(bin_s, requests, span_s)
    bad = breached(bin_counts(t_s, arrived, duration_s, bin_s), bin_counts(t_s, violated, duration_s, bin_s), need)
    first, last = _runs(bad)
    return Episodes(bin_s, need, first.astype(np.float64) * bin_s, (last + 1).astype(np.float64) * bin_s,
                    episode_onsets(first, t_s, violated, bin_s))


def breached(arrivals: FloatArray, violations: FloatArray,
             min_requests: float = BREACH_MIN_REQUESTS) -> npt.NDArray[np.bool_]:
    """Whether each bin breaches: at least ``min_requests`` and 1 % of its arrivals violate."""
    return (violations >= min_requests) & (violations >= BREACH_FRACTION * np.maximum(arrivals, 1e-12))


def _runs(bad: npt.NDArray[np.bool_]) -> tuple[IntArray, IntArray]:
    """(first, last) index of each run of consecutive True."""
    prev = np.concatenate([[False], bad[:-1]])
    nxt = np.concatenate([bad[1:], [False]])
    return (np.flatnonzero(bad & ~prev).astype(np.int64), np.flatnonzero(bad & ~nxt).astype(np.int64))


def breach_starts(arrivals: FloatArray, violations: FloatArray, bin_s: float = BREACH_BIN_S,
                  min_requests: float = BREACH_MIN_REQUESTS) -> FloatArray:
    """Episode start times (s) from per-bin arrival and violation counts."""
    return breach_bins(arrivals, violations, min_requests).astype(np.float64) * bin_s


def breach_bins(arrivals: FloatArray, violations: FloatArray,
                min_requests: float = BREACH_MIN_REQUESTS) -> IntArray:
    """Index of each episode's first bin."""
    return _runs(breached(arrivals, violations, min_requests))[0]


def episode_onsets(first_bins: IntArray, t_s: FloatArray, violated: FloatArray,
                   bin_s: float = BREACH_BIN_S) -> FloatArray:
    """Each episode's onset: the earliest time in ``t_s`` with ``violated > 0`` inside its first
    bin (``t_s`` arrival or fluid-bin start times, in any order)."""
    hit = violated > 0
    tv = np.sort(t_s[hit])
    lo = first_bins.astype(np.float64) * bin_s
    k = np.searchsorted(tv, lo, side="left")
    found = k < len(tv)
    onset = np.where(found, tv[np.minimum(k, max(len(tv) - 1, 0))] if len(tv) else lo, lo)
    return np.where(found & (onset < lo + bin_s), onset, lo)


def bin_counts(t_s: FloatArray, weights: FloatArray | None, duration_s: float,
               bin_s: float = BREACH_BIN_S) -> FloatArray:
    """Counts per ``bin_s`` bin (weighted)."""
    n = int(np.ceil(max(duration_s, bin_s) / bin_s)) + 1
    idx = np.minimum((t_s / bin_s).astype(np.int64), n - 1)
    return np.bincount(idx, weights=weights, minlength=n).astype(np.float64)


@dataclass(frozen=True)
class LaterNeeds:
    """What the long misjudgement rule reads of a run's episodes (onsets sorted, as found)."""

    onsets_s: FloatArray
    needs: IntArray
    """Each episode's need (:func:`episode_needs`)."""
    ready_at_onsets: IntArray
    """Replicas ready at each onset."""
    memory_s: float
    """How long after a scale-down an episode still judges it (s; :func:`memory_horizon_s`)."""

    @classmethod
    def of(cls, episodes: Episodes, ready_at: Callable[[FloatArray], IntArray], memory_s: float) -> LaterNeeds:
        """The episodes' needs from the fleet's ready count at any times (``FleetLog.ready_at``)."""
        at_onset = ready_at(episodes.onsets_s)
        return cls(episodes.onsets_s, episode_needs(at_onset, ready_at(episodes.ends_s)), at_onset, memory_s)

    def left_short(self, t_s: float, before: int, after: int) -> bool:
        """Whether a scale-down at ``t_s`` from ``before`` to ``after`` replicas left the target below
        the need of an episode with its onset in ``(t_s, t_s + memory_s]`` while fewer than ``before``
        replicas were ready at that onset."""
        lo = int(np.searchsorted(self.onsets_s, t_s, side="right"))
        hi = int(np.searchsorted(self.onsets_s, t_s + self.memory_s, side="right"))
        return bool(np.any((after < self.needs[lo:hi]) & (self.ready_at_onsets[lo:hi] < before)))


def episode_needs(ready_at_onset: npt.ArrayLike, ready_at_end: npt.ArrayLike) -> IntArray:
    """Each episode's need (replicas): ``max(ready at onset + 1, ready at end)``."""
    onset = np.asarray(ready_at_onset, dtype=np.int64)
    return np.asarray(np.maximum(onset + 1, np.asarray(ready_at_end, dtype=np.int64)), dtype=np.int64)


def misjudged_scale_downs(decisions: Sequence[tuple[float, int, int]], starts: FloatArray,
                          window_s: float, later: LaterNeeds | None = None) -> int:
    """Scale-downs followed within ``window_s`` by a breach start or a scale-up that undoes them
    (the short rule), or, given ``later``, that left the fleet below the need of an episode within
    the memory horizon (the long rule; see the module docstring)."""
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
        if hit_breach or undone or (later is not None and later.left_short(t, a, b)):
            count += 1
    return count


@dataclass(frozen=True)
class Judgement:
    """A run's judgement columns (the scorecard's ``misjudged_scale_downs``, ``sla_violation_delay_ms``,
    ``breach_episodes``) and the breach bin they were found with."""

    misjudged_scale_downs: int
    sla_violation_delay_ms: float
    breach_episodes: int
    breach_bin_s: float


def judge(t_s: FloatArray, arrived: FloatArray, violated: FloatArray, fleet: FleetLog, *, duration_s: float,
          span_s: float, cold_start_s: float, from_s: float = 0.0, memory_s: float | None = None) -> Judgement:
    """Both fidelities' judgement of one run (the module docstring's definitions): episodes from
    ``t_s``/``arrived``/``violated`` (:func:`find_episodes`), scale-downs decided at or after
    ``from_s`` (a warm-up) judged by the short rule (cold start + 60 s) and the long one
    (``memory_s``, default :func:`memory_horizon_s`), the delay over every decision."""
    ep = find_episodes(t_s, arrived, violated, duration_s, span_s)
    memory = memory_horizon_s(cold_start_s) if memory_s is None else memory_s
    later = LaterNeeds.of(ep, fleet.ready_at, memory)
    misjudged = misjudged_scale_downs(fleet.decisions_from(from_s), ep.starts_s, cold_start_s + 60.0, later)
    return Judgement(misjudged, violation_delay_ms(fleet.decisions, ep.onsets_s, cold_start_s),
                     int(len(ep.starts_s)), ep.bin_s)


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
