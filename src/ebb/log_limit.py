"""Rate-limited logging: a peer's trouble (an agent's endpoint, a controller's agent) costs one log line per 10 s.

:class:`LogLimiter` allows at most ``burst`` lines (default 1) per subject (an endpoint, a peer, a
kind of drop) per ``every_s`` (default :data:`LOG_EVERY_S`, 10 s) and counts the lines it held back;
:func:`held_note` renders that count on the next line let through, so a held-back line is
counted, never lost without trace. Memory: one window and one count per subject seen;
:meth:`LogLimiter.forget` drops a subject that is gone (an endpoint discovery removed).
"""

from __future__ import annotations

import math
import time
from collections import Counter as Tally
from typing import Final

__all__ = ["LOG_EVERY_S", "LogLimiter", "held_note"]

LOG_EVERY_S: Final = 10.0
"""At most one log line per subject (an endpoint, a peer, a kind of drop) per this many seconds, and
at most 20 endpoint-failure lines in all."""


class LogLimiter:
    """At most ``burst`` lines per key per ``every_s``; counts the lines held back meanwhile."""

    def __init__(self, every_s: float = LOG_EVERY_S, burst: int = 1) -> None:
        self.every_s, self.burst = every_s, burst
        self._window: dict[str, tuple[float, int]] = {}
        self._held: Tally[str] = Tally()

    def allow(self, key: str) -> int | None:
        """None to stay silent; else the number of lines held back since the last one."""
        now = time.monotonic()
        start, used = self._window.get(key, (-math.inf, 0))
        if now - start >= self.every_s:
            start, used = now, 0
        if used >= self.burst:
            self._held[key] += 1
            return None
        self._window[key] = (start, used + 1)
        return self._held.pop(key, 0)

    def forget(self, key: str) -> None:
        self._window.pop(key, None)
        self._held.pop(key, None)


def held_note(n: int) -> str:
    """`` (N similar line(s) held back in the last 10 s)`` for ``n`` > 0, else ``""``."""
    return f" ({n} similar line(s) held back in the last {LOG_EVERY_S:g} s)" if n else ""
