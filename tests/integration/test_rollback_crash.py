"""A controller SIGKILLed mid-compensation resumes it exactly once (issue #30), on SQLite and a real etcd.

The harness (:mod:`ebb.testing.controller_proc`, a real process acting through the real Kubernetes
actuator on the fake API server of this test process) scales 3 → 2 as a gated step (``watch``), then
its gate fails: the controller hands the rollback to the rollback channel, which records the request
(``<id>-rollback``) and the step (``<id>-undo``) in the ledger and applies it. The harness kills itself
(SIGKILL) right after the step's ledger write, or right after its actuation. A restarted controller
finds the request without its done record and finishes it: the API server sees the compensating
``/scale`` write exactly once, the step's decision is in the ledger once, the request has its done
record (listing the step applied or done before the kill), and the compensation log the step done. Ledgers: an SQLite file, and a real etcd (skipped without the binary,
failed under CI=true).
"""

from __future__ import annotations

import signal
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("kubernetes")

from ebb.actuate.kubernetes import DECISION_ANNOTATION  # noqa: E402
from ebb.ledger import open_ledger  # noqa: E402
from ebb.ledger.review import open_compensation_log  # noqa: E402
from ebb.model.ids import CycleId, DecisionId, RunId  # noqa: E402
from ebb.testing.controller_proc import ROLLBACK_FAULT_POINTS, run_harness, scale_writes  # noqa: E402
from ebb.testing.fake_kube import FakeKubeApiServer  # noqa: E402

NS, NAME, START = "serving", "llm", 3
RUN_TIMEOUT_S = 60.0


@pytest.fixture
def fake() -> Iterator[FakeKubeApiServer]:
    with FakeKubeApiServer() as server:
        server.add_node("node-a", "zone-a")
        server.add_deployment(NAME, START, namespace=NS)
        yield server


def harness(fake: FakeKubeApiServer, ledger: str, run_id: str, *extra: str) -> tuple[int, list[dict[str, Any]], str]:
    """Run the harness to its end: (exit status, its JSON lines, its stderr)."""
    return run_harness(fake.url, NS, NAME, ledger, run_id, *extra, timeout_s=RUN_TIMEOUT_S)


def spec_replicas(fake: FakeKubeApiServer) -> int:
    return int(fake.deployments[(NS, NAME)]["spec"]["replicas"])


@pytest.mark.parametrize("point", ROLLBACK_FAULT_POINTS)
def test_a_controller_killed_mid_compensation_resumes_it_and_applies_each_step_exactly_once(
        point: str, ledger_url: str, fake: FakeKubeApiServer, tmp_path: Path) -> None:
    run_id = f"rollback-{point.split('_')[-1]}-{uuid.uuid4().hex[:8]}"
    root, step = f"{run_id}-1", f"{run_id}-1-undo"
    gated, hold = tmp_path / "gated.json", tmp_path / "hold.json"
    gated.write_text("[2, 3]")
    hold.write_text("[3]")
    code, lines, err = harness(fake, ledger_url, run_id, "--script", str(gated), "--gate-fail-at", "0",
                               "--crash-at", point, "--cycles", "10")
    assert code == -signal.SIGKILL, f"the harness was not killed at {point} (exit {code}): {err}"
    assert [x["point"] for x in lines if x["event"] == "crash"] == [point]

    # What the kill left: the request and its step recorded (written ahead together), no done record.
    store = open_ledger(ledger_url, create=False)
    try:
        assert store.get_cycle(CycleId(f"{root}-rollback")) is not None
        recorded = store.get_decision(DecisionId(step))
        assert recorded is not None and recorded.action == "scale_up" and recorded.caused_by == (root,)
        assert (recorded.from_replicas, recorded.to_replicas) == (2, 3)
        assert store.get_cycle(CycleId(f"{root}-rollback-done")) is None
    finally:
        store.close()
    assert spec_replicas(fake) == (2 if point == "after_compensation_ledger" else 3)

    code, lines, err = harness(fake, ledger_url, run_id, "--script", str(hold), "--cycles", "4")
    assert code == 0, err
    assert any("compensated" in x.get("note", "") for x in lines), lines

    # The API server saw the scale-down and its compensation, each exactly once.
    assert scale_writes(fake.requests, NS, NAME, START) == [(root, 3, 2), (step, 2, 3)]
    assert spec_replicas(fake) == 3
    assert fake.deployments[(NS, NAME)]["metadata"]["annotations"][DECISION_ANNOTATION] == step
    store = open_ledger(ledger_url, create=False)
    try:
        cycles = store.cycles(RunId(run_id))
        assert [c.cycle_id for c in cycles].count(f"{root}-rollback") == 1
        done = store.get_cycle(CycleId(f"{root}-rollback-done"))
        assert done is not None and not done.snapshot["remaining"] and not done.snapshot["enqueued"]
        # Killed before the step was logged done, the successor ran it again — with its id, so the
        # API server was not written to again (the Deployment's annotation names it).
        assert done.snapshot["applied"] == [root] and done.snapshot["skipped"] == []
        assert [d.decision_id for d in store.decisions(RunId(run_id)) if d.plan.get("compensates")] == [step]
    finally:
        store.close()
    log = open_compensation_log(ledger_url, create=False)
    try:
        assert log.done_ids([root]) == {root} and log.list("pending") == []
    finally:
        log.close()
