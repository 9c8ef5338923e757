"""Per-Deployment peer autoscalers for the cluster simulator, vectorised over services.

In a real cluster every Deployment has its own autoscaler object, each deciding alone: no cluster
budget, no coordination, no quota awareness. These classes run N of them at once with numpy,
following upstream's decision rules and defaults:

* :class:`FleetHpa` — Kubernetes HPA ``autoscaling/v2`` (``pkg/controller/podautoscaler/
  horizontal.go`` and ``replica_calculator.go``, Kubernetes 1.30 line): every ``sync_s`` (15 s,
  ``--horizontal-pod-autoscaler-sync-period``), ``desired = ceil(ready × metric / target)`` unless
  ``|metric / target − 1| ≤ 0.1`` (tolerance); default behavior: scale-up limited to
  ``max(2 × current, current + 4)`` per 15 s, scale-down stabilised over 300 s (the largest
  recommendation of the window) and limited to 100 % per 15 s; clamped to [min, max]. The metric is
  GPU busy ratio (served / capacity), averaged over ``metric_window_s`` (60 s: a DCGM-exporter
  ``rate()[1m]`` through prometheus-adapter).
* :class:`FleetKeda` — KEDA's Prometheus scaler feeding the HPA an ``AverageValue`` external metric
  (``pkg/scalers/prometheus_scaler.go``, KEDA 2.14): the arrival rate per replica against
  ``target × capacity_rps``; ``pollingInterval`` 30 s, then the same HPA rules.
* :class:`FleetKpa` — Knative's KPA (``pkg/autoscaler/scaling/autoscaler.go``, Knative Serving 1.14
  defaults): every 2 s, ``desired = ceil(concurrency / (target × capacity))`` over a 60 s stable
  window and a 6 s panic window; panic when the panic desire ≥ 2 × ready, no scale-down while in
  panic (60 s); scale-down at most to ``ready / 2`` per tick (``max-scale-down-rate`` 2.0), up to
  ``1000 ×`` (``max-scale-up-rate``). Concurrency = in-flight requests (served × service time +
  queue, Little's law).

They see what the engine sees (served, queue, arrivals per second); they do not see other services.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

__all__ = ["FleetHpa", "FleetKeda", "FleetKpa", "FleetStatic", "PEERS"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


class _Window:
    """Per-second ring of one signal per service; mean over the last ``w`` seconds."""

    def __init__(self, n: int, w: int) -> None:
        self.buf = np.zeros((n, w))
        self.i = 0
        self.filled = 0

    def push(self, v: FloatArray) -> None:
        self.buf[:, self.i % self.buf.shape[1]] = v
        self.i += 1
        self.filled = min(self.filled + 1, self.buf.shape[1])

    def mean(self, last: int | None = None) -> FloatArray:
        w = self.buf.shape[1]
        k = min(self.filled, w if last is None else last)
        if k == 0:
            return np.zeros(self.buf.shape[0])
        cols = (self.i - 1 - np.arange(k)) % w
        return np.asarray(self.buf[:, cols].mean(axis=1))


class FleetHpa:
    """N HPAs on the GPU busy ratio (see the module docstring)."""

    spec = "hpa"
    interval_s = 15.0

    def __init__(self, n: int, *, target: float, min_replicas: IntArray, max_replicas: IntArray,
                 capacity_rps: FloatArray, service_s: FloatArray, metric_window_s: int = 60,
                 stabilization_s: int = 300) -> None:
        self.target = target
        self.min_r, self.max_r = min_replicas, max_replicas
        self.capacity = capacity_rps
        self.service_s = service_s
        self._metric = _Window(n, metric_window_s)
        self._recs = np.zeros((n, max(1, stabilization_s // int(self.interval_s))), dtype=np.int64)
        self._k = 0

    def metric(self, served: FloatArray, ready: IntArray, arrivals: FloatArray, queue: FloatArray) -> FloatArray:
        """This second's metric per service (GPU busy ratio)."""
        return np.where(ready > 0, np.minimum(1.0, served / (np.maximum(ready, 1) * self.capacity)), 1.0)

    def observe(self, served: FloatArray, ready: IntArray, arrivals: FloatArray, queue: FloatArray) -> None:
        """Record one second of signals."""
        self._metric.push(self.metric(served, ready, arrivals, queue))

    def decide(self, spec: IntArray, ready: IntArray) -> IntArray:
        """Desired replicas at a sync (every :attr:`interval_s`)."""
        ratio = self._metric.mean() / self.target
        # replica_calculator.go: from zero, ceil(ratio); within tolerance, spec; else ceil(ratio × ready pods)
        raw = np.where(spec == 0, np.ceil(ratio), np.where(np.abs(ratio - 1.0) <= 0.1, spec, np.ceil(ratio * ready)))
        raw = raw.astype(np.int64)
        # horizontal.go stabilizeRecommendationWithBehaviors: scale-up window 0 s, scale-down 300 s —
        # result = clamp(spec, desired, max of the window's recommendations incl. this one)
        self._recs[:, self._k % self._recs.shape[1]] = raw
        self._k += 1
        filled = min(self._k, self._recs.shape[1])
        down_rec = np.max(self._recs[:, :filled], axis=1)
        stable = np.minimum(np.maximum(spec, raw), down_rec)
        # default scale-up policies (100 % or 4 pods per 15 s, the larger); then [min, max]
        up_limit = np.maximum(2 * spec, spec + 4)
        out: IntArray = np.clip(np.minimum(stable, up_limit), self.min_r, self.max_r).astype(np.int64)
        return out


class FleetKeda(FleetHpa):
    """N KEDA ScaledObjects on the arrival rate per replica (AverageValue), through the HPA."""

    spec = "keda"
    interval_s = 30.0

    def metric(self, served: FloatArray, ready: IntArray, arrivals: FloatArray, queue: FloatArray) -> FloatArray:
        return np.asarray(arrivals / (np.maximum(ready, 1) * self.capacity))


class FleetKpa:
    """N Knative KPAs on in-flight concurrency (see the module docstring)."""

    spec = "kpa"
    interval_s = 2.0

    def __init__(self, n: int, *, target: float, min_replicas: IntArray, max_replicas: IntArray,
                 capacity_rps: FloatArray, service_s: FloatArray) -> None:
        self.target = target
        self.min_r, self.max_r = min_replicas, max_replicas
        # one replica's concurrency at full rate: capacity × service time (Little), at least 1
        self.per_replica = np.maximum(capacity_rps * service_s, 1.0)
        self.service_s = service_s
        self._conc = _Window(n, 60)
        self._panic_until = np.full(n, -np.inf)
        self._t = 0.0

    def observe(self, served: FloatArray, ready: IntArray, arrivals: FloatArray, queue: FloatArray) -> None:
        """Record one second of signals."""
        self._conc.push(served * self.service_s + queue)
        self._t += 1.0

    def decide(self, spec: IntArray, ready: IntArray) -> IntArray:
        """Desired replicas at a tick (every 2 s)."""
        unit = self.target * self.per_replica
        stable = np.ceil(self._conc.mean() / unit - 1e-9).astype(np.int64)
        panic = np.ceil(self._conc.mean(6) / unit - 1e-9).astype(np.int64)
        now = self._t
        start_panic = panic >= 2 * np.maximum(ready, 1)
        self._panic_until = np.where(start_panic, now + 60.0, self._panic_until)
        in_panic = now < self._panic_until
        want = np.where(in_panic, np.maximum(np.maximum(panic, stable), spec), stable)
        floor = np.ceil(np.maximum(ready, 1) / 2.0).astype(np.int64)
        want = np.maximum(want, floor)
        return np.clip(want, self.min_r, self.max_r).astype(np.int64)


class FleetStatic:
    """Every service at a fixed replica count (its ``max_replicas`` unless given)."""

    spec = "static"
    interval_s = math.inf

    def __init__(self, replicas: IntArray) -> None:
        self.replicas = replicas

    def observe(self, served: FloatArray, ready: IntArray, arrivals: FloatArray, queue: FloatArray) -> None:
        """Static sees nothing."""

    def decide(self, spec: IntArray, ready: IntArray) -> IntArray:
        """Always the fixed count."""
        return self.replicas


PEERS = ("hpa", "keda", "kpa")
