"""EbbPolicy (ebb.decide.policy) driven directly with hand-built observations, one per second.

Each cycle carries 10 fine samples (100 ms) of prefill/slot demand and the router queue, plus a
few request completions with their TTFT / end-to-end latency. A tiny in-test fleet applies the
policy's decisions: victims go first, new replicas cold-start for ``cold_s`` seconds. Every
answer is a :class:`~ebb.model.decision.Decision`; what the ledger would record is the
``noteworthy`` ones (:func:`recorded` keeps them).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ebb.decide.policy import PROFILES, EbbPolicy, EbbProfile, plan_victims
from ebb.model.decision import Decision
from ebb.model.ids import ReplicaId
from ebb.model.observation import FineSignals, Observation, PodView

SLO_TTFT_MS = 2000.0
SLO_E2E_MS = 20000.0
ZONES = ("zone-a", "zone-b", "zone-c")


def fine(t: float, demand: float, *, queued: float = 0.0, ttft_ms: float | None = 100.0,
         done: int = 5) -> FineSignals:
    """Ten 100 ms samples ending exactly at ``t`` and ``done`` completions at ``t`` (none if ttft is None)."""
    ts = ((t - 1.0) + 0.1 * np.arange(1, 11)).astype(np.float64)
    d = np.full(10, float(demand))
    n = 0 if ttft_ms is None else done
    return FineSignals(
        t_s=ts, prefill_replicas=d, slot_replicas=0.5 * d, queued=np.full(10, float(queued)),
        done_t_s=np.full(n, float(t)), done_ttft_ms=np.full(n, float(ttft_ms or 0.0)),
        done_e2e_ms=np.full(n, 5000.0), done_weight=np.ones(n))


def pod(i: int, *, load: float = 1.0, ready: bool = True, zone: str | None = None) -> PodView:
    return PodView(ReplicaId(i), created_s=0.0, ready_s=0.0 if ready else None, util_ratio=0.5,
                   inflight=load, qps=1.0, zone=zone if zone is not None else ZONES[i % 3])


def observe(t: float, pods: list[PodView], signals: FineSignals | None) -> Observation:
    ready = sum(p.ready_s is not None for p in pods)
    return Observation(t_s=t, spec_replicas=len(pods), ready_replicas=ready, pods=tuple(pods), total_qps=None,
                       total_inflight=None, queued=None, fine=signals)


@dataclass
class Fleet:
    """Applies answers: named victims leave first (then the newest), new replicas cold-start."""

    pods: list[PodView]
    cold_s: float = 3.0
    next_id: int = 0
    created: dict[int, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.next_id = max((int(p.replica) for p in self.pods), default=-1) + 1

    def observe(self, t: float, signals: FineSignals | None) -> Observation:
        self.pods = [replace(p, ready_s=t) if p.ready_s is None and t - self.created.get(int(p.replica), 0.0)
                     >= self.cold_s else p for p in self.pods]
        return observe(t, self.pods, signals)

    def apply(self, t: float, answer: Decision) -> None:
        n = answer.to_replicas
        if n < len(self.pods):
            gone = set(answer.victims)
            keep = [p for p in self.pods if p.replica not in gone]
            self.pods = keep[:n]
        while n > len(self.pods):
            i = self.next_id
            self.next_id += 1
            self.created[i] = t
            self.pods.append(PodView(ReplicaId(i), created_s=t, ready_s=None, util_ratio=None, inflight=None,
                                     qps=None, zone=ZONES[i % 3]))


def policy(profile: EbbProfile | None = None, **kw: Any) -> EbbPolicy:
    return EbbPolicy(profile or EbbProfile(), slo_ttft_ms=SLO_TTFT_MS, slo_e2e_ms=SLO_E2E_MS, **kw)


@dataclass
class Recorder:
    """Runs a policy and keeps its noteworthy decisions, as an engine or the controller does."""

    pol: EbbPolicy
    recorded: list[Decision] = field(default_factory=list)

    def decide(self, obs: Observation) -> Decision:
        d = self.pol.decide(obs)
        assert d.from_replicas == obs.spec_replicas and d.policy == self.pol.spec
        if d.noteworthy:
            self.recorded.append(d)
        return d


def quick(**kw: Any) -> EbbProfile:
    """A profile with short memories so scenarios fit in tens of cycles."""
    base: dict[str, Any] = {"hold_s": 10.0, "cooldown_s": 0.0, "down_interval_s": 0.0}
    base.update(kw)
    return EbbProfile("quick", **base)


# -- the first answer and the warm-up -------------------------------------------------------------------

def test_the_first_cycle_without_pods_answers_the_initial_replica_count_from_zero() -> None:
    first = policy(initial=3).decide(observe(0.0, [], None))
    assert (first.action, first.from_replicas, first.to_replicas) == ("scale_up", 0, 3)
    assert policy(initial=1, min_replicas=2).decide(observe(0.0, [], None)).to_replicas == 2


def test_a_hold_carries_no_explanation_and_is_not_noteworthy() -> None:
    pol = policy()
    d = pol.decide(observe(1.0, [pod(i) for i in range(2)], fine(1, 1.0)))
    assert d.action == "hold" and d.to_replicas == 2 and not d.noteworthy
    assert dict(d.signals) == {} and dict(d.weights) == {}


def test_no_scale_down_happens_during_the_warm_up_and_the_veto_names_it() -> None:
    pol = Recorder(policy(EbbProfile(hold_s=20.0), warmup_s=300.0))  # warm-up = min(hold_s, warmup_s) = 20 s
    pods = [pod(i) for i in range(10)]
    for t in range(1, 21):
        assert pol.decide(observe(float(t), pods, fine(t, 1.0))).to_replicas == 10
    vetoes = [d for d in pol.recorded if d.action == "veto"]
    assert len(vetoes) == 1  # recorded once, while its reasons stay the same
    assert any(v.startswith("warming up") for v in vetoes[0].vetoes)
    assert "20 s" in vetoes[0].vetoes[0]
    assert vetoes[0].from_replicas == vetoes[0].to_replicas == 10
    answer = pol.decide(observe(21.0, pods, fine(21, 1.0)))  # 20 s of history: warm-up over
    assert answer.action == "scale_down" and answer.to_replicas < 10


def test_a_repeated_veto_is_not_recorded_twice_but_the_hold_still_names_it() -> None:
    pol = policy(EbbProfile(hold_s=20.0), warmup_s=300.0)
    pods = [pod(i) for i in range(10)]
    first = pol.decide(observe(1.0, pods, fine(1, 1.0)))
    again = pol.decide(observe(2.0, pods, fine(2, 1.0)))
    assert first.action == "veto" and first.noteworthy and first.reasons == ("scale-down wanted",)
    assert again.action == "hold" and not again.noteworthy
    assert again.vetoes and again.vetoes[0].startswith("warming up")


def test_a_veto_of_cooldowns_only_is_a_hold() -> None:
    pol = policy(quick(cooldown_s=30.0))
    pods = [pod(i) for i in range(2)]
    assert pol.decide(observe(1.0, pods, fine(1, 8.0))).action == "scale_up"  # starts the cooldown
    for t in range(2, 16):  # warm-up (10 s) over by t=11; the cooldown lasts until t=31
        d = pol.decide(observe(float(t), [pod(i) for i in range(9)], fine(t, 0.5)))
        if t > 11:
            assert d.action == "hold" and d.vetoes and all(v.startswith("cooldown") for v in d.vetoes)


def test_the_warm_up_is_capped_by_warmup_s_when_it_is_shorter_than_hold_s() -> None:
    pol = policy(EbbProfile(hold_s=600.0), warmup_s=5.0)
    pods = [pod(i) for i in range(10)]
    answers = [pol.decide(observe(float(t), pods, fine(t, 1.0))) for t in range(1, 7)]
    assert [a.to_replicas for a in answers[:5]] == [10] * 5
    assert answers[5].action == "scale_down"


# -- scale-down: step size, peak floor, victims ---------------------------------------------------------

def test_low_steady_demand_scales_down_in_bounded_steps_never_below_the_peak_over_hold() -> None:
    prof = EbbProfile(hold_s=30.0, cooldown_s=0.0, down_interval_s=0.0, hold_quantile=1.0)
    pol = Recorder(policy(prof))
    fleet = Fleet([pod(i, load=float(i)) for i in range(10)])
    high, low = 4.4, 0.5
    floor_high = math.ceil(high / prof.target_util)  # 5, while the 4.4 phase is within hold_s
    downs: list[tuple[int, int, int]] = []
    for t in range(1, 80):
        demand = high if t <= 10 else low
        obs = fleet.observe(float(t), fine(t, demand))
        answer = pol.decide(obs)
        n = answer.to_replicas
        if n < obs.spec_replicas:
            downs.append((t, obs.spec_replicas, n))
            assert t > 30, "no scale-down during the 30 s warm-up"
            assert obs.spec_replicas - n <= max(1, math.floor(obs.spec_replicas * prof.down_fraction))
            if t <= 40:  # the 4.4 means (t ≤ 10) are still remembered
                assert n >= floor_high
        assert n >= obs.spec_replicas or len(answer.victims) == obs.spec_replicas - n
        fleet.apply(float(t), answer)
    assert downs[0] == (31, 10, 8)
    assert [d[2] for d in downs if d[0] <= 40][-1] == floor_high
    assert len(fleet.pods) == 1  # eventually sized on the low demand: ceil(0.5 / 0.9) = 1
    assert all(d.action != "scale_up" for d in pol.recorded)


def test_scale_down_victims_are_ready_replicas_least_loaded_first_within_zone_skew_one() -> None:
    pol = policy(quick(down_fraction=0.5, max_unavailable=0.5))
    # Two per zone; the two least-loaded replicas share zone-a.
    loads = {0: ("zone-a", 0.0), 1: ("zone-a", 1.0), 2: ("zone-b", 5.0), 3: ("zone-b", 6.0),
             4: ("zone-c", 2.0), 5: ("zone-c", 7.0)}
    pods = [pod(i, load=ld, zone=z) for i, (z, ld) in loads.items()]
    for t in range(1, 12):
        answer = pol.decide(observe(float(t), pods, fine(t, 0.5)))
        if answer.action == "scale_down":
            break
    assert answer.action == "scale_down"
    assert answer.to_replicas == 3 and len(answer.victims) == 3
    # Greedy by load, passing over replica 1 (it would empty zone-a while the others keep two).
    assert answer.victims == (ReplicaId(0), ReplicaId(4), ReplicaId(2))
    left = Counter(p.zone for p in pods if p.replica not in answer.victims)
    assert max(left.values()) - min(left.get(z, 0) for z in ZONES) <= 1
    assert any("passed over" in r for r in answer.reasons)


def test_plan_victims_removes_cold_starting_replicas_before_ready_ones() -> None:
    pods = (pod(0, load=0.0), pod(1, load=0.0), pod(2, load=0.0), pod(7, ready=False), pod(8, ready=False))
    victims, limits = plan_victims(pods, 2, 0.25)
    assert victims == [ReplicaId(8), ReplicaId(7)] and limits == ()  # newest cold-starting first
    victims, _ = plan_victims(pods, 3, 0.25)
    assert victims[:2] == [ReplicaId(8), ReplicaId(7)] and victims[2] in (0, 1, 2)


def test_the_disruption_budget_caps_ready_victims_per_cycle() -> None:
    pods = tuple(pod(i, load=float(i)) for i in range(9))
    victims, limits = plan_victims(pods, 5, 0.25)
    assert len(victims) == 2  # max(1, floor(9 × 0.25))
    assert any(lim.startswith("pdb") for lim in limits)
    one, _ = plan_victims(pods[:3], 2, 0.25)
    assert len(one) == 1  # at least one replica may always go


def test_the_policy_names_cold_starting_replicas_as_victims_before_ready_ones() -> None:
    pol = policy(quick())
    ready = [pod(i, load=0.0) for i in range(6)]
    for t in range(1, 11):  # warm-up over a full, ready fleet
        assert pol.decide(observe(float(t), ready, fine(t, 0.5))).to_replicas == 6
    pods = [*ready[:4], pod(10, ready=False), pod(11, ready=False)]
    answer = pol.decide(observe(11.0, pods, fine(11, 0.5)))
    assert answer.action == "scale_down"
    assert answer.to_replicas == 5 and answer.victims == (ReplicaId(11),)


# -- L2 vetoes -------------------------------------------------------------------------------------------

def warmed(pol: EbbPolicy, pods: list[PodView], until: int, ttft_ms: float | None = 100.0) -> None:
    for t in range(1, until + 1):
        pol.decide(observe(float(t), pods, fine(t, 0.5, ttft_ms=ttft_ms)))


def test_a_ttft_p99_within_the_veto_margin_of_the_slo_vetoes_scale_down() -> None:
    # At max_replicas no surge is possible, so a TTFT above the margin can only veto.
    pods = [pod(i) for i in range(6)]
    pol = policy(quick(), max_replicas=6)
    warmed(pol, pods, 10, ttft_ms=0.75 * SLO_TTFT_MS)
    veto = pol.decide(observe(11.0, pods, fine(11, 0.5, ttft_ms=0.75 * SLO_TTFT_MS)))
    assert veto.action == "veto" and veto.to_replicas == 6
    assert any("p99 latency 1500 ms >= 70% of SLO 2000 ms" in v for v in veto.vetoes)


def test_a_ttft_p99_exactly_at_the_veto_margin_vetoes_without_surging() -> None:
    pods = [pod(i) for i in range(6)]
    pol = policy(quick())
    at_margin = 0.7 * SLO_TTFT_MS
    warmed(pol, pods, 10, ttft_ms=at_margin)
    d = pol.decide(observe(11.0, pods, fine(11, 0.5, ttft_ms=at_margin)))
    assert d.action == "veto" and d.to_replicas == 6
    assert any("70% of SLO" in v for v in d.vetoes)


def test_healthy_ttft_below_the_margin_allows_the_same_scale_down() -> None:
    pods = [pod(i) for i in range(6)]
    pol = policy(quick())
    warmed(pol, pods, 10, ttft_ms=0.5 * SLO_TTFT_MS)
    assert pol.decide(observe(11.0, pods, fine(11, 0.5, ttft_ms=0.5 * SLO_TTFT_MS))).action == "scale_down"


def test_missing_latency_samples_veto_scale_down_fail_safe() -> None:
    pods = [pod(i) for i in range(6)]
    pol = policy(quick())
    warmed(pol, pods, 10, ttft_ms=None)
    last = pol.decide(observe(11.0, pods, fine(11, 0.5, ttft_ms=None)))
    assert last.action == "veto" and last.to_replicas == 6
    assert any("latency unknown (fail safe)" in v for v in last.vetoes)
    assert math.isnan(last.signals["ttft_p99_ms"])  # NaN = not measured (the ledger record drops it)


def test_stale_fine_signals_veto_scale_down() -> None:
    pods = [pod(i) for i in range(6)]
    pol = Recorder(policy(quick(hold_s=20.0)))  # warm-up 20 s: first cycle t=1, over at t=21
    for t in range(1, 16):
        pol.decide(observe(float(t), pods, fine(t, 0.5)))
    for t in range(16, 21):  # the agent goes quiet after t=15
        assert pol.decide(observe(float(t), pods, None)).to_replicas == 6
    assert not any(v.startswith("stale") for v in pol.recorded[-1].vetoes)  # 5 s old: not stale yet
    last = pol.decide(observe(21.0, pods, FineSignals()))  # 6 s > max_staleness_s 5 s
    assert last.action == "veto" and last.to_replicas == 6
    assert any(v.startswith("stale data: 6 s old > 5 s") for v in last.vetoes)
    assert not any(v.startswith("warming up") for v in last.vetoes)


# -- scale-up and surge ----------------------------------------------------------------------------------

def test_rising_demand_scales_up_immediately_to_the_mean_over_target_util() -> None:
    pol = policy()
    pods = [pod(i) for i in range(2)]
    answer = pol.decide(observe(1.0, pods, fine(1, 8.0)))
    assert answer.to_replicas == math.ceil(8.0 / 0.9) and answer.victims == ()
    assert answer.action == "scale_up" and answer.from_replicas == 2 and answer.to_replicas == 9


def test_a_demand_step_scales_up_in_the_same_cycle_on_the_sizing_window_mean() -> None:
    pol = policy()
    pods = [pod(i) for i in range(2)]
    for t in range(1, 10):
        assert pol.decide(observe(float(t), pods, fine(t, 1.0))).to_replicas == 2
    answer = pol.decide(observe(10.0, pods, fine(10, 5.0)))
    mean = (1.0 * 3 + 5.0) / 4  # seconds 7..10 of the 4 s sizing window
    assert answer.action == "scale_up" and answer.to_replicas == math.ceil(mean / 0.9)
    assert answer.signals["demand_mean_replicas"] == mean


def test_persistent_queueing_surges_once_and_waits_for_the_cold_starts() -> None:
    prof = EbbProfile()
    pol = policy(prof)
    fleet = Fleet([pod(i) for i in range(4)], cold_s=4.0)
    surges: list[tuple[int, int, int]] = []
    for t in range(1, 16):
        obs = fleet.observe(float(t), fine(t, 3.0, queued=5.0))  # ceil(3 / 0.9) = 4: enough without the queue
        answer = pol.decide(obs)
        n = answer.to_replicas
        if n > obs.spec_replicas:
            surges.append((t, obs.spec_replicas, n))
            assert obs.ready_replicas >= obs.spec_replicas, "no surge while replicas are cold-starting"
            assert n - obs.spec_replicas >= max(1, math.ceil(obs.spec_replicas * prof.surge_fraction))
            assert answer.reasons == ("surge",)
        fleet.apply(float(t), answer)
    assert surges[0] == (5, 4, 5)  # queued throughout the last 5 s only from t=5
    assert surges[1] == (9, 5, 7)  # the first surge's replica was ready at t=9


def test_a_short_queue_does_not_surge() -> None:
    pol = policy()
    pods = [pod(i) for i in range(4)]
    for t in range(1, 10):
        queued = 5.0 if t % 4 else 0.0  # the queue drains every 4 s
        assert pol.decide(observe(float(t), pods, fine(t, 3.0, queued=queued))).to_replicas == 4


def saturated(t: float, pods: list[PodView], *, queued: float, running: float) -> Observation:
    """Every ready replica prefilling all the time (L1 reads the fleet size) with a router queue."""
    obs = observe(t, pods, fine(t, float(sum(p.ready_s is not None for p in pods)), queued=queued))
    return replace(obs, total_inflight=running + queued, queued=queued)


def test_with_backlog_weight_one_a_saturated_fleet_sizes_up_on_its_queue_in_one_step() -> None:
    pol = policy(EbbProfile(backlog_weight=1.0), max_replicas=100)
    pods = [pod(i) for i in range(4)]
    # 4 ready replicas running 64 sequences with 48 queued: backlog = 4 × 48 / 64 = 3 replicas.
    answer = pol.decide(saturated(1.0, pods, queued=48.0, running=64.0))
    assert answer.action == "scale_up" and answer.to_replicas == math.ceil((4.0 + 3.0) / 0.9)
    assert answer.signals["backlog_replicas"] == 3.0
    assert answer.reasons == ("router backlog",)


def test_a_longer_queue_sizes_a_larger_step_up_to_twice_the_ready_fleet() -> None:
    sizes = []
    for queued in (16.0, 32.0, 48.0, 640.0):
        pol = policy(EbbProfile(backlog_weight=1.0), max_replicas=100)
        sizes.append(pol.decide(saturated(1.0, [pod(i) for i in range(4)], queued=queued,
                                          running=64.0)).to_replicas)
    assert sizes == [math.ceil(5.0 / 0.9), math.ceil(6.0 / 0.9), math.ceil(7.0 / 0.9), 8]


def test_half_the_backlog_weight_adds_half_the_backlog() -> None:
    pol = policy(EbbProfile(backlog_weight=0.5), max_replicas=100)
    answer = pol.decide(saturated(1.0, [pod(i) for i in range(4)], queued=64.0, running=64.0))
    assert answer.to_replicas == math.ceil((4.0 + 0.5 * 4.0) / 0.9)


def test_the_backlog_step_is_capped_by_max_replicas() -> None:
    pol = policy(EbbProfile(backlog_weight=1.0), max_replicas=6)
    assert pol.decide(saturated(1.0, [pod(i) for i in range(4)], queued=640.0, running=64.0)).to_replicas == 6


def test_with_backlog_weight_zero_the_queue_does_not_change_the_sizing() -> None:
    answers = []
    for prof in (EbbProfile(), EbbProfile(backlog_weight=0.0)):
        pol = policy(prof, max_replicas=100)
        answers.append(pol.decide(saturated(1.0, [pod(i) for i in range(4)], queued=48.0,
                                            running=64.0)).to_replicas)
    assert answers == [math.ceil(4.0 / 0.9)] * 2


def test_capacity_already_cold_starting_absorbs_the_backlog() -> None:
    pol = policy(EbbProfile(backlog_weight=1.0), max_replicas=100)
    pods = [pod(i) for i in range(4)] + [pod(i, ready=False) for i in range(4, 8)]
    # Backlog 3 on 4 ready replicas wants ceil(7 / 0.9) = 8: the 8 already requested cover it.
    assert pol.decide(saturated(1.0, pods, queued=48.0, running=64.0)).to_replicas == 8


def test_missing_queue_data_adds_no_backlog() -> None:
    pol = policy(EbbProfile(backlog_weight=1.0), max_replicas=100)
    obs = observe(1.0, [pod(i) for i in range(4)], fine(1.0, 4.0, queued=48.0))
    d = pol.decide(obs)
    assert d.to_replicas == math.ceil(4.0 / 0.9)
    assert d.signals["backlog_replicas"] == 0.0


# -- explanations and profiles ---------------------------------------------------------------------------

def test_every_noteworthy_decision_carries_a_full_explanation() -> None:
    pol = Recorder(policy(quick(), spec="ebb:profile=quick"))
    fleet = Fleet([pod(i) for i in range(3)], cold_s=2.0)
    changes = []
    for t in range(1, 40):
        demand = 6.0 if 5 <= t <= 12 else 0.5
        obs = fleet.observe(float(t), fine(t, demand))
        answer = pol.decide(obs)
        if answer.to_replicas != obs.spec_replicas:
            changes.append((float(t), obs.spec_replicas, answer.to_replicas))
        fleet.apply(float(t), answer)
    acted = [(d.t_s, d.from_replicas, d.to_replicas) for d in pol.recorded if d.changes]
    assert acted == changes
    assert any(b > a for _, a, b in changes) and any(b < a for _, a, b in changes)
    assert {d.action for d in pol.recorded} >= {"scale_up", "scale_down", "veto"}
    for d in pol.recorded:
        assert d.policy == "ebb:profile=quick" and d.reasons
        assert {"demand_p99_replicas", "demand_mean_replicas", "ttft_p99_ms", "ready_replicas"} <= set(d.signals)
        assert set(d.weights) == {"workload", "base", "alpha"}
        assert dict(d.plan) == {"profile": "quick", "target_util": 0.9}
        if d.action != "veto":
            assert d.vetoes == ()
        if d.action == "scale_down":
            assert len(d.victims) == d.from_replicas - d.to_replicas


def test_the_three_profiles_are_ordered_by_target_utilisation() -> None:
    assert PROFILES["cautious"].target_util < PROFILES["balanced"].target_util < PROFILES["lean"].target_util
    assert [p.name for p in PROFILES.values()] == ["cautious", "balanced", "lean"]


# -- property ---------------------------------------------------------------------------------------------

@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    demands=st.lists(st.floats(min_value=0.0, max_value=20.0, allow_nan=False), min_size=1, max_size=40),
    ttfts=st.lists(st.sampled_from([None, 100.0, 1500.0, 5000.0]), min_size=1, max_size=40),
    queued=st.lists(st.booleans(), min_size=1, max_size=40),
    start=st.integers(min_value=2, max_value=12),
)
def test_answers_stay_within_bounds_and_scale_downs_respect_the_disruption_budget(
        demands: list[float], ttfts: list[float | None], queued: list[bool], start: int) -> None:
    prof = quick(hold_s=4.0, down_fraction=0.6, max_unavailable=0.25)
    pol = policy(prof, min_replicas=2, max_replicas=12)
    first = pol.decide(observe(0.0, [], None))
    assert 2 <= first.to_replicas <= 12
    fleet = Fleet([pod(i, load=float(i % 4)) for i in range(start)], cold_s=2.0)
    for k, d in enumerate(demands, start=1):
        sig = fine(k, d, queued=5.0 if queued[k % len(queued)] else 0.0, ttft_ms=ttfts[k % len(ttfts)])
        obs = fleet.observe(float(k), sig)
        answer = pol.decide(obs)
        n = answer.to_replicas
        assert 2 <= n <= 12 and answer.from_replicas == obs.spec_replicas
        if n < obs.spec_replicas:
            assert answer.action == "scale_down"
            ready_ids = {p.replica for p in obs.pods if p.ready_s is not None}
            ready_victims = [v for v in answer.victims if v in ready_ids]
            assert len(ready_victims) <= max(1, math.floor(obs.ready_replicas * prof.max_unavailable))
            assert len(answer.victims) == obs.spec_replicas - n
        fleet.apply(float(k), answer)


def test_a_ttft_p99_of_infinity_is_a_breach_to_surge_on_not_a_crash() -> None:
    # C1: every TTFT in the histogram's +Inf bucket (an overload) reads as P99 = inf.
    pol = policy(quick())
    pods = [pod(i) for i in range(4)]
    answer = pol.decide(observe(1.0, pods, fine(1.0, 2.0, ttft_ms=math.inf)))
    answer = pol.decide(observe(2.0, pods, fine(2.0, 2.0, ttft_ms=math.inf)))
    assert answer.to_replicas > 4, "past the SLO: the fleet grows"
    assert answer.action == "scale_up" and answer.reasons == ("surge",)
    assert 0.65 < pol._weight <= 0.65 * 3, "the class weight grows, capped at 3x its base"


# -- spans ------------------------------------------------------------------------------------------------

@dataclass
class RecordingSpans:
    """A :class:`~ebb.model.spans.Spans` that keeps every layer's name and attributes."""

    layers: list[tuple[str, dict[str, object]]] = field(default_factory=list)

    def layer(self, name: str, **attrs: object) -> RecordingSpans:
        self.layers.append((name, dict(attrs)))
        return self

    def set(self, **attrs: object) -> None:
        self.layers[-1][1].update(attrs)

    def __enter__(self) -> RecordingSpans:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


def test_each_layer_opens_a_span_with_its_result_and_spans_never_change_the_decision() -> None:
    traced, plain = policy(quick()), policy(quick())
    spans = RecordingSpans()
    pods = [pod(i, load=0.0) for i in range(6)]
    for t in range(1, 12):
        a = traced.decide(observe(float(t), pods, fine(t, 0.5)), spans=spans)
        assert a == plain.decide(observe(float(t), pods, fine(t, 0.5)))
    assert a.action == "scale_down"
    names = [n for n, _ in spans.layers]
    assert names[-3:] == ["ebb.l1", "ebb.l2", "ebb.l3"]
    l1, l2, l3 = (attrs for _, attrs in spans.layers[-3:])
    assert l1["ebb.l1.demand_p99_replicas"] == a.signals["demand_p99_replicas"] == pytest.approx(0.5, rel=0.02)
    assert l2["ebb.l2.weight"] == a.weights["workload"]
    assert l3["ebb.l3.victims"] == len(a.victims) and l3["ebb.victims"] == [str(int(v)) for v in a.victims]
    warm = [attrs for n, attrs in spans.layers if n == "ebb.l2" and "ebb.veto.reasons" in attrs]
    assert warm and warm[0]["ebb.veto.reasons"] == ["warming up"]


def test_the_policy_has_no_gate_queries() -> None:
    assert policy().gate_queries() == ()
