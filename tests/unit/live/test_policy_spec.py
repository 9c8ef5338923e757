"""The live controller's policy: the simulator's ``ebb`` spec, the fleet's cold start, workload class and gates."""

from __future__ import annotations

import pytest

from ebb.config.workloads import default_workload_classes
from ebb.decide.policy import EbbPolicy
from ebb.errors import ConfigError
from ebb.gates.guard import CanaryGuard
from ebb.gates.metrics_gate import GateSpec
from ebb.live.policy_spec import build_live_policy


def build(spec: str, **kw: object) -> object:
    return build_live_policy(spec, slo_ttft_ms=2000.0, slo_e2e_ms=60000.0, initial=3, **kw)  # type: ignore[arg-type]


def test_the_default_spec_is_the_simulators_balanced_policy() -> None:
    p = build("ebb")
    assert isinstance(p, EbbPolicy)
    assert p.profile.name == "balanced" and p.profile.budget == 0.001 and p.warmup_s is None
    assert p.initial == 3 and p.pipeline.fine_ms == 100
    assert p.horizon_s == pytest.approx(60.0 + 1.0 + 0.1)  # the default cold start of `ebb run`


def test_the_fleets_cold_start_sets_the_horizon_the_memories_are_counted_in() -> None:
    p = build("ebb", cold_start_s=3.0)
    assert isinstance(p, EbbPolicy) and p.horizon_s == pytest.approx(4.1)
    q = build("ebb:cold_start_s=10", cold_start_s=3.0)  # the spec's own wins
    assert isinstance(q, EbbPolicy) and q.horizon_s == pytest.approx(11.1)


def test_profile_knobs_and_the_warm_up_are_the_simulators() -> None:
    p = build("ebb:profile=cautious,warmup_s=15,budget=0.002,target_util=0.8,forecast=off")
    assert isinstance(p, EbbPolicy)
    assert (p.profile.name, p.warmup_s, p.profile.budget, p.profile.target_util, p.profile.forecast) == \
        ("cautious", 15.0, 0.002, 0.8, False)


def test_a_knob_out_of_its_range_is_refused_naming_it() -> None:
    with pytest.raises(ConfigError, match="budget"):
        build("ebb:budget=-1")
    with pytest.raises(ConfigError, match="cold_start_s"):
        build("ebb:cold_start_s=-1")


def test_unknown_keys_and_several_policies_are_refused() -> None:
    with pytest.raises(ConfigError, match="hold_s"):
        build("ebb:hold_s=20")  # the peak memory's knob: the comeback bound replaced it
    with pytest.raises(ConfigError, match="exactly one"):
        build("ebb,ebb:profile=lean")


def test_a_workload_class_sets_weights_floor_and_latency_bound() -> None:
    wl = default_workload_classes()[0]  # order fulfilment: weight 0.65, alpha 1.2, p99 800 ms, min 2
    p = build("ebb", workload=wl)
    assert isinstance(p, EbbPolicy)
    assert (p.base_weight, p.alpha, p.min_replicas, p.slo_ttft_ms) == (wl.base_weight, wl.alpha,
                                                                       max(1, wl.min_replicas), 800.0)
    assert p.workload_class.base_weight == wl.base_weight and p.profile.veto_margin == wl.veto_margin


def test_gates_wrap_the_policy_in_the_canary_guard_with_every_gate() -> None:
    gates = (GateSpec(query="a", success_condition="result < 1"), GateSpec(query="b", success_condition="result > 0"))
    p = build("ebb", gates=gates)
    assert isinstance(p, CanaryGuard) and (p.gate, *p.extra_gates) == gates


def test_post_scale_down_gates_check_every_scale_down_whole_instead_of_canarying_it() -> None:
    after = GateSpec(query="p99", failure_condition="result >= 2", count=3, stage="after_scale_down")
    p = build("ebb", gates=(after,))
    assert isinstance(p, CanaryGuard) and p.canary_replicas is None and p.gate == after
    canary = build("ebb", gates=(GateSpec(query="p99", success_condition="result < 2", count=3),))
    assert isinstance(canary, CanaryGuard) and canary.canary_replicas == 1


def test_a_tier_s_reserve_reaches_the_live_policy_as_the_simulator_s() -> None:
    from ebb.config.tiers import parse_tier

    pol = build_live_policy("ebb", slo_ttft_ms=2000.0, slo_e2e_ms=60000.0, initial=2,
                            tier=parse_tier("asleep:wake_s=1,max=4,reserve=2"))
    assert isinstance(pol, EbbPolicy)
    assert (pol.wake_s, pol.sleep_max, pol.reserve) == (1.0, 4, 2.0)
    plain = build_live_policy("ebb", slo_ttft_ms=2000.0, slo_e2e_ms=60000.0, initial=2,
                              tier=parse_tier("asleep:wake_s=1,max=4"))
    assert isinstance(plain, EbbPolicy) and plain.reserve is None
