"""``wva``: llm-d's Workload Variant Autoscaler in saturation mode (V1 analyzer), one variant.

Upstream: ``llm-d/llm-d-workload-variant-autoscaler`` at commit
``b08b1c77c89d284361e40b2a9315e93ef46e7022`` (2026-02-19; same behaviour at tag v0.5.1):

* ``internal/collector/registration/saturation.go``: per pod,
  ``max_over_time(vllm:kv_cache_usage_perc[1m])`` and ``max_over_time(vllm:num_requests_waiting[1m])``;
  ``internal/collector/replica_metrics.go`` truncates the queue to ``int`` and keeps only pods that
  exist and report at least one of the two (a missing one counts as 0).
* ``internal/saturation/analyzer.go`` (:mod:`ebb.sim.peers.wva_analyzer`): saturated at KV ≥ 0.8 or
  queue ≥ 5; +1 replica when mean spare KV < 0.1 or spare queue < 3; −1 only when the N−1
  redistribution check passes; nothing while replicas are starting or the last target is unmet.
* ``internal/engines/saturation/engine.go``: the analysis runs every **30 s** — the polling
  executor's interval is fixed at 30 s; ``GLOBAL_OPT_INTERVAL`` (default 60 s, chart
  ``wva.reconcileInterval``) is read but not applied upstream (its engine.go leaves that for later). ``interval`` sets it here.
* ``charts/workload-variant-autoscaler/templates/hpa.yaml`` + ``values.yaml``: WVA only publishes
  ``wva_desired_replicas``; the chart's HPA scales the deployment on it (External, AverageValue 1,
  min 1, both directions stabilised 240 s, at most 10 pods per 150 s, default tolerance 0.1).
  ``actuator=hpa`` (default) runs that HPA through :class:`~ebb.sim.baselines.hpa_controller.HpaController`;
  ``actuator=direct`` applies WVA's target at once. Note the HPA's 10 % tolerance: from 10 replicas
  up, WVA's ±1 targets (11/10, 9/10) stay inside it, so that HPA never acts on them and WVA, seeing
  its target unmet, holds it (in transition) — the fleet freezes at ≥ 10 replicas.

Not modelled: the ≤ 10 s until Prometheus scrapes ``wva_desired_replicas`` (chart ServiceMonitor
interval 10 s) and the adapter serves it; the chart scrapes vLLM every 15 s, the run's
``scrape_interval_s`` is used here as for every policy.

The simulator's per-pod gauges come through the Prometheus scrape (``Pipeline(scrape, 1)``); the
policy ticks once per scrape, keeps each pod's samples of the last 60 s and takes their maximum,
which is what ``max_over_time[1m]`` over those scrapes returns. Knobs: ``kv_threshold`` (0.8),
``queue_threshold`` (5), ``kv_spare`` (0.1), ``queue_spare`` (3), ``interval`` (30 s), ``min`` (1),
``max`` (2 × oracle peak, ≥ 4), ``actuator`` (hpa|direct), ``stabilization`` (240 s, the chart HPA's).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

from ebb.config.policy_specs import PolicySpecItem, check_keys, param_choice, param_float, param_int
from ebb.errors import ConfigError
from ebb.model.decision import Decision
from ebb.model.observation import Observation, Pipeline
from ebb.model.spans import NO_SPANS, Spans
from ebb.sim.baselines.hpa_behavior import Behavior, ScalingPolicy, ScalingRules
from ebb.sim.baselines.hpa_controller import HpaConfig, HpaController, MetricSpec
from ebb.sim.peers.wva_analyzer import (
    ReplicaMetrics,
    SaturationConfig,
    VariantState,
    analyze_model,
    saturation_targets,
)
from ebb.sim.policy_context import PolicyContext

KEYS: tuple[str, ...] = ("kv_threshold", "queue_threshold", "kv_spare", "queue_spare", "interval", "min",
                         "max", "actuator", "stabilization")
HELP = ("llm-d WVA saturation analyzer: +1 when spare KV < kv_spare=0.1 or spare queue < queue_spare=3 "
        "(saturated at kv_threshold=0.8 / queue_threshold=5, max over 1 min), -1 after the N-1 check; "
        "interval=30 s, actuator=hpa|direct (chart HPA, stabilization=240 s), min=1, max")

WINDOW_S = 60.0
"""``[1m]`` of the saturation queries."""
_VARIANT = "v1"


def chart_hpa_behavior(window_s: int) -> Behavior:
    """The WVA chart's HPA ``behavior``: ``window_s`` (240) both ways, Max of one Pods 10 / 150 s policy."""
    rules = ScalingRules(stabilization_window_s=window_s, select_policy="Max",
                         policies=(ScalingPolicy("Pods", 10, 150),))
    return Behavior(scale_up=rules, scale_down=rules)


@dataclass
class WvaPolicy:
    """WVA's saturation engine for one model with one variant, plus its actuator."""

    spec: str
    config: SaturationConfig
    min_replicas: int
    max_replicas: int
    pipeline: Pipeline
    period_s: float = 30.0
    """WVA engine period (s)."""
    interval_s: float = 15.0
    """Tick (s): gcd of the scrape, engine and HPA periods (the gauges change only at scrapes)."""
    hpa: HpaController | None = None
    hpa_sync_s: float = 15.0
    initial: int = 1
    _samples: dict[int, deque[tuple[float, float | None, float | None]]] = field(default_factory=dict)
    _desired: int = 0
    """The VA's ``desiredOptimizedAlloc.numReplicas`` (what WVA last published); 0 = none yet."""
    _why: str = "no analysis yet"

    def observe(self, obs: Observation) -> None:
        """Keep each pod's gauges of the last 60 s (the range of ``max_over_time[1m]``)."""
        live = set()
        for p in obs.pods:
            rid = int(p.replica)
            live.add(rid)
            if p.ready_s is None or (p.kv_usage_ratio is None and p.waiting is None):
                continue  # a starting engine serves no /metrics yet
            q = self._samples.setdefault(rid, deque())
            q.append((obs.t_s, p.kv_usage_ratio, p.waiting))
            while q and q[0][0] <= obs.t_s - WINDOW_S:
                q.popleft()
        for rid in [r for r in self._samples if r not in live]:
            del self._samples[rid]  # deleted pods no longer map to the VA (collector skips them)

    def _metrics(self) -> list[ReplicaMetrics]:
        out: list[ReplicaMetrics] = []
        for rid, q in self._samples.items():
            kvs = [kv for _, kv, _ in q if kv is not None]
            ws = [w for _, _, w in q if w is not None]
            if not kvs and not ws:
                continue
            out.append(ReplicaMetrics(f"replica-{rid}", max(kvs) if kvs else 0.0,
                                      int(max(ws)) if ws else 0, _VARIANT))
        return out

    def _on(self, t_s: float, period_s: float) -> bool:
        return math.isclose(math.remainder(t_s, period_s), 0.0, abs_tol=1e-6)

    def decide(self, obs: Observation, *, spans: Spans = NO_SPANS) -> Decision:
        if obs.t_s == 0.0 and not obs.pods:
            return Decision.change(0.0, 0, self.initial, policy=self.spec,
                                   reasons=(f"{self.spec}: initial fleet",))
        self.observe(obs)
        cur = obs.spec_replicas
        if self._on(obs.t_s, self.period_s):
            self._analyse(obs)
        desired = cur
        if self.hpa is None:
            if self._desired:
                desired = min(self.max_replicas, max(self.min_replicas, self._desired))
            why = f"wva: target {self._desired} ({self._why})"
        elif self._desired and self._on(obs.t_s, self.hpa_sync_s):
            d = self.hpa.reconcile(obs.t_s, cur, len(obs.pods), [], {},
                                   external_values_milli=(self._desired * 1000,))
            desired = d.desired_replicas
            why = f"wva: target {self._desired} ({self._why}); hpa {desired} ({d.reason})"
        else:
            why = f"wva: target {self._desired or cur} ({self._why})"
        return Decision.change(obs.t_s, cur, desired, policy=self.spec, reasons=(why,))

    def _analyse(self, obs: Observation) -> None:
        """One engine cycle: analyse the window, compute the target, publish it."""
        metrics = self._metrics()
        analysis = analyze_model(metrics, self.config)
        cur = obs.spec_replicas
        state = VariantState(_VARIANT, cur, self._desired, max(0, cur - obs.ready_replicas))
        target = saturation_targets(analysis, [state]).get(_VARIANT, cur)
        if not metrics:
            self._why = "no saturation metrics"
            return  # upstream skips the model: nothing published, the last value stays
        moving = analysis.total_replicas != cur or self._desired not in (0, cur)
        self._desired = target
        if moving:
            self._why = f"in transition ({analysis.total_replicas} reporting of {cur}, target {target})"
        elif target > cur:
            self._why = f"scale up: {analysis.reason}"
        elif target < cur:
            self._why = f"N-1 check passed ({analysis.non_saturated} non-saturated)"
        else:
            self._why = (f"steady: spare KV {analysis.avg_spare_kv:.3f}, spare queue "
                         f"{analysis.avg_spare_queue:.1f}, {len(metrics) - analysis.non_saturated} saturated")

    def gate_queries(self) -> tuple[str, ...]:
        return ()


def build(item: PolicySpecItem, ctx: PolicyContext) -> WvaPolicy:
    """Build ``wva`` from its spec; ConfigError names the spec and the parameter."""
    check_keys(item, KEYS)
    try:
        cfg = SaturationConfig(
            kv_threshold_ratio=param_float(item, "kv_threshold", 0.80, lo=0.0, hi=1.0),
            queue_threshold=param_float(item, "queue_threshold", 5.0, lo=0.0),
            kv_spare_ratio=param_float(item, "kv_spare", 0.1, lo=0.0, hi=1.0),
            queue_spare=param_float(item, "queue_spare", 3.0, lo=0.0),
        )
    except ValueError:
        raise ConfigError(f"policy {item.text!r}: kv_threshold must be >= kv_spare") from None
    mn, mx = ctx.bounds(item, min_lo=1)
    period = float(param_int(item, "interval", 30, lo=1))
    actuator = param_choice(item, "actuator", "hpa", ("hpa", "direct"))
    window = param_int(item, "stabilization", 240, lo=0)
    pipe = ctx.settings.pipeline
    scrape, sync = int(pipe.scrape_interval_s), int(pipe.hpa_sync_s)
    periods = (int(period), sync) if actuator == "hpa" else (int(period),)
    tick = float(math.gcd(scrape, *periods))  # gauges change only at scrapes; act at each period
    hpa = None
    if actuator == "hpa":
        hpa = HpaController(HpaConfig(metric=MetricSpec.external_average_value(1000), min_replicas=mn,
                                      max_replicas=mx, behavior=chart_hpa_behavior(window)))
    return WvaPolicy(item.text, cfg, mn, mx, Pipeline(scrape, 1), period_s=period, interval_s=tick,
                     hpa=hpa, hpa_sync_s=float(sync), initial=min(mx, ctx.initial_replicas))
