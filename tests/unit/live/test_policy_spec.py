"""The live controller's policy: the simulator's ``ebb`` spec plus time knobs, workload class and gates."""

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
    assert p.profile.name == "balanced" and p.profile.hold_s == 600.0 and p.warmup_s == 300.0
    assert p.initial == 3 and p.pipeline.fine_ms == 100


def test_time_knobs_shorten_the_profiles_memories_for_a_compressed_trace() -> None:
    p = build("ebb:profile=cautious,hold_s=20,warmup_s=15,cooldown_s=10,down_interval_s=5,target_util=0.8")
    assert isinstance(p, EbbPolicy)
    assert (p.profile.name, p.profile.hold_s, p.warmup_s, p.profile.cooldown_s, p.profile.down_interval_s,
            p.profile.target_util) == ("cautious", 20.0, 15.0, 10.0, 5.0, 0.8)


def test_backlog_weight_sets_the_profiles_share_of_the_router_backlog() -> None:
    p = build("ebb:profile=lean,backlog_weight=0.5")
    assert isinstance(p, EbbPolicy)
    assert (p.profile.name, p.profile.backlog_weight, p.profile.target_util) == ("lean", 0.5, 1.1)
    q = build("ebb")
    assert isinstance(q, EbbPolicy) and q.profile.backlog_weight == 0.0


def test_a_negative_backlog_weight_is_refused() -> None:
    with pytest.raises(ConfigError, match="backlog_weight"):
        build("ebb:backlog_weight=-1")


def test_unknown_keys_and_several_policies_are_refused() -> None:
    with pytest.raises(ConfigError, match="hold"):
        build("ebb:hold=20")
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
