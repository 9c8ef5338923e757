"""The ``wva`` policy: WVA's documented rules as properties, and its timeline in simple scenes."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ebb.config.policy_specs import PolicySpecItem
from ebb.errors import ConfigError
from ebb.model.ids import ReplicaId
from ebb.model.observation import Observation, PodView
from ebb.sim.peers import wva
from ebb.sim.peers.wva_analyzer import ReplicaMetrics, SaturationConfig, VariantState, analyze_model, saturation_targets
from ebb.sim.policy_context import PolicyContext
from ebb.sim.settings import SimSettings

CTX = PolicyContext(SimSettings(), np.array([4, 4], dtype=np.int64))
CFG = SaturationConfig()


def _item(**kw: object) -> PolicySpecItem:
    return PolicySpecItem("wva", tuple((k, str(v)) for k, v in kw.items()))


def _obs(t: float, loads: list[tuple[float, float]], *, starting: int = 0) -> Observation:
    pods = [PodView(ReplicaId(i), -600.0, -500.0, None, None, None, kv_usage_ratio=kv, waiting=w)
            for i, (kv, w) in enumerate(loads)]
    pods += [PodView(ReplicaId(100 + j), t - 10, None, None, None, None) for j in range(starting)]
    return Observation(t, len(pods), len(loads), tuple(pods), None, None, None)


def _saturated(m: ReplicaMetrics) -> bool:
    return m.kv_ratio >= CFG.kv_threshold_ratio or m.queue >= CFG.queue_threshold


replica = st.builds(ReplicaMetrics, pod=st.uuids().map(str), kv_ratio=st.floats(0, 1), queue=st.integers(0, 12))
fleets = st.lists(replica, min_size=1, max_size=12)


@given(fleets)
def test_a_saturated_fleet_is_never_scaled_down(ms: list[ReplicaMetrics]) -> None:
    ms = [m if _saturated(m) else ReplicaMetrics(m.pod, 0.9, m.queue) for m in ms]
    a = analyze_model(ms, CFG)
    assert a.should_scale_up and not a.scale_down_safe
    assert saturation_targets(a, [VariantState("v1", len(ms))])["v1"] == len(ms) + 1


@given(fleets)
def test_scale_down_only_when_the_n_minus_1_redistribution_keeps_headroom(ms: list[ReplicaMetrics]) -> None:
    a = analyze_model(ms, CFG)
    free = [m for m in ms if not _saturated(m)]
    target = saturation_targets(a, [VariantState("v1", len(ms))])["v1"]
    assert len(ms) - 1 <= target <= len(ms) + 1
    if target < len(ms):
        # The check, written out: the non-saturated replicas' load spread over one fewer.
        n = len(free)
        assert n >= 2
        kv_after = sum(m.kv_ratio for m in free) / (n - 1)
        q_after = sum(m.queue for m in free) / (n - 1)
        assert CFG.kv_threshold_ratio - kv_after >= CFG.kv_spare_ratio - 1e-9
        assert CFG.queue_threshold - q_after >= CFG.queue_spare - 1e-9
        assert not a.should_scale_up


@given(fleets)
def test_scale_up_exactly_when_mean_spare_is_below_a_trigger(ms: list[ReplicaMetrics]) -> None:
    free = [m for m in ms if not _saturated(m)]
    kv = sum(CFG.kv_threshold_ratio - m.kv_ratio for m in free) / len(free) if free else 0.0
    q = sum(CFG.queue_threshold - m.queue for m in free) / len(free) if free else 0.0
    want = kv < CFG.kv_spare_ratio or q < CFG.queue_spare
    a = analyze_model(ms, CFG)
    if abs(kv - CFG.kv_spare_ratio) > 1e-9:  # away from float ties (queue spares are exact)
        assert a.should_scale_up == want


steps = st.lists(st.lists(st.tuples(st.floats(0, 1), st.floats(0, 12)), min_size=1, max_size=8),
                 min_size=1, max_size=30)


def _run(pol: wva.WvaPolicy, seq: list[list[tuple[float, float]]], *, floor_kv: float = 0.0) -> list[tuple[int, int]]:
    """Drive ``pol`` with the fleet following its own decisions (ready at once); (from, to) per tick."""
    n = pol.decide(Observation(0.0, 0, 0, (), None, None, None)).to_replicas
    out = []
    for k, loads in enumerate(seq, start=1):
        fleet = [(max(kv, floor_kv), w) for kv, w in (loads[i % len(loads)] for i in range(n))]
        d = pol.decide(_obs(k * pol.interval_s, fleet))
        out.append((n, d.to_replicas))
        n = d.to_replicas
    return out


@settings(max_examples=60, deadline=None)
@given(steps, st.sampled_from(["hpa", "direct"]), st.integers(1, 3), st.integers(3, 9))
def test_policy_stays_within_min_and_max_and_moves_one_step(
        seq: list[list[tuple[float, float]]], actuator: str, mn: int, mx: int) -> None:
    pol = wva.build(_item(actuator=actuator, min=mn, max=mx), CTX)
    for frm, to in _run(pol, seq):
        if to != frm:
            assert mn <= to <= mx
            if actuator == "direct" and mn <= frm <= mx:
                assert abs(to - frm) == 1


@settings(max_examples=60, deadline=None)
@given(steps, st.sampled_from(["hpa", "direct"]))
def test_policy_never_scales_down_while_a_window_peak_is_saturated_everywhere(
        seq: list[list[tuple[float, float]]], actuator: str) -> None:
    pol = wva.build(_item(actuator=actuator, max=6), CTX)
    for frm, to in _run(pol, seq, floor_kv=0.8):  # every pod at KV >= 0.8 in every window
        assert to >= min(frm, 6)


@settings(max_examples=60, deadline=None)
@given(steps)
def test_policy_scales_down_only_after_the_n_minus_1_check(seq: list[list[tuple[float, float]]]) -> None:
    pol = wva.build(_item(actuator="direct"), CTX)
    n = pol.decide(Observation(0.0, 0, 0, (), None, None, None)).to_replicas
    for k, loads in enumerate(seq, start=1):
        fleet = [loads[i % len(loads)] for i in range(n)]
        to = pol.decide(_obs(k * pol.interval_s, fleet)).to_replicas
        if to < n:
            a = analyze_model(pol._metrics(), CFG)  # the window the cycle just analysed
            assert a.scale_down_safe and not a.should_scale_up
        n = to


def test_direct_scales_up_one_per_cycle_under_saturation_and_holds_while_starting() -> None:
    pol = wva.build(_item(actuator="direct"), CTX)
    assert pol.interval_s == 30.0 and pol.period_s == 30.0
    assert pol.decide(Observation(0.0, 0, 0, (), None, None, None)).to_replicas == 4
    assert pol.decide(_obs(30.0, [(0.85, 0.0)] * 4)).to_replicas == 5
    # The new replica is starting: metrics(4) != current(5) → in transition, no second step.
    assert pol.decide(_obs(60.0, [(0.85, 0.0)] * 4, starting=1)).to_replicas == 5
    assert pol.decide(_obs(90.0, [(0.85, 0.0)] * 5)).to_replicas == 6


def test_direct_scales_down_an_idle_fleet_one_per_cycle_to_one() -> None:
    pol = wva.build(_item(actuator="direct"), CTX)
    n, t = 4, 0.0
    for _ in range(6):
        t += 30.0
        n = pol.decide(_obs(t, [(0.05, 0.0)] * n)).to_replicas
    assert n == 1


def test_window_keeps_the_peak_of_the_last_minute() -> None:
    pol = wva.build(_item(actuator="direct", interval=60), CTX)
    assert pol.interval_s == 30.0
    # A burst at t=30 (KV 0.85 on all) is still inside max_over_time[1m] at t=60.
    assert pol.decide(_obs(30.0, [(0.85, 0.0)] * 4)).to_replicas == 4
    assert pol.decide(_obs(60.0, [(0.1, 0.0)] * 4)).to_replicas == 5


def test_queue_is_truncated_like_the_collector() -> None:
    pol = wva.build(_item(actuator="direct"), CTX)
    # 4.9 waiting → int 4 < 5: not saturated; spare queue 1 < 3 → scale up anyway.
    assert pol.decide(_obs(30.0, [(0.1, 4.9)] * 4)).to_replicas == 5
    a = analyze_model([ReplicaMetrics("p", 0.1, int(4.9))], CFG)
    assert a.non_saturated == 1


def test_chart_hpa_delays_scale_up_by_its_stabilization_window() -> None:
    pol = wva.build(_item(), CTX)
    assert pol.interval_s == 15.0 and pol.hpa is not None
    n, t, ups = 4, 0.0, []
    while t < 600.0:
        t += 15.0
        d = pol.decide(_obs(t, [(0.9, 0.0)] * n))
        if d.to_replicas > n:
            ups.append(t)
        n = d.to_replicas
    # First reconcile seeds the window with 4 at t=15; the +1 wins only once 240 s have passed.
    assert ups and ups[0] >= 15.0 + 240.0


def test_bad_knobs_name_the_spec() -> None:
    with pytest.raises(ConfigError, match="wva:kv_threshold=0.05,kv_spare=0.1"):
        wva.build(PolicySpecItem("wva", (("kv_threshold", "0.05"), ("kv_spare", "0.1"))), CTX)
    with pytest.raises(ConfigError, match="actuator"):
        wva.build(_item(actuator="keda"), CTX)
    with pytest.raises(ConfigError, match="min=5 exceeds max=2"):
        wva.build(_item(min=5, max=2), CTX)
    with pytest.raises(ConfigError, match="unknown parameter"):
        wva.build(_item(target=3), CTX)


def test_chart_hpa_tolerance_freezes_a_fleet_of_ten_or_more() -> None:
    ctx = PolicyContext(SimSettings(), np.array([10, 10], dtype=np.int64))
    pol = wva.build(_item(), ctx)
    n = pol.decide(Observation(0.0, 0, 0, (), None, None, None)).to_replicas
    assert n == 10
    for k in range(1, 80):  # 20 min saturated: WVA wants 11, the HPA sees 11/10 inside its 10 % band
        n = pol.decide(_obs(k * 15.0, [(0.95, 9.0)] * n)).to_replicas
    assert n == 10 and pol._desired == 11
