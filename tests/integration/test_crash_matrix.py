"""The crash-point matrix (issue #8): a live controller SIGKILLed at each point of a cycle resumes
without losing a decision and without applying one twice.

Each case runs the harness (:mod:`ebb.testing.controller_proc`, a real process acting through the real
Kubernetes actuator on the fake API server of this test process) until it kills itself the 2nd time it
reaches the fault point, checks what the crash left in the ledger and on the Deployment, restarts it
for four clean cycles and checks that every decision is in the ledger once, every acted decision has
exactly one outcome and changed replicas exactly once on the API server, and the Deployment ends at
the last decision's target. Ledgers: an SQLite file, and a real etcd (skipped without the binary,
failed under CI=true).
"""

from __future__ import annotations

import signal
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("kubernetes")

from ebb.actuate.kubernetes import DECISION_ANNOTATION  # noqa: E402
from ebb.ledger import open_ledger  # noqa: E402
from ebb.model.decisions import DecisionRecord  # noqa: E402
from ebb.model.ids import DecisionId, RunId  # noqa: E402
from ebb.testing.controller_proc import FAULT_POINTS, run_harness, scale_writes  # noqa: E402
from ebb.testing.fake_kube import FakeKubeApiServer  # noqa: E402

NS, NAME, START = "serving", "llm", 3
RUN_TIMEOUT_S = 60.0  # a run takes ~2 s; generous for two noisy shared cores

NOTE_AFTER_RESTART = {("before_plan", 1): None, ("after_ledger", 1): "applied after restart",
                      ("after_actuation", 1): "found applied after restart",
                      ("before_plan", 2): None, ("after_ledger", 2): "applied after restart",
                      ("after_actuation", 2): "found applied after restart"}
"""The outcome note of the decision the crash interrupted (None: the crash came before any write). The
harness's 1st acting decision is a scale-up (3 → 5), its 2nd a scale-down (5 → 2) naming the oldest
pods as victims: written but not applied, either is resumed by the restarted controller (young, fresh
data, the victims still there) — a scale-down's victims found by name through a new actuator."""


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


def acted(decisions: list[DecisionRecord]) -> list[DecisionRecord]:
    return [d for d in decisions if d.action in ("scale_up", "scale_down") and d.plan.get("mode") == "act"]


def outcomes(ledger: str, run_id: str) -> tuple[list[DecisionRecord], dict[str, list[dict[str, Any]]]]:
    """The run's decisions in ledger order, and the outcome snapshots recorded for each decision id."""
    store = open_ledger(ledger, create=False)
    try:
        cycles = store.cycles(RunId(run_id))
        decisions = [d for c in cycles for d in c.decisions]
        assert [d.decision_id for d in decisions] == [d.decision_id for d in store.decisions(RunId(run_id))]
        found: dict[str, list[dict[str, Any]]] = {}
        for c in cycles:
            if c.cycle_id.endswith("-outcome"):
                of = str(c.snapshot["outcome_of"])
                owner = store.get_decision(DecisionId(of))
                assert owner is not None and c.cycle_id == f"{owner.cycle_id}-outcome", c
                found.setdefault(of, []).append(dict(c.snapshot))
        return decisions, found
    finally:
        store.close()


def test_a_scale_down_written_before_demand_rose_is_not_resumed_and_removes_nothing(
        ledger_url: str, fake: FakeKubeApiServer, tmp_path: Path) -> None:
    # Red-team T3-H4: the 2nd acting decision (5 -> 2) is written, the controller dies before acting,
    # and it restarts within a minute while the fleet's 5 replicas are nearly saturated (4.5 busy).
    run_id = f"crash-demand-{uuid.uuid4().hex[:8]}"
    code, _, err = harness(fake, ledger_url, run_id, "--crash-at", "after_ledger:2", "--cycles", "12")
    assert code == -signal.SIGKILL, err
    decisions, done = outcomes(ledger_url, run_id)
    last = acted(decisions)[-1]
    assert last.action == "scale_down" and last.decision_id not in done and spec_replicas(fake) == last.from_replicas
    writes_before = scale_writes(fake.requests, NS, NAME, START)

    hold = tmp_path / "hold.json"
    hold.write_text("[5]")  # the restarted (scripted) policy itself asks for no change
    code, _, err = harness(fake, ledger_url, run_id, "--cycles", "2", "--slot-replicas", "4.5", "--script", str(hold))
    assert code == 0, err
    _, done = outcomes(ledger_url, run_id)
    note = str(done[last.decision_id][0]["note"])
    assert note.startswith("not resumed: demand changed: ") and "more than the target 2" in note, note
    assert scale_writes(fake.requests, NS, NAME, START) == writes_before  # nothing removed
    assert spec_replicas(fake) == last.from_replicas


@pytest.mark.parametrize("nth", [1, 2], ids=["scale-up", "scale-down"])
@pytest.mark.parametrize("point", FAULT_POINTS)
def test_a_controller_killed_at_any_point_of_a_cycle_resumes_without_losing_or_repeating_a_decision(
        point: str, nth: int, ledger_url: str, fake: FakeKubeApiServer) -> None:
    run_id = f"crash-{point}-{uuid.uuid4().hex[:8]}"
    code, lines, err = harness(fake, ledger_url, run_id, "--crash-at", f"{point}:{nth}", "--cycles", "12")
    assert code == -signal.SIGKILL, f"the harness was not killed at {point}:{nth} (exit {code}): {err}"
    assert [(x["point"], x["nth"]) for x in lines if x["event"] == "crash"] == [(point, nth)]

    # What the crash left: the interrupted decision is written (after_ledger, after_actuation) and has
    # no outcome yet; the Deployment is still at `from` (after_ledger) or already at `to` (after_actuation).
    decisions, done = outcomes(ledger_url, run_id)
    before = acted(decisions)
    if point == "before_plan":
        assert all(d.decision_id in done for d in before)
        assert spec_replicas(fake) == (before[-1].to_replicas if before else START)
    else:
        last = before[-1]
        assert last.decision_id not in done
        assert spec_replicas(fake) == (last.from_replicas if point == "after_ledger" else last.to_replicas)

    code, lines, err = harness(fake, ledger_url, run_id, "--cycles", "4")
    assert code == 0, err
    assert any(x.get("acted") for x in lines), f"the restarted controller decided nothing: {lines}"

    decisions, done = outcomes(ledger_url, run_id)
    ids = [d.decision_id for d in decisions]
    assert len(ids) == len(set(ids)), f"a decision id is in the ledger twice: {ids}"
    nums = [int(d.cycle_id.rsplit("-c", 1)[1]) for d in decisions]
    assert nums == sorted(set(nums)), f"cycle numbers not strictly increasing in ledger order: {nums}"
    moves = acted(decisions)
    assert {d: len(o) for d, o in done.items()} == {d.decision_id: 1 for d in moves}, \
        "every acted decision needs exactly one outcome, and no outcome may lack its decision"
    notes = Counter(str(o[0]["note"]).split(" (")[0] for o in done.values())
    assert set(notes) <= {"applied", "applied after restart", "found applied after restart"}, notes
    want = NOTE_AFTER_RESTART[(point, nth)]
    if want is not None:
        assert str(done[last.decision_id][0]["note"]).startswith(want)
    assert notes[want] == 1 if want else set(notes) == {"applied"}

    # The API server saw each carried-out decision change replicas exactly once, in decision order.
    carried = [d for d in moves if not str(done[d.decision_id][0]["note"]).startswith("not resumed")]
    writes = scale_writes(fake.requests, NS, NAME, START)
    assert writes == [(d.decision_id, d.from_replicas, d.to_replicas) for d in carried]
    assert spec_replicas(fake) == carried[-1].to_replicas
    assert fake.deployments[(NS, NAME)]["metadata"]["annotations"][DECISION_ANNOTATION] == carried[-1].decision_id
    # Every carried-out scale-down removed exactly the victims it recorded (the harness names the oldest).
    for d in carried:
        o = done[d.decision_id][0]
        if d.action == "scale_down" and "removed" in o:
            assert d.victims and o["removed"] == list(d.victims), (d, o)
