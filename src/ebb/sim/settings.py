"""Simulator settings, parsed once from flags into one frozen dataclass (unit, default, why)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ebb.model.latency import H200_DEFAULT, LatencyModel
from ebb.sim.service_time import ServiceTimeModel
from ebb.config.tiers import SleepTier


@dataclass(frozen=True)
class SloSettings:
    """The service-level objective every request is judged against (both must hold)."""

    ttft_ms: float = 2000.0
    """Time to first token limit (ms). Default 2 s: MLPerf Inference's server-scenario TTFT
    bound for Llama-2-70B, a widely used interactive-serving target."""
    e2e_ms: float = 60000.0
    """End-to-end limit (ms). Default 60 s: the common gateway timeout (nginx
    ``proxy_read_timeout``, AWS ALB idle timeout) past which a client sees a failure; the
    longest Azure 2023 response (1,899 tokens) decodes in ~10 s on the calibrated H200."""

    def __post_init__(self) -> None:
        if not (self.ttft_ms > 0 and self.e2e_ms > 0):
            raise ValueError(f"SLO limits must be > 0 ms, got ttft={self.ttft_ms!r}, e2e={self.e2e_ms!r}")


@dataclass(frozen=True)
class ClusterSettings:
    """The simulated serving fleet."""

    cold_start_s: float = 60.0
    """Time (s) from replica request to serving: node/pod scheduling, image pull, weight load."""
    gpu_hour_usd: float = 4.0
    """Price of one replica (one GPU) per hour (USD). A round figure inside 2025 on-demand H200
    cloud prices (about 3–10 USD per GPU-hour); set your own."""
    initial_replicas: int | None = None
    """Replicas ready at t=0; None = the policy's own first answer, started warm at t=0."""
    latency: LatencyModel = field(default_factory=lambda: H200_DEFAULT)
    """Per-replica service-time model (calibrated on a real H200; see ``ebb.model.latency``)."""
    service: ServiceTimeModel | None = None
    """Any-service model instead of the LLM one (slots × per-request service time; see
    ``ebb.sim.service_time``); None = the LLM prefill/decode model above."""
    sleep: SleepTier | None = None
    """The engines' asleep tier (``--tier``, :mod:`ebb.sim.sleepers`) for the policies that sleep
    replicas (Ebb, static + sleep); None = a scale-down removes replicas, for every policy."""

    def __post_init__(self) -> None:
        # ``not x >= 0`` also refuses NaN (``nan < 0`` is False); infinity would never finish a cold start.
        if not (self.cold_start_s >= 0 and math.isfinite(self.cold_start_s)):
            raise ValueError(f"cold_start_s must be finite and >= 0, got {self.cold_start_s!r}")
        if not (self.gpu_hour_usd >= 0 and math.isfinite(self.gpu_hour_usd)):
            raise ValueError(f"gpu_hour_usd must be finite and >= 0, got {self.gpu_hour_usd!r}")


@dataclass(frozen=True)
class MetricPipelineSettings:
    """The Kubernetes metric chain the baselines read through (upstream defaults)."""

    kubelet_resolution_s: int = 10
    """cAdvisor housekeeping / kubelet resource-metrics resolution (s)."""
    metrics_server_resolution_s: int = 60
    """metrics-server ``--metric-resolution`` (s); default 60 s in the upstream chart."""
    scrape_interval_s: int = 30
    """Prometheus ``scrape_interval`` (s) for exporters (DCGM, the model server)."""
    dcgm_collect_s: int = 30
    """dcgm-exporter collection interval (s; ``-c 30000`` ms default)."""
    rate_window_s: int = 60
    """``rate(...[1m])`` range used by prometheus-adapter / KEDA queries (s)."""
    hpa_sync_s: int = 15
    """kube-controller-manager ``--horizontal-pod-autoscaler-sync-period`` (s)."""

    def __post_init__(self) -> None:
        # Time advances in these periods: a period of 0 would step by zero forever (a hang).
        for name in ("kubelet_resolution_s", "metrics_server_resolution_s", "scrape_interval_s", "dcgm_collect_s",
                     "rate_window_s", "hpa_sync_s"):
            value = getattr(self, name)
            if not value >= 1:
                raise ValueError(f"{name} must be >= 1 s, got {value!r}")


@dataclass(frozen=True)
class FaultSettings:
    """An injected fault: a latency regression caused by removing a replica.

    From the first scale-down at or after ``after_s``, every request admitted while the fleet
    target stays below its pre-scale-down size is served ``slowdown`` times slower (prefill and
    decode) — e.g. the removed replica held a hot cache. Restoring the fleet clears it.
    """

    slowdown: float = 3.0
    """Service-time multiplier while the fault is active (ratio ≥ 1)."""
    after_s: float = 0.0
    """The fault arms at this virtual time (s)."""

    def __post_init__(self) -> None:
        if not (self.slowdown >= 1.0 and self.after_s >= 0.0):
            raise ValueError(f"FaultSettings needs slowdown >= 1 and after_s >= 0, got {self!r}")


@dataclass(frozen=True)
class SimSettings:
    """Everything one ``ebb simulate`` run needs besides the trace and the policies."""

    slo: SloSettings = field(default_factory=SloSettings)
    cluster: ClusterSettings = field(default_factory=ClusterSettings)
    pipeline: MetricPipelineSettings = field(default_factory=MetricPipelineSettings)
    seed: int = 0
    """Seed for every random choice (count-series arrivals, load scaling jitter, scrape phase)."""
    timeline_bin_s: float | None = None
    """Width of report bins (s); None = about 1,000 bins over the trace, at least 1 s."""
    fault: FaultSettings | None = None
    """An injected fault for gate testing (request fidelity only); None = none."""
    drain_horizon_s: float = 3600.0
    """After the last arrival, keep simulating at most this long for in-flight work (s);
    requests unfinished then are reported as dropped."""
    warmup_s: float = 0.0
    """Warm-up (s): the first ``warmup_s`` seconds of the trace feed every policy (and the oracle's
    schedule) as usual but are not judged or billed; the scorecard counts requests arriving at or
    after it, bins starting at or after it, replica-seconds and decisions from it on
    (:mod:`ebb.sim.warmup`). 0 = the whole run is scored."""

    def __post_init__(self) -> None:
        if not (self.warmup_s >= 0 and math.isfinite(self.warmup_s)):
            raise ValueError(f"warmup_s must be finite and >= 0, got {self.warmup_s!r}")
