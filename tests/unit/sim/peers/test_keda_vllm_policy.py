"""The ``keda-vllm`` policy: the recipe's documented rules as properties, and simple timelines."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ebb.config.policy_specs import PolicySpecItem
from ebb.errors import ConfigError
from ebb.model.ids import ReplicaId
from ebb.model.observation import Observation, PodView
from ebb.sim.baselines.hpa_behavior import ScalingPolicy
from ebb.sim.peers import keda_vllm
from ebb.sim.policy_context import PolicyContext
from ebb.sim.settings import SimSettings

CTX = PolicyContext(SimSettings(), np.array([8, 8], dtype=np.int64))
START = Observation(0.0, 0, 0, (), None, None, None)


def _item(**kw: object) -> PolicySpecItem:
    return PolicySpecItem("keda-vllm", tuple((k, str(v)) for k, v in kw.items()))


def _obs(t: float, n: int, waiting_total: float, *, qps: float = 0.0) -> Observation:
    share = waiting_total / n if n else 0.0
    pods = tuple(PodView(ReplicaId(i), -600.0, -500.0, None, None, None, waiting=share) for i in range(n))
    return Observation(t, n, n, pods, qps, waiting_total, waiting_total)


def _run(pol: keda_vllm.KedaVllmPolicy, waiting: list[float], *, qps: float = 0.0) -> list[tuple[float, int, int]]:
    """(t, from, to) per tick, the fleet following the policy at once."""
    n = pol.decide(START).to_replicas
    out = []
    for k, w in enumerate(waiting, start=1):
        t = k * pol.interval_s
        to = pol.decide(_obs(t, n, w, qps=qps)).to_replicas
        out.append((t, n, to))
        n = to
    return out


def test_defaults_match_the_recipe() -> None:
    pol = keda_vllm.build(_item(), CTX)
    assert (pol.polling_s, pol.cooldown_s, pol.interval_s, pol.min_replicas) == (15.0, 360.0, 15.0, 1)
    cfg = pol.hpa.config
    assert cfg.metric.source == "External" and cfg.metric.target_type == "AverageValue"
    assert cfg.metric.target == 5000 and cfg.min_replicas == 1 and cfg.max_replicas == 16
    assert cfg.behavior is not None and cfg.behavior.scale_down is not None
    down = cfg.behavior.scale_down
    assert down.stabilization_window_s == 300 and down.policies == (ScalingPolicy("Percent", 50, 60),)
    assert cfg.behavior.scale_up is None  # HPA defaults: 0 s window, max(4 pods, 100 %) per 15 s


def test_scales_up_to_waiting_over_threshold() -> None:
    pol = keda_vllm.build(_item(), CTX)
    tl = _run(pol, [60.0] * 4)
    # 8 replicas, 60 waiting / 5 = 12 wanted: one step (within 100 % / 15 s).
    assert tl[0][2] == 12 and all(to == 12 for _, _, to in tl)


def test_scale_down_waits_300_s_then_halves_at_most_per_minute() -> None:
    pol = keda_vllm.build(_item(), CTX)
    tl = _run(pol, [0.0] * 60)  # 15 min idle from 8 replicas
    downs = [(t, frm, to) for t, frm, to in tl if to < frm]
    assert downs[0][0] >= 300.0
    after = {t: to for t, _, to in tl}  # a change exactly 60 s old is outside the period (upstream)
    for t, _, to in downs:
        before = after.get(t - 60.0, 8)
        assert to >= math.ceil(before * 0.5)
    assert tl[-1][2] == 1


def test_scale_to_zero_after_cooldown_and_back_on_traffic() -> None:
    pol = keda_vllm.build(_item(min=0), CTX)
    n = pol.decide(START).to_replicas
    t, zero_at = 0.0, None
    while t < 1200.0 and zero_at is None:
        t += 15.0
        n2 = pol.decide(_obs(t, n, 0.0)).to_replicas
        if n2 == 0:
            zero_at = t
        n = n2
    # Never active since t=0 (LastActiveTime unset, initialCooldownPeriod 0): the first poll deactivates.
    assert zero_at == 15.0
    assert pol.decide(_obs(t + 15.0, 0, 0.0)).to_replicas == 0
    # Traffic arrives (keepalive trigger): activation to 1 at the next poll.
    assert pol.decide(_obs(t + 30.0, 0, 3.0, qps=0.5)).to_replicas == 1


def test_cooldown_runs_from_the_last_active_poll() -> None:
    pol = keda_vllm.build(_item(min=0), CTX)
    tl = _run(pol, [10.0] * 4 + [0.0] * 40)
    last_active = 4 * 15.0
    zero = [t for t, frm, to in tl if to == 0 and frm > 0]
    assert zero and zero[0] > last_active + 360.0 and zero[0] <= last_active + 360.0 + 15.0


def test_raw_recipe_query_fails_with_two_pods_and_holds() -> None:
    pol = keda_vllm.build(_item(query="raw"), CTX)
    assert all(to == 8 for _, _, to in _run(pol, [100.0] * 10))
    one = keda_vllm.build(_item(query="raw"), PolicyContext(SimSettings(), np.array([1], dtype=np.int64)))
    assert _run(one, [20.0])[0][2] == 4  # one series: 20 / 5 per replica


waits = st.lists(st.floats(0, 200), min_size=1, max_size=60)


@settings(max_examples=50, deadline=None)
@given(waits, st.integers(0, 3), st.integers(4, 12))
def test_count_stays_within_bounds(seq: list[float], mn: int, mx: int) -> None:
    pol = keda_vllm.build(_item(min=mn, max=mx), CTX)
    for _, frm, to in _run(pol, seq):
        if to != frm:
            assert (mn == 0 and to == 0) or max(mn, 1) <= to <= mx


def _recommendation(waiting: float, replicas: int) -> int:
    """The HPA's proposal for External AverageValue 5 (milli-units, 10 % tolerance)."""
    milli = int(round(waiting * 1000))
    if abs(milli / (5000 * replicas) - 1.0) <= 0.1:
        return replicas
    return math.ceil(milli / 5000)


@settings(max_examples=50, deadline=None)
@given(waits)
def test_scale_down_follows_the_highest_recommendation_of_the_last_300_s(seq: list[float]) -> None:
    pol = keda_vllm.build(_item(), CTX)
    tl = _run(pol, seq)
    for t, frm, to in tl:
        if to < frm:
            assert t >= 15.0 + 300.0  # the first sync seeds the window with the starting count
            for (t2, frm2, _), w2 in zip(tl, seq):
                if t - 300.0 < t2 <= t:
                    assert _recommendation(w2, frm2) <= to


def test_bad_knobs_name_the_spec() -> None:
    with pytest.raises(ConfigError, match="keda-vllm:down_percent=150"):
        keda_vllm.build(PolicySpecItem("keda-vllm", (("down_percent", "150"),)), CTX)
    with pytest.raises(ConfigError, match="min=5 exceeds max=2"):
        keda_vllm.build(_item(min=5, max=2), CTX)
    with pytest.raises(ConfigError, match="query"):
        keda_vllm.build(_item(query="avg"), CTX)
    with pytest.raises(ConfigError, match="unknown parameter"):
        keda_vllm.build(_item(target=3), CTX)
