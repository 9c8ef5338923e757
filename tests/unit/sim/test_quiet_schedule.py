"""The request engine's order of samples and reconciles over a quiet stretch (ebb.sim.quiet_schedule)."""

from __future__ import annotations

from ebb.sim.quiet_schedule import between, quiet_schedule


def test_samples_come_before_a_reconcile_at_the_same_time_and_the_reconciles_own_is_not_the_fast_paths() -> None:
    plan = quiet_schedule(0.5, 1.0, 1.0, 0.25, 2.4, 100.0, 1000)
    assert plan.times_s == [0.5, 0.75, 1.0, 1.25, 1.5, 1.75, 2.0, 2.25]
    assert plan.reacts == [True, True, False, True, True, True, False, True]
    assert plan.cuts == [3, 7] and plan.ticks_s == [1.0, 2.0]
    assert (plan.next_sample_s, plan.next_tick_s, plan.two_ahead) == (2.5, 3.0, False)


def test_a_sample_just_past_a_reconcile_ends_the_schedule_before_it() -> None:
    # Steps that have drifted half a microsecond late: the fourth sample lands just after the reconcile.
    t0 = 0.25 + 5e-7
    plan = quiet_schedule(t0, 1.0, 1.0, 0.25, 50.0, 100.0, 1000)
    late = ((t0 + 0.25) + 0.25) + 0.25
    assert 0.0 < late - 1.0 <= 1e-6 and not between(late, 2.0, 1.0)
    assert plan.two_ahead and plan.ticks_s == [1.0] and plan.cuts == [3] and all(plan.reacts)
    assert plan.next_sample_s == late


def test_nothing_at_or_after_the_stop_nor_past_the_horizon_nor_past_the_sample_cap() -> None:
    assert quiet_schedule(0.5, 1.0, 1.0, 0.25, 1.0, 100.0, 1000).times_s == [0.5, 0.75]
    assert quiet_schedule(0.5, 1.0, 1.0, 0.25, 9.0, 1.0, 1000).ticks_s == [1.0]
    assert len(quiet_schedule(0.5, 1.0, 1.0, 0.25, 9.0, 100.0, 5).times_s) == 5
