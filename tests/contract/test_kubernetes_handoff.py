"""The Kubernetes actuator in hand-off mode on the fake API server: everything act mode does but /scale.

The victims' deletion costs and the decision's intent annotation are written as in act mode; the
replica count goes to the board (what KEDA's scaler serves), and the HPA's write — played here by
``FakeKubeApiServer.set_replicas``, "another writer" — moves the Deployment.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("kubernetes")

from kubernetes import client  # noqa: E402

from ebb.decide.handoff import HandoffBoard  # noqa: E402
from ebb.actuate.kubernetes import DECISION_ANNOTATION, DELETION_COST_ANNOTATION, KubernetesActuator  # noqa: E402
from ebb.config.tiers import parse_tier  # noqa: E402
from ebb.errors import ConfigError  # noqa: E402
from ebb.model.ids import DecisionId  # noqa: E402
from ebb.model.observation import ScaleRequest  # noqa: E402
from ebb.testing.fake_kube import FakeKubeApiServer  # noqa: E402

NS, NAME = "serving", "llm"
T = f"{NS}/{NAME}"
SCALE = f"/apis/apps/v1/namespaces/{NS}/deployments/{NAME}/scale"


@pytest.fixture
def fake() -> Iterator[FakeKubeApiServer]:
    with FakeKubeApiServer() as server:
        server.add_node("node-a", "zone-a")
        server.add_deployment(NAME, 5, namespace=NS)
        yield server


@pytest.fixture
def api(fake: FakeKubeApiServer) -> Iterator[Any]:
    api_client = client.ApiClient(fake.configuration())
    yield api_client
    api_client.close()


def test_a_handed_off_scale_down_marks_its_victims_and_writes_no_scale(fake: FakeKubeApiServer, api: Any) -> None:
    board = HandoffBoard()
    act = KubernetesActuator(NS, NAME, api_client=api, rng=random.Random(7), handoff=board)
    assert act.state().spec_replicas == 5
    res = act.apply(DecisionId("r-1"), ScaleRequest(3))
    assert res.applied and (res.replicas_before, res.replicas_after) == (5, 3)
    assert fake.calls("PATCH", SCALE) == []  # the HPA writes /scale, not Ebb
    marked = [n for n in fake.pod_names(NS) if (fake.pod(n, NS) or {})["metadata"].get("annotations", {})
              .get(DELETION_COST_ANNOTATION)]
    assert len(marked) == 2
    dep = fake.deployments[(NS, NAME)]
    assert dep["metadata"]["annotations"][DECISION_ANNOTATION] == "r-1"
    reading = board.reading(T)
    assert reading is not None and (reading.desired_replicas, reading.current_replicas) == (3, 5)
    assert act.state().spec_replicas == 3  # pending: the policy sees the fleet it asked for
    fake.set_replicas(NAME, 3, namespace=NS)  # the HPA applies Ebb's number
    assert act.state().spec_replicas == 3
    assert set(fake.pod_names(NS, terminating=False)).isdisjoint(marked)  # the marked pods went


def test_a_scale_up_while_a_scale_down_is_pending_is_handed_off_too(fake: FakeKubeApiServer, api: Any) -> None:
    board = HandoffBoard()
    act = KubernetesActuator(NS, NAME, api_client=api, handoff=board)
    act.apply(DecisionId("r-1"), ScaleRequest(4))
    res = act.apply(DecisionId("r-2"), ScaleRequest(5))
    assert res.applied and (res.replicas_before, res.replicas_after) == (4, 5)
    reading = board.reading(T)
    assert reading is not None and reading.desired_replicas == 5
    assert fake.calls("PATCH", SCALE) == []


def test_a_hand_off_cannot_keep_an_asleep_tier(api: Any) -> None:
    with pytest.raises(ConfigError, match="asleep tier"):
        KubernetesActuator(NS, NAME, api_client=api, handoff=HandoffBoard(), tier=parse_tier("asleep:wake_s=2,max=2"))
