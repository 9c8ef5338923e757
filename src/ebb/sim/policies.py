"""The policies ``ebb simulate`` runs side by side, built from ``--policy`` specs.

=========  ===================================================================================
``hpa``    Kubernetes HPA (upstream algorithm, :mod:`ebb.sim.baselines.hpa_controller`) on
           ``metric=gpu`` (default: per-pod GPU utilisation as dcgm-exporter + Prometheus +
           prometheus-adapter expose it, a Pods metric with an AverageValue target in percent),
           ``metric=inflight`` (requests running or queued per pod, a vLLM-style gauge),
           ``metric=qps`` (completions per second per pod, ``rate(...[1m])``),
           ``metric=waiting`` (``vllm:num_requests_waiting`` per pod) or ``metric=kv``
           (``vllm:kv_cache_usage_perc`` per pod, a ratio), each gauge scraped every 30 s. Parameters:
           ``target`` (ratio 0–1 for gpu, default 0.6; requests for inflight, default 32; req/s for
           qps, default 10; requests for waiting, default 5 — the production-stack KEDA threshold;
           ratio for kv, default 0.8 — llm-d's saturation level), ``min`` (1), ``max`` (2 × the
           oracle's peak, at least 4), ``stabilization`` (300 s), ``tolerance`` (0.1).
``keda``   KEDA ScaledObject with a Prometheus trigger: ``metric=inflight`` (default,
           ``sum(running + waiting)``) or ``qps`` (``sum(rate(requests[1m]))``) compared to
           ``threshold`` per replica (default 32 / 10) through the HPA KEDA creates (External
           metric, AverageValue); ``polling`` (30 s) activation loop; ``min`` (KEDA's
           minReplicaCount; default 1 here, 0 enables scale-to-zero after ``cooldown`` 300 s).
``static`` ``replicas`` fixed; default the oracle's peak.
``static-sleep``
           The static fleet with a hand-made idle timer (:mod:`ebb.sim.baselines.static_sleep`):
           a replica idle for ``idle_s`` (300 s) sleeps, a queue wakes sleepers; with ``--tier``.
``oracle`` Perfect foresight (:mod:`ebb.sim.baselines.oracle`); the lower bound.
``kpa`` ``ray`` ``keda-vllm`` ``wva`` ``dynamo`` ``aibrix``
           The LLM-serving autoscalers, each emulating its upstream controller (:mod:`ebb.sim.peers`;
           the module docstrings name the source files and versions; ``ebb simulate --help`` lists
           their knobs).
``ebb``    Ebb's own policy (:mod:`ebb.decide.policy`): ``profile=cautious|balanced|lean``
           (default balanced) on the cost–SLO curve; ``min`` (1), ``max`` (4 × the oracle's peak);
           any profile field as a knob (``budget=0.002``, ``slack_fraction=0.6``; the switches
           ``forecast``, ``fast_path``, ``tail``, ``level_peak`` take ``on|off``);
           ``canary=on`` puts every scale-down behind a one-replica canary and a TTFT gate
           (:mod:`ebb.gates.guard`). Its comeback horizon is the run's ``--cold-start-s`` plus a
           reconcile and a fine sample.
=========  ===================================================================================
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Protocol

from ebb.decide.policy import EbbPolicy, tier_knobs
from ebb.decide.profiles import PROFILE_FLAGS, PROFILE_KNOBS, PROFILES, profile_with_knobs
from ebb.errors import ConfigError
from ebb.gates.guard import CanaryGuard, ttft_gate
from ebb.model.decision import Decision
from ebb.model.spans import NO_SPANS, Spans
from ebb.sim.baselines.hpa_calc import PodMetricSample, PodRecord, ReadyCondition
from ebb.sim.baselines.hpa_controller import HpaConfig, HpaController, MetricSpec
from ebb.sim.baselines.oracle import OraclePolicy
from ebb.sim.baselines.static import StaticPolicy
from ebb.sim.baselines.static_sleep import StaticSleepPolicy
from ebb.sim.handed_off import HandedOff, handoff_hpa
from ebb.decide.handoff import handed_off_cold_start_s
from ebb.sim.policy import Observation, Pipeline, Policy
from ebb.sim.policy_context import MAX_REPLICAS, PolicyContext
from ebb.sim.peers import aibrix, dynamo, keda_vllm, kpa, ray_serve, wva
from ebb.config.policy_specs import PolicySpecItem, check_keys, param_choice, param_float, param_int

PEERS: dict[str, PeerModule] = {
    "kpa": kpa, "ray": ray_serve, "keda-vllm": keda_vllm, "wva": wva, "dynamo": dynamo, "aibrix": aibrix,
}
"""The peer autoscalers by policy name (each module: ``KEYS``, ``HELP``, ``build``)."""

KNOWN_POLICIES = ("hpa", "keda", "static", "static-sleep", "oracle", "ebb", *PEERS)

POLICY_HELP: dict[str, str] = {
    "hpa": "Kubernetes HPA, upstream algorithm: metric=gpu|inflight|qps|waiting|kv, target (0.6 / 32 / 10 / 5 / "
           "0.8), min (1), max, stabilization (300 s), tolerance (0.1)",
    "keda": "KEDA Prometheus trigger + its HPA: metric=inflight|qps, threshold (32 / 10), polling (30 s), "
            "cooldown (300 s), min (1; 0 = scale to zero), max",
    "static": "a fixed fleet: replicas (default: the oracle's peak)",
    "static-sleep": "the static fleet whose replicas sleep after idle_s (300 s) without work and wake on a queue "
                    "(needs --tier asleep:...; without one it removes and cold-starts them): replicas, idle_s",
    "oracle": "perfect foresight: the cheapest schedule that meets the SLO (the lower bound)",
    "ebb": "Ebb: profile=cautious|balanced|lean (balanced), canary=on|off, min (1), max; any profile field "
           "(budget 0.001, slack_fraction 0.5, target_util 0.9, ...) and forecast|fast_path|tail|level_peak=on|off; "
           "via=hpa: applied by an HPA/KEDA every 15 s (ebb run --serve-keda), hpa_tolerance (0.1)",
    **{name: mod.HELP for name, mod in PEERS.items()},
}
"""One line per policy for ``ebb simulate --help``: what it is, its knobs and their defaults."""


def _pods(obs: Observation, value: str, window_s: float) -> tuple[list[PodRecord], dict[str, PodMetricSample]]:
    """Pods as the HPA's lister and metrics client see them."""
    pods: list[PodRecord] = []
    metrics: dict[str, PodMetricSample] = {}
    for p in obs.pods:
        name = f"replica-{int(p.replica)}"
        ready = ReadyCondition("True" if p.ready_s is not None else "False",
                               p.ready_s if p.ready_s is not None else p.created_s)
        pods.append(PodRecord(name, phase="Running", start_time_s=p.created_s, ready=ready))
        v = {"util": p.util_ratio, "inflight": p.inflight, "qps": p.qps, "waiting": p.waiting,
             "kv": p.kv_usage_ratio}[value]
        if v is not None:
            scale = 100_000.0 if value == "util" else 1000.0  # util ratio → percent milli
            metrics[name] = PodMetricSample(int(round(v * scale)), obs.t_s, window_s)
    return pods, metrics


class PeerModule(Protocol):
    """What each :mod:`ebb.sim.peers` module provides."""

    KEYS: tuple[str, ...]
    HELP: str

    def build(self, item: PolicySpecItem, ctx: PolicyContext) -> Policy: ...


@dataclass
class HpaPolicy:
    """An HPA on one Pods metric, reconciled every sync period."""

    spec: str
    controller: HpaController
    value: str
    pipeline: Pipeline
    interval_s: float = 15.0
    initial: int = 1

    def decide(self, obs: Observation, *, spans: Spans = NO_SPANS) -> Decision:
        if obs.t_s == 0.0 and not obs.pods:
            return Decision.change(0.0, 0, max(self.initial, self.controller.config.min_replicas),
                                   policy=self.spec, reasons=(f"{self.spec}: initial fleet",))
        pods, metrics = _pods(obs, self.value, float(self.pipeline.window_s))
        d = self.controller.reconcile(obs.t_s, obs.spec_replicas, len(obs.pods), pods, metrics)
        return Decision.change(obs.t_s, obs.spec_replicas, d.desired_replicas, policy=self.spec,
                               reasons=(f"{self.spec}: desired {d.desired_replicas} ({d.reason})",))

    def observe(self, obs: Observation) -> None:
        """Nothing to ingest: the HPA reads the current metrics at each reconcile (its only history,
        the stabilisation window, holds its own recommendations)."""

    def gate_queries(self) -> tuple[str, ...]:
        return ()


@dataclass
class KedaPolicy:
    """KEDA: an activation loop every ``polling_s`` plus the HPA it manages (External metric)."""

    spec: str
    controller: HpaController
    value: str
    min_replicas: int
    polling_s: float
    cooldown_s: float
    pipeline: Pipeline
    interval_s: float = 15.0
    initial: int = 1
    _last_active_s: float = field(default=0.0)

    def decide(self, obs: Observation, *, spans: Spans = NO_SPANS) -> Decision:
        if obs.t_s == 0.0 and not obs.pods:
            return Decision.change(0.0, 0, max(self.initial, self.min_replicas, 1), policy=self.spec,
                                   reasons=(f"{self.spec}: initial fleet",))
        n, why = self._desired(obs)
        return Decision.change(obs.t_s, obs.spec_replicas, n, policy=self.spec,
                               reasons=(f"{self.spec}: desired {n} ({why})",))

    def _desired(self, obs: Observation) -> tuple[int, str]:
        """KEDA's replica count for ``obs`` and which loop decided it."""
        total = obs.total_inflight if self.value == "inflight" else obs.total_qps
        cur = obs.spec_replicas
        active = total is not None and total > 0
        if active:
            self._last_active_s = obs.t_s
        on_poll = math.isclose(obs.t_s % self.polling_s, 0.0, abs_tol=1e-6) or \
            math.isclose(obs.t_s % self.polling_s, self.polling_s, abs_tol=1e-6)
        if cur == 0:
            # Scale-from-zero is KEDA's job, at its polling interval.
            return (1, "activation") if (active and on_poll) else (0, "inactive")
        if self.min_replicas == 0 and on_poll and not active and obs.t_s - self._last_active_s >= self.cooldown_s:
            return 0, "cooldown passed"
        if total is None:
            return cur, "no metric"
        d = self.controller.reconcile(obs.t_s, cur, len(obs.pods), [], {},
                                      external_values_milli=(int(round(total * 1000)),))
        return max(1, d.desired_replicas), d.reason

    def observe(self, obs: Observation) -> None:
        """Nothing to ingest: KEDA reads the current metric at each poll and reconcile."""

    def gate_queries(self) -> tuple[str, ...]:
        return ()


def _hpa_config(item: PolicySpecItem, ctx: PolicyContext, metric: MetricSpec, lo: int) -> HpaConfig:
    mn, mx = ctx.bounds(item, min_default=lo)
    return HpaConfig(
        metric=metric, min_replicas=max(mn, 1), max_replicas=mx,
        tolerance=param_float(item, "tolerance", 0.1, lo=0.0, hi=1.0),
        downscale_stabilization_s=param_int(item, "stabilization", 300, lo=0),
    )


def _handed_off(item: PolicySpecItem, ctx: PolicyContext, policy: Policy, mn: int, mx: int) -> Policy:
    """``via=hpa``: Ebb's decisions applied by an HPA, as ``ebb run --serve-keda`` does (:mod:`ebb.sim.handed_off`)."""
    if param_choice(item, "via", "direct", ("direct", "hpa")) == "direct":
        if item.get("hpa_tolerance") is not None:
            raise ConfigError(f"policy {item.text!r}: hpa_tolerance needs via=hpa (fix: add via=hpa, or drop it)")
        return policy
    if ctx.settings.cluster.sleep is not None:
        raise ConfigError(f"policy {item.text!r}: via=hpa does not go with --tier (an HPA would count sleeping pods "
                          "as running; ebb run --serve-keda refuses it too) (fix: drop one)")
    tolerance = param_float(item, "hpa_tolerance", 0.1, lo=0.0, hi=1.0)
    return HandedOff(policy, handoff_hpa(mn, mx, tolerance), sync_s=float(ctx.settings.pipeline.hpa_sync_s),
                     spec=item.text)


def build_policy(item: PolicySpecItem, ctx: PolicyContext) -> Policy:
    """Construct one policy from its spec; ConfigError names the spec and the bad parameter."""
    pipe = ctx.settings.pipeline
    if item.name == "oracle":
        check_keys(item, ())
        return OraclePolicy(ctx.oracle_schedule, spec=item.text)
    if item.name == "static":
        check_keys(item, ("replicas",))
        n = param_int(item, "replicas", ctx.oracle_peak, lo=1)
        if n > MAX_REPLICAS:
            raise ConfigError(f"policy {item.text!r}: replicas={n} exceeds the simulator's {MAX_REPLICAS:,}")
        return StaticPolicy(n, spec=item.text)
    if item.name == "static-sleep":
        check_keys(item, ("replicas", "idle_s"))
        n = param_int(item, "replicas", ctx.oracle_peak, lo=1)
        if n > MAX_REPLICAS:
            raise ConfigError(f"policy {item.text!r}: replicas={n} exceeds the simulator's {MAX_REPLICAS:,}")
        return StaticSleepPolicy(n, param_float(item, "idle_s", 300.0, lo=1.0, hi=86400.0), spec=item.text)
    if item.name == "hpa":
        check_keys(item, ("target", "metric", "min", "max", "stabilization", "tolerance"))
        metric = param_choice(item, "metric", "gpu", ("gpu", "inflight", "qps", "waiting", "kv"))
        if metric == "gpu":
            target = param_float(item, "target", 0.6, lo=0.01, hi=1.0)
            spec = MetricSpec.pods_average_value(int(round(target * 100_000)))
            pipeline = Pipeline(pipe.scrape_interval_s, pipe.dcgm_collect_s)
            value = "util"
        elif metric == "inflight":
            target = param_float(item, "target", 32.0, lo=0.001)
            spec = MetricSpec.pods_average_value(int(round(target * 1000)))
            pipeline = Pipeline(pipe.scrape_interval_s, 1)
            value = "inflight"
        elif metric == "qps":
            target = param_float(item, "target", 10.0, lo=0.001)
            spec = MetricSpec.pods_average_value(int(round(target * 1000)))
            pipeline = Pipeline(pipe.scrape_interval_s, pipe.rate_window_s)
            value = "qps"
        else:  # an engine gauge through prometheus-adapter: waiting requests, or the KV-cache ratio
            target = param_float(item, "target", 5.0 if metric == "waiting" else 0.8, lo=0.001,
                                 hi=None if metric == "waiting" else 1.0)
            spec = MetricSpec.pods_average_value(int(round(target * 1000)))
            pipeline = Pipeline(pipe.scrape_interval_s, 1)
            value = metric
        cfg = _hpa_config(item, ctx, spec, 1)
        return HpaPolicy(item.text, HpaController(cfg), value, pipeline, float(pipe.hpa_sync_s),
                         initial=min(cfg.max_replicas, ctx.initial_replicas))
    if item.name == "keda":
        check_keys(item, ("threshold", "metric", "min", "max", "polling", "cooldown", "stabilization",
                          "tolerance"))
        metric = param_choice(item, "metric", "inflight", ("inflight", "qps"))
        threshold = param_float(item, "threshold", 32.0 if metric == "inflight" else 10.0, lo=0.001)
        spec = MetricSpec.external_average_value(int(round(threshold * 1000)))
        pipeline = Pipeline(pipe.scrape_interval_s, 1 if metric == "inflight" else pipe.rate_window_s)
        cfg = _hpa_config(item, ctx, spec, 1)
        mn = param_int(item, "min", 1, lo=0)
        return KedaPolicy(item.text, HpaController(cfg), metric, mn,
                          param_float(item, "polling", 30.0, lo=1.0),
                          param_float(item, "cooldown", 300.0, lo=0.0), pipeline,
                          float(pipe.hpa_sync_s), initial=min(cfg.max_replicas, ctx.initial_replicas))
    if item.name == "ebb":
        check_keys(item, ("profile", "min", "max", "canary", "via", "hpa_tolerance", *PROFILE_FLAGS, *PROFILE_KNOBS))
        profile = profile_with_knobs(item, PROFILES[param_choice(item, "profile", "balanced", tuple(PROFILES))])
        mn = param_int(item, "min", 1, lo=1)
        mx = param_int(item, "max", min(MAX_REPLICAS, max(8, 4 * ctx.oracle_peak)), lo=1)
        if mx > MAX_REPLICAS or mn > mx:
            raise ConfigError(f"policy {item.text!r}: need 1 <= min={mn} <= max={mx} <= {MAX_REPLICAS:,}")
        knobs = tier_knobs(ctx.settings.cluster.sleep)
        ebb = EbbPolicy(profile, ctx.settings.slo.ttft_ms, ctx.settings.slo.e2e_ms, min_replicas=mn,
                        max_replicas=mx, initial=min(mx, ctx.initial_replicas), spec=item.text,
                        cold_start_s=handed_off_cold_start_s(ctx.settings.cluster.cold_start_s, pipe.hpa_sync_s)
                        if item.get("via") == "hpa" else ctx.settings.cluster.cold_start_s,
                        wake_s=knobs.wake_s, sleep_max=knobs.sleep_max,
                        reserve=knobs.reserve)
        policy: Policy = ebb
        if param_choice(item, "canary", "off", ("on", "off")) == "on":
            policy = CanaryGuard(ebb, ttft_gate(ctx.settings.slo.ttft_ms, profile.veto_margin))
        return _handed_off(item, ctx, policy, mn, mx)
    peer = PEERS.get(item.name)
    if peer is not None:
        check_keys(item, peer.KEYS)
        return peer.build(item, ctx)
    raise ConfigError(f"unknown policy {item.name!r}; known: {', '.join(KNOWN_POLICIES)}")
