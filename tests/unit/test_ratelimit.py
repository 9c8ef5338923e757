"""State-store write rate limiting on virtual time (ebb.ratelimit)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ebb.ratelimit import TokenBucket


def test_the_default_bucket_allows_three_writes_at_once_then_one_per_33_ms() -> None:
    b = TokenBucket()
    assert (b.rate_per_s, b.burst) == (30.0, 3.0)
    granted = []
    for _ in range(4):
        res = b.take(0.0)
        granted.append(res.granted)
        b = res.bucket
    assert granted == [True, True, True, False]
    assert res.next_ok_s == pytest.approx(1 / 30)
    assert b.take(res.next_ok_s).granted


def test_next_ok_is_when_the_same_take_would_succeed_again() -> None:
    res = TokenBucket().take(5.0, 2)
    assert res.granted and res.next_ok_s == 5.0 + 1 / 30  # one left, two asked for next time
    assert TokenBucket().take(5.0, 1).next_ok_s == 5.0


def test_take_returns_a_new_bucket_and_leaves_the_old_one_alone() -> None:
    b = TokenBucket()
    b.take(0.0, 3)
    assert b.tokens == 3.0 and b.updated_s is None


def test_tokens_refill_up_to_the_burst_only() -> None:
    b = TokenBucket().take(0.0, 3).bucket
    assert b.available(0.05) == pytest.approx(1.5)
    assert b.available(100.0) == 3.0


@pytest.mark.parametrize("kwargs", [{"rate_per_s": 0.0}, {"burst": 0.5}, {"tokens": 4.0}],
                         ids=["zero-rate", "tiny-burst", "overfull"])
def test_a_bad_bucket_is_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        TokenBucket(**kwargs)


def test_time_going_backwards_and_oversized_takes_are_refused() -> None:
    b = TokenBucket().take(1.0).bucket
    with pytest.raises(ValueError, match="time went backwards"):
        b.take(0.5)
    with pytest.raises(ValueError, match="n must be in"):
        b.take(2.0, 4)


@given(gaps=st.lists(st.floats(0.0, 0.05), min_size=1, max_size=200),
       sizes=st.lists(st.integers(1, 3), min_size=200, max_size=200))
def test_writes_in_any_window_never_exceed_burst_plus_rate_times_length(
        gaps: list[float], sizes: list[int]) -> None:
    b, t = TokenBucket(), 0.0
    events: list[tuple[float, int]] = []
    for gap, n in zip(gaps, sizes, strict=False):
        t += gap
        res = b.take(t, n)
        b = res.bucket
        if res.granted:
            events.append((t, n))
            assert res.next_ok_s >= t
    for i, (start, _) in enumerate(events):
        for window in (0.1, 0.5):
            used = sum(n for ts, n in events[i:] if ts <= start + window)
            assert used <= 3 + 30 * window + 1e-6


@given(waits=st.lists(st.floats(0.0, 0.2), min_size=1, max_size=50))
def test_a_refused_take_is_granted_at_next_ok(waits: list[float]) -> None:
    b, t = TokenBucket(), 0.0
    for w in waits:
        t += w
        res = b.take(t)
        b = res.bucket
        if not res.granted:
            retry = b.take(res.next_ok_s)
            assert retry.granted
            b, t = retry.bucket, res.next_ok_s
