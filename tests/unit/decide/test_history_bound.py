"""What a short history can bound: the comeback floor holds the largest rise seen until it can."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ebb.decide.comeback import ComebackBound


def test_an_hour_of_history_cannot_bound_a_risk_of_one_in_a_thousand() -> None:
    bound = ComebackBound(61.0, memory_s=3660.0, level_s=61.0)
    assert bound.history_bound().risk_bound == 1.0  # no history: nothing is bounded
    for k in range(3660 + 122):
        bound.record(5.0 + (k % 7 == 0))
    hist = bound.history_bound()
    assert hist.horizons == pytest.approx(bound.samples / 61.0)
    assert hist.risk_bound == pytest.approx(1.0 - 0.05 ** (1.0 / hist.horizons))
    assert 0.04 < hist.risk_bound < 0.06 and 0.0 < hist.largest_rise_replicas <= 1.0


def test_three_thousand_horizons_bound_it_within_the_budget() -> None:
    bound = ComebackBound(1.0, memory_s=4000.0, level_s=1.0)
    for k in range(3100):
        bound.record(float(k % 5))
    assert bound.history_bound().risk_bound < 0.001


def test_a_history_that_starts_inside_a_burst_holds_the_burst_until_it_leaves_memory() -> None:
    bound = ComebackBound(5.0, memory_s=100.0, level_s=10.0, periodic=False)
    for k in range(200):
        bound.record(20.0 if k < 10 else 1.0)  # the level before the first window is unknown
        hist = bound.history_bound()
        if bound.samples:
            assert hist.largest_rise_replicas < 1.0  # the rises never see the opening burst
            opening = 20.0 if k < 100 + 10 - 1 else 0.0
            assert hist.opening_need_replicas == opening
            assert hist.held_replicas(bound.level) == max(1.0 + hist.largest_rise_replicas, opening)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(0, 400), st.integers(1, 50))
def test_the_held_floor_ahead_is_never_above_the_one_each_record_leaves(seed: int, warm: int, n: int) -> None:
    rng = np.random.default_rng(seed)
    bound = ComebackBound(7.0, memory_s=60.0, level_s=5.0, periodic=False)
    for v in rng.gamma(1.0, 3.0, warm).tolist():  # warm < level window: the opening need lands in the block
        bound.record(v)
    values = rng.gamma(1.0, 3.0, n)
    below = bound.seen_below(bound.records_ahead(values), 0.001)
    for v, lo in zip(values.tolist(), below.tolist(), strict=True):
        bound.record(v)
        hist = bound.history_bound()
        if hist.risk_bound > 0.001 and bound.samples:
            assert lo <= hist.held_replicas(bound.level)
        else:
            assert lo == -np.inf
