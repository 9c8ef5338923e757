"""Judging decisions after the fact (ebb.sim.judgement): breach episodes, misjudged scale-downs, delay."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ebb.sim.judgement import (
    BREACH_BIN_S,
    REACT_CAP_S,
    bin_counts,
    breach_starts,
    misjudged_scale_downs,
    violation_delay_ms,
)


def starts(arrivals: Sequence[float], violations: Sequence[float]) -> list[float]:
    found = breach_starts(np.array(arrivals, dtype=np.float64), np.array(violations, dtype=np.float64))
    return [float(x) for x in found]


# -- breach episodes ---------------------------------------------------------------------------------------

def test_a_bin_breaches_when_at_least_one_percent_of_its_requests_violate() -> None:
    assert starts([100, 100, 100], [0, 1, 0]) == [10.0]  # exactly 1 %
    assert starts([1000, 1000], [9, 10]) == [10.0]  # 0.9 % does not, 1.0 % does


def test_a_bin_needs_at_least_one_whole_violation() -> None:
    assert starts([10, 10], [0.5, 0.99]) == []  # weighted fractions under one request
    assert starts([0, 0], [0, 1]) == [10.0]  # a violation in an empty-arrival bin still breaches


def test_consecutive_breaching_bins_merge_into_one_episode_starting_at_the_first() -> None:
    arrivals = [100] * 8
    violations = [0, 5, 5, 5, 0, 2, 0, 3]
    assert starts(arrivals, violations) == [10.0, 50.0, 70.0]


def test_a_breach_in_the_first_bin_starts_at_zero_and_no_breach_means_no_episode() -> None:
    assert starts([50, 50], [50, 50]) == [0.0]
    assert starts([100] * 5, [0] * 5) == []
    assert starts([], []) == []


def test_bin_counts_groups_times_into_ten_second_bins_with_weights() -> None:
    counts = bin_counts(np.array([0.0, 9.99, 10.0, 25.0]), np.array([1.0, 2.0, 3.0, 4.0]), 30.0)
    assert BREACH_BIN_S == 10.0
    assert counts[:4].tolist() == [3.0, 3.0, 4.0, 0.0]


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


# -- SLA-violation delay -----------------------------------------------------------------------------------

def test_the_delay_is_the_median_time_from_each_episode_to_the_next_scale_up() -> None:
    decisions = [(15.0, 4, 6), (70.0, 6, 5), (100.0, 5, 8), (500.0, 8, 9)]
    # episodes at 10 → 15 (5 s), 60 → 100 (40 s), 490 → 500 (10 s); the scale-down at 70 is not a reaction
    assert violation_delay_ms(decisions, np.array([10.0, 60.0, 490.0])) == 10_000.0


def test_a_scale_up_at_the_episode_start_reacts_in_zero_ms() -> None:
    assert violation_delay_ms([(20.0, 2, 3)], np.array([20.0])) == 0.0


def test_an_episode_without_a_reaction_within_600_s_is_charged_600_s() -> None:
    assert REACT_CAP_S == 600.0
    assert violation_delay_ms([], np.array([0.0])) == 600_000.0
    assert violation_delay_ms([(1000.0, 2, 3)], np.array([10.0])) == 600_000.0
    assert violation_delay_ms([(5.0, 2, 3)], np.array([10.0, 20.0])) == 600_000.0  # the scale-up came before


def test_the_delay_is_nan_without_any_episode() -> None:
    assert math.isnan(violation_delay_ms([(1.0, 1, 4)], np.array([], dtype=np.float64)))
