"""ComebackBound (ebb.decide.comeback): the risk that the need outgrows a fleet within the horizon."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ebb.decide.comeback import ComebackBound, FloorAfter


def fed(values: list[float] | np.ndarray, **kw: object) -> ComebackBound:
    b = ComebackBound(kw.pop("horizon_s", 10.0), **kw)  # type: ignore[arg-type]
    for v in values:
        b.record(float(v))
    return b


def test_without_a_complete_horizon_there_is_no_floor_fail_safe() -> None:
    b = fed([3.0] * 15, level_s=10.0, tail=False, periodic=False)  # level window full at 10, horizon 10
    est = b.floor(0.01)
    assert est.samples == 0 and math.isnan(est.floor_replicas) and math.isnan(b.risk(5.0))


def test_flat_need_has_no_rise_and_a_floor_at_its_level() -> None:
    b = fed([4.0] * 200, level_s=10.0, tail=False, periodic=False)
    est = b.floor(0.01)
    assert est.rise_replicas == 0.0 and est.floor_replicas == 4.0 and est.level_replicas == 4.0
    assert b.risk(4.0) == 0.0 and b.risk(3.9) == 1.0


def test_a_burst_every_so_often_sets_the_floor_above_the_level() -> None:
    need = np.full(600, 1.0)
    need[100:105] = need[300:305] = need[500:505] = 9.0
    b = fed(need, level_s=10.0, tail=False, periodic=False, level_peak=False)
    est = b.floor(0.01)
    # A tenth of all horizons hold a burst: at a 1 % budget the floor is the burst (rise 8 above 1).
    assert math.isclose(est.floor_replicas, 9.0) and est.rise_replicas == 8.0
    assert b.risk(9.0) == 0.0 and 0.05 < b.risk(5.0) < 0.15
    # At a 20 % budget a burst that rare is accepted: the floor is the level.
    assert b.floor(0.2).floor_replicas == 1.0


def test_a_level_over_a_partial_window_makes_no_rise() -> None:
    # The first level_s − 1 seconds have a level over fewer seconds (a start-up transient): skipped.
    b = fed([1.0] * 100, horizon_s=10.0, level_s=10.0, tail=False, periodic=False)
    assert b.samples == 100 - 10 - 9


def test_the_gumbel_tail_extrapolates_past_the_largest_rise_seen_on_thin_history() -> None:
    rng = np.random.default_rng(1)
    need = rng.exponential(1.0, 400)
    plain = fed(need, level_s=10.0, tail=False, periodic=False).floor(0.001)
    tail = fed(need, level_s=10.0, tail=True, periodic=False).floor(0.001)
    assert tail.floor_replicas > plain.floor_replicas
    assert fed(need, level_s=10.0, tail=True, periodic=False).floor(0.001).rise_replicas >= \
        float(fed(need, level_s=10.0, tail=False, periodic=False).rises().max())


def test_memory_forgets_rises_older_than_memory_s() -> None:
    need = np.full(400, 1.0)
    need[20:25] = 9.0  # a burst early on, then 370 s of calm
    b = fed(need, horizon_s=10.0, memory_s=100.0, level_s=10.0, tail=False, periodic=False)
    assert b.samples == 100 and b.floor(0.001).floor_replicas == 1.0


def test_a_periodic_burst_is_expected_at_its_phase_and_not_in_between() -> None:
    need = np.full(4 * 600, 0.5)
    for k in range(4):
        need[600 * k + 300: 600 * k + 330] = 8.0
    b = ComebackBound(30.0, memory_s=3000.0, level_s=10.0)
    for v in need[:3 * 600 + 100]:  # now: 200 s before the fourth burst
        b.record(float(v))
    calm = b.floor(0.002)
    assert calm.periods >= 2 and math.isclose(calm.period_s, 600.0)
    assert calm.floor_replicas < 2.0  # in between, the level and a small rise
    for v in need[3 * 600 + 100: 3 * 600 + 280]:  # 20 s before the burst: inside its horizon
        b.record(float(v))
    due = b.floor(0.002)
    assert due.periods >= 2 and due.floor_replicas >= 8.0


@settings(max_examples=100)
@given(st.lists(st.floats(0.0, 100.0), min_size=30, max_size=300), st.floats(0.0001, 0.3),
       st.floats(0.0, 100.0), st.floats(0.0, 100.0))
def test_risk_falls_as_capacity_grows_and_the_floor_meets_its_budget(need: list[float], budget: float,
                                                                       a: float, b: float) -> None:
    bound = fed(need, horizon_s=5.0, level_s=5.0, periodic=False)
    lo, hi = sorted((a, b))
    if bound.samples == 0:
        return
    assert bound.risk(hi) <= bound.risk(lo)
    est = bound.floor(budget)
    assert est.floor_replicas >= est.level_replicas and math.isfinite(est.floor_replicas)
    assert bound.risk(est.floor_replicas) <= budget + 1.0 / bound.samples


def test_the_floor_reads_the_same_quantile_mean_and_spread_as_a_partition_of_the_rises() -> None:
    # The sorted copy and the fused mean/std replace np.partition, r.mean() and r.std() bit for bit,
    # through the ring's wrap-around (memory of 50 s, 400 records).
    rng = np.random.default_rng(3)
    b = ComebackBound(5.0, memory_s=50.0, level_s=5.0, tail=True, periodic=False)
    for v in rng.exponential(4.0, 400).round(1):
        b.record(float(v))
        n = b.samples
        if n == 0:
            continue
        r = b.rises().copy()
        for budget in (0.001, 0.05, 0.5):
            k = max(min(n - 1, math.ceil((1.0 - budget) * n) - 1), 0)
            z = -math.log(-math.log1p(-budget)) - 0.5772156649015329
            want = max(float(np.partition(r, k)[k]),
                       float(r.mean()) + math.sqrt(6.0) / math.pi * z * float(r.std()), 0.0)
            assert b.floor(budget).rise_replicas == want


@settings(max_examples=150, deadline=None)
@given(st.lists(st.one_of(st.floats(0.0, 50.0), st.just(0.0), st.just(float("nan"))), min_size=1, max_size=200),
       st.booleans(), st.booleans(), st.sampled_from([0.001, 0.01, 0.2]), st.integers(0, 120))
def test_the_floor_bound_before_a_record_is_the_floor_after_it_within_rounding_never_above(
        needs: list[float], level_peak: bool, tail: bool, budget: float, start: int) -> None:
    # Memory of 40 s: past 40 records the ring is full and every rise pushes one out.
    bound = ComebackBound(5.0, memory_s=40.0, level_s=7.0, level_peak=level_peak, tail=tail, periodic=False)
    for v in needs[:start]:
        bound.record(v)
    after = FloorAfter(bound, budget)
    for v in needs[start:]:
        low = after.bound(v)
        after.record(v)
        floor = bound.floor(budget).floor_replicas
        assert low is not None
        if math.isnan(floor):
            assert math.isnan(low)
        else:
            assert floor - 1e-6 * (1.0 + abs(floor)) <= low <= floor


def test_the_floor_bound_is_unknown_while_a_period_could_set_the_floor() -> None:
    bound = ComebackBound(5.0, memory_s=40.0, level_s=7.0)
    assert bound.periodic is not None
    for _ in range(20):
        bound.record(1.0)
    assert FloorAfter(bound, 0.01).bound(1.0) is None  # never searched yet: the next query will
    bound.floor(0.01)  # searches (too little history: no period) and schedules the next search
    after = FloorAfter(bound, 0.01)
    assert after.bound(1.0) is not None
    while (bound._i + 1) * 1.0 < bound.periodic.next_detect_s:
        after.record(1.0)
    assert after.bound(1.0) is None


@pytest.mark.parametrize("level_peak", [True, False])
@pytest.mark.parametrize("budget", [0.001, 0.05])
def test_the_floor_bound_tracks_bursty_needs_through_a_full_ring(level_peak: bool, budget: float) -> None:
    # Bursty needs (70 % idle seconds) over 400 records, the ring of 40 rises full from record ~52:
    # the bound is the floor within rounding every second, the Gumbel tail's moments moving with it.
    rng = np.random.default_rng(1)
    needs = (rng.gamma(2.0, 3.0, 400) * (rng.random(400) < 0.3)).tolist()
    bound = ComebackBound(5.0, memory_s=40.0, level_s=7.0, level_peak=level_peak, tail=True, periodic=False)
    for v in needs[:60]:
        bound.record(v)
    after = FloorAfter(bound, budget)
    for v in needs[60:]:
        low = after.bound(v)
        after.record(v)
        floor = bound.floor(budget).floor_replicas
        assert low is not None and floor - 1e-6 * (1.0 + floor) <= low <= floor
