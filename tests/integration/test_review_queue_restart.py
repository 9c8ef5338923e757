"""The compensation log and review queue survive a process restart, on SQLite and on a real etcd.

A child process compensates (with a budget that runs out) and enqueues; the parent closes nothing of
its own, then a fresh child reads the queue back, finishes the compensation without repeating done
steps, and resolves the item; a third process sees it resolved.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from ebb.ledger import SqliteLedger, open_ledger
from ebb.model.decisions import CycleRecord, DecisionRecord
from ebb.model.ids import CycleId, DecisionId, RunId

CHILD = r"""
import json, sys
from ebb.gates.rollback import EventGraph, ScaleEvent
from ebb.ledger.review import compensate, open_compensation_log

where, phase = sys.argv[1], sys.argv[2]
g = EventGraph([ScaleEvent(f"e{i}", f"svc{i}", 4, 3, 0.2, "low util", f"snap/{i}",
                           (("e0",) if i else ())) for i in range(4)])
calls = []
log = open_compensation_log(where)
if phase == "first":
    t = [0.0]
    def clock():
        return t[0]
    def act(step):
        calls.append(step.target)
        t[0] += 0.5
    res = compensate(g, ["e0"], act, log, budget_s=0.8, clock=clock)
    out = {"applied": list(res.applied), "enqueued": list(res.enqueued)}
elif phase == "second":
    items = [i.event_id for i in log.list("pending")]
    res = compensate(g, items, lambda step: calls.append(step.target), log)
    for i in items:
        log.resolve(i, "finished after restart")
    out = {"pending_before": items, "applied": list(res.applied), "skipped": list(res.skipped)}
else:
    item = log.show("e0")
    out = {"status": item.status, "note": item.note, "done": sorted(log.done_ids())}
log.close()
out["calls"] = calls
print(json.dumps(out))
"""


def _run(where: str, phase: str) -> dict[str, object]:
    proc = subprocess.run([sys.executable, "-c", CHILD, where, phase], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    result: dict[str, object] = json.loads(proc.stdout)
    return result


def _check_restart(where: str) -> None:
    first = _run(where, "first")
    assert first["applied"] == ["e1", "e2"] and first["enqueued"] == ["e0"]
    second = _run(where, "second")
    assert second["pending_before"] == ["e0"]
    assert second["skipped"] == ["e1", "e2"] and second["applied"] == ["e3", "e0"]
    assert second["calls"] == ["svc3", "svc0"]  # done steps are not repeated after the restart
    third = _run(where, "third")
    assert third == {"status": "resolved", "note": "finished after restart", "done": ["e0", "e1", "e2", "e3"],
                     "calls": []}


def _cycle() -> CycleRecord:
    d = DecisionRecord(DecisionId("d-1"), CycleId("c-1"), RunId("r"), 1, "svc0", "scale_down", 4, 3)
    return CycleRecord(CycleId("c-1"), RunId("r"), 1, "ebb", (d,))


def test_the_sqlite_review_queue_survives_a_restart_and_leaves_the_ledger_readable(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite"
    with SqliteLedger(path) as led:
        led.append_cycle(_cycle())
    _check_restart(str(path))
    with SqliteLedger(path, create=False) as led:
        assert led.get_cycle(CycleId("c-1")) == _cycle()


@pytest.mark.slow
def test_the_etcd_review_queue_survives_a_restart_and_leaves_the_ledger_readable(etcd_endpoint: str) -> None:
    url = etcd_endpoint.replace("http://", "etcd://") + f"/ebb-review-{uuid.uuid4().hex[:8]}"
    led = open_ledger(url)
    try:
        led.append_cycle(_cycle())
        _check_restart(url)
        assert led.cycles() == [_cycle()] and led.decisions() == list(_cycle().decisions)
    finally:
        led.close()
