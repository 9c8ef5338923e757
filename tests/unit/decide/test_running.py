"""Running sums replayed at once are the loop's, bit for bit."""

from __future__ import annotations

from collections import deque

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from ebb.decide.running import running_sums


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(0, 40), st.integers(1, 200), st.integers(1, 30))
def test_a_window_sum_replayed_at_once_is_the_loops_bit_for_bit(seed: int, n_old: int, n: int, cap: int) -> None:
    rng = np.random.default_rng(seed)
    old = (rng.gamma(0.5, 3.0, size=n_old) * 10.0 ** rng.integers(-3, 4, size=n_old)).tolist()
    new = rng.gamma(0.5, 3.0, size=n) * 10.0 ** rng.integers(-3, 4, size=n)
    window, total = deque(old), float(sum(old))
    start, loop = total, []
    gone_by = []
    gone = 0
    for v in new.tolist():  # add, then drop the oldest past cap (what the comeback bound's memory does)
        window.append(v)
        total += v
        while len(window) > cap:
            total -= window.popleft()
            gone += 1
        loop.append(total)
        gone_by.append(gone)
    removed = np.concatenate((np.array(old), new))[:gone]
    got = running_sums(start, new, removed, np.array(gone_by, dtype=np.int64))
    assert got.tolist() == loop


def test_no_steps_give_no_sums() -> None:
    assert running_sums(1.5, np.zeros(0), np.zeros(0), np.zeros(0, dtype=np.int64)).tolist() == []
