"""The NVML sampler on the replay seam: real H200 recordings in, the same values and timestamps out."""

from __future__ import annotations

import csv
import sys
import types
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ebb.errors import MissingExtraError, SourceUnavailable
from ebb.sources.base import MetricSource
from ebb.sources.nvml import GPM_METRICS, NvmlSampler, PynvmlApi
from ebb.testing.fakes import ReplayNvml

DATA = Path(__file__).resolve().parents[2] / "data"
FAST = DATA / "h200" / "nvml_fast.csv"
PCIE = DATA / "h200-pcie" / "nvml_pcie.csv"
GPM = DATA / "h200-gpm" / "gpm.csv"


def rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def no_sleep(_: float) -> None:
    return None


def test_sampler_reproduces_nvml_fast_values_and_timestamps_row_by_row() -> None:
    sampler = NvmlSampler(ReplayNvml(FAST), sleep=no_sleep)
    assert isinstance(sampler, MetricSource)
    expected = rows(FAST)[:200]
    for row in expected:
        batch = sampler.read()
        want_ts = round(float(row["t"]) * 1e9)
        for series, col in (("gpu0/util_gpu_pct", "util_gpu"), ("gpu0/util_mem_pct", "util_mem"),
                            ("gpu0/mem_used_mib", "mem_used_mib"), ("gpu0/power_w", "power_w"),
                            ("gpu0/sm_clock_mhz", "sm_clock_mhz")):
            ts, val = batch.of(series)
            assert ts.tolist() == [want_ts]
            assert val.tolist() == [float(row[col])]


def test_whole_recording_replays_and_then_the_source_reports_it_is_exhausted() -> None:
    sampler = NvmlSampler(ReplayNvml(FAST), sleep=no_sleep)
    n = len(rows(FAST))
    util = [float(sampler.read().of("gpu0/util_gpu_pct")[1][0]) for _ in range(n)]
    assert util == [float(r["util_gpu"]) for r in rows(FAST)]
    with pytest.raises(SourceUnavailable, match="exhausted"):
        sampler.read()


def test_pcie_series_carry_the_latest_pcie_row_at_or_before_the_reading() -> None:
    sampler = NvmlSampler(ReplayNvml(FAST, pcie_csv=PCIE), sleep=no_sleep)
    pcie = rows(PCIE)
    pcie_t = np.array([float(r["t"]) for r in pcie])
    for row in rows(FAST)[:50]:
        batch = sampler.read()
        t = float(row["t"])
        j = int(np.searchsorted(pcie_t, t, side="right")) - 1
        if j < 0:
            assert "gpu0/pcie_tx_kbs" not in {batch.series[k] for k in batch.series_idx}
        else:
            assert batch.of("gpu0/pcie_tx_kbs")[1].tolist() == [float(pcie[j]["pcie_tx_kbs"])]
            assert batch.of("gpu0/pcie_rx_kbs")[1].tolist() == [float(pcie[j]["pcie_rx_kbs"])]


def test_pcie_series_are_omitted_not_invented_when_the_recording_has_none() -> None:
    batch = NvmlSampler(ReplayNvml(FAST), sleep=no_sleep).read()
    present = {batch.series[k] for k in batch.series_idx}
    assert "gpu0/pcie_tx_kbs" not in present and "gpu0/util_gpu_pct" in present


def test_gpm_series_are_present_with_the_probe_values_when_gpm_is_supported() -> None:
    sleeps: list[float] = []
    sampler = NvmlSampler(ReplayNvml(FAST, gpm_csv=GPM), sleep=sleeps.append)
    gpm = rows(GPM)
    first = sampler.read()
    # the first read needs two snapshots: rows 0 and 1, the value is row 1's interval
    assert sleeps == [pytest.approx(0.1)]
    for name in GPM_METRICS:
        assert f"gpu0/{name}" in first.series
    ts, val = first.of("gpu0/gpm_sm_util_pct")
    assert ts.tolist() == [round(float(gpm[1]["t"]) * 1e9)]
    assert val.tolist() == [float(gpm[1]["sm_util"])]
    # later reads roll on: each interval ends at the next probe row
    for i in range(2, 120):
        b = sampler.read()
        assert b.of("gpu0/gpm_tensor_util_pct")[1].tolist() == [float(gpm[i]["tensor_util"])]
        assert b.of("gpu0/gpm_pcie_rx_mibs")[1].tolist() == [float(gpm[i]["pcie_rx_mibs"])]
        assert b.of("gpu0/gpm_dram_bw_util_pct")[0].tolist() == [round(float(gpm[i]["t"]) * 1e9)]
    assert sleeps == [pytest.approx(0.1)]  # probe rows are >= 100 ms apart: no extra waiting


def test_gpm_values_show_the_big_matmul_phase_as_tensor_busy() -> None:
    sampler = NvmlSampler(ReplayNvml(FAST, gpm_csv=GPM), sleep=no_sleep)
    phases = [r["phase"] for r in rows(GPM)]
    tensor = [float(sampler.read().of("gpu0/gpm_tensor_util_pct")[1][0]) for _ in range(len(phases) - 1)]
    in_matmul = [v for v, p in zip(tensor, phases[1:]) if p == "big_matmul"]
    assert np.mean(in_matmul) > 80


def test_gpm_series_are_absent_when_the_replay_says_gpm_is_unsupported() -> None:
    sampler = NvmlSampler(ReplayNvml(FAST, gpm_csv=GPM, gpm_supported=False), sleep=no_sleep)
    batch = sampler.read()
    assert not any("gpm_" in s for s in batch.series)
    assert not sampler.gpm_enabled(0)


def test_every_gpu_index_gets_its_own_series_names() -> None:
    batch = NvmlSampler(ReplayNvml(FAST, gpus=2), sleep=no_sleep).read()
    assert batch.of("gpu1/power_w")[1].tolist() == batch.of("gpu0/power_w")[1].tolist()


def test_missing_pynvml_raises_missing_extra_error_with_the_pip_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # makes `import pynvml` raise ImportError
    with pytest.raises(MissingExtraError, match=r"pip install 'ebb\[nvml\]'"):
        PynvmlApi()


class FakeNVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(f"NVML error {value}")
        self.value = value


def fake_pynvml(*, fail_power: int | None = None) -> Any:
    nv: Any = types.ModuleType("pynvml")
    nv.NVMLError = FakeNVMLError
    nv.NVML_CLOCK_SM, nv.NVML_PCIE_UTIL_TX_BYTES, nv.NVML_PCIE_UTIL_RX_BYTES = 1, 0, 1
    nv.nvmlInit = nv.nvmlShutdown = lambda: None
    nv.nvmlDeviceGetCount = lambda: 1
    nv.nvmlDeviceGetHandleByIndex = lambda i: f"h{i}"
    nv.nvmlDeviceGetUtilizationRates = lambda h: types.SimpleNamespace(gpu=64, memory=21)
    nv.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(used=24555 * 2**20)

    def power(h: str) -> int:
        if fail_power is not None:
            raise FakeNVMLError(fail_power)
        return 528_000

    nv.nvmlDeviceGetPowerUsage = power
    nv.nvmlDeviceGetClockInfo = lambda h, c: 1980
    nv.nvmlDeviceGetPcieThroughput = lambda h, c: 18402 if c == 0 else 647

    def gpm_unsupported(h: str) -> Any:
        raise FakeNVMLError(13)  # NVML_ERROR_FUNCTION_NOT_FOUND on an older driver

    nv.nvmlGpmQueryDeviceSupport = gpm_unsupported
    return nv


def test_the_real_adapter_converts_units_and_stamps_with_its_clock() -> None:
    api = PynvmlApi(fake_pynvml(), clock=lambda: 42)
    sampler = NvmlSampler(api, sleep=no_sleep)
    batch = sampler.read()
    assert not sampler.gpm_enabled(0)
    got = {batch.series[k]: v for k, v in zip(batch.series_idx, batch.value)}
    assert got == {"gpu0/util_gpu_pct": 64.0, "gpu0/util_mem_pct": 21.0, "gpu0/mem_used_mib": 24555.0,
                   "gpu0/power_w": 528.0, "gpu0/sm_clock_mhz": 1980.0, "gpu0/pcie_tx_kbs": 18402.0,
                   "gpu0/pcie_rx_kbs": 647.0}
    assert set(batch.ts_ns.tolist()) == {42}


def test_a_counter_the_board_does_not_support_is_omitted() -> None:
    batch = NvmlSampler(PynvmlApi(fake_pynvml(fail_power=3)), sleep=no_sleep).read()
    assert "gpu0/power_w" not in {batch.series[k] for k in batch.series_idx}


def test_other_nvml_errors_become_source_unavailable_with_the_cause_chained() -> None:
    sampler = NvmlSampler(PynvmlApi(fake_pynvml(fail_power=15)), sleep=no_sleep)  # 15 = GPU_IS_LOST
    with pytest.raises(SourceUnavailable, match="nvmlDeviceGetPowerUsage") as info:
        sampler.read()
    assert isinstance(info.value.__cause__, FakeNVMLError)
