"""Request-level discrete-event simulation of a replica fleet under one policy (virtual clock).

Every request is simulated: routed on arrival to the least-loaded ready replica with a free
batch slot (ties → oldest replica), or queued FIFO at the router until a slot frees — never
dropped. On admission its timeline is fixed by the calibrated :class:`~ebb.model.latency.LatencyModel`:

* prefill starts when the replica's prefill unit is free (prefills are serial, as in the real
  loop), so a burst on one replica queues its prefills: ``first_token = start + prefill_ms``;
* decode takes ``(tokens_out − 1) × step_ms(b) / (1 − u_prefill)`` where ``b`` is the replica's
  batch after admission and ``u_prefill`` its recent prefill share (decays with a 1 s time
  constant) — running sequences stall while new ones prefill.

The batch is frozen at admission (an approximation: later joins/leaves do not re-time it; the
decode step grows only 0.04 ms per sequence, so the error is small). Scale-up adds replicas that
serve after ``cold_start_s``; scale-down removes cold-starting replicas first, then the newest
ready ones (the ReplicaSet's default victim order), which drain: no new requests, in-flight ones
finish, then the replica stops. Billing runs from request to stop. Replica phases move only
along :data:`ebb.sim.lifecycle.TRANSITIONS` (shared with the fluid engine).

With ``settings.cluster.service`` set, the service-time model (:mod:`ebb.sim.service_time`) replaces
prefill/decode: a replica has that many slots and a request holds one for its service time; routing,
cold start, drain and billing are the same code.

Determinism: no randomness inside; equal inputs give equal outputs. Cost: O(log n) per request
(one heap push/pop) plus O(replicas) routing; ≥ 50 k requests/s on one core (bench/sim_throughput.py).
Idle time costs nothing of its own: the pipelines' signal rows are written at the seconds something
changed (:mod:`ebb.sim.request_signals`), and a policy whose answers are known ahead
(:class:`~ebb.sim.policy.Scheduled`: the oracle, static) is reconciled only where it changes. What
remains proportional to the span is the policy's own work — a reconcile every ``interval_s`` and, with
fine samples, one every ``fine_ms`` (Ebb: 9 fast-path calls and a reconcile per simulated second).
Between two events (arrival, finish, first token, cold-start end) every fine sample repeats the one
before, so a policy that plans :class:`~ebb.decide.base.QuietStretches` is handed the whole stretch
at once; its reconciles run one by one, but for the runs of them the stretch proves plain holds
(:meth:`~ebb.decide.base.Stretch.hold`), which are skipped (:meth:`_RequestRun._quiet_run`; the same
decisions, ``tests/unit/sim/test_request_quiet_stretch.py``).
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ebb.decide.base import Policy, QuietStretches, Reactive, quiet_stretches_of, react_of
from ebb.model.decision import Decision
from ebb.model.observation import QUEUE_TIME_BOUNDS_S, Observation, ServingCounters
from ebb.model.trace import RequestTrace
from ebb.sim.fine import FineBuffer
from ebb.sim.fleet import FleetLog, choose_victims
from ebb.sim.lifecycle import DRAINING, READY, STARTING, STOPPED, Lifecycles
from ebb.sim.policy import scheduled
from ebb.sim.quiet_schedule import between, quiet_schedule
from ebb.sim.request_signals import SignalRows
from ebb.sim.service_time import service_admitter, service_times
from ebb.sim.settings import SimSettings
from ebb.sim.sleepers import Sleeps, sleep_tier

_INF = math.inf
_PREFILL_TAU_S = 1.0
Progress = Callable[[float], None]
"""Told the share of the trace's span simulated so far (0–1)."""
PROGRESS_ARRIVALS = 256
"""Arrivals between two progress reports (~100 on a 27 k-request trace; a call each is ~0.1 µs a request)."""
_QUIET_MIN_TICKS = 2
"""A quiet stretch shorter than this many reconciles is served one sample at a time (its plan's
~40 numpy calls would cost what the samples do)."""
_QUIET_MAX_SAMPLES = 6000
"""The most fine samples one quiet stretch plans (10 min at 100 ms; the next one goes on from there)."""


@dataclass(frozen=True)
class RequestOutcome:
    """Per-request results of a run, aligned with the trace's arrays (seconds; NaN = dropped)."""

    first_token_s: np.ndarray
    finish_s: np.ndarray
    replica: np.ndarray


def simulate_requests(trace: RequestTrace, policy: Policy, settings: SimSettings, *,
                      every_second: bool = False, on_progress: Progress | None = None
                      ) -> tuple[RequestOutcome, FleetLog]:
    """Replay ``trace`` through ``policy``; returns per-request outcomes and the replica history.
    ``every_second``: write the pipelines' signal rows every second, not only when something changed
    (:mod:`ebb.sim.request_signals`; the same results, at a cost proportional to the trace's span).
    ``on_progress`` is told the share of the trace's span simulated (0–1, to its last arrival) every
    :data:`PROGRESS_ARRIVALS` arrivals (a time estimate's update)."""
    run = _RequestRun(trace, policy, settings, every_second)
    run.start_fleet()
    run.run_events(on_progress)
    return run.finish_run()


class _RequestRun:
    """One run's state and its steps. Per-replica state lives in parallel lists indexed by replica
    id (ids are never reused); phases and times live in :attr:`fleet`."""

    __slots__ = ("sleeper", "policy", "settings", "cold", "max_batch", "pf_floor", "pf_per_tok", "d_base", "d_per",
                 "u_cap",
                 "arr", "tin", "tout", "n", "first_tok", "finish", "where", "fleet", "active", "pf_free",
                 "pf_work", "pf_t", "busy_since", "busy_cum", "done_cum", "starting", "queue", "fin_heap",
                 "rows", "horizon", "t_end_arrivals", "spec", "scale_ups", "scale_downs", "decisions",
                 "noteworthy", "fault", "slow", "fault_pre", "fine_ms", "fine_dt", "active_total",
                 "pf_cum_total", "pf_prev", "fine_buf", "tiered", "kv_held", "kv_cap", "admit_t", "pf_start", "ft_heap", "serving_on", "sv", "qb",
                 "svc")

    def __init__(self, trace: RequestTrace, policy: Policy, settings: SimSettings, every_second: bool) -> None:
        lat = settings.cluster.latency
        self.policy, self.settings = policy, settings
        self.cold = settings.cluster.cold_start_s
        self.max_batch = lat.max_batch
        self.pf_floor, self.pf_per_tok = lat.prefill_floor_ms / 1000.0, lat.prefill_ms_per_token / 1000.0
        self.d_base, self.d_per = lat.decode_base_ms / 1000.0, lat.decode_ms_per_seq / 1000.0
        self.u_cap = lat.max_prefill_share
        self.arr: list[float] = trace.arrival_s.tolist()
        self.tin: list[int] = trace.tokens_in.tolist()
        self.tout: list[int] = trace.tokens_out.tolist()
        n = self.n = len(self.arr)
        self.first_tok, self.finish, self.where = [math.nan] * n, [math.nan] * n, [-1] * n
        tier = sleep_tier(policy, settings.cluster.sleep)
        self.tiered = tier is not None
        self.fleet = Lifecycles(tier, settings.seed)
        self.sleeper: Sleeps | None = policy if tier is not None and isinstance(policy, Sleeps) else None
        self.active: list[int] = []
        self.pf_free: list[float] = []
        self.pf_work: list[float] = []
        self.pf_t: list[float] = []
        self.busy_since: list[float] = []
        self.busy_cum: list[float] = []
        self.done_cum: list[float] = []
        self.starting: list[tuple[float, int]] = []  # heap of (ready_at, rid); cancelled ones stay until popped
        self.queue: deque[int] = deque()
        self.fin_heap: list[tuple[float, int, int]] = []
        self.rows = SignalRows(every_second=every_second)
        self.t_end_arrivals = self.arr[-1] if n else 0.0
        self.horizon = self.t_end_arrivals + settings.drain_horizon_s
        self.spec = self.scale_ups = self.scale_downs = 0
        self.decisions: list[tuple[float, int, int]] = []
        self.noteworthy: list[Decision] = []
        self.fault = settings.fault
        self.slow = 1.0  # service-time multiplier of the injected fault (1 = none)
        self.fault_pre = -1  # fleet size before the scale-down that triggered the fault
        self.fine_ms = policy.pipeline.fine_ms
        self.fine_dt = (self.fine_ms / 1000.0) if self.fine_ms else _INF
        self.active_total = 0  # requests admitted and not finished, fleet-wide (counted when fine samples are on)
        self.pf_cum_total = 0.0
        self.pf_prev = 0.0
        self.fine_buf = FineBuffer()
        self.kv_held: list[float] = []  # per replica: tokens its running sequences hold
        self.kv_cap = float(lat.kv_capacity_tokens)
        self.admit_t: list[float] = [math.nan] * n
        self.pf_start: list[float] = [math.nan] * n  # when each request's own prefill began (fine completions)
        self.ft_heap: list[tuple[float, int]] = []  # (first token, request) not yet reported (fine samples on)
        self.serving_on = policy.pipeline.serving
        # Cumulative serving sums (ServingCounters' scalar fields, in order) and queue-time buckets
        # (one per bound of QUEUE_TIME_BOUNDS_S plus +Inf, not cumulative); kept when serving_on.
        self.sv: list[float] = [0.0] * 8
        self.qb: list[float] = [0.0] * (len(QUEUE_TIME_BOUNDS_S) + 1)
        # The service-time model (ebb.sim.service_time): its slots replace the LLM batch, its
        # per-request service seconds replace prefill + decode; the fleet machinery is shared.
        model = settings.cluster.service
        self.svc: list[float] | None = None
        if model is not None:
            self.max_batch = model.concurrency
            self.svc = service_times(trace, model, settings.seed).tolist()

    # -- fleet -----------------------------------------------------------------------------------

    def start_fleet(self) -> None:
        """t = 0: the policy's first answer starts warm (the fleet was already serving)."""
        init = self.settings.cluster.initial_replicas
        if init is None:
            init = max(1, self.policy.decide(Observation(0.0, 0, 0, (), None, None, None)).to_replicas)
        for _ in range(init):
            self._new_replica(0.0, warm=True)
        self.spec = init

    def _new_replica(self, t: float, warm: bool) -> None:
        """Request a replica at ``t`` (ready at once when ``warm``, else after the cold start, or after
        the wake when a sleeper is woken)."""
        rid, delay = (self.fleet.add(t, warm=True), 0.0) if warm else self.fleet.request(t, self.cold)
        self.active.append(0)
        self.pf_free.append(t)
        self.pf_work.append(0.0)
        self.pf_t.append(t)
        self.busy_since.append(t)
        self.busy_cum.append(0.0)
        self.done_cum.append(0.0)
        self.kv_held.append(0.0)
        self.rows.dirty.add(rid)
        if not warm:
            heapq.heappush(self.starting, (t + delay, rid))

    def _ready(self, admit: _Admit) -> None:
        """The earliest cold start ends: the replica serves and takes what the router queue holds."""
        t, rid = heapq.heappop(self.starting)
        if self.fleet.phase[rid] != STARTING:
            return  # cancelled by a scale-down while it was starting
        self.fleet.move(rid, READY, t)
        self.rows.dirty.add(rid)
        self.busy_since[rid] = t
        self.pf_free[rid] = t
        queue, active, max_batch = self.queue, self.active, self.max_batch
        while queue and active[rid] < max_batch:
            admit(queue.popleft(), rid, t)

    # -- the event loop --------------------------------------------------------------------------

    def run_events(self, on_progress: Progress | None = None) -> None:
        """Process events in time order until every request finished (or the drain horizon passed).
        At equal times: finishes, arrivals, cold-start ends, fine samples, snapshots, policy ticks.
        ``on_progress``: :func:`simulate_requests`'."""
        arr, n, fin_heap, starting, queue = self.arr, self.n, self.fin_heap, self.starting, self.queue
        horizon, fine_dt, policy = self.horizon, self.fine_dt, self.policy
        fast = react_of(policy) if self.fine_ms else None
        # Stretches with no event in them go to the policy at once (the same decisions:
        # QuietStretches); not with an asleep tier, whose sleepers come and go with time.
        quiet = quiet_stretches_of(policy) if fast is not None and not self.tiered else None
        quiet_from = 0.0  # no stretch is planned before this time (the last one served nothing)
        every_second = self.rows.every_second
        # A policy whose answers are known ahead: only its changes are reconciled (every one in the
        # reference run that writes every second).
        sched = None if every_second else scheduled(policy)
        if sched is not None:
            quiet = None
        admit = service_admitter(self) if self.svc is not None else _admitter(self)
        arrive, complete = _router(self, admit), _completer(self, admit)
        interval = float(policy.interval_s)
        next_tick = interval
        # The next second whose signal row is due (a change waits for it); _INF while nothing changed
        # since the last row — then idle seconds cost nothing (ebb.sim.request_signals).
        next_snap = 0.0
        decisions = self.decisions
        next_fine = fine_dt
        i = 0
        while True:
            t_arr = arr[i] if i < n else _INF
            fin_top = fin_heap[0][0] if fin_heap else _INF
            t_ready = starting[0][0] if starting else _INF
            t_ctrl = next_snap
            if next_fine < t_ctrl:
                t_ctrl = next_fine
            if next_tick < t_ctrl:
                t_ctrl = next_tick
            if t_ready < t_ctrl:
                t_ctrl = t_ready
            if i >= n and not fin_heap and not queue:
                break
            if t_ctrl > horizon and t_arr == _INF and fin_top > horizon:
                break
            if fin_top <= t_arr and fin_top <= t_ctrl:
                complete()
                if next_snap == _INF:  # seen by the snapshot at its second (it comes after finishes)
                    next_snap = float(math.ceil(fin_top))
            elif t_arr <= t_ctrl:
                arrive(i, t_arr)
                i += 1
                if on_progress is not None and i % PROGRESS_ARRIVALS == 0:
                    on_progress(min(1.0, t_arr / arr[n - 1]) if arr[n - 1] > 0 else 1.0)
                if next_snap == _INF:
                    next_snap = float(math.ceil(t_arr))
            elif t_ready == t_ctrl:
                self._ready(admit)
                if next_snap == _INF:
                    next_snap = float(math.ceil(t_ready))
            elif next_fine == t_ctrl:
                # A stretch starts at a sample the loop would serve first: no row due, none buffered.
                if quiet is not None and next_snap == _INF and next_fine >= quiet_from and not self.fine_buf.t:
                    stop = min(t_arr, fin_top, t_ready, self.ft_heap[0][0] if self.ft_heap else _INF)
                    ran = self._quiet_run(quiet, next_fine, next_tick, interval, stop)
                    if isinstance(ran, tuple):
                        next_fine, next_tick, changed_at = ran
                        if changed_at is not None and next_snap == _INF:  # as a reconcile's change sets it
                            next_snap = math.floor(changed_at) + 1.0
                        continue
                    quiet_from = ran  # this sample one by one, and the ones before ran
                self._fine_sample(next_fine)
                # Not at a reconcile (the one due, or the one just past: 0.1 s steps drift around it).
                if fast is not None and between(next_fine, next_tick, interval):
                    changes = len(decisions)
                    self._react(fast, next_fine)
                    if len(decisions) != changes and next_snap == _INF:
                        next_snap = float(math.ceil(next_fine))
                next_fine += fine_dt
            elif next_snap == t_ctrl:
                sec = int(next_snap)
                self._snapshot(sec, arrivals=i)
                next_snap = sec + 1.0 if every_second else _INF
            else:
                if sched is not None:
                    t_change = sched.next_change(next_tick, self.spec)
                    if t_change > next_tick:  # the reconciles before it are plain holds
                        next_tick = t_change
                        continue
                changes = len(decisions)
                self._apply(policy.decide(self._observe(next_tick)), next_tick)
                if len(decisions) != changes and next_snap == _INF:  # after the snapshot at its own second
                    next_snap = math.floor(next_tick) + 1.0
                next_tick += interval

    # -- signals ---------------------------------------------------------------------------------

    def _snapshot(self, sec: int, *, arrivals: int) -> None:
        """Second ``sec``: the signal rows of what changed since the last (``arrivals`` so far)."""
        self.rows.record(sec, self.fleet, arrivals, len(self.queue), self.active, self.busy_cum, self.busy_since,
                         self.done_cum, self.kv_held, _counters(self.sv, self.qb) if self.serving_on else None)

    def _fine_sample(self, t: float) -> None:
        """One fine sample at ``t``: the fleet's prefill work since the previous one, slots, queue."""
        # Prefill work done by t = scheduled − still pending (pending work on a replica is contiguous).
        pf_free = self.pf_free
        pending = 0.0
        if self.svc is None:  # the service-time model has no prefill (pf_free never passes the clock)
            for r in self.fleet.live:
                if pf_free[r] > t:
                    pending += pf_free[r] - t
        done = self.pf_cum_total - pending
        buf = self.fine_buf
        buf.t.append(t)
        buf.prefill.append((done - self.pf_prev) / self.fine_dt)
        self.pf_prev = done
        buf.slot.append(self.active_total / self.max_batch)
        buf.queued.append(float(len(self.queue)))
        # First tokens since the previous sample: TTFT rows, as an agent sees them (at the first
        # token, not at the end of the answer) — with the wait before each request's own prefill.
        ft_heap, arr, pf_start, pop = self.ft_heap, self.arr, self.pf_start, heapq.heappop
        while ft_heap and ft_heap[0][0] <= t:
            ft, req = pop(ft_heap)
            buf.done_t.append(ft)
            buf.done_ttft_ms.append((ft - arr[req]) * 1000.0)
            buf.done_e2e_ms.append(math.nan)
            buf.done_wait_ms.append((pf_start[req] - arr[req]) * 1000.0)

    def _quiet_run(self, quiet: QuietStretches, t0: float, tick: float, interval: float, stop: float
                   ) -> tuple[float, float, float | None] | float:
        """The fine samples from ``t0`` and the reconciles from ``tick`` before ``stop`` (the next
        event), as the loop would serve them, with the samples planned at once (the
        :class:`~ebb.decide.base.QuietStretches` seam) and each reconcile decided as always. Stops
        after a reconcile that changes the fleet and before a sample ``react`` would answer or one
        the next ``react`` would take with another. After each ``decide`` the stretch is asked to
        prove the next reconciles holds (:meth:`~ebb.decide.base.Stretch.hold`); those it proves are
        skipped (no observation built), the first it does not is decided. Returns (next sample, next
        reconcile, the time of a change or None); when it served nothing, the time before which no
        stretch is worth planning (the loop serves the samples until then one by one)."""
        if self.svc is None:
            pending = max((self.pf_free[r] for r in self.fleet.live), default=-_INF)
            if pending > t0:
                return min(pending, stop)  # prefill still pending: the samples' prefill shares differ
        plan = quiet_schedule(t0, tick, interval, self.fine_dt, stop, self.horizon, _QUIET_MAX_SAMPLES)
        times, cuts, ticks = plan.times_s, plan.cuts, plan.ticks_s
        if len(ticks) < _QUIET_MIN_TICKS:
            # Cut short by a sample just past a reconcile (the next react takes two): after those two.
            return plan.next_sample_s + self.fine_dt if plan.two_ahead else stop
        n, dt = len(times), self.fine_dt
        done = self.pf_cum_total  # no prefill pending: the work done is all scheduled
        prefill = [(done - self.pf_prev) / dt] + [(done - done) / dt] * (n - 1)
        stretch = quiet.quiet_stretch(times, plan.reacts, prefill, [self.active_total / self.max_batch] * n,
                                      [float(len(self.queue))] * n, len(self.fleet.ready), self.spec)
        if stretch is None or stretch.quiet == 0:
            return stop
        taken, decided, changed_at = 0, 0, None
        prove = False  # after a decide (its learning from the pods done), not at a tick a proof stopped at
        while decided < len(ticks):
            held = stretch.hold(ticks[decided:], cuts[decided:]) if prove else 0
            prove = held == 0
            if held:
                decided += held
                taken = cuts[decided - 1]
                continue
            cut, tk = cuts[decided], ticks[decided]
            if cut > stretch.quiet or not stretch.take(cut):
                break
            taken = cut
            changes = len(self.decisions)
            self._apply(self.policy.decide(self._observe(tk)), tk)
            decided += 1
            if len(self.decisions) != changes:
                changed_at = tk
                break
        if changed_at is None and (decided == len(ticks) or cuts[decided] > stretch.quiet):
            last = min(stretch.quiet, n)  # the samples after the last reconcile served, or before a react's answer
            if stretch.take(last):
                taken = last
        if taken == 0 and decided == 0:
            return stop
        if taken:
            self.pf_prev = done
        return (times[taken] if taken < n else plan.next_sample_s), \
            (ticks[decided] if decided < len(ticks) else plan.next_tick_s), changed_at

    def _react(self, fast: Reactive, t: float) -> None:
        """The fast path at fine sample ``t``: the policy sees the new samples and the fleet's counts."""
        d = fast.react(Observation(t, self.spec, len(self.fleet.ready), (), None, None, None, self.fine_buf.take(),
                                   asleep_replicas=self.fleet.sleep.asleep(t)))
        if d is not None:
            self._apply(d, t)

    def _observe(self, t: float) -> Observation:
        """What the policy sees at ``t``: the newest pipeline sample's window, per pod and fleet-wide."""
        pipe = self.policy.pipeline
        per, win, off = pipe.period_s, pipe.window_s, pipe.offset_s
        rows = self.rows
        last_snap = math.floor(t)  # the newest second: its signals precede a reconcile at it
        s = int(math.floor((min(t, float(last_snap)) - off) / per)) * per + off
        pods = tuple(rows.pods(s, win, self.fleet, self.kv_cap)) if pipe.per_pod else ()
        total_qps = total_inflight = queued = None
        serving = None
        if s >= 0:
            k = rows.row(s)
            lo = max(s - win, 0)
            if s > lo:
                total_qps = (rows.arrivals[k] - rows.arrivals[rows.row(lo)]) / (s - lo)
            total_inflight = rows.inflight[k]
            queued = rows.queued[k]
            if self.serving_on:
                serving = rows.serving[k]
        fine = self.fine_buf.take() if self.fine_ms else None
        return Observation(t, self.spec, len(self.fleet.ready), pods, total_qps, total_inflight, queued, fine,
                           serving=serving, asleep_replicas=self.fleet.sleep.asleep(t))

    # -- decisions -------------------------------------------------------------------------------

    def _apply(self, decision: Decision, t: float) -> None:
        """Record ``decision`` and move the fleet to its target: add cold-starting replicas, or cancel
        and drain victims (named ones first, :func:`~ebb.sim.fleet.choose_victims`)."""
        if decision.noteworthy:
            self.noteworthy.append(decision)
        desired, spec = decision.to_replicas, self.spec
        if desired == spec:
            return
        self.decisions.append((t, spec, desired))
        self._fault_step(desired, t)
        if desired > spec:
            self.scale_ups += 1
            for _ in range(desired - spec):
                self._new_replica(t, warm=False)
        else:
            self.scale_downs += 1
            fleet = self.fleet
            cancel, drain = choose_victims(fleet.starting(), fleet.ready, spec - desired,
                                           named=[int(v) for v in decision.victims])
            for rid in cancel:
                fleet.move(rid, STOPPED, t)
            for rid in drain:
                fleet.move(rid, DRAINING, t)
                if self.active[rid] == 0:
                    fleet.move(rid, STOPPED, t)
        self.spec = desired
        if self.sleeper is not None:  # sleepers past what the policy counts on are released
            self.fleet.keep_asleep(t, self.sleeper.asleep_wanted(desired))

    def _fault_step(self, desired: int, t: float) -> None:
        """Arm the injected fault on the first scale-down after ``after_s``; clear it once the target
        is back at the size it had before."""
        fault = self.fault
        if fault is None:
            return
        if desired < self.spec and self.fault_pre < 0 and t >= fault.after_s:
            self.slow, self.fault_pre = fault.slowdown, self.spec
        elif self.fault_pre >= 0 and desired >= self.fault_pre:
            self.slow = 1.0

    def finish_run(self) -> tuple[RequestOutcome, FleetLog]:
        """Stop every replica at the end of the billed horizon (last arrival or last completion)."""
        t_stop = max(self.t_end_arrivals, max((f for f in self.finish if f == f), default=0.0))
        self.fleet.stop_all(t_stop)
        outcome = RequestOutcome(np.asarray(self.first_tok, dtype=np.float64),
                                 np.asarray(self.finish, dtype=np.float64), np.asarray(self.where, dtype=np.int64))
        return outcome, self.fleet.fleet_log(scale_ups=self.scale_ups, scale_downs=self.scale_downs, end_s=t_stop,
                                             decisions=self.decisions, noteworthy=self.noteworthy)


# -- the hot path: closures over the run's lists (local cells, no attribute lookups per request) ---

_Admit = Callable[[int, int, float], None]


def _admitter(run: _RequestRun) -> _Admit:
    """``admit(req, r, t)``: start request ``req`` on replica ``r`` at ``t``, fixing its first-token
    and finish times (see the module docstring) and pushing its finish event."""
    active, busy_since, pf_free, pf_work, pf_t = run.active, run.busy_since, run.pf_free, run.pf_work, run.pf_t
    tin, tout, first_tok, finish, where = run.tin, run.tout, run.first_tok, run.finish, run.where
    pf_floor, pf_per_tok, d_base, d_per, u_cap = run.pf_floor, run.pf_per_tok, run.d_base, run.d_per, run.u_cap
    max_batch, fin_heap, fine_ms = run.max_batch, run.fin_heap, run.fine_ms
    kv_held, admit_t, pf_start, ft_heap = run.kv_held, run.admit_t, run.pf_start, run.ft_heap
    exp, push = math.exp, heapq.heappush

    def admit(req: int, r: int, t: float) -> None:
        if fine_ms:
            run.active_total += 1  # only fine samples read it
        kv_held[r] += tin[req] + 0.5 * tout[req]
        admit_t[req] = t
        a = active[r] + 1
        active[r] = a
        if a == 1:
            busy_since[r] = t
        slow = run.slow
        pf = tin[req] * pf_per_tok
        if pf < pf_floor:
            pf = pf_floor
        pf *= slow
        start = pf_free[r] if pf_free[r] > t else t
        ft = start + pf
        if fine_ms:
            pf_start[req] = start
            push(ft_heap, (ft, req))
        pf_free[r] = ft
        run.pf_cum_total += pf
        # Recent prefill share: exponentially decayed prefill seconds per second.
        w = pf_work[r] * exp((pf_t[r] - t) / _PREFILL_TAU_S) + pf
        pf_work[r] = w
        pf_t[r] = t
        u = w / _PREFILL_TAU_S
        if u > u_cap:
            u = u_cap
        b = a if a < max_batch else max_batch
        dec = (tout[req] - 1) * (d_base + d_per * b) / (1.0 - u) * slow
        if dec < 0.0:
            dec = 0.0
        fin = ft + dec
        first_tok[req] = ft
        finish[req] = fin
        where[req] = r
        push(fin_heap, (fin, req, r))

    return admit


def _router(run: _RequestRun, admit: _Admit) -> Callable[[int, float], None]:
    """``arrive(req, t)``: route request ``req`` to the least-loaded ready replica with a free slot
    (ties → the oldest), or queue it behind the ones already waiting (FIFO)."""
    active, ready, queue, max_batch = run.active, run.fleet.ready, run.queue, run.max_batch
    mark = run.rows.dirty.add

    def arrive(req: int, t: float) -> None:
        best = -1
        best_a = max_batch
        for r in ready:
            a = active[r]
            if a < best_a:
                best, best_a = r, a
                if a == 0:
                    break
        if best >= 0 and not queue:
            admit(req, best, t)
            mark(best)
        else:
            queue.append(req)

    return arrive


def _completer(run: _RequestRun, admit: _Admit) -> Callable[[], None]:
    """``complete()``: the earliest finish frees its slot, is recorded (fine completions), and hands
    the slot to the router queue — or stops its replica when that was draining its last request."""
    active, done_cum, busy_cum, busy_since = run.active, run.done_cum, run.busy_cum, run.busy_since
    fin_heap, queue, arr, first_tok, fleet = run.fin_heap, run.queue, run.arr, run.first_tok, run.fleet
    phase, fine_ms, pop = fleet.phase, run.fine_ms, heapq.heappop
    d_t, d_ttft, d_e2e = run.fine_buf.done_t.append, run.fine_buf.done_ttft_ms.append, run.fine_buf.done_e2e_ms.append
    d_wait = run.fine_buf.done_wait_ms.append
    kv_held, tin, tout, admit_t, serving_on = run.kv_held, run.tin, run.tout, run.admit_t, run.serving_on
    sv, qb, bounds, bisect_left = run.sv, run.qb, QUEUE_TIME_BOUNDS_S, bisect.bisect_left
    mark = run.rows.dirty.add

    def complete() -> None:
        t, req, r = pop(fin_heap)
        mark(r)
        a = active[r] - 1
        active[r] = a
        done_cum[r] += 1.0
        n_in, n_out = tin[req], tout[req]
        kv_held[r] -= n_in + 0.5 * n_out
        if serving_on:
            ft, t0, q = first_tok[req], arr[req], admit_t[req] - arr[req]
            sv[0] += 1.0
            sv[1] += n_in
            sv[2] += n_out
            sv[3] += ft - t0
            sv[4] += t - ft
            sv[5] += n_out - 1 if n_out > 1 else 0
            sv[6] += t - t0
            sv[7] += q
            qb[bisect_left(bounds, q)] += 1.0  # le semantics: q == bound counts in that bucket
        if fine_ms:
            run.active_total -= 1
            d_t(t)  # an end-to-end row; the TTFT row went out at the first token (_fine_sample)
            d_ttft(math.nan)
            d_e2e((t - arr[req]) * 1000.0)
            d_wait(math.nan)
        if a == 0:
            busy_cum[r] += t - busy_since[r]
        st = phase[r]
        if st == READY:
            if queue:
                admit(queue.popleft(), r, t)
        elif st == DRAINING and a == 0:
            fleet.move(r, STOPPED, t)

    return complete


def _counters(sv: list[float], qb: list[float]) -> ServingCounters:
    """The cumulative :class:`ServingCounters` of the sums ``sv`` and queue-time buckets ``qb``."""
    le: list[float] = []
    acc = 0.0
    for v in qb[:-1]:
        acc += v
        le.append(acc)
    return ServingCounters(sv[0], sv[1], sv[2], sv[3], sv[4], sv[5], sv[6], sv[7], tuple(le))
