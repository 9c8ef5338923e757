"""The :mod:`ebb.actuate.base` guarantees, run on every actuator.

To cover a new actuator (e.g. Kubernetes), append an :class:`ActuatorFactory` to ``FACTORIES``: a
context manager that yields a fresh actuator with exactly one replica, and tears everything down.
An actuator with an asleep tier (:class:`~ebb.actuate.base.SleepingActuator`) goes in ``FACTORIES``
built with a tier too, and in ``SLEEPING_FACTORIES`` (a tier of ``max_replicas`` 2 at least): the plain
guarantees hold with a tier, and the sleeping ones are checked there.
Drain safety under load ("never fails a request by scaling down") needs traffic, so each actuator
proves it in its own test (``tests/unit/actuate/test_local_actuator.py`` for the local one).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from ebb.actuate.base import Actuator, FleetState, SleepingActuator
from ebb.actuate.local import LocalActuator
from ebb.config.tiers import SleepTier
from ebb.demo.router import Router
from ebb.model.ids import DecisionId, ReplicaId
from ebb.model.observation import ScaleRequest
from ebb.testing.fakes import FakeActuator


@dataclass(frozen=True)
class ActuatorFactory:
    name: str
    make: Callable[[Path], AbstractContextManager[Actuator]]
    """Given a fresh tmp dir, yields an actuator whose fleet is one replica."""


@contextmanager
def fake_actuator(tmp: Path) -> Iterator[Actuator]:
    yield FakeActuator(initial=1)


@contextmanager
def local_actuator(tmp: Path) -> Iterator[Actuator]:
    with Router(queue_timeout_s=30.0) as router, \
            LocalActuator(router, initial=1, warmup_s=0.3, speed=10.0, max_batch=2,
                          state_file=tmp / "state.json", targets_file=tmp / "targets.json") as act:
        yield act


@contextmanager
def local_asleep_actuator(tmp: Path) -> Iterator[Actuator]:
    with Router(queue_timeout_s=30.0) as router, \
            LocalActuator(router, initial=1, warmup_s=0.3, speed=10.0, max_batch=2, state_file=tmp / "state.json",
                          tier=SleepTier(wake_s=0.2, max_replicas=2)) as act:
        yield act


@contextmanager
def kubernetes_actuator(tmp: Path) -> Iterator[Actuator]:
    """KubernetesActuator against the in-process fake API server (no real cluster on build machines)."""
    kube_client = pytest.importorskip("kubernetes.client")
    from ebb.actuate.kubernetes import KubernetesActuator
    from ebb.testing.fake_kube import FakeKubeApiServer

    with FakeKubeApiServer() as fake:
        fake.add_node("node-a", "zone-a")
        fake.add_deployment("serving", 1, namespace="ebb-contract")
        api = kube_client.ApiClient(fake.configuration())
        try:  # a generous client rate limit: throttling is tested in test_kubernetes_actuator.py
            yield KubernetesActuator("ebb-contract", "serving", api_client=api, qps=1000.0, burst=100)
        finally:
            api.close()


@contextmanager
def kubernetes_tier_actuator(tmp: Path) -> Iterator[Actuator]:
    """KubernetesActuator with an asleep tier: victims leave the Service and drain instead of /scale going
    down at once. These pods have no engine to read (no pod IP), so each drain runs its (short) budget
    and the pod is released; sleeping itself is tested in tests/integration/test_kube_sleep_tier.py."""
    kube_client = pytest.importorskip("kubernetes.client")
    from ebb.actuate.kube_tier import ROUTABLE_LABEL, TierSettings
    from ebb.actuate.kubernetes import KubernetesActuator
    from ebb.config.tiers import SleepTier
    from ebb.testing.fake_kube import FakeKubeApiServer

    with FakeKubeApiServer() as fake:
        fake.add_node("node-a", "zone-a")
        fake.add_deployment("serving", 1, namespace="ebb-contract", template_labels={ROUTABLE_LABEL: "true"})
        api = kube_client.ApiClient(fake.configuration())
        tier = SleepTier(wake_s=1, max_replicas=2)
        act = KubernetesActuator("ebb-contract", "serving", api_client=api, qps=1000.0, burst=100,
                                 tier_settings=TierSettings(tier, settle_s=0.0, drain_budget_s=0.3, tick_s=0.05,
                                                            scan_s=0.05))
        try:
            yield act
        finally:
            act.close()
            api.close()


FACTORIES = [ActuatorFactory("fake", fake_actuator), ActuatorFactory("local", local_actuator),
             ActuatorFactory("local-asleep", local_asleep_actuator), ActuatorFactory("kubernetes", kubernetes_actuator),
             ActuatorFactory("kubernetes-tier", kubernetes_tier_actuator)]
SLEEPING_FACTORIES = [ActuatorFactory("local-asleep", local_asleep_actuator)]
"""The Kubernetes tier's sleeping needs engines on pod IPs: tests/integration/test_kube_sleep_tier.py."""


@pytest.fixture(params=FACTORIES, ids=lambda f: f.name)
def actuator(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Actuator]:
    factory: ActuatorFactory = request.param
    with factory.make(tmp_path) as act:
        yield act


@pytest.fixture(params=SLEEPING_FACTORIES, ids=lambda f: f.name)
def sleeping(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SleepingActuator]:
    factory: ActuatorFactory = request.param
    with factory.make(tmp_path) as act:
        assert isinstance(act, SleepingActuator) and act.tier is not None and act.tier.max_replicas >= 2
        yield act


def settled(act: Actuator, within_s: float = 60.0) -> FleetState:
    """The fleet once every replica in service is ready."""
    deadline = time.monotonic() + within_s
    while True:
        st = act.state()
        if st.ready_replicas == st.spec_replicas:
            return st
        assert time.monotonic() < deadline, f"{st.spec_replicas - st.ready_replicas} replicas not ready"
        time.sleep(0.05)


def test_an_actuator_satisfies_the_protocol_and_starts_consistent(actuator: Actuator) -> None:
    assert isinstance(actuator, Actuator)
    st = actuator.state()
    assert st.spec_replicas == len(st.replicas) == 1 and st.draining == 0 and st.target


def test_apply_is_synchronous_and_reports_what_it_added(actuator: Actuator) -> None:
    res = actuator.apply(DecisionId("up"), ScaleRequest(3))
    assert res.applied and (res.replicas_before, res.replicas_after) == (1, 3) and len(res.added) == 2
    st = actuator.state()
    assert st.spec_replicas == 3 and [r.name for r in st.replicas][1:] == list(res.added)
    assert [r.created_s for r in st.replicas] == sorted(r.created_s for r in st.replicas)  # oldest first
    assert settled(actuator).ready_replicas == 3


def test_a_repeated_decision_id_returns_the_first_outcome_and_changes_nothing(actuator: Actuator) -> None:
    first = actuator.apply(DecisionId("d"), ScaleRequest(2))
    before = actuator.state()
    again = actuator.apply(DecisionId("d"), ScaleRequest(5, victims=(ReplicaId(0),)))
    assert again.applied is False
    assert (again.decision_id, again.replicas_before, again.replicas_after, again.removed, again.added) == \
        (first.decision_id, first.replicas_before, first.replicas_after, first.removed, first.added)
    after = actuator.state()
    assert [r.replica for r in after.replicas] == [r.replica for r in before.replicas]


def test_named_victims_are_removed_first_and_leave_the_state_at_once(actuator: Actuator) -> None:
    actuator.apply(DecisionId("up"), ScaleRequest(3))
    st = settled(actuator)
    victim = st.replicas[0]
    res = actuator.apply(DecisionId("down"), ScaleRequest(1, victims=(victim.replica,)))
    assert res.applied and res.removed[0] == victim.name and len(res.removed) == 2
    now = actuator.state()
    assert now.spec_replicas == 1 and victim.name not in {r.name for r in now.replicas}
    # the rest is chosen newest first
    assert res.removed[1] == st.replicas[-1].name


def test_unknown_victims_are_ignored(actuator: Actuator) -> None:
    actuator.apply(DecisionId("up"), ScaleRequest(2))
    res = actuator.apply(DecisionId("down"), ScaleRequest(1, victims=(ReplicaId(12345),)))
    assert res.applied and len(res.removed) == 1 and actuator.state().spec_replicas == 1


def test_replica_ids_are_never_reused(actuator: Actuator) -> None:
    seen = {r.replica for r in actuator.state().replicas}
    actuator.apply(DecisionId("down"), ScaleRequest(0))
    res = actuator.apply(DecisionId("up"), ScaleRequest(2))
    new = {r.replica for r in actuator.state().replicas}
    assert len(res.added) == 2 and len(new) == 2 and not new & seen
    assert min(new) > max(seen)


def test_asking_for_the_current_size_changes_nothing(actuator: Actuator) -> None:
    before = actuator.state()
    res = actuator.apply(DecisionId("same"), ScaleRequest(1))
    assert res.applied is False and res.removed == () and res.added == ()
    assert [r.replica for r in actuator.state().replicas] == [r.replica for r in before.replicas]


def test_a_fleet_starts_with_no_sleeper(actuator: Actuator) -> None:
    assert actuator.state().asleep == ()


def until_asleep(act: SleepingActuator, count: int, within_s: float = 60.0) -> FleetState:
    """The fleet once ``count`` replicas sleep and none is still draining."""
    deadline = time.monotonic() + within_s
    while True:
        st = act.state()
        if len(st.asleep) == count and st.draining == 0:
            return st
        assert time.monotonic() < deadline, f"{len(st.asleep)} asleep, {st.draining} draining"
        time.sleep(0.05)


def test_a_drained_victim_sleeps_and_a_scale_up_wakes_it_back_under_its_name(sleeping: SleepingActuator) -> None:
    sleeping.apply(DecisionId("up"), ScaleRequest(2))
    victim = settled(sleeping).replicas[-1]
    down = sleeping.apply(DecisionId("down"), ScaleRequest(1))
    assert down.removed == (victim.name,)
    st = until_asleep(sleeping, 1)
    assert [r.name for r in st.asleep] == [victim.name] and st.spec_replicas == 1
    up = sleeping.apply(DecisionId("up-again"), ScaleRequest(2))
    assert up.added == (victim.name,) and sleeping.state().asleep == ()
    assert [r.name for r in settled(sleeping).replicas] == [sleeping.state().replicas[0].name, victim.name]


def test_keep_asleep_releases_the_oldest_and_none_keeps_them_all(sleeping: SleepingActuator) -> None:
    sleeping.apply(DecisionId("up"), ScaleRequest(3))
    settled(sleeping)
    sleeping.apply(DecisionId("down"), ScaleRequest(1))
    names = [r.name for r in until_asleep(sleeping, 2).asleep]
    assert sleeping.keep_asleep(None) == () and len(sleeping.state().asleep) == 2
    assert sleeping.keep_asleep(1) == (names[0],)
    assert [r.name for r in sleeping.state().asleep] == names[1:]
    assert sleeping.keep_asleep(0) == (names[1],) and sleeping.state().asleep == ()
