"""A controller killed after the ledger write resumes the recorded scale-down and removes exactly its
victims, not others (issue #13, item 3).

Controller A runs a scripted policy whose scale-down (4 → 2) names the two *oldest* replicas — the
opposite of every actuator's own newest-first choice — and is "killed" at ``after_ledger``: its fault
point raises a :class:`BaseException`, so nothing after the write runs (no actuation, no outcome). Its
ledger is closed, as a dead process's is. Controller B, a new :class:`Controller` over a new ledger
handle on the same store and the same fleet, resumes the decision in its first cycle. Checked: the
recorded victims (by the actuator's names) are gone, the other replicas remain, the outcome note is
"applied after restart", and the actuator applied the decision once (a third controller does not
apply it again).

Actuators: ``local`` (real ``python -m ebb.demo.worker`` processes behind a real router; the same
actuator serves A and B, as its workers would outlive a controller that is not their parent) and
``kubernetes`` (the real actuator on the fake API server; B gets a NEW actuator instance, and before
A decides one pod was replaced, so the two instances number the same pods differently: ids are never
trusted across a restart, names are). Ledgers: an SQLite file, and a real etcd (skipped without the
binary, failed under CI=true).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from ebb.actuate.base import ActuationResult, Actuator, FleetState
from ebb.ledger import open_ledger
from ebb.ledger.base import Ledger
from ebb.live.controller import Controller, ControllerSettings
from ebb.model.decision import Decision
from ebb.model.ids import CycleId, DecisionId, RunId
from ebb.model.observation import Observation, Pipeline, ScaleRequest
from ebb.model.spans import NO_SPANS, Spans
from ebb.testing.controller_proc import fresh_source

NS, NAME, START, TO = "serving", "llm", 4, 2
RUN = "restart"


class Killed(BaseException):
    """A SIGKILL, in process: not an ``Exception``, so the controller's last-resort handler lets it through."""


def killed_at(point: str) -> Callable[[str], None]:
    def fault(where: str) -> None:
        if where == point:
            raise Killed(where)
    return fault


@dataclass
class OldestFirst:
    """A :class:`~ebb.decide.base.Policy`: the first plan scales 4 → 2 naming the two oldest replicas
    (``obs.pods`` is oldest first) as victims; every other plan holds."""

    spec: str = "oldest-first"
    interval_s: float = 1.0
    pipeline: Pipeline = Pipeline(1, 1)
    scale_down: bool = True

    def decide(self, obs: Observation, *, spans: Spans = NO_SPANS) -> Decision:
        have = obs.spec_replicas
        if not self.scale_down or have <= TO:
            return Decision.change(obs.t_s, have, have, policy=self.spec)
        self.scale_down = False
        return Decision.change(obs.t_s, have, TO, policy=self.spec, reasons=("scripted: remove the oldest",),
                               victims=tuple(p.replica for p in obs.pods[:have - TO]))

    def observe(self, obs: Observation) -> None:
        pass

    def gate_queries(self) -> tuple[str, ...]:
        return ()


@dataclass
class Counting:
    """An actuator that counts ``apply`` calls per decision id (and whether each changed the fleet)."""

    inner: Actuator
    applies: list[tuple[DecisionId, bool]] = field(default_factory=list)

    def state(self) -> FleetState:
        return self.inner.state()

    def apply(self, decision_id: DecisionId, request: ScaleRequest) -> ActuationResult:
        res = self.inner.apply(decision_id, request)
        self.applies.append((decision_id, res.applied))
        return res


@dataclass
class Fleet:
    """One fleet under test: ``actuator()`` is the actuator a (re)started controller gets."""

    actuator: Callable[[], Actuator]
    names: Callable[[], set[str]]
    """Names of the replicas in service, as the system itself reports them (router, API server)."""
    settle: Callable[[], None] = lambda: None
    """Waits until removed replicas are gone."""


def _local_fleet(stack: ExitStack, tmp_path: Path) -> Fleet:
    from ebb.actuate.local import LocalActuator
    from ebb.demo.router import Router

    router = stack.enter_context(Router(queue_timeout_s=60.0))
    act = stack.enter_context(LocalActuator(router, initial=START, warmup_s=0.5, speed=10.0, max_batch=4,
                                            state_file=tmp_path / "actuator.json"))
    act.wait_ready(timeout_s=60.0)

    return Fleet(actuator=lambda: act, names=lambda: {str(w["name"]) for w in router.workers()},
                 settle=lambda: act.wait_idle(timeout_s=60.0))


def _kubernetes_fleet(stack: ExitStack) -> Fleet:
    pytest.importorskip("kubernetes")
    from kubernetes import client

    from ebb.actuate.kubernetes import KubernetesActuator
    from ebb.testing.fake_kube import FakeKubeApiServer

    fake = stack.enter_context(FakeKubeApiServer())
    fake.add_node("node-a", "zone-a")
    fake.add_deployment(NAME, START, namespace=NS)

    def new_actuator() -> Actuator:
        api = client.ApiClient(fake.configuration())
        stack.callback(api.close)
        return KubernetesActuator(NS, NAME, api_client=api, qps=1000.0, burst=1000)

    return Fleet(actuator=new_actuator, names=lambda: set(fake.pod_names(NS, terminating=False)))


@pytest.fixture(params=["local", "kubernetes"])
def fleet(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Fleet]:
    with ExitStack() as stack:
        yield _local_fleet(stack, tmp_path) if request.param == "local" else _kubernetes_fleet(stack)


def controller(actuator: Actuator, ledger: Ledger, **kw: Any) -> Controller:
    return Controller(OldestFirst(), fresh_source(), actuator, ledger,
                      ControllerSettings(run_id=RUN, target=f"{NS}/{NAME}", mode="act", min_replicas=1), **kw)


def renumbered(act: Actuator) -> None:
    """Replace the oldest pod (evicted; its ReplicaSet starts a new one) after ``act`` has numbered
    all four: ``act`` now numbers the pods 1..4, a new actuator instance 0..3."""
    from ebb.actuate.kubernetes import KubernetesActuator

    assert isinstance(act, KubernetesActuator)
    first = act.state().replicas[0].name
    assert act.evict(first)
    assert first not in [r.name for r in act.state().replicas]


def test_a_controller_killed_after_the_ledger_write_resumes_the_scale_down_and_removes_exactly_its_victims(
        fleet: Fleet, ledger_url: str, request: pytest.FixtureRequest) -> None:
    kubernetes = "kubernetes" in request.node.callspec.id
    first_actuator = fleet.actuator()
    if kubernetes:
        renumbered(first_actuator)
    before = first_actuator.state()
    by_id = {r.replica: r.name for r in before.replicas}
    oldest, newest = [r.name for r in before.replicas[:START - TO]], [r.name for r in before.replicas[START - TO:]]

    # Controller A: records 4 → 2 naming the two oldest, then dies before acting.
    ledger_a = open_ledger(ledger_url, writer=True)
    try:
        with pytest.raises(Killed):
            controller(first_actuator, ledger_a, fault_point=killed_at("after_ledger")).cycle()
        (d,) = ledger_a.decisions(RunId(RUN))
        assert d.action == "scale_down" and d.victims == tuple(oldest), "victims are recorded by name"
        assert ledger_a.get_cycle(CycleId(f"{d.cycle_id}-outcome")) is None
    finally:
        ledger_a.close()  # what the kernel does for a killed process
    assert fleet.names() == {*oldest, *newest}, "the kill came before any actuation"

    # Controller B: a new controller (and, on Kubernetes, a new actuator) over the same store and fleet.
    second = Counting(fleet.actuator())
    if kubernetes:
        ids_now = {r.name: r.replica for r in second.state().replicas}
        assert [ids_now[n] for n in oldest] != [rid for rid, n in by_id.items() if n in oldest], \
            "the new actuator must number the pods differently, or this test proves nothing"
    ledger_b = open_ledger(ledger_url, writer=True)
    try:
        out = controller(second, ledger_b).cycle()
        outcome = ledger_b.get_cycle(CycleId(f"{d.cycle_id}-outcome"))
        assert outcome is not None and outcome.snapshot["note"] == "applied after restart"
        assert outcome.snapshot["applied"] is True and outcome.snapshot["removed"] == oldest
        assert (out.decision_id, out.acted) == (d.decision_id, True)
        fleet.settle()
        assert fleet.names() == set(newest), "exactly the recorded victims are gone, the others remain"
        assert second.applies == [(d.decision_id, True)]

        # A third controller finds the outcome: nothing is applied again.
        third = Counting(fleet.actuator())
        later = controller(third, ledger_b).cycle()
        assert later.action == "hold" and third.applies == [] and fleet.names() == set(newest)
    finally:
        ledger_b.close()
