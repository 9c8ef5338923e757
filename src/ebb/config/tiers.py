"""The asleep tier's configuration: wake time, how many replicas may sleep, how long each may sleep.

``--tier asleep:wake_s=2,max=8,ttl_s=1800[,fail=0.05]`` (the simulator) and a workload's ``tier:`` (``workloads.yaml``)
parse into one :class:`SleepTier`. What the tier does is the simulator's :mod:`ebb.sim.sleepers` and the
actuators' (:class:`ebb.actuate.base.SleepingActuator`); how Ebb decides with it is
``EbbPolicy._tiered``; the engines' sleep modes and published wake times are in ``docs/tiers.md``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ebb.errors import ConfigError

__all__ = ["DEFAULT_FAIL", "DEFAULT_MAX", "DEFAULT_TTL_S", "DEFAULT_WAKE_S", "SleepTier", "parse_tier"]

DEFAULT_MAX = 8
"""Default number of replicas asleep at once at most."""
DEFAULT_WAKE_S = 2.0
"""Default wake time (s): vLLM sleep level 1 wakes in 0.1-6 s, level 2 in 0.8-2.6 s (vLLM blog,
2025-10-26; docs/tiers.md)."""
DEFAULT_TTL_S = 1800.0
"""Default time a replica may sleep before it is released (s)."""
DEFAULT_FAIL = 0.0
"""Default share of wakes that fail (the simulator's tier faults): none."""


@dataclass(frozen=True)
class SleepTier:
    """An asleep tier: wake time, how many replicas may sleep at once, how long each may sleep."""

    wake_s: float = DEFAULT_WAKE_S
    """From a wake request to serving (s)."""
    max_replicas: int = DEFAULT_MAX
    """Replicas asleep at once at most; a drain past it removes its replica."""
    ttl_s: float = DEFAULT_TTL_S
    """A replica asleep this long (s) is released (its GPU freed)."""
    fail: float = DEFAULT_FAIL
    """Share of wakes that fail (the simulator's tier faults, :mod:`ebb.sim.sleepers`): a failed wake
    releases its sleeper and falls back to a cold start at once. 0: every wake succeeds."""

    def __post_init__(self) -> None:
        if not (0 <= self.wake_s < 3600 and math.isfinite(self.wake_s)):
            raise ConfigError(f"--tier asleep: wake_s must be in [0, 3600) s, got {self.wake_s!r}")
        if not 1 <= self.max_replicas <= 100_000:
            raise ConfigError(f"--tier asleep: max must be in [1, 100000], got {self.max_replicas!r}")
        if not (0 < self.ttl_s <= 30 * 86400 and math.isfinite(self.ttl_s)):
            raise ConfigError(f"--tier asleep: ttl_s must be in (0, 2592000] s, got {self.ttl_s!r}")
        if not 0 <= self.fail <= 1:  # NaN fails both comparisons
            raise ConfigError(f"--tier asleep: fail must be in [0, 1], got {self.fail!r}")

    def describe(self) -> str:
        """``asleep:wake_s=2,max=8,ttl_s=1800`` (what :func:`parse_tier` reads back; ``,fail=F`` when
        wakes fail)."""
        fail = f",fail={self.fail!r}" if self.fail else ""
        return f"asleep:wake_s={self.wake_s:g},max={self.max_replicas},ttl_s={self.ttl_s:g}{fail}"


_KEYS = {"wake_s": float, "max": int, "ttl_s": float, "fail": float}


def parse_tier(text: str) -> SleepTier:
    """``asleep[:wake_s=S,max=N,ttl_s=S,fail=F]`` → :class:`SleepTier`; ConfigError naming the part and the fix."""
    fix = "write --tier asleep:wake_s=2,max=8,ttl_s=1800 (every key optional)"
    name, _, params = text.strip().partition(":")
    if name != "asleep":
        raise ConfigError(f"--tier {text!r}: unknown tier {name!r}; the simulator knows 'asleep' (fix: {fix})")
    values: dict[str, float | int] = {}
    for part in filter(None, (p.strip() for p in params.split(","))):
        key, eq, raw = part.partition("=")
        if not eq or key not in _KEYS:
            raise ConfigError(f"--tier {text!r}: {part!r} is not one of {', '.join(_KEYS)}=VALUE (fix: {fix})")
        if key in values:
            raise ConfigError(f"--tier {text!r}: {key} given twice (fix: {fix})")
        try:
            values[key] = _KEYS[key](raw)
        except ValueError:
            raise ConfigError(f"--tier {text!r}: {key}={raw!r} is not a number (fix: {fix})") from None
    return SleepTier(wake_s=float(values.get("wake_s", DEFAULT_WAKE_S)),
                     max_replicas=int(values.get("max", DEFAULT_MAX)), ttl_s=float(values.get("ttl_s", DEFAULT_TTL_S)),
                     fail=float(values.get("fail", DEFAULT_FAIL)))
