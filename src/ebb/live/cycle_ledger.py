"""The ledger side of a live controller's cycles: numbering, fenced write-ahead records, outcomes, resume.

:class:`CycleLedger` is what :class:`~ebb.live.controller.Controller` reads and writes its ledger
through. The decision's records are :mod:`ebb.decide.records`' — the same functions
``ebb simulate --ledger`` uses.

Guarantees:

* **Write-ahead, exactly once, never a blind replay.** The controller appends a decision
  (:meth:`CycleLedger.record`, :meth:`CycleLedger.write`) *before* it calls the actuator
  (``mode=act``); the actuator is idempotent by decision id; the outcome is appended as a second
  cycle ``<cycle>-outcome`` (:meth:`CycleLedger.write_outcome`, best effort: unrecorded, a
  successor's resume finds the fleet at ``to`` and records it then). Holds are not written. A
  decision the ledger refused (unreachable store, lost leadership) is counted
  (``ebb_ledger_write_errors_total``), logged and never acted on.
* **Resume after a restart.** :meth:`CycleLedger.resume` (a controller's first leading cycle, and
  again after it followed or hit an unexpected error) finds the run's last acted decision without an outcome;
  :meth:`CycleLedger.settle_pending` re-checks it after that cycle's read of the source and the
  fleet (:mod:`ebb.live.resume`): the fleet already at ``to`` → recorded as done; at ``from`` → a
  decision at most ``resume_max_age_s`` (60 s) old and not from the future is applied with the
  same id, clamped to ``[min_replicas, max_replicas]`` — a scale-up always, a scale-down only on
  fresh, complete data with every recorded victim still in the fleet (its victims first);
  otherwise "not resumed" and the policy re-decides on fresh data; anything else → superseded.
  Whatever the verdict, it is recorded as the decision's outcome. A restart in ``recommend`` mode
  applies nothing. The rollbacks left without their done record are handed to the
  :class:`~ebb.live.rollback_queue.RollbackQueue`. Malformed rows of the run are left in place and
  named in an ERROR; numbering continues past any cycle number their keys still show.
* **Victims by name.** The ledger records victims under the actuator's names
  (:attr:`~ebb.actuate.base.ReplicaState.name`: ``worker-N``, pod names), never as replica ids; a
  resumed decision's victims are mapped back to the ids of the fleet read *now*, so a restarted
  actuator that numbers the same replicas differently still removes exactly those.
* **Fenced.** With an elector, every write carries the leader's fencing token
  (:meth:`CycleLedger.fence`, :func:`leader_fence`: :class:`~ebb.errors.NotLeader` when leadership
  lapsed since ``is_leader()``), so a deposed leader's write fails atomically (etcd backend); a
  change is applied only while the fence it was recorded under is still the leader's
  (:meth:`CycleLedger.still_fenced`: the rollback channel's steps too). An outcome is written under
  its decision's term with that term's latest deadline (:meth:`CycleLedger.renewed`), so a ledger
  that checks a fence's deadline (SQLite) does not refuse it because the actuation took longer than
  the deadline the decision's fence had.
* **Ids.** Decision ids are ``<run_id>-<n>`` and cycle ids ``<run_id>-c<n>``, ``n`` continuing from
  the ledger's last cycle of ``run_id`` (:meth:`CycleLedger.next_cycle`, :func:`last_cycle_number`:
  also past the numbers the keys of malformed rows show), so a successor (after a restart or a
  fail-over) extends the same sequence; the fleet controller numbers its own cycles the same way. A decision caused by the last change the
  controller made records it (``caused_by``; a canary's ``proceed`` the canary step: the event
  graph's edge).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from ebb.actuate.base import ActuationResult, Actuator, FleetState
from ebb.decide.served import served_demand
from ebb.decide.records import caused_by, cycle_record, decision_record, outcome_cycle
from ebb.errors import NotLeader, TransientError
from ebb.gates.rollback import COMPENSATES
from ebb.ledger.base import Ledger, fence_token
from ebb.live.resume import ReadDemand, resume_verdict
from ebb.live.rollback_queue import RollbackQueue
from ebb.live.sensed import Sensed, actuated, victim_names
from ebb.live.settings import ControllerSettings, CycleOutcome, Elector
from ebb.live.timeline import Tick
from ebb.model.decision import Decision
from ebb.model.decisions import CycleRecord, DecisionRecord
from ebb.model.ids import CycleId, DecisionId, RunId
from ebb.model.observation import ScaleRequest
from ebb.model.spans import Spans
from ebb.telemetry.metrics import EbbMetrics

__all__ = ["CycleLedger", "last_cycle_number", "leader_fence"]

log = logging.getLogger("ebb.live.controller")

_NUMBERED = re.compile(r"-c(\d{1,18})$")
"""A numbered cycle's id: ``<run_id>-c<n>``."""
_NUMBER_IN_KEY = re.compile(r"-c(\d{1,18})(?!\d)")
"""A cycle number in a malformed row's key (an etcd key or a row id; ``-outcome`` may follow)."""


def last_cycle_number(ledger: Ledger, run_id: str) -> tuple[list[CycleRecord], int]:
    """The run's cycles and the highest ``n`` of a ``<run_id>-c<n>`` among them or in the keys of the
    malformed rows the read skipped (0 when none): numbering continues past it, so no id is reused.
    Malformed rows are left in place and named in an ERROR."""
    cycles = ledger.cycles(RunId(run_id))
    bad = tuple(ledger.skipped)
    nums = [int(m.group(1)) for c in cycles if (m := _NUMBERED.search(c.cycle_id)) is not None]
    nums.extend(int(x) for row in bad for x in _NUMBER_IN_KEY.findall(row.key))
    if bad:
        log.error("ledger: %d malformed row(s) of run %s skipped on resume (left as they are; fix or remove "
                  "them with the store's own tools): %s", len(bad), run_id, "; ".join(r.error for r in bad[:3])[:1000])
    return cycles, max(nums, default=0)


def leader_fence(elector: Elector | None, run_id: str) -> Any:
    """The leader's fence for the next write (None without an elector); :class:`~ebb.errors.NotLeader`
    when leadership lapsed since ``is_leader()`` (an unfenced write could land after a successor's)."""
    if elector is None:
        return None
    fence = elector.fence()
    if fence is None:
        raise NotLeader(f"{run_id}: leadership lapsed before the ledger write; not writing")
    return fence


class CycleLedger:
    """One controller's ledger bookkeeping (module docstring). Not thread-safe, like the controller."""

    def __init__(self, ledger: Ledger, settings: ControllerSettings, *, elector: Elector | None,
                 clock: Callable[[], float], metrics: EbbMetrics | None) -> None:
        self.ledger = ledger
        self.settings = settings
        self.elector = elector
        self.metrics = metrics
        self._clock = clock
        self._n: int | None = None
        self.last_action: DecisionId | None = None
        """The last change the controller carried out: what the next scale-up was caused by."""
        self._pending: tuple[CycleRecord, DecisionRecord] | None = None
        """The last acted decision found without an outcome on resume; settled by the next cycle."""

    @property
    def resumed(self) -> bool:
        """Whether :meth:`resume` has numbered the run's cycles (cycles may be numbered)."""
        return self._n is not None

    @property
    def pending(self) -> bool:
        """Whether a predecessor's decision waits for :meth:`settle_pending`."""
        return self._pending is not None

    def next_cycle(self) -> tuple[int, CycleId]:
        """The next cycle's number and id (after :meth:`resume`)."""
        assert self._n is not None
        self._n += 1
        return self._n, CycleId(f"{self.settings.run_id}-c{self._n}")

    # -- fenced writes -----------------------------------------------------------------------
    def fence(self) -> Any:
        """The leader's fence for the next write (:func:`leader_fence`)."""
        return leader_fence(self.elector, self.settings.run_id)

    def still_fenced(self, fence: Any) -> bool:
        """Whether ``fence`` (what a record was written under) is still the leader's: no elector, or
        the elector's fence now carries its token. False once leadership lapsed or passed to a
        successor since the write — then nothing recorded under it is applied (the successor's
        resume reconciles it)."""
        return self.elector is None or fence_token(self.elector.fence()) == fence_token(fence)

    def renewed(self, fence: Any) -> Any:
        """``fence`` with its term's latest deadline: the elector's fence now when it carries the same
        token (leadership renewed since ``fence`` was taken), else ``fence`` as it is (lapsed or passed
        on: the ledger refuses it)."""
        if self.elector is None:
            return fence
        now = self.elector.fence()
        return now if now is not None and fence_token(now) == fence_token(fence) else fence

    # -- a decision's records ----------------------------------------------------------------
    def record(self, d: Decision, n: int, cid: CycleId, tick: Tick, state: FleetState, fence: Any, *,
               policy: str, gated_root: DecisionId | None) -> CycleRecord:
        """The ledger cycle of ``d``: victims under the actuator's names, caused by the last change (a
        canary's ``proceed`` by its canary step, ``gated_root``: the event graph's edge)."""
        s = self.settings
        caused = caused_by(d, self.last_action)
        if d.gate is not None and d.gate.step == "proceed" and d.action == "scale_down" and gated_root is not None:
            caused = (gated_root,)
        rec = decision_record(d, decision_id=DecisionId(f"{s.run_id}-{n}"), cycle_id=cid, run_id=RunId(s.run_id),
                              ts_ns=int(tick.wall_s * 1e9), target=s.target, victim_name=victim_names(state),
                              caused=caused, extra_plan={"mode": s.mode, "controller": "live"})
        return cycle_record(rec, policy=policy, fencing_token=fence_token(fence),
                            snapshot={"replicas": state.spec_replicas, "ready": state.ready_replicas,
                                      "draining": state.draining})

    def write(self, span: Spans, cycle: CycleRecord, fence: Any) -> str | None:
        """Append the decision's cycle; the ledger's refusal (counted, logged) or None when written."""
        try:
            with span.layer("ebb.ledger"):
                self.ledger.append_cycle(cycle, fence)
        except (TransientError, NotLeader) as exc:
            if self.metrics is not None:
                self.metrics.ledger_write_error()
            log.error("ledger refused decision %s (%s): not acting", cycle.decisions[0].decision_id, exc)
            return str(exc)
        return None

    def count(self, rec: DecisionRecord) -> None:
        """Count and log a recorded decision."""
        if self.metrics is not None:
            self.metrics.decision(rec.action, list(rec.vetoes))
        log.info("decision %s: %s %d→%d (%s)", rec.decision_id, rec.action, rec.from_replicas, rec.to_replicas,
                 "; ".join(rec.reasons + rec.vetoes))

    def write_outcome(self, span: Spans, cycle: CycleRecord, res: ActuationResult, fence: Any) -> None:
        """The acted decision's outcome, best effort: unrecorded, the next leader's resume finds the
        fleet at ``to`` and records it then."""
        did = cycle.decisions[0].decision_id
        fence = self.renewed(fence)  # an actuation may outlast the deadline the decision's fence had
        try:
            with span.layer("ebb.ledger.outcome"):
                self.ledger.append_cycle(outcome_cycle(cycle, did, ts_ns=int(self._clock() * 1e9), note="applied",
                                                       result=actuated(res), fencing_token=fence_token(fence)),
                                         fence)
        except (TransientError, NotLeader) as exc:
            log.error("outcome of %s not recorded (%s); a restart reconciles it", did, exc)

    # -- resume after a restart --------------------------------------------------------------
    def resume(self, rollbacks: RollbackQueue) -> None:
        """Continue the cycle numbering, find the last acted decision left without an outcome
        (:attr:`pending`; the next cycle settles it once it has read the source and the fleet) and
        hand ``rollbacks`` the requests left without their done record.

        Malformed rows of this run (the ledger skips and lists them) are left in place and named in
        an ERROR; numbering continues past any cycle number their keys still show, so no id is
        reused. Skipping loses nothing that matters for safety: a skipped unfinished decision is
        not resumed, and the policy re-decides on fresh data.
        """
        cycles, self._n = last_cycle_number(self.ledger, self.settings.run_id)
        mine = [c for c in cycles if not c.cycle_id.endswith("-outcome")]
        self._pending = None
        rollbacks.resume(mine)
        acts = [c for c in mine for d in c.decisions
                if d.action in ("scale_up", "scale_down") and d.plan.get("mode") == "act" and COMPENSATES not in d.plan]
        if not acts:
            return
        last = acts[-1]
        self.last_action = last.decisions[0].decision_id
        if self.ledger.get_cycle(CycleId(f"{last.cycle_id}-outcome")) is None:
            self._pending = (last, last.decisions[0])

    def settle_pending(self, span: Spans, seen: Sensed, n: int, tick: Tick, actuator: Actuator) -> CycleOutcome | None:
        """Apply or close the decision a predecessor left without an outcome (:mod:`ebb.live.resume`)
        and record its outcome. This cycle's outcome when it changed the fleet; None to go on deciding."""
        assert self._pending is not None
        cycle, d = self._pending
        verdict = resume_verdict(d, seen.state, int(self._clock() * 1e9), self.settings.resume_limits,
                                 data_note=seen.unfit, demand=read_demand(seen))
        if verdict.apply and self.settings.mode != "act":
            # Restarted to only recommend: a predecessor's act-mode decision is not carried out.
            verdict = replace(verdict, apply=False, to_replicas=seen.state.spec_replicas, victims=(),
                              note="not resumed: the controller now runs in recommend mode")
        fence = self.fence()  # NotLeader when leadership lapsed meanwhile: the next leader reconciles it
        res = None
        if verdict.apply:
            with span.layer("ebb.actuate", **{"ebb.resume": True}) as a:
                res = actuator.apply(d.decision_id, ScaleRequest(verdict.to_replicas, verdict.victims))
                a.set(**{"ebb.actuate.applied": res.applied, "ebb.replicas.after": res.replicas_after})
        self.ledger.append_cycle(outcome_cycle(cycle, d.decision_id, ts_ns=int(self._clock() * 1e9),
                                               note=verdict.note, result=None if res is None else actuated(res),
                                               fencing_token=fence_token(fence)), fence)
        self._pending = None
        log.warning("decision %s (%s %d→%d) was left without an outcome: %s", d.decision_id, d.action,
                    d.from_replicas, d.to_replicas, verdict.note)
        if res is None:
            return None
        return seen.outcome(n, tick.t_s, d.action, res.replicas_after, d.decision_id, acted=res.applied,
                            note=verdict.note)


def read_demand(seen: Sensed) -> ReadDemand | None:
    """What the cycle's read says of demand now (:class:`~ebb.live.resume.ReadDemand`); None without samples."""
    f = seen.sig.fine
    if not len(f.t_s):
        return None
    served = served_demand(f.prefill_replicas, f.slot_replicas, max(seen.state.ready_replicas, 1))
    queued = seen.sig.queued if seen.sig.queued is not None else (float(f.queued[-1]) if len(f.queued) else 0.0)
    return ReadDemand(float(served.max()), float(queued))
