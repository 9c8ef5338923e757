"""resume_verdict: what a successor does with a decision left without an outcome (pure, no I/O)."""

from __future__ import annotations

import pytest

from ebb.actuate.base import FleetState, ReplicaState
from ebb.live.resume import ReadDemand, ResumeLimits, ResumeVerdict, resume_verdict
from ebb.model.decisions import DecisionRecord
from ebb.model.ids import CycleId, DecisionId, ReplicaId, RunId

NOW_NS = 1_800_000_000 * 10**9
LIMITS = ResumeLimits(min_replicas=1, max_replicas=8, max_age_s=60.0, clock_skew_s=5.0)


def decision(frm: int, to: int, *, age_s: float = 1.0, victims: tuple[str, ...] = ()) -> DecisionRecord:
    return DecisionRecord(decision_id=DecisionId("r-7"), cycle_id=CycleId("r-c7"), run_id=RunId("r"),
                          ts_ns=NOW_NS - int(age_s * 1e9), target="ns/llm",
                          action="scale_up" if to > frm else "scale_down", from_replicas=frm, to_replicas=to,
                          victims=victims, plan={"mode": "act"})


def fleet(*names: str, first_id: int = 0) -> FleetState:
    """Pods ``names`` (oldest first), numbered from ``first_id`` as a fresh actuator instance might."""
    return FleetState("ns/llm", len(names), tuple(ReplicaState(ReplicaId(first_id + i), n, 0.0, 0.0)
                                                  for i, n in enumerate(names)))


QUIET = ReadDemand(peak_replicas=0.5, queued=0.0)
"""The resuming read: half a replica of demand, nothing queued (fits any target of 1 or more)."""


def verdict(*args: object, **kw: object) -> ResumeVerdict:
    kw.setdefault("demand", QUIET)
    return resume_verdict(*args, **kw)  # type: ignore[arg-type]


FOUR = ("pod-a", "pod-b", "pod-c", "pod-d")


def test_a_young_scale_down_on_fresh_data_is_applied_with_its_victims_mapped_to_the_current_ids() -> None:
    v = verdict(decision(4, 2, victims=("pod-b", "pod-a")), fleet(*FOUR, first_id=10), NOW_NS, LIMITS)
    assert (v.apply, v.to_replicas, v.note) == (True, 2, "applied after restart")
    assert v.victims == (ReplicaId(11), ReplicaId(10)), "names, not the ids of a previous actuator"


def test_a_scale_down_whose_victim_left_the_fleet_is_not_resumed() -> None:
    v = verdict(decision(4, 2, victims=("pod-a", "pod-z")), fleet(*FOUR), NOW_NS, LIMITS)
    assert not v.apply and v.to_replicas == 4
    assert v.note.startswith("not resumed: victim(s) pod-z no longer in the fleet")


@pytest.mark.parametrize(("age_s", "shown"), [(86_400.0, "86400"), (61.0, "61"), (-3600.0, "-3600")],
                         ids=["day-old", "just-too-old", "future"])
@pytest.mark.parametrize(("frm", "to"), [(4, 0), (4, 6)], ids=["scale-down", "scale-up"])
def test_an_old_or_future_stamped_decision_is_not_resumed(age_s: float, shown: str, frm: int, to: int) -> None:
    # The day-old 4 → 0 is red-team C2's forged row (recipe C).
    v = verdict(decision(frm, to, age_s=age_s), fleet(*FOUR), NOW_NS, LIMITS)
    assert not v.apply and v.note.startswith(f"not resumed: recorded {shown} s ago, outside [-5, 60] s")


def test_a_clock_skew_within_the_bound_is_tolerated() -> None:
    assert verdict(decision(4, 2, age_s=-4.0), fleet(*FOUR), NOW_NS, LIMITS).apply


@pytest.mark.parametrize("why", ["stale data", "source: connection refused",
                                 "incomplete fleet: 3 of 4 ready replicas reported", "no fresh data"])
def test_a_young_scale_down_on_stale_or_incomplete_data_is_not_resumed(why: str) -> None:
    v = verdict(decision(4, 2), fleet(*FOUR), NOW_NS, LIMITS, data_note=why)
    assert not v.apply and v.note.startswith("not resumed") and why in v.note and "no fresh data" in v.note


def test_a_scale_up_needs_no_fresh_data() -> None:
    v = verdict(decision(4, 6), fleet(*FOUR), NOW_NS, LIMITS, data_note="stale data")
    assert (v.apply, v.to_replicas) == (True, 6)


def test_a_scale_down_below_the_floor_is_clamped_and_its_victims_cut_to_the_clamped_count() -> None:
    limits = ResumeLimits(min_replicas=3, max_replicas=8)
    v = verdict(decision(4, 0, victims=FOUR), fleet(*FOUR), NOW_NS, limits)
    assert (v.apply, v.to_replicas, v.victims) == (True, 3, (ReplicaId(0),))
    assert v.note == "applied after restart (clamped to 3 replicas)"


def test_a_scale_down_clamped_to_no_decrease_is_not_resumed() -> None:
    v = verdict(decision(4, 2), fleet(*FOUR), NOW_NS, ResumeLimits(min_replicas=4, max_replicas=8))
    assert not v.apply and v.note == "not resumed: 2 replicas clamped to 4, no decrease from 4"


def test_a_scale_up_is_clamped_to_the_ceiling() -> None:
    assert verdict(decision(4, 10_000), fleet(*FOUR), NOW_NS, LIMITS).to_replicas == 8


def test_a_repeated_victim_of_a_forged_row_is_named_once() -> None:
    v = verdict(decision(4, 2, victims=("pod-a", "pod-a")), fleet(*FOUR), NOW_NS, LIMITS)
    assert v.victims == (ReplicaId(0),)


@pytest.mark.parametrize(("at", "note"), [(2, "found applied after restart"), (3, "superseded")])
def test_a_fleet_not_at_from_is_never_changed(at: int, note: str) -> None:
    v = verdict(decision(4, 2, age_s=86_400.0), fleet(*FOUR[:at]), NOW_NS, LIMITS, data_note="stale data")
    assert not v.apply and v.to_replicas == at and v.note.startswith(note)


@pytest.mark.parametrize(("demand", "why"), [
    (ReadDemand(peak_replicas=3.6, queued=0.0), "3.6 replicas of demand and 0 queued now need 4 at 90%"),
    (ReadDemand(peak_replicas=0.5, queued=12.0), "0.5 replicas of demand and 12 queued"),
])
def test_a_young_scale_down_is_not_resumed_when_demand_now_needs_more_than_its_target(demand: ReadDemand,
                                                                                    why: str) -> None:
    # red-team T3-H4: 4 -> 1 recorded on a quiet fleet, resumed 5 s later on a saturated one
    v = resume_verdict(decision(4, 1, age_s=5.0, victims=("pod-b", "pod-c", "pod-d")), fleet(*FOUR), NOW_NS, LIMITS,
                       demand=demand)
    assert not v.apply and v.to_replicas == 4 and v.note.startswith("not resumed: demand changed: ") and why in v.note


def test_a_scale_down_is_not_resumed_without_samples_to_check_demand_against() -> None:
    v = resume_verdict(decision(4, 2, victims=("pod-b", "pod-a")), fleet(*FOUR), NOW_NS, LIMITS)
    assert not v.apply and "no samples" in v.note


def test_a_scale_down_whose_target_still_serves_the_demand_now_is_resumed() -> None:
    v = resume_verdict(decision(4, 2, victims=("pod-b", "pod-a")), fleet(*FOUR), NOW_NS, LIMITS,
                       demand=ReadDemand(peak_replicas=1.8, queued=0.0))
    assert v.apply and v.to_replicas == 2
