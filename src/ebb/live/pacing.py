"""The live loop's pacing: one full cycle every ``interval_s``, fast-path ticks in between.

Shared by the single-workload :class:`~ebb.live.controller.Controller` and the
:class:`~ebb.live.fleet_controller.FleetController`. Guarantees: cycles start on a fixed grid of the
monotonic clock (``t0 + k × interval_s``; a slow cycle delays the next one, never shifts the grid);
between two cycles ``tick`` runs every ``react_s`` (0 = never) and never within ``react_s / 2`` of
the next cycle; ``stop`` ends the loop within one wait.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TypeVar

__all__ = ["paced_loop"]

T = TypeVar("T")


def paced_loop(stop: threading.Event, *, cycle: Callable[[], T], interval_s: float, react_s: float,
               tick: Callable[[], None], max_cycles: int | None = None,
               on_cycle: Callable[[T], None] | None = None) -> None:
    """Run ``cycle`` every ``interval_s`` (and ``tick`` every ``react_s`` between) until ``stop``."""
    k = 0
    next_t = time.monotonic()
    while not stop.is_set() and (max_cycles is None or k < max_cycles):
        out = cycle()
        k += 1
        if on_cycle is not None:
            on_cycle(out)
        next_t += interval_s
        while react_s > 0 and not stop.is_set() and next_t - time.monotonic() > react_s:
            stop.wait(react_s)
            if next_t - time.monotonic() <= react_s / 2:
                break
            tick()
        stop.wait(max(0.0, next_t - time.monotonic()))
