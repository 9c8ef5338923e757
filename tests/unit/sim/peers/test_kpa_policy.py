"""The ``kpa`` policy: Knative's documented rules as properties, and its behaviour over observations."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ebb.config.policy_specs import PolicySpecItem
from ebb.errors import ConfigError
from ebb.model.ids import ReplicaId
from ebb.model.observation import Observation, PodView
from ebb.sim.peers import kpa
from ebb.sim.peers.kpa_core import KpaSpec, KpaState, kpa_initial_state, kpa_scale
from ebb.sim.policy_context import PolicyContext
from ebb.sim.settings import SimSettings

CTX = PolicyContext(SimSettings(), np.array([1, 4, 8, 8, 2], dtype=np.int64))  # oracle peak 8


def _item(**params: str) -> PolicySpecItem:
    return PolicySpecItem("kpa", tuple(params.items()))


def _obs(t_s: float, replicas: int, inflight: float) -> Observation:
    pods = tuple(PodView(ReplicaId(i), 0.0, 0.0, 0.5, inflight / max(replicas, 1), 1.0) for i in range(replicas))
    return Observation(t_s, replicas, replicas, pods, 1.0, inflight, 0.0)


def _run(policy: kpa.KpaPolicy, load: list[float], start: int) -> list[int]:
    """Apply each second's decision at once (as the engines do); the fleet after each second."""
    n, out = start, []
    for t, v in enumerate(load, start=1):
        n = policy.decide(_obs(float(t), n, v)).to_replicas
        out.append(n)
    return out


# --- documented rules of the decider, over random tick sequences -----------------------------------

ticks = st.lists(st.tuples(st.floats(0, 2000), st.floats(0, 2000), st.integers(0, 200)), min_size=1, max_size=40)
specs = st.builds(KpaSpec, target_value=st.floats(0.5, 100), max_scale_up_rate=st.floats(1.1, 1000),
                  max_scale_down_rate=st.floats(1.1, 10), panic_threshold_ratio=st.floats(1.1, 10),
                  stable_window_s=st.sampled_from([6.0, 60.0, 120.0]),
                  scale_down_delay_s=st.sampled_from([0.0, 0.0, 10.0, 60.0]))


@settings(max_examples=200, deadline=None)
@given(spec=specs, seq=ticks, start=st.integers(0, 50))
def test_scale_down_per_tick_is_bounded_by_max_scale_down_rate(spec: KpaSpec, seq: list[tuple[float, float, int]],
                                                               start: int) -> None:
    state = kpa_initial_state(spec, start, 0.0)
    for k, (stable, panic, ready) in enumerate(seq):
        got, state = kpa_scale(spec, state, (stable, panic), ready, 2.0 * (k + 1))
        assert got is not None
        assert got >= int(max(1, ready) // spec.max_scale_down_rate)  # floor(ready / rate)


@settings(max_examples=200, deadline=None)
@given(spec=specs, seq=ticks, start=st.integers(0, 50))
def test_panic_mode_never_scales_down(spec: KpaSpec, seq: list[tuple[float, float, int]], start: int) -> None:
    state: KpaState = kpa_initial_state(spec, start, 0.0)
    prev: int | None = None
    for k, (stable, panic, ready) in enumerate(seq):
        was_panicking = state.panic_time_s is not None
        got, state = kpa_scale(spec, state, (stable, panic), ready, 2.0 * (k + 1))
        assert got is not None
        if was_panicking and state.panic_time_s is not None and prev is not None and spec.scale_down_delay_s == 0:
            assert got >= prev
        prev = got


@settings(max_examples=100, deadline=None)
@given(load=st.lists(st.floats(0, 3000), min_size=1, max_size=120), mn=st.integers(0, 3), mx=st.integers(3, 30),
       target=st.sampled_from(["1", "10", "100"]))
def test_policy_never_leaves_min_max(load: list[float], mn: int, mx: int, target: str) -> None:
    p = kpa.build(_item(target=target, min=str(mn), max=str(mx)), CTX)
    for n in _run(p, load, start=min(mx, 8)):
        assert (mn <= n <= mx) or (mn == 0 and n in (0, 1))


# --- the policy over a fleet ---------------------------------------------------------------------

def test_initial_fleet_is_the_oracle_peak_within_max() -> None:
    p = kpa.build(_item(), CTX)
    d = p.decide(Observation(0.0, 0, 0, (), None, None, None))
    assert d.to_replicas == 8 and p.interval_s == 1.0
    assert kpa.build(_item(max="5"), CTX).decide(Observation(0.0, 0, 0, (), None, None, None)).to_replicas == 5


def test_decides_on_the_two_second_tick_and_holds_between() -> None:
    p = kpa.build(_item(target="10"), CTX)
    first = p.decide(_obs(1.0, 8, 800.0))
    between = p.decide(_obs(2.0, first.to_replicas, 800.0))
    assert between.to_replicas == first.to_replicas and "between ticks" in between.reasons[0]


def test_starts_in_panic_over_a_warm_fleet_then_settles_on_target() -> None:
    # 140 requests in flight, target 100 x 0.7 = 70 per pod -> 2 pods once out of panic.
    p = kpa.build(_item(), CTX)
    fleet = _run(p, [140.0] * 200, start=8)
    assert fleet[:59] == [8] * 59  # a new decider holds the current scale in panic for a stable window
    assert fleet[-1] == 2
    assert all(b >= a // 2 for a, b in zip(fleet, fleet[1:]))  # max-scale-down-rate 2 per tick


def test_surge_enters_panic_and_scales_up_within_a_tick() -> None:
    p = kpa.build(_item(target="10", max="100"), CTX)  # 7 per pod
    fleet = _run(p, [14.0] * 120 + [700.0] * 10, start=2)
    assert fleet[119] == 2
    assert max(fleet[120:]) >= 50  # the 6 s panic window sees the surge at once


def test_scale_to_zero_after_grace_period_with_min_zero() -> None:
    p = kpa.build(_item(min="0"), CTX)
    fleet = _run(p, [0.0] * 200, start=1)
    first_zero = fleet.index(0)
    assert fleet[first_zero - 1] == 1 and all(n == 0 for n in fleet[first_zero:])
    assert first_zero >= 30  # the grace period
    assert kpa.build(_item(), CTX) is not None and min(_run(kpa.build(_item(), CTX), [0.0] * 200, 1)) == 1


@pytest.mark.parametrize("params", [{"target": "0"}, {"utilization": "1.5"}, {"max_scale_down_rate": "1"},
                                    {"stable_window": "5"}, {"panic_threshold": "1.0"}, {"min": "9", "max": "3"},
                                    {"aggregation": "median"}, {"tick": "1"}])
def test_bad_knobs_raise_config_error_naming_the_spec(params: dict[str, str]) -> None:
    with pytest.raises(ConfigError, match="kpa"):
        kpa.build(_item(**params), CTX)


def test_help_is_one_line_and_keys_cover_the_sweep_knob() -> None:
    assert "\n" not in kpa.HELP and "target" in kpa.KEYS


def test_observe_then_decide_records_one_scrape() -> None:
    once, twice = kpa.build(_item(target="10"), CTX), kpa.build(_item(target="10"), CTX)
    for t in range(1, 80):
        o = _obs(float(t), 8, 280.0)
        twice.observe(o)
        a, b = once.decide(o), twice.decide(o)
        assert a.to_replicas == b.to_replicas
