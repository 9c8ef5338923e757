"""In-memory :class:`~ebb.ledger.base.Ledger` for tests and simulations.

Same guarantees as every backend (atomic, idempotent, ordered), minus durability: the records live in
dicts behind one lock and vanish with the object.

Fencing: a fenced append is refused (:class:`~ebb.errors.NotLeader`) when its token is lower than the
highest ``fencing_token`` stored, or differs from :attr:`MemoryLedger.current_token` while that is set.
There is no etcd here, so ``current_token`` stands in for the election: tests set it to the token of
the leader they elected and every other fence becomes stale at once.
"""

from __future__ import annotations

import threading

from ebb.ledger.base import (Fence, MalformedRow, check_fence_token, check_same_cycle, cycle_order, decision_order,
                             decision_taken, keep_last, not_leader)
from ebb.model.decisions import CycleRecord, DecisionRecord
from ebb.model.ids import CycleId, DecisionId, RunId

__all__ = ["MemoryLedger"]


class MemoryLedger:
    """Dict-backed ledger; thread-safe; nothing survives the process.

    ``current_token`` (default None: no simulated election) is the token fenced appends must carry.
    """

    def __init__(self, *, current_token: int | None = None) -> None:
        self._lock = threading.Lock()
        self._cycles: dict[str, CycleRecord] = {}
        self._decisions: dict[str, DecisionRecord] = {}
        self._closed = False
        self._max_token = 0
        self.current_token = current_token

    def _check_fence(self, cycle: CycleRecord, fence: Fence | None) -> None:
        if fence is None:
            return
        current = self.current_token
        if current is not None and fence.token != current:
            raise not_leader(fence, cycle.cycle_id, f"the current token is {current}")
        if fence.token < self._max_token:
            raise not_leader(fence, cycle.cycle_id, f"a cycle with token {self._max_token} is already stored")

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("MemoryLedger is closed")

    def append_cycle(self, cycle: CycleRecord, fence: Fence | None = None) -> bool:
        if not isinstance(cycle, CycleRecord):
            raise TypeError(f"append_cycle expects a CycleRecord, got {cycle!r}")
        check_fence_token(cycle, fence)
        with self._lock:
            self._check_open()
            self._check_fence(cycle, fence)
            stored = self._cycles.get(cycle.cycle_id)
            if stored is not None:
                return check_same_cycle(stored, cycle)
            for d in cycle.decisions:
                other = self._decisions.get(d.decision_id)
                if other is not None:
                    raise decision_taken(d.decision_id, other.cycle_id, cycle.cycle_id)
            self._cycles[cycle.cycle_id] = cycle
            for d in cycle.decisions:
                self._decisions[d.decision_id] = d
            self._max_token = max(self._max_token, cycle.fencing_token)
            return True

    def get_decision(self, decision_id: DecisionId) -> DecisionRecord | None:
        with self._lock:
            self._check_open()
            return self._decisions.get(decision_id)

    def get_cycle(self, cycle_id: CycleId) -> CycleRecord | None:
        with self._lock:
            self._check_open()
            return self._cycles.get(cycle_id)

    def cycles(self, run_id: RunId | None = None, limit: int | None = None) -> list[CycleRecord]:
        with self._lock:
            self._check_open()
            out = [c for c in self._cycles.values() if run_id is None or c.run_id == run_id]
        return keep_last(sorted(out, key=cycle_order), limit)

    def decisions(self, run_id: RunId | None = None, target: str | None = None) -> list[DecisionRecord]:
        with self._lock:
            self._check_open()
            out = [d for d in self._decisions.values()
                   if (run_id is None or d.run_id == run_id) and (target is None or d.target == target)]
        return sorted(out, key=decision_order)

    @property
    def skipped(self) -> tuple[MalformedRow, ...]:
        """Always ``()``: this store holds validated records only, so no row can be malformed."""
        return ()

    def close(self) -> None:
        with self._lock:
            self._closed = True
