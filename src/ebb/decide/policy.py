"""The Ebb policy: L1 (sub-second signals) → L2 (workload semantics, SLA veto) → L3 (plan).

One reconcile per second on the signals an Ebb node agent streams at 100 ms, and a fast path at
every fine sample between reconciles. Pure: an :class:`~ebb.model.observation.Observation` in, a
:class:`~ebb.model.decision.Decision` out, no I/O (the :class:`~ebb.decide.base.Policy` and
:class:`~ebb.decide.base.Reactive` seams); the same object runs under the simulator's virtual
clock and the live loop. Every time constant is counted in comeback horizons
``H = cold start + reconcile + fine sample`` (:attr:`EbbPolicy.horizon_s`). What the policy
remembers between reconciles is one typed object, :class:`~ebb.decide.ebb_state.EbbState`
(:attr:`EbbPolicy.state`); its rules past L1 are :mod:`ebb.decide.ebb_rules`.

Each reconcile (:meth:`EbbPolicy.decide`), as named steps:

1. **Sense (L1).** The 100 ms samples become served demand ``P + S × (1 − P / ready)`` (replica
   units, :func:`~ebb.decide.served.served_demand`) — into the 1 s sliding window whose P99 is ``d``
   (a burst is ``d ≥ burst_fraction × ready`` for ≥ 200 ms) — and the **need**
   (:mod:`ebb.decide.need`): the replicas that keep every wait within the slack. Completions (TTFT
   rows with the wait before the request's own prefill, end-to-end rows) go into the latency window
   (:mod:`ebb.decide.latency`). The second's peak need goes into the comeback bound
   (:mod:`ebb.decide.comeback`).
2. **Size up.** ``up = ceil(need / target_util)``, at once when urgent (a surge or a burst),
   else past ``up_hysteresis``. A surge answers requests queued for ``queue_surge_s``, or TTFT
   breaches that waiting caused (≥ 3 and > 0.5 % of the latency window's requests, or over half the
   violation budget across ``breach_horizons``). It is sized to what the fleet needs when the
   capacity lands, one cold start ahead: the demand arriving plus the backlog still queued then,
   drained over a horizon — and there is none when the ready fleet drains the backlog first (the
   ledger states the landing time and what the surge covers). Late requests whose wait the need
   never outgrew (over the long breach window) are a need model reading too little: that surge
   adds ``surge_fraction`` and teaches a replicas-per-need floor. A detected periodic rise due
   within the horizon scales up ahead of it (:mod:`ebb.decide.forecast`).
3. **Floor (L2).** The weight is recalibrated from the TTFT P99 (the note's rule, damped by α). A
   scale-down goes no lower than the **comeback floor** — the capacity whose estimated risk of being
   outgrown before removed capacity returns is within ``budget``, and no lower than what the history
   has shown necessary (the level plus the largest rise seen; the need at the history's start while
   it is in memory) while the history's independent horizons cannot bound the chance of a larger one
   within the budget (95 % upper bound ``1 − 0.05^(1/N)``: 4.9 % for the default hour), at a scale-up's
   headroom until saturation has measured the replica's capacity — the learned floor and the need. Bursts that recur (:mod:`ebb.decide.recurrence`, remembered for
   days) hold their capacity from the shortest gap seen until the next has passed: a scale-up ahead.
4. **Vetoes (L2).** A wanted scale-down is vetoed during the warm-up and the cooldown, while the TTFT
   P99 is within ``veto_margin`` of its SLO, a burst is active, or data is missing or stale (an idle
   fleet is not "latency unknown"). One step per half horizon, at most ``down_fraction`` of the
   fleet (less for a hurting class).
5. **Plan (L3).** Victims are cold-starting replicas, then the least-loaded ready ones, zones balanced
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

A simulator whose fleet is steady may hand the policy a block of reconciles at once
(:meth:`EbbPolicy.hold_through`, the :class:`~ebb.decide.base.HoldsInBlocks` seam): the leading
ones proven plain holds (:mod:`ebb.decide.hold_block`) advance the state as ``decide`` would.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar, NamedTuple

import numpy as np
import numpy.typing as npt

from ebb.config.tiers import SleepTier
from ebb.config.workloads import WorkloadClass
from ebb.decide.comeback import ComebackBound, ComebackEstimate
from ebb.decide.coordinate import ReplicaView, plan_scale_down
from ebb.decide.ebb_rules import bounded, down_vetoes, grows, hold_floor, late, veto_key
from ebb.decide.ebb_state import EbbState
from ebb.decide.hold_block import hold_ticks, holds_possible
from ebb.decide.latency import E2E, TTFT, WAIT
from ebb.decide.profiles import EbbProfile
from ebb.decide.quiet_stretch import QuietStretch, plan_stretch
from ebb.decide.semantics import recalibrate_weight
from ebb.decide.tier_rules import asleep_kept, awoken, learned_wake_s, reserve_awake, tier_floor
from ebb.model.decision import Decision
from ebb.model.decisions import Action
from ebb.model.ids import ReplicaId
from ebb.model.observation import FineSignals, Observation, Pipeline, PodView
from ebb.model.spans import NO_SPANS, SpanNote, Spans

__all__ = ["FAST_LOOKAHEAD_S", "EbbPolicy", "plan_victims", "tier_knobs"]

_NS = 1_000_000_000
FAST_LOOKAHEAD_S = 0.5
"""How far ahead (s) the fast path projects the need on the arrival rate of the last two samples:
the shortest need window. Further out, a two-sample clump (the Azure traces log dozens of requests in
one millisecond) would be extrapolated into a burst and buy cold-starting replicas for nothing."""
_QUEUED_BLOCK = 8
"""Reconciles an engine should serve ahead for :meth:`EbbPolicy.hold_through` while the newest
sample queued (a block-size hint: the proof is the same whatever the block)."""
FloatArray = npt.NDArray[np.float64]


class _Sensed(NamedTuple):
    """One reconcile's L1 reading (step 1), what the later steps decide on (a tuple: built every second)."""

    t: float
    spec: int
    ready_replicas: int
    """Ready replicas as observed (0 possible)."""
    ready: int
    """``max(ready_replicas, 1)``: what demand is divided by."""
    d: float
    """P99 of the 1 s L1 window of served demand (replica units; 0 without samples)."""
    cap: float
    """Ready capacity (replica units): ready × learned capacity."""
    queued: bool
    """Requests queued at every sample of the last ``queue_surge_s``."""
    burst: bool
    need: float
    """The largest need over the sizing window (replica units)."""
    ttft99: float
    """Weighted TTFT P99 of the latency window (ms; NaN without completions)."""
    latency_ms: float
    """What L2 reads: the TTFT P99, or 0 when the fleet is idle (nothing can be late)."""
    late: bool


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
    sleeps: ClassVar[bool] = True
    """Its scale-downs put replicas to sleep when the fleet has an asleep tier (the simulator's
    ``--tier``, :mod:`ebb.sim.sleepers`), and its scale-ups wake them first; with :attr:`wake_s`
    set, the floor it scales down to counts on them (:meth:`_tiered`)."""
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
    wake_s: float | None = None
    """The asleep tier's wake time (s; :mod:`ebb.sim.sleepers`): replicas this policy removes sleep,
    and up to :attr:`sleep_max` of the replicas a cold start's comeback bound holds may sleep, as
    long as the bound at the wake horizon holds the rest (:meth:`_tiered`). None: no tier."""
    sleep_max: int = 0
    """Replicas the tier lets sleep at once."""
    reserve: float | None = None
    """The tier's reserve headroom (``reserve=H``, :attr:`ebb.config.tiers.SleepTier.reserve`): up to
    :attr:`sleep_max` sleepers kept until their TTL, all woken at a scale-up, and H × the sized need
    running. None: no reserve (the cold floor decides which sleepers stay)."""
    state: EbbState = field(init=False, repr=False, compare=False)
    """What the policy remembers between decisions (:class:`~ebb.decide.ebb_state.EbbState`)."""
    workload_class: WorkloadClass = field(init=False, repr=False, compare=False)
    """The served workload as an L2 class: latency-critical online serving (the note's
    order-fulfilment weights) with the run's TTFT SLO as its P99 bound."""

    def __post_init__(self) -> None:
        p = self.profile
        bound = self._new_bound(self.cold_start_s)
        if self.wake_s is not None and not (self.wake_s >= 0 and self.sleep_max >= 1):
            raise ValueError(f"a tier needs wake_s >= 0 and sleep_max >= 1, got {self.wake_s!r}, {self.sleep_max!r}")
        if self.reserve is not None and (self.wake_s is None or not self.reserve >= 1.0):
            raise ValueError(f"a reserve needs a tier and a headroom >= 1, got {self.reserve!r}")
        self.state = EbbState(
            bound=bound, slack_s=p.slack_fraction * self.slo_ttft_ms / 1000.0, lookahead_s=FAST_LOOKAHEAD_S,
            latency_window_s=self.latency_window_s, slo_ttft_ms=self.slo_ttft_ms, slo_e2e_ms=self.slo_e2e_ms,
            long_window_s=p.breach_horizons * bound.horizon_s, queue_surge_s=p.queue_surge_s,
            sizing_window_s=p.sizing_window_s, weight=self.base_weight, cold_start_s=self.cold_start_s,
            max_staleness_s=self.max_staleness_s)
        if self.wake_s is not None:  # the same memory as the cold bound: rises within a wake, for an hour
            self.state.wake_bound = self._new_bound(self.wake_s, memory_s=bound.memory_s)
        self.workload_class = WorkloadClass(
            name="llm-serving", base_weight=self.base_weight, alpha=self.alpha,
            p99_latency_ms=self.slo_ttft_ms, veto_margin=self.profile.veto_margin,
            min_replicas=self.min_replicas)

    @property
    def horizon_s(self) -> float:
        """The comeback horizon (s): cold start + one decision period + one fine sample."""
        return self.state.bound.horizon_s

    @property
    def react_interval_s(self) -> float | None:
        """The fast path's period (s): every fine sample; None when the profile turns it off."""
        if not self.profile.fast_path or self.pipeline.fine_ms is None:
            return None
        return self.pipeline.fine_ms / 1000.0

    def _new_bound(self, cold_start_s: float, memory_s: float | None = None) -> ComebackBound:
        h = cold_start_s + self.interval_s + (self.pipeline.fine_ms or 0) / 1000.0
        memory = max(self.profile.memory_horizons * h, 2 * h + 1.0) if memory_s is None else memory_s
        return ComebackBound(h, memory_s=memory,
                             level_s=self.profile.level_horizons * h, period_s=self.interval_s,
                             tail=self.profile.tail, level_peak=self.profile.level_peak,
                             periodic=self.profile.forecast)

    # -- the cycle ---------------------------------------------------------------------------
    def decide(self, obs: Observation, *, spans: Spans = NO_SPANS) -> Decision:
        """This reconcile's decision: sense → size up → floor → vetoes → plan (module docstring)."""
        t = obs.t_s
        if t == 0.0 and not obs.pods:
            return Decision.change(t, 0, max(self.initial, self.min_replicas), policy=self.spec,
                                   reasons=("initial fleet",))
        st = self.state
        if st.first_t is None:
            st.first_t = t
        self._learn_cold_start(obs.pods)
        self._learn_wake(obs.wake_s_seen)
        with spans.layer("ebb.l1") as s1:
            l1 = self._sense(obs, s1)
        with spans.layer("ebb.l2") as s2:
            st.weight = recalibrate_weight(self.workload_class, st.weight, l1.latency_ms, self.slo_ttft_ms)
            s2.set(**{"ebb.l2.weight": st.weight})
            need_now, surge, landing = self._size_up(l1)
            est = st.bound.floor(self.profile.budget)
            learned = st.learned_floor(t)
            signals = self._signals(l1, est, learned)
            if grows(self, need_now, l1.spec, surge or l1.burst):
                return self._scale_up(l1, self._awoken(need_now, l1.spec, obs.asleep_replicas), surge, landing,
                                      signals)
            rec = st.bursts.expect(t)
            held = bounded(self, st.replicas(rec.peak_need_replicas, self.profile.target_util)) \
                if rec is not None and rec.holding(t) else 0
            if rec is not None and held > l1.spec:
                st.last_up = t
                return self._explained(t, "scale_up", l1.spec, held, self._recorded(signals), (rec.describe(t),))
            if math.isnan(est.floor_replicas):
                return self._hold(t, l1.spec)  # no rise with a complete horizon yet: no evidence
            held_at, why_floor = self._comeback_floor(est, signals)
            sized = st.replicas(l1.need, self.profile.target_util)
            floor = max(held, hold_floor(self, held_at, learned, sized))
            floor, why_floor = self._tiered(floor, why_floor, max(sized, learned), l1.spec + obs.asleep_replicas,
                                            signals)
            floor, why_floor = self._reserved(floor, why_floor, max(sized, learned), signals)
            signals.update(comeback_period_s=est.period_s, comeback_periods=float(est.periods))
            if est.periods and floor > l1.spec:
                return self._forecast_up(l1, floor, est, signals)
            if floor >= l1.spec:
                return self._hold(t, l1.spec)
            vetoed = self._vetoed(l1, signals, s2)
            if vetoed is not None:
                return vetoed
            target = self._step_down(l1.spec, floor)
        with spans.layer("ebb.l3") as s3:
            return self._planned_down(obs, l1, target, est, signals, s3, why_floor)

    def _sense(self, obs: Observation, span: SpanNote) -> _Sensed:
        """Step 1 (L1): ingest the samples, read the window's P99, the queue, the burst timer, the
        need, and the latency window's P99 and lateness; close the comeback bound's cycle."""
        p, st, t = self.profile, self.state, obs.t_s
        spec, ready = obs.spec_replicas, max(obs.ready_replicas, 1)
        st.ingest(obs.fine, obs.ready_replicas, t)
        d = st.l1.quantile(0.99, int(st.read_time(t) * _NS))
        d = 0.0 if math.isnan(d) else d
        queued = st.persistent_queue()
        if queued and obs.ready_replicas >= spec and st.reading.rate_replicas >= st.served_now * (1 - 1e-9) and \
                all(pv.ready_s is None or pv.ready_s <= t - p.queue_surge_s for pv in obs.pods):
            # A queue not draining, served by a fleet ready throughout it (not one that just landed):
            # the fleet serves all it can.
            st.learn_capacity(ready)
        cap = ready * st.capacity
        burst = st.burst_step(t, d, p.burst_fraction * cap, cap)
        if st.cycle_peak > cap:
            st.last_outgrown_t = t
        need = st.need_now()
        st.close_cycle(t, cap)
        ttft99 = st.latency.p99(TTFT)
        # No completion for a whole latency window while fresh samples show no demand and no queue:
        # the fleet is idle, nothing can be late — not "latency unknown" (missing or stale data still
        # is: those samples would not be fresh).
        idle = math.isnan(ttft99) and st.first_t is not None and \
            t - max(st.last_busy_t, st.first_t) >= self.latency_window_s and \
            t - st.last_signal_t <= self.max_staleness_s
        span.set(**{"ebb.l1.demand_p99_replicas": d, "ebb.l1.need_replicas": need,
                    "ebb.l1.burst": bool(burst), "ebb.l1.ttft_p99_ms": ttft99})
        return _Sensed(t, spec, obs.ready_replicas, ready, d, cap, queued, burst, need, ttft99,
                       0.0 if idle else ttft99, late(self))

    def _size_up(self, l1: _Sensed) -> tuple[int, bool, float]:
        """Step 2: the replicas the need asks for, whether this is a surge, and the landing need it was
        sized to (NaN unless a surge sized by :meth:`_landing_need`). A surge needs latency
        more replicas can shorten (the wait before a request's own prefill past the SLO's queueing
        share — a long prompt's own prefill is no shortage of replicas) or a persistent queue, and no
        earlier scale-up still cold-starting (capacity on its way counts)."""
        p, st = self.profile, self.state
        need_now = st.replicas(l1.need, p.target_util)
        if not ((l1.queued or l1.late) and l1.ready_replicas >= l1.spec):
            return bounded(self, need_now), False, math.nan
        # Late requests while the need never outgrew the fleet — over the span the lateness rules
        # look back, when a late request may have started waiting: the need model reads too
        # little for this traffic (long prompts colliding on a replica, say). A breach the need saw
        # coming (a burst) is the comeback bound's to remember, not this.
        landing = self._landing_need(l1)
        if self._shortfall(l1) or math.isnan(landing):  # no cost per request yet: the backlog is not known
            need_now = max(need_now, l1.spec + max(1, math.ceil(l1.spec * p.surge_fraction)))
            st.learn_shortfall(l1.t, min(need_now, self.max_replicas))
            return bounded(self, need_now), True, math.nan
        if landing > 0:
            # The need counts the standing backlog to drain within the slack: by the time capacity
            # lands, what is left of it is what the landing need holds.
            need_now = max(st.replicas(landing, p.target_util), l1.spec + 1)
            return bounded(self, need_now), True, landing
        return bounded(self, need_now), False, math.nan  # the fleet drains the queue before more capacity lands

    def _shortfall(self, l1: _Sensed) -> bool:
        """Late requests whose wait the need never outgrew: the need stayed within the ready capacity
        over the long breach window the lateness rule counts over, the latency window and a horizon (a
        late request's wait began up to that long before it completed) — a need model reading too little."""
        span_s = self.state.latency.long_window_s + self.latency_window_s + self.horizon_s
        return l1.late and l1.t - self.state.last_outgrown_t >= span_s

    def _landing_need(self, l1: _Sensed) -> float:
        """What the fleet needs when capacity asked now lands, one cold start ahead (replica units): the
        demand arriving (sustained) and the backlog still queued then, drained over one horizon; 0 when
        the ready fleet drains the backlog before then; NaN before the first completion (no cost per
        request: the backlog is not known). A queued request occupies one replica at most, as in the
        need (:mod:`ebb.decide.need`): past one horizon of work per request, the backlog left asks for
        one replica per request — three queued 300 s jobs are 3 replicas, not 900 replica-s / 61 s ≈ 15."""
        r, h = self.state.reading, self.horizon_s
        left = r.backlog_replicas_s + (r.rate_replicas - l1.cap) * self.state.cold_start_s
        if math.isnan(left):
            return math.nan
        per_request = min(1.0, h / r.cost_replica_s) if r.cost_replica_s > 0 else 1.0
        return r.rate_replicas + left * per_request / h if left > 0 else 0.0

    def _scale_up(self, l1: _Sensed, to: int, surge: bool, landing: float, signals: dict[str, float]) -> Decision:
        """Step 2's answer: the scale-up, the cooldown started and the breaches it answers forgotten;
        a surge sized to its ``landing`` need (not NaN) says what it covers."""
        st = self.state
        st.last_up = l1.t
        st.latency.forget_breaches()
        why = ("surge: latency" if l1.late else "surge: queue") if surge else "need above target"
        if surge and not math.isnan(landing):
            r = st.reading
            why += (f" — lands in {st.cold_start_s:.0f} s: covers demand arriving at {r.rate_replicas:.1f} replicas "
                    f"and {r.backlog_replicas_s:.1f} replica-s queued (need then {landing:.1f})")
        return self._explained(l1.t, "scale_up", l1.spec, to, self._recorded(signals), (why,))

    def _forecast_up(self, l1: _Sensed, to: int, est: ComebackEstimate, signals: dict[str, float]) -> Decision:
        """A periodic rise is due within the horizon: capacity asked for now is ready for it."""
        self.state.last_up = l1.t
        return self._explained(l1.t, "scale_up", l1.spec, to, self._recorded(signals), (
            f"forecast: a rise to {est.floor_replicas:.1f} replicas recurs every {est.period_s:.0f} s "
            f"(seen at this phase in {est.periods} periods); asked {est.horizon_s:.0f} s ahead",))

    def _awoken(self, want: int, spec: int, asleep: int) -> int:
        """A scale-up to ``want`` with sleepers at hand wakes every one the cold floor counted on at
        once (up to :attr:`max_replicas`): a wake is the first answer to a burst, it costs seconds of
        running GPUs that are held anyway, and one replica a tick would leave the burst queueing
        (:func:`~ebb.decide.tier_rules.awoken`)."""
        if self.wake_s is None:
            return want
        return awoken(want, spec, asleep, self.state.cold_floor, self.max_replicas, reserve=self.reserve is not None)

    def asleep_wanted(self, running: int) -> int | None:
        """Sleepers to keep beside ``running`` replicas: what the last cold floor holds beyond them
        (those it counted on: :meth:`_tiered`); with a reserve, :attr:`sleep_max` (the TTL releases
        them); None before any floor (the tier's TTL decides). :func:`~ebb.decide.tier_rules.asleep_kept`."""
        return asleep_kept(self.state.cold_floor, running, self.sleep_max if self.reserve is not None else None)

    def _reserved(self, floor: int, why: str, sized: int, signals: dict[str, float]) -> tuple[int, str]:
        """With a reserve (:attr:`reserve` = H), the floor keeps H × ``sized`` running: a burst up
        to H× the need is served while the sleepers wake. Unchanged without one.
        :func:`~ebb.decide.tier_rules.reserve_awake`."""
        if self.reserve is None:
            return floor, why
        awake = reserve_awake(sized, self.reserve, self.max_replicas)
        signals.update(tier_reserve_running_replicas=float(awake))
        if awake <= floor:
            return floor, why
        return awake, (f"{why}; " if why else "") + (
            f"reserve: {awake} running ({self.reserve:g}x the sized need {sized}) while the rest sleep, "
            f"back in {self.wake_s:g} s")

    def _tiered(self, floor: int, why: str, sized: int, reachable: int, signals: dict[str, float]) -> tuple[int, str]:
        """The floor with an asleep tier. Of the ``floor`` replicas a cold start's rules hold (the
        comeback bound, the learned and recurring floors) — or of the ``reachable`` ones, running or
        asleep, when fewer —, up to :attr:`sleep_max` may sleep: a sleeper comes back in
        :attr:`wake_s`, so what the fleet can field within a cold start never shrinks, while the
        running replicas cover the need now and what the latency surges taught (``sized``: the
        sized need and the learned floor) and what the comeback bound at the wake horizon holds (the
        same rules over the rises within a wake). Unchanged without a tier. The arithmetic is
        :func:`~ebb.decide.tier_rules.tier_floor` (FleetEbb applies its fleet twin)."""
        st = self.state
        if st.wake_bound is None or self.wake_s is None:
            return floor, why
        st.cold_floor = floor
        est = st.wake_bound.floor(self.profile.budget)
        if math.isnan(est.floor_replicas):
            return floor, why  # no rise over a whole wake horizon yet: no evidence to sleep on
        wake_at, _ = self._comeback_floor(est, {}, st.wake_bound)
        tiered = tier_floor(floor, wake_at, sized, reachable, self.sleep_max, self.min_replicas, self.max_replicas)
        signals.update(tier_wake_s=self.wake_s, tier_wake_floor_replicas=float(wake_at),
                       tier_cold_floor_replicas=float(floor))
        if tiered >= floor:
            return floor, why
        return tiered, (f"{why}; " if why else "") + (
            f"{floor - tiered} of the {floor} replicas a cold start needs may sleep: back in "
            f"{self.wake_s:g} s, and {max(wake_at, sized)} hold the need and what can arrive within a wake")

    def _comeback_floor(self, est: ComebackEstimate, signals: dict[str, float],
                        bound: ComebackBound | None = None) -> tuple[int, str]:
        """Step 3's comeback floor (replicas) and what raised it. Past a detected period, the phase
        rise as estimated. Otherwise no lower than what the history has shown necessary (level + the
        largest rise seen, :meth:`~ebb.decide.comeback.HistoryBound.held_replicas`) while the history
        cannot bound the chance of a larger one within the budget
        (:meth:`~ebb.decide.comeback.ComebackBound.history_bound`: always, at the default hour of
        memory and 0.1 % budget — 59 horizons bound it at 4.9 %), at
        :meth:`~ebb.decide.ebb_state.EbbState.history_util` (a scale-up's headroom until a saturated fleet
        has measured the replica's capacity); the reason says so."""
        st, p = self.state, self.profile
        at = st.replicas(est.floor_replicas, p.down_util)
        if est.periods:
            return at, ""
        hist = (bound or st.bound).history_bound()
        signals.update(comeback_risk_bound=hist.risk_bound, comeback_history_s=hist.history_s)
        if not hist.risk_bound > p.budget:
            return at, ""
        seen = hist.held_replicas(est.level_replicas)
        shown = (f"the need of {hist.opening_need_replicas:.1f} replicas at the history's start"
                 if hist.opening_need_replicas > est.level_replicas + hist.largest_rise_replicas else
                 f"the largest rise seen (level {est.level_replicas:.1f} + {hist.largest_rise_replicas:.1f} replicas)")
        util = st.history_util(p)
        measured = "measured" if st.capacity_measured else "the cost model's"
        return max(at, st.replicas(seen, util)), (
            f"history {hist.history_s / 60:.0f} min ({hist.horizons:.0f} horizons): risk bound "
            f"{hist.risk_bound:.1%} > budget {p.budget:.2%}, so no lower than {shown} at {util:.0%} of "
            f"{measured} capacity: a larger first-ever burst is not covered")

    def _vetoed(self, l1: _Sensed, signals: dict[str, float], span: SpanNote) -> Decision | None:
        """Step 4: a plain hold while the last scale-down is too recent; a veto (recorded when its
        reasons change, a hold naming them when they repeat or are cooldowns only); None to go on."""
        st = self.state
        vetoes = down_vetoes(self, l1.t, l1.spec, l1.ready_replicas, l1.latency_ms, l1.burst, l1.need / l1.ready)
        if vetoes is None:
            return self._hold(l1.t, l1.spec)
        if not vetoes:
            st.last_veto = ()
            return None
        key = veto_key(vetoes)
        span.set(**{"ebb.veto.reasons": list(key)})
        repeated = key == st.last_veto or all(v.startswith("cooldown") for v in vetoes)
        st.last_veto = key
        if repeated:
            return self._hold(l1.t, l1.spec, vetoes)
        return self._explained(l1.t, "veto", l1.spec, l1.spec, self._recorded(signals), ("scale-down wanted",),
                               vetoes)

    def _step_down(self, spec: int, floor: int) -> int:
        """One step: at most ``down_fraction`` of the fleet, smaller for a hurting (heavier) class."""
        frac = self.profile.down_fraction * self.base_weight / max(self.state.weight, 1e-9)
        step = max(1, math.floor(spec * frac))
        return max(floor, spec - step)

    def _planned_down(self, obs: Observation, l1: _Sensed, target: int, est: ComebackEstimate,
                      signals: dict[str, float], span: SpanNote, why_floor: str) -> Decision:
        """Step 5 (L3): the victims, and the scale-down with its comeback risk — or a veto naming the
        limits that left no victim."""
        p, st, spec = self.profile, self.state, l1.spec
        victims, limits = plan_victims(obs.pods, spec - target, p.max_unavailable)
        span.set(**{"ebb.l3.victims": len(victims), "ebb.victims": [str(int(v)) for v in victims]})
        if not victims:
            return self._explained(l1.t, "veto", spec, spec, self._recorded(signals), ("scale-down wanted",), limits)
        target = spec - len(victims)
        st.last_down = l1.t
        # With an asleep tier the replicas back within a cold start are the running ones and the sleepers
        # the cold floor counts on (victims sleep while there is room); within a wake, the running ones.
        asleep = self._asleep_after(obs.asleep_replicas, len(victims), target)
        reach = target + asleep
        risk = st.bound.risk(reach * p.down_util * st.capacity) if not est.periods else 0.0
        signals["comeback_risk"] = risk
        basis = (f"the rise seen at this phase of {est.periods} periods of {est.period_s:.0f} s" if est.periods
                 else f"over {est.samples} s of history")
        held = f"{target} replicas" if not asleep else f"{target} running + {asleep} asleep replicas"
        reasons = [f"comeback: {held} hold a {est.horizon_s:.0f} s rise with estimated risk {risk:.2%} "
                   f"{_vs(risk, p.budget)} budget {p.budget:.2%} (level {est.level_replicas:.1f} + rise "
                   f"{est.rise_replicas:.1f} replicas, {basis})"]
        if asleep and st.wake_bound is not None and self.wake_s is not None:
            wake_risk = st.wake_bound.risk(target * p.down_util * st.capacity)
            signals["tier_wake_risk"] = wake_risk
            reasons.append(f"within a wake ({st.wake_bound.horizon_s:.1f} s: {self.wake_s:g} s to wake + a decision) "
                           f"the {target} running hold a rise with estimated risk {wake_risk:.2%} "
                           f"{_vs(wake_risk, p.budget)} budget {p.budget:.2%}")
        return self._explained(l1.t, "scale_down", spec, target, self._recorded(signals),
                               (*reasons, *((why_floor,) if why_floor else ()), *limits), victims=tuple(victims))

    def _asleep_after(self, asleep: int, victims: int, running: int) -> int:
        """Sleepers once this scale-down's victims drained: at most :attr:`sleep_max`, and no more than
        the cold floor counts on beyond ``running`` (the rest are released); 0 without a tier."""
        wanted = self.asleep_wanted(running)
        if self.wake_s is None or wanted is None:
            return 0
        return min(self.sleep_max, asleep + victims, wanted)

    # -- what the policy learns ------------------------------------------------------------------
    def _learn_cold_start(self, pods: tuple[PodView, ...]) -> None:
        """The comeback horizon follows the slowest cold start seen: a replica requested after the
        policy started and ready since. Raised only (a measured cold start longer than the
        configured one by over a second); the need history is replayed into the longer horizon."""
        st = self.state
        if st.first_t is None:
            return
        slowest = st.cold_start_s
        for pv in pods:
            if pv.ready_s is not None and pv.created_s > st.first_t and pv.ready_s - pv.created_s > slowest + 1.0:
                slowest = pv.ready_s - pv.created_s
        if slowest > st.cold_start_s:
            longer = self._new_bound(slowest)
            st.adopt_bound(longer, slowest, self.profile.breach_horizons * longer.horizon_s)

    def _learn_wake(self, seen_s: float | None) -> None:
        """The tier's wake time follows the slowest wake the actuator measured, raised only
        (:func:`~ebb.decide.tier_rules.learned_wake_s`); the wake memory is replayed into the longer
        horizon, so nothing learned is lost."""
        st = self.state
        if self.wake_s is None or st.wake_bound is None:
            return
        learned = learned_wake_s(self.wake_s, seen_s)
        if learned > self.wake_s:
            st.adopt_wake_bound(self._new_bound(learned, memory_s=st.wake_bound.memory_s))
            self.wake_s = learned

    # -- the explanation ---------------------------------------------------------------------------
    def _signals(self, l1: _Sensed, est: ComebackEstimate, learned: int) -> dict[str, float]:
        """What a recorded decision shows (the end-to-end and wait P99s filled in by :meth:`_recorded`)."""
        st = self.state
        return {"need_replicas": l1.need, "demand_p99_replicas": l1.d,
                "queued_throughout_last_s": float(l1.queued), "ttft_p99_ms": l1.ttft99, "e2e_p99_ms": math.nan,
                "wait_p99_ms": math.nan, "ready_replicas": float(l1.ready_replicas), "spec_replicas": float(l1.spec),
                "comeback_horizon_s": est.horizon_s, "comeback_budget": est.budget,
                "comeback_level_replicas": est.level_replicas, "comeback_rise_replicas": est.rise_replicas,
                "comeback_floor_replicas": est.floor_replicas, "comeback_samples": float(est.samples),
                "l2_latency_ms": l1.latency_ms,
                "learned_floor_replicas": float(learned), "cost_replica_s": st.need.cost_replica_s,
                "replica_capacity": st.capacity}

    def _recorded(self, signals: dict[str, float]) -> dict[str, float]:
        """``signals`` with the end-to-end and wait P99s filled in (their keys hold NaN until then).
        Only a recorded decision shows them, so they are asked for then (the window has not moved
        since the cycle's TTFT P99: nothing in a cycle adds or trims completions after ingesting)."""
        lat = self.state.latency
        signals["e2e_p99_ms"], signals["wait_p99_ms"] = lat.p99(E2E), lat.p99(WAIT)
        return signals

    def _hold(self, t: float, spec: int, vetoes: tuple[str, ...] = ()) -> Decision:
        """A hold: not recorded, so built without signals (most cycles are holds)."""
        return Decision(t, "hold", spec, spec, policy=self.spec, vetoes=vetoes)

    def _explained(self, t: float, action: Action, frm: int, to: int, signals: dict[str, float],
                   reasons: tuple[str, ...], vetoes: tuple[str, ...] = (),
                   victims: tuple[ReplicaId, ...] = ()) -> Decision:
        """A recorded decision with its whole explanation (signals, weights, plan)."""
        return Decision(t, action, frm, to, policy=self.spec, victims=victims, reasons=reasons, vetoes=vetoes,
                        signals=signals,
                        weights={"workload": self.state.weight, "base": self.base_weight, "alpha": self.alpha},
                        plan={"profile": self.profile.name, "target_util": self.profile.target_util,
                              "budget": self.profile.budget})

    # -- read-only views for a guard (the canary gate) ----------------------------------------
    def observe(self, obs: Observation) -> None:
        """Ingest an observation's signals without deciding (while a guard holds the fleet)."""
        st = self.state
        if st.first_t is None:
            st.first_t = obs.t_s
        st.ingest(obs.fine, obs.ready_replicas, obs.t_s)
        st.close_cycle(obs.t_s, max(obs.ready_replicas, 1) * st.capacity)

    def ttft_p99_since(self, t0_s: float) -> float:
        """Weighted TTFT P99 (ms) of the completions after ``t0_s``; NaN without any."""
        return self.state.latency.p99(TTFT, since_s=t0_s)

    def note_scale_up(self, t_s: float) -> None:
        """A guard restored capacity: start the scale-down cooldown from now."""
        self.state.last_up = t_s

    def gate_queries(self) -> tuple[str, ...]:
        """No metrics gates of its own (the canary guard around it has them)."""
        return ()

    # -- the fast path ----------------------------------------------------------------------
    def react(self, obs: Observation, *, spans: Spans = NO_SPANS) -> Decision | None:
        """Between reconciles: ingest the new fine samples; when the fleet cannot absorb what
        arrives — the need, or the need projected :data:`FAST_LOOKAHEAD_S` ahead on the sustained
        arrival rate, outgrows the ready fleet — a scale-up to it now; else None."""
        st = self.state
        if st.first_t is None:
            return None
        st.ingest(obs.fine, obs.ready_replicas, obs.t_s)
        ready = obs.ready_replicas
        need, r = st.need_now(), st.reading
        if obs.t_s - st.last_signal_t > self.max_staleness_s:
            return None
        # The need bound FAST_LOOKAHEAD_S from now, demand arriving meanwhile at the sustained rate:
        # it leads the need (which waits for the queue to build) by the lookahead. A queue already
        # standing is no new demand in either: capacity asked now arrives after a cold start, by
        # when the fleet has drained it or the need has grown with it.
        ahead = r.ahead_replicas
        size = max(need, ahead)
        if size <= max(ready, 1) * st.capacity:
            return None
        want = min(self.max_replicas, st.replicas(size, self.profile.target_util))
        if want <= obs.spec_replicas:
            return None  # capacity already on its way covers it
        want = self._awoken(want, obs.spec_replicas, obs.asleep_replicas)
        st.last_up = obs.t_s
        with spans.layer("ebb.fast") as s:
            s.set(**{"ebb.fast.need_replicas": need, "ebb.fast.need_ahead_replicas": ahead,
                     "ebb.fast.ready": ready})
        signals = {"need_replicas": need, "need_ahead_replicas": ahead, "rate_replicas": r.rate_replicas,
                   "ready_replicas": float(ready), "spec_replicas": float(obs.spec_replicas),
                   "backlog_replica_s": r.backlog_replicas_s, "cost_replica_s": st.need.cost_replica_s}
        why = (f"fast path: need {need:.1f} replicas > {ready} ready" if need >= ahead else
               f"fast path: need {ahead:.1f} replicas in {FAST_LOOKAHEAD_S:.1f} s > {ready} ready "
               f"(demand arriving at {r.rate_replicas:.1f}, {r.backlog_replicas_s:.1f} replica-s queued)")
        return self._explained(obs.t_s, "scale_up", obs.spec_replicas, want, signals, (why, *self._unseen(size)))

    def quiet_stretch(self, t_s: list[float], reacts: list[bool], prefill: list[float], slots: list[float],
                      queued: list[float], ready_replicas: int, spec_replicas: int) -> QuietStretch | None:
        """A stretch of fine samples with no event in it, planned at once
        (:mod:`ebb.decide.quiet_stretch`; the :class:`~ebb.decide.base.QuietStretches` seam)."""
        return plan_stretch(self, t_s, reacts, prefill, slots, queued, ready_replicas, spec_replicas)

    def _unseen(self, need: float) -> tuple[str, ...]:
        """A reason to add when ``need`` is past everything the history has seen (a first-ever burst):
        what the history held and when capacity asked now lands — requests meanwhile wait."""
        st = self.state
        hist = st.bound.history_bound()
        seen = hist.held_replicas(st.bound.level) if hist.horizons > 0 else math.nan
        if not need > seen and not math.isnan(seen):
            return ()
        held = f"the largest need in {hist.history_s / 60:.0f} min of history is {seen:.1f}" \
            if not math.isnan(seen) else "no history yet"
        return (f"first-ever burst: need {need:.1f} replicas, {held}; capacity asked now lands in "
                f"{st.cold_start_s:.0f} s, requests wait until then",)

    # -- many holds at once (a simulator's steady fleet) ---------------------------------------
    def hold_through(self, ticks_s: FloatArray, fine: FineSignals, spec_replicas: int, ready_replicas: int) -> int:
        """How many leading reconciles at ``ticks_s`` are provably holds, the state advanced through
        them (:mod:`ebb.decide.hold_block`; the :class:`~ebb.decide.base.HoldsInBlocks` seam)."""
        return hold_ticks(self, ticks_s, fine, spec_replicas, ready_replicas)

    def hold_limit(self) -> int:
        """0 while a detected period sets the floor (its phase rise is not bounded) or the latency
        window holds a completion that could be late (:func:`~ebb.decide.hold_block.hold_ticks` would
        prove none: it checks the same before the first tick); 8 while the newest sample queued
        (its completions are often late within seconds, and an engine serves the bins after a
        block's stop again: 7 % fewer bins served on a day of ServeGen counts); otherwise no limit
        of its own (a period search due in a block runs inside it)."""
        if not holds_possible(self):
            return 0
        q = self.state.queue_hist
        return _QUEUED_BLOCK if q and q[-1][1] else 1 << 30


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


def _vs(risk: float, budget: float) -> str:
    """How a risk compares with the budget, as the explanation says it."""
    return "<=" if risk <= budget else ">"


class TierKnobs(NamedTuple):
    """:class:`EbbPolicy`'s fields for an asleep tier."""

    wake_s: float | None
    sleep_max: int
    reserve: float | None = None


def tier_knobs(tier: SleepTier | None) -> TierKnobs:
    """The ``wake_s``, ``sleep_max`` and ``reserve`` an :class:`EbbPolicy` gets for ``tier`` (None:
    no tier, (None, 0, None)): the one mapping the simulator (:mod:`ebb.sim.policies`) and the live
    loop (:mod:`ebb.live.policy_spec`) share."""
    return TierKnobs(None, 0) if tier is None else TierKnobs(tier.wake_s, tier.max_replicas, tier.reserve)
