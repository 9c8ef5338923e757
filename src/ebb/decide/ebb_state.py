"""What the Ebb policy remembers between decisions, and the rules that move that memory.

:class:`EbbState` is one typed object per policy (:class:`~ebb.decide.policy.EbbPolicy` owns it):
the L1 window and need tracker, the sizing window of recent needs, the queue history, the latency
window, the comeback bound and the burst memory, the learned replica capacity and shortfalls, the burst timer, the
weight, and the times of the last scale-up, scale-down, signal and busy sample. Everything here is
public: the policy's steps (:mod:`ebb.decide.policy`) and the blocks of proven holds
(:mod:`ebb.decide.hold_block`, :mod:`ebb.decide.hold_proof`) read and move it through this API.

Each rule that a block of holds applies to many ticks at once sits beside the one-tick rule it
mirrors, with the same float operations in the same order (property-tested equal,
``tests/unit/decide/test_ebb_state.py``; end to end, ``tests/unit/sim/test_fluid_hold_blocks.py``):

=================================  ==========================================
one tick (``decide``)              many ticks (a block of proven holds)
=================================  ==========================================
:meth:`EbbState.ingest`            :meth:`EbbState.ingest_held`
:meth:`EbbState.persistent_queue`  :meth:`EbbState.queue_quiet`
:meth:`EbbState.need_now`          :meth:`EbbState.window_needs`, :meth:`EbbState.window_needs_at`
:meth:`EbbState.replicas`          :meth:`EbbState.replicas_of`
:meth:`EbbState.burst_step`        :meth:`EbbState.burst_runs`
:meth:`EbbState.learned_floor_at`  :meth:`EbbState.learned_floor_below`
=================================  ==========================================

Pure: no I/O, no clocks (times arrive in the observations).
"""

from __future__ import annotations

import math
from collections import deque
from operator import itemgetter

import numpy as np
import numpy.typing as npt

from ebb.decide.comeback import ComebackBound
from ebb.decide.comeback.streams import recorded
from ebb.decide.latency import LatencyWindow
from ebb.decide.need import NeedReading, NeedTracker, SamplePlan
from ebb.decide.profiles import EbbProfile
from ebb.decide.recurrence import BurstMemory
from ebb.decide.served import completion_weights, served_demand, served_demand_one
from ebb.model.observation import FineSignals
from ebb.window.small import SmallWindow

__all__ = ["INT64_NS_S", "READ_LAG_S", "EbbState", "burst_after"]

READ_LAG_S = 1.0
"""Age (s) of the newest sample up to which a decision's windows end at the decision's own time."""

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]
_NS = 1_000_000_000
_SECOND = itemgetter(1)
INT64_NS_S = 9.2e9
"""Seconds whose nanoseconds an int64 holds (2^63 ns ≈ 9.22e9 s)."""


class EbbState:
    """The Ebb policy's memory (see the module docstring). Built by the policy; every field public."""

    def __init__(self, *, bound: ComebackBound, slack_s: float, lookahead_s: float, latency_window_s: float,
                 slo_ttft_ms: float, slo_e2e_ms: float, long_window_s: float, queue_surge_s: float,
                 sizing_window_s: float, weight: float, cold_start_s: float,
                 max_staleness_s: float = math.inf) -> None:
        self.max_staleness_s = max_staleness_s
        """Samples older than this (s) are no evidence; :meth:`read_time` never reads further back."""
        self.queue_surge_s = queue_surge_s
        """Requests queued at every sample of this long (s) make a persistent queue."""
        self.sizing_window_s = sizing_window_s
        """The need sizes the fleet by its largest value over this window (s)."""
        self.l1 = SmallWindow(buckets=10, bucket_ms=100.0)
        """The 1 s L1 window: ten 100 ms buckets of served demand (the sketch's answers, exactly)."""
        self.need = NeedTracker(slack_s, lookahead_s=lookahead_s)
        """The need bound over the last 32 s of samples (:mod:`ebb.decide.need`)."""
        self.recent_need: deque[tuple[float, float]] = deque()
        """(time, peak need) of each ingest over the last ``sizing_window_s``."""
        self.reading = NeedReading(0.0, 0.0, 0.0, float("nan"))
        """The newest ingest's need reading."""
        self.served_now = 0.0
        """Mean served demand of the newest ingest (replica units)."""
        self.capacity = 1.0
        """Demand (replica units) one ready replica serves when saturated: 1 until a persistent queue
        shows less (a server whose KV cache or batch limit fills before its slots and prefill do)."""
        self.capacity_measured = False
        """Whether a saturated fleet has measured :attr:`capacity` (:meth:`learn_capacity`)."""
        self.cycle_peak = 0.0
        """The largest need since the last record in the comeback bound (replica units)."""
        self.latency = LatencyWindow(latency_window_s, slo_ms=slo_ttft_ms, slo_e2e_ms=slo_e2e_ms,
                                     long_window_s=long_window_s)
        """Completions of the last ``latency_window_s`` (and breach counts over the long window)."""
        self.queue_hist: deque[tuple[float, bool]] = deque()
        """(time, queued?) of each fine sample over the last ``queue_surge_s``."""
        self.over_since: float | None = None
        """When L1 demand last rose to the burst level and stayed there (None below it)."""
        self.last_up = -math.inf
        """The last scale-up (s); the cooldown runs from it."""
        self.last_down = -math.inf
        """The last scale-down (s); the down interval runs from it."""
        self.last_signal_t = -math.inf
        """The newest fine sample's time (s)."""
        self.last_outgrown_t = -math.inf
        """The last reconcile whose need outgrew the ready capacity (s): late requests since are the
        backlog's, not a need model reading too little."""
        self.last_busy_t = -math.inf
        """The newest fine sample with any demand or queue (an idle fleet has no latency to measure)."""
        self.weight = weight
        """The L2 weight, recalibrated every reconcile from the TTFT P99."""
        self.cold_start_s = cold_start_s
        """The slowest cold start seen (s); the comeback horizon follows it."""
        self.shortfalls: deque[tuple[float, float]] = deque()
        """(time, replicas per mean need) of each latency surge the need did not see coming."""
        self.bound = bound
        """The comeback bound (:mod:`ebb.decide.comeback`)."""
        self.wake_bound: ComebackBound | None = None
        """The comeback bound at an asleep tier's wake horizon (the same needs); None without a tier."""
        self.cold_floor: int | None = None
        """With a tier: the last comeback floor (replicas) a cold start's bound held, running or asleep."""
        self.bursts = BurstMemory(bound.horizon_s, bound.memory_s)
        """Past bursts' onsets and peaks, for days (:mod:`ebb.decide.recurrence`)."""
        self.first_t: float | None = None
        """The first reconcile's time (s); None before it."""
        self.last_veto: tuple[str, ...] = ()
        """The reasons of the last recorded veto (a repeated one is a hold)."""

    # -- L1 ingest ---------------------------------------------------------------------------------
    def ingest(self, fine: FineSignals | None, ready: int, t: float) -> None:
        """Feed the fine samples: the L1 window, the need, the queue history and the completions;
        then forget what aged out by ``t``."""
        f = fine
        if f is None or not len(f.t_s):
            self.trim(self.read_time(t))
            return
        if self._plain_sample(f):
            self._ingest_sample(float(f.t_s[0]), float(f.prefill_replicas[0]), float(f.slot_replicas[0]),
                                float(f.queued[0]), ready)
            self.trim(self.read_time(t))
            return
        demand = served_demand(f.prefill_replicas, f.slot_replicas, ready)
        # One sample (the fluid engine's 1 s bins): scalar reads of the same values, not array ops.
        one = len(demand) == 1 and len(f.t_s) == 1 and len(f.queued) == 1
        self.served_now = float(demand[0]) if one else float(demand.mean())  # x / 1 is x
        self.l1.ingest(demand, (f.t_s * _NS).astype(np.int64))
        self.queue_hist.extend(zip(f.t_s.tolist(), (f.queued > 0).tolist(), strict=True))
        need, reading = self.need.ingest(f.t_s, demand, f.queued, completion_weights(f))
        if len(need):
            self.reading = reading
            self.cycle_peak = max(self.cycle_peak, reading.peak_need_replicas)
            self.recent_need.append((float(f.t_s[-1]), reading.peak_need_replicas))
        self.last_signal_t = max(self.last_signal_t, float(f.t_s[-1]))
        if one:
            if demand[0] > 0 or f.queued[0] > 0:
                self.last_busy_t = max(self.last_busy_t, float(f.t_s[0]))
        else:
            busy = (demand > 0) | (f.queued > 0)
            if busy.any():
                self.last_busy_t = max(self.last_busy_t, float(f.t_s[np.flatnonzero(busy)[-1]]))
        self.latency.add(f.done_t_s, f.done_ttft_ms, f.done_e2e_ms, f.done_weight, f.done_wait_ms)
        self.trim(self.read_time(t))

    @staticmethod
    def _plain_sample(f: FineSignals) -> bool:
        """Whether ``f`` is one sample with no completion row, at a time whose nanoseconds fit the array
        path's int64 (finite, under 292 years: its L1 bucket is the same) — :meth:`_ingest_sample`'s case."""
        return len(f.t_s) == len(f.prefill_replicas) == len(f.slot_replicas) == len(f.queued) == 1 and \
            not (len(f.done_t_s) or len(f.done_weight) or len(f.done_ttft_ms) or len(f.done_e2e_ms)) and \
            abs(float(f.t_s[0])) < INT64_NS_S

    def _ingest_sample(self, t: float, prefill: float, slots: float, queued: float, ready: int) -> None:
        """:meth:`ingest`'s steps for one sample without completions (an agent's 100 ms samples, most
        of them), in Python floats: the same values as the array path takes (its one-sample branches),
        without ~30 numpy calls on length-1 arrays."""
        demand = served_demand_one(prefill, slots, ready)
        self.served_now = demand
        if math.isfinite(demand):
            self.l1.ingest_one(demand, int(t * _NS))
        self.queue_hist.append((t, queued > 0))
        if t > self.need.last_t:  # an older sample the tracker drops (NeedTracker.ingest)
            reading = self.need.ingest_sample(t, demand, queued, 0.0)  # no rows: np.nansum of none is 0.0
            self.reading = reading
            self.cycle_peak = max(self.cycle_peak, reading.peak_need_replicas)
            self.recent_need.append((t, reading.peak_need_replicas))
        self.last_signal_t = max(self.last_signal_t, t)
        if demand > 0 or queued > 0:
            self.last_busy_t = max(self.last_busy_t, t)

    def ingest_planned(self, plan: SamplePlan, start: int, stop: int, demand: list[float],
                       queued: list[float]) -> None:
        """:meth:`ingest` of ``plan``'s samples ``start:stop`` one at a time (``demand[k]`` served,
        ``queued[k]`` queued, no completion rows, every demand and need a number, times increasing
        past every sample held — :meth:`_ingest_sample`'s case), at once: the need tracker takes
        them from the plan (:meth:`NeedTracker.take`), the L1 window as a run
        (:meth:`SmallWindow.ingest_run`), the rest as the last call leaves it. The windows are then
        trimmed at the last one's read time, which forgets what the trims between would have."""
        t = plan.t[start:stop].tolist()
        needs = plan.need[start:stop].tolist()
        q = queued[start:stop]
        last = len(t) - 1
        self.served_now = demand[stop - 1]
        self.l1.ingest_run(demand[start:stop], [int(x * _NS) for x in t])
        self.queue_hist.extend(zip(t, [v > 0 for v in q], strict=True))
        self.reading = self.need.take(plan, start, stop)
        self.cycle_peak = max(self.cycle_peak, *needs)  # max(max(p, a), b): the first largest, as one by one
        self.recent_need.extend(zip(t, needs, strict=True))
        self.last_signal_t = max(self.last_signal_t, t[last])
        for k in range(last, -1, -1):
            if demand[start + k] > 0 or q[k] > 0:
                self.last_busy_t = max(self.last_busy_t, t[k])
                break
        self.trim(self.read_time(t[last]))

    def read_time(self, t: float) -> float:
        """When the windows (sizing, L1, queue, latency) end for a decision at ``t``: ``t`` while the
        newest sample is at most :data:`READ_LAG_S` (1 s) old — always so in the simulator, whose
        samples are at most one 1 s bin old — or older than ``max_staleness_s`` (no evidence: the
        windows end at ``t`` and hold none of it), else the newest sample's time + :data:`READ_LAG_S`.
        So data that arrives late (an agent 3 s behind) still sizes a scale-up on what it shows,
        instead of reading as no demand; whether it may back a scale-down is the freshness rule's
        call (``ebb.live.sensed``), not this. Never decreases while ``t`` and the newest sample do not."""
        age = t - self.last_signal_t
        if age <= READ_LAG_S or age > self.max_staleness_s:
            return t
        return self.last_signal_t + READ_LAG_S

    def ingest_held(self, ticks: FloatArray, demand: FloatArray, queued: FloatArray, needs: FloatArray,
                    ends: IntArray, fine: FineSignals) -> None:
        """:meth:`ingest` of one sample per tick at ``ticks`` (served ``demand``, ``queued``, the
        completion rows ``ends[k-1]:ends[k]`` of ``fine`` timed at tick ``k``), all at once, for ticks
        whose needs the tracker already took (``needs``, :meth:`NeedTracker.ingest_seconds`) and
        whose cycle peaks the bound already recorded: the L1 window, queue history, recent needs,
        served demand, newest signal and busy times and latency window as the last tick leaves them."""
        last = len(ticks) - 1
        t_last = float(ticks[last])
        self.served_now = float(demand[last])
        self.l1.ingest(demand[last:], (ticks[last:] * _NS).astype(np.int64))
        self.l1.quantile(0.99, int(t_last * _NS))  # decide's query moves the window's head
        t_list = ticks.tolist()
        self.queue_hist.extend(zip(t_list, (queued > 0).tolist(), strict=True))
        self.recent_need.extend(zip(t_list, needs.tolist(), strict=True))
        self.last_signal_t = max(self.last_signal_t, t_last)
        busy = (demand > 0) | (queued > 0)
        if busy.any():
            self.last_busy_t = max(self.last_busy_t, float(ticks[np.flatnonzero(busy)[-1]]))
        rows = int(ends[last])
        wait = fine.done_wait_ms[:rows] if len(fine.done_wait_ms) else np.full(rows, np.nan)
        self.latency.add_ticks(t_list, ends.tolist(), fine.done_t_s[:rows], fine.done_ttft_ms[:rows],
                               fine.done_e2e_ms[:rows], fine.done_weight[:rows], wait)
        self.trim(t_last)

    def trim(self, t: float) -> None:
        """Forget the queue history, completions and recent needs that aged out by ``t``."""
        while self.queue_hist and self.queue_hist[0][0] <= t - self.queue_surge_s:
            self.queue_hist.popleft()
        self.latency.trim(t)
        while self.recent_need and self.recent_need[0][0] <= t - self.sizing_window_s:
            self.recent_need.popleft()

    def close_cycle(self, t: float, ready_capacity: float) -> None:
        """Record the cycle's peak need at ``t`` in the comeback bound, and in the burst memory (against
        the memory's mean need) when it outgrew ``ready_capacity`` or a recurrence holds capacity for
        it — a burst the fleet was not ready for, or one it was kept ready for; start the next cycle's."""
        self.bound.record(self.cycle_peak)
        if self.wake_bound is not None:
            self.wake_bound.record(self.cycle_peak)
        rec = self.bursts.expect(t)
        if self.cycle_peak > ready_capacity or (rec is not None and rec.holding(t)):
            self.bursts.observe(t, recorded(self.cycle_peak), self.bound.mean_need)
        self.cycle_peak = 0.0

    # -- queue persistence -------------------------------------------------------------------------
    def persistent_queue(self) -> bool:
        """Whether requests queued at every sample of the last ``queue_surge_s``."""
        q = self.queue_hist
        if len(q) < 2:
            return False
        # Each sample stands for the interval before it (100 ms from an agent, 1 s from the fluid
        # engine's bins): the history covers its span plus one interval.
        covered = q[-1][0] - q[0][0] + (q[-1][0] - q[-2][0])
        return covered >= self.queue_surge_s - 0.2 and all(v for _, v in q)

    def queue_quiet(self, t_s: FloatArray, queued: BoolArray) -> BoolArray:
        """Per new sample at ``t_s`` (``queued`` each), whether the queue history through it holds an
        unqueued sample within ``queue_surge_s`` — so :meth:`persistent_queue` is False there."""
        unqueued_before = next((t for t, q in reversed(self.queue_hist) if not q), -math.inf)
        last = np.maximum(np.maximum.accumulate(np.where(queued, -math.inf, t_s)), unqueued_before)
        return np.asarray(last > t_s - self.queue_surge_s, dtype=bool)

    # -- the sizing window -------------------------------------------------------------------------
    def need_now(self) -> float:
        """The largest need over the sizing window (replica units; 0 without any)."""
        return max(map(_SECOND, self.recent_need), default=0.0)  # every react asks: no generator frame

    def window_needs(self, ticks: FloatArray, needs: FloatArray) -> FloatArray:
        """:meth:`need_now` after each of ticks ``ticks`` adds its need ``needs[k]`` (and the window
        forgets what ages out by it, as :meth:`trim` does)."""
        return self.window_needs_at(ticks, needs, ticks, np.arange(1, len(ticks) + 1))

    def window_needs_at(self, t_s: FloatArray, needs: FloatArray, at_s: FloatArray, ends: IntArray) -> FloatArray:
        """:meth:`need_now` at each of ``at_s`` (increasing) once the samples ``t_s[:ends[k]]`` added their
        needs and the window forgot what aged out by ``at_s[k]`` (:meth:`trim`). Each window must hold
        its newest sample (``t_s[ends[k] − 1] > at_s[k] − sizing_window_s``, ``ends[k] ≥ 1``): a
        reconcile's, just after its own sample."""
        r_t = np.array([t for t, _ in self.recent_need], dtype=np.float64)
        r_v = np.array([v for _, v in self.recent_need], dtype=np.float64)
        all_t = np.concatenate((r_t, t_s))
        all_v = np.concatenate((r_v, needs, [0.0]))
        lo = np.searchsorted(all_t, at_s - self.sizing_window_s, side="right")
        bounds = np.empty(2 * len(at_s), dtype=np.int64)
        bounds[0::2] = lo
        bounds[1::2] = len(r_t) + np.asarray(ends, dtype=np.int64)
        return np.asarray(np.maximum.reduceat(all_v, bounds)[0::2], dtype=np.float64)

    # -- replicas from demand ----------------------------------------------------------------------
    def replicas(self, demand: float, util: float) -> int:
        """Replicas that serve ``demand`` (replica units) at ``util`` of their learned capacity."""
        return math.ceil(demand / (util * self.capacity) - 1e-9)

    def replicas_of(self, demand: FloatArray, util: float) -> FloatArray:
        """:meth:`replicas` element-wise (as floats: the same whole numbers)."""
        return np.asarray(np.ceil(demand / (util * self.capacity) - 1e-9), dtype=np.float64)

    def learn_capacity(self, ready: int) -> None:
        """Requests queued throughout the last ``queue_surge_s`` with no capacity on its way and the
        queue not draining (demand arriving at least what is served): the fleet is saturated, so
        what it serves per ready replica is what a replica can serve (kept
        within [0.25, 1]; the latest saturation wins — a server's limits move with its traffic)."""
        if ready > 0 and self.served_now > 0:
            self.capacity = min(1.0, max(0.25, self.served_now / ready))
            self.capacity_measured = True

    def history_util(self, profile: EbbProfile) -> float:
        """The utilisation the history's floor is sized at (:meth:`EbbPolicy._comeback_floor`): a
        scale-up's ``target_util`` until a saturated fleet measured the capacity — before, it is the
        cost model's, read at the load of the moment, which overstates a replica under a fuller batch
        — then ``down_util`` of the measured capacity."""
        return profile.down_util if self.capacity_measured else profile.target_util

    # -- the burst timer ---------------------------------------------------------------------------
    def burst_step(self, t: float, d: float, burst_at: float, cap: float) -> bool:
        """Move the burst timer to L1 demand ``d`` at ``t`` (:func:`burst_after`); whether it is a burst."""
        self.over_since, burst = burst_after(self.over_since, t, d, burst_at, cap)
        return burst

    def burst_runs(self, ticks: FloatArray, l1: FloatArray, burst_at: float, cap: float
                   ) -> tuple[FloatArray, BoolArray, BoolArray]:
        """:meth:`burst_step` at each tick, without moving the timer: per tick when the current run
        at or above ``burst_at`` began (the timer's value after it, NaN when none), whether it is in
        one, and whether it is a burst. :meth:`set_burst_timer` then moves the timer to a tick's."""
        m = len(ticks)
        hit = l1 >= burst_at
        before = np.concatenate(([self.over_since is not None], hit[:-1]))
        started = np.maximum.accumulate(np.where(hit & ~before, np.arange(m), -1))
        carried = self.over_since if self.over_since is not None else math.nan
        over_t = np.where(started >= 0, ticks[np.maximum(started, 0)], carried)
        burst = (hit & (ticks - over_t >= 0.2)) | (l1 >= cap)
        return over_t, hit, burst

    def set_burst_timer(self, over_t: FloatArray, hit: BoolArray, k: int) -> None:
        """The burst timer as :meth:`burst_runs` found it after tick ``k``."""
        self.over_since = float(over_t[k]) if hit[k] else None

    # -- learned floor -----------------------------------------------------------------------------
    def learn_shortfall(self, t: float, target: int) -> None:
        """A latency surge to ``target`` replicas: the need model read too little at today's demand.
        Kept, for the comeback memory, as the ratio of ``target`` to the need's mean over that memory
        (slow and stable: the instantaneous level of bursty traffic swings by tens of percent), so
        the floor it sets follows the demand's slow changes."""
        self.shortfalls.append((t, target / max(self.bound.mean_need, 1e-3)))

    def learned_floor(self, t: float) -> int:
        """Replicas the latency surges of the memory say the current demand needs (0 without any);
        surges older than the memory are forgotten."""
        while self.shortfalls and self.shortfalls[0][0] < t - self.bound.memory_s:
            self.shortfalls.popleft()
        return self.learned_floor_at(t, self.bound.mean_need)

    def learned_floor_at(self, t: float, mean_need: float) -> int:
        """:meth:`learned_floor` at ``mean_need`` without forgetting anything: the shortfalls of the
        memory before ``t`` only (a later call forgets the older ones, its cutoff being later)."""
        cutoff = t - self.bound.memory_s
        ratios = [r for ts, r in self.shortfalls if not ts < cutoff]
        if not ratios:
            return 0
        return math.ceil(max(ratios) * mean_need - 1e-9)

    def learned_floor_below(self, t_last: float, mem_means: FloatArray) -> FloatArray:
        """A lower bound of :meth:`learned_floor_at` at each of ``mem_means`` for times up to
        ``t_last``: the shortfalls still kept at ``t_last`` (the fewest) at each mean."""
        cutoff = t_last - self.bound.memory_s
        ratios = [r for ts, r in self.shortfalls if not ts < cutoff]
        if not ratios:
            return np.zeros(len(mem_means))
        return np.asarray(np.ceil(max(ratios) * mem_means - 1e-9), dtype=np.float64)

    # -- the comeback horizon ----------------------------------------------------------------------
    def adopt_bound(self, longer: ComebackBound, cold_start_s: float, long_window_s: float) -> None:
        """A longer comeback horizon: ``longer`` takes the memory's needs, the latency window's long
        count spans the new horizons."""
        self.cold_start_s = cold_start_s
        longer.replay(self.bound.needs())
        self.bound = longer
        self.latency.long_window_s = long_window_s


    def adopt_wake_bound(self, longer: ComebackBound) -> None:
        """A longer wake horizon (a slower wake measured): ``longer`` takes the wake memory's needs."""
        if self.wake_bound is not None:
            longer.replay(self.wake_bound.needs())
        self.wake_bound = longer


def burst_after(over_since: float | None, t: float, d: float, burst_at: float, cap: float
                ) -> tuple[float | None, bool]:
    """The burst timer after L1 demand ``d`` at ``t`` (when the run at or above ``burst_at`` began;
    None below it) and whether it is a burst: demand at or above ``burst_at`` for at least 200 ms,
    or at or above the ready capacity ``cap`` at once."""
    over = (t if over_since is None else over_since) if d >= burst_at else None
    return over, over is not None and (t - over) >= 0.2 or d >= cap
