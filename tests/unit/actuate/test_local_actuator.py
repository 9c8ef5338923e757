"""LocalActuator with real worker processes behind a real router: scale up and down under load
with zero failures, idempotency in memory and on disk, victims, targets file, no orphans."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import pytest

from ebb.actuate.base import Actuator
from ebb.actuate.local import LocalActuator
from ebb.errors import ConfigError, InputError, TransientError
from ebb.demo.loadgen import LoadGenerator
from ebb.demo.router import Router
from ebb.model.ids import DecisionId, ReplicaId, TraceName
from ebb.model.observation import ScaleRequest
from ebb.model.trace import RequestTrace



def local(router: Router, **kw: Any) -> LocalActuator:
    """Fast workers: warm after 0.5 s, ten times the H200 model's speed, 4 slots each."""
    return LocalActuator(router, **{"warmup_s": 0.5, "speed": 10.0, "max_batch": 4, **kw})


@pytest.fixture
def router() -> Iterator[Router]:
    with Router(queue_timeout_s=60.0) as r:
        yield r


def gone(pid: int) -> bool:
    try:
        return bool(psutil.Process(pid).status() == psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return True


def test_scaling_up_then_down_under_load_fails_no_request(router: Router) -> None:
    n = 240  # 40 requests/s for 6 s, each ≈ 80 ms of decode at speed 10: several always in flight
    trace = RequestTrace(TraceName("steady"), np.arange(n) / 40.0, np.full(n, 256, dtype=np.int64),
                         np.full(n, 200, dtype=np.int64))
    with local(router, initial=1) as act:
        act.wait_ready()
        gen = LoadGenerator(router.url, trace)
        gen.start()
        up = act.apply(DecisionId("up"), ScaleRequest(3))
        assert up.applied and up.added == ("worker-1", "worker-2")
        act.wait_ready(timeout_s=60)
        assert sorted(w["name"] for w in router.workers()) == ["worker-0", "worker-1", "worker-2"]
        deadline = time.monotonic() + 30
        while not all(w["inflight"] > 0 for w in router.workers()):
            assert time.monotonic() < deadline, "traffic never reached every worker"
            time.sleep(0.01)
        down = act.apply(DecisionId("down"), ScaleRequest(1))
        assert down.removed == ("worker-2", "worker-1")
        assert [r.name for r in act.state().replicas] == ["worker-0"]
        act.wait_idle(timeout_s=60)
        assert gen.wait(timeout_s=120)
        res = gen.results()
    assert len(res.ok) == n
    assert res.failed == 0, np.unique(res.status, return_counts=True)


def test_a_repeated_decision_id_changes_nothing(router: Router) -> None:
    with local(router, initial=1) as act:
        assert isinstance(act, Actuator)
        first = act.apply(DecisionId("d1"), ScaleRequest(2))
        before = act.state()
        again = act.apply(DecisionId("d1"), ScaleRequest(3))
        assert not again.applied and (again.replicas_after, again.added) == (first.replicas_after, first.added)
        assert act.state() == before and len(act.pids()) == 2


def test_applied_ids_survive_a_new_actuator_through_the_state_file(router: Router, tmp_path: Path) -> None:
    state = tmp_path / "actuator.json"
    with local(router, initial=1, state_file=state) as act:
        act.apply(DecisionId("d1"), ScaleRequest(2))
    with local(router, initial=1, state_file=state) as act:
        again = act.apply(DecisionId("d1"), ScaleRequest(2))
        assert not again.applied and again.added == ("worker-1",)
        assert act.state().spec_replicas == 1  # processes are not restored: a restart starts from `initial`


def test_worker_names_are_never_reused_by_a_later_actuator_on_the_same_state_file(
        router: Router, tmp_path: Path) -> None:
    state = tmp_path / "actuator.json"
    with local(router, initial=2, state_file=state) as act:
        act.apply(DecisionId("up"), ScaleRequest(3))  # worker-0..2
    with local(router, initial=2, state_file=state) as act:
        assert [r.name for r in act.state().replicas] == ["worker-3", "worker-4"]
    # A file written before next_id was kept still reads (as 0).
    doc = json.loads(state.read_text())
    assert doc["next_id"] == 5
    del doc["next_id"]
    state.write_text(json.dumps(doc))
    with local(router, initial=1, state_file=state) as act:
        assert [r.name for r in act.state().replicas] == ["worker-0"]
        assert not act.apply(DecisionId("up"), ScaleRequest(3)).applied, "its applied ids still count"


def test_a_corrupt_state_file_is_refused_with_its_path(router: Router, tmp_path: Path) -> None:
    state = tmp_path / "actuator.json"
    state.write_text("{not json")
    with pytest.raises(InputError, match="actuator.json"):
        local(router, initial=0, state_file=state)


def test_named_victims_go_first_and_unknown_ones_are_ignored(router: Router) -> None:
    with local(router, initial=3) as act:
        act.wait_ready()
        res = act.apply(DecisionId("v"), ScaleRequest(1, victims=(ReplicaId(99), ReplicaId(0))))
        assert res.removed == ("worker-0", "worker-2")
        st = act.state()
        assert [r.replica for r in st.replicas] == [ReplicaId(1)] and st.draining in (0, 1, 2)
        act.wait_idle()
        assert [w["name"] for w in router.workers()] == ["worker-1"]


def test_a_starting_replica_is_terminated_not_drained(router: Router) -> None:
    with LocalActuator(router, initial=0, warmup_s=60.0, speed=10.0) as act:
        act.apply(DecisionId("up"), ScaleRequest(1))
        [pid] = act.pids()
        assert act.state().replicas[0].ready_s is None
        act.apply(DecisionId("down"), ScaleRequest(0))
        act.wait_idle(timeout_s=30)
        assert gone(pid) and router.workers() == []


def test_close_leaves_no_worker_process_behind(router: Router) -> None:
    act = local(router, initial=2)
    act.apply(DecisionId("up"), ScaleRequest(3))
    pids = act.pids()
    assert len(pids) == 3 and all(psutil.Process(p).is_running() for p in pids)
    me = psutil.Process()
    assert {c.pid for c in me.children()} >= set(pids)
    act.close()
    assert all(gone(p) for p in pids)
    assert not {c.pid for c in me.children() if c.status() != psutil.STATUS_ZOMBIE} & set(pids)
    act.close()  # idempotent


def test_the_targets_file_lists_ready_and_draining_workers(router: Router, tmp_path: Path) -> None:
    targets = tmp_path / "targets.json"
    with local(router, initial=2, targets_file=targets) as act:
        st = act.wait_ready()
        doc = json.loads(targets.read_text())
        assert doc == [{"targets": [r.endpoint.removeprefix("http://") for r in st.replicas],
                        "labels": {"job": "ebb-worker"}}]
        act.apply(DecisionId("down"), ScaleRequest(1))
        act.wait_idle()
        deadline = time.monotonic() + 10
        while len(json.loads(targets.read_text())[0]["targets"]) != 1:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert json.loads(targets.read_text())[0]["targets"] == [st.replicas[0].endpoint.removeprefix("http://")]
    assert json.loads(targets.read_text())[0]["targets"] == []


def test_replicas_get_increasing_ids_names_and_round_robin_zones(router: Router) -> None:
    with local(router, initial=2, zones=("x", "y")) as act:
        act.apply(DecisionId("down"), ScaleRequest(1))
        act.apply(DecisionId("up"), ScaleRequest(3))
        st = act.state()
        assert [(r.replica, r.name, r.zone) for r in st.replicas] == [
            (0, "worker-0", "x"), (2, "worker-2", "x"), (3, "worker-3", "y")]
        assert all(r.endpoint.startswith("http://127.0.0.1:") for r in st.replicas)


def test_an_interpreter_that_cannot_start_is_a_config_error(router: Router) -> None:
    with local(router, initial=0, python="/nonexistent/python") as act:
        with pytest.raises(ConfigError, match="/nonexistent/python"):
            act.apply(DecisionId("up"), ScaleRequest(1))
        assert act.state().spec_replicas == 0
        assert act.apply(DecisionId("up"), ScaleRequest(0)).applied is False


def test_a_worker_that_exits_before_listening_is_a_transient_error(router: Router, tmp_path: Path) -> None:
    fake_python = tmp_path / "python"
    fake_python.write_text("#!/bin/sh\nexit 3\n")
    fake_python.chmod(0o755)
    with local(router, initial=0, python=str(fake_python)) as act:
        with pytest.raises(TransientError, match="exited with 3"):
            act.apply(DecisionId("up"), ScaleRequest(2))
        assert act.state().spec_replicas == 0 and act.pids() == []
