"""The Ebb policy: L1 (sub-second signals) → L2 (workload semantics, SLA veto) → L3 (plan).

One reconcile per second on the signals an Ebb node agent streams at 100 ms. Pure: an
:class:`~ebb.model.observation.Observation` in, a :class:`~ebb.model.decision.Decision` out, no
I/O (the :class:`~ebb.decide.base.Policy` seam); the same object runs under the simulator's
virtual clock and the live loop.

Each cycle:

1. **L1.** The agent's 100 ms fleet samples — demand in replica units,
   ``max(prefill busy share, (running + queued) / max batch)`` summed over replicas — go into
   a sliding window (10 × 100 ms buckets, :class:`~ebb.window.sliding.SlidingWindow`); its P99
   is the current demand ``d``. A burst is ``d ≥ burst_fraction × ready`` sustained ≥ 200 ms.
   Request completions give TTFT and end-to-end P99 over the last ``latency_window_s``.
2. **Sizing.** ``m`` = mean demand over ``sizing_window_s`` (2 s, the TTFT SLO: shorter bursts
   queue without breaking it). ``up = ceil(m / target_util)``; scale-down is peak-aware:
   ``down = ceil(max m over the last hold_s / target_util)`` — averages over minutes hide the
   bursts that break SLAs. With ``backlog_weight`` w > 0 the router backlog
   ``b = ready × queued / running`` (replica units) joins the scale-up demand:
   ``up = ceil((m + w·b) / target_util)``, at most ``2 × ready`` (one step at most doubles
   the fleet; cold-starting capacity counts against it); scale-down memory keeps ``m`` only,
   since a drained queue is no lasting demand. Requests queued for ``queue_surge_s``
   (5 s), or a TTFT P99 within the veto margin of its SLO, force a surge of ``surge_fraction``.
3. **L2.** The workload's weight is recalibrated from its latency (the note's
   ``base × (1 + 0.2 × p99/SLO)`` past the SLO, damped by α); a scale-down is vetoed while the
   TTFT P99 is within ``veto_margin`` of its SLO, a burst is active, or data is missing or stale
   (fail safe). Higher weight ⇒ smaller scale-down steps.
4. **L3.** Victims are the least-loaded ready replicas, keeping zones balanced
   (skew ≤ 1) and within the disruption budget (``max_unavailable`` per cycle).

Every cycle returns one :class:`~ebb.model.decision.Decision`. A scale-up, a scale-down or a
recorded veto carries the whole explanation the ledger and ``ebb explain`` show: the signals
(NaN = not measured), the weights (``workload``, ``base``, ``alpha``), reasons, vetoes, victims
(replica ids) and the plan (``profile``, ``target_util``). Every other cycle is a ``hold``
(built without signals: most cycles are holds). A veto is recorded (action ``veto``) when its
reasons change, not every second it persists: a repeated veto, or one made of cooldowns only,
is a ``hold`` that still names its vetoes. Spans (``spans=``) get one span per layer:
``ebb.l1`` (demand), ``ebb.l2`` (weight, sizing, vetoes) and ``ebb.l3`` (victims). At t = 0
with no pods the answer is the initial fleet, ``max(initial, min_replicas)``, from 0.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from ebb.config.workloads import WorkloadClass
from ebb.decide.coordinate import ReplicaView, plan_scale_down
from ebb.decide.semantics import WorkloadSignals, recalibrate_weight, veto
from ebb.model.decision import Decision
from ebb.model.decisions import Action
from ebb.model.ids import ReplicaId
from ebb.model.observation import Observation, Pipeline, PodView
from ebb.model.spans import NO_SPANS, Spans
from ebb.window.sliding import SlidingWindow

_NS = 1_000_000_000


@dataclass(frozen=True)
class EbbProfile:
    """One point on the cost–SLO curve. Every field: unit, default (balanced), why."""

    name: str = "balanced"
    target_util: float = 0.9
    """Demand / replicas to aim for (ratio). Lower = more headroom for bursts, more cost."""
    hold_s: float = 600.0
    """Peak memory for scale-down (s): never size below the highest demand of this window."""
    hold_quantile: float = 0.98
    """Quantile of the remembered demand used for scale-down on *smooth* traffic (1.0 = the
    peak): a handful of one-second spikes that queueing absorbs are not worth a GPU."""
    smooth_cv: float = 0.3
    """Traffic counts as smooth when the remembered demand's coefficient of variation is below
    this; bursty traffic (CV ≥ 0.3, e.g. the Azure code trace at ~1.0) always keeps the peak."""
    cooldown_s: float = 60.0
    """No scale-down this long after a scale-up (s): the surge must have been served."""
    down_interval_s: float = 30.0
    """Minimum time between two scale-downs (s): one step, then look at the result."""
    down_fraction: float = 0.2
    """Largest scale-down step as a fraction of the fleet (at least one replica)."""
    queue_surge_s: float = 5.0
    """Requests must have queued for this long (s) to force a surge: a 1 s queue at healthy
    TTFT is absorbed by the headroom, and surging on it overshoots."""
    up_hysteresis: float = 0.1
    """A non-urgent scale-up needs demand above target by this fraction of the fleet."""
    surge_fraction: float = 0.25
    """Extra replicas (fraction of the fleet) when requests queue or TTFT P99 breaks its SLO."""
    veto_margin: float = 0.7
    """Veto scale-down while TTFT P99 ≥ this fraction of the TTFT SLO."""
    burst_fraction: float = 0.9
    """A burst is demand ≥ this fraction of ready capacity sustained ≥ 200 ms."""
    sizing_window_s: float = 4.0
    """Demand is sized on its mean over this window (s): bursts shorter than about twice the
    TTFT SLO (2 s) queue without breaking it, so sizing on 100 ms peaks would buy idle GPUs."""
    max_unavailable: float = 0.25
    """Disruption budget per cycle (fraction of ready replicas, at least one), like a PDB."""
    backlog_weight: float = 0.0
    """Share of the router backlog added to the demand that sizes a scale-up (replicas per
    replica of backlog, ≥ 0). The backlog in replica units is ``ready × queued / running``: a
    saturated replica reads at most 1.0, so L1 demand cannot see past the fleet, while a queue
    as long as the running set says twice the replicas are needed. 0 (default) sizes on L1
    demand alone; one backlog-driven step at most doubles the ready fleet."""


PROFILES: dict[str, EbbProfile] = {
    # Measured on the Azure 2023 traces with --peak-replicas 20 (README): cautious keeps both
    # under 0.1 % violations; lean trades a few percent of violations for ~30 % fewer GPU-hours.
    "cautious": EbbProfile("cautious", target_util=0.85),
    "balanced": EbbProfile(),
    "lean": EbbProfile("lean", target_util=1.1),
}


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
    warmup_s: float = 300.0
    """No scale-down before this much history (s), capped by hold_s: an empty peak memory would
    otherwise read as "no demand" (fail safe)."""

    def __post_init__(self) -> None:
        self._l1 = SlidingWindow(1, buckets=10, bucket_ms=100.0)
        self._hist: deque[tuple[float, float]] = deque()
        self._lat: deque[tuple[float, float, float, float]] = deque()
        self._fine: deque[tuple[float, float]] = deque()
        self._queue_hist: deque[tuple[float, bool]] = deque()
        self._over_since: float | None = None
        self._last_up = -math.inf
        self._last_down = -math.inf
        self._last_signal_t = -math.inf
        self._weight = self.base_weight
        # The served workload as an L2 class: latency-critical online serving (the note's
        # order-fulfilment weights) with the run's TTFT SLO as its P99 bound.
        self.workload_class = WorkloadClass(
            name="llm-serving", base_weight=self.base_weight, alpha=self.alpha,
            p99_latency_ms=self.slo_ttft_ms, veto_margin=self.profile.veto_margin,
            min_replicas=self.min_replicas)
        self._first_t: float | None = None
        self._last_veto: tuple[str, ...] = ()

    # -- L1 ---------------------------------------------------------------------------------
    def _ingest(self, obs: Observation) -> tuple[float, float, bool]:
        """Feed the 100 ms samples; return (demand P99 over the 1 s L1 window, mean demand over the
        sizing window, whether requests queued throughout the last ``queue_surge_s``)."""
        f = obs.fine
        persistent_queue = False
        if f is not None and len(f.t_s):
            demand = np.maximum(f.prefill_replicas, f.slot_replicas)
            self._l1.ingest(np.zeros(len(demand), dtype=np.int64), demand,
                            (f.t_s * _NS).astype(np.int64))
            self._queue_hist.extend(zip(f.t_s.tolist(), (f.queued > 0).tolist(), strict=True))
        while self._queue_hist and self._queue_hist[0][0] <= obs.t_s - self.profile.queue_surge_s:
            self._queue_hist.popleft()
        if self._queue_hist and self._queue_hist[-1][0] - self._queue_hist[0][0] >= \
                self.profile.queue_surge_s - 0.2:
            persistent_queue = all(q for _, q in self._queue_hist)
        if f is not None and len(f.t_s):
            self._last_signal_t = float(f.t_s[-1])
            for tt, dd in zip(f.t_s.tolist(), demand.tolist(), strict=True):
                self._fine.append((tt, dd))
            for t, ttft, e2e, w in zip(f.done_t_s.tolist(), f.done_ttft_ms.tolist(), f.done_e2e_ms.tolist(),
                                       f.done_weight.tolist(), strict=True):
                self._lat.append((t, ttft, e2e, w))
        while self._lat and self._lat[0][0] < obs.t_s - self.latency_window_s:
            self._lat.popleft()
        while self._fine and self._fine[0][0] <= obs.t_s - self.profile.sizing_window_s:
            self._fine.popleft()
        d = float(self._l1.quantile(0.99, int(obs.t_s * _NS))[0])
        mean = sum(v for _, v in self._fine) / len(self._fine) if self._fine else 0.0
        return (0.0 if math.isnan(d) else d), mean, persistent_queue

    def _latency_p99(self) -> tuple[float, float]:
        """(TTFT, end-to-end) weighted P99 (ms) over the latency window; NaN without samples."""
        return _weighted_p99(self._lat, 1), _weighted_p99(self._lat, 2)

    # -- read-only views for a guard (the canary gate) ----------------------------------------
    def observe(self, obs: Observation) -> None:
        """Ingest an observation's signals without deciding (while a guard holds the fleet)."""
        if self._first_t is None:
            self._first_t = obs.t_s
        self._ingest(obs)

    def ttft_p99_since(self, t0_s: float) -> float:
        """Weighted TTFT P99 (ms) of the completions after ``t0_s``; NaN without any."""
        return _weighted_p99([x for x in self._lat if x[0] > t0_s], 1)

    def note_scale_up(self, t_s: float) -> None:
        """A guard restored capacity: start the scale-down cooldown from now."""
        self._last_up = t_s

    def gate_queries(self) -> tuple[str, ...]:
        """No metrics gates of its own (the canary guard around it has them)."""
        return ()

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
        spec = obs.spec_replicas
        ready = max(obs.ready_replicas, 1)
        with spans.layer("ebb.l1") as s1:
            d, mean, queued = self._ingest(obs)
            # Burst: demand over burst_fraction of ready capacity for at least 200 ms.
            if d >= p.burst_fraction * ready:
                self._over_since = t if self._over_since is None else self._over_since
            else:
                self._over_since = None
            burst = self._over_since is not None and (t - self._over_since) >= 0.2 or d >= ready
            self._hist.append((t, mean))
            while self._hist and self._hist[0][0] < t - p.hold_s:
                self._hist.popleft()
            vals = np.fromiter((v for _, v in self._hist), dtype=np.float64, count=len(self._hist))
            mu = float(vals.mean())
            cv = float(vals.std()) / mu if mu > 0 else 0.0
            # Smooth traffic: an isolated 1 s spike is sampling noise that queueing absorbs; bursty
            # traffic: the spikes are the traffic, so the peak itself is kept.
            smooth = cv < p.smooth_cv and p.hold_quantile < 1.0
            peak = float(np.quantile(vals, p.hold_quantile)) if smooth else float(vals.max())
            ttft99, e2e99 = self._latency_p99()
            s1.set(**{"ebb.l1.demand_p99_replicas": d, "ebb.l1.demand_mean_replicas": mean,
                      "ebb.l1.burst": bool(burst), "ebb.l1.ttft_p99_ms": ttft99})
        with spans.layer("ebb.l2") as s2:
            # L2: weight from latency (the note's rule, damped by alpha).
            self._weight = recalibrate_weight(self.workload_class, self._weight, ttft99, self.slo_ttft_ms)
            s2.set(**{"ebb.l2.weight": self._weight})
            need_now = math.ceil(mean / p.target_util - 1e-9)
            backlog = _backlog_replicas(obs)
            by_demand = need_now
            if p.backlog_weight > 0.0 and backlog > 0.0:
                # Doubling the ready fleet at most: the backlog estimate assumes the queue drains at
                # today's per-replica rate, and capacity already cold-starting is part of spec.
                with_backlog = math.ceil((mean + p.backlog_weight * backlog) / p.target_util - 1e-9)
                need_now = max(need_now, min(with_backlog, 2 * obs.ready_replicas))
            surge = queued or (not math.isnan(ttft99) and ttft99 > p.veto_margin * self.slo_ttft_ms)
            # Surge only when no earlier scale-up is still cold-starting: capacity on its way counts.
            surge = surge and obs.ready_replicas >= spec
            if surge:
                need_now = max(need_now, spec + max(1, math.ceil(spec * p.surge_fraction)))
            need_now = min(self.max_replicas, max(self.min_replicas, need_now))
            signals = {"demand_cv": cv, "demand_p99_replicas": d, "demand_mean_replicas": mean,
                       "demand_peak_hold_replicas": peak, "backlog_replicas": backlog,
                       "queued_throughout_last_s": float(queued),
                       "ttft_p99_ms": ttft99, "e2e_p99_ms": e2e99, "ready_replicas": float(obs.ready_replicas),
                       "spec_replicas": float(spec)}
            # Without urgency (queue, latency at risk, burst) small excursions above target are left
            # to the headroom: chasing them is what makes scale-downs look misjudged a minute later.
            urgent = surge or burst
            if need_now > spec and (urgent or need_now > spec * (1.0 + p.up_hysteresis)):
                self._last_up = t
                why = "surge" if surge else "router backlog" if need_now > by_demand else "demand above target"
                return self._explained(t, "scale_up", spec, need_now, signals, (why,))
            need_hold = min(self.max_replicas, max(self.min_replicas, math.ceil(peak / p.target_util - 1e-9)))
            if need_hold >= spec:
                return self._hold(t, spec)
            # A scale-down is wanted: L2 vetoes (fail safe on missing or stale data).
            vetoes = []
            if t - self._first_t < min(p.hold_s, self.warmup_s):
                vetoes.append(f"warming up: {t - self._first_t:.0f} s of history < "
                              f"{min(p.hold_s, self.warmup_s):.0f} s")
            if t - self._last_up < p.cooldown_s:
                vetoes.append(f"cooldown: {t - self._last_up:.0f} s since the last scale-up < {p.cooldown_s:.0f} s")
            if t - self._last_down < p.down_interval_s:
                return self._hold(t, spec)
            vetoes.extend(veto(self.workload_class, WorkloadSignals(
                workload="serving", class_name=self.workload_class.name, replicas=spec,
                ready_replicas=obs.ready_replicas, latency_p99_ms=ttft99, latency_p95_ms=float("nan"),
                success_ratio=float("nan"), burst_active=burst, utilisation_ratio=mean / ready,
                staleness_s=t - self._last_signal_t), self.max_staleness_s))
            if vetoes:
                key = tuple(v.split(":")[0] for v in vetoes)
                s2.set(**{"ebb.veto.reasons": list(key)})
                # Record a veto when its reasons change, not every second it persists.
                repeated = key == self._last_veto or all(v.startswith("cooldown") for v in vetoes)
                self._last_veto = key
                if repeated:
                    return self._hold(t, spec, tuple(vetoes))
                return self._explained(t, "veto", spec, spec, signals, ("scale-down wanted",), tuple(vetoes))
            self._last_veto = ()
            # Higher weight (a hurting, important class) → smaller steps.
            frac = p.down_fraction * self.base_weight / max(self._weight, 1e-9)
            step = max(1, math.floor(spec * frac))
            target = max(need_hold, spec - step)
        with spans.layer("ebb.l3") as s3:
            victims, limits = plan_victims(obs.pods, spec - target, p.max_unavailable)
            s3.set(**{"ebb.l3.victims": len(victims), "ebb.victims": [str(int(v)) for v in victims]})
            if not victims:
                return self._explained(t, "veto", spec, spec, signals, ("scale-down wanted",), limits)
            target = spec - len(victims)
            self._last_down = t
            return self._explained(
                t, "scale_down", spec, target, signals,
                (f"peak demand over {p.hold_s:.0f} s needs {need_hold} at {p.target_util:.0%}", *limits),
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
                        plan={"profile": self.profile.name, "target_util": self.profile.target_util})


def _backlog_replicas(obs: Observation) -> float:
    """The router queue in replica units, ``ready × queued / max(running, 1)``; 0 without data.

    ``running = total_inflight − queued`` are the sequences the ready replicas serve now, so
    ``running / ready`` is what one replica holds and the queue needs ``queued`` over that."""
    if obs.queued is None or obs.total_inflight is None or obs.queued <= 0.0:
        return 0.0
    if math.isnan(obs.queued) or math.isnan(obs.total_inflight):
        return 0.0
    running = obs.total_inflight - obs.queued
    return obs.ready_replicas * obs.queued / max(running, 1.0)


def _weighted_p99(rows: Iterable[tuple[float, float, float, float]], col: int) -> float:
    """Weighted P99 of column ``col`` of (t, ttft_ms, e2e_ms, weight) rows; NaN when empty.

    Rows with NaN in ``col`` do not describe it (an agent sends TTFT and end-to-end sketches as
    separate weighted rows) and are skipped."""
    a = np.asarray(list(rows), dtype=np.float64)
    if a.size == 0:
        return float("nan")
    a = a[~np.isnan(a[:, col])]
    if a.size == 0:
        return float("nan")
    order = np.argsort(a[:, col])
    cw = np.cumsum(a[order, 3])
    k = int(np.searchsorted(cw, 0.99 * cw[-1]))
    return float(a[order[min(k, len(order) - 1)], col])


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
