"""The drains an actuator tells, written to the decision ledger: the live side of issue #33's drain records.

An actuator that tells its drains (:class:`~ebb.actuate.base.ReportsDrains`) calls its observer on its
own threads (the Kubernetes tier's tick, the local supervisor). :class:`DrainLedger` is that
observer: it only queues, and one writer thread appends each record as its own ledger cycle
(:func:`~ebb.model.drains.drain_cycle`), so the actuator never waits on the ledger and the ledger is
never imported by an adapter. The live controller attaches one in ``act`` mode (:mod:`ebb.live.controller`).

Guarantees:

* **In order, each once.** Records are appended in the order they were told, one ``append_cycle``
  each (atomic: a record is in the ledger whole or not at all). Re-telling a record already stored
  (a drain resumed after a restart) changes nothing (same id; a differing start under the same id is
  left as first written, logged at DEBUG).
* **Fenced.** Each write carries the leader's fence (``fence()``, the controller's): a deposed
  controller's records are refused (:class:`~ebb.errors.NotLeader`) and dropped, never written
  under another leader's token.
* **Best effort, bounded, never blocking the actuator.** Telling never blocks and never raises. At
  most ``max_queued`` (10,000) records wait; past it a record is dropped and counted (:attr:`dropped`).
  A record the ledger refuses (unreachable store, lost leadership) is dropped after one retry 0.5 s
  later, counted, and logged at most once per 10 s. Records still queued when the process is killed
  are lost (the ledger's own crash-safety covers every record written); :meth:`close` writes what
  is queued first, for at most ``timeout_s`` (5 s).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any, Final

from ebb.errors import EbbError, LedgerConflict, NotLeader, TransientError
from ebb.ledger.base import Ledger, fence_token
from ebb.log_limit import LogLimiter, held_note
from ebb.model.drains import DrainEvent, drain_cycle
from ebb.model.ids import RunId

__all__ = ["MAX_QUEUED", "DrainLedger"]

log = logging.getLogger(__name__)

MAX_QUEUED: Final = 10_000
_RETRY_S: Final = 0.5


class DrainLedger:
    """An actuator's drain observer that writes to ``ledger`` under ``run_id`` (module docstring)."""

    def __init__(self, ledger: Ledger, run_id: str, *, fence: Callable[[], Any] = lambda: None,
                 max_queued: int = MAX_QUEUED) -> None:
        self.ledger, self.run_id, self._fence, self.max_queued = ledger, RunId(run_id), fence, max_queued
        self.written = 0
        """Records appended (or found already stored)."""
        self.dropped = 0
        """Records not written: the queue full, or the ledger refused them."""
        self._queue: deque[DrainEvent] = deque()
        self._cond = threading.Condition()
        self._busy = False
        self._closed = False
        self._thread: threading.Thread | None = None
        self._quiet = LogLimiter()

    def __call__(self, event: DrainEvent) -> None:
        """Queue ``event`` for the writer thread (started on the first record); never blocks or raises."""
        with self._cond:
            if self._closed or len(self._queue) >= self.max_queued:
                self.dropped += 1
                self._warn("queue", f"drain record of {event.worker} dropped: "
                           f"{'closed' if self._closed else f'{self.max_queued} records already wait'}")
                return
            self._queue.append(event)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=f"ebb-drain-ledger-{self.run_id}", daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def flush(self, timeout_s: float = 5.0) -> bool:
        """Wait until every record told so far is written (or dropped); False after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while self._queue or self._busy:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
        return True

    def close(self, timeout_s: float = 5.0) -> None:
        """Write what is queued (at most ``timeout_s``), then stop the writer; later records are dropped."""
        self.flush(timeout_s)
        with self._cond:
            self._closed = True
            left = len(self._queue)
            self._queue.clear()
            self._cond.notify_all()
        if left:
            self.dropped += left
            log.warning("%d drain record(s) not written: the ledger did not take them within %g s", left, timeout_s)
        if self._thread is not None:
            self._thread.join(timeout=1.0)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closed:
                    self._cond.wait()
                if self._closed:
                    return
                event = self._queue.popleft()
                self._busy = True
            try:
                self._write(event)
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

    def _write(self, event: DrainEvent) -> None:
        for attempt in (0, 1):
            try:
                fence = self._fence()
                self.ledger.append_cycle(drain_cycle(event, self.run_id, fencing_token=fence_token(fence)), fence)
                self.written += 1
                return
            except LedgerConflict as exc:  # a resumed drain's start, told again: the first one stays
                self.written += 1
                log.debug("drain record of %s already stored: %s", event.worker, exc)
                return
            except NotLeader as exc:  # deposed: never retried
                why: Exception = exc
            except TransientError as exc:
                if attempt == 0:
                    time.sleep(_RETRY_S)
                    continue
                why = exc
            except EbbError as exc:
                why = exc
            except Exception as exc:  # a bug must not stop the writer: logged with its traceback
                log.exception("drain record of %s not written", event.worker)
                why = exc
            self.dropped += 1
            self._warn("write", f"drain record ({event.kind}) of {event.worker} not written: {why}")
            return

    def _warn(self, key: str, message: str) -> None:
        held = self._quiet.allow(key)
        if held is not None:
            log.warning("%s%s", message, held_note(held))
