"""The rollbacks a live controller has yet to carry out, and the root a failed gate rolls back.

A controller's rollback channel (:mod:`ebb.live.rollback_channel`) keeps one :class:`RollbackQueue`.
Its requests (:class:`~ebb.live.compensation.CompensationRequest`) come from three places, and each
is carried out before the policy decides again:

* **a failed gate** — :meth:`RollbackQueue.for_gate`: the root is the gated step, the last acted
  ``canary`` or ``watch`` scale-down the controller noted (:meth:`RollbackQueue.gated`); after a
  restart, the run's last acted scale-down among its last
  :data:`~ebb.live.compensation.HISTORY_CYCLES` ledger cycles;
* **a restart** — :meth:`RollbackQueue.resume`: every request cycle of the run left without its
  done record (a controller killed mid-compensation), except one whose root waits in the review
  queue since that attempt: its item is pending and was enqueued after the request (the attempt
  ended there; its done record was lost) or retried past it (the retry is the operator's next
  attempt) — a request sent to review comes back only through ``ebb review retry``;
* **an operator** — every ``poll_s`` (5 s) :meth:`RollbackQueue.next` reads the review queue for
  pending items with ``retries`` = k ≥ 1 whose id is one of this run's decision ids
  (``<run_id>-<n>``, checked before any ledger read), and no ``<root>-rollback-r<k>`` record yet
  (an ``ebb review retry`` not attempted): one read of the queue per look, and at most one check of
  each (item, k) in the ledger — a retry that failed again stays pending with the same k and is
  not looked at again until the next retry. A malformed ledger row behind an item is logged and
  the item skipped.

A request leaves the queue when its rollback ended (:meth:`RollbackQueue.done`): compensated,
nothing to undo, or enqueued for review. One the ledger refused stays for the next cycle. A
follower forgets them all (:meth:`RollbackQueue.clear`): recorded ones are its successor's to
resume; unrecorded ones lapse.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable

from ebb.errors import EbbError, TransientError
from ebb.gates.rollback import scale_events
from ebb.ledger.base import Ledger
from ebb.ledger.review import CompensationLog, ReviewItem
from ebb.live.compensation import HISTORY_CYCLES, ROLLBACK_SUFFIX, CompensationRequest, request_of
from ebb.model.decisions import CycleRecord
from ebb.model.ids import CycleId, DecisionId, RunId

__all__ = ["RollbackQueue"]

log = logging.getLogger("ebb.live.controller")


class RollbackQueue:
    """Rollback requests of one run, in the order they are carried out (module docstring)."""

    def __init__(self, ledger: Ledger, run_id: str, review: Callable[[], CompensationLog], *,
                 clock: Callable[[], float], poll_s: float) -> None:
        self.ledger = ledger
        self.run_id = run_id
        self._review = review
        self._clock = clock
        self.poll_s = poll_s
        self._requests: dict[CycleId, CompensationRequest] = {}
        self._gated: DecisionId | None = None
        self._poll_due_s = -math.inf
        self._looked: set[tuple[str, int]] = set()
        """(root, retries) of the retried items checked in the ledger or attempted: not checked again."""

    def gated(self, decision_id: DecisionId) -> None:
        """Note an acted canary or watched scale-down: the root of its gate's rollback."""
        self._gated = decision_id

    @property
    def gated_root(self) -> DecisionId | None:
        """The last gated step noted (None once a rollback took it, or before any)."""
        return self._gated

    def for_gate(self, reason: str) -> CompensationRequest | None:
        """A failed gate's request, queued first in line (None: the run has no acted scale-down)."""
        root = self._gated
        if root is None:  # restarted since the step: the run's last acted scale-down
            events = scale_events(self.ledger.cycles(RunId(self.run_id), limit=HISTORY_CYCLES))
            root = DecisionId(events[-1].event_id) if events else None
        if root is None:
            return None
        self._gated = None
        req = CompensationRequest(root, 0, reason, self._clock())
        self._requests = {req.cycle_id: req, **self._requests}
        return req

    def resume(self, cycles: Iterable[CycleRecord]) -> None:
        """Queue every request cycle among the run's ``cycles`` left without its done record, unless
        its root waits in the review queue since that attempt (module docstring)."""
        cycles = list(cycles)
        done = {c.cycle_id for c in cycles if c.cycle_id.endswith("-done")}
        for c in cycles:
            req = request_of(c) if ROLLBACK_SUFFIX in c.cycle_id else None
            if req is None or f"{c.cycle_id}-done" in done or req.cycle_id in self._requests:
                continue
            if self._under_review(req):
                log.warning("rollback of %s (attempt %d) was left without its done record but was sent to review: "
                            "not resumed (`ebb review retry %s` tries it again)", req.root, req.attempt, req.root)
                continue
            log.warning("rollback of %s (attempt %d) was left unfinished: resuming it", req.root, req.attempt)
            self._requests[req.cycle_id] = req

    def next(self, t_s: float) -> CompensationRequest | None:
        """The request to carry out now; with none queued and a look due (policy time ``t_s``), the
        review queue's retried items of this run first join the queue."""
        if not self._requests and t_s >= self._poll_due_s:
            self._poll_due_s = t_s + self.poll_s
            for req in self._retried():
                self._requests[req.cycle_id] = req
        return next(iter(self._requests.values()), None)

    def done(self, req: CompensationRequest) -> None:
        """``req`` ended (or must not be tried again): out of the queue (a retry is not looked at again)."""
        self._requests.pop(req.cycle_id, None)
        if req.attempt:
            self._looked.add((req.root, req.attempt))

    def clear(self) -> None:
        self._requests.clear()

    def _under_review(self, req: CompensationRequest) -> bool:
        """Whether ``req``'s root waits in the review queue since this attempt: its item is pending and
        was enqueued after the request, or retried past it. A queue that cannot be read says no (the
        request is resumed, as before the queue existed)."""
        try:
            item = self._review().show(req.root)
        except EbbError as exc:
            log.warning("review item %s not read (%s): its unfinished rollback is resumed", req.root, exc)
            return False
        return (item is not None and item.status == "pending"
                and (item.retries > req.attempt or item.ts >= req.requested_unix_s))

    def _ours(self, item: ReviewItem) -> bool:
        """Whether the item's id is one of this run's decision ids (``<run_id>-<n>``): no ledger read."""
        prefix = f"{self.run_id}-"
        n = item.event_id[len(prefix):]
        return item.event_id.startswith(prefix) and n.isascii() and n.isdigit()

    def _retried(self) -> list[CompensationRequest]:
        """Review items of this run an operator retried (``ebb review retry``) and not yet attempted."""
        try:
            items = self._review().list("pending")
        except EbbError as exc:
            log.warning("review queue not read (%s); retried items wait for the next look", exc)
            return []
        out = []
        for item in items:
            key = (item.event_id, item.retries)
            if item.retries < 1 or key in self._looked or not self._ours(item):
                continue
            req = CompensationRequest(DecisionId(item.event_id), item.retries,
                                      f"operator retry {item.retries}: {item.reason}"[:500], self._clock())
            try:
                # a retry with its record was attempted (a crash mid-way is resumed from the ledger)
                root = None if self.ledger.get_cycle(req.cycle_id) is not None else self.ledger.get_decision(req.root)
            except EbbError as exc:
                log.warning("review item %s (retry %d) not checked in the ledger: %s", item.event_id, item.retries,
                            exc)
                if not isinstance(exc, TransientError):
                    self._looked.add(key)  # a malformed row stays malformed: not read again
                continue
            if root is None or root.run_id != self.run_id:
                self._looked.add(key)  # attempted already, or not this run's: nothing to do until the next retry
                continue
            log.info("review item %s retried by an operator (retry %d): compensating", item.event_id, item.retries)
            out.append(req)  # looked at once done (a follower forgets it unattempted: checked again when leading)
        return out
