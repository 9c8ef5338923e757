"""static-sleep: the static fleet with a hand-made idle timer (sleep after idle_s, wake on work)."""

from __future__ import annotations

import pytest

from ebb.sim.baselines.static_sleep import StaticSleepPolicy
from ebb.sim.policy import Observation
from ebb.sim.sleepers import Sleeps


def obs(t: float, spec: int, inflight: float, queued: float = 0.0) -> Observation:
    return Observation(t, spec, spec, (), None, inflight, queued)


def test_the_first_answer_is_the_whole_fleet_awake() -> None:
    assert StaticSleepPolicy(6).decide(obs(0.0, 0, 0.0)).to_replicas == 6


def test_replicas_without_work_for_idle_s_sleep_and_work_wakes_them_at_once() -> None:
    pol = StaticSleepPolicy(6, idle_s=60.0)
    pol.decide(obs(0.0, 0, 0.0))
    spec, sizes = 6, []
    for t in range(1, 200):
        work = 5.0 if t < 30 else (2.0 if t < 150 else 4.5)
        spec = pol.decide(obs(float(t), spec, work)).to_replicas
        sizes.append(spec)
    assert sizes[:59] == [6] * 59  # nobody idle for 60 s yet
    assert sizes[95] == 2  # 60 s after the last time 5 were busy, 3 + 1 of them sleep
    assert sizes[-1] == 5  # 4.5 requests at work wake three at once


def test_it_never_asks_beyond_its_fleet_and_keeps_every_sleeper() -> None:
    pol = StaticSleepPolicy(4, idle_s=10.0)
    pol.decide(obs(0.0, 0, 0.0))
    assert pol.decide(obs(1.0, 4, 40.0, queued=9.0)).to_replicas == 4
    assert pol.asleep_wanted(1) == 3 and isinstance(pol, Sleeps)


def test_a_fleet_or_timer_that_cannot_work_is_refused() -> None:
    with pytest.raises(ValueError):
        StaticSleepPolicy(0)
    with pytest.raises(ValueError):
        StaticSleepPolicy(3, idle_s=0.0)
