"""Replica lifecycles and what they cost: billed replica-seconds, replicas per bin, the peak."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ebb.model.ids import ReplicaId
from ebb.sim.fleet import FleetLog, ReplicaLog

NAN = math.nan


def _fleet(*lives: tuple[float, float, float], end_s: float) -> FleetLog:
    logs = tuple(ReplicaLog(ReplicaId(i), req, ready, stop) for i, (req, ready, stop) in enumerate(lives))
    return FleetLog(logs, scale_ups=0, scale_downs=0, end_s=end_s)


def _hand_made() -> FleetLog:
    return _fleet(
        (0.0, 0.0, 10.0),  # warm from the start, stopped at 10
        (2.0, 5.0, 8.0),  # cold-started 2 → 5, stopped at 8
        (4.0, NAN, 6.0),  # removed while still cold-starting: never ready
        (7.0, 9.0, NAN),  # still running at the end (stop = end_s)
        end_s=12.0,
    )


def test_replica_seconds_bills_from_request_to_stop_and_running_replicas_to_the_end() -> None:
    assert _hand_made().replica_seconds() == pytest.approx(10 + 6 + 2 + 5)


def test_replica_seconds_clips_lifetimes_at_the_end_of_the_horizon() -> None:
    fleet = _fleet((0.0, 0.0, 20.0), (15.0, NAN, 30.0), end_s=10.0)
    assert fleet.replica_seconds() == pytest.approx(10.0)


def test_an_empty_fleet_costs_nothing_and_has_no_peak() -> None:
    fleet = _fleet(end_s=5.0)
    assert fleet.replica_seconds() == 0.0
    assert fleet.peak_replicas() == 0
    billed, ready = fleet.per_bin(np.array([0.0, 2.5, 5.0]))
    assert billed.tolist() == [0.0, 0.0]
    assert ready.tolist() == [0.0, 0.0]


def test_per_bin_covers_each_bin_exactly_for_billed_replicas() -> None:
    billed, _ = _hand_made().per_bin(np.array([0.0, 4.0, 8.0, 12.0]))
    np.testing.assert_allclose(billed, [6 / 4, 11 / 4, 6 / 4])


def test_per_bin_counts_ready_replicas_from_ready_to_stop_and_skips_the_never_ready() -> None:
    _, ready = _hand_made().per_bin(np.array([0.0, 4.0, 8.0, 12.0]))
    np.testing.assert_allclose(ready, [4 / 4, 7 / 4, 5 / 4])


def test_per_bin_is_exact_on_unit_bins() -> None:
    billed, ready = _hand_made().per_bin(np.arange(13, dtype=np.float64))
    expect_billed = [1, 1, 2, 2, 3, 3, 2, 3, 2, 2, 1, 1]
    expect_ready = [1, 1, 1, 1, 1, 2, 2, 2, 1, 2, 1, 1]
    np.testing.assert_allclose(billed, expect_billed)
    np.testing.assert_allclose(ready, expect_ready)


def test_a_replica_ready_exactly_when_it_stops_never_serves() -> None:
    fleet = _fleet((0.0, 5.0, 5.0), end_s=10.0)
    billed, ready = fleet.per_bin(np.array([0.0, 5.0, 10.0]))
    np.testing.assert_allclose(billed, [1.0, 0.0])
    np.testing.assert_allclose(ready, [0.0, 0.0])


def test_peak_replicas_counts_the_most_billed_at_once() -> None:
    assert _hand_made().peak_replicas() == 3


def test_peak_replicas_treats_a_stop_and_a_start_at_the_same_instant_as_a_handover() -> None:
    fleet = _fleet((0.0, 0.0, 5.0), (5.0, 6.0, 10.0), (5.0, 6.0, 10.0), end_s=10.0)
    assert fleet.peak_replicas() == 2


@st.composite
def _fleets(draw: st.DrawFn) -> FleetLog:
    end = draw(st.floats(1.0, 1000.0))
    lives = []
    for _ in range(draw(st.integers(0, 12))):
        req = draw(st.floats(0.0, end))
        stop = draw(st.one_of(st.just(NAN), st.floats(req, end)))
        top = end if math.isnan(stop) else stop
        ready = draw(st.one_of(st.just(NAN), st.floats(req, top)))
        lives.append((req, ready, stop))
    return _fleet(*lives, end_s=end)


@settings(max_examples=200, deadline=None)
@given(fleet=_fleets(), nbins=st.integers(1, 50), overhang=st.floats(1.0, 2.0))
def test_mean_billed_per_bin_times_width_sums_to_replica_seconds(fleet: FleetLog, nbins: int,
                                                                 overhang: float) -> None:
    width = fleet.end_s * overhang / nbins
    edges = np.arange(nbins + 1, dtype=np.float64) * width
    billed, ready = fleet.per_bin(edges)
    assert float(np.sum(billed * width)) == pytest.approx(fleet.replica_seconds(), rel=1e-9, abs=1e-6)
    assert np.all(ready <= billed + 1e-9)
    assert np.all(billed <= fleet.peak_replicas() + 1e-9)


@settings(max_examples=200, deadline=None)
@given(fleet=_fleets(), share=st.floats(0.0, 0.999))
def test_a_warm_up_bills_exactly_what_is_billed_after_it(fleet: FleetLog, share: float) -> None:
    warm = fleet.end_s * share
    before, _ = fleet.per_bin(np.array([0.0, warm])) if warm > 0 else (np.zeros(1), None)
    assert fleet.replica_seconds(warm) == pytest.approx(fleet.replica_seconds() - float(before[0]) * warm,
                                                        rel=1e-9, abs=1e-6)
    assert fleet.peak_replicas(warm) <= fleet.peak_replicas()


def test_a_warm_up_counts_the_peak_and_the_decisions_from_its_end_only() -> None:
    fleet = FleetLog(_hand_made().replicas, scale_ups=3, scale_downs=2, end_s=12.0,
                     decisions=((2.0, 1, 2), (4.0, 2, 3), (6.0, 3, 2), (7.0, 2, 3), (8.0, 3, 2)))
    assert fleet.peak_replicas() == 3 and fleet.peak_replicas(8.5) == 2  # at 8.5: the first and the last
    assert fleet.scale_counts() == (3, 2) and fleet.scale_counts(6.5) == (1, 1)
    assert fleet.decisions_from(7.0) == ((7.0, 2, 3), (8.0, 3, 2)) and fleet.decisions_from(0.0) == fleet.decisions


def test_ready_at_counts_replicas_from_ready_until_stopped_never_the_cold_starting() -> None:
    # 0–10 warm; 5–8 after a cold start; never ready; 9 until the end (12).
    assert _hand_made().ready_at(np.array([0.0, 4.9, 5.0, 7.99, 8.0, 9.5, 10.0, 11.9])).tolist() \
        == [1, 1, 2, 2, 1, 2, 1, 1]
