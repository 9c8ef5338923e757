"""``oracle``: perfect foresight of demand — the cheapest schedule found that still meets the SLO.

Construction (the physical limit the other policies are measured against):

1. **Work.** Each request costs ``w = prefill_s(tokens_in) + tokens_out × step_s(B) / B``
   replica-seconds, ``B`` = the replica's batch cap: its prefill (serial on a replica) plus its
   share of fully batched decode steps. Summed per 1 s bin it is the fleet's work rate. Under the
   service-time model a request instead holds one of a replica's ``c`` slots for its whole service
   time ``S`` from its start (:func:`occupancy_rate`): it adds ``1/c`` replica to every second it
   overlaps, not ``S/c`` replica-seconds to its arrival second (one 100 s job is one replica for
   100 s, never 10 replicas for 10 s), so the work rate is the fleet's busy curve.
2. **Need.** ``need(t) = max(1, ceil(h × mean work over [t, t + S)))`` for a smoothing window
   ``S`` and a headroom factor ``h``: the replicas that keep the work rate below ``1/h`` of
   capacity over the coming ``S`` seconds.
3. **Foresight.** A replica requested at ``u − cold_start`` serves at ``u``, and one removed
   stops serving at once, so the schedule holds ``max(need)`` over ``[t, t + cold_start]``.
   Holding a replica through a dip shorter than a cold start costs no more than restarting it,
   so for a given need curve this is the least replica-seconds.
4. **Search.** For each ``S`` in ``smoothing_s`` the smallest ``h`` whose run meets the SLO
   (violations ≤ ``target_violation_pct``) is found by bisection on log h (violations fall as
   h grows, up to noise; every candidate is checked by a full simulation, so the returned
   schedule is *verified*, not assumed); the cheapest verified schedule wins.

It is a lower bound within this family of demand-following schedules, not a proof of global
optimality; it sees the future, so no real policy can match it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from ebb.errors import ConfigError
from ebb.model.decision import Decision
from ebb.model.spans import NO_SPANS, Spans
from ebb.model.latency import LatencyModel
from ebb.sim.policy import Observation, Pipeline

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


def work_per_request(tokens_in: FloatArray, tokens_out: FloatArray, lat: LatencyModel) -> FloatArray:
    """Replica-seconds each request costs at full batching (see the module docstring, step 1)."""
    b = float(lat.max_batch)
    return np.asarray(lat.prefill_ms(tokens_in) / 1000.0
                      + tokens_out * (lat.step_ms(b) / 1000.0) / b, dtype=np.float64)


def work_rate(arrival_s: FloatArray, work: FloatArray, duration_s: float) -> FloatArray:
    """Work arriving per 1 s bin (replica-seconds per second)."""
    n = int(np.ceil(max(duration_s, 1.0))) + 1
    idx = np.minimum(arrival_s.astype(np.int64), n - 1)
    return np.bincount(idx, weights=work, minlength=n).astype(np.float64)


def occupancy_rate(start_s: FloatArray, hold_s: FloatArray, duration_s: float, share: float = 1.0) -> FloatArray:
    """Replicas busy in each 1 s bin when request i holds ``share`` of a replica over
    ``[start_s[i], start_s[i] + hold_s[i])``: bin t gets ``share × |[start, end) ∩ [t, t + 1)|``
    summed over requests (exact, no loop per request: each start and end adds its fraction of
    its own second and ±share to every later one, a cumulative difference array). The bins run
    to the later of ``duration_s`` and the last end; they sum to ``share × Σ hold_s``."""
    start = np.asarray(start_s, dtype=np.float64)
    end = start + np.maximum(np.asarray(hold_s, dtype=np.float64), 0.0)
    last = float(end.max()) if len(end) else 0.0
    n = int(np.ceil(max(duration_s, last, 1.0))) + 1
    edge = np.concatenate([start, end])
    sign = np.concatenate([np.full(len(start), share), np.full(len(end), -share)])
    sec = np.minimum(np.floor(edge).astype(np.int64), n - 1)
    # An edge at p opens (or closes) (sec + 1 − p) of its own second and every later second whole.
    part = np.bincount(sec, weights=sign * (sec + 1 - edge), minlength=n)
    whole = np.bincount(sec + 1, weights=sign, minlength=n + 1)[:n]
    return np.asarray(np.maximum(np.cumsum(whole) + part, 0.0), dtype=np.float64)


def forward_mean(x: FloatArray, window: int) -> FloatArray:
    """Mean of ``x[t : t + window]`` for every t (shorter at the end)."""
    if window <= 1:
        return x.astype(np.float64)
    c = np.concatenate([[0.0], np.cumsum(x)])
    n = len(x)
    hi = np.minimum(np.arange(n) + window, n)
    return np.asarray((c[hi] - c[:n]) / (hi - np.arange(n)), dtype=np.float64)


def forward_max(x: IntArray, window: int) -> IntArray:
    """Max of ``x[t : t + window + 1]`` for every t (sliding max by doubling, O(n log w))."""
    out = x.copy()
    span = 1
    # out[t] = max over x[t : t+span]; grow span by doubling until it covers window+1.
    while span < window + 1:
        step = min(span, window + 1 - span)
        k = min(step, len(out))  # a window longer than the series pads only what exists
        shifted = np.concatenate([out[k:], np.full(k, out[-1] if len(out) else 0)])
        # shifted[t] = out[t+step] covers x[t+step : t+step+span]
        out = np.maximum(out, shifted)
        span += step
    return out


def schedule_from_need(need: IntArray, cold_start_s: float) -> IntArray:
    """Replicas to hold at each second so that ``need`` is met with replicas started a cold start ahead."""
    return forward_max(need, int(np.ceil(cold_start_s)))


def schedule_for(rate: FloatArray, headroom: float, smoothing_s: int, cold_start_s: float,
                 max_replicas: int | None = None) -> IntArray:
    """The schedule of steps 2–3 for one headroom ``h`` and smoothing window ``S``; with
    ``max_replicas`` every second's need is clipped to it, so the schedule never exceeds it."""
    need = np.maximum(1, np.ceil(headroom * forward_mean(rate, smoothing_s) - 1e-9)).astype(np.int64)
    if max_replicas is not None:
        need = np.minimum(need, max(1, max_replicas))
    return schedule_from_need(need, cold_start_s)


def trailing_mean(x: FloatArray, window: int) -> FloatArray:
    """Mean of ``x[t - window : t]`` for every t >= 1 (shorter at the start); ``x[0]`` at t = 0:
    what a policy has seen at the start of second t (the seconds before it, not second t itself)."""
    n = len(x)
    if n == 0:
        return x.astype(np.float64)
    w = max(window, 1)
    c = np.concatenate([[0.0], np.cumsum(x)])
    t = np.arange(n)
    lo = np.maximum(t - w, 0)
    out = np.empty(n, dtype=np.float64)
    out[1:] = (c[t[1:]] - c[lo[1:]]) / (t[1:] - lo[1:])
    out[0] = float(x[0])  # no second seen yet: what the first one brings (generous to the reactor)
    return out


def reactive_schedule_for(rate: FloatArray, headroom: float, smoothing_s: int,
                          max_replicas: int | None = None, hold_s: int = 0) -> IntArray:
    """The schedule of a **perfect reactor**: at second t, ``ceil(h × mean work rate of the last S
    seconds)`` replicas (at least 1, at most ``max_replicas``), no foresight. Run on an engine whose
    cold start is a comeback time ``d`` (a wake, say), each rise it asks for serves ``d`` seconds
    after the second that showed it: the best a policy that knows the demand exactly, but only once
    it has arrived, can do (:func:`ebb.sim.compare.search_reactive`). ``hold_s`` > 0 keeps each
    second's count for that many seconds after it (up at once, down only once the rise is
    ``hold_s`` old: the trailing max), as a policy's scale-down delay does."""
    need = np.maximum(1, np.ceil(headroom * trailing_mean(rate, smoothing_s) - 1e-9)).astype(np.int64)
    if max_replicas is not None:
        need = np.minimum(need, max(1, max_replicas))
    if hold_s > 0:
        need = forward_max(need[::-1].copy(), hold_s)[::-1]  # the max of need[t - hold_s : t + 1]
    return np.asarray(need, dtype=np.int64)


@dataclass
class OraclePolicy:
    """Follows a precomputed per-second schedule (it has seen the whole trace)."""

    schedule: IntArray
    spec: str = "oracle"
    interval_s: float = 1.0
    pipeline: Pipeline = field(default_factory=lambda: Pipeline(1, 1, per_pod=False))
    _starts: IntArray | None = field(default=None, init=False, repr=False, compare=False)
    """The first second of each new count in the schedule (built on the first :meth:`next_change`)."""

    def decide(self, obs: Observation, *, spans: Spans = NO_SPANS) -> Decision:
        k = min(int(obs.t_s), len(self.schedule) - 1)
        n = int(self.schedule[max(k, 0)])
        frm = obs.spec_replicas  # 0 at the engines' initial call (no pods yet)
        # A reason only on a change: the oracle search runs this every simulated second of every
        # candidate schedule, and holds are never recorded.
        why = (f"{self.spec}: schedule {n} at {k} s",) if n != frm else ()
        return Decision.change(obs.t_s, frm, n, policy=self.spec, reasons=why)

    def next_change(self, t_s: float, spec_replicas: int) -> float:
        """The first reconcile from ``t_s`` on whose scheduled count is not ``spec_replicas``; inf when
        none (:class:`~ebb.sim.policy.Scheduled`: the request engine skips the holds before it)."""
        sched, last = self.schedule, len(self.schedule) - 1
        if last < 0:
            return t_s
        if self._starts is None:
            self._starts = np.flatnonzero(sched[1:] != sched[:-1]) + 1
        starts, t = self._starts, t_s
        while True:
            k = max(min(int(t), last), 0)
            if max(0, int(sched[k])) != spec_replicas:  # what decide's Decision.change moves to
                return t
            j = int(np.searchsorted(starts, k, side="right"))
            if j == len(starts):
                return math.inf
            # The first reconcile at or after the next count's first second (whole seconds: exact).
            t += math.ceil((int(starts[j]) - t) / self.interval_s) * self.interval_s

    def observe(self, obs: Observation) -> None:
        """Nothing to ingest: the schedule was computed from the whole trace beforehand."""

    def gate_queries(self) -> tuple[str, ...]:
        return ()


@dataclass(frozen=True)
class OracleSearch:
    """Result of :func:`search_oracle`: the verified schedule and how it was found."""

    schedule: IntArray
    headroom: float
    smoothing_s: int
    replica_seconds: float
    violation_pct: float
    tried: int


SEARCH_SMOOTHINGS_S: tuple[int, ...] = (1, 10)
"""The smoothing windows (s) a fresh :func:`search_oracle` tries."""
SEARCH_STEPS = 7
"""Bisection steps per smoothing of a fresh search."""
NEAR_STEPS = 4
"""Bisection steps of a search started ``near`` an earlier one (one smoothing only)."""


def search_runs(near: bool) -> int:
    """Candidates a :func:`search_oracle` with the default smoothings and steps simulates when its first
    headroom already meets the SLO (the usual case; each doubling past it adds one): 16 fresh, 5 ``near``."""
    return 1 + NEAR_STEPS if near else len(SEARCH_SMOOTHINGS_S) * (1 + SEARCH_STEPS)


def search_oracle(rate: FloatArray, cold_start_s: float,
                  evaluate: Callable[[IntArray], tuple[float, float]], *,
                  target_violation_pct: float = 0.1, smoothing_s: tuple[int, ...] = SEARCH_SMOOTHINGS_S,
                  steps: int = SEARCH_STEPS, on_try: Callable[[], None] | None = None,
                  near: tuple[float, int] | None = None, max_replicas: int | None = None,
                  build: Callable[[float, int], IntArray] | None = None) -> OracleSearch:
    """Find the cheapest verified schedule; ``evaluate(schedule) -> (replica_seconds, violation_pct)``.

    ``build(headroom, smoothing_s)`` makes a candidate schedule; default :func:`schedule_for` on
    ``rate`` and ``cold_start_s`` (foresight); :func:`reactive_schedule_for` gives the perfect
    reactor's search instead (same bracket and bisection).

    ``near`` = (headroom, smoothing) of an earlier search on a rescaled copy of the workload:
    only that smoothing is tried and the bisection starts from a ×1.4 bracket around it.
    ``max_replicas`` (``--peak-replicas N``): no candidate holds more than N replicas at any
    second. When no capped schedule meets the target, the one with the fewest violations is
    returned with its measured ``violation_pct`` (above the target: N replicas cannot serve the
    peak) instead of an error, so the cap is never exceeded and the shortfall is reported.
    """
    best: OracleSearch | None = None
    fewest: OracleSearch | None = None  # capped search only: the least-violating candidate seen
    tried = 0

    def make(h: float, s: int) -> IntArray:
        return schedule_for(rate, h, s, cold_start_s, max_replicas) if build is None else build(h, s)

    def run(h: float, s: int) -> tuple[IntArray, float, float]:
        nonlocal tried
        sched = make(h, s)
        cost, viol = evaluate(sched)
        tried += 1
        if on_try is not None:
            on_try()
        return sched, cost, viol

    if near is not None:
        # A previous search's (headroom, smoothing) on a similar workload: bracket around it.
        smoothing_s, steps = (near[1],), NEAR_STEPS
    for s in smoothing_s:
        lo, hi = (near[0] / 1.4, near[0] * 1.4) if near is not None else (0.25, 2.0)
        sched, cost, viol = run(hi, s)
        while viol > target_violation_pct and hi < 256:
            if max_replicas is not None and int(sched.min()) >= max_replicas:
                break  # every second already holds the cap: more headroom cannot add a replica
            lo, hi = hi, hi * 2.0
            sched, cost, viol = run(hi, s)
        if viol > target_violation_pct:
            if max_replicas is not None and (fewest is None or viol < fewest.violation_pct):
                fewest = OracleSearch(sched, hi, s, cost, viol, 0)
            continue
        ok = (sched, cost, viol, hi)
        for _ in range(steps):
            mid = float(np.sqrt(lo * hi))
            sc, c, v = run(mid, s)
            if v <= target_violation_pct:
                hi, ok = mid, (sc, c, v, mid)
            else:
                lo = mid
        cand = OracleSearch(ok[0], ok[3], s, ok[1], ok[2], 0)
        if best is None or cand.replica_seconds < best.replica_seconds:
            best = cand
    if best is None and fewest is not None:
        best = fewest
    if best is None:
        # Permanent: the same trace, load and SLO fail the same way at any headroom; only the flags can change.
        raise ConfigError(f"oracle: no schedule keeps SLO violations <= {target_violation_pct:g} % on this trace "
                          "even at 256x headroom (fix: relax --slo-ttft-ms/--slo-e2e-ms, or lower --load-scale "
                          "or --peak-replicas)")
    return OracleSearch(best.schedule, best.headroom, best.smoothing_s, best.replica_seconds,
                        best.violation_pct, tried)
