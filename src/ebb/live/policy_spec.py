"""The live controller's policy from a ``--policy`` spec: the simulator's ``ebb`` grammar.

``ebb:profile=balanced`` is the same policy ``ebb simulate`` runs, with the same knobs (every field of
:data:`ebb.decide.profiles.PROFILE_KNOBS`, the switches of :data:`~ebb.decide.profiles.PROFILE_FLAGS`).
The policy's memories are counted in comeback horizons — a cold start plus a decision period — so a
fleet that starts replicas in seconds remembers minutes, one that starts them in a minute an hour:
``cold_start_s`` (default the caller's, ``ebb run --cold-start-s``) is the one time a fleet must be
described by, and the policy raises it to the slowest cold start it sees. ``warmup_s`` overrides the
warm-up alone. ``canary=on`` wraps the policy in the canary guard exactly as in the simulator.
``tier`` (an asleep tier the actuator has, ``ebb demo --live --tier``) gives the policy its
``wake_s`` and ``sleep_max`` as ``ebb simulate --tier`` does (:func:`ebb.decide.policy.tier_knobs`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from ebb.config.tiers import SleepTier
from ebb.config.workloads import WorkloadClass
from ebb.decide.policy import EbbPolicy, tier_knobs
from ebb.decide.profiles import PROFILE_FLAGS, PROFILE_KNOBS, PROFILES, profile_with_knobs
from ebb.errors import ConfigError
from ebb.gates.guard import CanaryGuard, ttft_gate
from ebb.gates.metrics_gate import GateSpec
from ebb.model.observation import Pipeline
from ebb.config.policy_specs import check_keys, param_choice, param_float, param_int, parse_policies

__all__ = ["LivePolicy", "build_live_policy", "replica_bounds"]

LivePolicy = EbbPolicy | CanaryGuard
"""What :func:`build_live_policy` returns. Both are :class:`ebb.decide.base.Policy`, which is all the
controller uses; the concrete types are kept here for :func:`replica_bounds`."""

def build_live_policy(spec: str, *, slo_ttft_ms: float, slo_e2e_ms: float, initial: int,
                      interval_s: float = 1.0, max_staleness_s: float = 5.0,
                      workload: WorkloadClass | None = None, gates: Sequence[GateSpec] = (),
                      max_replicas: int = 64, cold_start_s: float = 60.0,
                      tier: SleepTier | None = None) -> LivePolicy:
    """One Ebb policy for the live loop; ConfigError names the bad key or value.

    ``workload`` (an L2 class from ``--workloads``) sets the class weight, elasticity α, veto margin
    and replica floor, and its P99 latency bound (when it has one) becomes the latency SLO the
    policy's veto guards. ``gates`` (from ``--gates``) wrap the policy in the canary guard with
    those gates — all must pass (the live controller measures their PromQL); gates of stage
    ``after_scale_down`` check every scale-down whole instead of canarying it. ``max_replicas`` is
    the ceiling when the spec has no ``max=``; ``cold_start_s`` the fleet's time from a replica's
    request to serving when the spec has no ``cold_start_s=``; ``tier`` the actuator's asleep tier
    (None: none)."""
    items = parse_policies(spec, ("ebb",))
    if len(items) != 1:
        raise ConfigError(f"--policy {spec!r}: the live controller runs exactly one policy")
    item = items[0]
    check_keys(item, ("profile", "min", "max", "canary", "warmup_s", "cold_start_s", *PROFILE_FLAGS,
                      *PROFILE_KNOBS))
    name = param_choice(item, "profile", "balanced", tuple(PROFILES))
    prof = profile_with_knobs(item, PROFILES[name])
    if workload is not None:
        prof = replace(prof, veto_margin=workload.veto_margin)
        if workload.p99_latency_ms is not None:
            slo_ttft_ms = workload.p99_latency_ms
    mn = max(param_int(item, "min", 1, lo=1), workload.min_replicas if workload is not None else 1)
    mx = param_int(item, "max", max(mn, max_replicas), lo=mn)
    # Without a class the policy keeps its own default (the note's latency-critical serving class).
    weights: dict[str, Any] = {} if workload is None else {"base_weight": workload.base_weight,
                                                           "alpha": workload.alpha}
    knobs = tier_knobs(tier)
    policy = EbbPolicy(prof, slo_ttft_ms, slo_e2e_ms, min_replicas=mn, max_replicas=mx,
                       initial=max(mn, min(mx, initial)), spec=item.text, interval_s=interval_s,
                       pipeline=Pipeline(1, 1, fine_ms=100), max_staleness_s=max_staleness_s,
                       cold_start_s=param_float(item, "cold_start_s", cold_start_s, lo=0.0, hi=86_400.0),
                       warmup_s=None if item.get("warmup_s") is None else param_float(item, "warmup_s", 0.0, lo=0.0),
                       wake_s=knobs.wake_s, sleep_max=knobs.sleep_max,
                        reserve=knobs.reserve, **weights)
    if gates:  # one stage per gates file: canaried (gates:) or checked whole (after_scale_down:)
        return CanaryGuard(policy, gates[0], extra_gates=tuple(gates[1:]),
                           canary_replicas=None if gates[0].stage == "after_scale_down" else 1)
    if param_choice(item, "canary", "off", ("on", "off")) == "on":
        return CanaryGuard(policy, ttft_gate(slo_ttft_ms, prof.veto_margin))
    return policy


def replica_bounds(policy: LivePolicy) -> tuple[int, int]:
    """``(min, max)`` replicas of a live policy (the guard's are its inner policy's): the controller
    holds every applied decision, a resumed one included, inside them."""
    inner = policy.inner if isinstance(policy, CanaryGuard) else policy
    return inner.min_replicas, inner.max_replicas
