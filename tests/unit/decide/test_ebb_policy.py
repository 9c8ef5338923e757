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

from ebb.decide.policy import EbbPolicy, plan_victims
from ebb.decide.profiles import PROFILES, EbbProfile
from ebb.decide.served import served_demand
from ebb.model.decision import Decision
from ebb.model.ids import ReplicaId
from ebb.model.observation import FineSignals, Observation, PodView

SLO_TTFT_MS = 2000.0
SLO_E2E_MS = 20000.0
ZONES = ("zone-a", "zone-b", "zone-c")


def fine(t: float, demand: float, *, queued: float = 0.0, ttft_ms: float | None = 100.0,
         done: int = 5) -> FineSignals:
    """Ten 100 ms samples ending exactly at ``t`` of ``demand`` replicas of prefill (no slot
    occupancy: the served demand is exactly ``demand``) and ``done`` completions at ``t`` (none if
    ttft is None), each with a wait of a tenth of its TTFT."""
    ts = ((t - 1.0) + 0.1 * np.arange(1, 11)).astype(np.float64)
    d = np.full(10, float(demand))
    n = 0 if ttft_ms is None else done
    return FineSignals(
        t_s=ts, prefill_replicas=d, slot_replicas=np.zeros(10), queued=np.full(10, float(queued)),
        done_t_s=np.full(n, float(t)), done_ttft_ms=np.full(n, float(ttft_ms or 0.0)),
        done_e2e_ms=np.full(n, 5000.0), done_weight=np.ones(n), done_wait_ms=np.full(n, 0.1 * float(ttft_ms or 0.0)))


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


COLD_S = 2.0
"""Cold start of the in-test fleet: a comeback horizon of 2 + 1 + 0.1 = 3.1 s, so the policy's memories
(in horizons) fit scenarios of tens of cycles: warm-up 15.5 s, cooldown 3.1 s, level 3.1 s."""


def policy(profile: EbbProfile | None = None, **kw: Any) -> EbbPolicy:
    kw.setdefault("cold_start_s", COLD_S)
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
    """The balanced profile without its cooldowns (each scenario sets what it tests)."""
    base: dict[str, Any] = {"cooldown_horizons": 0.0, "down_interval_horizons": 0.0, "forecast": False}
    base.update(kw)
    return replace(PROFILES["balanced"], name="quick", **base)


def warm(pol: EbbPolicy | Recorder, pods: list[PodView], until: int, demand: float = 0.5,
         ttft_ms: float | None = 100.0) -> list[Decision]:
    return [pol.decide(observe(float(t), pods, fine(t, demand, ttft_ms=ttft_ms))) for t in range(1, until + 1)]


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


def test_the_memories_are_counted_in_comeback_horizons() -> None:
    pol = policy()
    assert pol.horizon_s == COLD_S + 1.0 + 0.1  # cold start + a reconcile + a fine sample
    assert policy(cold_start_s=60.0).horizon_s == 61.1


def test_no_scale_down_happens_during_the_warm_up_and_the_veto_names_it() -> None:
    pol = Recorder(policy(warmup_s=20.0))
    pods = [pod(i) for i in range(10)]
    answers = warm(pol, pods, 20, demand=1.0)
    assert all(a.to_replicas == 10 for a in answers)
    vetoes = [d for d in pol.recorded if d.action == "veto"]
    assert len(vetoes) == 1  # recorded once, while its reasons stay the same
    assert vetoes[0].vetoes[0].startswith("warming up") and "20 s" in vetoes[0].vetoes[0]
    assert vetoes[0].from_replicas == vetoes[0].to_replicas == 10
    answer = pol.decide(observe(21.0, pods, fine(21, 1.0)))  # 20 s of history: warm-up over
    assert answer.action == "scale_down" and answer.to_replicas < 10


def test_the_default_warm_up_is_five_horizons() -> None:
    pol = policy(quick())
    pods = [pod(i) for i in range(10)]
    answers = warm(pol, pods, 17, demand=1.0)
    downs = [t for t, a in enumerate(answers, start=1) if a.action == "scale_down"]
    assert downs and downs[0] == 17  # history from t = 1: 16 s ≥ 5 × 3.1 s first at t = 17


def test_a_repeated_veto_is_not_recorded_twice_but_the_hold_still_names_it() -> None:
    pol = policy(warmup_s=300.0)
    pods = [pod(i) for i in range(10)]
    first = pol.decide(observe(1.0, pods, fine(1, 1.0)))
    again = pol.decide(observe(2.0, pods, fine(2, 1.0)))
    assert first.action in ("veto", "hold")
    later = [pol.decide(observe(float(t), pods, fine(t, 1.0))) for t in range(3, 12)]
    recorded = [d for d in [first, again, *later] if d.action == "veto"]
    assert len(recorded) == 1 and recorded[0].reasons == ("scale-down wanted",)
    assert later[-1].action == "hold" and later[-1].vetoes and later[-1].vetoes[0].startswith("warming up")


def test_a_veto_of_cooldowns_only_is_a_hold() -> None:
    pol = policy(quick(cooldown_horizons=10.0))  # 31 s
    pods = [pod(i) for i in range(2)]
    assert pol.decide(observe(1.0, pods, fine(1, 8.0))).action == "scale_up"  # starts the cooldown
    for t in range(2, 30):
        d = pol.decide(observe(float(t), [pod(i) for i in range(9)], fine(t, 0.5)))
        if t > 17:  # warm-up over; the cooldown lasts until t = 32
            assert d.action == "hold" and d.vetoes and all(v.startswith("cooldown") for v in d.vetoes)


# -- scale-down: the comeback floor, step size, victims -------------------------------------------------

def test_scale_down_goes_in_bounded_steps_and_never_below_the_comeback_floor() -> None:
    prof = quick()
    pol = Recorder(policy(prof))
    fleet = Fleet([pod(i, load=float(i)) for i in range(10)], cold_s=COLD_S)
    for t in range(1, 120):
        demand = 4.0 if t % 20 < 2 else 0.5  # a 2 s burst to 4 replicas every 20 s
        obs = fleet.observe(float(t), fine(t, demand))
        answer = pol.decide(obs)
        n = answer.to_replicas
        if n < obs.spec_replicas:
            assert obs.spec_replicas - n <= max(1, math.floor(obs.spec_replicas * prof.down_fraction))
            floor = answer.signals["comeback_floor_replicas"]
            assert n >= math.ceil(floor / prof.down_util - 1e-9)
            assert answer.signals["comeback_risk"] <= prof.budget
            assert len(answer.victims) == obs.spec_replicas - n
        fleet.apply(float(t), answer)
    downs = [d for d in pol.recorded if d.action == "scale_down"]
    assert downs and all("comeback:" in d.reasons[0] for d in downs)
    # Two minutes of history cannot bound a 0.1 % risk: each scale-down says so and holds the largest rise.
    assert all(d.reasons[1].startswith("history ") and "risk bound" in d.reasons[1] and
               d.signals["comeback_risk_bound"] > prof.budget for d in downs)
    # The fleet keeps what the recurring burst needs: never below 4 replicas once it has been seen.
    assert min(len(fleet.pods) for _ in [0]) >= 3


def test_a_history_that_starts_inside_a_burst_holds_that_burst_while_it_is_in_memory() -> None:
    prof = quick()
    pol = Recorder(policy(prof))
    fleet = Fleet([pod(i) for i in range(10)], cold_s=COLD_S)
    for t in range(1, 100):  # 6 replicas of demand through the first level window (3.1 s), then 0.5
        fleet.apply(float(t), pol.decide(fleet.observe(float(t), fine(t, 6.0 if t <= 3 else 0.5))))
    hist = pol.pol.state.bound.history_bound()
    assert hist.opening_need_replicas > 4.0 > 0.5 + hist.largest_rise_replicas  # no rise measured it
    held = math.ceil(hist.opening_need_replicas / prof.target_util)
    downs = [d for d in pol.recorded if d.action == "scale_down"]
    assert downs and min(d.to_replicas for d in downs) == held == len(fleet.pods)
    assert all(f"the need of {hist.opening_need_replicas:.1f} replicas at the history's start at 90% of the cost model's capacity"
               in d.reasons[1] for d in downs)


def test_a_scale_down_explains_its_horizon_risk_and_budget() -> None:
    pol = policy(quick())
    pods = [pod(i) for i in range(10)]
    d = next(a for a in warm(pol, pods, 40) if a.action == "scale_down")
    assert {"comeback_horizon_s", "comeback_risk", "comeback_budget", "comeback_floor_replicas",
            "comeback_level_replicas", "comeback_rise_replicas", "need_replicas"} <= set(d.signals)
    assert d.signals["comeback_horizon_s"] == pytest.approx(3.1)
    assert d.signals["comeback_budget"] == 0.001
    assert "3 s rise with estimated risk" in d.reasons[0] and "budget 0.10%" in d.reasons[0]
    assert d.plan["budget"] == 0.001


def test_scale_down_victims_are_ready_replicas_least_loaded_first_within_zone_skew_one() -> None:
    pol = policy(quick(down_fraction=0.5, max_unavailable=0.5))
    # Two per zone; the two least-loaded replicas share zone-a.
    loads = {0: ("zone-a", 0.0), 1: ("zone-a", 1.0), 2: ("zone-b", 5.0), 3: ("zone-b", 6.0),
             4: ("zone-c", 2.0), 5: ("zone-c", 7.0)}
    pods = [pod(i, load=ld, zone=z) for i, (z, ld) in loads.items()]
    answer = next(a for a in warm(pol, pods, 40) if a.action == "scale_down")
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
    assert all(a.to_replicas == 6 for a in warm(pol, ready, 16))  # warm-up over a full, ready fleet
    pods = [*ready[:4], pod(10, ready=False), pod(11, ready=False)]
    answer = pol.decide(observe(17.0, pods, fine(17, 0.5)))
    assert answer.action == "scale_down"
    assert answer.victims[0] == ReplicaId(11)


# -- L2 vetoes -------------------------------------------------------------------------------------------

def test_a_ttft_p99_within_the_veto_margin_of_the_slo_vetoes_scale_down() -> None:
    pods = [pod(i) for i in range(6)]
    pol = policy(quick(), max_replicas=6)
    warm(pol, pods, 16, ttft_ms=0.75 * SLO_TTFT_MS)
    veto = pol.decide(observe(17.0, pods, fine(17, 0.5, ttft_ms=0.75 * SLO_TTFT_MS)))
    assert veto.action in ("veto", "hold") and veto.to_replicas == 6
    assert any("p99 latency 1500 ms >= 70% of SLO 2000 ms" in v for v in veto.vetoes)


def test_healthy_ttft_below_the_margin_allows_the_same_scale_down() -> None:
    pods = [pod(i) for i in range(6)]
    pol = policy(quick())
    warm(pol, pods, 16, ttft_ms=0.5 * SLO_TTFT_MS)
    assert pol.decide(observe(17.0, pods, fine(17, 0.5, ttft_ms=0.5 * SLO_TTFT_MS))).action == "scale_down"


def test_missing_latency_samples_veto_scale_down_fail_safe() -> None:
    pods = [pod(i) for i in range(6)]
    pol = policy(quick())
    answers = warm(pol, pods, 17, ttft_ms=None)
    vetoed = [a for a in answers if a.action == "veto"]
    assert vetoed and any("latency unknown (fail safe)" in v for v in vetoed[-1].vetoes)
    assert all(a.to_replicas == 6 for a in answers)
    assert math.isnan(vetoed[-1].signals["ttft_p99_ms"])  # NaN = not measured (the ledger drops it)


def test_an_idle_fleet_is_not_vetoed_for_latency_it_has_no_requests_to_measure() -> None:
    pods = [pod(i) for i in range(6)]
    pol = policy(quick())
    warm(pol, pods, 16, demand=0.5)
    idle = [pol.decide(observe(float(t), pods, fine(t, 0.0, ttft_ms=None))) for t in range(17, 90)]
    # Once the latency window holds no completion (30 s after the last), fresh samples of no demand
    # and no queue say the fleet is idle: no "latency unknown" veto, and it keeps shrinking.
    later = [d for d in idle if d.t_s > 16 + pol.latency_window_s]
    assert not any("latency unknown" in v for d in later for v in d.vetoes)
    assert any(a.action == "scale_down" for a in later)


def test_stale_fine_signals_veto_scale_down() -> None:
    pods = [pod(i) for i in range(6)]
    pol = Recorder(policy(quick(), warmup_s=20.0))
    for t in range(1, 16):
        pol.decide(observe(float(t), pods, fine(t, 0.5)))
    for t in range(16, 21):  # the agent goes quiet after t=15
        assert pol.decide(observe(float(t), pods, None)).to_replicas == 6
    last = pol.decide(observe(21.0, pods, FineSignals()))  # 6 s > max_staleness_s 5 s
    assert last.action == "veto" and last.to_replicas == 6
    assert any(v.startswith("stale data: 6 s old > 5 s") for v in last.vetoes)
    assert not any(v.startswith("warming up") for v in last.vetoes)


def test_without_a_complete_horizon_of_history_there_is_no_scale_down() -> None:
    pods = [pod(i) for i in range(6)]
    pol = policy(quick(), warmup_s=0.0)
    assert all(a.to_replicas == 6 for a in warm(pol, pods, 4))  # rises need level + horizon seconds


# -- scale-up: the need, the fast path, surges ------------------------------------------------------------

def test_rising_demand_scales_up_on_the_need_over_target_util() -> None:
    pol = policy()
    pods = [pod(i) for i in range(2)]
    answer = pol.decide(observe(1.0, pods, fine(1, 8.0)))
    need = answer.signals["need_replicas"]
    assert answer.action == "scale_up" and answer.to_replicas == math.ceil(need / 0.9)
    # One second of demand at 8 replicas over a 1 s slack: 8 × 1 / (1 + 1) = 4 replicas needed now.
    assert need == pytest.approx(4.0)


def test_the_fast_path_asks_at_the_sample_the_need_outgrows_the_ready_fleet() -> None:
    pol = policy()
    pods = [pod(i) for i in range(2)]
    warm(pol, pods, 5, demand=0.5)
    ts = 5.0 + 0.1 * np.arange(1, 4)
    quiet = FineSignals(t_s=ts[:1], prefill_replicas=np.full(1, 0.5), slot_replicas=np.zeros(1), queued=np.zeros(1))
    assert pol.react(observe(5.1, pods, quiet)) is None
    burst = FineSignals(t_s=ts[1:], prefill_replicas=np.full(2, 2.0), slot_replicas=np.zeros(2),
                        queued=np.array([40.0, 90.0]))
    d = pol.react(observe(5.3, pods, burst))
    assert d is not None and d.action == "scale_up" and d.t_s == 5.3 and d.to_replicas > 2
    assert d.reasons[0].startswith("fast path: need")
    # Five seconds of history hold no rise like it: the reason says it is a first-ever burst and
    # that requests wait for the cold start.
    assert d.reasons[1].startswith("first-ever burst: need") and "lands in 2 s" in d.reasons[1]


def test_a_queue_growing_for_two_samples_is_answered_before_the_need_passes_the_fleet() -> None:
    pol = policy()
    pods = [pod(i) for i in range(2)]
    warm(pol, pods, 5, demand=0.5)  # 25 completions over 2.5 replica-seconds: about 0.1 each
    # Saturated, 8 more queued in each of two samples: under 2 replica-seconds of queue, which the
    # fleet drains within the slack, so the need is still within the fleet...
    grow = FineSignals(t_s=np.array([5.1, 5.2]), prefill_replicas=np.full(2, 2.0), slot_replicas=np.zeros(2),
                       queued=np.array([8.0, 16.0]))
    d = pol.react(observe(5.2, pods, grow))
    assert d is not None and d.action == "scale_up"
    assert d.signals["need_replicas"] <= 2.0 < d.signals["need_ahead_replicas"]
    # ... but arrivals at 2 + 8 × cost / 0.1 (≈ 11 replicas) fill it past the slack within 0.5 s.
    cost = d.signals["cost_replica_s"]
    assert d.signals["rate_replicas"] == pytest.approx(2.0 + 8 * cost / 0.1)
    assert d.to_replicas == math.ceil(d.signals["need_ahead_replicas"] / 0.9)
    assert "in 0.5 s" in d.reasons[0]


def test_a_one_sample_clump_that_the_slack_absorbs_asks_for_nothing() -> None:
    pol = policy()
    pods = [pod(i) for i in range(2)]
    warm(pol, pods, 5, demand=0.5)
    clump = FineSignals(t_s=np.array([5.1, 5.2]), prefill_replicas=np.full(2, 2.0), slot_replicas=np.zeros(2),
                        queued=np.array([8.0, 2.0]))
    assert pol.react(observe(5.2, pods, clump)) is None


def test_the_fast_path_never_scales_down_and_counts_capacity_on_its_way() -> None:
    pol = policy()
    pods = [pod(i) for i in range(2)] + [pod(i, ready=False) for i in range(2, 30)]
    warm(pol, pods[:2], 3)
    ts = 3.0 + 0.1 * np.arange(1, 3)
    burst = FineSignals(t_s=ts, prefill_replicas=np.full(2, 2.0), slot_replicas=np.zeros(2),
                        queued=np.array([40.0, 90.0]))
    assert pol.react(observe(3.2, pods, burst)) is None  # 30 requested already cover it (25.2 ahead)
    calm = FineSignals(t_s=np.array([3.3]), prefill_replicas=np.zeros(1), slot_replicas=np.zeros(1),
                       queued=np.zeros(1))
    assert pol.react(observe(3.3, [pod(i) for i in range(9)], calm)) is None


def test_persistent_queueing_surges_once_and_waits_for_the_cold_starts() -> None:
    prof = quick()
    pol = policy(prof)
    fleet = Fleet([pod(i) for i in range(4)], cold_s=4.0)
    surges: list[tuple[int, int, int]] = []
    for t in range(1, 16):
        obs = fleet.observe(float(t), fine(t, 3.0, queued=5.0))  # a steady queue of 5: no new demand
        answer = pol.decide(obs)
        n = answer.to_replicas
        if n > obs.spec_replicas and answer.reasons[0].startswith("surge: queue — lands in"):
            surges.append((t, obs.spec_replicas, n))
            assert obs.ready_replicas >= obs.spec_replicas, "no surge while replicas are cold-starting"
            # Sized to the need when the capacity lands: the demand arriving and the backlog left then.
            landing = float(answer.reasons[0].rsplit("need then ", 1)[1].rstrip(")"))
            assert n >= max(obs.spec_replicas + 1, math.ceil(landing / (0.9 * answer.signals["replica_capacity"])))
        fleet.apply(float(t), answer)
    assert surges and surges[0][0] == 5  # queued throughout the last 5 s only from t = 5


def test_a_surge_for_queued_long_jobs_asks_one_replica_per_job_not_their_work_over_a_horizon() -> None:
    # Jobs of 40 replica-seconds each (one completion every 10 s on a saturated 4-replica fleet), five
    # queued throughout: 200 replica-seconds over the 3.1 s horizon would ask for 65 more replicas;
    # each job occupies one replica, so the surge asks for about five more.
    pol = policy(quick())
    fleet = Fleet([pod(i) for i in range(4)], cold_s=4.0)
    for t in range(1, 12):
        obs = fleet.observe(float(t), fine(t, 4.0, queued=5.0 if t > 5 else 0.0, done=1 if t % 10 == 0 else 0))
        answer = pol.decide(obs)
        if answer.reasons and answer.reasons[0].startswith("surge: queue — lands in"):
            assert answer.signals["cost_replica_s"] > 3 * pol.horizon_s
            assert obs.spec_replicas < answer.to_replicas <= math.ceil((4.0 + 5.0) / 0.9)
            return
        fleet.apply(float(t), answer)
    raise AssertionError("no surge while five jobs queued for five seconds")


def test_a_fleet_saturated_below_one_replica_of_demand_each_teaches_its_capacity() -> None:
    pol = policy(quick())
    pods = [pod(i) for i in range(4)]
    answers = [pol.decide(observe(float(t), pods, fine(t, 3.2, queued=5.0))) for t in range(1, 7)]
    # Queued throughout 5 s with nothing on its way: 4 replicas serve 3.2, so a replica serves 0.8
    # (a KV cache or batch limit that fills before the slots and prefill do).
    surge = next(a for a in answers if a.action == "scale_up")
    assert surge.signals["replica_capacity"] == pytest.approx(0.8)
    assert surge.to_replicas >= math.ceil(surge.signals["need_replicas"] / (0.9 * 0.8) - 1e-9)


def test_a_queue_in_one_second_samples_is_persistent_after_five_of_them() -> None:
    pol = policy(quick())
    pods = [pod(i) for i in range(4)]
    reasons = []
    for t in range(1, 8):  # one sample a second, as the fluid engine's bins or a Prometheus scrape
        one = FineSignals(t_s=np.array([float(t)]), prefill_replicas=np.full(1, 3.0), slot_replicas=np.zeros(1),
                          queued=np.full(1, 5.0), done_t_s=np.full(5, float(t)), done_ttft_ms=np.full(5, 100.0),
                          done_e2e_ms=np.full(5, 5000.0), done_weight=np.ones(5), done_wait_ms=np.full(5, 10.0))
        reasons.append((t, pol.decide(observe(float(t), pods, one)).reasons))
    assert [t for t, r in reasons if r and r[0].startswith("surge: queue — lands in")][:1] == [5], reasons


def test_a_short_queue_does_not_surge() -> None:
    pol = policy()
    pods = [pod(i) for i in range(4)]
    for t in range(1, 10):
        queued = 5.0 if t % 4 else 0.0  # the queue drains every 4 s
        d = pol.decide(observe(float(t), pods, fine(t, 3.0, queued=queued)))
        assert d.reasons != ("surge: queue",)


def test_requests_that_waiting_made_late_surge_and_long_prompts_alone_do_not() -> None:
    pods = [pod(i) for i in range(4)]
    waited = policy(quick())
    sig = replace(fine(1.0, 0.5, ttft_ms=2500.0, done=20), done_wait_ms=np.full(20, 2000.0))
    assert waited.decide(observe(1.0, pods, sig)).reasons == ("surge: latency",)
    own = policy(quick())
    sig = replace(fine(1.0, 0.5, ttft_ms=2500.0, done=20), done_wait_ms=np.full(20, 100.0))
    assert own.decide(observe(1.0, pods, sig)).action != "scale_up"  # their own prefill took 2.4 s


def test_a_ttft_p99_of_infinity_is_a_breach_to_surge_on_not_a_crash() -> None:
    # C1: every TTFT in the histogram's +Inf bucket (an overload) reads as P99 = inf.
    pol = policy(quick())
    pods = [pod(i) for i in range(4)]
    sig = replace(fine(1.0, 2.0, ttft_ms=math.inf), done_wait_ms=np.full(5, np.nan))
    answer = pol.decide(observe(1.0, pods, sig))
    assert answer.to_replicas > 4, "past the SLO: the fleet grows"


# -- explanations and profiles ---------------------------------------------------------------------------

def test_every_noteworthy_decision_carries_a_full_explanation() -> None:
    pol = Recorder(policy(quick(), spec="ebb:profile=quick"))
    fleet = Fleet([pod(i) for i in range(3)], cold_s=COLD_S)
    changes = []
    for t in range(1, 60):
        demand = 6.0 if 20 <= t <= 27 else 0.5
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
        assert {"need_replicas", "demand_p99_replicas", "ttft_p99_ms", "ready_replicas"} <= set(d.signals)
        assert set(d.weights) == {"workload", "base", "alpha"}
        assert dict(d.plan) == {"profile": "quick", "target_util": 0.9, "budget": 0.001}
        if d.action != "veto":
            assert d.vetoes == ()
        if d.action == "scale_down":
            assert len(d.victims) == d.from_replicas - d.to_replicas


def test_the_three_profiles_trade_risk_for_cost_in_order() -> None:
    c, b, lean = PROFILES["cautious"], PROFILES["balanced"], PROFILES["lean"]
    assert c.budget < b.budget < lean.budget
    assert c.slack_fraction < b.slack_fraction < lean.slack_fraction
    assert c.target_util < b.target_util < lean.target_util
    assert [p.name for p in PROFILES.values()] == ["cautious", "balanced", "lean"]


def test_the_horizon_grows_to_the_slowest_cold_start_seen_and_keeps_the_history() -> None:
    pol = policy(quick())
    pods = [pod(i) for i in range(4)]
    warm(pol, pods, 20)
    before = pol.state.bound.needs()
    slow = PodView(ReplicaId(9), created_s=10.0, ready_s=19.0, util_ratio=None, inflight=0.0, qps=None,
                   zone="zone-a")
    pol.decide(observe(21.0, [*pods, slow], fine(21, 0.5)))
    assert pol.horizon_s == pytest.approx(9.0 + 1.1)
    assert pol.state.bound.needs()[:len(before)] == before


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
    prof = quick(down_fraction=0.6, max_unavailable=0.25)
    pol = policy(prof, min_replicas=2, max_replicas=12, warmup_s=2.0)
    first = pol.decide(observe(0.0, [], None))
    assert 2 <= first.to_replicas <= 12
    fleet = Fleet([pod(i, load=float(i % 4)) for i in range(start)], cold_s=2.0)
    for k, d in enumerate(demands, start=1):
        sig = fine(k, d, queued=5.0 if queued[k % len(queued)] else 0.0, ttft_ms=ttfts[k % len(ttfts)])
        obs = fleet.observe(float(k), sig)
        fast = pol.react(replace(obs, fine=None))
        assert fast is None or (fast.action == "scale_up" and fast.to_replicas <= 12)
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


def test_one_sample_of_served_demand_has_the_bits_of_the_array_path() -> None:
    # The scalar path (the fluid engine's 1 s bins) against the array formula on a two-sample batch.
    values = [0.0, -0.0, -1.0, math.nan, math.inf, -math.inf, 1e-300, 0.5, 1.0, 2.0, 3.7, 20.0, 1e6]
    values += np.random.default_rng(0).exponential(3.0, 200).tolist()
    for p in values:
        for s in values[:30]:
            for ready in (0, 1, 3, 20):
                one = served_demand(np.array([p]), np.array([s]), ready)
                two = served_demand(np.array([p, 0.0]), np.array([s, 0.0]), ready)
                assert one.tobytes() == two[:1].tobytes(), (p, s, ready)


@pytest.mark.parametrize("age_s", [0.0, 3.0, 4.5])
def test_demand_that_arrives_seconds_late_still_sizes_the_scale_up_it_shows(age_s: float) -> None:
    # An agent 3 s behind (its clock, or its buckets): the samples end age_s before the decision.
    # They used to age out of the 2 s sizing window on arrival, and the need read 0 on a saturated
    # fleet; the windows now end at the newest sample (EbbState.read_time), up to max_staleness_s.
    pol = policy()
    pods = [pod(i) for i in range(2)]
    d = pol.decide(observe(1.0 + age_s, pods, fine(1.0, 8.0)))
    assert d.action == "scale_up" and d.signals["need_replicas"] == pytest.approx(4.0)


def test_demand_older_than_the_staleness_limit_sizes_nothing() -> None:
    pol = policy()
    pods = [pod(i) for i in range(2)]
    d = pol.decide(observe(7.0, pods, fine(1.0, 8.0)))  # 6 s old > max_staleness_s 5
    assert d.action != "scale_up" and d.signals.get("need_replicas", 0.0) == 0.0


def _ramps(pol: EbbPolicy, *, sleep_max: int) -> tuple[list[int], list[Decision]]:
    """A fleet of 10 under 10 s ramps from 0.5 to 4 replicas every 40 s; what it removes sleeps (up to
    ``sleep_max``) and a scale-up wakes sleepers first. Returns the fleet sizes and the scale-downs."""
    fleet = Fleet([pod(i) for i in range(10)], cold_s=20.0)
    asleep, sizes, downs = 0, [], []
    for t in range(1, 400):
        phase = t % 40
        demand = 0.5 + 3.5 * min(1.0, phase / 10.0) if phase < 15 else 0.5
        obs = replace(fleet.observe(float(t), fine(t, demand)), asleep_replicas=asleep)
        answer = pol.decide(obs)
        if answer.to_replicas < obs.spec_replicas:
            asleep = min(sleep_max, asleep + obs.spec_replicas - answer.to_replicas)
            downs.append(answer)
        else:
            asleep = max(0, asleep - (answer.to_replicas - obs.spec_replicas))
        fleet.apply(float(t), answer)
        sizes.append(len(fleet.pods))
    return sizes, downs


def test_with_an_asleep_tier_up_to_max_of_the_cold_floor_sleeps_and_what_a_wake_horizon_holds_runs() -> None:
    cold, _ = _ramps(policy(quick(), cold_start_s=20.0), sleep_max=3)
    tiered, downs = _ramps(policy(quick(), cold_start_s=20.0, wake_s=0.5, sleep_max=3), sleep_max=3)
    late = slice(200, None)  # past the warm-up, both have seen the ramps
    assert min(tiered[late]) < min(cold[late])
    assert min(tiered[late]) >= min(cold[late]) - 3
    slept = [d for d in downs if any("may sleep: back in 0.5 s" in r for r in d.reasons)]
    assert slept and all(d.signals["tier_cold_floor_replicas"] - d.to_replicas <= 3 for d in slept)


def test_with_an_asleep_tier_the_running_fleet_keeps_what_its_latency_surges_taught() -> None:
    # Mooncake's conversation trace, before: the running fleet went below the learned floor again
    # and again (5 -> 4, surge, 4 -> 5, five times: 0.252 % violations). A surge says what the
    # demand needs running, whatever the tier. Here one is learned at t = 100 s (6 replicas).
    pol = policy(quick(), cold_start_s=20.0, wake_s=0.5, sleep_max=3)
    fleet = Fleet([pod(i) for i in range(10)], cold_s=20.0)
    asleep, downs = 0, []
    for t in range(1, 400):
        phase = t % 40
        demand = 0.5 + 3.5 * min(1.0, phase / 10.0) if phase < 15 else 0.5
        if t == 100:
            pol.state.learn_shortfall(float(t), 6)
        obs = replace(fleet.observe(float(t), fine(t, demand)), asleep_replicas=asleep)
        answer = pol.decide(obs)
        if answer.action == "scale_down":
            downs.append((t, pol.state.learned_floor(float(t)), answer))
            asleep = min(3, asleep + obs.spec_replicas - answer.to_replicas)
        else:
            asleep = max(0, asleep - (answer.to_replicas - obs.spec_replicas))
        fleet.apply(float(t), answer)
    later = [(floor, d) for t, floor, d in downs if t >= 100]
    assert later and all(floor >= 6 for floor, _ in later)
    assert all(d.to_replicas >= floor for floor, d in later)


def test_without_a_tier_the_policy_decides_as_before() -> None:
    a, _ = _ramps(policy(quick(), cold_start_s=20.0), sleep_max=0)
    b, _ = _ramps(policy(quick(), cold_start_s=20.0), sleep_max=3)  # sleepers it was never told of
    assert a == b
