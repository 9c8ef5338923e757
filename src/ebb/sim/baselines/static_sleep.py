"""``static-sleep``: the static fleet with an idle timer — what a team builds by hand on a sleep mode.

The fleet is ``replicas`` (default: the oracle's peak, as ``static``). A replica with nothing to do
for ``idle_s`` (default 300 s) is put to sleep, and sleeping replicas are woken as soon as work
waits: the TTL ladder of a vLLM ``--enable-sleep-mode`` deployment driven by a cron-like idle check
and a router that wakes a replica on a queued request.

Under the simulator's least-loaded router every awake replica gets work whenever the requests in
flight reach the awake count, so a replica is idle exactly when fewer requests are in flight (and
queued) than replicas are awake. The policy therefore keeps awake, each second,
``min(replicas, max(1, ceil(the most requests in flight or queued over the last idle_s)))``: a
replica sleeps after ``idle_s`` without a request for it, and a queue wakes replicas at once. The
engines sleep and wake them through the run's asleep tier (``--tier``; without one, this is a
scale-down that removes them and a cold start that brings them back, which the report says).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import ClassVar

from ebb.model.decision import Decision
from ebb.model.spans import NO_SPANS, Spans
from ebb.sim.policy import Observation, Pipeline

__all__ = ["StaticSleepPolicy"]


@dataclass
class StaticSleepPolicy:
    """A fixed fleet of ``replicas`` whose idle replicas sleep after ``idle_s`` (module docstring)."""

    replicas: int
    idle_s: float = 300.0
    spec: str = "static-sleep"
    interval_s: float = 1.0
    pipeline: Pipeline = field(default_factory=lambda: Pipeline(1, 1, per_pod=False))
    sleeps: ClassVar[bool] = True
    """It puts replicas to sleep when the cluster has an asleep tier (:mod:`ebb.sim.sleepers`)."""
    _busy: deque[tuple[float, float]] = field(default_factory=deque, init=False, repr=False)
    _woke_s: float = field(default=0.0, init=False, repr=False)
    """When replicas last woke (or the run began): none has been idle for idle_s before this + idle_s."""

    def __post_init__(self) -> None:
        if self.replicas < 1 or not (0 < self.idle_s < math.inf):
            raise ValueError(f"static-sleep needs replicas >= 1 and 0 < idle_s < inf, got {self.replicas}, "
                             f"{self.idle_s!r}")

    def decide(self, obs: Observation, *, spans: Spans = NO_SPANS) -> Decision:
        t, frm = obs.t_s, obs.spec_replicas
        if frm == 0:  # the engines' initial call: the whole fleet, awake
            self._woke_s = t
            return Decision.change(t, frm, self.replicas, policy=self.spec, reasons=(f"{self.spec}: fleet of "
                                                                                      f"{self.replicas}",))
        work = (obs.total_inflight or 0.0) + (obs.queued or 0.0)
        busy = self._busy
        while busy and busy[0][0] <= t - self.idle_s:
            busy.popleft()
        while busy and busy[-1][1] <= work:
            busy.pop()  # a monotone deque: the window's maximum is busy[0]
        busy.append((t, work))
        want = min(self.replicas, max(1, math.ceil(busy[0][1] - 1e-9)))
        if want > frm:
            self._woke_s = t
        elif t < self._woke_s + self.idle_s:
            want = frm  # every awake replica had work (or woke) less than idle_s ago
        if want == frm:
            return Decision.change(t, frm, frm, policy=self.spec)
        why = (f"{self.spec}: {want} replicas had work in the last {self.idle_s:g} s" if want < frm else
               f"{self.spec}: {work:.0f} requests in flight or queued wake replicas")
        return Decision.change(t, frm, want, policy=self.spec, reasons=(why,))

    def asleep_wanted(self, running: int) -> int | None:
        """Its whole fleet stays: every replica not awake sleeps until its TTL."""
        return max(0, self.replicas - running)

    def observe(self, obs: Observation) -> None:
        """Every tick decides; nothing else to ingest."""

    def gate_queries(self) -> tuple[str, ...]:
        return ()
