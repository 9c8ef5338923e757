"""A live controller's fast path between cycles: the policy's wish for capacity from the newest samples.

A policy with a fast path (:class:`~ebb.decide.base.Reactive`, found by
:func:`~ebb.decide.base.react_of`) is asked every ``react_interval_s`` (100 ms; 0 turns it off)
between cycles. :meth:`FastPath.wish` reads the source's new samples from the cycle's cursor
(quietly: a source failing is logged by the next cycle, in its trace) and shows the policy them with
the fleet counts the last read or act left (:attr:`FastPath.counts`); :func:`onto_fleet` puts a wish
onto the fleet the firing tick read afresh. The controller carries a wish out the cycle's way (a
cycle number, a trace, write-ahead ledger, actuator, outcome: :meth:`ebb.live.controller.Controller.react`).

Guarantees:

* **Asks only on fresh data.** No wish while the source is unreachable, stale or sent no new
  sample, nor before a cycle left fleet counts: the next cycle decides, failing static as before.
* **Scale-ups only.** The policy's wish is a scale-up (the :class:`~ebb.decide.base.Reactive`
  contract); made for a fleet size that has changed since, :func:`onto_fleet` keeps its target but
  never below the fleet read now (a fleet that already grew past it makes it a hold).
* **Quiet when quiet.** A tick with no wish reads nothing but the source: no fleet read, no trace,
  no ledger row, and source trouble is not logged (the next cycle logs it, in its trace).
"""

from __future__ import annotations

from dataclasses import replace

from ebb.actuate.base import FleetState
from ebb.decide.base import Policy, Reactive, react_of
from ebb.live.sensed import Sensor, covered, rebase
from ebb.live.timeline import Tick
from ebb.model.decision import Decision
from ebb.model.live import LiveSignals
from ebb.model.observation import Observation
from ebb.model.spans import NO_SPANS
from ebb.sources.live import SignalSource

__all__ = ["FastPath", "onto_fleet"]


class FastPath:
    """The fast path of one controller (module docstring); ``reactive`` None: the policy has none or it is off."""

    def __init__(self, policy: Policy, *, react_interval_s: float) -> None:
        self.reactive: Reactive | None = react_of(policy) if react_interval_s > 0 else None
        self.counts: tuple[int, int] | None = None
        """(spec, ready) replicas as the last read or act left them: what a quiet tick compares the
        policy's wish with (a tick that fires reads the fleet afresh)."""
        self.asleep = 0
        """Sleepers (an asleep tier) as the last read left them, less those an act since may have woken."""
        self.source_ready = 0
        """The ready replicas the source covers as the last read left them (a shadow fleet's real ones:
        :attr:`~ebb.actuate.base.FleetState.source_ready`)."""

    @property
    def armed(self) -> bool:
        """Whether a tick may ask the policy: it has a fast path and a read left fleet counts."""
        return self.reactive is not None and self.counts is not None

    def saw(self, state: FleetState) -> None:
        """A read of the fleet: its counts."""
        self.counts = (state.spec_replicas, state.ready_replicas)
        self.source_ready = state.source_ready
        self.asleep = len(state.asleep)

    def applied(self, replicas_after: int) -> None:
        """An act left the fleet at ``replicas_after`` (ready unchanged until the next read)."""
        if self.counts is not None:
            self.asleep = max(0, self.asleep - max(0, replicas_after - self.counts[0]))  # woken first
            self.counts = (replicas_after, self.counts[1])

    def wish(self, sensor: Sensor, source: SignalSource, tick: Tick) -> tuple[LiveSignals, Decision] | None:
        """The source's new samples and the policy's wish for capacity on them; None when it asks
        for nothing or cannot be asked (module docstring)."""
        if self.reactive is None:
            return None
        sig, note = sensor.read(source, NO_SPANS, tick, quiet=True)
        if note or not len(sig.fine.t_s) or self.counts is None:
            return None
        spec, ready = self.counts
        # as the cycle sees it: an incomplete fleet's demand extrapolated
        sig, _ = covered(sig, self.source_ready)
        obs = Observation(t_s=tick.t_s, spec_replicas=spec, ready_replicas=ready, pods=(), total_qps=sig.total_qps,
                          total_inflight=None, queued=sig.queued, fine=rebase(sig.fine, tick),
                          asleep_replicas=self.asleep)
        wish = self.reactive.react(obs)
        return None if wish is None else (sig, wish)


def onto_fleet(wish: Decision, state: FleetState) -> Decision:
    """``wish`` from the fleet read now, never below it (a hold when the fleet already reached it)."""
    if wish.from_replicas == state.spec_replicas:
        return wish
    to = max(wish.to_replicas, state.spec_replicas)
    return replace(wish, from_replicas=state.spec_replicas, to_replicas=to,
                   action="scale_up" if to > state.spec_replicas else "hold")
