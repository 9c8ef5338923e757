"""Records computed ahead and committed at once (ComebackBound.records_ahead / commit) leave the comeback bound
as one record at a time does."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ebb.decide.comeback import ComebackBound


def _bound(level_peak: bool, memory_s: float = 120.0) -> ComebackBound:
    return ComebackBound(7.0, memory_s=memory_s, level_s=5.0, level_peak=level_peak)


def _state(b: ComebackBound) -> dict[str, object]:
    p = b.periodic
    assert p is not None
    return {"i": b._i, "level": b.level, "mem": list(b._mem), "mem_sum": b._mem_sum, "lvl": list(b._lvl_win),
            "lvl_sum": b._lvl_sum, "lvl_max": list(b._lvl_max), "maxq": list(b._maxq), "pending": list(b._pending),
            "levels": list(b._levels), "n_rises": b._n_rises, "rises": b._rises.tobytes(), "sorted": list(b._sorted),
            "bins": p._bins.tobytes(), "lag": p._lag_sums.tobytes(), "last_bin": p._last_bin,
            "first_bin": p._first_bin, "finished": p._finished}


def _needs(seed: int, n: int) -> list[float]:
    """Bursty needs with idle seconds, NaN and negative readings (what ``record`` clips)."""
    rng = np.random.default_rng(seed)
    v = rng.gamma(0.4, 6.0, size=n) * (rng.random(n) < 0.6)
    odd = rng.random(n)
    v[odd < 0.03] = np.nan
    v[(odd >= 0.03) & (odd < 0.05)] = -1.0
    return v.tolist()


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(0, 400), st.integers(0, 120), st.integers(0, 130), st.booleans())
def test_a_block_committed_at_once_leaves_the_bound_as_its_records_one_by_one(
        seed: int, n_before: int, n_block: int, keep: int, level_peak: bool) -> None:
    before, block = _needs(seed, n_before), _needs(seed + 1, n_block)
    one, many = _bound(level_peak), _bound(level_peak)
    for v in before:
        one.record(v)
        many.record(v)
    ahead = many.records_ahead(np.array(block, dtype=np.float64))
    count = min(keep, len(block))
    levels, means, rises = [], [], []
    for v in block[:count]:
        n0 = one._n_rises
        one.record(v)
        levels.append(one.level)
        means.append(one.mean_need)
        if one._n_rises > n0:
            rises.append(float(one._rises[n0 % len(one._rises)]))
    cut = count // 2
    many.commit(ahead, 0, cut)
    many.commit(ahead, cut, count)
    assert _state(many) == _state(one)
    assert ahead.levels[:count].tolist() == levels
    assert ahead.mem_means[:count].tolist() == means
    assert ahead.rises[:np.searchsorted(ahead.rise_at, count)].tolist() == rises
    assert many.floor(0.01) == one.floor(0.01)


def test_a_committed_block_then_records_on_as_the_one_by_one_bound() -> None:
    rng = np.random.default_rng(3)
    one, many = _bound(False, memory_s=150.0), _bound(False, memory_s=150.0)
    for start in range(0, 3000, 97):
        block = rng.gamma(0.5, 4.0, size=97) * (rng.random(97) < 0.7)
        ahead = many.records_ahead(block)
        many.commit(ahead, 0, 97)
        for v in block.tolist():
            one.record(v)
        assert _state(many) == _state(one), start
    assert many.floor(0.05) == one.floor(0.05)


def test_what_a_record_pushes_out_of_a_full_ring_is_named_ahead() -> None:
    b = _bound(False, memory_s=30.0)
    for v in range(100):
        b.record(float(v % 13))
    ahead = b.records_ahead(np.array([5.0, 9.0, 1.0]))
    cap = len(b._rises)
    expected = [float(b._rises[(b._n_rises + q) % cap]) for q in range(len(ahead.rises))]
    assert ahead.pushed_out.tolist() == expected
    assert not any(math.isnan(x) for x in expected)


def test_more_records_than_the_ring_holds_are_refused() -> None:
    b = _bound(False, memory_s=30.0)
    with pytest.raises(ValueError, match="exceed the ring"):
        b.records_ahead(np.zeros(len(b._rises) + 1))


def test_a_commit_after_another_record_is_refused() -> None:
    b = _bound(False)
    ahead = b.records_ahead(np.ones(4))
    b.record(1.0)
    with pytest.raises(ValueError, match="recorded other values"):
        b.commit(ahead, 0, 2)
