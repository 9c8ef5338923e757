"""Building the simulated policies from specs, and how each one answers an observation."""

from __future__ import annotations

import numpy as np
import pytest

from ebb.errors import ConfigError
from ebb.model.decision import Decision
from ebb.model.ids import ReplicaId
from ebb.sim.baselines.oracle import OraclePolicy
from ebb.sim.baselines.static import StaticPolicy
from ebb.sim.policies import KNOWN_POLICIES, PEERS, POLICY_HELP, HpaPolicy, KedaPolicy, build_policy
from ebb.sim.policy_context import PolicyContext
from ebb.sim.policy import Observation, Pipeline, PodView
from ebb.sim.settings import SimSettings
from ebb.config.policy_specs import parse_policies

SCHEDULE = np.array([2, 3, 5, 4, 4, 3], dtype=np.int64)
CTX = PolicyContext(settings=SimSettings(), oracle_schedule=SCHEDULE)


def _build(text: str, ctx: PolicyContext = CTX) -> object:
    (item,) = parse_policies(text, KNOWN_POLICIES)
    return build_policy(item, ctx)


def _obs(t: float, *, util: float | None = None, n: int = 4, total_inflight: float | None = None,
         total_qps: float | None = None, spec: int | None = None) -> Observation:
    pods = tuple(PodView(ReplicaId(i), created_s=-3600.0, ready_s=-3500.0, util_ratio=util,
                         inflight=None, qps=None) for i in range(n))
    return Observation(t, n if spec is None else spec, n, pods, total_qps, total_inflight, 0.0)


def _to(pol: object, obs: Observation) -> int:
    """The count a policy's decision asks for, after checking the decision's frame: from the observed
    target (0 at t = 0 with no pods), by the policy's spec, with a reason when it changes anything."""
    d = pol.decide(obs)  # type: ignore[attr-defined]
    assert isinstance(d, Decision)
    assert d.from_replicas == (0 if obs.t_s == 0.0 and not obs.pods else obs.spec_replicas)
    assert d.policy == pol.spec  # type: ignore[attr-defined]
    assert d.reasons or not d.changes
    return d.to_replicas


def test_the_context_starts_reactive_policies_at_the_static_fleet_the_oracles_peak() -> None:
    assert CTX.initial_replicas == 5
    assert CTX.oracle_peak == 5
    empty = PolicyContext(SimSettings(), np.array([], dtype=np.int64))
    assert (empty.initial_replicas, empty.oracle_peak) == (1, 1)


def test_oracle_builds_an_oracle_policy_on_the_verified_schedule() -> None:
    pol = _build("oracle")
    assert isinstance(pol, OraclePolicy)
    assert pol.spec == "oracle"
    assert pol.schedule is SCHEDULE
    assert [_to(pol, _obs(float(t))) for t in range(8)] == [2, 3, 5, 4, 4, 3, 3, 3]


def test_static_defaults_to_the_oracle_peak_and_always_returns_its_replicas() -> None:
    pol = _build("static")
    assert isinstance(pol, StaticPolicy) and pol.replicas == 5
    pinned = _build("static:replicas=7")
    assert isinstance(pinned, StaticPolicy) and pinned.spec == "static:replicas=7"
    assert {_to(pinned, _obs(t, util=u)) for t, u in ((0.0, 0.0), (15.0, 1.0), (900.0, 0.5))} == {7}


def test_hpa_builds_on_gpu_utilisation_by_default_through_the_dcgm_pipeline() -> None:
    pol = _build("hpa")
    assert isinstance(pol, HpaPolicy)
    assert pol.value == "util"
    assert pol.pipeline == Pipeline(30, 30)
    assert pol.interval_s == 15.0
    assert pol.controller.config.max_replicas == 10  # 2 x the oracle peak
    assert pol.controller.config.min_replicas == 1
    assert pol.initial == 5  # the static fleet (oracle peak)


@pytest.mark.parametrize(("text", "value", "pipeline"), [
    ("hpa:metric=inflight", "inflight", Pipeline(30, 1)),
    ("hpa:metric=qps,target=5", "qps", Pipeline(30, 60)),
    ("hpa:metric=waiting", "waiting", Pipeline(30, 1)),
    ("hpa:metric=kv,target=0.7", "kv", Pipeline(30, 1)),
])
def test_hpa_on_other_metrics_reads_through_their_pipelines(text: str, value: str, pipeline: Pipeline) -> None:
    pol = _build(text)
    assert isinstance(pol, HpaPolicy)
    assert (pol.value, pol.pipeline, pol.spec) == (value, pipeline, text)


def test_keda_builds_on_total_inflight_by_default() -> None:
    pol = _build("keda")
    assert isinstance(pol, KedaPolicy)
    assert (pol.value, pol.min_replicas, pol.polling_s, pol.cooldown_s) == ("inflight", 1, 30.0, 300.0)
    assert pol.pipeline == Pipeline(30, 1)
    qps = _build("keda:metric=qps,min=0,polling=10")
    assert isinstance(qps, KedaPolicy)
    assert (qps.value, qps.min_replicas, qps.polling_s, qps.pipeline) == ("qps", 0, 10.0, Pipeline(30, 60))


def test_the_max_default_is_at_least_four() -> None:
    ctx = PolicyContext(SimSettings(), np.array([1, 1], dtype=np.int64))
    pol = _build("hpa", ctx)
    assert isinstance(pol, HpaPolicy) and pol.controller.config.max_replicas == 4


@pytest.mark.parametrize("text", ["oracle:headroom=2", "static:replica=3", "hpa:targt=0.5", "keda:target=3",
                                  "hpa:metric=cpu", "hpa:target=2", "hpa:min=5,max=3", "keda:polling=0.5",
                                  "static:replicas=0", "hpa:metric=kv,target=1.5", "kpa:targt=8",
                                  "ray:target=0", "wva:kv_threshold=abc", "dynamo:predictor=prophet",
                                  "aibrix:algo=xyz", "keda-vllm:threshold=-1"])
def test_unknown_or_invalid_parameters_are_rejected_naming_the_policy(text: str) -> None:
    with pytest.raises(ConfigError, match="policy"):
        _build(text)


def test_hpa_answers_its_initial_fleet_before_any_pod_exists() -> None:
    pol = _build("hpa")
    assert isinstance(pol, HpaPolicy)
    assert _to(pol, Observation(0.0, 0, 0, (), None, None, None)) == 5  # the static fleet (oracle peak)


def test_hpa_on_gpu_util_scales_up_when_util_is_above_target() -> None:
    pol = _build("hpa:target=0.5")
    assert isinstance(pol, HpaPolicy)
    assert _to(pol, _obs(15.0, util=0.9)) == 8  # ceil(4 x 0.9 / 0.5) = 8


def test_hpa_on_gpu_util_holds_within_tolerance() -> None:
    pol = _build("hpa:target=0.5")
    assert isinstance(pol, HpaPolicy)
    assert _to(pol, _obs(15.0, util=0.54)) == 4
    assert _to(pol, _obs(30.0, util=0.46)) == 4


def test_hpa_on_gpu_util_waits_out_the_stabilisation_window_before_scaling_down() -> None:
    pol = _build("hpa:target=0.5,stabilization=60")
    assert isinstance(pol, HpaPolicy)
    assert _to(pol, _obs(15.0, util=0.5)) == 4
    answers = [_to(pol, _obs(t, util=0.1)) for t in (30.0, 45.0, 60.0, 75.0, 90.0)]
    assert answers[0] == 4
    assert answers[-1] == 1


def test_hpa_with_no_metric_samples_keeps_the_current_count() -> None:
    pol = _build("hpa")
    assert isinstance(pol, HpaPolicy)
    assert _to(pol, _obs(15.0, util=None)) == 4


def test_keda_with_min_zero_scales_from_zero_only_at_polling_instants() -> None:
    pol = _build("keda:min=0")
    assert isinstance(pol, KedaPolicy)
    answers = {t: _to(pol, _obs(t, n=0, spec=0, total_inflight=5.0)) for t in (15.0, 45.0, 60.0, 75.0, 90.0)}
    assert answers == {15.0: 0, 45.0: 0, 60.0: 1, 75.0: 0, 90.0: 1}


def test_keda_with_min_zero_stays_at_zero_without_demand() -> None:
    pol = _build("keda:min=0")
    assert isinstance(pol, KedaPolicy)
    assert [_to(pol, _obs(t, n=0, spec=0, total_inflight=0.0)) for t in (30.0, 60.0)] == [0, 0]


def test_keda_with_min_zero_scales_to_zero_after_the_cooldown_at_a_polling_instant() -> None:
    pol = _build("keda:min=0,cooldown=60")
    assert isinstance(pol, KedaPolicy)
    assert _to(pol, _obs(30.0, n=1, total_inflight=3.0)) >= 1
    assert _to(pol, _obs(60.0, n=1, total_inflight=0.0)) >= 1  # inactive only 30 s
    assert _to(pol, _obs(75.0, n=1, total_inflight=0.0)) >= 1  # cooled down, but not a polling instant
    assert _to(pol, _obs(90.0, n=1, total_inflight=0.0)) == 0


def test_keda_with_the_default_minimum_never_goes_below_one() -> None:
    pol = _build("keda:cooldown=0")
    assert isinstance(pol, KedaPolicy)
    answers = [_to(pol, _obs(t, n=3, total_inflight=0.0)) for t in (30.0, 330.0, 660.0, 990.0)]
    assert answers[0] == 3  # the scale-down waits for the stabilisation window
    assert answers[-1] == 1 and min(answers) == 1


def test_keda_scales_up_on_total_inflight_per_replica_above_the_threshold() -> None:
    pol = _build("keda:threshold=10")
    assert isinstance(pol, KedaPolicy)
    assert _to(pol, _obs(15.0, n=2, total_inflight=60.0)) == 4  # HPA caps at 2 x current (or 4)


def test_keda_without_a_sample_keeps_the_current_count() -> None:
    pol = _build("keda")
    assert isinstance(pol, KedaPolicy)
    assert _to(pol, _obs(15.0, n=3, total_inflight=None)) == 3


def test_ebb_takes_profile_knobs_and_switches_and_refuses_one_out_of_range() -> None:
    from ebb.decide.policy import EbbPolicy

    p = _build("ebb:profile=cautious,budget=0.002,forecast=off")
    assert isinstance(p, EbbPolicy) and p.profile.budget == 0.002 and p.profile.target_util == 0.85
    assert p.profile.forecast is False and p.profile.name == "cautious"
    plain = _build("ebb")
    assert isinstance(plain, EbbPolicy) and plain.profile.budget == 0.001 and plain.profile.forecast is True
    assert plain.horizon_s == pytest.approx(60.0 + 1.0 + 0.1)  # the run's cold start + a reconcile + a sample
    for bad in ("ebb:budget=-1", "ebb:budget=0.9", "ebb:forecast=maybe", "ebb:hold_s=600"):
        with pytest.raises(ConfigError):
            _build(bad)


@pytest.mark.parametrize("text", ["hpa", "keda", "static", "oracle", "ebb", "ebb:canary=on", *PEERS])
def test_every_policy_answers_a_decision_ignores_observe_and_asks_for_no_gate_queries(text: str) -> None:
    pol = _build(text)
    pol.observe(_obs(1.0, util=0.5, total_inflight=1.0))  # type: ignore[attr-defined]
    assert pol.gate_queries() == ()  # type: ignore[attr-defined]
    first = pol.decide(Observation(0.0, 0, 0, (), None, None, None))  # type: ignore[attr-defined]
    assert (first.action, first.from_replicas) == ("scale_up", 0) and first.to_replicas >= 1


def test_a_baseline_change_is_noteworthy_and_says_what_the_policy_wanted() -> None:
    pol = _build("hpa:target=0.5")
    d = pol.decide(_obs(15.0, util=0.9))  # type: ignore[attr-defined]
    assert (d.action, d.from_replicas, d.to_replicas) == ("scale_up", 4, 8) and d.noteworthy
    assert d.reasons[0].startswith("hpa:target=0.5: desired 8")
    hold = pol.decide(_obs(30.0, n=8, util=0.5))  # type: ignore[attr-defined]
    assert hold.action == "hold" and not hold.noteworthy


def test_hpa_on_the_engine_gauges_reads_waiting_requests_and_kv_usage_per_pod() -> None:
    pol = _build("hpa:metric=kv,target=0.5")
    pods = tuple(PodView(ReplicaId(i), 0.0, 0.0, 0.1, 1.0, 1.0, kv_usage_ratio=0.9) for i in range(4))
    d = pol.decide(Observation(60.0, 4, 4, pods, 1.0, 4.0, 0.0))
    assert d.to_replicas == 8  # ceil(4 × 0.9 / 0.5)


def test_every_known_policy_has_one_help_line_and_every_peer_its_own_knobs() -> None:
    assert set(POLICY_HELP) == set(KNOWN_POLICIES)
    assert all(line and "\n" not in line for line in POLICY_HELP.values())
    for name, mod in PEERS.items():
        assert mod.KEYS and "min" in mod.KEYS and "max" in mod.KEYS, name


@pytest.mark.parametrize("text", ["ray:max=1000000", "kpa:max=20000", "static:replicas=50000", "ebb:max=10001",
                                  "hpa:max=99999"])
def test_a_fleet_past_the_simulators_limit_is_refused_before_it_hangs_the_run(text: str) -> None:
    with pytest.raises(ConfigError, match="10,000"):
        _build(text)
