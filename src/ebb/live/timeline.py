"""The controller's two clocks: a monotonic timeline for the policy, the wall clock for stamps.

Sources stamp samples in Unix time (agents, Prometheus), the ledger records Unix nanoseconds, and
the policy's windows (10-minute peak memory, cooldowns, warm-up) must never jump. :class:`Timeline`
gives each cycle both readings and maps a Unix stamp onto the monotonic timeline by its *age*::

    policy time of a sample = policy now − (wall now − sample's Unix stamp)

so a wall-clock step moves neither the policy's "now" nor the age of a sample stamped after the
step. Guarantees:

* ``tick()`` is non-decreasing in ``t_s`` whatever the wall clock does.
* A wall-clock step — the wall moving more than ``tolerance_s`` (default 2 s) away from the
  monotonic clock between two ticks — is reported once (``Tick.step_s``, signed seconds) so the
  controller can reset its source cursor and its freshness reference (samples stamped before a
  backward step would otherwise look like the future, after a forward step like the past).
* With an injected wall clock and no monotonic one (tests, replays on a virtual clock), the
  monotonic timeline is synthesised from the wall clock: it advances by the wall's delta when that
  is in ``[0, max_gap_s]`` (default 30 s), otherwise by ``interval_s`` — the delta is then a step.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["Tick", "Timeline"]


@dataclass(frozen=True)
class Tick:
    """One reading of both clocks."""

    wall_s: float
    """Unix seconds (stamps, ledger)."""
    t_s: float
    """Seconds on the monotonic timeline since the controller started (the policy's time)."""
    step_s: float | None = None
    """The wall clock's step since the previous tick (s, signed); None when it ran true."""

    def policy_time(self, unix_s: float) -> float:
        """A Unix stamp on the policy's timeline: now minus the stamp's age."""
        return self.t_s - (self.wall_s - unix_s)


class Timeline:
    """Reads the wall and monotonic clocks together; see the module docstring."""

    def __init__(self, wall: Callable[[], float] = time.time, monotonic: Callable[[], float] | None = None, *,
                 interval_s: float = 1.0, tolerance_s: float = 2.0, max_gap_s: float = 30.0) -> None:
        if not (interval_s > 0 and tolerance_s > 0 and max_gap_s > 0):
            raise ValueError(f"interval_s, tolerance_s and max_gap_s must be > 0, got "
                             f"{interval_s!r}, {tolerance_s!r}, {max_gap_s!r}")
        if monotonic is None and wall is time.time:
            monotonic = time.monotonic
        self._wall = wall
        self._mono = monotonic
        self._interval_s = interval_s
        self._tolerance_s = tolerance_s
        self._max_gap_s = max_gap_s
        w0 = wall()
        self._last_wall = w0
        self._mono0 = monotonic() if monotonic is not None else 0.0
        self._last_mono = self._mono0
        self._synth = 0.0
        self.steps = 0
        """Wall-clock steps seen so far."""

    def tick(self) -> Tick:
        """Both clocks now, and the wall's step since the last tick if there was one."""
        wall = self._wall()
        d_wall = wall - self._last_wall
        step: float | None = None
        if self._mono is not None:
            mono = self._mono()
            d_mono = mono - self._last_mono
            if not math.isfinite(d_wall) or abs(d_wall - d_mono) > self._tolerance_s:
                step = d_wall - d_mono
            self._last_mono = mono
            t_s = mono - self._mono0
        else:
            if math.isfinite(d_wall) and 0.0 <= d_wall <= self._max_gap_s:
                self._synth += d_wall
            else:
                step = d_wall - self._interval_s
                self._synth += self._interval_s
            t_s = self._synth
        self._last_wall = wall
        if step is not None:
            self.steps += 1
        return Tick(wall_s=wall, t_s=t_s, step_s=step)
