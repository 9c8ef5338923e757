"""Ebb's profiles: points on the cost–SLO curve, and the knobs a policy spec may set.

:class:`EbbProfile` holds every tunable of :class:`~ebb.decide.policy.EbbPolicy` with its unit,
default (the balanced profile) and reason; :data:`PROFILES` names the three shipped points;
:func:`profile_with_knobs` applies a spec's overrides (``ebb:budget=0.002,forecast=off``) within
:data:`PROFILE_KNOBS`' ranges — the same for ``ebb simulate`` and ``ebb run``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ebb.config.policy_specs import PolicySpecItem, param_choice, param_float

__all__ = ["PROFILES", "PROFILE_FLAGS", "PROFILE_KNOBS", "EbbProfile", "profile_with_knobs"]


@dataclass(frozen=True)
class EbbProfile:
    """One point on the cost–SLO curve. Every field: unit, default (balanced), why."""

    name: str = "balanced"
    target_util: float = 0.9
    """Need / replicas to aim for when sizing up (ratio). Lower = more headroom, more cost."""
    budget: float = 0.001
    """Comeback risk budget (probability): a scale-down may leave at most this estimated chance that
    the need outgrows the fleet before removed capacity could come back."""
    down_util: float = 1.0
    """Need / replicas a scale-down may leave at the comeback floor (ratio). The need already holds
    the queueing the SLO tolerates, so 1.0 is the capacity, not a target."""
    slack_fraction: float = 0.5
    """Share of the TTFT SLO that queueing may take (the need's slack): the rest is the request's
    own prefill and the decode stalls of its neighbours."""
    memory_horizons: float = 60.0
    """Comeback memory in horizons (60 × the simulator's 61 s horizon ≈ 1 h): about 60 independent windows to
    estimate the rise distribution from."""
    level_horizons: float = 1.0
    """The need's level is taken over this many horizons (its peak, or mean, over the last one)."""
    warmup_horizons: float = 5.0
    """No scale-down before this many horizons of history (fail safe: no evidence, no risk estimate)."""
    cooldown_horizons: float = 1.0
    """No scale-down for this many horizons after a scale-up: the capacity asked for has arrived."""
    down_interval_horizons: float = 0.5
    """Minimum time between two scale-downs, in horizons: one step, then look at the result."""
    breach_horizons: float = 30.0
    """Window, in horizons, over which an attributable breach rate above half the violation budget
    surges, from the second breach (30 × 62 s: at 4 requests a second, 7,200 requests, so 0.05 % is
    four of them)."""
    down_fraction: float = 0.2
    """Largest scale-down step as a fraction of the fleet (at least one replica)."""
    queue_surge_s: float = 5.0
    """Requests must have queued for this long (s) to force a surge on the slow path."""
    up_hysteresis: float = 0.1
    """A non-urgent scale-up needs demand above target by this fraction of the fleet."""
    surge_fraction: float = 0.25
    """Extra replicas (fraction of the fleet) when requests queue or TTFT P99 breaks its SLO."""
    veto_margin: float = 0.7
    """Veto scale-down while TTFT P99 ≥ this fraction of the TTFT SLO."""
    violation_budget: float = 0.001
    """Share of requests that may break the SLO (0.1 %: where a policy *meets* it). Attributable
    breaches above it over the last 10 minutes surge, like a burst of them over 30 s."""
    surge_margin: float = 1.0
    """Surge when the wait P99 before a request's own prefill is above this fraction of the slack
    (TTFT P99 above this fraction of its SLO where the source reports no wait)."""
    burst_fraction: float = 0.9
    """A burst is demand ≥ this fraction of ready capacity sustained ≥ 200 ms."""
    sizing_window_s: float = 2.0
    """Scale-up sizes on the largest need of this window (s)."""
    max_unavailable: float = 0.25
    """Disruption budget per cycle (fraction of ready replicas, at least one), like a PDB."""
    tail: bool = True
    """Extrapolate the rise quantile with a Gumbel fit of the horizon maxima (see comeback)."""
    level_peak: bool = True
    """The level is the need's peak (not mean) over ``level_horizons``."""
    forecast: bool = True
    """Use a detected period of the rises (:mod:`ebb.decide.forecast`): shrink between recurring bursts
    and grow back one horizon before the next."""
    fast_path: bool = True
    """React between reconciles (every fine sample) when the need outgrows the ready fleet."""


PROFILES: dict[str, EbbProfile] = {
    "cautious": EbbProfile("cautious", target_util=0.85, budget=0.0005, slack_fraction=0.4),
    "balanced": EbbProfile(),
    "lean": EbbProfile("lean", target_util=1.0, budget=0.01, slack_fraction=0.7),
}


PROFILE_KNOBS: dict[str, tuple[float, float | None]] = {
    # profile field → accepted range (a policy spec may override any of them: ebb:budget=0.005)
    "target_util": (0.05, 2.0), "budget": (0.0, 0.5), "down_util": (0.05, 2.0), "slack_fraction": (0.05, 1.0),
    "memory_horizons": (3.0, 10_000.0), "level_horizons": (0.01, 1000.0), "warmup_horizons": (0.0, 1000.0),
    "cooldown_horizons": (0.0, 1000.0), "down_interval_horizons": (0.0, 1000.0), "breach_horizons": (1.0, 10_000.0),
    "down_fraction": (0.0, 1.0),
    "queue_surge_s": (0.0, 3600.0), "up_hysteresis": (0.0, 10.0), "surge_fraction": (0.0, 10.0),
    "veto_margin": (0.0, 1.0), "surge_margin": (0.0, 10.0), "violation_budget": (0.0, 0.5), "burst_fraction": (0.0, 10.0), "sizing_window_s": (0.1, 3600.0),
    "max_unavailable": (0.0, 1.0),
}
"""Profile fields a policy spec may override, with their accepted ranges."""


PROFILE_FLAGS = ("fast_path", "tail", "level_peak", "forecast")
"""Profile switches a policy spec may set ``on`` or ``off``."""


def profile_with_knobs(item: PolicySpecItem, base: EbbProfile) -> EbbProfile:
    """``base`` with the spec's overrides of :data:`PROFILE_KNOBS` (``fast_path=on|off`` too);
    ConfigError names the spec, the key and the range."""
    changes: dict[str, object] = {k: param_float(item, k, float(getattr(base, k)), lo=lo, hi=hi)
                                  for k, (lo, hi) in PROFILE_KNOBS.items() if item.get(k) is not None}
    for flag in PROFILE_FLAGS:
        if item.get(flag) is not None:
            changes[flag] = param_choice(item, flag, "on", ("on", "off")) == "on"
    return replace(base, **changes)  # type: ignore[arg-type]
