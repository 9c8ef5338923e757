"""An outcome is written under its decision's term with the term's latest deadline: a SQLite ledger,
which refuses a fence whose deadline passed, keeps the outcome of an actuation that outlasted the
deadline the decision's fence had while the leader renewed, and still refuses it once leadership
passed on."""

from __future__ import annotations

from pathlib import Path

from ebb.actuate.base import ActuationResult
from ebb.ledger import SqliteLedger
from ebb.ledger.base import Fence
from ebb.live.cycle_ledger import CycleLedger
from ebb.live.settings import ControllerSettings
from ebb.model.decisions import CycleRecord, DecisionRecord
from ebb.model.ids import CycleId, DecisionId, RunId
from ebb.model.spans import NO_SPANS

RUN = "live-serving-llm"


class Clock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


class Elector:
    """Leads with ``token`` until ``until_s`` (0: not leading)."""

    def __init__(self, token: int, until_s: float) -> None:
        self.token, self.until_s = token, until_s

    def is_leader(self) -> bool:
        return self.token > 0

    def fence(self) -> Fence | None:
        return Fence("ebb-system/ebb-x", self.token, 0, self.until_s, "a") if self.token else None


def decided(fence: Fence) -> CycleRecord:
    cid = CycleId(f"{RUN}-c1")
    d = DecisionRecord(decision_id=DecisionId(f"{RUN}-1"), cycle_id=cid, run_id=RunId(RUN), ts_ns=1_000,
                       target="serving/llm", action="scale_down", from_replicas=4, to_replicas=3, reasons=("idle",))
    return CycleRecord(cycle_id=cid, run_id=RunId(RUN), ts_ns=1_000, policy="ebb", decisions=(d,),
                       fencing_token=fence.token)


def test_an_outcome_after_a_long_actuation_is_written_under_the_renewed_term_and_refused_once_deposed(
        tmp_path: Path) -> None:
    clock = Clock(100.0)
    elector = Elector(1, 110.0)
    led = SqliteLedger(tmp_path / "l.sqlite", fence_clock=clock)
    books = CycleLedger(led, ControllerSettings(run_id=RUN, target="serving/llm"), elector=elector,
                        clock=lambda: 1_700_000_000.0, metrics=None)
    try:
        fence = books.fence()
        cycle = decided(fence)
        assert led.append_cycle(cycle, fence)
        clock.t, elector.until_s = 115.0, 125.0  # a 15 s actuation; the leader renewed meanwhile
        books.write_outcome(NO_SPANS, cycle, ActuationResult(DecisionId(f"{RUN}-1"), True, 4, 3), fence)
        outcome = led.get_cycle(CycleId(f"{RUN}-c1-outcome"))
        assert outcome is not None and outcome.fencing_token == 1
        assert books.renewed(fence).valid_until_s == 125.0
        elector.token, elector.until_s = 2, 140.0  # passed on: a successor's term
        assert books.renewed(fence) is fence, "a deposed leader's fence must not borrow its successor's deadline"
    finally:
        led.close()
