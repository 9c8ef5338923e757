"""Judging decisions after the fact (ebb.sim.judgement): breach episodes, misjudged scale-downs, delay."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pytest

from ebb.sim.judgement import (
    BREACH_BIN_S,
    BREACH_MIN_REQUESTS,
    REACT_CAP_S,
    LaterNeeds,
    bin_counts,
    breach_bin_s,
    breach_bins,
    breach_min_requests,
    breach_starts,
    episode_needs,
    episode_onsets,
    find_episodes,
    memory_horizon_s,
    misjudged_scale_downs,
    violation_delay_ms,
)


def starts(arrivals: Sequence[float], violations: Sequence[float]) -> list[float]:
    found = breach_starts(np.array(arrivals, dtype=np.float64), np.array(violations, dtype=np.float64))
    return [float(x) for x in found]


# -- breach episodes ---------------------------------------------------------------------------------------

def test_a_bin_breaches_when_at_least_one_percent_of_its_requests_violate() -> None:
    assert starts([300, 300, 300], [0, 3, 0]) == [10.0]  # exactly 1 %
    assert starts([1000, 1000], [9, 10]) == [10.0]  # 0.9 % does not, 1.0 % does


def test_a_bin_needs_at_least_three_violating_requests() -> None:
    assert BREACH_MIN_REQUESTS == 3.0
    assert starts([40, 40], [1, 2]) == []  # 2.5 % and 5 % of a quiet bin, but one or two requests
    assert starts([10, 10], [2.5, 2.99]) == []  # weighted fractions under three requests
    assert starts([0, 0], [0, 3]) == [10.0]  # violations in an empty-arrival bin still breach


def test_consecutive_breaching_bins_merge_into_one_episode_starting_at_the_first() -> None:
    arrivals = [100] * 8
    violations = [0, 5, 5, 5, 0, 2, 0, 3]
    assert starts(arrivals, violations) == [10.0, 70.0]  # the bin with 2 is no breach


def test_a_breach_in_the_first_bin_starts_at_zero_and_no_breach_means_no_episode() -> None:
    assert starts([50, 50], [50, 50]) == [0.0]
    assert starts([100] * 5, [0] * 5) == []
    assert starts([], []) == []


def test_bin_counts_groups_times_into_ten_second_bins_with_weights() -> None:
    counts = bin_counts(np.array([0.0, 9.99, 10.0, 25.0]), np.array([1.0, 2.0, 3.0, 4.0]), 30.0)
    assert BREACH_BIN_S == 10.0
    assert counts[:4].tolist() == [3.0, 3.0, 4.0, 0.0]


# -- episodes relative to the trace's rate ------------------------------------------------------------------

def test_the_breach_bin_holds_twenty_requests_at_the_mean_rate_within_ten_seconds_and_an_hour() -> None:
    assert breach_bin_s(7200.0, 3600.0) == 10.0  # 2 a second and more: 10 s, as before
    assert breach_bin_s(96.0, 3600.0) == 750.0  # 1.6 a minute: 12.5 minutes
    assert breach_bin_s(5.0, 3600.0) == 3600.0  # 5 an hour: clamped to an hour
    assert breach_bin_s(0.0, 3600.0) == 10.0 and breach_bin_s(5.0, 0.0) == 10.0


def test_a_bin_needs_three_violations_unless_even_an_hour_expects_fewer_than_twenty_requests() -> None:
    assert breach_min_requests(750.0, 96.0, 3600.0) == 3.0
    assert breach_min_requests(3600.0, 10.0, 3600.0) == 2.0  # ceil(3 × 10 / 20)
    assert breach_min_requests(3600.0, 5.0, 3600.0) == 1.0
    assert breach_min_requests(3600.0, 0.5, 3600.0) == 1.0  # never below one


def test_three_late_requests_in_one_12_5_minute_bin_are_an_episode_at_1_6_requests_a_minute() -> None:
    t = np.arange(0.0, 3600.0, 37.5)  # 96 requests in an hour
    late = np.zeros(len(t))
    late[[41, 42, 44]] = 1.0  # 1,537.5 s, 1,575 s, 1,650 s: the 750 s bin [1,500, 2,250)
    ep = find_episodes(t, np.ones(len(t)), late, 3600.0, 3600.0)
    assert ep.bin_s == 750.0 and ep.min_requests == 3.0
    assert ep.starts_s.tolist() == [1500.0] and ep.ends_s.tolist() == [2250.0] and ep.onsets_s.tolist() == [1537.5]
    late[44] = 0.0
    assert len(find_episodes(t, np.ones(len(t)), late, 3600.0, 3600.0).starts_s) == 0  # two are not


def test_episodes_of_a_busy_trace_keep_ten_second_bins_and_end_with_their_last_breaching_bin() -> None:
    t = np.arange(0.0, 100.0, 0.1)  # 10 a second
    late = ((t >= 20.0) & (t < 40.0)).astype(np.float64)
    ep = find_episodes(t, np.ones(len(t)), late, 100.0, 100.0)
    assert ep.bin_s == BREACH_BIN_S and ep.starts_s.tolist() == [20.0] and ep.ends_s.tolist() == [40.0]


# -- misjudged scale-downs ---------------------------------------------------------------------------------

def test_a_breach_starting_within_the_window_after_a_scale_down_misjudges_it() -> None:
    decisions = [(100.0, 10, 8)]
    assert misjudged_scale_downs(decisions, np.array([150.0]), window_s=120.0) == 1
    assert misjudged_scale_downs(decisions, np.array([220.0]), window_s=120.0) == 1  # window end included


def test_a_breach_outside_the_window_does_not_count() -> None:
    decisions = [(100.0, 10, 8)]
    assert misjudged_scale_downs(decisions, np.array([221.0]), window_s=120.0) == 0
    assert misjudged_scale_downs(decisions, np.array([100.0]), window_s=120.0) == 0  # already breaching
    assert misjudged_scale_downs(decisions, np.array([50.0]), window_s=120.0) == 0


def test_a_scale_up_back_to_the_pre_scale_down_level_within_the_window_counts() -> None:
    none = np.array([], dtype=np.float64)
    assert misjudged_scale_downs([(100.0, 10, 8), (160.0, 8, 10)], none, 120.0) == 1
    assert misjudged_scale_downs([(100.0, 10, 8), (160.0, 8, 12)], none, 120.0) == 1


def test_a_partial_scale_up_does_not_undo_the_scale_down() -> None:
    none = np.array([], dtype=np.float64)
    assert misjudged_scale_downs([(100.0, 10, 8), (160.0, 8, 9)], none, 120.0) == 0


def test_an_undoing_scale_up_after_the_window_does_not_count() -> None:
    none = np.array([], dtype=np.float64)
    assert misjudged_scale_downs([(100.0, 10, 8), (221.0, 8, 10)], none, 120.0) == 0


def test_only_scale_downs_are_judged_and_each_counts_once() -> None:
    decisions = [(0.0, 2, 6), (100.0, 6, 5), (110.0, 5, 4), (130.0, 4, 6), (400.0, 6, 5)]
    # 100: undone at 130 (6 ≥ 6); 110: undone too (6 ≥ 5) and a breach at 140; 400: nothing follows.
    assert misjudged_scale_downs(decisions, np.array([140.0]), 60.0) == 2
    assert misjudged_scale_downs([(0.0, 2, 6), (50.0, 6, 6)], np.array([10.0]), 60.0) == 0


def test_the_memory_horizon_is_sixty_comeback_horizons_about_an_hour() -> None:
    assert memory_horizon_s(60.0) == pytest.approx(3666.0)
    assert memory_horizon_s(10.0, horizons=6.0) == pytest.approx(66.6)


def test_an_episode_needs_one_more_replica_than_breached_or_what_ended_it() -> None:
    assert episode_needs([4, 12], [9, 5]).tolist() == [9, 13]


def _later(onset_s: float, need: int, ready: int, memory_s: float = 3666.0) -> LaterNeeds:
    return LaterNeeds(np.array([onset_s]), np.array([need], dtype=np.int64), np.array([ready], dtype=np.int64),
                      memory_s)


def test_a_scale_down_below_the_need_of_a_breach_within_the_memory_is_misjudged() -> None:
    decisions = [(0.0, 10, 4)]  # a breach 40 min later with 4 ready, ended with 9
    none = np.array([], dtype=np.float64)
    assert misjudged_scale_downs(decisions, none, 120.0) == 0  # the short rule alone misses it
    assert misjudged_scale_downs(decisions, none, 120.0, _later(2400.0, 9, 4)) == 1
    assert misjudged_scale_downs(decisions, none, 120.0, _later(3666.0, 9, 4)) == 1  # horizon end included


def test_a_breach_past_the_memory_or_one_the_scale_down_left_enough_for_does_not_count() -> None:
    decisions = [(0.0, 10, 4)]
    none = np.array([], dtype=np.float64)
    assert misjudged_scale_downs(decisions, none, 120.0, _later(3667.0, 9, 4)) == 0  # beyond the memory
    assert misjudged_scale_downs(decisions, none, 120.0, _later(2400.0, 4, 3)) == 0  # 4 left, 4 needed
    assert misjudged_scale_downs(decisions, none, 120.0, _later(2400.0, 13, 12)) == 0  # fleet back above 10
    assert misjudged_scale_downs([(2400.0, 10, 4)], none, 120.0, _later(2400.0, 9, 4)) == 0  # not after it


# -- episode onsets -----------------------------------------------------------------------------------------

def test_an_onset_is_the_first_violating_arrival_in_the_episode_s_first_bin() -> None:
    t = np.array([11.0, 12.5, 14.0, 15.0, 31.0])
    violated = np.array([0.0, 1.0, 1.0, 1.0, 1.0])
    first = np.array([1, 3], dtype=np.int64)
    assert episode_onsets(first, t, violated).tolist() == [12.5, 31.0]


def test_an_onset_without_a_violation_in_its_bin_falls_back_to_the_bin_start() -> None:
    assert episode_onsets(np.array([2], dtype=np.int64), np.array([5.0]), np.array([1.0])).tolist() == [20.0]
    assert breach_bins(np.array([100.0, 100.0]), np.array([0.0, 4.0])).tolist() == [1]


# -- SLA-violation delay -----------------------------------------------------------------------------------

def test_the_delay_is_the_median_time_from_each_onset_to_the_next_scale_up() -> None:
    decisions = [(15.0, 4, 6), (70.0, 6, 5), (100.0, 5, 8), (500.0, 8, 9)]
    # onsets at 10 → 15 (5 s), 60 → 100 (40 s), 490 → 500 (10 s); the scale-down at 70 is not a reaction
    assert violation_delay_ms(decisions, np.array([10.0, 60.0, 490.0])) == 10_000.0


def test_a_scale_up_at_the_onset_reacts_in_zero_ms() -> None:
    assert violation_delay_ms([(20.0, 2, 3)], np.array([20.0])) == 0.0


def test_capacity_asked_for_less_than_a_cold_start_before_the_onset_is_a_reaction_in_zero_ms() -> None:
    assert violation_delay_ms([(5.0, 2, 3)], np.array([10.0]), cold_start_s=60.0) == 0.0
    # More than a cold start before: that capacity was already serving when the breach began.
    assert violation_delay_ms([(5.0, 2, 3), (130.0, 3, 4)], np.array([70.0]), cold_start_s=60.0) == 60_000.0


def test_an_episode_without_a_reaction_within_600_s_is_charged_600_s() -> None:
    assert REACT_CAP_S == 600.0
    assert violation_delay_ms([], np.array([0.0])) == 600_000.0
    assert violation_delay_ms([(1000.0, 2, 3)], np.array([10.0])) == 600_000.0
    assert violation_delay_ms([(5.0, 2, 3)], np.array([10.0, 20.0])) == 600_000.0  # before, and no cold start


def test_the_delay_is_nan_without_any_episode() -> None:
    assert math.isnan(violation_delay_ms([(1.0, 1, 4)], np.array([], dtype=np.float64)))
