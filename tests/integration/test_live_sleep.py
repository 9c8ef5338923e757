"""The asleep tier live on loopback (issue #33): workers put to sleep in a lull and woken for a burst.

The demo run replays a synthetic trace (Azure CSV format, Poisson arrivals at a piecewise-linear
rate, seed 0): a quiet start, a ramp to a busy phase, a lull, then the same ramp to the same busy
phase. The workers cold-start in 7 s and wake in 1 s, so the policy's cold-start bound holds
replicas for the rise it saw within a cold start while its wake bound needs few of them running:
the spare ones sleep. The test checks that replicas sleep in the lull and are woken for the burst,
at most 1 % of requests break the TTFT SLO and none fails, and that the run's ledger shows a drain
(its start, its end: drained to zero, then slept) for every sleep.

The fault tests drive the actuator under steady load through the router: a wake that fails (500)
or never completes is replaced by a cold start, a worker still asleep (its ``/healthz`` says 200, as
vLLM's ``/health`` does) is never counted ready nor routed, and no request fails.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from ebb.actuate.local import EbbWorkerLauncher, LocalActuator
from ebb.config.tiers import SleepTier
from ebb.demo.loadgen import LoadGenerator
from ebb.demo.router import Router
from ebb.demo.stack import DemoSettings, LiveDemo
from ebb.ledger import SqliteLedger
from ebb.model.drains import DrainEnd, DrainEvent, DrainStart, drain_of
from ebb.model.ids import DecisionId, TraceName
from ebb.model.observation import ScaleRequest
from ebb.model.trace import RequestTrace
from tests.integration.azure_csv import write_azure_trace

pytestmark = pytest.mark.slow

LULL_THEN_BURST = ((0, 2), (8, 2), (14, 24), (24, 24), (26, 0.2), (60, 0.2), (66, 24), (74, 24))
"""(trace s, requests/s) points of the demo run's rate: the lull is 26-60 s, the burst ramps from 60 s."""


def test_a_live_run_puts_workers_to_sleep_in_a_lull_and_wakes_them_for_the_burst(tmp_path: Path) -> None:
    length_s = write_azure_trace(tmp_path / "lull-then-burst.csv", LULL_THEN_BURST)
    asleep_at: list[tuple[float, int]] = []  # (trace s, replicas asleep) at each cycle
    start = time.monotonic()

    def each(out: object, demo: LiveDemo) -> None:
        if demo.actuator is not None and demo.loadgen is not None:
            asleep_at.append((time.monotonic() - start, len(demo.actuator.state().asleep)))

    settings = DemoSettings(minutes=length_s / 60, trace=str(tmp_path / "lull-then-burst.csv"), start_s=0,
                            time_scale=1.0, source="agents", initial=4, max_replicas=8, warmup_s=6.0,
                            policy="ebb:profile=balanced,warmup_s=12", workdir=tmp_path, report=None,
                            tier=SleepTier(wake_s=1.0, max_replicas=4))
    result = LiveDemo(settings, on_cycle=each).run()
    card = result.policy_run.scorecard
    assert result.sleep is not None
    assert result.sleep.sleeps >= 1 and result.sleep.wakes >= 1 and result.sleep.failed_wakes == 0, result.sleep
    assert max(n for _, n in asleep_at) >= 1
    assert asleep_at[-1][1] < max(n for _, n in asleep_at)  # the burst woke sleepers
    assert result.load.failed == 0
    assert card.slo_violation_pct <= 1.0, card.slo_violation_pct
    with SqliteLedger(tmp_path / "ledger.sqlite", read_only=True) as led:
        drains = [e for c in led.cycles() if (e := drain_of(c)) is not None]
    slept = [e for e in drains if isinstance(e, DrainEnd) and (e.outcome, e.then) == ("drained", "slept")]
    assert len(slept) == result.sleep.sleeps, drains
    starts = {e.drain_id: e for e in drains if isinstance(e, DrainStart)}
    assert all(e.drain_id in starts and starts[e.drain_id].decision_id.startswith(settings.run_id) for e in slept)


def steady_load(url: str, seconds: float) -> LoadGenerator:
    """20 requests/s of 256 prompt and 100 output tokens: several in flight on every worker."""
    n = int(20 * seconds)
    trace = RequestTrace(TraceName("steady"), np.arange(n) / 20.0, np.full(n, 256, dtype=np.int64),
                         np.full(n, 100, dtype=np.int64))
    gen = LoadGenerator(url, trace)
    gen.start()
    return gen


@pytest.mark.parametrize("fault", ["error", "hang"])
def test_a_failing_wake_falls_back_to_a_cold_start_and_no_request_fails(fault: str) -> None:
    tier = SleepTier(wake_s=0.5, max_replicas=2)
    launcher = EbbWorkerLauncher(warmup_s=0.5, speed=10.0, wake_s=tier.wake_s, wake_fails=fault)
    told: list[DrainEvent] = []
    with Router(queue_timeout_s=60.0) as router, \
            LocalActuator(router, initial=3, max_batch=4, launcher=launcher, tier=tier) as act:
        act.observe_drains(told.append)
        act.wait_ready()
        gen = steady_load(router.url, (tier.wake_deadline_s if fault == "hang" else 0.0) + 10.0)
        act.apply(DecisionId("down"), ScaleRequest(1))
        deadline = time.monotonic() + 30.0
        while len(act.state().asleep) < 2 or act.state().draining:
            assert time.monotonic() < deadline, act.state()
            time.sleep(0.05)
        sleepers = {r.name for r in act.state().asleep}
        ends = [e for e in told if isinstance(e, DrainEnd)]
        assert {e.worker for e in ends} == sleepers and {(e.outcome, e.then) for e in ends} == {("drained", "slept")}
        assert {e.decision_id for e in told} == {"down"} and len([e for e in told if isinstance(e, DrainStart)]) == 2
        act.apply(DecisionId("up"), ScaleRequest(3))
        # until the fallback: a sleeper still asleep (health 200) is never counted ready nor routed
        while act.sleep_counts().failed_wakes < 2:
            st = act.state()
            assert not any(r.ready_s is not None for r in st.replicas if r.name in sleepers)
            assert not sleepers & {w["name"] for w in router.workers()}
            assert time.monotonic() < deadline + tier.wake_deadline_s + 10.0, act.sleep_counts()
            time.sleep(0.05)
        st = act.wait_ready(timeout_s=30.0)
        assert st.spec_replicas == 3 and not sleepers & {r.name for r in st.replicas} and st.asleep == ()
        assert act.sleep_counts().wakes == 0
        assert gen.wait(timeout_s=120.0)
        res = gen.results()
    assert res.failed == 0 and res.ok.all()
