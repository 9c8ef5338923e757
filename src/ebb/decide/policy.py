"""The Ebb policy: L1 (sub-second signals) → L2 (workload semantics, SLA veto) → L3 (plan).

One reconcile per second on the signals an Ebb node agent streams at 100 ms, and a fast path at
every fine sample between reconciles. Pure: an :class:`~ebb.model.observation.Observation` in, a
:class:`~ebb.model.decision.Decision` out, no I/O (the :class:`~ebb.decide.base.Policy` and
:class:`~ebb.decide.base.Reactive` seams); the same object runs under the simulator's virtual
clock and the live loop. Every time constant is counted in comeback horizons
``H = cold start + reconcile + fine sample`` (:attr:`EbbPolicy.horizon_s`).

Each reconcile:

1. **L1.** The 100 ms samples become served demand ``P + S × (1 − P / ready)`` (replica units,
   :func:`served_demand`) — into the 1 s sliding window whose P99 is ``d`` (a burst is
   ``d ≥ burst_fraction × ready`` for ≥ 200 ms) — and the **need** (:mod:`ebb.decide.need`): the
   replicas that keep every wait within the slack. Completions (TTFT rows with the wait before the
   request's own prefill, end-to-end rows) go into the latency window (:mod:`ebb.decide.latency`).
   The second's peak need goes into the comeback bound (:mod:`ebb.decide.comeback`).
2. **Sizing up.** ``up = ceil(need / target_util)``, at once when urgent (a surge or a burst),
   else past ``up_hysteresis``. A surge (``surge_fraction`` more) answers requests queued for
   ``queue_surge_s``, or TTFT breaches that waiting caused (≥ 3 and > 0.5 % of the latency window's
   requests, or over half the violation budget across ``breach_horizons``); one with the need never
   past the fleet also teaches a replicas-per-need floor. A detected periodic rise due within the
   horizon scales up ahead of it (:mod:`ebb.decide.forecast`).
3. **L2.** The weight is recalibrated from the TTFT P99 (the note's rule, damped by α). A
   scale-down goes no lower than the **comeback floor** — the capacity whose estimated risk of being
   outgrown before removed capacity returns is within ``budget`` — the learned floor and the need;
   it is vetoed during the warm-up and the cooldown, while the TTFT P99 is within ``veto_margin`` of
   its SLO, a burst is active, or data is missing or stale (an idle fleet is not "latency unknown").
   One step per half horizon, at most ``down_fraction`` of the fleet (less for a hurting class).
4. **L3.** Victims are cold-starting replicas, then the least-loaded ready ones, zones balanced
   (skew ≤ 1), within the disruption budget (``max_unavailable`` per cycle).

The fast path (:meth:`EbbPolicy.react`) ingests the new samples and, when the need outgrows the
ready fleet, asks for ``ceil(need / target_util)`` replicas at once — the need projected
:data:`FAST_LOOKAHEAD_S` ahead on the sustained arrival rate included, so a burst is answered
while its queue builds, not once it has. Never a scale-down.

Every cycle returns one :class:`~ebb.model.decision.Decision`. A scale-up, a scale-down or a
recorded veto carries the whole explanation the ledger and ``ebb explain`` show: the signals
(NaN = not measured; a scale-down's comeback horizon, risk and budget among them), the weights
(``workload``, ``base``, ``alpha``), reasons, vetoes, victims (replica ids) and the plan
(``profile``, ``target_util``, ``budget``). Every other cycle is a ``hold`` (built without signals:
most cycles are holds). A veto is recorded (action ``veto``) when its reasons change, not every
second it persists: a repeated veto, or one made of cooldowns only, is a ``hold`` that still names
its vetoes. Spans (``spans=``) get one span per layer: ``ebb.l1`` (demand, need), ``ebb.l2``
(weight, sizing, vetoes), ``ebb.l3`` (victims), ``ebb.fast`` (a fast-path request). At t = 0 with
no pods the answer is the initial fleet, ``max(initial, min_replicas)``, from 0.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from ebb.config.workloads import WorkloadClass
from ebb.decide.comeback import ComebackBound
from ebb.decide.coordinate import ReplicaView, plan_scale_down
from ebb.decide.latency import E2E, TTFT, WAIT, LatencyWindow
from ebb.decide.need import NeedReading, NeedTracker
from ebb.decide.profiles import PROFILE_FLAGS, PROFILE_KNOBS, PROFILES, EbbProfile, profile_with_knobs
from ebb.decide.semantics import WorkloadSignals, recalibrate_weight, veto
from ebb.model.decision import Decision
from ebb.model.decisions import Action
from ebb.model.ids import ReplicaId
from ebb.model.observation import FineSignals, Observation, Pipeline, PodView
from ebb.model.spans import NO_SPANS, Spans
from ebb.window.small import SmallWindow

__all__ = ["PROFILES", "PROFILE_FLAGS", "PROFILE_KNOBS", "EbbPolicy", "EbbProfile", "plan_victims",
           "profile_with_knobs", "served_demand"]

_NS = 1_000_000_000
FAST_LOOKAHEAD_S = 0.5
"""How far ahead (s) the fast path projects the need on the arrival rate of the last two samples:
the shortest need window. Further out, a two-sample clump (the Azure traces log dozens of requests in
one millisecond) would be extrapolated into a burst and buy cold-starting replicas for nothing."""
FloatArray = npt.NDArray[np.float64]


@dataclass
class EbbPolicy:
    """The composed L1 → L2 → L3 policy for one workload (the simulator's serving fleet)."""

    profile: EbbProfile
    slo_ttft_ms: float
    slo_e2e_ms: float
    min_replicas: int = 1
    max_replicas: int = 1000
    initial: int = 1
    spec: str = "ebb"
    interval_s: float = 1.0
    pipeline: Pipeline = field(default_factory=lambda: Pipeline(1, 1, fine_ms=100))
    latency_window_s: float = 30.0
    max_staleness_s: float = 5.0
    base_weight: float = 0.65
    """Class weight (default: the note's latency-critical online class)."""
    alpha: float = 1.2
    cold_start_s: float = 60.0
    """Time (s) from a replica's request to serving: with the decision period and the fast path's
    detection, the comeback horizon. Raised to the slowest cold start the policy sees."""
    warmup_s: float | None = None
    """No scale-down before this much history (s); None = ``warmup_horizons`` horizons."""

    def __post_init__(self) -> None:
        p = self.profile
        # The 1 s L1 window: ten 100 ms buckets of one series (the sketch's answers, exactly; cheaper for ≤ 10 samples).
        self._l1 = SmallWindow(buckets=10, bucket_ms=100.0)
        self._need = NeedTracker(p.slack_fraction * self.slo_ttft_ms / 1000.0, lookahead_s=FAST_LOOKAHEAD_S)
        self._recent_need: deque[tuple[float, float]] = deque()
        self._reading = NeedReading(0.0, 0.0, 0.0, float("nan"))
        self._served_now = 0.0
        self._capacity = 1.0
        """Demand (replica units) one ready replica serves when saturated: 1 until a persistent queue
        shows less (a server whose KV cache or batch limit fills before its slots and prefill do)."""
        self._cycle_peak = 0.0
        self._lat = LatencyWindow(self.latency_window_s, slo_ms=self.slo_ttft_ms, slo_e2e_ms=self.slo_e2e_ms)
        self._queue_hist: deque[tuple[float, bool]] = deque()
        self._over_since: float | None = None
        self._last_up = -math.inf
        self._last_down = -math.inf
        self._last_signal_t = -math.inf
        self._last_busy_t = -math.inf
        """Newest fine sample with any demand or queue (an idle fleet has no latency to measure)."""
        self._weight = self.base_weight
        self._cold_s = self.cold_start_s
        self._shortfalls: deque[tuple[float, float]] = deque()
        self._bound = self._new_bound(self.cold_start_s)
        self._lat.long_window_s = p.breach_horizons * self._bound.horizon_s
        # The served workload as an L2 class: latency-critical online serving (the note's
        # order-fulfilment weights) with the run's TTFT SLO as its P99 bound.
        self.workload_class = WorkloadClass(
            name="llm-serving", base_weight=self.base_weight, alpha=self.alpha,
            p99_latency_ms=self.slo_ttft_ms, veto_margin=self.profile.veto_margin,
            min_replicas=self.min_replicas)
        self._first_t: float | None = None
        self._last_veto: tuple[str, ...] = ()

    @property
    def horizon_s(self) -> float:
        """The comeback horizon (s): cold start + one decision period + one fine sample."""
        return self._bound.horizon_s

    @property
    def react_interval_s(self) -> float | None:
        """The fast path's period (s): every fine sample; None when the profile turns it off."""
        if not self.profile.fast_path or self.pipeline.fine_ms is None:
            return None
        return self.pipeline.fine_ms / 1000.0

    def _new_bound(self, cold_start_s: float) -> ComebackBound:
        h = cold_start_s + self.interval_s + (self.pipeline.fine_ms or 0) / 1000.0
        return ComebackBound(h, memory_s=max(self.profile.memory_horizons * h, 2 * h + 1.0),
                             level_s=self.profile.level_horizons * h, period_s=self.interval_s,
                             tail=self.profile.tail, level_peak=self.profile.level_peak,
                             periodic=self.profile.forecast)

    # -- L1 ---------------------------------------------------------------------------------
    def _ingest(self, obs: Observation) -> None:
        """Feed the fine samples: the L1 window, the need, the queue history and the completions."""
        f = obs.fine
        if f is None or not len(f.t_s):
            self._trim(obs.t_s)
            return
        demand = served_demand(f.prefill_replicas, f.slot_replicas, obs.ready_replicas)
        # One sample (the fluid engine's 1 s bins): scalar reads of the same values, not array ops.
        one = len(demand) == 1 and len(f.t_s) == 1 and len(f.queued) == 1
        self._served_now = float(demand[0]) if one else float(demand.mean())  # x / 1 is x
        self._l1.ingest(demand, (f.t_s * _NS).astype(np.int64))
        self._queue_hist.extend(zip(f.t_s.tolist(), (f.queued > 0).tolist(), strict=True))
        need, reading = self._need.ingest(f.t_s, demand, f.queued, _served(f))
        if len(need):
            self._reading = reading
            self._cycle_peak = max(self._cycle_peak, reading.peak_need_replicas)
            self._recent_need.append((float(f.t_s[-1]), reading.peak_need_replicas))
        self._last_signal_t = max(self._last_signal_t, float(f.t_s[-1]))
        if one:
            if demand[0] > 0 or f.queued[0] > 0:
                self._last_busy_t = max(self._last_busy_t, float(f.t_s[0]))
        else:
            busy = (demand > 0) | (f.queued > 0)
            if busy.any():
                self._last_busy_t = max(self._last_busy_t, float(f.t_s[np.flatnonzero(busy)[-1]]))
        self._lat.add(f.done_t_s, f.done_ttft_ms, f.done_e2e_ms, f.done_weight, f.done_wait_ms)
        self._trim(obs.t_s)

    def _trim(self, t: float) -> None:
        p = self.profile
        while self._queue_hist and self._queue_hist[0][0] <= t - p.queue_surge_s:
            self._queue_hist.popleft()
        self._lat.trim(t)
        while self._recent_need and self._recent_need[0][0] <= t - p.sizing_window_s:
            self._recent_need.popleft()

    def _persistent_queue(self) -> bool:
        """Whether requests queued at every sample of the last ``queue_surge_s``."""
        q = self._queue_hist
        if len(q) < 2:
            return False
        # Each sample stands for the interval before it (100 ms from an agent, 1 s from the fluid
        # engine's bins): the history covers its span plus one interval.
        covered = q[-1][0] - q[0][0] + (q[-1][0] - q[-2][0])
        return covered >= self.profile.queue_surge_s - 0.2 and all(v for _, v in q)

    def _need_now(self) -> float:
        return max((v for _, v in self._recent_need), default=0.0)

    def _replicas(self, demand: float, util: float) -> int:
        """Replicas that serve ``demand`` (replica units) at ``util`` of their learned capacity."""
        return math.ceil(demand / (util * self._capacity) - 1e-9)

    def _learn_capacity(self, ready: int) -> None:
        """Requests queued throughout the last ``queue_surge_s`` with no capacity on its way: the
        fleet is saturated, so what it serves per ready replica is what a replica can serve (kept
        within [0.25, 1]; the latest saturation wins — a server's limits move with its traffic)."""
        if ready > 0 and self._served_now > 0:
            self._capacity = min(1.0, max(0.25, self._served_now / ready))

    def _learn_cold_start(self, pods: tuple[PodView, ...]) -> None:
        """The comeback horizon follows the slowest cold start seen: a replica requested after the
        policy started and ready since. Raised only (a measured cold start longer than the
        configured one by over a second); the need history is replayed into the longer horizon."""
        if self._first_t is None:
            return
        slowest = self._cold_s
        for pv in pods:
            if pv.ready_s is not None and pv.created_s > self._first_t and pv.ready_s - pv.created_s > slowest + 1.0:
                slowest = pv.ready_s - pv.created_s
        if slowest > self._cold_s:
            self._cold_s = slowest
            longer = self._new_bound(slowest)
            longer.replay(self._bound.needs())
            self._bound = longer
            self._lat.long_window_s = self.profile.breach_horizons * longer.horizon_s

    def _learn_shortfall(self, t: float, target: int) -> None:
        """A latency surge to ``target`` replicas: the need model read too little at today's demand.
        Kept, for the comeback memory, as the ratio of ``target`` to the need's mean over that memory
        (slow and stable: the instantaneous level of bursty traffic swings by tens of percent), so
        the floor it sets follows the demand's slow changes."""
        self._shortfalls.append((t, target / max(self._bound.mean_need, 1e-3)))

    def _learned_floor(self, t: float) -> int:
        """Replicas the latency surges of the memory say the current demand needs (0 without any)."""
        while self._shortfalls and self._shortfalls[0][0] < t - self._bound.memory_s:
            self._shortfalls.popleft()
        return self._learned_floor_at(t, self._bound.mean_need)

    def _learned_floor_at(self, t: float, mean_need: float) -> int:
        """:meth:`_learned_floor` at ``mean_need`` without forgetting anything: the shortfalls of the
        memory before ``t`` only (a later call forgets the older ones, its cutoff being later)."""
        cutoff = t - self._bound.memory_s
        ratios = [r for ts, r in self._shortfalls if not ts < cutoff]
        if not ratios:
            return 0
        return math.ceil(max(ratios) * mean_need - 1e-9)

    def _latency_p99(self) -> tuple[float, float]:
        """(end-to-end, wait) weighted P99 (ms) over the latency window; NaN without samples. Only a
        recorded decision shows them, so they are asked for then (the window has not moved since
        the cycle's TTFT P99: nothing in a cycle adds or trims completions after ingesting)."""
        return self._lat.p99(E2E), self._lat.p99(WAIT)

    def _recorded(self, signals: dict[str, float]) -> dict[str, float]:
        """``signals`` with the end-to-end and wait P99s filled in (their keys hold NaN until then)."""
        signals["e2e_p99_ms"], signals["wait_p99_ms"] = self._latency_p99()
        return signals

    # -- read-only views for a guard (the canary gate) ----------------------------------------
    def observe(self, obs: Observation) -> None:
        """Ingest an observation's signals without deciding (while a guard holds the fleet)."""
        if self._first_t is None:
            self._first_t = obs.t_s
        self._ingest(obs)
        self._close_cycle()

    def _close_cycle(self) -> None:
        self._bound.record(self._cycle_peak)
        self._cycle_peak = 0.0

    def ttft_p99_since(self, t0_s: float) -> float:
        """Weighted TTFT P99 (ms) of the completions after ``t0_s``; NaN without any."""
        return self._lat.p99(TTFT, since_s=t0_s)

    def note_scale_up(self, t_s: float) -> None:
        """A guard restored capacity: start the scale-down cooldown from now."""
        self._last_up = t_s

    def gate_queries(self) -> tuple[str, ...]:
        """No metrics gates of its own (the canary guard around it has them)."""
        return ()

    # -- the fast path ----------------------------------------------------------------------
    def react(self, obs: Observation, *, spans: Spans = NO_SPANS) -> Decision | None:
        """Between reconciles: ingest the new fine samples; when the fleet cannot absorb what
        arrives — the need, or the need projected :data:`FAST_LOOKAHEAD_S` ahead on the sustained
        arrival rate, outgrows the ready fleet — a scale-up to it now; else None."""
        if self._first_t is None:
            return None
        self._ingest(obs)
        ready = obs.ready_replicas
        need, r = self._need_now(), self._reading
        if obs.t_s - self._last_signal_t > self.max_staleness_s:
            return None
        # The need bound FAST_LOOKAHEAD_S from now, demand arriving meanwhile at the sustained rate:
        # it leads the need (which waits for the queue to build) by the lookahead. A queue already
        # standing is no new demand in either: capacity asked now arrives after a cold start, by
        # when the fleet has drained it or the need has grown with it.
        ahead = r.ahead_replicas
        size = max(need, ahead)
        if size <= max(ready, 1) * self._capacity:
            return None
        want = min(self.max_replicas, self._replicas(size, self.profile.target_util))
        if want <= obs.spec_replicas:
            return None  # capacity already on its way covers it
        self._last_up = obs.t_s
        with spans.layer("ebb.fast") as s:
            s.set(**{"ebb.fast.need_replicas": need, "ebb.fast.need_ahead_replicas": ahead,
                     "ebb.fast.ready": ready})
        signals = {"need_replicas": need, "need_ahead_replicas": ahead, "rate_replicas": r.rate_replicas,
                   "ready_replicas": float(ready), "spec_replicas": float(obs.spec_replicas),
                   "backlog_replica_s": r.backlog_replicas_s, "cost_replica_s": self._need.cost_replica_s}
        why = (f"fast path: need {need:.1f} replicas > {ready} ready" if need >= ahead else
               f"fast path: need {ahead:.1f} replicas in {FAST_LOOKAHEAD_S:.1f} s > {ready} ready "
               f"(demand arriving at {r.rate_replicas:.1f}, {r.backlog_replicas_s:.1f} replica-s queued)")
        return self._explained(obs.t_s, "scale_up", obs.spec_replicas, want, signals, (why,))

    # -- many holds at once (a simulator's steady fleet) ---------------------------------------
    def hold_through(self, ticks_s: FloatArray, fine: FineSignals, spec_replicas: int, ready_replicas: int) -> int:
        """How many leading reconciles at ``ticks_s`` are provably holds, the state advanced through
        them (:mod:`ebb.decide.hold_block`; the :class:`~ebb.decide.base.HoldsInBlocks` seam)."""
        from ebb.decide.hold_block import hold_ticks  # noqa: PLC0415 (it builds on this module)

        return hold_ticks(self, ticks_s, fine, spec_replicas, ready_replicas)

    def hold_limit(self) -> int:
        """None while a detected period sets the floor (its phase rise is not bounded) or the latency
        window holds a completion that could be late (:func:`~ebb.decide.hold_block.hold_ticks` would
        prove none: it checks the same before the first tick); 8 while the newest sample queued
        (its completions are often late within seconds, and an engine serves the bins after a
        block's stop again: 7 % fewer bins served on a day of ServeGen counts); otherwise no limit
        of its own (a period search due in a block runs inside it)."""
        from ebb.decide.hold_block import window_allows_holds  # noqa: PLC0415 (it builds on this module)

        if self._bound.period_found or not window_allows_holds(self):
            return 0
        return _QUEUED_BLOCK if self._queue_hist and self._queue_hist[-1][1] else 1 << 30

    # -- the cycle ---------------------------------------------------------------------------
    def decide(self, obs: Observation, *, spans: Spans = NO_SPANS) -> Decision:
        """This reconcile's decision (see the module docstring)."""
        p = self.profile
        t = obs.t_s
        if t == 0.0 and not obs.pods:
            return Decision.change(t, 0, max(self.initial, self.min_replicas), policy=self.spec,
                                   reasons=("initial fleet",))
        if self._first_t is None:
            self._first_t = t
        self._learn_cold_start(obs.pods)
        spec = obs.spec_replicas
        ready = max(obs.ready_replicas, 1)
        with spans.layer("ebb.l1") as s1:
            self._ingest(obs)
            d = self._l1.quantile(0.99, int(t * _NS))
            d = 0.0 if math.isnan(d) else d
            queued = self._persistent_queue()
            if queued and obs.ready_replicas >= spec:
                self._learn_capacity(ready)
            cap = ready * self._capacity
            # Burst: demand over burst_fraction of ready capacity for at least 200 ms.
            if d >= p.burst_fraction * cap:
                self._over_since = t if self._over_since is None else self._over_since
            else:
                self._over_since = None
            burst = self._over_since is not None and (t - self._over_since) >= 0.2 or d >= cap
            need = self._need_now()
            self._close_cycle()
            ttft99 = self._lat.p99(TTFT)
            idle = math.isnan(ttft99) and self._first_t is not None and \
                t - max(self._last_busy_t, self._first_t) >= self.latency_window_s and \
                t - self._last_signal_t <= self.max_staleness_s
            # No completion for a whole latency window while fresh samples show no demand and no
            # queue: the fleet is idle, nothing can be late — not "latency unknown" (missing or stale
            # data still is: those samples would not be fresh).
            l2_latency = 0.0 if idle else ttft99
            # L2 vetoes on the TTFT P99 against its SLO; a surge needs latency that more replicas can
            # shorten: the wait before a request's own prefill past the SLO's queueing share (the
            # slack) — or TTFT past the SLO where no wait is reported. A long prompt's own prefill is
            # no shortage of replicas.
            # Breaches since the last scale-up only: the ones before it are answered (capacity is
            # coming or came), and a burst's queue draining after it is no reason to grow again.
            late = self._lat.breaches(p.surge_margin * self.slo_ttft_ms, min_weight=_LATE_MIN_WEIGHT,
                                      share=_LATE_SHARE, since_s=self._last_up) or \
                self._lat.long_breaches(min_weight=_LONG_MIN_WEIGHT, share=0.5 * p.violation_budget)
            s1.set(**{"ebb.l1.demand_p99_replicas": d, "ebb.l1.need_replicas": need,
                      "ebb.l1.burst": bool(burst), "ebb.l1.ttft_p99_ms": ttft99})
        with spans.layer("ebb.l2") as s2:
            self._weight = recalibrate_weight(self.workload_class, self._weight, l2_latency, self.slo_ttft_ms)
            s2.set(**{"ebb.l2.weight": self._weight})
            need_now = self._replicas(need, p.target_util)
            surge = queued or late
            # Surge only when no earlier scale-up is still cold-starting: capacity on its way counts.
            surge = surge and obs.ready_replicas >= spec
            if surge:
                need_now = max(need_now, spec + max(1, math.ceil(spec * p.surge_fraction)))
                if late and self._bound.recent_peak(int(self.latency_window_s / self.interval_s)) <= cap:
                    # Late requests while the need never outgrew the fleet: the need model reads too
                    # little for this traffic (long prompts colliding on a replica, say). A breach
                    # the need saw coming (a burst) is the comeback bound's to remember, not this.
                    self._learn_shortfall(t, min(need_now, self.max_replicas))
            need_now = min(self.max_replicas, max(self.min_replicas, need_now))
            est = self._bound.floor(p.budget)
            learned = self._learned_floor(t)
            signals = {"need_replicas": need, "demand_p99_replicas": d,
                       "queued_throughout_last_s": float(queued), "ttft_p99_ms": ttft99, "e2e_p99_ms": math.nan,
                       "wait_p99_ms": math.nan, "ready_replicas": float(obs.ready_replicas), "spec_replicas": float(spec),
                       "comeback_horizon_s": est.horizon_s, "comeback_budget": est.budget,
                       "comeback_level_replicas": est.level_replicas, "comeback_rise_replicas": est.rise_replicas,
                       "comeback_floor_replicas": est.floor_replicas, "comeback_samples": float(est.samples),
                       "learned_floor_replicas": float(learned), "cost_replica_s": self._need.cost_replica_s,
                       "replica_capacity": self._capacity}
            urgent = surge or burst
            if need_now > spec and (urgent or need_now > spec * (1.0 + p.up_hysteresis)):
                self._last_up = t
                self._lat.forget_breaches()
                why = ("surge: latency" if late else "surge: queue") if surge else "need above target"
                return self._explained(t, "scale_up", spec, need_now, self._recorded(signals), (why,))
            if math.isnan(est.floor_replicas):
                return self._hold(t, spec)
            floor = self._replicas(est.floor_replicas, p.down_util)
            need_hold = min(self.max_replicas, max(self.min_replicas, floor, learned,
                                                   self._replicas(need, p.target_util)))
            signals.update(comeback_period_s=est.period_s, comeback_periods=float(est.periods))
            if est.periods and need_hold > spec:
                # A periodic rise is due within the horizon: capacity asked for now is ready for it.
                self._last_up = t
                return self._explained(t, "scale_up", spec, need_hold, self._recorded(signals), (
                    f"forecast: a rise to {est.floor_replicas:.1f} replicas recurs every {est.period_s:.0f} s "
                    f"(seen at this phase in {est.periods} periods); asked {est.horizon_s:.0f} s ahead",))
            if need_hold >= spec:
                return self._hold(t, spec)
            # A scale-down is wanted: L2 vetoes (fail safe on missing or stale data).
            warm = self.warmup_s if self.warmup_s is not None else p.warmup_horizons * self._bound.horizon_s
            vetoes = []
            if t - self._first_t < warm:
                vetoes.append(f"warming up: {t - self._first_t:.0f} s of history < {warm:.0f} s")
            cooldown_s = p.cooldown_horizons * self._bound.horizon_s
            if t - self._last_up < cooldown_s:
                vetoes.append(f"cooldown: {t - self._last_up:.0f} s since the last scale-up < {cooldown_s:.0f} s")
            if t - self._last_down < p.down_interval_horizons * self._bound.horizon_s:
                return self._hold(t, spec)
            vetoes.extend(veto(self.workload_class, WorkloadSignals(
                workload="serving", class_name=self.workload_class.name, replicas=spec,
                ready_replicas=obs.ready_replicas, latency_p99_ms=l2_latency, latency_p95_ms=float("nan"),
                success_ratio=float("nan"), burst_active=burst, utilisation_ratio=need / ready,
                staleness_s=t - self._last_signal_t), self.max_staleness_s))
            if vetoes:
                key = tuple(v.split(":")[0] for v in vetoes)
                s2.set(**{"ebb.veto.reasons": list(key)})
                # Record a veto when its reasons change, not every second it persists.
                repeated = key == self._last_veto or all(v.startswith("cooldown") for v in vetoes)
                self._last_veto = key
                if repeated:
                    return self._hold(t, spec, tuple(vetoes))
                return self._explained(t, "veto", spec, spec, self._recorded(signals), ("scale-down wanted",), tuple(vetoes))
            self._last_veto = ()
            # Higher weight (a hurting, important class) → smaller steps.
            frac = p.down_fraction * self.base_weight / max(self._weight, 1e-9)
            step = max(1, math.floor(spec * frac))
            target = max(need_hold, spec - step)
        with spans.layer("ebb.l3") as s3:
            victims, limits = plan_victims(obs.pods, spec - target, p.max_unavailable)
            s3.set(**{"ebb.l3.victims": len(victims), "ebb.victims": [str(int(v)) for v in victims]})
            if not victims:
                return self._explained(t, "veto", spec, spec, self._recorded(signals), ("scale-down wanted",), limits)
            target = spec - len(victims)
            self._last_down = t
            risk = self._bound.risk(target * p.down_util * self._capacity) if not est.periods else 0.0
            signals["comeback_risk"] = risk
            basis = (f"the rise seen at this phase of {est.periods} periods of {est.period_s:.0f} s" if est.periods
                     else f"over {est.samples} s of history")
            return self._explained(
                t, "scale_down", spec, target, self._recorded(signals),
                (f"comeback: {target} replicas hold a {est.horizon_s:.0f} s rise with estimated risk "
                 f"{risk:.2%} <= budget {p.budget:.2%} (level {est.level_replicas:.1f} + rise "
                 f"{est.rise_replicas:.1f} replicas, {basis})", *limits),
                victims=tuple(victims))

    def _hold(self, t: float, spec: int, vetoes: tuple[str, ...] = ()) -> Decision:
        """A hold: not recorded, so built without signals (most cycles are holds)."""
        return Decision(t, "hold", spec, spec, policy=self.spec, vetoes=vetoes)

    def _explained(self, t: float, action: Action, frm: int, to: int, signals: dict[str, float],
                   reasons: tuple[str, ...], vetoes: tuple[str, ...] = (),
                   victims: tuple[ReplicaId, ...] = ()) -> Decision:
        """A recorded decision with its whole explanation (signals, weights, plan)."""
        return Decision(t, action, frm, to, policy=self.spec, victims=victims, reasons=reasons, vetoes=vetoes,
                        signals=signals,
                        weights={"workload": self._weight, "base": self.base_weight, "alpha": self.alpha},
                        plan={"profile": self.profile.name, "target_util": self.profile.target_util,
                              "budget": self.profile.budget})


def _served(f: FineSignals) -> FloatArray:
    """The completions' weights, one per request: sources report TTFT and end-to-end as separate
    rows (an agent's sketches; the simulator at the first token and at the end), so the rows with a
    TTFT count — the ones with an end-to-end latency where no row has a TTFT."""
    if len(f.done_weight) != len(f.done_t_s):
        return np.zeros(0)
    ttft = np.isfinite(f.done_ttft_ms) if len(f.done_ttft_ms) == len(f.done_weight) else np.zeros(0, dtype=bool)
    if ttft.any():
        return np.asarray(f.done_weight[ttft], dtype=np.float64)
    e2e = np.isfinite(f.done_e2e_ms) if len(f.done_e2e_ms) == len(f.done_weight) else np.zeros(0, dtype=bool)
    return np.asarray(f.done_weight[e2e], dtype=np.float64)


def served_demand(prefill: FloatArray, slots: FloatArray, ready: int) -> FloatArray:
    """Fleet demand in replica units from the agent's samples: the prefill busy share plus the slot
    occupancy of the time prefill leaves, ``P + S × (1 − P / ready)``.

    A replica splits its time between prefill and decode, and decode of the running sequences
    stalls while others prefill (the H200 calibration's ``1 / (1 − u)`` stretch), so occupancy
    measured at today's prefill share ``u = P / ready`` understates what a smaller fleet (larger
    ``u``) would hold: the decode work is ``S × (1 − u)`` and the prefill work ``P``, and a fleet
    of ``N`` serves both when ``N ≥ P + S (1 − u)``. A saturated replica reads 1.0; the larger of
    the two alone (prefill- or slot-bound traffic) is a lower bound of it.

    One sample (the fluid engine's 1 s bins) takes a scalar path with the same float operations in
    the same order as the array path, so the same bits (signed zeros included); numpy's fixed costs
    would dominate it."""
    if len(prefill) == 1 and len(slots) == 1:
        return np.array([_served_one(float(prefill[0]), float(slots[0]), ready)], dtype=np.float64)
    pf = np.asarray(prefill, dtype=np.float64)
    sv = np.asarray(slots, dtype=np.float64)
    # _served_one's operations element-wise: max(a, b) is "b if b > a else a" (its signed zeros too).
    p = np.where(np.isfinite(pf) & (pf > 0.0), pf, 0.0)
    sl = np.where(np.isfinite(sv) & (sv > 0.0), sv, 0.0)
    u = np.minimum(p / max(ready, 1), 1.0)
    decode = sl * (1.0 - u)
    inner = np.where(decode > p, decode, p)
    total = p + decode
    return np.asarray(np.where(inner > total, inner, total), dtype=np.float64)


def _served_one(prefill: float, slots: float, ready: int) -> float:
    """:func:`served_demand` of one sample: ``np.where(isfinite, maximum(x, 0), 0)``, ``clip`` and
    ``maximum`` as Python's ``min``/``max`` (all operands finite and non-negative here, so numpy's
    NaN and signed-zero rules never apply and both pick the same operand)."""
    p = prefill if math.isfinite(prefill) and prefill > 0.0 else 0.0
    sl = slots if math.isfinite(slots) and slots > 0.0 else 0.0
    u = min(p / max(ready, 1), 1.0)
    decode = sl * (1.0 - u)
    return max(p + decode, max(p, decode))


_LATE_MIN_WEIGHT = 3.0
"""A latency surge needs at least this many requests (weight) that waiting made miss the TTFT SLO in
the latency window: one unlucky collision of two long prompts on a replica is no shortage of replicas."""
_LATE_SHARE = 0.005
"""…and more than this share of the window's requests (five times the 0.1 % SLO budget)."""
_LONG_MIN_WEIGHT = 2.0
"""Over the long window (``breach_horizons``) a second breach at over half the violation budget's
rate is a trend: at Mooncake's 4 requests/s the budget is one request in 1,000 — four minutes — and
waiting for a third spends most of it."""
_QUEUED_BLOCK = 8
"""Reconciles an engine should serve ahead for :meth:`EbbPolicy.hold_through` while the newest
sample queued (a block-size hint: the proof is the same whatever the block)."""


def plan_victims(pods: tuple[PodView, ...], remove: int,
                 max_unavailable: float) -> tuple[list[ReplicaId], tuple[str, ...]]:
    """L3: cold-starting replicas first (they serve nothing yet), then the plan of
    :func:`~ebb.decide.coordinate.plan_scale_down` — least-loaded ready replicas, zone skew ≤ 1
    (per namespace), at most ``max_unavailable`` of the ready replicas per cycle (a PDB)."""
    starting = sorted((p for p in pods if p.ready_s is None), key=lambda p: -int(p.replica))
    victims: list[ReplicaId] = [p.replica for p in starting][:remove]
    left = remove - len(victims)
    if left <= 0:
        return victims, ()
    views = [ReplicaView(replica_id=str(int(p.replica)), workload="serving", namespace="default", zone=p.zone,
                         load=p.inflight if p.inflight is not None else float("nan"), ready=True)
             for p in pods if p.ready_s is not None]
    ready_n = len(views)
    plan = plan_scale_down(views, "serving", left, max_skew=1,
                           pdb_max_unavailable=max(1, math.floor(ready_n * max_unavailable)))
    victims.extend(ReplicaId(int(v.replica_id)) for v in plan.victims)
    return victims, plan.limits
