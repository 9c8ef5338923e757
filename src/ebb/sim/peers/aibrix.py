"""``aibrix``: the AIBrix PodAutoscaler (vLLM project) with its APA or KPA strategy, in the simulator.

Upstream: ``vllm-project/aibrix`` @ ``e3e10f9e4aebe9aac5e7d992fb87d2648e01628b`` (2026-08-22); the
algorithms and rules are in :mod:`ebb.sim.peers.aibrix_core`. The reconcile loop
(``podautoscaler_controller.go``: resync every 10 s, ``computeScaleDecision``) does, in order:
replicas above ``max`` / below ``min`` are clamped first; the metric is fetched from every pod's
``/metrics`` (pods without a sample — still starting — are skipped) and the pods' mean recorded in
the stable (observe 180 s) and panic (60 s) windows; the algorithm recommends from the current
``scale.spec.replicas``; min/max constraints; the cooldown (up 0 s, down 300 s); min/max again.

Metrics (the ones AIBrix's samples scale vLLM on; per-pod values from :class:`PodView`):
``metric=kv`` → ``gpu_cache_usage_perc`` (vLLM ``kv_cache_usage_perc``, a ratio; target 0.5 as in
``samples/autoscaling/{apa,kpa}.yaml``), ``metric=waiting`` → ``num_requests_waiting`` (target 100 as
in ``samples/autoscaling/multimetrics-apa.yaml``), ``metric=running`` → ``num_requests_running``
(no AIBrix sample; target 32, half the engine's 64-sequence batch).

Default strategy: ``algo=apa``. The CRD has no default (``scalingStrategy`` is required; the
algorithm factory falls back to KPA only for unknown values); APA is the one AIBrix's docs present
as "tailored for LLM serving", and KPA at this commit divides the per-pod mean by the per-pod target
as if it were a fleet total, which pins the fleet near ``ceil(mean / target)`` replicas
(emulated as is with ``algo=kpa``).

Cooldown: upstream's code lets a scale-down take the *smallest* recommendation of the last 300 s
(see :func:`~ebb.sim.peers.aibrix_core.stabilize`); that is the default here. ``down_pick=max``
gives the HPA-style stabilisation its docs describe (not upstream behaviour at this commit).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ebb.config.policy_specs import PolicySpecItem, check_keys, param_choice, param_float, param_int
from ebb.errors import ConfigError
from ebb.model.decision import Decision
from ebb.model.observation import Observation, Pipeline, PodView
from ebb.model.spans import NO_SPANS, Spans
from ebb.sim.peers.aibrix_core import (
    AibrixContext,
    MetricWindow,
    Recommendation,
    apply_constraints,
    recommend,
    stabilize,
)
from ebb.sim.policy_context import PolicyContext

KEYS: tuple[str, ...] = ("algo", "metric", "target", "observe_window", "panic_window", "up_rate", "down_rate",
                         "up_tolerance", "down_tolerance", "panic_threshold", "up_cooldown", "down_cooldown",
                         "down_pick", "min", "max")
HELP = ("AIBrix PodAutoscaler: algo=apa|kpa (apa), metric=kv|waiting|running per pod (kv, target 0.5; "
        "waiting 100; running 32), observe_window=180 s, panic_window=60 s, up_rate=down_rate=2, "
        "up_tolerance=down_tolerance=0.1, panic_threshold=2, up_cooldown=0 s, down_cooldown=300 s, "
        "down_pick=min (upstream code; max = its docs), 10 s resync, min=1, max")

DEFAULT_TARGETS = {"kv": 0.5, "waiting": 100.0, "running": 32.0}
RESYNC_S = 10.0
"""``DefaultResyncInterval`` of the PodAutoscaler reconciler."""


def pod_value(p: PodView, metric: str) -> float | None:
    """The pod's ``/metrics`` value for ``metric`` (None: no sample, the fetch fails)."""
    if metric == "kv":
        return p.kv_usage_ratio
    return p.waiting if metric == "waiting" else p.running


@dataclass
class AibrixPolicy:
    """One PodAutoscaler over one deployment, reconciled every 10 s."""

    spec: str
    algo: str
    metric: str
    context: AibrixContext
    observe_window_s: float = 180.0
    panic_window_s: float = 60.0
    up_cooldown_s: float = 0.0
    down_cooldown_s: float = 300.0
    down_pick_max: bool = False
    """Scale-downs take the window's largest recommendation (docs, HPA) instead of the smallest (code)."""
    initial: int = 1
    interval_s: float = RESYNC_S
    pipeline: Pipeline = field(default_factory=lambda: Pipeline(int(RESYNC_S), 1))
    _stable: MetricWindow = field(init=False)
    _panic: MetricWindow = field(init=False)
    _history: tuple[Recommendation, ...] = field(default=(), init=False)

    def __post_init__(self) -> None:
        self._stable = MetricWindow(self.observe_window_s)
        self._panic = MetricWindow(self.panic_window_s)

    def decide(self, obs: Observation, *, spans: Spans = NO_SPANS) -> Decision:
        if obs.t_s == 0.0 and not obs.pods:
            return Decision.change(0.0, 0, self.initial, policy=self.spec, reasons=(f"{self.spec}: initial fleet",))
        n, why = self._desired(obs)
        return Decision.change(obs.t_s, obs.spec_replicas, n, policy=self.spec, reasons=(f"aibrix: {why}",))

    def _desired(self, obs: Observation) -> tuple[int, str]:
        ctx, cur = self.context, obs.spec_replicas
        if cur == 0 and ctx.min_replicas != 0:
            return 0, "scaling disabled: current replicas is 0"
        if cur > ctx.max_replicas:
            return ctx.max_replicas, "current replicas exceed maximum"
        if cur < ctx.min_replicas:
            return ctx.min_replicas, "current replicas below minimum"
        values = [v for v in (pod_value(p, self.metric) for p in obs.pods) if v is not None]
        if obs.pods and not values:
            return cur, "no pod metrics (all fetches failed)"
        if values:
            mean = sum(values) / len(values)
            self._stable.record(obs.t_s, mean)
            self._panic.record(obs.t_s, mean)
        stable, panic = self._stable.avg(), self._panic.avg()
        rec, in_panic = recommend(self.algo, cur, stable, panic, ctx)
        mode = "apa" if self.algo == "apa" else ("kpa panic" if in_panic else "kpa stable")
        n, self._history = stabilize(self._history, obs.t_s, rec, cur, self.up_cooldown_s, self.down_cooldown_s,
                                  down_pick_max=self.down_pick_max)
        n = apply_constraints(n, ctx)
        return n, (f"desired {n} ({mode}; recommended {rec}; {self.metric} stable {stable:.3g}, "
                   f"panic {panic:.3g} per pod, target {ctx.target_value:g})")

    def observe(self, obs: Observation) -> None:
        """Nothing to ingest: AIBrix fetches the metric only when it reconciles."""

    def gate_queries(self) -> tuple[str, ...]:
        return ()


def build(item: PolicySpecItem, ctx: PolicyContext) -> AibrixPolicy:
    """An :class:`AibrixPolicy` from ``aibrix:key=value,...``; ConfigError names the spec and parameter."""
    check_keys(item, KEYS)
    algo = param_choice(item, "algo", "apa", ("apa", "kpa"))
    metric = param_choice(item, "metric", "kv", tuple(DEFAULT_TARGETS))
    target = param_float(item, "target", DEFAULT_TARGETS[metric], lo=1e-9)
    mn, mx = ctx.bounds(item, min_lo=0)
    observe = param_int(item, "observe_window", 180, lo=1)
    panic = param_int(item, "panic_window", 60, lo=1)
    if observe > 3600 or panic > 3600:
        raise ConfigError(f"policy {item.text!r}: observe_window and panic_window must be at most 3600 s")
    if panic > observe:
        raise ConfigError(f"policy {item.text!r}: panic_window={panic} exceeds observe_window={observe}")
    actx = AibrixContext(
        target_value=target,
        up_tolerance_ratio=param_float(item, "up_tolerance", 0.1, lo=0.0),
        down_tolerance_ratio=param_float(item, "down_tolerance", 0.1, lo=0.0, hi=1.0),
        max_scale_up_rate=param_float(item, "up_rate", 2.0, lo=1.0),
        max_scale_down_rate=param_float(item, "down_rate", 2.0, lo=1.0),
        panic_threshold_ratio=param_float(item, "panic_threshold", 2.0, lo=0.0),
        min_replicas=mn, max_replicas=mx)
    return AibrixPolicy(item.text, algo, metric, actx, float(observe), float(panic),
                        param_float(item, "up_cooldown", 0.0, lo=0.0),
                        param_float(item, "down_cooldown", 300.0, lo=0.0),
                        param_choice(item, "down_pick", "min", ("min", "max")) == "max",
                        initial=min(mx, ctx.initial_replicas))
