"""Replica lifecycles of one run and what they cost: billed replica-seconds, replicas per bin.

A replica is billed from the instant it is requested (the GPU is held through the cold start)
until it stops (after its drain). Both fidelities produce a :class:`FleetLog` through the shared
lifecycle (:class:`ebb.sim.lifecycle.Lifecycles`, which refuses moves outside its transition table).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ebb.config.tiers import SleepTier
from ebb.model.decision import Decision
from ebb.model.ids import ReplicaId

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class ReplicaLog:
    """One replica's lifecycle (seconds on the run's clock; NaN = never reached)."""

    replica: ReplicaId
    requested_s: float
    ready_s: float
    stopped_s: float


@dataclass(frozen=True)
class FleetLog:
    """Every replica of a run plus the count of scale decisions."""

    replicas: tuple[ReplicaLog, ...]
    scale_ups: int
    scale_downs: int
    end_s: float
    """End of the billed horizon (last arrival or last completion, whichever is later)."""
    decisions: tuple[tuple[float, int, int], ...] = ()
    """Every change of the replica target: (time s, from, to), in time order."""
    noteworthy: tuple[Decision, ...] = ()
    """The policy's decisions worth recording (changes, vetoes, gate steps; :attr:`Decision.noteworthy`)
    in time order, the initial fleet at t = 0 excluded."""
    asleep: tuple[tuple[float, float], ...] = ()
    """Sleep intervals (start s, end s) of the asleep tier (:mod:`ebb.sim.sleepers`); none without one."""
    wakeups: int = 0
    """Sleeping replicas woken by scale-ups (failed wakes included)."""
    failed_wakes: int = 0
    """Of :attr:`wakeups`, those that failed (the tier's ``fail``) and fell back to a cold start."""

    def asleep_seconds(self, from_s: float = 0.0, cap_s: float | None = None) -> float:
        """Put-away replica-seconds over [from_s, end_s]; with ``cap_s``, each interval's first
        ``cap_s`` seconds only (a snapshot tier's save, when its GPU is still held)."""
        if not self.asleep:
            return 0.0
        a = np.asarray(self.asleep, dtype=np.float64)
        ends = a[:, 1] if cap_s is None else np.minimum(a[:, 1], a[:, 0] + cap_s)
        start, stop = np.clip(a[:, 0], from_s, self.end_s), np.clip(ends, from_s, self.end_s)
        return float(np.sum(stop - start))

    def replica_seconds(self, from_s: float = 0.0) -> float:
        """Billed replica-seconds over [from_s, end_s] (the whole run by default; ``from_s`` > 0 is a
        warm-up: a replica requested before it is billed from it on)."""
        req, _, stop = self._arrays()
        if from_s > 0:
            req, stop = np.maximum(req, from_s), np.maximum(stop, from_s)
        return float(np.sum(np.clip(stop, None, self.end_s) - np.clip(req, None, self.end_s)))

    def _arrays(self) -> tuple[FloatArray, FloatArray, FloatArray]:
        req = np.array([r.requested_s for r in self.replicas], dtype=np.float64)
        ready = np.array([r.ready_s for r in self.replicas], dtype=np.float64)
        stop = np.array([r.stopped_s for r in self.replicas], dtype=np.float64)
        stop = np.where(np.isnan(stop), self.end_s, stop)
        return req, ready, stop

    def per_bin(self, edges_s: FloatArray) -> tuple[FloatArray, FloatArray]:
        """Mean billed and mean ready replicas in each bin ``[edges[k], edges[k+1])``."""
        req, ready, stop = self._arrays()
        billed = _interval_mean(req, stop, edges_s)
        ok = ~np.isnan(ready) & (ready < stop)
        serving = _interval_mean(ready[ok], stop[ok], edges_s)
        return billed, serving

    def peak_replicas(self, from_s: float = 0.0) -> int:
        """Most replicas billed at once at or after ``from_s`` (the whole run by default)."""
        req, _, stop = self._arrays()
        if from_s > 0:
            alive = stop > from_s  # a replica stopped by from_s holds nothing from it on
            req, stop = np.maximum(req[alive], from_s), stop[alive]
        if len(req) == 0:
            return 0
        times = np.concatenate([req, stop])
        delta = np.concatenate([np.ones_like(req), -np.ones_like(stop)])
        order = np.lexsort((delta, times))  # stops before starts at equal times
        return int(np.max(np.cumsum(delta[order])))

    def scale_counts(self, from_s: float = 0.0) -> tuple[int, int]:
        """(scale-ups, scale-downs) decided at or after ``from_s`` (the whole run's counts by default)."""
        if from_s <= 0:
            return self.scale_ups, self.scale_downs
        later = [(a, b) for t, a, b in self.decisions if t >= from_s]
        return sum(b > a for a, b in later), sum(b < a for a, b in later)

    def decisions_from(self, from_s: float) -> tuple[tuple[float, int, int], ...]:
        """The target changes decided at or after ``from_s``, in time order."""
        return self.decisions if from_s <= 0 else tuple(d for d in self.decisions if d[0] >= from_s)

    def ready_at(self, t_s: FloatArray) -> npt.NDArray[np.int64]:
        """Replicas ready at each time in ``t_s``: ``ready_s <= t < stopped_s`` (a drain included, as
        :meth:`per_bin` counts them)."""
        _, ready, stop = self._arrays()
        ok = ~np.isnan(ready) & (ready < stop)
        t = np.asarray(t_s, dtype=np.float64)
        up = np.searchsorted(np.sort(ready[ok]), t, side="right")
        down = np.searchsorted(np.sort(stop[ok]), t, side="right")
        return np.asarray(up - down, dtype=np.int64)


ZONES = ("zone-a", "zone-b", "zone-c")


def zone_of(replica: int) -> str:
    """The simulator places replica i in zone i mod 3 (a spread scheduler's steady state)."""
    return ZONES[replica % len(ZONES)]


def choose_victims(starting: list[int], ready: list[int], k: int,
                   named: list[int] | None = None) -> tuple[list[int], list[int]]:
    """Scale-in victims: the policy's ``named`` replicas first (those still starting or ready, in
    the given order), then the ReplicaSet's order — cancel cold-starting replicas (newest first),
    then drain the newest ready ones. Ids grow with creation time. Returns (cancel, drain)."""
    st, rd = set(starting), set(ready)
    cancel: list[int] = []
    drain: list[int] = []
    for rid in named or ():
        if len(cancel) + len(drain) >= k:
            break
        if rid in st and rid not in cancel:
            cancel.append(rid)
        elif rid in rd and rid not in drain:
            drain.append(rid)
    for rid in sorted(starting, reverse=True):
        if len(cancel) + len(drain) >= k:
            break
        if rid not in cancel:
            cancel.append(rid)
    for rid in sorted(ready, reverse=True):
        if len(cancel) + len(drain) >= k:
            break
        if rid not in drain:
            drain.append(rid)
    return cancel, drain


def _interval_mean(start: FloatArray, stop: FloatArray, edges: FloatArray) -> FloatArray:
    """Time-average count of intervals [start, stop) covering each bin (exact, vectorised)."""
    width = np.diff(edges)
    if len(start) == 0:
        return np.zeros(len(width))
    # Coverage integral C(x) = Σ max(0, min(x, stop) − start); bin mean = ΔC / width.
    def cover(x: FloatArray) -> FloatArray:
        s = np.sort(start)
        e = np.sort(stop)
        cs, ce = np.concatenate([[0.0], np.cumsum(s)]), np.concatenate([[0.0], np.cumsum(e)])
        ks = np.searchsorted(s, x, side="right")
        ke = np.searchsorted(e, x, side="right")
        started = ks * x - cs[ks]
        ended = ke * x - ce[ke]
        return np.asarray(started - ended, dtype=np.float64)

    c = cover(edges.astype(np.float64))
    return np.asarray(np.diff(c) / width, dtype=np.float64)


def billed_sleep(fleet: FleetLog, tier: SleepTier | None, from_s: float = 0.0) -> tuple[float, float]:
    """(billed, released) put-away replica-seconds over [from_s, end_s]: asleep replicas hold their GPU
    (all billed); a snapshot's are billed for its save only, the rest released."""
    put_away = fleet.asleep_seconds(from_s)
    if tier is None or tier.holds_gpu:
        return put_away, 0.0
    billed = fleet.asleep_seconds(from_s, cap_s=tier.save_s)
    return billed, put_away - billed
