"""The asleep tier in the simulator: replicas put to sleep instead of removed, and woken in seconds.

A serving engine with a sleep mode (vLLM ``--enable-sleep-mode``: ``POST /sleep``, ``POST /wake_up``;
SGLang's ``release_memory_occupation``) frees its GPU memory but keeps its process and pod, so it
comes back in seconds instead of a cold start's minutes. It still holds its GPU: a sleeping replica
is billed (its HBM can be lent, the device is not released) unless the cluster shares GPUs.

:class:`SleepTier` is the tier's configuration (``--tier asleep:wake_s=2,max=8,ttl_s=600``);
:class:`SleepPool` is one run's sleeping replicas, kept by :class:`~ebb.sim.lifecycle.Lifecycles`
for both engines:

* **Who sleeps.** A replica whose drain ends (a scale-down chose it, its in-flight work finished)
  goes to sleep when fewer than ``max`` replicas sleep at that instant; otherwise it is removed as
  before. A run's end stops every replica, asleep or not.
* **Who wakes.** A scale-up takes sleeping replicas first, the most recent sleeper first (the one
  whose sleep lasts longest), each ready ``wake_s`` later; the rest cold-start.
* **How long.** A replica asleep for ``ttl_s`` is released then (its GPU freed: the TTL ladder a
  team builds by hand), and after each decision the policy may say how many sleepers it still
  wants (:meth:`Sleeps.asleep_wanted`: Ebb keeps those its comeback bound counts on); the oldest
  past that are released at once. Sleep intervals are exact:
  ``[start, min(wake, release, start + ttl_s, end))``.
* **Billing.** The pool's intervals are the asleep replica-seconds; the running ones are the
  replicas' own (:class:`~ebb.sim.fleet.FleetLog`); a run without a tier has none.

Pure: times arrive from the engine's clock (never decreasing).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from ebb.errors import ConfigError

__all__ = ["DEFAULT_TTL_S", "DEFAULT_WAKE_S", "Sleeps", "SleepPool", "SleepTier", "parse_tier", "sleep_tier"]

DEFAULT_WAKE_S = 2.0
"""Default wake time (s): vLLM sleep level 1 wakes in 0.1-6 s, level 2 in 0.8-2.6 s (vLLM blog,
2025-10-26; docs/tiers.md)."""
DEFAULT_TTL_S = 1800.0
"""Default time a replica may sleep before it is released (s)."""


@dataclass(frozen=True)
class SleepTier:
    """An asleep tier: wake time, how many replicas may sleep at once, how long each may sleep."""

    wake_s: float = DEFAULT_WAKE_S
    """From a wake request to serving (s)."""
    max_replicas: int = 8
    """Replicas asleep at once at most; a drain past it removes its replica."""
    ttl_s: float = DEFAULT_TTL_S
    """A replica asleep this long (s) is released (its GPU freed)."""

    def __post_init__(self) -> None:
        if not (0 <= self.wake_s < 3600 and math.isfinite(self.wake_s)):
            raise ConfigError(f"--tier asleep: wake_s must be in [0, 3600) s, got {self.wake_s!r}")
        if not 1 <= self.max_replicas <= 100_000:
            raise ConfigError(f"--tier asleep: max must be in [1, 100000], got {self.max_replicas!r}")
        if not (0 < self.ttl_s <= 30 * 86400 and math.isfinite(self.ttl_s)):
            raise ConfigError(f"--tier asleep: ttl_s must be in (0, 2592000] s, got {self.ttl_s!r}")

    def describe(self) -> str:
        """``asleep:wake_s=2,max=8,ttl_s=1800`` (what :func:`parse_tier` reads back)."""
        return f"asleep:wake_s={self.wake_s:g},max={self.max_replicas},ttl_s={self.ttl_s:g}"


_KEYS = {"wake_s": float, "max": int, "ttl_s": float}


def parse_tier(text: str) -> SleepTier:
    """``asleep[:wake_s=S,max=N,ttl_s=S]`` → :class:`SleepTier`; ConfigError naming the part and the fix."""
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
                     max_replicas=int(values.get("max", 8)), ttl_s=float(values.get("ttl_s", DEFAULT_TTL_S)))


class SleepPool:
    """One run's sleeping replicas (see the module docstring); ``tier`` None: nothing ever sleeps."""

    __slots__ = ("tier", "_starts", "intervals", "wakeups")

    def __init__(self, tier: SleepTier | None) -> None:
        self.tier = tier
        self._starts: list[float] = []
        """Start times of the replicas asleep (or released by their TTL, not yet swept), oldest first."""
        self.intervals: list[tuple[float, float]] = []
        """Ended sleeps: (start s, end s)."""
        self.wakeups = 0
        """Replicas woken."""

    def _sweep(self, t: float) -> None:
        """End the sleeps whose TTL passed by ``t`` (at their own instant)."""
        assert self.tier is not None
        ttl = self.tier.ttl_s
        while self._starts and self._starts[0] + ttl <= t:
            s = self._starts.pop(0)
            self.intervals.append((s, s + ttl))

    def asleep(self, t: float) -> int:
        """Replicas asleep at ``t``."""
        if self.tier is None:
            return 0
        self._sweep(t)
        return len(self._starts)

    def put(self, t: float) -> bool:
        """A drained replica at ``t``: True when it went to sleep, False when it is removed (no tier, or full)."""
        if self.tier is None or self.asleep(t) >= self.tier.max_replicas:
            return False
        self._starts.append(t)
        return True

    def wake(self, t: float) -> float | None:
        """Take a sleeper at ``t`` (the most recent); its wake time (s), or None when none sleeps."""
        if self.tier is None or not self.asleep(t):
            return None
        self.intervals.append((self._starts.pop(), t))
        self.wakeups += 1
        return self.tier.wake_s

    def release(self, t: float, keep: int) -> int:
        """Release the oldest sleepers at ``t`` until at most ``keep`` sleep (their GPUs freed); how many."""
        if self.tier is None:
            return 0
        n = max(0, self.asleep(t) - max(0, keep))
        for s in self._starts[:n]:
            self.intervals.append((s, t))
        del self._starts[:n]
        return n

    def close(self, t: float) -> tuple[tuple[float, float], ...]:
        """End every sleep at ``t`` (the run's end); all sleep intervals, in end order."""
        if self.tier is not None:
            self._sweep(t)
            self.intervals.extend((s, t) for s in self._starts)
            self._starts.clear()
        return tuple(self.intervals)


@runtime_checkable
class Sleeps(Protocol):
    """A policy that puts replicas to sleep when the cluster has an asleep tier (Ebb, static + sleep).
    Peers do not: they keep their upstream behaviour, removing replicas."""

    sleeps: bool

    def asleep_wanted(self, running: int) -> int | None:
        """How many sleepers to keep beside ``running`` replicas after a decision (the engine
        releases the oldest past it); None: no opinion, the tier's TTL decides."""
        ...


def sleep_tier(policy: object, tier: SleepTier | None) -> SleepTier | None:
    """The tier a run of ``policy`` uses: the cluster's ``tier`` for a policy that :class:`Sleeps`, else None."""
    return tier if tier is not None and isinstance(policy, Sleeps) and policy.sleeps else None
