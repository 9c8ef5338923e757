"""The live controller's policy from a ``--policy`` spec: the simulator's ``ebb`` grammar plus time knobs.

``ebb:profile=balanced`` is the same policy ``ebb simulate`` runs. A live demo compresses a trace in
time, so the profile's time constants can be overridden too (all in seconds): ``hold_s``,
``warmup_s``, ``cooldown_s``, ``down_interval_s``, ``sizing_window_s``, ``queue_surge_s``; and
``target_util`` and ``backlog_weight`` (the share of the router backlog added to scale-up demand).
``canary=on`` wraps the policy in the canary guard exactly as in the simulator.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from ebb.config.workloads import WorkloadClass
from ebb.decide.policy import PROFILES, EbbPolicy
from ebb.errors import ConfigError
from ebb.gates.guard import CanaryGuard, ttft_gate
from ebb.gates.metrics_gate import GateSpec
from ebb.model.observation import Pipeline
from ebb.config.policy_specs import check_keys, param_choice, param_float, param_int, parse_policies

__all__ = ["LivePolicy", "build_live_policy", "replica_bounds"]

LivePolicy = EbbPolicy | CanaryGuard
"""What :func:`build_live_policy` returns. Both are :class:`ebb.decide.base.Policy`, which is all the
controller uses; the concrete types are kept here for :func:`replica_bounds`."""

_PROFILE_KEYS: dict[str, float] = {
    # profile field → lowest accepted value
    "hold_s": 0.0, "cooldown_s": 0.0, "down_interval_s": 0.0, "sizing_window_s": 0.0, "queue_surge_s": 0.0,
    "target_util": 0.05, "backlog_weight": 0.0,
}
"""Profile fields a live spec may override (time constants in s, target_util, backlog_weight)."""


def build_live_policy(spec: str, *, slo_ttft_ms: float, slo_e2e_ms: float, initial: int,
                      interval_s: float = 1.0, max_staleness_s: float = 5.0,
                      workload: WorkloadClass | None = None, gates: Sequence[GateSpec] = (),
                      max_replicas: int = 64) -> LivePolicy:
    """One Ebb policy for the live loop; ConfigError names the bad key or value.

    ``workload`` (an L2 class from ``--workloads``) sets the class weight, elasticity α, veto margin
    and replica floor, and its P99 latency bound (when it has one) becomes the latency SLO the
    policy's veto guards. ``gates`` (from ``--gates``) wrap the policy in the canary guard with
    those gates — all must pass (the live controller measures their PromQL). ``max_replicas`` is
    the ceiling when the spec has no ``max=``."""
    items = parse_policies(spec, ("ebb",))
    if len(items) != 1:
        raise ConfigError(f"--policy {spec!r}: the live controller runs exactly one policy")
    item = items[0]
    check_keys(item, ("profile", "min", "max", "canary", "warmup_s", *_PROFILE_KEYS))
    name = param_choice(item, "profile", "balanced", tuple(PROFILES))
    prof = PROFILES[name]
    changes: dict[str, float] = {k: param_float(item, k, float(getattr(prof, k)), lo=lo)
                                 for k, lo in _PROFILE_KEYS.items() if item.get(k) is not None}
    if workload is not None:
        changes["veto_margin"] = workload.veto_margin
        if workload.p99_latency_ms is not None:
            slo_ttft_ms = workload.p99_latency_ms
    prof = replace(prof, **changes)  # type: ignore[arg-type]
    mn = max(param_int(item, "min", 1, lo=1), workload.min_replicas if workload is not None else 1)
    mx = param_int(item, "max", max(mn, max_replicas), lo=mn)
    # Without a class the policy keeps its own default (the note's latency-critical serving class).
    weights: dict[str, Any] = {} if workload is None else {"base_weight": workload.base_weight,
                                                           "alpha": workload.alpha}
    policy = EbbPolicy(prof, slo_ttft_ms, slo_e2e_ms, min_replicas=mn, max_replicas=mx,
                       initial=max(mn, min(mx, initial)), spec=item.text, interval_s=interval_s,
                       pipeline=Pipeline(1, 1, fine_ms=100), max_staleness_s=max_staleness_s,
                       warmup_s=param_float(item, "warmup_s", 300.0, lo=0.0), **weights)
    if gates:
        return CanaryGuard(policy, gates[0], extra_gates=tuple(gates[1:]))
    if param_choice(item, "canary", "off", ("on", "off")) == "on":
        return CanaryGuard(policy, ttft_gate(slo_ttft_ms, prof.veto_margin))
    return policy


def replica_bounds(policy: LivePolicy) -> tuple[int, int]:
    """``(min, max)`` replicas of a live policy (the guard's are its inner policy's): the controller
    holds every applied decision, a resumed one included, inside them."""
    inner = policy.inner if isinstance(policy, CanaryGuard) else policy
    return inner.min_replicas, inner.max_replicas
