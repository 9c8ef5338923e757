"""A leading cycle between its two halves: its ids, clock tick and trace span held open, and its proposal.

:meth:`Controller.propose <ebb.live.controller.Controller.propose>` opens a cycle and returns while
it is still open (a fleet's L3 step runs in between); :meth:`Controller.commit
<ebb.live.controller.Controller.commit>` finishes it. :class:`OpenCycle` is what keeps it open across
the two calls without a generator: the entered context manager of the cycle's root span
(:meth:`CycleTracer.cycle <ebb.telemetry.tracing.CycleTracer.cycle>`) on an :class:`~contextlib.ExitStack`,
and the outcome once the cycle ended. :class:`Proposal` is what ``propose`` hands the caller: the
cycle's decision through the controller's locks, what it read, and the open cycle.

Guarantees:

* **One span per cycle, closed once.** :meth:`close` exits the span's context exactly once (later
  calls do nothing); an exception passed to it is recorded on the span, as a ``with`` block would.
* **Ended once.** :meth:`end` stores the cycle's outcome; a second :meth:`end` keeps the first
  (a committed proposal answers with the outcome it had).
* **Context.** The span is the current one from :meth:`open` until :meth:`close` in the
  :mod:`contextvars` context that opened it; a caller that interleaves several open cycles runs each
  one's two halves in a context of its own (:mod:`ebb.live.fleet_controller` does).
"""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass, field

from ebb.live.compensation import CompensationPlan
from ebb.live.sensed import Sensed
from ebb.live.settings import CycleOutcome
from ebb.live.timeline import Tick
from ebb.model.decision import Decision
from ebb.model.ids import CycleId
from ebb.telemetry.tracing import CycleSpan, CycleTracer

__all__ = ["OpenCycle", "Proposal"]


@dataclass(eq=False)
class OpenCycle:
    """One leading cycle from :meth:`open` to :meth:`close` (module docstring)."""

    owner: object
    """The controller that opened it (only it may finish it)."""
    n: int
    """The cycle's number."""
    cycle_id: CycleId
    tick: Tick
    """The cycle's clock reading (wall and policy time)."""
    started_s: float
    """``time.perf_counter()`` when the cycle began (its duration is measured from it)."""
    span: CycleSpan
    """The cycle's root span (``ebb.cycle``), open until :meth:`close`."""
    outcome: CycleOutcome | None = None
    """The cycle's outcome once it ended; None while open."""
    _stack: ExitStack = field(default_factory=ExitStack, repr=False)

    @classmethod
    def open(cls, tracer: CycleTracer, *, owner: object, n: int, cycle_id: CycleId, run_id: str, target: str,
             tick: Tick, started_s: float) -> OpenCycle:
        """Open cycle ``cycle_id``'s root span and hold it."""
        stack = ExitStack()
        span = stack.enter_context(tracer.cycle(cycle_id, run_id, target))
        return cls(owner, n, cycle_id, tick, started_s, span, _stack=stack)

    def close(self, exc: BaseException | None = None) -> None:
        """End the span (recording ``exc`` on it when given); only the first call does anything."""
        stack, self._stack = self._stack, ExitStack()
        if exc is None:
            stack.close()
        else:
            stack.__exit__(type(exc), exc, exc.__traceback__)

    def end(self, outcome: CycleOutcome) -> CycleOutcome:
        """Set the cycle's outcome (the first one stays) and close the span; the outcome kept."""
        if self.outcome is None:
            self.outcome = outcome
        self.close()
        return self.outcome


@dataclass(frozen=True)
class Proposal:
    """A leading cycle's decision after the controller's own locks, before it is recorded or acted on.

    Hand it back to :meth:`Controller.commit <ebb.live.controller.Controller.commit>` of the controller
    that proposed it."""

    decision: Decision
    """The policy's decision, clamped to the replica bounds and stale-data locked (for a rollback:
    the scale-up back to the root event's pre-state)."""
    seen: Sensed
    """What the cycle read: the source's signals (``seen.sig``) and the fleet (``seen.state``)."""
    cycle: OpenCycle
    """The cycle, still open (its trace span), until the commit ends it; its number is ``cycle.n``."""
    blocked: str = ""
    """The controller lock's veto ("" when none blocked the decision)."""
    compensation: CompensationPlan | None = None
    """Set when the cycle proposes a rollback: the request and its plan, made from the ledger by the
    proposing cycle (the rollback channel carries it out on commit)."""
