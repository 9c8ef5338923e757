"""Bursts that come back: a compact memory of past bursts, and the capacity to hold ahead of the next.

The comeback bound remembers rises for its memory (an hour by default); a burst that recurs every
80 minutes has been forgotten, and the fleet scaled down, by the time it is back. :class:`BurstMemory`
keeps what a recurrence needs for days at the cost of a few numbers a burst — its onset and its peak
need — not the raw samples.

**A burst** is a run of reconciles whose need is at least ``ratio`` (2) times the mean need over the
comeback memory and at least ``min_rise_replicas`` (2) above it, and outgrew the ready fleet — or
came while a recurrence held capacity for it (the policy decides which it feeds,
:meth:`~ebb.decide.ebb_state.EbbState.close_cycle`): a rise the fleet absorbs is the comeback
bound's (on the ServeGen day, remembering every doubling of the need held 25 % more GPU-hours for no
violation it prevented). Runs less than ``merge_s`` (two horizons) apart are one burst. Its record is ``(onset, peak need)``; the newest ``max_bursts`` (64) are
kept, none older than ``keep_s`` (two days).

**A recurrence** is two bursts or more, the last one less than twice the longest gap ago, whose
gaps vary by at most ``spread`` (4×) from the shortest to the longest: bursts 20–80 minutes apart
recur, ServeGen's day (rises past twice the mean 71 minutes, 2.5 hours and 11 hours apart) does not
— holding for those cost it 9 % more GPU-hours. Gaps need not be regular: the next burst is not expected before the shortest gap seen since the last onset, and
until the comeback memory's end the comeback bound still holds the last burst's rise, so capacity is
held from ``last onset + max(shortest gap, memory) − lead`` (``lead`` = 1.5 horizons: capacity asked
then is ready a half horizon early) until the next burst starts, and through it (its onset, the
longest of the last bursts and a horizon). What is held is the largest peak need of the last 8 bursts. Between a burst and that time the fleet may scale down as usual. A periodic
burst is held for a horizon and a half per period; bursts 20–240 minutes apart, from 20 minutes after
each one (:class:`Recurrence` says which, ``ebb explain`` names it).

Pure; the policy feeds it in :meth:`~ebb.decide.ebb_state.EbbState.close_cycle` (every reconcile that
is not a proven hold — a block of proven holds never holds a reconcile at or past the burst threshold:
:meth:`over`).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

__all__ = ["BurstMemory", "Recurrence"]

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True)
class Recurrence:
    """What the burst memory expects at one time (:meth:`BurstMemory.expect`)."""

    bursts: int
    """Bursts remembered (within the keep)."""
    shortest_gap_s: float
    """Shortest gap between two onsets (s)."""
    longest_gap_s: float
    """Longest gap between two onsets (s)."""
    last_onset_s: float
    """The newest burst's onset (s)."""
    hold_from_s: float
    """When capacity for the next burst is held from (s): last onset + the shortest gap (at least the
    comeback memory, which holds the last burst until then) − lead."""
    peak_need_replicas: float
    """The largest peak need of the last bursts (replica units): what is held."""
    hold_until_s: float
    """The newest burst is held through: its onset, the longest burst seen and a horizon (s)."""

    def holding(self, t_s: float) -> bool:
        """Whether capacity is held at ``t_s``: through the newest burst, and from when the next may come."""
        return t_s >= self.hold_from_s or t_s < self.hold_until_s

    def describe(self, t_s: float) -> str:
        """One line for ``ebb explain``."""
        return (f"recurrence: {self.bursts} bursts to {self.peak_need_replicas:.1f} replicas, "
                f"{self.shortest_gap_s / 60:.0f}–{self.longest_gap_s / 60:.0f} min apart; the next is not "
                f"expected before {self.hold_from_s - self.last_onset_s:.0f} s after the last "
                f"({t_s - self.last_onset_s:.0f} s ago): held from then")


class BurstMemory:
    """Onsets and peaks of past bursts (see the module docstring)."""

    def __init__(self, horizon_s: float, memory_s: float, *, ratio: float = 2.0, min_rise_replicas: float = 2.0,
                 keep_s: float = 2 * 86_400.0, max_bursts: int = 64, recent: int = 8,
                 spread: float = 4.0) -> None:  # noqa: D107
        if not (horizon_s > 0 and memory_s > 0 and ratio >= 1 and min_rise_replicas >= 0 and keep_s > 0 and max_bursts >= 2):
            raise ValueError("horizon_s > 0, ratio >= 1, min_rise_replicas >= 0, keep_s > 0, max_bursts >= 2")
        self.horizon_s = float(horizon_s)
        self.memory_s = float(memory_s)
        self.ratio = float(ratio)
        self.min_rise_replicas = float(min_rise_replicas)
        self.merge_s = 2.0 * self.horizon_s
        self.lead_s = 1.5 * self.horizon_s
        self.keep_s = float(keep_s)
        self.recent = int(recent)
        self.spread = float(spread)
        self._bursts: deque[list[float]] = deque(maxlen=max_bursts)  # [onset, peak, last over], oldest first
        self._last_over_s = -math.inf

    def __len__(self) -> int:
        """Bursts kept."""
        return len(self._bursts)

    def over(self, need_replicas: FloatArray, base_replicas: FloatArray) -> BoolArray:
        """Whether each need is at the burst threshold over its base (the memory's mean need)."""
        return np.asarray((need_replicas >= self.ratio * base_replicas) &
                          (need_replicas >= base_replicas + self.min_rise_replicas), dtype=np.bool_)

    def observe(self, t_s: float, need_replicas: float, base_replicas: float) -> None:
        """One reconcile's need (times increasing) against its base: a new burst, or a higher peak of
        the current one."""
        if not (need_replicas >= self.ratio * base_replicas and need_replicas >= base_replicas + self.min_rise_replicas):
            return
        if self._bursts and t_s - self._last_over_s <= self.merge_s:
            last = self._bursts[-1]
            last[1] = max(last[1], need_replicas)
            last[2] = t_s
        else:
            self._bursts.append([t_s, need_replicas, t_s])
        self._last_over_s = t_s

    def expect(self, t_s: float) -> Recurrence | None:
        """The recurrence at ``t_s``, or None: fewer than two bursts within the keep, or the last one
        more than twice the longest gap ago (the bursts stopped)."""
        b = self._bursts
        while b and b[0][0] < t_s - self.keep_s:
            b.popleft()
        if len(b) < 2:
            return None
        onsets = [x[0] for x in b]
        gaps = [y - x for x, y in zip(onsets[:-1], onsets[1:], strict=True)][-2 * self.recent:]
        shortest, longest = min(gaps), max(gaps)
        if t_s - onsets[-1] > 2.0 * longest or longest > self.spread * shortest:
            return None
        recent = list(b)[-self.recent:]
        peak = max(x[1] for x in recent)
        longest_burst = max(x[2] - x[0] for x in recent)
        wait = max(shortest, self.memory_s)  # within the memory the comeback bound still holds the last burst
        return Recurrence(len(b), shortest, longest, onsets[-1], onsets[-1] + wait - self.lead_s, peak,
                          onsets[-1] + longest_burst + self.horizon_s)

    def hold_from(self, t_s: float) -> float:
        """When a recurrence would next hold capacity (+inf without one; ``t_s`` while it holds): a block
        of proven holds ends before it."""
        r = self.expect(t_s)
        if r is None:
            return math.inf
        return t_s if r.holding(t_s) else r.hold_from_s
