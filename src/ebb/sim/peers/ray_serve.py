"""``ray``: Ray Serve's default autoscaler — the decision as pure functions, and the emulated controller.

Upstream: ``ray-project/ray`` release 2.60.0 (commit ``b7f4259e944b``, the installed wheel):
``python/ray/serve/autoscaling_policy.py`` (``replica_queue_length_autoscaling_policy``,
``_apply_scaling_factors``, ``_apply_delay_logic``, ``_apply_autoscaling_config``),
``_private/autoscaling_state.py`` (``get_decision_num_replicas``, ``apply_bounds``,
``get_total_num_requests``), ``_private/autoscaling_metrics_merge.py`` and ``_private/metrics_utils.py``
(the merge and time-weighted mean), ``_private/router.py`` (what a handle records and pushes),
``config.py`` (``AutoscalingConfig`` defaults) and ``_private/constants.py``. Facts and formulas
carry over; the code is ours. Ported upstream cases: ``tests/data/upstream/ray/autoscaling_policy.json``;
checked against a real Ray Serve by ``tests/integration/test_ray_serve_real.py``.

One decision (every ``CONTROL_LOOP_INTERVAL_S`` = 0.1 s on the controller):

1. ``total`` = running + queued requests, a time-weighted mean of the samples the handles
   pushed (the last ``look_back_period_s`` of each series, held until now; :func:`aggregate_total`).
   With more than one series the mean starts at the first non-zero total (:func:`merge_total`),
   so idle samples at the start of the window do not dilute it.
2. Cold start: with 0 running replicas and ``total > 0`` the answer is
   ``max(ceil(upscaling_factor), target)`` at once, no delay.
3. Raw desired = ``total / target_ongoing_requests`` (the target when 0 replicas run).
4. Gain: ``ceil(running + factor × (desired − running))`` (up- or downscaling factor by the sign
   of the change); a downscale the gain would stall at ``running`` steps down by one.
5. Delay: a scale-up applies only once ``upscale_delay_s`` has passed since the first of an
   unbroken run of scale-up wishes (elapsed time; older releases counted loop iterations);
   likewise ``downscale_delay_s`` (``downscale_to_zero_delay_s`` for 1 → 0; other scale-downs
   stop at 1). A wish in the other direction, or none, restarts the clock.
6. Bounds: clip to ``[min_replicas, max_replicas]``.

Defaults (2.60.0): ``target_ongoing_requests`` 2, ``upscale_delay_s`` 30, ``downscale_delay_s``
600, ``look_back_period_s`` 30, ``metrics_interval_s`` 10 (and the handle/replica push-interval
variables, 10 s), records every ``min(0.2 × look_back, metrics_interval)`` = 6 s, gains 1,
``min_replicas`` 1, ``max_replicas`` 1, ``initial_replicas`` = min.

Deviations, and why: ``max`` defaults to 2 × the oracle's peak (at least 4) and the fleet starts
warm at the oracle's peak unless ``initial=`` is given (the simulator's rules for every peer);
target capacity, custom policies, gang scheduling and the ``max``/``min`` aggregation functions are
not modelled (defaults only); one handle (Ray has one per caller and proxy); the handle's counters
are read from the simulator's per-second snapshots, so its samples are up to 1 s stale; delays
run on the virtual clock.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from ebb.config.policy_specs import PolicySpecItem, check_keys, param_float, param_int
from ebb.errors import ConfigError
from ebb.model.decision import Decision
from ebb.model.observation import Observation, Pipeline
from ebb.model.spans import NO_SPANS, Spans
from ebb.sim.policy_context import PolicyContext

CONTROL_LOOP_INTERVAL_S = 0.1
"""``RAY_SERVE_CONTROL_LOOP_INTERVAL_S`` default (``_private/constants.py``)."""
METRIC_RECORD_INTERVAL_FACTOR = 0.2
"""``RAY_SERVE_AUTOSCALING_METRIC_RECORD_INTERVAL_FACTOR``: handles record a sample every
``min(look_back_period_s × 0.2, metrics_interval_s)``."""
DELAY_EPS_S = 1e-6
"""Upstream's tolerance on the elapsed-delay comparison (float drift of wall-clock differences)."""

Sample = tuple[float, float]
"""(timestamp s, value): one point of a right-continuous step function (a gauge)."""


@dataclass(frozen=True)
class RayAutoscalingConfig:
    """``AutoscalingConfig`` fields the default policy reads, with Ray 2.60.0's defaults."""

    target_ongoing_requests: float = 2.0
    """Running + queued requests wanted per replica (``DEFAULT_TARGET_ONGOING_REQUESTS``)."""
    min_replicas: int = 1
    max_replicas: int = 1
    """Ray's default 1; the simulator's builder sets 2 × the oracle's peak (at least 4)."""
    initial_replicas: int | None = None
    """Replicas at deploy; None = ``min_replicas``."""
    upscale_delay_s: float = 30.0
    downscale_delay_s: float = 600.0
    downscale_to_zero_delay_s: float | None = None
    """Delay for 1 → 0; None = ``downscale_delay_s``."""
    look_back_period_s: float = 30.0
    metrics_interval_s: float = 10.0
    """Handle push period (``DEFAULT_METRICS_INTERVAL_S``; also the env push-interval defaults)."""
    upscaling_factor: float | None = None
    downscaling_factor: float | None = None
    upscale_smoothing_factor: float | None = None
    """Deprecated alias, used when ``upscaling_factor`` is unset."""
    downscale_smoothing_factor: float | None = None
    smoothing_factor: float = 1.0
    """Deprecated; the fallback of both gains."""

    def __post_init__(self) -> None:
        if not self.target_ongoing_requests > 0:
            raise ValueError(f"target_ongoing_requests must be > 0, got {self.target_ongoing_requests!r}")
        if not 0 <= self.min_replicas <= self.max_replicas or self.max_replicas < 1:
            raise ValueError(f"need 0 <= min_replicas <= max_replicas >= 1, got {self.min_replicas}, {self.max_replicas}")
        if self.upscale_delay_s < 0 or self.downscale_delay_s < 0:
            raise ValueError("delays must be >= 0 s")
        if not (self.look_back_period_s > 0 and self.metrics_interval_s > 0):
            raise ValueError("look_back_period_s and metrics_interval_s must be > 0 s")

    @property
    def upscaling_gain(self) -> float:
        """``get_upscaling_factor``: the first set (truthy) of the new name, the alias, the fallback."""
        return self.upscaling_factor or self.upscale_smoothing_factor or self.smoothing_factor

    @property
    def downscaling_gain(self) -> float:
        return self.downscaling_factor or self.downscale_smoothing_factor or self.smoothing_factor

    @property
    def record_interval_s(self) -> float:
        """How often a handle records its running + queued count."""
        return min(self.look_back_period_s * METRIC_RECORD_INTERVAL_FACTOR, self.metrics_interval_s)


@dataclass(frozen=True)
class DelayState:
    """The delay logic's memory: ``counter`` > 0 counts consecutive scale-up wishes, < 0 scale-down
    ones (kept as upstream keeps it; only its sign matters), ``since_s`` when the run began."""

    counter: int = 0
    since_s: float | None = None


NO_DELAY = DelayState()


def scale_by_factor(desired: float, current: int, config: RayAutoscalingConfig) -> int:
    """Apply the up/down gain to the move from ``current`` running replicas to ``desired``."""
    if current == 0:
        return math.ceil(desired)  # from zero a gain would compound every tick; bounds decide
    delta = desired - current
    gain = config.upscaling_gain if delta > 0 else config.downscaling_gain
    scaled = math.ceil(current + gain * delta)
    if math.ceil(desired) < current and scaled == current:
        scaled -= 1  # a fractional gain must not stall a scale-down forever
    return scaled


def apply_delays(desired: int, target: int, config: RayAutoscalingConfig, state: DelayState,
                 now_s: float) -> tuple[int, DelayState]:
    """The replica count to set now given the wish ``desired`` and the current ``target``."""
    counter, since = state.counter, state.since_s
    if desired > target:
        if counter < 0:
            counter, since = 0, None
        counter += 1
        since = now_s if since is None else since
        if now_s - since + DELAY_EPS_S >= config.upscale_delay_s:
            return desired, NO_DELAY
        return target, DelayState(counter, since)
    if desired < target:
        if counter > 0:
            counter, since = 0, None
        counter -= 1
        if target == 1:  # only 1 -> 0 may reach zero, on its own delay
            delay = config.downscale_to_zero_delay_s
            delay = config.downscale_delay_s if delay is None else delay
        else:
            delay, desired = config.downscale_delay_s, max(1, desired)
        since = now_s if since is None else since
        if now_s - since + DELAY_EPS_S >= delay:
            return desired, NO_DELAY
        return target, DelayState(counter, since)
    return target, NO_DELAY


def queue_length_desired(total_requests: float, running: int, target: int,
                         config: RayAutoscalingConfig) -> float:
    """The default policy's raw wish: ``running × total / (target_ongoing × running)``."""
    if running == 0:
        return float(target)
    return running * (total_requests / (config.target_ongoing_requests * running))


def policy_step(total_requests: float, running: int, target: int, config: RayAutoscalingConfig,
                state: DelayState, now_s: float, *, raw_desired: float | None = None) -> tuple[int, DelayState]:
    """One call of the wrapped policy (before bounds): ``raw_desired`` replaces the default policy's
    wish (upstream's tests wrap custom policies the same way); returns (replicas, new state)."""
    if running == 0 and total_requests > 0:
        return max(math.ceil(config.upscaling_gain), target), state  # cold start fast path
    if raw_desired is None:
        raw_desired = queue_length_desired(total_requests, running, target, config)
    scaled = scale_by_factor(raw_desired, running, config)
    if running == 0 and scaled > 0:
        return scaled, state
    return apply_delays(max(0, scaled), target, config, state, now_s)


def bounded(replicas: int, config: RayAutoscalingConfig) -> int:
    """``apply_bounds`` without target capacity: clip to ``[min_replicas, max_replicas]``."""
    return max(config.min_replicas, min(config.max_replicas, replicas))


def merge_total(series: Sequence[Sequence[Sample]]) -> list[Sample]:
    """Sum of several gauges as one step function, as Ray's merge kernel builds it: a lone
    source passes through as it is; with more, an event is emitted only where a source's value
    changes (each source starts from 0), so the total starts at the first non-zero sample and
    leading zeros drop out of the later mean. Timestamps are then rounded to 10 ms, the last
    event of a bucket winning."""
    live = [s for s in series if s]
    if len(live) == 1:
        return list(live[0])
    events = sorted((t, k, i, v) for k, s in enumerate(live) for i, (t, v) in enumerate(s))
    latest = [0.0] * len(live)
    out: list[Sample] = []
    for t, k, _, v in events:
        if v == latest[k]:
            continue  # LOCF change detection: an unchanged value is no event
        latest[k] = v
        rt, total = round(t, 2), sum(latest)
        if out and out[-1][0] == rt:
            out[-1] = (rt, total)
        else:
            out.append((rt, total))
    return out


def time_weighted_mean(step: Sequence[Sample], *, window_start_s: float | None = None,
                       last_window_s: float = 1.0) -> float | None:
    """Mean of the step function from ``window_start_s`` (default its first point; earlier than
    that counts as 0) to ``last_window_s`` past its last point; None when nothing overlaps."""
    if not step:
        return None
    end = step[-1][0] + last_window_s
    start = step[0][0] if window_start_s is None else window_start_s
    if start >= end:
        return None
    area = 0.0
    for i, (t, v) in enumerate(step):
        t_next = step[i + 1][0] if i + 1 < len(step) else end
        lo, hi = max(t, start), min(t_next, end)
        if hi > lo:
            area += v * (hi - lo)
    return area / (end - start)


def aggregate_total(series: Sequence[Sequence[Sample]], now_s: float) -> float:
    """``get_total_num_requests`` (aggregation ``mean``): merge every source, open the window once
    all sources have a point, hold the last point until ``now_s`` (≥ 1 ms), average."""
    merged = merge_total(series)
    if not merged:
        return 0.0
    last_window = now_s - merged[-1][0]
    last_window = last_window if last_window > 0 else 1e-3
    live = [s for s in series if s]
    start: float | None = None
    if len(live) > 1:
        aligned = max(s[0][0] for s in live)
        if aligned <= merged[-1][0]:
            start = max(aligned, merged[0][0])
    value = time_weighted_mean(merged, window_start_s=start, last_window_s=last_window)
    return 0.0 if value is None else value


# ---- the emulated deployment: handle metrics + controller loop in virtual time -------------------

KEYS: tuple[str, ...] = ("target", "upscale_delay", "downscale_delay", "downscale_to_zero_delay", "look_back",
                         "metrics_interval", "upscaling_factor", "downscaling_factor", "min", "max", "initial")
HELP = ("Ray Serve default autoscaler on running+queued requests per replica: target=2 (target_ongoing_requests), "
        "upscale_delay=30 s, downscale_delay=600 s, look_back=30 s mean, metrics_interval=10 s push, "
        "upscaling_factor=downscaling_factor=1, 0.1 s loop, min=1 (0: to zero after downscale_to_zero_delay), "
        "max, initial")


RECORD_PHASE_S = CONTROL_LOOP_INTERVAL_S / 2
"""Offset of the handle's record grid (see :class:`HandleMetrics`)."""


class HandleMetrics:
    """One ``DeploymentHandle``'s metric path as the controller sees it (virtual time).

    Every ``record_interval_s`` the handle records its queued requests (one series from the
    start) and the requests it has sent to each replica (one series per replica, from the first
    request it sends there, as Ray's per-replica counter appears); it keeps the last
    ``look_back_period_s`` of each and pushes them all every ``metrics_interval_s`` — at once when 0
    replicas run and requests wait (Ray's scale-from-zero shortcut). The controller keeps the
    newest push and averages it up to its own clock (:func:`aggregate_total`; the window opens
    once every series has a point, so a replica's first requests shorten it).

    The simulator's counts are per-second snapshots, so a sample is up to 1 s stale (0.5 s on
    average; Ray's handle reads its live counters). The record grid is offset by half a control
    tick (0.05 s) because a tick that lands on a whole second in float arithmetic (13.999…) would
    read the previous second's snapshot; a real handle's phase is arbitrary anyway.
    """

    QUEUED = -1
    """Series key of the queued requests (replica ids are ≥ 0)."""

    def __init__(self, config: RayAutoscalingConfig) -> None:
        self.config = config
        self.series: dict[int, list[Sample]] = {self.QUEUED: []}
        self.report: tuple[tuple[Sample, ...], ...] = ()
        self._next_record_s = RECORD_PHASE_S
        self._next_push_s = config.metrics_interval_s
        # The newest push, pre-reduced so each 0.1 s decision costs O(1): the window start, the
        # area under the merged total up to its last point, and that last point.
        self._start_s = self._last_t_s = self._last_v = self._area = 0.0
        self._has_report = False

    def due(self, now_s: float, queued: float, running_replicas: int) -> bool:
        """Whether a record or a push falls due by ``now_s`` (else :meth:`advance` would do nothing)."""
        return now_s + 1e-9 >= min(self._next_record_s, self._next_push_s) or (running_replicas == 0 and queued > 0)

    def advance(self, now_s: float, queued: float, sent: dict[int, float], running_replicas: int) -> None:
        """Record and push what falls due by ``now_s``; ``sent`` maps a replica key to the requests
        the handle has running there (the caller's keys; a replica leaves when it is gone)."""
        cfg, eps = self.config, 1e-9
        series = self.series
        if now_s + eps >= self._next_record_s:
            series[self.QUEUED].append((now_s, queued))
            for key, n in sent.items():
                if key in series or n > 0:
                    series.setdefault(key, []).append((now_s, n))
            while self._next_record_s <= now_s + eps:
                self._next_record_s += cfg.record_interval_s
        if now_s + eps >= self._next_push_s or (running_replicas == 0 and queued > 0):
            horizon = now_s - cfg.look_back_period_s
            for key in list(series):
                points = series[key]
                while points and points[0][0] <= horizon:
                    points.pop(0)  # the handle keeps only its look-back window
                if not points and key != self.QUEUED:
                    del series[key]
            queued_points = tuple(series[self.QUEUED]) or ((now_s, queued),)
            self.report = (queued_points, *(tuple(v) for k, v in series.items() if k != self.QUEUED))
            self._reduce()
            while self._next_push_s <= now_s + eps:
                self._next_push_s += cfg.metrics_interval_s

    def _reduce(self) -> None:
        """Pre-reduce the newest push as :func:`aggregate_total` would read it."""
        merged = merge_total(self.report)
        self._has_report = bool(merged)
        if not merged:
            return
        start = merged[0][0]
        live = [s for s in self.report if s]
        if len(live) > 1:
            aligned = max(s[0][0] for s in live)
            if aligned <= merged[-1][0]:
                start = max(aligned, merged[0][0])
        area = 0.0
        for (t, v), (t2, _) in zip(merged, merged[1:]):
            lo = max(t, start)
            if t2 > lo:
                area += v * (t2 - lo)
        self._start_s, self._area = start, area
        self._last_t_s, self._last_v = merged[-1]

    def total_requests(self, now_s: float) -> float:
        """The controller's ``total_num_requests`` at ``now_s`` from the newest push (0 before any);
        equals ``aggregate_total(self.report, now_s)``."""
        if not self._has_report:
            return 0.0
        hold = now_s - self._last_t_s
        hold = hold if hold > 0 else 1e-3
        span = self._last_t_s + hold - self._start_s
        if span <= 0:
            return 0.0
        return (self._area + self._last_v * hold) / span


@dataclass
class RayServePolicy:
    """Ray Serve's controller for one deployment: every 0.1 s, the default policy on the handle's
    pushed look-back mean of running + queued requests (``obs.total_inflight``), with the delays
    measured on the virtual clock, then ``[min, max]`` bounds.

    Guarantees (upstream's rules): no scale-up before ``upscale_delay_s`` of unbroken scale-up
    wishes and no scale-down before ``downscale_delay_s`` of scale-down wishes; a scale-down other
    than 1 → 0 never goes below 1; the answer stays in ``[min_replicas, max_replicas]``. Reads
    ``running`` = ready replicas and ``target`` = ``obs.spec_replicas``, as the controller does.
    """

    spec: str
    config: RayAutoscalingConfig
    initial: int
    interval_s: float = CONTROL_LOOP_INTERVAL_S
    pipeline: Pipeline = field(default_factory=lambda: Pipeline(1, 1))
    handle: HandleMetrics | None = None
    delay: DelayState = NO_DELAY

    def __post_init__(self) -> None:
        if self.handle is None:
            self.handle = HandleMetrics(self.config)

    def _handle(self) -> HandleMetrics:
        assert self.handle is not None  # set in __post_init__
        return self.handle

    def decide(self, obs: Observation, *, spans: Spans = NO_SPANS) -> Decision:
        if obs.t_s == 0.0 and not obs.pods:
            return Decision.change(0.0, 0, self.initial, policy=self.spec, reasons=(f"{self.spec}: initial fleet",))
        self.observe(obs)
        total = self._handle().total_requests(obs.t_s)
        running, target = obs.ready_replicas, obs.spec_replicas
        wish, self.delay = policy_step(total, running, target, self.config, self.delay, obs.t_s)
        n = bounded(wish, self.config)
        return Decision.change(obs.t_s, target, n, policy=self.spec, reasons=(
            f"ray: {total:.2f} ongoing (look-back mean) / {self.config.target_ongoing_requests:g} per replica, "
            f"{running} running, target {target} -> {n}",))

    def observe(self, obs: Observation) -> None:
        """The handle keeps recording and pushing whether or not the controller decides. It reads
        the router queue (``obs.queued``) and each ready replica's running requests; requests still
        finishing on draining replicas do not count (the controller masks the series of replicas
        that are no longer running)."""
        handle, queued = self._handle(), obs.queued or 0.0
        if not handle.due(obs.t_s, queued, obs.ready_replicas):
            return
        sent = {int(p.replica): p.inflight for p in obs.pods if p.ready_s is not None and p.inflight is not None}
        handle.advance(obs.t_s, queued, sent, obs.ready_replicas)

    def gate_queries(self) -> tuple[str, ...]:
        return ()


def build(item: PolicySpecItem, ctx: PolicyContext) -> RayServePolicy:
    """``ray:key=value,...`` → :class:`RayServePolicy`; ConfigError names the spec and the knob."""
    check_keys(item, KEYS)
    mn, mx = ctx.bounds(item, min_lo=0)
    initial = param_int(item, "initial", max(mn, min(mx, ctx.initial_replicas)), lo=0)
    if not mn <= initial <= mx:
        raise ConfigError(f"policy {item.text!r}: initial={initial} must lie in [min={mn}, max={mx}]")
    z = item.get("downscale_to_zero_delay")
    cfg = RayAutoscalingConfig(
        target_ongoing_requests=param_float(item, "target", 2.0, lo=0.001),
        min_replicas=mn, max_replicas=mx, initial_replicas=initial,
        upscale_delay_s=param_float(item, "upscale_delay", 30.0, lo=0.0),
        downscale_delay_s=param_float(item, "downscale_delay", 600.0, lo=0.0),
        downscale_to_zero_delay_s=None if z is None else param_float(item, "downscale_to_zero_delay", 0.0, lo=0.0),
        look_back_period_s=param_float(item, "look_back", 30.0, lo=0.01),
        metrics_interval_s=param_float(item, "metrics_interval", 10.0, lo=0.01),
        upscaling_factor=_factor(item, "upscaling_factor"),
        downscaling_factor=_factor(item, "downscaling_factor"))
    return RayServePolicy(item.text, cfg, initial)


def _factor(item: PolicySpecItem, key: str) -> float | None:
    """A gain knob (> 0), None when unset (Ray then falls back to ``smoothing_factor`` = 1)."""
    return None if item.get(key) is None else param_float(item, key, 1.0, lo=1e-6)
