"""LocalActuator with an asleep tier, on real worker processes behind a real router: drained victims
sleep while there is room, scale-ups wake the newest sleeper first, a woken worker rejoins only once
awake, a failed or hung wake falls back to a cold start, keep_asleep and the TTL release sleepers."""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest

from ebb.actuate.base import SleepingActuator
from ebb.actuate.local import EbbWorkerLauncher, Launch, LocalActuator
from ebb.actuate.local_sleep import SleepCounts
from ebb.config.tiers import SleepTier
from ebb.demo.llamacpp import LlamaServerLauncher
from ebb.demo.router import Router
from ebb.errors import ConfigError
from ebb.model.ids import DecisionId
from ebb.model.observation import ScaleRequest

OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def tiered(router: Router, tier: SleepTier, *, wake_fails: str = "none", **kw: Any) -> LocalActuator:
    """Fast workers (warm after 0.3 s, ten times the H200 model's speed) with vLLM's sleep endpoints."""
    launcher = EbbWorkerLauncher(warmup_s=0.3, speed=10.0, wake_s=tier.wake_s, wake_fails=wake_fails)
    return LocalActuator(router, **{"max_batch": 2, "launcher": launcher, "tier": tier, **kw})


@pytest.fixture
def router() -> Iterator[Router]:
    with Router(queue_timeout_s=30.0) as r:
        yield r


def until(what: Callable[[], bool], within_s: float = 30.0) -> None:
    """Wait for ``what``; fail after ``within_s`` (a hang guard, not a timing assertion)."""
    deadline = time.monotonic() + within_s
    while not what():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.05)


def is_sleeping(endpoint: str) -> bool:
    with OPENER.open(endpoint + "/is_sleeping", timeout=5) as resp:
        answer: bool = json.loads(resp.read())["is_sleeping"]
        return answer


def health(endpoint: str) -> int:
    with OPENER.open(endpoint + "/healthz", timeout=5) as resp:
        return int(resp.status)


def routed(router: Router) -> list[str]:
    return sorted(w["name"] for w in router.workers())


def test_drained_victims_sleep_while_fewer_than_max_sleep_and_the_rest_are_stopped(router: Router) -> None:
    with tiered(router, SleepTier(wake_s=0.2, max_replicas=1), initial=3) as act:
        assert isinstance(act, SleepingActuator)
        act.wait_ready()
        res = act.apply(DecisionId("down"), ScaleRequest(1))
        assert res.removed == ("worker-2", "worker-1")
        act.wait_idle()
        st = act.state()
        [sleeper] = st.asleep
        assert sleeper.name in res.removed and st.spec_replicas == 1 and routed(router) == ["worker-0"]
        assert is_sleeping(sleeper.endpoint)
        assert act.sleep_counts() == SleepCounts(sleeps=1)
        assert len(act.pids()) == 2  # the sleeper's process is kept, the other victim's is gone


def test_a_scale_up_wakes_the_newest_sleeper_first_and_cold_starts_the_rest(router: Router) -> None:
    with tiered(router, SleepTier(wake_s=0.2, max_replicas=4), initial=3) as act:
        act.wait_ready()
        act.apply(DecisionId("down-1"), ScaleRequest(2))  # worker-2 sleeps first
        act.wait_idle()
        act.apply(DecisionId("down-2"), ScaleRequest(1))  # then worker-1: the newest sleeper
        act.wait_idle()
        assert [r.name for r in act.state().asleep] == ["worker-2", "worker-1"]  # oldest sleeper first
        assert act.apply(DecisionId("up-1"), ScaleRequest(2)).added == ("worker-1",)
        assert [r.name for r in act.state().asleep] == ["worker-2"]
        assert act.apply(DecisionId("up-2"), ScaleRequest(4)).added == ("worker-2", "worker-3")
        st = act.wait_ready()
        assert [r.name for r in st.replicas] == ["worker-0", "worker-1", "worker-2", "worker-3"] and st.asleep == ()
        assert routed(router) == ["worker-0", "worker-1", "worker-2", "worker-3"]
        assert not any(is_sleeping(r.endpoint) for r in st.replicas)
        assert act.sleep_counts() == SleepCounts(sleeps=2, wakes=2)


def test_a_woken_worker_joins_the_router_only_once_it_reads_awake(router: Router) -> None:
    with tiered(router, SleepTier(wake_s=1.5, max_replicas=2), initial=2) as act:
        act.wait_ready()
        act.apply(DecisionId("down"), ScaleRequest(1))
        act.wait_idle()
        [sleeper] = act.state().asleep
        act.apply(DecisionId("up"), ScaleRequest(2))
        # (counted ready, routed, still asleep), read in that order each time: the worker never falls back
        # asleep once awake, so "ready or routed, then asleep" in one sample is the bug (no timing race).
        seen: list[tuple[bool, bool, bool]] = []
        while not seen or not seen[-1][0]:
            ready = act.state().ready_replicas == 2
            seen.append((ready, sleeper.name in routed(router), is_sleeping(sleeper.endpoint)))
            time.sleep(0.05)
        assert health(sleeper.endpoint) == 200
        assert seen[0][2], "the sleeper was awake before the scale-up asked for it"
        assert not any((ready or in_router) and asleep for ready, in_router, asleep in seen), seen
        assert sleeper.name in routed(router) and not is_sleeping(sleeper.endpoint)


@pytest.mark.parametrize("fault", ["error", "hang"])
def test_a_wake_that_fails_or_hangs_is_replaced_by_a_cold_start(router: Router, fault: str) -> None:
    tier = SleepTier(wake_s=0.2, max_replicas=2)
    with tiered(router, tier, wake_fails=fault, initial=2) as act:
        act.wait_ready()
        act.apply(DecisionId("down"), ScaleRequest(1))
        act.wait_idle()
        [sleeper] = act.state().asleep
        pid = act.pids()[-1]  # in service, then leaving (none), then asleep
        up = act.apply(DecisionId("up"), ScaleRequest(2))
        assert up.added == (sleeper.name,)
        # a sleeper still asleep is never counted ready, though its /healthz answers 200
        assert act.state().replicas[-1].ready_s is None and health(sleeper.endpoint) == 200
        st = act.wait_ready(timeout_s=tier.wake_deadline_s + 30.0)
        assert [r.name for r in st.replicas] == ["worker-0", "worker-2"] and st.asleep == ()
        assert routed(router) == ["worker-0", "worker-2"]
        assert act.sleep_counts() == SleepCounts(sleeps=1, failed_wakes=1)
        act.wait_idle()
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_keep_asleep_releases_the_oldest_sleepers_past_what_is_kept(router: Router) -> None:
    with tiered(router, SleepTier(wake_s=0.2, max_replicas=4), initial=4) as act:
        act.wait_ready()
        for n in (3, 2, 1):
            act.apply(DecisionId(f"down-{n}"), ScaleRequest(n))
            act.wait_idle()
        assert [r.name for r in act.state().asleep] == ["worker-3", "worker-2", "worker-1"]
        assert act.keep_asleep(None) == () and len(act.state().asleep) == 3
        assert act.keep_asleep(1) == ("worker-3", "worker-2")
        assert [r.name for r in act.state().asleep] == ["worker-1"]
        act.wait_idle()
        assert len(act.pids()) == 2 and act.sleep_counts() == SleepCounts(sleeps=3, released=2)


def test_a_sleeper_past_its_ttl_is_released(router: Router) -> None:
    with tiered(router, SleepTier(wake_s=0.2, max_replicas=2, ttl_s=0.5), initial=2) as act:
        act.wait_ready()
        act.apply(DecisionId("down"), ScaleRequest(1))
        until(lambda: act.sleep_counts().released == 1)
        act.wait_idle()
        assert act.state().asleep == () and len(act.pids()) == 1 and act.sleep_counts().sleeps == 1


def test_a_repeated_wake_decision_wakes_nothing_more(router: Router) -> None:
    with tiered(router, SleepTier(wake_s=0.2, max_replicas=4), initial=3) as act:
        act.wait_ready()
        act.apply(DecisionId("down"), ScaleRequest(1))
        act.wait_idle()
        first = act.apply(DecisionId("up"), ScaleRequest(2))
        again = act.apply(DecisionId("up"), ScaleRequest(3))
        assert not again.applied and again.added == first.added == ("worker-1",)
        assert [r.name for r in act.state().asleep] == ["worker-2"]


def test_without_a_tier_victims_are_stopped_and_nothing_sleeps(router: Router) -> None:
    with LocalActuator(router, initial=2, warmup_s=0.3, speed=10.0) as act:
        act.wait_ready()
        act.apply(DecisionId("down"), ScaleRequest(1))
        act.wait_idle()
        assert act.state().asleep == () and len(act.pids()) == 1 and act.sleep_counts() == SleepCounts()
        assert act.keep_asleep(0) == ()


@dataclass(frozen=True)
class Plain:
    api: str = "ebb"
    health_path: str = "/healthz"

    def launch(self, name: str, max_batch: int) -> Launch:
        raise AssertionError("never started")


@pytest.mark.parametrize("launcher", [Plain(), LlamaServerLauncher("/nonexistent/llama-server", Path("m.gguf"), Path("."))],
                         ids=["no sleep endpoints", "llama-server without --sleep-idle-seconds"])
def test_a_tier_on_workers_that_cannot_sleep_is_a_config_error(router: Router, launcher: Any) -> None:
    with pytest.raises(ConfigError, match="cannot sleep as started"):
        LocalActuator(router, initial=0, launcher=launcher, tier=SleepTier())
