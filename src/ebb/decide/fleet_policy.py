"""L1 for a whole fleet at once: an approximation of Ebb's policy, vectorised over N workloads.

:class:`~ebb.decide.policy.EbbPolicy` decides for one workload, one Python ``decide`` per second;
the cluster simulator runs it per service (``ebb:l1=exact``, :mod:`ebb.sim.cluster.exact`) where
that is affordable. For hundreds of services over a day it needs the same rules as numpy over
arrays, one call per second for all of them (issue #17 item 4): :class:`FleetEbb`, ``ebb:l1=fleet``.
It is **not** ``EbbPolicy`` run per workload: it keeps Ebb's need bound and comeback floor as
arrays, and omits or simplifies what 1 s fluid bins and a numpy state make costly. Per workload:

* **Need** (:mod:`ebb.decide.need`'s network-calculus bound on 1 s bins): with ``c = 1 /
  capacity_rps`` replica-seconds per request, ``A(D)`` the arrivals of the last ``D`` seconds and
  ``q`` the queue, ``need = max_D (A(D) + q) · c / (D + slack)`` over ``D`` ∈ 1, 2, 4, 8, 16, 32 s
  and ``slack = slack_fraction × TTFT SLO``. EbbPolicy: served work plus the queue's *growth* over
  the window, at a cost per request learned from completions, and a 0.5 s window too — which holds
  a whole 1 s sample, so on the simulator's 1 s samples it reads up to ``(1 + slack) / (0.5 +
  slack)`` times this need (measured 1.35–1.55× on steady traffic).
* **Comeback bound** (:mod:`ebb.decide.comeback`) on blocks of :data:`BLOCK_S` seconds: the
  block's peak need is recorded; ``level`` = peak over the last horizon ``H = cold start + 2 s``
  (EbbPolicy's horizon on 1 s samples); each closed block whose horizon has passed yields a rise =
  peak over the following ``H`` − its level; the floor = level + max(largest rise in memory, Gumbel
  quantile ``1 − budget`` of the rises by the method of moments). Memory = ``memory_horizons`` × H.
  Rises are sampled once per block, not once per second: the maxima are the same, the sample
  count ``BLOCK_S`` times smaller, which the Gumbel tail extrapolates for. No periodic forecast,
  no mean level (``level_peak`` always), no learned cold start (the simulator enforces it).
* **L2 inputs**: the latency is the worst TTFT of the last 30 s (EbbPolicy: the weighted TTFT P99
  of its latency window), 0 when nothing arrived in it (idle); the weight is recalibrated from it
  every second (:func:`~ebb.decide.fleet_rank.recalibrate_fleet`, bit for bit the scalar rule) —
  the fleet step takes it as given, as it takes EbbPolicy's.
* **Decision**, as :meth:`EbbPolicy.decide` minus what it omits — the fast path, the latency-breach
  surge and the floor it teaches, the forecast's scale-up ahead, the learned replica capacity, the
  recorded vetoes (a reason code instead): scale up when ``ceil(need / target_util)`` exceeds the
  fleet by the hysteresis, or at once on a persistent queue (``queue_surge_s``) or an L1 burst
  (this second's demand ≥ ``burst_fraction`` of ready capacity; EbbPolicy: its 1 s window's P99
  for 200 ms), with a surge of ``surge_fraction``; hold at ``max(min, floor, need)``; else ask to
  remove ``max(1, floor(spec × down_fraction × base_weight / weight))`` down to that hold, unless
  warming up (``warmup_horizons``), cooling down after a scale-up (``cooldown_horizons``), within
  ``down_interval_horizons`` of the last scale-down *proposal* (as EbbPolicy: a proposal the fleet
  step then vetoes still starts the interval), or vetoed by L2 on its own signals (latency ≥ the
  class's veto margin of its SLO, a burst, its floor; :func:`~ebb.decide.fleet_rank.veto_fleet`).

* **Asleep tier** (optional; ``wake_s`` and ``sleep_max`` per workload or one for all, ``wake_s`` NaN =
  no tier; ``decide(t, asleep=...)`` takes each workload's sleepers): EbbPolicy's three tier rules, the
  fleet twins of :mod:`ebb.decide.tier_rules` (tested equal to the scalar rules). Of the hold floor
  the cold rules give, up to ``sleep_max`` replicas may sleep while the running ones hold the need
  and a second comeback bound's floor, at the wake horizon ``wake_s + 2 s`` over the same blocks
  and memory. A scale-up with sleepers wakes every one the last cold floor counted on, and
  :attr:`FleetTargets.asleep_wanted` says how many sleepers to keep. A workload without a tier
  decides exactly as before, and so does a fleet without any: the second bound then does not exist
  and costs nothing.

What this module does *not* decide: the cluster's rules — quota, L2 rank, the disruption budget,
zones — which the fleet step applies to its proposals as to EbbPolicy's
(:mod:`ebb.decide.fleet_step`).

How closely it follows EbbPolicy, decision by decision on shared traces (one service, EbbPolicy in
control, FleetEbb shadowing it; ``tests/unit/sim/cluster/test_l1_agreement.py``): the same
direction (up, hold, down) in ≥ 90 % of seconds and the opposite in ≤ 2 seconds an hour; both scale
up within 5 s of a rise from a settled fleet; its need 0.55–1.0 of EbbPolicy's. Closed-loop, each in
control of its own fleet (one hour, two seeds, that test's service), they part further: on periodic
bursts FleetEbb held about twice EbbPolicy's GPU-seconds at 4.1–4.3 % violations against 5.5–5.8 %,
on demand steps about twice at 2.1–2.3 % against 1.0–1.2 %, on steady and diurnal traffic about
0.8× (both at 0).

Guarantees: pure (arrays in, arrays out; the caller's clock); no Python loop per workload; one
:meth:`FleetEbb.observe` + :meth:`FleetEbb.decide` costs O(N × 32) numpy work, plus O(N × memory
blocks) every :data:`BLOCK_S` seconds. A workload without a closed rise never gets a removal
request (no evidence, no scale-down).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ebb.decide.columns import column
from ebb.decide.comeback.streams import GUMBEL_SCALE, gumbel_z
from ebb.decide.fleet_rank import FleetClasses, recalibrate_fleet, veto_fleet
from ebb.decide.profiles import EbbProfile
from ebb.decide.tier_rules import NO_FLOOR, asleep_kept_many, awoken_many, reserve_awake_many, tier_floors

__all__ = ["BLOCK_S", "FleetEbb", "FleetTargets"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

BLOCK_S = 5
"""Seconds per comeback block: a 61 s horizon spans 13 blocks; 60 horizons of memory hold 732."""

_WINDOWS = (1, 2, 4, 8, 16, 32)
_LATENCY_WINDOW_S = 30
"""Seconds of TTFT L2 reads (:class:`~ebb.decide.policy.EbbPolicy`'s latency window)."""
_HIST = 32


@dataclass(frozen=True)
class FleetTargets:
    """One second's L1 answer for every workload (arrays of length N)."""

    desired: IntArray
    """Replicas wanted: above ``spec`` = scale up now; equal = hold; below = a removal request."""
    remove: IntArray
    """Removals requested (``spec − desired`` where a scale-down is wanted, else 0)."""
    need_replicas: FloatArray
    """The need bound now (replica units)."""
    floor_replicas: FloatArray
    """Comeback floor (replica units); NaN before the first closed rise."""
    burst: BoolArray
    """L1 burst: demand at or above ``burst_fraction`` of ready capacity this second."""
    reason: IntArray
    """Why, per workload: see :data:`FleetEbb.REASONS` (index into it)."""
    weight: FloatArray
    """L2 weight, recalibrated this second from ``latency_ms`` (the class's rule, damped by α)."""
    latency_ms: FloatArray
    """The latency L2 reads: the worst TTFT of the latency window (ms); 0 when nothing arrived in it
    (idle: nothing can be late); NaN when nothing was measured yet."""
    asleep_wanted: IntArray
    """With an asleep tier: the sleepers to keep beside ``desired`` (what the last cold floor holds
    beyond it; the actuator or engine releases the oldest past it); -1 = no opinion (no tier, or no
    cold floor yet: the tier's TTL decides). :func:`~ebb.decide.tier_rules.asleep_kept_many`."""


class FleetEbb:
    """Ebb's L1 over N workloads (see the module docstring)."""

    REASONS = ("hold", "need above target", "surge: queue", "surge: burst", "scale-down wanted",
               "warming up", "cooldown", "down interval", "no comeback evidence", "vetoed (L2)")

    def __init__(self, n: int, *, slo_ttft_ms: FloatArray, cold_start_s: FloatArray, min_replicas: IntArray,
                 max_replicas: IntArray, capacity_rps: FloatArray, classes: FleetClasses | None = None,
                 profile: EbbProfile | None = None, wake_s: FloatArray | float | None = None,
                 sleep_max: IntArray | int | None = None, reserve: FloatArray | float | None = None) -> None:
        p = profile if profile is not None else EbbProfile()
        self.n = n
        self.profile = p
        self.slo_ms = _arr(slo_ttft_ms, n, "slo_ttft_ms")
        self.slack_s = p.slack_fraction * self.slo_ms / 1000.0
        self.cost_s = 1.0 / _arr(capacity_rps, n, "capacity_rps")
        self.min_r = np.asarray(min_replicas, dtype=np.int64).reshape(n)
        self.max_r = np.asarray(max_replicas, dtype=np.int64).reshape(n)
        cold = _arr(cold_start_s, n, "cold_start_s")
        self.horizon_s = cold + 2.0
        m_blocks = int(np.ceil(p.memory_horizons * float(self.horizon_s.max()) / BLOCK_S))
        self._cold = _Bound(self.horizon_s, m_blocks, p)
        """The comeback bound at a cold start's horizon."""
        self.sleep_max = column(0 if sleep_max is None else sleep_max, n, "sleep_max", np.int64)
        wake = np.full(n, np.nan) if wake_s is None else column(wake_s, n, "wake_s", np.float64)
        self.tiered = ~np.isnan(wake)
        """Workloads with an asleep tier (a finite ``wake_s``)."""
        if np.any(self.tiered & ~((wake >= 0) & (self.sleep_max >= 1))):
            raise ValueError("a tier needs wake_s >= 0 and sleep_max >= 1 for every workload that has one")
        self.reserve = np.full(n, np.nan) if reserve is None else column(reserve, n, "reserve", np.float64)
        """The tier's reserve headroom per workload (EbbPolicy's ``reserve``); NaN: none."""
        self.reserving = ~np.isnan(self.reserve)
        if np.any(self.reserving & ~(self.tiered & (self.reserve >= 1.0))):
            raise ValueError("a reserve needs a tier and a headroom >= 1 for every workload that has one")
        self._reserve_max = np.where(self.reserving, self.sleep_max, NO_FLOOR) if self.reserving.any() else None
        """The sleepers a reserve keeps (its tier's max; NO_FLOOR without one); None when no workload
        has a reserve, so a fleet without one does no reserve work in a cycle."""
        # the same memory as the cold bound (as EbbPolicy's): rises within a wake, for as long
        self._wake = _Bound(np.where(self.tiered, wake, 0.0) + 2.0, m_blocks, p) if self.tiered.any() else None
        """The comeback bound at the tier's wake horizon (wake + 2 s); None when no workload has a tier."""
        self._cold_floor = np.full(n, NO_FLOOR, dtype=np.int64)
        """With a tier: the last floor a cold start's rules held (replicas); NO_FLOOR before one."""
        self.classes = classes if classes is not None else FleetClasses.guarding(
            base_weight=np.full(n, 0.65), alpha=1.2, veto_margin=p.veto_margin, slo_ms=self.slo_ms,
            min_replicas=self.min_r)
        if len(self.classes) != n:
            raise ValueError(f"classes must have {n} workloads, got {len(self.classes)}")
        self.base_weight = _arr(self.classes.base_weight, n, "base_weight")
        self.weight = self.base_weight.copy()
        self._lat = np.full((n, _LATENCY_WINDOW_S), np.nan)  # worst TTFT per second (ms), NaN = none
        self._arr = np.zeros((n, _HIST))
        self._t_i = -1
        self._block_peak = np.zeros(n)
        self.need = np.zeros(n)
        self._queue_since = np.full(n, np.inf)
        self._queue = np.zeros(n)
        self._burst = np.zeros(n, dtype=bool)
        self._spec = np.zeros(n, dtype=np.int64)
        self._ready = np.zeros(n, dtype=np.int64)
        self._first_t = math.nan
        self._last_up = np.full(n, -np.inf)
        self._last_down = np.full(n, -np.inf)

    # -- observation ------------------------------------------------------------------------------
    def observe(self, t_s: float, *, arrivals: FloatArray, queue: FloatArray, ready: IntArray,
                starting: IntArray, ttft_ms: FloatArray | None = None) -> None:
        """Record one second: arrivals in it (requests), queue at its end, ready and starting replicas,
        and the worst TTFT of its arrivals (ms; NaN where none arrived; None = not measured)."""
        if math.isnan(self._first_t):
            self._first_t = t_s
        self._t_i += 1
        a = np.nan_to_num(np.asarray(arrivals, dtype=float), nan=0.0, posinf=0.0).clip(min=0.0)
        self._arr[:, self._t_i % _HIST] = a
        self._lat[:, self._t_i % _LATENCY_WINDOW_S] = np.nan if ttft_ms is None else \
            np.where(a > 0, np.asarray(ttft_ms, dtype=float), -np.inf)  # -inf: idle second, nothing late
        self._queue = np.nan_to_num(np.asarray(queue, dtype=float), nan=0.0).clip(min=0.0)
        self._ready = np.asarray(ready, dtype=np.int64)
        self._spec = self._ready + np.asarray(starting, dtype=np.int64)
        self.need = self._need_now()
        p = self.profile
        self._burst = a * self.cost_s >= p.burst_fraction * np.maximum(self._ready, 1)
        queued = self._queue > 0
        self._queue_since = np.where(queued, np.minimum(self._queue_since, t_s), np.inf)
        self._block_peak = np.maximum(self._block_peak, self.need)
        if (self._t_i + 1) % BLOCK_S == 0:
            self._close_block()

    def _need_now(self) -> FloatArray:
        # newest-first cumulative arrivals over the ring: A(D) for D = 1..32 s
        order = (self._t_i - np.arange(_HIST)) % _HIST
        cum = np.cumsum(self._arr[:, order], axis=1)
        best = np.zeros(self.n)
        seen = min(self._t_i + 1, _HIST)
        for d in _WINDOWS:
            if d > seen:
                break
            np.maximum(best, (cum[:, d - 1] + self._queue) / (d + self.slack_s), out=best)
        return best * self.cost_s

    def _close_block(self) -> None:
        self._cold.close(self._block_peak)
        if self._wake is not None:
            self._wake.close(self._block_peak)
        self._block_peak = np.zeros(self.n)

    # -- decision ---------------------------------------------------------------------------------
    def decide(self, t_s: float, asleep: IntArray | int | None = None) -> FleetTargets:
        """Every workload's wanted replicas now (see the module docstring), with ``asleep`` replicas
        asleep per workload (an asleep tier; None = none)."""
        p = self.profile
        spec, ready = self._spec, self._ready
        latency = self._latency_ms()
        self.weight = recalibrate_fleet(self.classes, prev_weight=self.weight, latency_ms=latency,
                                        latency_slo_ms=self.slo_ms)
        need_now = _replicas(self.need, p.target_util)
        queued = (t_s - self._queue_since) >= p.queue_surge_s
        surge = (queued | self._burst) & (ready >= spec)
        surge_to = spec + np.maximum(1, np.ceil(spec * p.surge_fraction).astype(np.int64))
        want_up = np.where(surge, np.maximum(need_now, surge_to), need_now)
        want_up = np.clip(want_up, self.min_r, self.max_r)
        up = (want_up > spec) & (surge | (want_up > spec * (1.0 + p.up_hysteresis)))
        known = ~np.isnan(self._cold.floor)
        floor = np.where(known, _replicas(np.nan_to_num(self._cold.floor), p.down_util), self.max_r)
        hold_at = np.clip(np.maximum(floor, need_now), self.min_r, self.max_r)
        if self._wake is not None:
            want_up, hold_at = self._tier(want_up, hold_at, need_now, up & self.tiered, known & ~up,
                                          np.zeros(self.n, dtype=np.int64) if asleep is None else
                                          column(asleep, self.n, "asleep", np.int64))
        wants_down = ~up & known & (hold_at < spec)
        warm = (t_s - self._first_t) < p.warmup_horizons * self.horizon_s
        cool = (t_s - self._last_up) < p.cooldown_horizons * self.horizon_s
        spaced = (t_s - self._last_down) < p.down_interval_horizons * self.horizon_s
        blocked = warm | cool | spaced
        # L2's veto on this workload's own signals, as EbbPolicy vetoes its own scale-down (the fleet
        # step checks it again): its latency, a burst, its floor. The simulator's data is never stale.
        vetoed = veto_fleet(self.classes, staleness_s=0.0, success_ratio=math.nan, burst_active=self._burst,
                            replicas=spec, latency_p99_ms=latency, max_staleness_s=math.inf) != 0
        frac = p.down_fraction * self.base_weight / np.maximum(self.weight, 1e-9)
        step = np.maximum(1, np.floor(spec * frac).astype(np.int64))
        down_to = np.maximum(hold_at, spec - step)
        desired = np.where(up, want_up, np.where(wants_down & ~blocked & ~vetoed, down_to, spec))
        self._last_up = np.where(up, t_s, self._last_up)
        self._last_down = np.where(desired < spec, t_s, self._last_down)  # as EbbPolicy: from the proposal
        reason = np.zeros(self.n, dtype=np.int64)
        reason[wants_down & spaced] = 7
        reason[wants_down & cool] = 6
        reason[wants_down & warm] = 5
        reason[wants_down & ~blocked & vetoed] = 9
        reason[wants_down & ~blocked & ~vetoed] = 4
        reason[~known & ~up] = 8
        reason[up] = 1
        reason[up & surge & queued] = 2
        reason[up & surge & self._burst & ~queued] = 3
        return FleetTargets(desired=desired.astype(np.int64), remove=np.maximum(spec - desired, 0),
                            need_replicas=self.need.copy(), floor_replicas=self._cold.floor.copy(),
                            burst=self._burst.copy(), reason=reason, weight=self.weight.copy(), latency_ms=latency,
                            asleep_wanted=asleep_kept_many(self._cold_floor, desired,
                                                           self._reserve_max))

    def _tier(self, want_up: IntArray, hold_at: IntArray, sized: IntArray, up: BoolArray, floored: BoolArray,
              asleep: IntArray) -> tuple[IntArray, IntArray]:
        """The asleep tier's rules (:mod:`ebb.decide.tier_rules`, as EbbPolicy applies them): a
        scale-up wakes every sleeper the last cold floor counted on; where a floor is decided
        (``floored``), it is the cold floor remembered, and of it up to ``sleep_max`` may sleep while
        the running replicas hold the need and the floor at the wake horizon."""
        assert self._wake is not None
        want_up = np.where(up, awoken_many(want_up, self._spec, asleep, self._cold_floor, self.max_r,
                                           self.reserving), want_up)
        floored = floored & self.tiered
        self._cold_floor = np.where(floored, hold_at, self._cold_floor)
        wake = self._wake.floor
        wake_at = _replicas(np.nan_to_num(wake), self.profile.down_util)
        hold_at = tier_floors(hold_at, wake_at, sized, self._spec + asleep, self.sleep_max, self.min_r, self.max_r,
                              floored & ~np.isnan(wake))
        if self._reserve_max is not None:  # H × the sized need running (EbbPolicy._reserved, after the tier floor)
            reserved = reserve_awake_many(sized, self.reserve, self.max_r)
            hold_at = np.where(floored & self.reserving, np.maximum(hold_at, reserved), hold_at)
        return want_up, hold_at

    def _latency_ms(self) -> FloatArray:
        """The worst TTFT of the window; 0 where nothing arrived in it, NaN where nothing was measured."""
        worst = np.fmax.reduce(self._lat, axis=1)  # NaN (nothing measured) is skipped unless all are
        return np.asarray(np.where(np.isneginf(worst), 0.0, worst), dtype=np.float64)


class _Bound:
    """One comeback bound over N workloads on blocks of :data:`BLOCK_S` seconds (the module
    docstring): the block peaks of the need, the level over a horizon, the rises in memory and the
    floor. FleetEbb keeps one at the cold start's horizon and, with a tier, one at the wake's."""

    def __init__(self, horizon_s: FloatArray, m_blocks: int, profile: EbbProfile) -> None:
        n = len(horizon_s)
        self.n, self.profile, self.m_blocks = n, profile, m_blocks
        self.h_blocks = np.ceil(horizon_s / BLOCK_S).astype(np.int64)
        h = int(self.h_blocks.max())
        self._ring = max(m_blocks, h + 1) + h + 1  # block peaks and levels, oldest overwritten
        self._peak = np.zeros((n, self._ring))
        self._level = np.zeros((n, self._ring))
        self._rises = np.full((n, m_blocks), -np.inf)  # -inf = empty slot
        self._rn = np.zeros(n)  # running count, sum and sum of squares of the rises in memory
        self._rsum = np.zeros(n)
        self._rsq = np.zeros(n)
        self._blocks = 0
        self.level = np.zeros(n)
        self.floor = np.full(n, np.nan)
        """The comeback floor (replica units); NaN before the first closed rise."""

    def close(self, block_peak: FloatArray) -> None:
        """Close a block whose peak need was ``block_peak``: its level, the rise it closes, the floor."""
        k = self._blocks
        slot = k % self._ring
        self._peak[:, slot] = block_peak
        # newest-first suffix maxima over the ring: max of the last j+1 blocks at column j
        depth = int(self.h_blocks.max())
        cols = (k - np.arange(min(depth, k + 1))) % self._ring
        suffix = np.maximum.accumulate(self._peak[:, cols], axis=1)
        hb = np.minimum(self.h_blocks, suffix.shape[1]) - 1
        self.level = np.take_along_axis(suffix, hb[:, None], axis=1)[:, 0]
        self._level[:, slot] = self.level
        # the block h back now has its whole horizon: rise = peak over the next h blocks − its level
        past = k - self.h_blocks
        ok = past >= self.h_blocks - 1  # its level covered a whole horizon
        if ok.any():
            ahead = np.take_along_axis(suffix, hb[:, None], axis=1)[:, 0]
            lvl = self._level[np.arange(self.n), np.where(ok, past, 0) % self._ring]
            self._push_rise(k % self.m_blocks, np.where(ok, ahead - lvl, -np.inf))
        self._blocks += 1
        self.floor = self._floor_now()

    def _push_rise(self, slot: int, rise: FloatArray) -> None:
        # running moments: O(N) per block instead of a pass over the whole memory
        old = self._rises[:, slot]
        had, has = np.isfinite(old), np.isfinite(rise)
        o, r = np.where(had, old, 0.0), np.where(has, rise, 0.0)
        self._rn += has.astype(float) - had.astype(float)
        self._rsum += r - o
        self._rsq += r * r - o * o
        self._rises[:, slot] = rise

    def _floor_now(self) -> FloatArray:
        n = self._rn
        some = n > 0
        top = self._rises.max(axis=1)
        mean = np.where(some, self._rsum / np.maximum(n, 1), 0.0)
        std = np.sqrt(np.maximum(np.where(some, self._rsq / np.maximum(n, 1), 0.0) - mean * mean, 0.0))
        b = self.profile.budget
        rise = np.where(some, top, 0.0)
        if self.profile.tail and 0.0 < b < 1.0:
            rise = np.maximum(rise, mean + GUMBEL_SCALE * gumbel_z(b) * std)
        return np.where(some, self.level + np.maximum(rise, 0.0), np.nan)


def _replicas(demand: FloatArray, util: float) -> IntArray:
    return np.ceil(np.asarray(demand) / util - 1e-9).astype(np.int64)


def _arr(v: FloatArray | float, n: int, name: str) -> FloatArray:
    a = np.broadcast_to(np.asarray(v, dtype=float), (n,)).copy()
    if not np.all(np.isfinite(a)) or np.any(a <= 0):
        raise ValueError(f"{name} must be finite and > 0 for every workload")
    return a
