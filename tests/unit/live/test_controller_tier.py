"""The live controller with an asleep tier: the policy sees the fleet's sleepers, gets the tier's wake
time and size, and after each decision acted on the actuator keeps only the sleepers it counts on."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import pytest

from ebb.actuate.base import ActuationResult, FleetState, ReplicaState, SleepingActuator
from ebb.config.tiers import SleepTier
from ebb.decide.base import Sleeps
from ebb.decide.policy import EbbPolicy
from ebb.errors import TransientError
from ebb.live.policy_spec import build_live_policy
from ebb.model.decision import Decision
from ebb.model.ids import DecisionId, ReplicaId
from ebb.model.observation import Observation, ScaleRequest
from ebb.model.spans import NO_SPANS, Spans
from ebb.testing.fakes import FakeActuator

from tests.unit.live.test_controller import Clock, ReactingPolicy, ScriptedPolicy, make


class SleepyActuator(FakeActuator):
    """The fake actuator with an asleep tier: victims sleep while fewer than ``tier.max_replicas`` do,
    scale-ups wake the newest sleepers first; ``keep_asleep`` calls are recorded."""

    def __init__(self, initial: int, tier: SleepTier | None, **kw: Any) -> None:
        super().__init__(initial, **kw)
        self.tier = tier
        self.sleepers: list[ReplicaState] = []
        self.kept: list[int | None] = []
        self.fail_keep = False

    def state(self) -> FleetState:
        return replace(super().state(), asleep=tuple(self.sleepers))

    def apply(self, decision_id: DecisionId, request: ScaleRequest) -> ActuationResult:
        before = {r.name: r for r in super().state().replicas}
        res = super().apply(decision_id, request)
        if res.applied and self.tier is not None:
            room = self.tier.max_replicas - len(self.sleepers)
            self.sleepers += [before[n] for n in res.removed][:max(0, room)]
            woken = min(len(res.added), len(self.sleepers))
            del self.sleepers[len(self.sleepers) - woken:]
        return res

    def keep_asleep(self, keep: int | None) -> tuple[str, ...]:
        self.kept.append(keep)
        if self.fail_keep:
            raise TransientError("the API server is busy")
        gone = self.sleepers[: max(0, len(self.sleepers) - keep)] if keep is not None else []
        self.sleepers = self.sleepers[len(gone):]
        return tuple(r.name for r in gone)


@dataclass
class SleepingPolicy(ScriptedPolicy):
    """A scripted policy that sleeps: it counts on ``cold`` replicas running or asleep."""

    cold: int = 4
    sleeps: bool = True
    seen_asleep: list[int] = field(default_factory=list)

    def decide(self, obs: Observation, *, spans: Spans = NO_SPANS) -> Decision:
        self.seen_asleep.append(obs.asleep_replicas)
        return super().decide(obs, spans=spans)

    def asleep_wanted(self, running: int) -> int | None:
        return max(0, self.cold - running)


@dataclass
class SleepingReactingPolicy(ReactingPolicy):
    """A reacting policy that sleeps, recording what its fast path saw asleep; it counts on 5 replicas."""

    sleeps: bool = True
    reacted_asleep: list[int] = field(default_factory=list)

    def react(self, obs: Observation, *, spans: Spans = NO_SPANS) -> Decision | None:
        self.reacted_asleep.append(obs.asleep_replicas)
        return super().react(obs, spans=spans)

    def asleep_wanted(self, running: int) -> int | None:
        return max(0, 5 - running)


def test_the_policy_sees_the_sleepers_and_the_actuator_keeps_those_it_counts_on() -> None:
    clock = Clock()
    act = SleepyActuator(4, SleepTier(wake_s=2, max_replicas=4), clock=clock)
    assert isinstance(act, SleepingActuator)
    pol = SleepingPolicy(lambda o: 1, victims=None, cold=3)
    c = make(pol, clock, actuator=act)
    out = c.cycle()  # 4 -> 1: three victims sleep; the policy counts on 3 - 1 = 2 of them
    assert out.acted and act.kept == [2] and len(act.sleepers) == 2
    clock.t += 1.0
    pol.want = lambda o: o.spec_replicas
    assert c.cycle().action == "hold"  # a hold is a decision too
    assert pol.seen_asleep == [0, 2] and act.kept == [2, 2]


def test_a_fast_path_scale_up_sees_the_sleepers_and_is_followed_by_keep_asleep() -> None:
    clock = Clock()
    act = SleepyActuator(2, SleepTier(wake_s=2, max_replicas=4), clock=clock)
    act.sleepers = [ReplicaState(ReplicaId(90 + i), f"sleeper-{i}", clock.t, None) for i in range(3)]
    pol = SleepingReactingPolicy(lambda o: o.spec_replicas, wish=lambda o: 4)
    c = make(pol, clock, actuator=act)
    c.cycle()
    clock.t += 0.1
    out = c.react()
    assert out is not None and out.fast and out.acted and pol.reacted_asleep == [3]
    # 2 -> 4 woke the two newest sleepers; the policy counts on 5 - 4 = 1 more
    assert [r.name for r in act.state().asleep] == ["sleeper-0"] and act.kept == [3, 1]


@pytest.mark.parametrize("case", ["recommend mode", "a policy that does not sleep", "an actuator without a tier"])
def test_nothing_is_released_in_recommend_mode_for_a_plain_policy_or_without_a_tier(case: str) -> None:
    clock = Clock()
    act = SleepyActuator(4, None if case == "an actuator without a tier" else SleepTier(), clock=clock)
    pol = ScriptedPolicy(lambda o: 2) if case == "a policy that does not sleep" else SleepingPolicy(lambda o: 2)
    c = make(pol, clock, actuator=act, mode="recommend" if case == "recommend mode" else "act")
    c.cycle()
    assert act.kept == []


def test_a_release_that_fails_is_logged_and_never_fails_the_cycle(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    act = SleepyActuator(4, SleepTier(), clock=clock)
    act.fail_keep = True
    c = make(SleepingPolicy(lambda o: 2, cold=2), clock, actuator=act)
    out = c.cycle()
    assert out.acted and out.action == "scale_down" and act.kept == [0]
    assert any("could not release sleepers" in r.getMessage() for r in caplog.records)


def test_the_live_policy_gets_the_tiers_wake_time_and_size_as_the_simulators_does() -> None:
    tiered = build_live_policy("ebb", slo_ttft_ms=2000, slo_e2e_ms=60000, initial=2,
                               tier=SleepTier(wake_s=2.5, max_replicas=4))
    plain = build_live_policy("ebb", slo_ttft_ms=2000, slo_e2e_ms=60000, initial=2)
    assert isinstance(tiered, EbbPolicy) and isinstance(plain, EbbPolicy) and isinstance(tiered, Sleeps)
    assert (tiered.wake_s, tiered.sleep_max) == (2.5, 4) and (plain.wake_s, plain.sleep_max) == (None, 0)


def test_the_policy_sees_the_slowest_wake_the_actuator_measured() -> None:
    clock = Clock()

    class Measured(SleepyActuator):
        def state(self) -> FleetState:
            return replace(super().state(), wake_s_seen=4.5)

    seen: list[float | None] = []

    class Watching(SleepingPolicy):
        def decide(self, obs: Observation, *, spans: Spans = NO_SPANS) -> Decision:
            seen.append(obs.wake_s_seen)
            return super().decide(obs, spans=spans)

    c = make(Watching(lambda o: o.spec_replicas), clock, actuator=Measured(3, SleepTier(wake_s=2, max_replicas=4),
                                                                            clock=clock))
    c.cycle()
    assert seen == [4.5]
