"""``bench/long_service.py``: the 23-day diffusion-like trace has the shape issue #35 describes."""

from __future__ import annotations

from types import ModuleType

import numpy as np
import pytest

from tests.unit.bench.bench_module import load_bench


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_bench("long_service")


def test_23_days_hold_about_27_k_requests_with_quiet_nights_and_long_services(bench: ModuleType) -> None:
    trace = bench.long_service_trace()
    per_day = np.bincount((trace.arrival_s // 86400).astype(np.int64))
    assert len(per_day) == 23 and 24_000 <= trace.requests <= 30_000
    assert 1_800 <= per_day.max() <= 2_400  # the busy day: 2,287
    hour = (trace.arrival_s % 86400) // 3600
    assert not np.any((hour >= 0) & (hour < 7))  # nights from midnight to 07:00 are empty
    assert trace.service_s is not None and trace.service_s.min() >= 5.0 and trace.service_s.max() <= 600.0


def test_a_shorter_trace_is_the_longer_one_s_first_days(bench: ModuleType) -> None:
    short, full = bench.long_service_trace(2.5), bench.long_service_trace()
    assert np.array_equal(short.arrival_s, full.arrival_s[full.arrival_s < 2.5 * 86400])
