"""State-store write rate limiting on virtual time (SPEC §3.4: at most 3 writes per 100 ms).

:class:`TokenBucket` is a frozen value: :meth:`TokenBucket.take` returns the new bucket instead
of mutating, and time is always passed in (``now_s``), so the simulator and the live loop share
it. Defaults: rate 30 writes/s, burst 3 — the note's "3 writes per 100 ms" as a long-run rate.

Guarantees (``r`` = rate, ``b`` = burst): over any closed interval of length ``T`` at most
``b + r·T`` writes are granted (6 in any 100 ms with the defaults: a full bucket of 3 plus 3
refilled), and the long-run average never exceeds ``r``. Refill is continuous; a 1e-9-token
tolerance absorbs float rounding so that ``next_ok_s`` is honoured exactly.

Users: the Kubernetes client's QPS limit (:mod:`ebb.actuate.kube_client`) and ``ebb simulate``'s
etcd ledger writes. One write is one cycle: the etcd ledger puts a cycle's decisions in a single
Txn (:mod:`ebb.ledger.etcd`), so a zone rebalance that moves 20 replicas costs one write, not 20.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import NamedTuple

__all__ = ["DEFAULT_BURST", "DEFAULT_RATE_PER_S", "Take", "TokenBucket"]

#: 3 writes per 100 ms (the note) as a rate.
DEFAULT_RATE_PER_S = 30.0
#: The note's 3 writes may go at once; more than that waits for refill.
DEFAULT_BURST = 3.0
# float slack in token comparisons (tokens, not seconds)
_EPS = 1e-9


class Take(NamedTuple):
    """Result of :meth:`TokenBucket.take`."""

    granted: bool
    """All ``n`` tokens were taken (all-or-nothing: a transaction is never half-written)."""
    next_ok_s: float
    """Earliest virtual time at which another take of the same ``n`` would be granted."""
    bucket: TokenBucket
    """The bucket after this call (unchanged tokens if refused, but refilled to ``now_s``)."""


@dataclass(frozen=True)
class TokenBucket:
    """A continuous-refill token bucket on caller-supplied time."""

    rate_per_s: float = DEFAULT_RATE_PER_S
    """Tokens added per second (> 0). Default 30/s = 3 per 100 ms."""
    burst: float = DEFAULT_BURST
    """Bucket capacity (≥ 1). Default 3: the note's per-100 ms allowance may go at once."""
    tokens: float = DEFAULT_BURST
    """Tokens held at ``updated_s``. Default: a full bucket."""
    updated_s: float | None = None
    """Virtual time of the last take; None = never used (full bucket, any first time is fine)."""

    def __post_init__(self) -> None:
        if not (math.isfinite(self.rate_per_s) and self.rate_per_s > 0):
            raise ValueError(f"rate_per_s must be finite and > 0, got {self.rate_per_s!r}")
        if not (math.isfinite(self.burst) and self.burst >= 1):
            raise ValueError(f"burst must be finite and >= 1, got {self.burst!r}")
        if not 0 <= self.tokens <= self.burst:
            raise ValueError(f"tokens must be in [0, {self.burst}], got {self.tokens!r}")

    def available(self, now_s: float) -> float:
        """Tokens held at ``now_s`` (refilled, capped at ``burst``)."""
        if self.updated_s is None:
            return self.tokens
        if now_s < self.updated_s:
            raise ValueError(f"time went backwards: now_s {now_s!r} < last {self.updated_s!r}")
        return min(self.burst, self.tokens + (now_s - self.updated_s) * self.rate_per_s)

    def take(self, now_s: float, n: int = 1) -> Take:
        """Take ``n`` tokens at ``now_s`` if all are there; report when ``n`` will next be."""
        if not math.isfinite(now_s):
            raise ValueError(f"now_s must be finite, got {now_s!r}")
        if n < 1 or n > self.burst:
            raise ValueError(f"n must be in [1, burst={self.burst:g}], got {n!r}")
        have = self.available(now_s)
        if have + _EPS >= n:
            left = max(0.0, have - n)
            nxt = now_s + max(0.0, n - left) / self.rate_per_s
            return Take(True, nxt, replace(self, tokens=left, updated_s=now_s))
        nxt = now_s + (n - have) / self.rate_per_s
        return Take(False, nxt, replace(self, tokens=have, updated_s=now_s))
