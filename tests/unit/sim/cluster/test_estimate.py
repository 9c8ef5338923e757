"""A cluster run's estimate: each policy measured on the scenario's first seconds, scaled to all of them."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from ebb.config.scenario import parse_scenario
from ebb.sim.cluster.estimate import (
    SLICE_S_MAX,
    SLICE_S_MIN,
    ClusterEstimate,
    measure_cluster,
    slice_inputs,
    slice_seconds,
)
from ebb.sim.cluster.inputs import build_inputs
from tests.unit.sim.cluster.test_cluster_inputs import SCENARIO, FakeSeries


@pytest.mark.parametrize(("seconds", "expected"), [(10, 10), (30, 30), (200, 30), (1800, 90), (6000, 300),
                                                   (86_400 * 7, 300)])
def test_the_slice_is_a_twentieth_of_the_scenario_between_half_a_minute_and_five(seconds: int, expected: int) -> None:
    assert slice_seconds(seconds) == expected
    assert slice_seconds(seconds) <= max(seconds * 0.05, min(seconds, SLICE_S_MIN)) or seconds <= SLICE_S_MIN
    assert slice_seconds(seconds) <= SLICE_S_MAX


def test_a_slice_cuts_every_series_to_its_first_seconds_and_scores_from_its_start() -> None:
    sc = parse_scenario(SCENARIO.replace("duration_s: 120", "duration_s: 120\nwarmup_s: 60"), source="t.yaml")
    inp = build_inputs(sc, FakeSeries())
    part = slice_inputs(inp, 30)
    assert part.seconds == 30 and part.batch_demand.shape[1] == 30 and part.warmup_s == 0
    assert np.array_equal(part.arrivals, inp.arrivals[:, :30]) and np.array_equal(part.initial, inp.initial)


def test_each_policy_is_measured_on_the_slice_and_scaled_by_the_seconds_ratio() -> None:
    sc = parse_scenario(SCENARIO.replace("duration_s: 120", "duration_s: 1200"), source="t.yaml")
    inp = build_inputs(sc, FakeSeries())
    ticks = itertools.count(0.0, 0.5)  # each run takes 0.5 s on this clock
    est = measure_cluster(sc, inp, ["static", "hpa:target=0.7"], clock=lambda: next(ticks))
    assert est.slice_s == 60 and est.seconds == 1200
    assert est.per_policy_s == (10.0, 10.0) and est.expected_s == 20.0  # 0.5 s × 1200 / 60
    assert est.line() == "tiny: 2 policies over 20 min: expected ≈ 20 s (measured on 5 % of the scenario)"


def test_time_left_follows_how_fast_the_done_policies_ran_against_their_estimate() -> None:
    est = ClusterEstimate("s", 3600, 180, ("ebb", "hpa", "static"), (60.0, 20.0, 20.0))
    assert est.left_s(0, 0.0) == 100.0
    assert est.left_s(1, 120.0) == 80.0  # ebb ran twice as slow as measured: so will the rest
    assert est.left_s(2, 40.0) == 10.0
    assert est.left_s(3, 90.0) == 0.0
