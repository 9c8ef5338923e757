"""L1 sizing signal: the replicas a workload needs so that queueing stays inside its TTFT slack.

A fleet of ``N`` replicas keeps every request's queueing delay within ``slack`` seconds iff, for
every window ``D``, the work arriving in ``D`` plus what already waits can be served within
``D + slack`` (the arrival-curve / service-curve bound of network calculus)::

    need(t) = max( max over D of (W(t − D, t) + backlog(t)) / (D + slack),
                   W(t − 32, t) / 32 )                                     [replica units]

``W`` is the fleet's served demand over the window (the agent's 100 ms samples of
``max(prefill busy share, running / max batch)``, summed over replicas, in replica-seconds) and
``backlog = queued × c``, ``c`` the replica-seconds one request costs (served work per completion
over the last ``cost_window_s``), at most ``D + slack`` per request: a request occupies one replica
at most, so a queued 100 s job needs one replica within the deadline, not 100 s of work squeezed into
it (one-request-per-replica services, issue #31). Short spikes are absorbed: a 100 ms sample at 20 replicas over a
1 s slack needs 20 × 0.1 / 1.1 ≈ 1.8 replicas; a 4 s burst at 26 needs 26 × 4 / 5 ≈ 21. ``D`` runs
over :data:`WINDOWS_S` (0.5 s … 32 s); past the longest window the bound tends to the sustained
demand, so that term enters as the longest window's mean with no slack: steady demand ``s`` needs
``s`` (not ``s × 32 / (32 + slack)``, which under a long-service SLO's 15 s slack read 11 busy
replicas with jobs queued as a need of 7.5 — issue #31).

A saturated fleet serves at most its ready replicas, so ``W`` alone cannot see past the fleet;
the backlog term is what says how far past it demand went.

Pure and vectorised: each :meth:`NeedTracker.ingest` costs O(samples × windows) numpy work on the
last 32 s of samples (≤ 320 at 100 ms), whatever the fleet size.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections import deque
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ebb.decide.running import running_sums

__all__ = ["WINDOWS_S", "CostPlan", "NeedReading", "NeedState", "NeedTracker", "SamplePlan"]

FloatArray = npt.NDArray[np.float64]

WINDOWS_S: tuple[float, ...] = (0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0)
"""Window lengths ``D`` (s) of the bound: from the 1 s L1 window's halves to half a minute (past
that, the mean is the need and the comeback bound's horizon takes over)."""

_MAX_DT_S = 1.0
"""A gap between two samples counts as at most this long (s): a missing stretch of data is no
evidence of demand, and the staleness veto covers it."""


@dataclass(frozen=True)
class NeedReading:
    """The need at the newest sample of an ingest, and what it was made of."""

    need_replicas: float
    """The bound above at the newest sample (replica units); 0 without samples."""
    peak_need_replicas: float
    """The largest need over the ingested samples (replica units)."""
    backlog_replicas_s: float
    """Queued work at the newest sample (replica-seconds)."""
    cost_replica_s: float
    """Replica-seconds per request used for the backlog (NaN before the first completion)."""
    rate_replicas: float = 0.0
    """Demand arriving, sustained over the last two samples (served work plus the queue's growth,
    per second: replica units) — what the fleet must serve for the queue to stop growing."""
    ahead_replicas: float = 0.0
    """The need ``lookahead_s`` from now if demand keeps arriving at ``rate_replicas`` meanwhile:
    ``max over D of (A(t − D, t) + rate × L) / (D + L + slack)`` (replica units)."""


@dataclass(frozen=True)
class NeedState:
    """A :class:`NeedTracker`'s state (:meth:`NeedTracker.snapshot`): kept samples, totals before
    them, the newest time, and the cost window's rows and sums."""

    t: list[float]
    cum: list[float]
    q: list[float]
    before: float
    q_before: float
    last_t: float
    cost_rows: deque[tuple[float, float, float]]
    cost_work: float
    cost_done: float
    cost: float


@dataclass(frozen=True)
class CostPlan:
    """The cost window after each sample of a :class:`SamplePlan` (:meth:`NeedTracker.plan`)."""

    work_sum: FloatArray
    """Served replica-seconds in the cost window after each sample."""
    done_sum: FloatArray
    """Completions in the cost window after each sample."""
    cost: FloatArray
    """Replica-seconds per request after each sample (NaN before the first completion)."""
    used: FloatArray
    """``cost`` as the need reads it (0.0 while unknown)."""
    gone: npt.NDArray[np.intp]
    """Cost rows aged out by each sample, counted from the window as the plan found it."""


@dataclass(frozen=True)
class SamplePlan:
    """Per sample, what :meth:`NeedTracker.ingest_sample` would read and leave (:meth:`NeedTracker.plan`)."""

    t: FloatArray
    cum: FloatArray
    """Cumulative served replica-seconds through each sample."""
    q: FloatArray
    """Queued requests (sanitised)."""
    work: FloatArray
    """Served replica-seconds of each sample."""
    done: FloatArray
    need: FloatArray
    """The need at each sample (replica units)."""
    ahead: FloatArray
    """The lookahead bound at each sample (:attr:`NeedReading.ahead_replicas`)."""
    rate: FloatArray
    """The sustained arrival rate at each sample (:attr:`NeedReading.rate_replicas`)."""
    costs: CostPlan

    @property
    def finite(self) -> bool:
        """Whether every need and lookahead bound is a number (then they are the scalar path's)."""
        return bool(np.isfinite(self.need).all() and np.isfinite(self.ahead).all())


class NeedTracker:
    """Keeps the last ``max(WINDOWS_S)`` seconds of served demand and turns samples into needs."""

    def __init__(self, slack_s: float, *, cost_window_s: float = 60.0, lookahead_s: float = 0.5) -> None:  # noqa: D107
        if not (slack_s > 0 and lookahead_s >= 0):
            raise ValueError(f"slack_s must be > 0 and lookahead_s >= 0, got {slack_s!r}, {lookahead_s!r}")
        self.slack_s = float(slack_s)
        self.lookahead_s = float(lookahead_s)
        self.cost_window_s = float(cost_window_s)
        self._windows = np.asarray(WINDOWS_S, dtype=np.float64)
        # Python lists, not arrays: a one-sample ingest (the fluid simulator's bins, the fast path's
        # samples) then costs a few bisections instead of ~40 numpy calls on length-1 arrays.
        self._t: list[float] = []
        self._cum: list[float] = []  # cumulative served replica-seconds up to and including each kept sample
        self._q: list[float] = []  # queued requests at each kept sample
        self._before = 0.0  # cumulative served replica-seconds before the first kept sample
        self._q_before = 0.0  # queued requests before the first kept sample
        self._last_t = -np.inf
        self._cost_rows: deque[tuple[float, float, float]] = deque()  # (t, served work, completions) per ingest
        self._cost_work = 0.0
        self._cost_done = 0.0
        self._cost = float("nan")

    @property
    def last_t(self) -> float:
        """The newest sample's time (s); -inf before the first. Samples not newer are dropped."""
        return self._last_t

    @property
    def cost_replica_s(self) -> float:
        """Replica-seconds per request (NaN before the first completion)."""
        return self._cost

    def ingest(self, t_s: FloatArray, served: FloatArray, queued: FloatArray,
               done_weight: FloatArray | None = None) -> tuple[FloatArray, NeedReading]:
        """Add samples (times in order; ones not newer than every earlier sample are dropped) and
        return the need at each new sample, with a summary of the newest."""
        done = 0.0 if done_weight is None else _nansum(done_weight)
        if len(t_s) == 1 and len(served) == 1 and len(queued) == 1 and float(t_s[0]) > self._last_t:
            # One new sample (the fluid engine's 1 s bins): straight to the scalar path, no masks.
            return self._ingest_one(float(t_s[0]), float(served[0]), float(queued[0]), done)
        t = np.asarray(t_s, dtype=np.float64)
        keep = t > self._last_t
        t = t[keep]
        s = np.asarray(served, dtype=np.float64)[keep]
        q = np.asarray(queued, dtype=np.float64)[keep]
        if len(t) == 0:
            return np.zeros(0), NeedReading(0.0, 0.0, 0.0, self._cost)
        if len(t) == 1:
            return self._ingest_one(float(t[0]), float(s[0]), float(q[0]), done)
        s = np.where(np.isfinite(s) & (s > 0), s, 0.0)
        q = np.where(np.isfinite(q) & (q > 0), q, 0.0)
        first_prev = self._last_t if np.isfinite(self._last_t) else t[0] - min(0.1, _MAX_DT_S)
        dt = np.clip(np.diff(t, prepend=first_prev), 0.0, _MAX_DT_S)
        work = s * dt
        self._update_cost(float(t[-1]), float(work.sum()), done)
        total = self._cum[-1] if self._cum else self._before
        cum_new = total + np.cumsum(work)
        cost = self._cost if np.isfinite(self._cost) else 0.0
        all_t, all_cum, all_q, pos, need = self._needs(t, cum_new, q, np.full(len(t), cost))
        rate = self._rate(all_t[-3:].tolist(), all_cum[-3:].tolist(), all_q[-3:].tolist(), float(t[-1]), cost)
        look = self.lookahead_s  # the bound at t + L, the arrivals of (t, t + L] at today's rate
        ahead = float(((pos[-1] + rate * look) / (self._windows + look + self.slack_s)).max())
        self._keep(all_t.tolist(), all_cum.tolist(), all_q.tolist(), float(t[-1]))
        return need, NeedReading(float(need[-1]), float(need.max()), float(q[-1]) * cost, self._cost, rate, ahead)

    def _ingest_one(self, t: float, s: float, q: float, done: float) -> tuple[FloatArray, NeedReading]:
        """:meth:`ingest` of one sample newer than every earlier one (:meth:`ingest_sample`, as arrays)."""
        reading = self.ingest_sample(t, s, q, done)
        return np.array([reading.need_replicas]), reading

    def ingest_sample(self, t: float, s: float, q: float, done: float) -> NeedReading:
        """:meth:`ingest` of one sample at ``t``, newer than every earlier one (:attr:`last_t`; the
        caller checks), with ``done`` completions, in Python floats: the same operations in the same
        order as the vectorised path (identical IEEE results); the reading (its need is the sample's)."""
        s = s if math.isfinite(s) and s > 0 else 0.0
        q = q if math.isfinite(q) and q > 0 else 0.0
        first_prev = self._last_t if math.isfinite(self._last_t) else t - min(0.1, _MAX_DT_S)
        dt = min(max(t - first_prev, 0.0), _MAX_DT_S)
        work = s * dt
        self._update_cost(t, work, done)
        cum_new = (self._cum[-1] if self._cum else self._before) + work
        all_t, all_cum, all_q = self._t, self._cum, self._q
        all_t.append(t)
        all_cum.append(cum_new)
        all_q.append(q)
        cost = self._cost if math.isfinite(self._cost) else 0.0
        slack, look, before, q_before = self.slack_s, self.lookahead_s, self._before, self._q_before
        rate = self._rate(all_t[-3:], all_cum[-3:], all_q[-3:], t, cost)
        need = ahead = -math.inf
        served = grown = 0.0
        rise, right = rate * look, bisect.bisect_right
        # max(a, b) written as "b if b > a else a": the same operand chosen (NaN and signed zeros too),
        # without a call per window (this runs at every 100 ms sample).
        for w in WINDOWS_S:
            i = right(all_t, t - w) - 1
            served = cum_new - (all_cum[i] if i >= 0 else before)
            grown = q - (all_q[i] if i >= 0 else q_before)
            cap = w + slack
            pos = served + grown * (cap if cap < cost else cost)  # min(cost, w + slack)
            pos = pos if pos > 0.0 else 0.0
            v = pos / cap
            need = v if v > need else need
            v = (pos + rise) / (w + look + slack)
            ahead = v if v > ahead else ahead
        # The longest window's sustained demand, no slack: steady demand needs itself (module docstring).
        w_long = WINDOWS_S[-1]
        long = served + grown * (w_long if w_long < cost else cost)
        v = (long if long > 0.0 else 0.0) / w_long
        need = v if v > need else need
        self._keep(all_t, all_cum, all_q, t)
        return NeedReading(need, need, q * cost, self._cost, rate, ahead)

    def ingest_seconds(self, t_s: FloatArray, served: FloatArray, queued: FloatArray,
                       done: FloatArray) -> tuple[FloatArray, NeedReading]:
        """``len(t_s)`` one-sample :meth:`ingest` calls at once — sample ``k`` with ``done[k]``
        completions — for times increasing past every earlier sample: the same needs (one per
        sample) and the last call's reading, bit for bit, and the same state afterwards.

        The per-sample steps are the scalar path's, vectorised: sanitised values, gaps, the
        cumulative served work as one left-to-right ``cumsum`` from the running total, the window
        edges by ``searchsorted`` over the kept samples and the new ones (a kept sample the scalar
        path would have trimmed by then lies before every edge it is asked for, where it reads
        the same running total), ``arrived`` with each sample's own cost per request. The cost's
        running sums are one ``cumsum`` over the additions and removals in the scalar path's order."""
        t, q, work, d, costs, cum_new, (all_t, all_cum, all_q, pos, need) = self._planned(t_s, served, queued, done)
        cost, t_last = float(costs.used[-1]), float(t[-1])
        rate = self._rate(all_t[-3:].tolist(), all_cum[-3:].tolist(), all_q[-3:].tolist(), t_last, cost)
        look, slack = self.lookahead_s, self.slack_s
        ahead = -math.inf
        for w, p in zip(WINDOWS_S, pos[-1].tolist(), strict=True):
            ahead = max(ahead, (p + rate * look) / (w + look + slack))
        self._take_costs(t, work, d, costs, 0, len(t))
        self._keep(all_t.tolist(), all_cum.tolist(), all_q.tolist(), t_last)
        last = float(need[-1])
        return need, NeedReading(last, last, float(q[-1]) * cost, self._cost, rate, ahead)

    def plan(self, t_s: FloatArray, served: FloatArray, queued: FloatArray, done: FloatArray) -> SamplePlan:
        """What ``len(t_s)`` :meth:`ingest_sample` calls would read and leave — sample ``k`` with
        ``done[k]`` completions, times increasing past :attr:`last_t` — computed at once, the state
        untouched: each call's need, lookahead bound, rate and cost, bit for bit (NaN where the
        scalar path's ``max`` would skip one: check :attr:`SamplePlan.finite`). :meth:`take` then
        moves the state through any prefix, as those calls would."""
        t, q, work, d, costs, cum_new, (all_t, all_cum, all_q, pos, need) = self._planned(t_s, served, queued, done)
        rate, ahead = self._aheads(all_t, all_cum, all_q, pos, costs.used)
        return SamplePlan(t, cum_new, q, work, d, need, ahead, rate, costs)

    def take(self, plan: SamplePlan, start: int, stop: int) -> NeedReading:
        """The state after :meth:`ingest_sample` of ``plan``'s samples ``start:stop`` (the tracker
        holds those before ``start`` already: taken from the same plan, nothing else since), and
        the last one's reading."""
        k = stop - 1
        t = plan.t
        self._take_costs(t, plan.work, plan.done, plan.costs, start, stop)
        self._t.extend(t[start:stop].tolist())
        self._cum.extend(plan.cum[start:stop].tolist())
        self._q.extend(plan.q[start:stop].tolist())
        self._keep(self._t, self._cum, self._q, float(t[k]))
        need = float(plan.need[k])
        return NeedReading(need, need, float(plan.q[k]) * float(plan.costs.used[k]), self._cost,
                           float(plan.rate[k]), float(plan.ahead[k]))

    def _planned(self, t_s: FloatArray, served: FloatArray, queued: FloatArray, done: FloatArray
                 ) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray, CostPlan, FloatArray,
                            tuple[FloatArray, FloatArray, FloatArray, FloatArray, FloatArray]]:
        """The steps :meth:`ingest_seconds` and :meth:`plan` share, the state untouched: times,
        sanitised queue, served work, completions, the cost window after each sample, cumulative
        work, and :meth:`_needs`' arrays."""
        t, _, q, work = self._samples(t_s, served, queued)
        d = np.asarray(done, dtype=np.float64)
        costs = self._cost_plan(t, work, d)
        cum_new = np.cumsum(np.concatenate(([self._cum[-1] if self._cum else self._before], work)))[1:]
        return t, q, work, d, costs, cum_new, self._needs(t, cum_new, q, costs.used)

    def _samples(self, t_s: FloatArray, served: FloatArray, queued: FloatArray
                 ) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
        """Times, sanitised served demand and queue, and each sample's served work (its gap from
        the previous sample capped at :data:`_MAX_DT_S`), as the scalar path makes them."""
        t = np.asarray(t_s, dtype=np.float64)
        s = np.asarray(served, dtype=np.float64)
        q = np.asarray(queued, dtype=np.float64)
        s = np.where(np.isfinite(s) & (s > 0), s, 0.0)
        q = np.where(np.isfinite(q) & (q > 0), q, 0.0)
        first_prev = self._last_t if math.isfinite(self._last_t) else float(t[0]) - min(0.1, _MAX_DT_S)
        dt = np.minimum(np.maximum(t - np.concatenate(([first_prev], t[:-1])), 0.0), _MAX_DT_S)
        return t, s, q, s * dt

    def _needs(self, t: FloatArray, cum_new: FloatArray, q: FloatArray, cost: FloatArray
               ) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray, FloatArray]:
        """The kept samples with the new ones (times, cumulative work, queue), then per new sample and
        window ``D`` the arrived work ``A(t_k − D, t_k] = served + (queue now − queue then) × cost_k``
        clipped at 0 as ``max(0.0, x)`` clips it (0.0 unless x > 0, NaN too), and the need: its
        largest ``A / (D + slack)``."""
        all_t = np.concatenate((np.asarray(self._t, dtype=np.float64), t))
        all_cum = np.concatenate((np.asarray(self._cum, dtype=np.float64), cum_new))
        all_q = np.concatenate((np.asarray(self._q, dtype=np.float64), q))
        idx = np.searchsorted(all_t, t[:, None] - self._windows[None, :], side="right") - 1
        at_edge = np.where(idx >= 0, all_cum[np.maximum(idx, 0)], self._before)
        q_edge = np.where(idx >= 0, all_q[np.maximum(idx, 0)], self._q_before)
        # A queued request adds at most D + slack replica-seconds within the window's deadline: it
        # occupies one replica at most (a 100 s job is one replica for 100 s, not 100 replicas for 1 s).
        served = cum_new[:, None] - at_edge
        grown = q[:, None] - q_edge
        arrived = served + grown * np.minimum(cost[:, None], (self._windows + self.slack_s)[None, :])
        pos = np.where(arrived > 0.0, arrived, 0.0)
        need = (pos / (self._windows[None, :] + self.slack_s)).max(axis=1)
        # The longest window's sustained demand, no slack: steady demand needs itself (module docstring).
        w_long = self._windows[-1]
        long = served[:, -1] + grown[:, -1] * np.minimum(cost, w_long)
        sustained = np.where(long > 0.0, long, 0.0) / w_long
        return all_t, all_cum, all_q, pos, np.where(sustained > need, sustained, need)

    def snapshot(self) -> NeedState:
        """The tracker's state, for :meth:`restore` (copies of ~32 s of samples and a minute of costs)."""
        return NeedState(list(self._t), list(self._cum), list(self._q), self._before, self._q_before, self._last_t,
                         deque(self._cost_rows), self._cost_work, self._cost_done, self._cost)

    def restore(self, state: NeedState) -> None:
        """Back to ``state`` (taken over: snapshot again to restore twice)."""
        self._t, self._cum, self._q = state.t, state.cum, state.q
        self._before, self._q_before, self._last_t = state.before, state.q_before, state.last_t
        self._cost_rows, self._cost_work, self._cost_done, self._cost = (state.cost_rows, state.cost_work,
                                                                         state.cost_done, state.cost)

    def _keep(self, all_t: list[float], all_cum: list[float], all_q: list[float], last_t: float) -> None:
        """Keep the samples of the longest window (and a gap) before ``last_t``; the rest as totals."""
        self._last_t = last_t
        cut = bisect.bisect_left(all_t, last_t - WINDOWS_S[-1] - _MAX_DT_S)
        if cut > 0:
            self._before = all_cum[cut - 1]
            self._q_before = all_q[cut - 1]
            del all_t[:cut], all_cum[:cut], all_q[:cut]
        self._t, self._cum, self._q = all_t, all_cum, all_q

    def _rate(self, t3: list[float], cum3: list[float], q3: list[float], t: float, cost: float) -> float:
        """Arrived demand per second, sustained: the smaller of the rates over the last two sample
        intervals (0 over a shorter history); ``t3``, ``cum3``, ``q3`` are the last three samples.
        One interval alone is a clump — the Azure traces log dozens of requests in the same
        millisecond, which a fleet drains within its slack — two in a row are a trend (a burst's
        first 200 ms). A request queued within an interval of ``dt`` adds at most ``dt + slack`` of work, as
        it does to the need's window of that length: one 300 s job queued in 100 ms, at a 15 s slack, is
        151 replica-seconds a second for 100 ms — the lookahead's ``(D + L + slack)`` then reads it as
        about 5 replicas, not the 97 that 3,000 replica-seconds a second made of it."""
        if len(t3) < 3 or t - t3[0] > 2 * _MAX_DT_S:
            return 0.0
        dt0, dt1 = t3[1] - t3[0], t3[2] - t3[1]
        if not (dt0 > 0 and dt1 > 0):
            return 0.0
        r0 = ((cum3[1] - cum3[0]) + (q3[1] - q3[0]) * min(cost, dt0 + self.slack_s)) / dt0
        r1 = ((cum3[2] - cum3[1]) + (q3[2] - q3[1]) * min(cost, dt1 + self.slack_s)) / dt1
        return max(min(r0, r1), 0.0)

    def _aheads(self, all_t: FloatArray, all_cum: FloatArray, all_q: FloatArray, pos: FloatArray,
                costs: FloatArray) -> tuple[FloatArray, FloatArray]:
        """Per new sample (the last ``len(costs)`` of ``all_t``), :meth:`_rate` over its last three
        samples and the lookahead bound :meth:`ingest_sample` takes of it: the same float operations
        element-wise (Python's ``min``/``max`` as ``where``). A kept sample the scalar path trimmed
        lies over 33 s back, where :meth:`_rate` reads 0 on either list."""
        g = np.arange(len(all_t) - len(costs), len(all_t))
        i0, i1 = np.maximum(g - 2, 0), np.maximum(g - 1, 0)
        t0, t1, t2 = all_t[i0], all_t[i1], all_t[g]
        dt0, dt1 = t1 - t0, t2 - t1
        slack = self.slack_s
        ok = (g >= 2) & ~(t2 - t0 > 2 * _MAX_DT_S) & (dt0 > 0) & (dt1 > 0)
        with np.errstate(divide="ignore", invalid="ignore"):  # where not ok the rate is 0.0, unread
            r0 = ((all_cum[i1] - all_cum[i0]) + (all_q[i1] - all_q[i0]) * np.minimum(costs, dt0 + slack)) / dt0
            r1 = ((all_cum[g] - all_cum[i1]) + (all_q[g] - all_q[i1]) * np.minimum(costs, dt1 + slack)) / dt1
        low = np.where(r1 < r0, r1, r0)  # min(r0, r1)
        rate = np.where(ok, np.where(0.0 > low, 0.0, low), 0.0)  # max(min(r0, r1), 0.0), or 0.0
        look = self.lookahead_s
        bound = (pos + (rate * look)[:, None]) / ((self._windows + look) + slack)[None, :]
        # NaN propagates here where the scalar max skips it: SamplePlan.finite says which to trust
        return np.asarray(rate, dtype=np.float64), np.asarray(bound.max(axis=1), dtype=np.float64)

    def _cost_plan(self, t: FloatArray, work: FloatArray, done: FloatArray) -> CostPlan:
        """:meth:`_update_cost` for each sample in turn (times increasing), vectorised, the state
        untouched: per sample the running sums and the cost it leaves, and how many rows have aged
        out by then. Each running sum is a ``cumsum`` over its additions and removals in the loop's
        order (a sample's row added, then the rows it ages out, oldest first): the same floats."""
        n = len(t)
        rows = self._cost_rows
        horizon = float(t[-1]) - self.cost_window_s
        # Only the rows the last sample ages out are read (times increase: they lead the deque).
        leaving = list(itertools.takewhile(lambda r: r[0] < horizon, rows))
        old = np.array(leaving, dtype=np.float64).reshape(len(leaving), 3)
        all_t = np.concatenate((old[:, 0], t if len(leaving) == len(rows) else [math.inf]))
        # Rows aged out by sample k: those before t_k − window (a prefix: times increase).
        gone = np.maximum.accumulate(np.searchsorted(all_t, t - self.cost_window_s, side="left"))
        aged = np.concatenate((old, np.stack((t, work, done), axis=1)))[:int(gone[-1])]
        work_sum = running_sums(self._cost_work, work, aged[:, 1], gone)
        done_sum = running_sums(self._cost_done, done, aged[:, 2], gone)
        known = done_sum >= 1.0
        cost = np.where(known, np.where(0.0 > work_sum, 0.0, work_sum) / np.where(known, done_sum, 1.0), math.nan)
        last = np.maximum.accumulate(np.where(known, np.arange(n), -1))
        cost = np.where(last >= 0, cost[np.maximum(last, 0)], self._cost)
        return CostPlan(work_sum, done_sum, cost, np.where(np.isfinite(cost), cost, 0.0), gone)

    def _take_costs(self, t: FloatArray, work: FloatArray, done: FloatArray, plan: CostPlan, start: int,
                    stop: int) -> None:
        """The cost window as :meth:`_update_cost` leaves it after samples ``start:stop`` of ``plan``
        (rows appended, the aged ones popped from the front: the same deque as one at a time)."""
        rows, k = self._cost_rows, stop - 1
        rows.extend(zip(t[start:stop].tolist(), work[start:stop].tolist(), done[start:stop].tolist(), strict=True))
        for _ in range(int(plan.gone[k]) - (int(plan.gone[start - 1]) if start else 0)):
            rows.popleft()
        self._cost_work, self._cost_done = float(plan.work_sum[k]), float(plan.done_sum[k])
        self._cost = float(plan.cost[k])

    def _update_cost(self, t: float, work: float, done: float) -> None:
        """Replica-seconds per completion over the last ``cost_window_s`` (kept when none finished)."""
        rows = self._cost_rows
        rows.append((t, work, done))
        self._cost_work += work
        self._cost_done += done
        while rows and rows[0][0] < t - self.cost_window_s:
            _, w0, d0 = rows.popleft()
            self._cost_work -= w0
            self._cost_done -= d0
        if self._cost_done >= 1.0:
            self._cost = max(self._cost_work, 0.0) / self._cost_done


def _nansum(x: FloatArray) -> float:
    """``float(np.nansum(x))`` bit for bit (NaNs replaced by 0.0 in place, then the same pairwise
    ``add.reduce``) without nansum's wrapper layers."""
    a = np.asarray(x, dtype=np.float64)
    return float(np.add.reduce(np.where(np.isnan(a), 0.0, a)))
