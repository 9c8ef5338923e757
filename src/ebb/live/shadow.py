"""The shadow recorder: each recommend-mode cycle folded into one ledger row a minute (issue #34 item 3).

In ``recommend`` mode the controller writes only its noteworthy decisions; what ``ebb shadow report``
needs — the replicas the real fleet ran and those Ebb's own fleet held (:mod:`ebb.live.shadow_fleet`),
second by second, and the TTFT the fleet served — is not in them. :class:`ShadowRecorder` is a
controller watcher (``Controller(..., watchers=[...])``) that keeps it:

* **Per second** (:class:`MinuteFold`): the real fleet's ``spec.replicas`` at the cycle's read
  (:attr:`ShadowFleet.as_run`), Ebb's fleet after the cycle's decision (``to_replicas`` of a leading
  cycle: a hold, veto, scale-up or scale-down, the fast path's included) and the TTFT p99 of the
  completions the cycle read (:attr:`~ebb.live.settings.CycleOutcome.ttft`). The second an outcome is
  stamped is the wall clock when the watcher runs (milliseconds after the cycle). A follower's or an
  error's second holds no Ebb value (unknown: no decision was made), an error's no real one either.
  Seconds between two outcomes at most :data:`MAX_FILL_S` (5 s) apart take the earlier one's values
  (a cycle may land twice in one wall second and skip the next); a longer gap stays unknown. When
  several outcomes fall in one second, the last one's replicas count, every one's completions.
* **Per minute:** one :class:`~ebb.model.shadow.ShadowMinute` (60 slots, about 2 kB) written as one
  ledger cycle when the first outcome of the next minute arrives, and by :meth:`ShadowRecorder.close`
  for the minute under way. So nothing depends on memory: a killed controller loses at most the
  minute under way (and minutes waiting for a write, below). A minute with no Ebb value (a follower's)
  is not written.
* **Fenced like the controller's writes** (:func:`~ebb.live.cycle_ledger.leader_fence`, the same
  elector): a follower's or deposed leader's row is refused and dropped, never written under another
  leader's token. A row the ledger cannot take now (:class:`~ebb.errors.TransientError`) waits and is
  retried at the next minute's write: at most ``max_pending`` (60: an hour) wait, the oldest dropped
  past that. A row conflicting with a stored one is dropped. Every drop is counted
  (:attr:`ShadowRecorder.dropped`) and logged at most once per 10 s.
* **Never in the cycle's way.** A watcher's error is logged by the controller and ends nothing; the
  recorder itself raises nothing for the ledger's trouble. One write a minute, on the controller's
  thread (plus the retries of waiting rows).
"""

from __future__ import annotations

import logging
import math
import time
from collections import deque
from collections.abc import Callable
from typing import Final

from ebb.actuate.base import Actuator
from ebb.errors import EbbError, LedgerConflict, NotLeader, TransientError
from ebb.gates.guard import CanaryGuard
from ebb.ledger.base import Ledger, fence_token
from ebb.live.cycle_ledger import leader_fence
from ebb.live.policy_spec import LivePolicy
from ebb.live.settings import ControllerSettings, CycleOutcome, Elector
from ebb.live.shadow_fleet import ShadowFleet
from ebb.live.ttft_seen import NO_TTFT, TtftSeen
from ebb.log_limit import LogLimiter, held_note
from ebb.model.ids import RunId
from ebb.model.shadow import SLOTS, ShadowMinute, shadow_cycle

__all__ = ["LEADING", "MAX_FILL_S", "MAX_PENDING", "MinuteFold", "ShadowRecorder", "shadowed"]

log = logging.getLogger(__name__)

MAX_FILL_S: Final = 5
"""Seconds between two outcomes filled with the earlier one's replicas; a longer gap stays unknown."""
MAX_PENDING: Final = 60
"""Minutes kept for a retry while the ledger refuses them (an hour)."""
LEADING: Final = ("hold", "scale_up", "scale_down", "veto")
"""Actions of a cycle that decided: its ``to_replicas`` is Ebb's fleet after it."""


class MinuteFold:
    """Folds outcomes into the per-second slots of one minute at a time (module docstring). Pure."""

    def __init__(self, *, target: str, policy: str, slo_ttft_ms: float) -> None:
        self.target, self.policy, self.slo_ttft_ms = target, policy, slo_ttft_ms
        self._start: int | None = None
        self._as_run: list[int | None] = [None] * SLOTS
        self._ebb: list[int | None] = [None] * SLOTS
        self._ttft: list[TtftSeen] = [NO_TTFT] * SLOTS
        self._last: tuple[int, int | None, int | None] | None = None
        """(Unix second, real replicas, Ebb's replicas) of the last outcome folded."""

    def add(self, now_s: float, as_run: int | None, ebb: int | None, ttft: TtftSeen) -> ShadowMinute | None:
        """Fold one outcome at Unix time ``now_s``; the minute it closed (it is in a later or, after a
        backward clock step, an earlier minute than the one under way), else None."""
        sec = math.floor(now_s)
        start = sec - sec % SLOTS
        closed = None
        if self._start is not None and start != self._start:
            self._fill_to(min(sec, self._start + SLOTS))
            closed = self.take()
        if self._start is None:
            self._start = start
        self._fill_to(sec)
        i = sec - start
        self._as_run[i], self._ebb[i] = as_run, ebb
        self._ttft[i] = self._ttft[i].merged(ttft)
        self._last = (sec, as_run, ebb)
        return closed

    def _fill_to(self, sec: int) -> None:
        """The seconds after the last outcome and before ``sec`` take its replicas, if it is close."""
        if self._last is None or self._start is None or sec - self._last[0] > MAX_FILL_S:
            return
        last, as_run, ebb = self._last
        for s in range(max(last + 1, self._start), min(sec, self._start + SLOTS)):
            i = s - self._start
            if self._as_run[i] is None and self._ebb[i] is None:
                self._as_run[i], self._ebb[i] = as_run, ebb

    def take(self) -> ShadowMinute | None:
        """The minute under way as a record (None when no second of it holds an Ebb value), and a fresh one."""
        if self._start is None:
            return None
        minute = None
        if any(v is not None for v in self._ebb):
            whole = NO_TTFT
            for t in self._ttft:
                whole = whole.merged(t)
            minute = ShadowMinute(start_s=self._start, target=self.target, as_run=tuple(self._as_run),
                                  ebb=tuple(self._ebb), ttft_p99_ms=tuple(t.quantile_ms(0.99) for t in self._ttft),
                                  minute_ttft_p99_ms=whole.quantile_ms(0.99), completions=whole.weight,
                                  slo_ttft_ms=self.slo_ttft_ms, policy=self.policy)
        self._start = None
        self._as_run, self._ebb, self._ttft = [None] * SLOTS, [None] * SLOTS, [NO_TTFT] * SLOTS
        return minute


class ShadowRecorder:
    """A controller watcher writing one shadow minute per ledger row (module docstring)."""

    def __init__(self, ledger: Ledger, run_id: str, fleet: ShadowFleet, *, target: str, policy: str,
                 slo_ttft_ms: float, elector: Elector | None = None, clock: Callable[[], float] = time.time,
                 max_pending: int = MAX_PENDING) -> None:
        self.ledger, self.run_id, self.fleet, self.elector = ledger, run_id, fleet, elector
        self._clock = clock
        self._fold = MinuteFold(target=target, policy=policy, slo_ttft_ms=slo_ttft_ms)
        self._pending: deque[ShadowMinute] = deque()
        self.max_pending = max_pending
        self.written = 0
        """Minutes written (or found already stored)."""
        self.dropped = 0
        """Minutes not written: refused for good (not the leader, a conflict) or past ``max_pending``."""
        self._quiet = LogLimiter()

    def __call__(self, out: CycleOutcome) -> None:
        ebb = out.to_replicas if out.action in LEADING else None
        as_run = None if out.action == "error" else self.fleet.as_run
        closed = self._fold.add(self._clock(), as_run, ebb, out.ttft)
        if closed is not None:
            self._pending.append(closed)
            self._write_pending()

    def close(self) -> None:
        """Write the minute under way and the waiting ones (once each; what the ledger refuses is dropped)."""
        minute = self._fold.take()
        if minute is not None:
            self._pending.append(minute)
        self._write_pending()
        if self._pending:
            self.dropped += len(self._pending)
            log.warning("shadow: %d minute(s) not written: the ledger did not take them", len(self._pending))
            self._pending.clear()

    def _write_pending(self) -> None:
        """Write the waiting minutes oldest first; those the ledger cannot take now wait, the oldest past
        ``max_pending`` dropped."""
        while self._pending:
            if not self._write(self._pending[0]):
                break  # the ledger cannot take rows now: the rest wait with it
            self._pending.popleft()
        while len(self._pending) > self.max_pending:
            self._pending.popleft()
            self.dropped += 1
            self._warn("full", f"shadow: a minute dropped: {self.max_pending} minutes already wait for the ledger")

    def _write(self, minute: ShadowMinute) -> bool:
        """Append ``minute``; False when the ledger refused it for now (retry later), True otherwise."""
        try:
            fence = leader_fence(self.elector, self.run_id)
            cycle = shadow_cycle(minute, RunId(self.run_id), fencing_token=fence_token(fence))
            self.ledger.append_cycle(cycle, fence)
            self.written += 1
            return True
        except NotLeader as exc:  # a follower or a deposed leader: the leader writes its own minutes
            why: Exception = exc
        except LedgerConflict as exc:
            why = exc
        except TransientError as exc:
            self._warn("retry", f"shadow: minute {minute.start_s} waits for the ledger: {exc}")
            return False
        except EbbError as exc:
            why = exc
        self.dropped += 1
        self._warn("drop", f"shadow: minute {minute.start_s} not written: {why}")
        return True

    def _warn(self, key: str, message: str) -> None:
        held = self._quiet.allow(key)
        if held is not None:
            log.warning("%s%s", message, held_note(held))



def shadowed(real: Actuator, ledger: Ledger, settings: ControllerSettings, policy: LivePolicy, *,
             elector: Elector | None = None) -> tuple[ShadowFleet, ShadowRecorder]:
    """A recommend-mode controller's actuator and recorder: Ebb's own fleet beside ``real`` (starting
    at the policy's cold start) and the recorder of both, under the controller's run, target and
    elector. Pass the fleet as the controller's actuator, ``fleet.follow`` and the recorder as its
    watchers, and close the recorder before the ledger."""
    inner = policy.inner if isinstance(policy, CanaryGuard) else policy
    fleet = ShadowFleet(real, cold_start_s=inner.cold_start_s)
    return fleet, ShadowRecorder(ledger, settings.run_id, fleet, target=settings.target, policy=policy.spec,
                                 slo_ttft_ms=inner.slo_ttft_ms, elector=elector)
