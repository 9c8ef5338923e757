"""Sweep Pareto sets compare only like with like: one scenario, one workload, one environment (#35)."""

from __future__ import annotations

from ebb.sim.sweep import (
    CHOICE_KNOBS,
    ENVIRONMENT_KNOBS,
    KNOBS,
    WORKLOAD_KNOBS,
    JobOutcome,
    SweepJob,
    comparable_group,
    pareto_groups,
    pareto_ids,
)


def outcome(policy: str, cold_start_s: float, viol: float, gpu: float, **knobs: float) -> JobOutcome:
    kn = tuple(sorted({"cold_start_s": cold_start_s, "minutes": 5.0, **knobs}.items()))
    job = SweepJob("azure-conv", "trace", policy, kn, 0, "auto", "bundled:azure-conv")
    return JobOutcome(job, {"slo_violation_pct": viol, "gpu_hours": gpu}, None, 0.0)


def test_every_knob_is_exactly_one_of_workload_environment_or_choice() -> None:
    assert WORKLOAD_KNOBS | ENVIRONMENT_KNOBS | CHOICE_KNOBS == set(KNOBS)
    assert not (WORKLOAD_KNOBS & ENVIRONMENT_KNOBS or WORKLOAD_KNOBS & CHOICE_KNOBS or ENVIRONMENT_KNOBS & CHOICE_KNOBS)
    assert "cold_start_s" in ENVIRONMENT_KNOBS


def test_two_cold_starts_are_two_pareto_sets_not_one() -> None:
    # #35: cold_start_s=30 and =120 shared one Pareto set, so the slow cluster's jobs were "dominated".
    fast = outcome("hpa", 30, 0.0, 5.0)
    slow_static, slow_hpa = outcome("static", 120, 0.0, 6.0), outcome("hpa", 120, 0.5, 7.0)
    groups = pareto_groups([slow_hpa, fast, slow_static])
    assert [(key, ids) for key, ids in groups] == [
        (comparable_group(fast.job), [fast.job.id]), (comparable_group(slow_static.job), [slow_static.job.id])]
    assert set(pareto_ids([slow_hpa, fast, slow_static])) == {fast.job.id, slow_static.job.id}


def test_a_choice_knob_competes_within_one_set_and_groups_sort_by_number() -> None:
    low, high = outcome("ebb", 60, 0.0, 4.0, disruption_budget=1), outcome("ebb", 60, 0.0, 5.0, disruption_budget=8)
    assert comparable_group(low.job) == comparable_group(high.job)
    assert pareto_ids([low, high]) == [low.job.id]
    nine, hundred = outcome("hpa", 9, 0.0, 1.0), outcome("hpa", 100, 0.0, 1.0)
    assert [key[1] for key, _ in pareto_groups([hundred, nine])] == [
        (("cold_start_s", 9), ("minutes", 5.0)), (("cold_start_s", 100), ("minutes", 5.0))]
