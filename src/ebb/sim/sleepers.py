"""The asleep tier in the simulator: replicas put to sleep instead of removed, and woken in seconds.

A serving engine with a sleep mode (vLLM ``--enable-sleep-mode``: ``POST /sleep``, ``POST /wake_up``;
SGLang's ``release_memory_occupation``) frees its GPU memory but keeps its process and pod, so it
comes back in seconds instead of a cold start's minutes. It still holds its GPU: a sleeping replica
is billed (its HBM can be lent, the device is not released) unless the cluster shares GPUs.

:class:`~ebb.config.tiers.SleepTier` is the tier's configuration (``--tier asleep:wake_s=2,max=8,ttl_s=600``);
:class:`SleepPool` is one run's sleeping replicas, kept by :class:`~ebb.sim.lifecycle.Lifecycles`
for both engines:

* **Who sleeps.** A replica whose drain ends (a scale-down chose it, its in-flight work finished)
  goes to sleep when fewer than ``max`` replicas sleep at that instant; otherwise it is removed as
  before. A run's end stops every replica, asleep or not.
* **Who wakes.** A scale-up takes sleeping replicas first, the most recent sleeper first (the one
  whose sleep lasts longest), each ready ``wake_s`` later; the rest cold-start.
* **Tier faults.** With the tier's ``fail`` > 0, that share of wakes fails: the sleeper is released
  at the wake's instant and the replica cold-starts instead (:meth:`SleepPool.wake` returns None).
  Which wakes fail is drawn from ``numpy.random.default_rng([seed, 0x51EE9])`` — one uniform per
  wake, in wake order —, so a run's seed decides it; ``fail`` = 0 draws nothing.
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

import numpy as np

from ebb.config.tiers import SleepTier
from ebb.decide.base import Sleeps

__all__ = ["Sleeps", "SleepPool", "sleep_tier"]

_FAULT_TAG = 0x51EE9
"""A second seed word for the wake-fault draws, so they never reuse another generator's stream."""


class SleepPool:
    """One run's sleeping replicas (see the module docstring); ``tier`` None: nothing ever sleeps."""

    __slots__ = ("tier", "_starts", "intervals", "wakeups", "failed_wakes", "_faults")

    def __init__(self, tier: SleepTier | None, seed: int = 0) -> None:
        self.tier = tier
        self._starts: list[float] = []
        """Start times of the replicas asleep (or released by their TTL, not yet swept), oldest first."""
        self.intervals: list[tuple[float, float]] = []
        """Ended sleeps: (start s, end s)."""
        self.wakeups = 0
        """Wakes asked of sleepers (failed ones included)."""
        self.failed_wakes = 0
        """Of :attr:`wakeups`, those that failed (tier faults): each fell back to a cold start."""
        self._faults = np.random.default_rng([seed, _FAULT_TAG]) if tier is not None and tier.fail > 0 else None

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
        """Take a sleeper at ``t`` (the most recent); its wake time (s), or None when none sleeps or
        the wake failed (a tier fault: the sleeper is released at ``t``, the caller cold-starts)."""
        if self.tier is None or not self.asleep(t):
            return None
        self.intervals.append((self._starts.pop(), t))
        self.wakeups += 1
        if self._faults is not None and self._faults.random() < self.tier.fail:
            self.failed_wakes += 1
            return None
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


# Sleeps (the policy's side) lives in ebb.decide.base, beside the other policy protocols, so the
# live controller (which never imports ebb.sim) asks the same protocol; re-exported here.


def sleep_tier(policy: object, tier: SleepTier | None) -> SleepTier | None:
    """The tier a run of ``policy`` uses: the cluster's ``tier`` for a policy that :class:`Sleeps`, else None."""
    return tier if tier is not None and isinstance(policy, Sleeps) and policy.sleeps else None
