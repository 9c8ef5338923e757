"""``kpa``: the Knative Pod Autoscaler (what KServe's serverless mode scales with) in the simulator.

Upstream: ``knative/serving`` @ ``98e5ef90aa7033797aa0a61ef97f3ff7e49a3944`` (knative-v1.23.0-5):
the decider (:mod:`ebb.sim.peers.kpa_core`, ``pkg/autoscaler/scaling/autoscaler.go``), its windows
(:mod:`ebb.sim.peers.kpa_window`, ``pkg/autoscaler/aggregation/``), the collector
(``pkg/autoscaler/metrics/collector.go``: every pod scraped each second), the 2 s tick
(``scaling/multiscaler.go``), the bounds and scale-to-zero of the PA reconciler
(``pkg/reconciler/autoscaling/kpa/scaler.go``) and the defaults of ``config-autoscaler``
(``pkg/autoscaler/config/config.go``, ``config/core/configmaps/autoscaler.yaml``).

What the emulation does each virtual second (``interval_s`` = 1, the scrape): it records the fleet's
concurrency — requests in flight on the engines plus those queued in front of them
(``Observation.total_inflight``, where Knative counts queue-proxy and activator requests) — into a
stable window (60 s) and a panic window (10 % of it, 6 s). Every second call (the 2 s tick) it runs
the decider on the two window averages with ``target × utilization`` per pod (100 × 0.7 = 70 by
default) and applies ``[min, max]``.

Simplifications (none changes a steady-state pod count): the activator's burst-capacity
bookkeeping is not modelled; scale to zero (``min=0``) happens once the decider has wanted 0 for
``scale-to-zero-grace-period`` (30 s), standing for upstream's "inactive for the grace period with
the activator in the path"; scale from zero reacts at the next tick (upstream pokes the decider at
once); every pod is scraped (upstream samples and extrapolates past 3 pods).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ebb.config.policy_specs import PolicySpecItem, check_keys, param_choice, param_float, param_int
from ebb.errors import ConfigError
from ebb.model.decision import Decision
from ebb.model.observation import Observation, Pipeline
from ebb.model.spans import NO_SPANS, Spans
from ebb.sim.peers.kpa_core import TICK_S, KpaSpec, KpaState, kpa_initial_state, kpa_scale
from ebb.sim.peers.kpa_window import TimedBuckets, WeightedBuckets
from ebb.sim.policy_context import PolicyContext

KEYS: tuple[str, ...] = ("target", "utilization", "stable_window", "panic_window_pct", "panic_threshold",
                         "max_scale_up_rate", "max_scale_down_rate", "scale_down_delay", "min", "max",
                         "aggregation")
HELP = ("Knative/KServe KPA on concurrency per pod: target=100 (x utilization=0.7), stable_window=60 s, "
        "panic_window_pct=10, panic_threshold=2.0, max_scale_up_rate=1000, max_scale_down_rate=2, "
        "scale_down_delay=0 s, 2 s tick, min=1 (0: scale to zero after 30 s), max, aggregation=linear|weighted")

SCALE_TO_ZERO_GRACE_S = 30.0
"""``scale-to-zero-grace-period`` default."""


@dataclass(frozen=True)
class KpaConfig:
    """The emulated revision's autoscaling settings (upstream defaults)."""

    target_concurrency: float = 100.0
    """``container-concurrency-target-default`` / ``autoscaling.knative.dev/target``: in-flight requests per pod."""
    utilization_ratio: float = 0.7
    """``container-concurrency-target-percentage`` 70 %: the decider aims at target × this."""
    stable_window_s: int = 60
    panic_window_pct: float = 10.0
    panic_threshold_ratio: float = 2.0
    max_scale_up_rate: float = 1000.0
    max_scale_down_rate: float = 2.0
    scale_down_delay_s: int = 0
    min_replicas: int = 1
    max_replicas: int = 0
    """0 = unbounded (upstream); the builder sets 2 × the oracle's peak."""
    weighted: bool = False
    """``autoscaling.knative.dev/metric-aggregation-algorithm: weightedExponential``."""

    @property
    def panic_window_s(self) -> int:
        """Stable window × percentage, rounded to whole seconds, at least the 1 s bucket."""
        return max(1, int(math.floor(self.stable_window_s * self.panic_window_pct / 100.0 + 0.5)))

    def decider_spec(self) -> KpaSpec:
        return KpaSpec(target_value=max(0.01, self.target_concurrency * self.utilization_ratio),
                       max_scale_up_rate=self.max_scale_up_rate, max_scale_down_rate=self.max_scale_down_rate,
                       panic_threshold_ratio=self.panic_threshold_ratio, stable_window_s=float(self.stable_window_s),
                       scale_down_delay_s=float(self.scale_down_delay_s))


@dataclass
class KpaPolicy:
    """Knative's collector (1 s), decider (2 s tick) and PA scaler over one revision."""

    spec: str
    config: KpaConfig
    initial: int = 1
    interval_s: float = 1.0
    pipeline: Pipeline = field(default_factory=lambda: Pipeline(1, 1))
    _stable: TimedBuckets = field(init=False)
    _panic: TimedBuckets = field(init=False)
    _state: KpaState | None = field(default=None, init=False)
    _last_tick_s: float | None = field(default=None, init=False)
    _zero_since_s: float | None = field(default=None, init=False)
    _last_sample_s: float | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        kind = WeightedBuckets if self.config.weighted else TimedBuckets
        self._stable = kind(self.config.stable_window_s, 1.0)
        self._panic = kind(self.config.panic_window_s, 1.0)

    def observe(self, obs: Observation) -> None:
        """Record the second's concurrency (the collector scrapes whether or not the decider ticks).

        One scrape per observation time: a bucket sums what it is given, so the same observation
        passed to ``observe`` and then ``decide`` is recorded once."""
        if obs.total_inflight is not None and obs.t_s != self._last_sample_s:
            self._last_sample_s = obs.t_s
            self._stable.record(obs.t_s, obs.total_inflight)
            self._panic.record(obs.t_s, obs.total_inflight)

    def decide(self, obs: Observation, *, spans: Spans = NO_SPANS) -> Decision:
        if obs.t_s == 0.0 and not obs.pods:
            return Decision.change(0.0, 0, self.initial, policy=self.spec, reasons=(f"{self.spec}: initial fleet",))
        self.observe(obs)
        cur = obs.spec_replicas
        if self._last_tick_s is not None and obs.t_s - self._last_tick_s < TICK_S - 1e-9:
            return Decision.change(obs.t_s, cur, cur, policy=self.spec, reasons=("kpa: between ticks",))
        self._last_tick_s = obs.t_s
        spec = self.config.decider_spec()
        if self._state is None:
            self._state = kpa_initial_state(spec, obs.ready_replicas, obs.t_s)
        observed = None if self._stable.is_empty(obs.t_s) else (
            self._stable.window_average(obs.t_s), self._panic.window_average(obs.t_s))
        want, self._state = kpa_scale(spec, self._state, observed, obs.ready_replicas, obs.t_s)
        if want is None or observed is None:
            return Decision.change(obs.t_s, cur, cur, policy=self.spec, reasons=("kpa: no data yet",))
        n = self._bounded(want, obs.t_s)
        mode = "panic" if self._state.panic_time_s is not None else "stable"
        return Decision.change(obs.t_s, cur, n, policy=self.spec, reasons=(
            f"kpa: desired {n} ({mode}; stable {observed[0]:.1f}, panic {observed[1]:.1f} in flight, "
            f"target {spec.target_value:g}/pod)",))

    def _bounded(self, want: int, t_s: float) -> int:
        """The PA scaler: ``[min, max]`` bounds, then the scale-to-zero grace period."""
        c = self.config
        n = max(want, c.min_replicas)
        if c.max_replicas > 0:
            n = min(n, c.max_replicas)
        if n > 0:
            self._zero_since_s = None
            return n
        if self._zero_since_s is None:
            self._zero_since_s = t_s
        return 0 if t_s - self._zero_since_s >= SCALE_TO_ZERO_GRACE_S else 1

    def gate_queries(self) -> tuple[str, ...]:
        return ()


def build(item: PolicySpecItem, ctx: PolicyContext) -> KpaPolicy:
    """A :class:`KpaPolicy` from ``kpa:key=value,...``; ConfigError names the spec and the parameter."""
    check_keys(item, KEYS)
    mn, mx = ctx.bounds(item, min_lo=0)
    target = param_float(item, "target", 100.0, lo=0.01)
    util = param_float(item, "utilization", 0.7, lo=0.01, hi=1.0)
    if target * util < 0.01:
        raise ConfigError(f"policy {item.text!r}: target x utilization must be at least 0.01")
    cfg = KpaConfig(
        target_concurrency=target, utilization_ratio=util,
        stable_window_s=_window(item), panic_window_pct=param_float(item, "panic_window_pct", 10.0, lo=1.0, hi=100.0),
        panic_threshold_ratio=param_float(item, "panic_threshold", 2.0, lo=1.1, hi=10.0),
        max_scale_up_rate=_rate(item, "max_scale_up_rate", 1000.0),
        max_scale_down_rate=_rate(item, "max_scale_down_rate", 2.0),
        scale_down_delay_s=param_int(item, "scale_down_delay", 0, lo=0),
        min_replicas=mn, max_replicas=mx,
        weighted=param_choice(item, "aggregation", "linear", ("linear", "weighted")) == "weighted")
    return KpaPolicy(item.text, cfg, initial=min(mx, ctx.initial_replicas))


def _window(item: PolicySpecItem) -> int:
    w = param_int(item, "stable_window", 60, lo=6)  # upstream WindowMin 6 s .. WindowMax 1 h
    if w > 3600:
        raise ConfigError(f"policy {item.text!r}: stable_window={w} must be within [6, 3600] s")
    return w


def _rate(item: PolicySpecItem, key: str, default: float) -> float:
    v = param_float(item, key, default, lo=1.0)
    if v <= 1.0:
        raise ConfigError(f"policy {item.text!r}: {key}={v} must be greater than 1.0")
    return v
