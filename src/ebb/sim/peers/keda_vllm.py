"""``keda-vllm``: vLLM production-stack's KEDA recipe — scale on the engines' waiting queues.

The recipe (``vllm-project/production-stack`` at ``a6c01db05f65f556235413ba8dbcfb0c01132fff``,
``docs/source/use_cases/autoscaling-keda.rst``; the same numbers in ``tutorials/20-keda-autoscaling.md``,
``tutorials/assets/keda-scaled-object.yaml`` and ``helm/templates/scaledobject-vllm.yaml``): a
ScaledObject with one Prometheus trigger on ``vllm:num_requests_waiting``, ``threshold: '5'``,
``pollingInterval: 15``, ``cooldownPeriod: 360``, ``minReplicaCount: 1``; its "Custom HPA Behavior"
section adds ``scaleDown: {stabilizationWindowSeconds: 300, policies: [Percent 50 / 60 s]}``; its
scale-to-zero section sets ``minReplicaCount: 0`` and adds a keepalive trigger
``sum(rate(vllm:num_incoming_requests_total[1m]) > bool 0)``, threshold 1.

KEDA semantics (``kedacore/keda`` at ``8b4f083ca8c8c2baf8477e322bd4d16ac4dfa09a``, v2.20.1+117):

* ``pkg/scalers/prometheus_scaler.go``: the query must return 0 or 1 series (:func:`prom_instant_value`;
  an empty result is 0 with ``ignoreNullValues``, default true); the trigger is **active** when the
  value > ``activationThreshold`` (default 0); the HPA target is ``AverageValue = threshold``, so the
  HPA wants ``ceil(value / threshold)`` replicas (10 % tolerance).
* ``pkg/scaling/executor/scale_scaledobjects.go`` (:func:`request_scale`): every ``pollingInterval``
  KEDA only activates (0 → max(min, 1)), deactivates (→ 0 once no trigger was active for
  ``cooldownPeriod``; only with ``minReplicaCount: 0``) or lifts the count to ``minReplicaCount``; every
  other change is the HPA's (``horizontal-pod-autoscaler-sync-period`` 15 s), through
  :class:`~ebb.sim.baselines.hpa_controller.HpaController`. ``GetHPAMinReplicas`` = max(min, 1).
  The HPA reads the metric live from KEDA's adapter at its own sync, not at KEDA's poll.

Deviation, on purpose: the recipe's query ``vllm:num_requests_waiting`` returns one series per engine
pod, which KEDA rejects ("returned multiple elements") as soon as there are two pods — the HPA then
holds the count. ``query=sum`` (default) is ``sum(vllm:num_requests_waiting)``, the form that works;
``query=raw`` keeps the recipe's literal query and that failure. Per-pod values come through the
Prometheus scrape (``Pipeline(scrape, 1)``); the keepalive reads the router's arrivals
(``total_qps`` or anything in flight, which needs an arrival). Knobs: ``threshold`` (5), ``polling``
(15 s), ``cooldown`` (360 s), ``stabilization`` (300 s), ``down_percent`` (50), ``down_period``
(60 s), ``min`` (1; 0 = scale to zero), ``max`` (2 × oracle peak, ≥ 4), ``activation`` (0), ``query``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from ebb.config.policy_specs import PolicySpecItem, check_keys, param_choice, param_float, param_int
from ebb.errors import ConfigError
from ebb.model.decision import Decision
from ebb.model.observation import Observation, Pipeline
from ebb.model.spans import NO_SPANS, Spans
from ebb.sim.baselines.hpa_behavior import Behavior, ScalingPolicy, ScalingRules
from ebb.sim.baselines.hpa_controller import HpaConfig, HpaController, MetricSpec
from ebb.sim.policy_context import PolicyContext

KEYS: tuple[str, ...] = ("threshold", "polling", "cooldown", "stabilization", "down_percent", "down_period",
                         "min", "max", "activation", "query")
HELP = ("vLLM production-stack KEDA recipe: HPA on sum(vllm:num_requests_waiting) / threshold=5 per replica, "
        "polling=15 s, cooldown=360 s, scale-down stabilization=300 s at down_percent=50 per down_period=60 s; "
        "min=1 (0 = scale to zero), max, activation=0, query=sum|raw")


class PromQueryError(Exception):
    """What the Prometheus scaler returns as an error (the HPA then fails to get the metric)."""


def prom_instant_value(status_ok: bool, results: Sequence[Sequence[object]], *,
                       ignore_null_values: bool = True) -> float:
    """The scaler's value from one instant-query response: ``results`` holds each series' ``value``
    pair ``[timestamp, "string value"]``. Zero series, an empty pair or ±Inf/NaN give 0 when
    ``ignore_null_values``; a non-2xx status, several series or a short pair raise."""
    if not status_ok:
        raise PromQueryError("prometheus query api returned error")
    if not results:
        if ignore_null_values:
            return 0.0
        raise PromQueryError("the result is empty")
    if len(results) > 1:
        raise PromQueryError("query returned multiple elements")
    pair = results[0]
    if not pair:
        if ignore_null_values:
            return 0.0
        raise PromQueryError("the value list is empty")
    if len(pair) < 2:
        raise PromQueryError("query didn't return enough values")
    v = -1.0 if pair[1] is None else float(str(pair[1]))
    if math.isinf(v) or math.isnan(v):
        if ignore_null_values:
            return 0.0
        raise PromQueryError(f"query returns {v}")
    return v


@dataclass(frozen=True)
class ScaleStep:
    """One KEDA poll: the replica count it sets (None = leave it to the HPA) and its bookkeeping."""

    replicas: int | None
    last_active_s: float | None
    reason: str


def request_scale(current: int, *, active: bool, error: bool, min_replicas: int, now_s: float,
                  last_active_s: float | None, created_s: float = 0.0, cooldown_s: float = 300.0,
                  initial_cooldown_s: float = 0.0, idle_replicas: int | None = None,
                  fallback_replicas: int = 0) -> ScaleStep:
    """KEDA's ``RequestScale`` for a ScaledObject (pause annotations and forced activation aside).

    Defaults are KEDA's: cooldown 300 s, initial cooldown 0 s, no idle count, no fallback."""
    if active:
        if (idle_replicas is not None and current < min_replicas) or current == 0:
            return ScaleStep(min_replicas if min_replicas > 0 else 1, now_s, "activated")
        if error:
            return ScaleStep(None, last_active_s, "partial trigger error")
        return ScaleStep(None, now_s, "active")
    if error and fallback_replicas != 0:
        return ScaleStep(None, last_active_s, "error: HPA falls back")
    if error:
        return ScaleStep(None, last_active_s, "trigger error")
    if (idle_replicas is not None and current > idle_replicas) or (current > 0 and min_replicas == 0):
        cooled = (now_s - created_s > initial_cooldown_s) if last_active_s is None \
            else (now_s - last_active_s > cooldown_s)
        if not cooled:
            return ScaleStep(None, last_active_s, "cooling down")
        to = idle_replicas if idle_replicas is not None else min_replicas
        return ScaleStep(to, last_active_s, "deactivated after cooldown")
    if idle_replicas is None and current < min_replicas:
        return ScaleStep(min_replicas, last_active_s, "raised to minReplicaCount")
    return ScaleStep(None, last_active_s, "inactive")


def recipe_behavior(stabilization_s: int, down_percent: int, down_period_s: int) -> Behavior:
    """``advanced.horizontalPodAutoscalerConfig.behavior`` of the recipe: scale-down only (up = defaults)."""
    return Behavior(scale_down=ScalingRules(stabilization_window_s=stabilization_s,
                                            policies=(ScalingPolicy("Percent", down_percent, down_period_s),)))


def _on(t_s: float, period_s: float) -> bool:
    return math.isclose(math.remainder(t_s, period_s), 0.0, abs_tol=1e-6)


@dataclass
class KedaVllmPolicy:
    """KEDA's polling loop plus the HPA it owns, on the engines' waiting queues."""

    spec: str
    hpa: HpaController
    min_replicas: int
    polling_s: float
    cooldown_s: float
    activation: float
    per_pod_query: bool
    pipeline: Pipeline
    interval_s: float = 15.0
    hpa_sync_s: float = 15.0
    initial: int = 1
    _last_active_s: float | None = None
    _why: str = "not polled yet"

    def _value(self, obs: Observation) -> float:
        """``sum(vllm:num_requests_waiting)`` (or the raw per-pod query) as the scaler reads it."""
        series = [p.waiting for p in obs.pods if p.waiting is not None]
        if self.per_pod_query:
            return prom_instant_value(True, [[obs.t_s, repr(float(w))] for w in series])
        return prom_instant_value(True, [[obs.t_s, repr(float(sum(series)))]] if series else [])

    def decide(self, obs: Observation, *, spans: Spans = NO_SPANS) -> Decision:
        if obs.t_s == 0.0 and not obs.pods:
            return Decision.change(0.0, 0, self.initial, policy=self.spec,
                                   reasons=(f"{self.spec}: initial fleet",))
        cur = obs.spec_replicas
        try:
            value: float | None = self._value(obs)
        except PromQueryError as err:
            value, self._why = None, f"query error: {err}"
        if _on(obs.t_s, self.polling_s):
            waiting_active = value is not None and value > self.activation
            # The recipe's keepalive trigger exists only with scale to zero (minReplicaCount 0).
            keepalive = self.min_replicas == 0 and ((obs.total_qps or 0.0) > 0 or (obs.total_inflight or 0.0) > 0)
            step = request_scale(cur, active=waiting_active or keepalive, error=value is None,
                                 min_replicas=self.min_replicas, now_s=obs.t_s, last_active_s=self._last_active_s,
                                 cooldown_s=self.cooldown_s)
            self._last_active_s = step.last_active_s
            if step.replicas is not None and step.replicas != cur:
                return Decision.change(obs.t_s, cur, step.replicas, policy=self.spec,
                                       reasons=(f"keda: {step.reason} (waiting {value})",))
        if not _on(obs.t_s, self.hpa_sync_s):
            return Decision.change(obs.t_s, cur, cur, policy=self.spec, reasons=(f"keda: {self._why}",))
        milli = () if value is None else (int(round(value * 1000)),)
        d = self.hpa.reconcile(obs.t_s, cur, len(obs.pods), [], {}, external_values_milli=milli)
        self._why = f"hpa {d.desired_replicas} ({d.reason}), waiting {value}"
        return Decision.change(obs.t_s, cur, d.desired_replicas, policy=self.spec, reasons=(f"keda: {self._why}",))

    def observe(self, obs: Observation) -> None:
        """Nothing to ingest: KEDA and its HPA read the current metric at each poll and sync."""

    def gate_queries(self) -> tuple[str, ...]:
        return ()


def build(item: PolicySpecItem, ctx: PolicyContext) -> KedaVllmPolicy:
    """Build ``keda-vllm`` from its spec; ConfigError names the spec and the parameter."""
    check_keys(item, KEYS)
    threshold = param_float(item, "threshold", 5.0, lo=0.001)
    mn, mx = ctx.bounds(item, min_lo=0)
    polling = param_int(item, "polling", 15, lo=1)
    down_percent = param_int(item, "down_percent", 50, lo=1)
    if down_percent > 100:
        raise ConfigError(f"policy {item.text!r}: down_percent={down_percent} must be <= 100")
    behavior = recipe_behavior(param_int(item, "stabilization", 300, lo=0), down_percent,
                               param_int(item, "down_period", 60, lo=1))
    hpa = HpaController(HpaConfig(metric=MetricSpec.external_average_value(int(round(threshold * 1000))),
                                  min_replicas=max(mn, 1), max_replicas=mx, behavior=behavior))
    pipe = ctx.settings.pipeline
    sync = int(pipe.hpa_sync_s)
    return KedaVllmPolicy(
        item.text, hpa, mn, float(polling), param_float(item, "cooldown", 360.0, lo=0.0),
        param_float(item, "activation", 0.0, lo=0.0), param_choice(item, "query", "sum", ("sum", "raw")) == "raw",
        Pipeline(int(pipe.scrape_interval_s), 1), interval_s=float(math.gcd(polling, sync)),
        hpa_sync_s=float(sync), initial=min(mx, ctx.initial_replicas))
