"""Cluster policies: Ebb's L1 → L2 → L3 over every service, and per-Deployment peers.

``ebb`` (profile knobs as in ``ebb simulate``: ``ebb:budget=0.002``): each second,
:class:`~ebb.decide.fleet_policy.FleetEbb` (L1) observes every service and says what it wants;
:func:`~ebb.decide.fleet_rank.rank_fleet` (L2) recalibrates weights, vetoes and ranks; and
:func:`~ebb.decide.fleet_plan.plan_fleet` (L3) grants removals under the cluster disruption budget,
borrowed quota first. Scale-ups are never budgeted. Writes go out throttled (the scenario's
``writes_per_100ms``), scale-downs in L2 rank order.

L2's inputs per service: latency = the worst latency of the last 30 s (the engine's fluid wait plus
service time), against the service's own SLO at its class's percentile; an idle service (no
arrival for 30 s, fresh data) reads latency 0 as :class:`~ebb.decide.policy.EbbPolicy` does;
success ratio = 1 − share of the window's requests dropped after ``MAX_WAIT_S``.

Peers (``hpa``, ``keda``, ``kpa``, with ``:target=0.7``; ``static``) run one autoscaler per service
(:mod:`ebb.sim.cluster.peers`), unthrottled and unbudgeted, as they would in a real cluster.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Protocol

import numpy as np

from ebb.config.policy_specs import (
    PolicySpecItem,
    check_keys,
    param_choice,
    param_float,
    parse_policies,
)
from ebb.config.workloads import WorkloadClass
from ebb.decide.fleet_plan import FleetPlan, plan_fleet
from ebb.decide.fleet_policy import FleetEbb, FleetTargets
from ebb.decide.fleet_rank import FleetClasses, FleetRank, rank_fleet
from ebb.decide.profiles import PROFILES, profile_with_knobs
from ebb.errors import ConfigError
from ebb.sim.cluster.engine import ClusterInputs, FloatArray, IntArray, PolicyStep
from ebb.sim.cluster.peers import FleetHpa, FleetKeda, FleetKpa, FleetStatic

__all__ = ["CLUSTER_POLICIES", "ClusterPolicy", "build_cluster_policy"]

CLUSTER_POLICIES = ("ebb", "hpa", "keda", "kpa", "static")
FLEET_KNOBS = ("profile", "target_util", "budget", "down_util", "slack_fraction", "memory_horizons",
               "warmup_horizons", "cooldown_horizons", "down_interval_horizons", "down_fraction", "queue_surge_s",
               "up_hysteresis", "surge_fraction", "burst_fraction", "tail")
"""The profile knobs :class:`~ebb.decide.fleet_policy.FleetEbb` reads; the others (fast path, forecast,
latency-window ones) have no meaning on 1 s fluid steps and are refused rather than silently ignored."""
_WINDOW_S = 30


class ClusterPolicy(Protocol):
    """A callable policy for :func:`ebb.sim.cluster.engine.simulate`, with its write limit."""

    spec: str
    write_limit: int | None
    """State writes allowed per 100 ms; None = unthrottled (each Deployment's own autoscaler)."""

    def __call__(self, step: PolicyStep) -> tuple[IntArray, IntArray | None]:
        """Wanted replicas per service, and the order scale-downs are written in (None = index order)."""
        ...

    def explain(self, i: int) -> tuple[str, dict[str, float]]:
        """Why service ``i`` is written now (one line) and the numbers behind it."""
        ...


class EbbCluster:
    """Ebb over the whole cluster (module docstring)."""

    def __init__(self, item: PolicySpecItem, inp: ClusterInputs, classes: Sequence[WorkloadClass],
                 budget: int, write_limit: int) -> None:
        check_keys(item, FLEET_KNOBS)
        self.spec = item.text
        self.write_limit: int | None = write_limit
        profile = profile_with_knobs(item, PROFILES[param_choice(item, "profile", "balanced", tuple(PROFILES))])
        n = len(inp.names)
        cls = FleetClasses.of(classes, inp.class_index)
        slo_ms = inp.slo_s * 1000.0
        self.classes = FleetClasses(
            base_weight=cls.base_weight, alpha=cls.alpha,
            p99_slo_ms=np.where(np.isnan(cls.p99_slo_ms), np.nan, slo_ms),
            p95_slo_ms=np.where(np.isnan(cls.p95_slo_ms) | ~np.isnan(cls.p99_slo_ms), np.nan, slo_ms),
            success_rate_min=cls.success_rate_min, veto_margin=cls.veto_margin,
            min_replicas=inp.min_replicas)
        self.l1 = FleetEbb(n, slo_ttft_s=inp.slo_s - inp.service_s, cold_start_s=inp.cold_start_s.astype(float),
                           min_replicas=inp.min_replicas, max_replicas=inp.max_replicas,
                           capacity_rps=inp.capacity_rps, base_weight=cls.base_weight, profile=profile)
        self.slo_ms = slo_ms
        self.budget = budget
        self._lat = np.full((n, _WINDOW_S), np.nan)
        self._arr = np.zeros((n, _WINDOW_S))
        self._drop = np.zeros((n, _WINDOW_S))
        self._prev_q = np.zeros(n)
        self._i = 0
        self.vetoes = 0
        self.granted = 0
        self._last: tuple[FleetTargets, FleetRank, FleetPlan, FloatArray] | None = None

    def __call__(self, step: PolicyStep) -> tuple[IntArray, IntArray | None]:
        col = self._i % _WINDOW_S
        self._i += 1
        self._lat[:, col] = step.latency_ratio
        self._arr[:, col] = step.arrivals
        served_or_queued = step.served + step.queue - self._prev_q
        self._drop[:, col] = np.maximum(step.arrivals - served_or_queued, 0.0)
        self._prev_q = step.queue
        self.l1.observe(step.t_s, arrivals=step.arrivals, queue=step.queue, ready=step.ready,
                        starting=step.starting + step.pending)
        wants = self.l1.decide(step.t_s)
        spec = step.spec
        busy = self._arr.sum(axis=1) > 0
        with np.errstate(all="ignore"):
            worst = np.where(busy, np.max(np.nan_to_num(self._lat, nan=-np.inf), axis=1), 0.0)
            success = np.where(busy, 1.0 - self._drop.sum(axis=1) / np.maximum(self._arr.sum(axis=1), 1e-9), 1.0)
        latency_ms = np.maximum(worst, 0.0) * self.slo_ms
        rank = rank_fleet(self.classes, prev_weight=self.l1.weight, latency_ms=latency_ms,
                          latency_slo_ms=self.slo_ms, staleness_s=0.0, success_ratio=success,
                          burst_active=wants.burst, replicas=spec)
        self.l1.weight = rank.weight
        request = np.where(wants.desired < spec, spec - wants.desired, 0)
        plan = plan_fleet(ready=step.ready_by_zone, starting=step.starting_by_zone, request=request,
                          order=rank.order, vetoed=rank.vetoed, cluster_budget=self.budget,
                          borrowed=np.minimum(step.borrowed, step.ready + step.starting))
        self.l1.granted(step.t_s, plan.granted)
        self.vetoes += int(np.count_nonzero((request > 0) & rank.vetoed))
        self.granted += int(plan.granted.sum())
        wanted = np.where(wants.desired > spec, wants.desired, spec - plan.granted)
        self._last = (wants, rank, plan, latency_ms)
        return wanted.astype(np.int64), rank.order

    def explain(self, i: int) -> tuple[str, dict[str, float]]:
        """Why service ``i`` is being written now: L1's reason, the numbers, L2's vetoes, L3's grant."""
        if self._last is None:
            return "no decision yet", {}
        wants, rank, plan, latency_ms = self._last
        floor = float(wants.floor_replicas[i])
        words = (f"{FleetEbb.REASONS[int(wants.reason[i])]}: need {wants.need_replicas[i]:.2f} replicas, "
                 f"comeback floor {'unknown' if floor != floor else f'{floor:.2f}'}, weight {rank.weight[i]:.3f}")
        if int(plan.granted[i]):
            words += f"; L3 granted {int(plan.granted[i])} of {int(plan.cluster_granted[i]) or int(plan.granted[i])}" \
                     f" (cluster budget {self.budget}/cycle)"
        if int(plan.reclaimed[i]):
            words += f", {int(plan.reclaimed[i])} reclaiming borrowed quota"
        signals = {"need_replicas": float(wants.need_replicas[i]), "comeback_floor_replicas": floor,
                   "weight": float(rank.weight[i]), "latency_p_ms": float(latency_ms[i]),
                   "headroom": float(rank.headroom[i]), "granted": float(plan.granted[i])}
        return words, {k: v for k, v in signals.items() if math.isfinite(v)}  # unknown = not recorded


class PeerCluster:
    """One peer autoscaler per service, deciding at its own interval."""

    def __init__(self, spec: str, peer: FleetHpa | FleetKpa | FleetStatic) -> None:
        self.spec = spec
        self.write_limit: int | None = None
        self.peer = peer
        self._every = peer.interval_s
        self._next = 0.0
        self._desired = np.zeros(0, dtype=np.int64)

    def __call__(self, step: PolicyStep) -> tuple[IntArray, IntArray | None]:
        self.peer.observe(step.served, step.ready, step.arrivals, step.queue)
        spec = step.spec
        if step.t_s + 1e-9 < self._next:
            return spec, None
        self._next = step.t_s + self._every
        self._desired = self.peer.decide(spec, step.ready)
        return self._desired, None

    def explain(self, i: int) -> tuple[str, dict[str, float]]:
        """The peer's own desired count for service ``i`` at its last sync."""
        return f"{self.spec} sync: desired {int(self._desired[i])}", {"desired_replicas": float(self._desired[i])}


def build_cluster_policy(text: str, inp: ClusterInputs, classes: Sequence[WorkloadClass], *, budget: int,
                         write_limit: int) -> ClusterPolicy:
    """One policy from its spec (``ebb``, ``hpa:target=0.7``, ``kpa``, ``static``...)."""
    items = parse_policies(text, CLUSTER_POLICIES)
    if len(items) != 1:
        raise ConfigError(f"one cluster policy at a time, got {text!r} (fix: run them one by one or use ebb sweep)")
    item = items[0]
    n = len(inp.names)
    if item.name == "ebb":
        return EbbCluster(item, inp, classes, budget, write_limit)
    if item.name == "static":
        check_keys(item, ())
        return PeerCluster(item.text, FleetStatic(inp.initial.copy()))
    check_keys(item, ("target",))
    target = param_float(item, "target", 0.7, lo=0.05, hi=1.0)
    common = dict(target=target, min_replicas=inp.min_replicas, max_replicas=inp.max_replicas,
                  capacity_rps=inp.capacity_rps, service_s=inp.service_s)
    peer: FleetHpa | FleetKpa
    if item.name == "hpa":
        peer = FleetHpa(n, **common)  # type: ignore[arg-type]
    elif item.name == "keda":
        peer = FleetKeda(n, **common)  # type: ignore[arg-type]
    else:
        peer = FleetKpa(n, **common)  # type: ignore[arg-type]
    return PeerCluster(item.text, peer)
