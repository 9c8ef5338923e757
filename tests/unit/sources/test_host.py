"""The host sampler on real psutil counters: values in range, timestamps from the injected clock."""

from __future__ import annotations

import sys
import time

import numpy as np
import pytest

from ebb.errors import MissingExtraError
from ebb.sources.base import MetricSource
from ebb.sources.host import HostSampler


class StepClock:
    def __init__(self, start: int, step: int) -> None:
        self.now, self.step = start, step

    def __call__(self) -> int:
        self.now += self.step
        return self.now


def burn_cpu() -> None:
    """Spin, then idle: per-core counters tick at 10 ms, so let at least a few ticks pass."""
    x = 0
    for i in range(200_000):
        x += i * i
    time.sleep(0.05)


def test_every_sample_is_stamped_with_the_injected_clock() -> None:
    clock = StepClock(1_000_000_000_000, 100_000_000)
    sampler = HostSampler(clock=clock)
    assert isinstance(sampler, MetricSource)
    burn_cpu()
    batch = sampler.read()
    assert len(batch) > 0
    assert set(batch.ts_ns.tolist()) == {clock.now}


def test_utilisation_and_memory_are_percentages_and_rates_are_non_negative() -> None:
    sampler = HostSampler(clock=StepClock(0, 100_000_000))
    burn_cpu()
    batch = sampler.read()
    names = [batch.series[k] for k in batch.series_idx]
    for name, v in zip(names, batch.value):
        assert np.isfinite(v)
        if name.endswith("_pct"):
            assert 0.0 <= v <= 100.0, name
        else:
            assert v >= 0.0, name
    assert "cpu_util_pct" in names and "mem_used_pct" in names
    assert any(n.startswith("cpu0/") for n in names)


def test_a_prefix_names_the_node_and_per_core_series_can_be_turned_off() -> None:
    sampler = HostSampler(clock=StepClock(0, 10**9), prefix="node7", per_core=False)
    assert sampler.series[0] == "node7/cpu_util_pct"
    assert not any("/cpu0/" in s for s in sampler.series)


def test_rates_are_omitted_when_no_time_has_passed() -> None:
    sampler = HostSampler(clock=lambda: 5)
    batch = sampler.read()
    names = {batch.series[k] for k in batch.series_idx}
    assert not any(n.endswith("_bytes_s") for n in names)


def test_missing_psutil_raises_missing_extra_error_with_the_pip_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "psutil", None)
    with pytest.raises(MissingExtraError, match=r"pip install 'ebb\[host\]'"):
        HostSampler()
