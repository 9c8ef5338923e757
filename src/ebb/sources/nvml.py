"""NVML GPU sampler: classic per-GPU metrics plus GPM (Hopper+) SM/tensor/DRAM/PCIe figures.

Series (``N`` is the GPU index; the unit is the last token):
``gpuN/util_gpu_pct``, ``gpuN/util_mem_pct``, ``gpuN/mem_used_mib``, ``gpuN/power_w``,
``gpuN/sm_clock_mhz``, ``gpuN/pcie_tx_kbs``, ``gpuN/pcie_rx_kbs`` and, where
``nvmlGpmQueryDeviceSupport`` reports support, ``gpuN/gpm_sm_util_pct``,
``gpuN/gpm_sm_occupancy_pct``, ``gpuN/gpm_tensor_util_pct``, ``gpuN/gpm_dram_bw_util_pct``,
``gpuN/gpm_pcie_tx_mibs``, ``gpuN/gpm_pcie_rx_mibs``.

Why GPM: NVML's classic ``util.gpu`` is "a kernel was resident", not "SMs were busy"; on the H200
probe (``data/gpu/h200-gpm-probe``) it read 94 % during host copies with 0 % SM activity. GPM
metrics are rates between two ``nvmlGpmSampleGet`` snapshots; the sampler keeps the newest
snapshot as the start of the next interval and guarantees each GPM value covers at least
``gpm_interval_s`` (default 100 ms), sleeping only for the remainder when reads come faster.

Guarantees: each sample is stamped with the time its NVML value was read (GPM: the end of its
interval). A metric NVML reports as not supported on a device is omitted, never invented. Any
other NVML failure raises :class:`~ebb.errors.SourceUnavailable` with the NVML error chained.
All NVML calls go through the :class:`NvmlApi` seam: :class:`PynvmlApi` talks to the driver
(``pip install 'ebb[nvml]'``); tests replay recorded CSVs through :class:`ebb.testing.fakes.ReplayNvml`.

Live check: ``python -m ebb.sources.nvml --seconds 5 --out FILE.csv`` samples at 100 ms and writes
a long-format ``ts_ns,series,value`` CSV that :mod:`ebb.sources.replay` and ``ebb analyze`` read.
"""

from __future__ import annotations

import argparse
import csv
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Protocol, TypeVar

import numpy as np

from ebb.errors import SourceUnavailable, require_extra
from ebb.model.samples import SampleBatch

__all__ = [
    "CLASSIC_METRICS", "GPM_METRICS", "ClassicReading", "GpmSample", "NvmlApi", "NvmlSampler",
    "PynvmlApi", "main",
]

CLASSIC_METRICS = ("util_gpu_pct", "util_mem_pct", "mem_used_mib", "power_w", "sm_clock_mhz",
                   "pcie_tx_kbs", "pcie_rx_kbs")
# Series suffix -> pynvml constant name (nvidia-ml-py's pynvml.py, "GPM Metric Identifiers").
GPM_METRICS: dict[str, str] = {
    "gpm_sm_util_pct": "NVML_GPM_METRIC_SM_UTIL",
    "gpm_sm_occupancy_pct": "NVML_GPM_METRIC_SM_OCCUPANCY",
    "gpm_tensor_util_pct": "NVML_GPM_METRIC_ANY_TENSOR_UTIL",
    "gpm_dram_bw_util_pct": "NVML_GPM_METRIC_DRAM_BW_UTIL",
    "gpm_pcie_tx_mibs": "NVML_GPM_METRIC_PCIE_TX_PER_SEC",
    "gpm_pcie_rx_mibs": "NVML_GPM_METRIC_PCIE_RX_PER_SEC",
}
_NVML_ERROR_NOT_SUPPORTED = 3  # NVML_ERROR_NOT_SUPPORTED in nvml.h

T = TypeVar("T")


@dataclass(frozen=True)
class ClassicReading:
    """One poll of the classic NVML metrics of one GPU; ``None`` = not supported on this device."""

    ts_ns: int
    values: dict[str, float | None]


@dataclass(frozen=True)
class GpmSample:
    """An opaque GPM snapshot (``handle``) and when it was taken."""

    ts_ns: int
    handle: Any


class NvmlApi(Protocol):
    """The NVML calls the sampler needs. Implementations raise SourceUnavailable on failure."""

    def device_count(self) -> int: ...

    def classic(self, gpu: int) -> ClassicReading: ...

    def gpm_supported(self, gpu: int) -> bool: ...

    def gpm_sample(self, gpu: int) -> GpmSample: ...

    def gpm_metrics(self, gpu: int, first: GpmSample, second: GpmSample) -> dict[str, float | None]: ...

    def release(self, sample: GpmSample) -> None: ...

    def close(self) -> None: ...


class NvmlSampler:
    """A :class:`~ebb.sources.base.MetricSource` over all (or the chosen) GPUs of an :class:`NvmlApi`."""

    def __init__(self, api: NvmlApi, *, gpus: Sequence[int] | None = None, gpm: bool = True,
                 gpm_interval_s: float = 0.1, sleep: Callable[[float], None] = time.sleep) -> None:
        if not gpm_interval_s > 0:
            raise ValueError(f"gpm_interval_s must be > 0, got {gpm_interval_s!r}")
        self._api = api
        self._gpus = tuple(gpus) if gpus is not None else tuple(range(api.device_count()))
        self._gpm = {g: gpm and api.gpm_supported(g) for g in self._gpus}
        self._interval_ns = int(gpm_interval_s * 1e9)
        self._sleep = sleep
        self._prev: dict[int, GpmSample] = {}
        names: list[str] = []
        for g in self._gpus:
            names += [f"gpu{g}/{m}" for m in CLASSIC_METRICS]
            if self._gpm[g]:
                names += [f"gpu{g}/{m}" for m in GPM_METRICS]
        self.series = tuple(names)
        self._code = {n: k for k, n in enumerate(names)}

    def gpm_enabled(self, gpu: int) -> bool:
        return self._gpm[gpu]

    def _gpm_interval(self, gpu: int) -> tuple[int, dict[str, float | None]]:
        prev = self._prev.get(gpu)
        if prev is None:
            prev = self._api.gpm_sample(gpu)
            self._sleep(self._interval_ns / 1e9)
        cur = self._api.gpm_sample(gpu)
        short = self._interval_ns - (cur.ts_ns - prev.ts_ns)
        if short > 0:  # called faster than the interval: wait the rest so the rate is not noise
            self._api.release(cur)
            self._sleep(short / 1e9)
            cur = self._api.gpm_sample(gpu)
        values = self._api.gpm_metrics(gpu, prev, cur)
        self._api.release(prev)
        self._prev[gpu] = cur
        return cur.ts_ns, values

    def read(self) -> SampleBatch:
        idx: list[int] = []
        val: list[float] = []
        ts: list[int] = []

        def add(gpu: int, when: int, values: dict[str, float | None]) -> None:
            for metric, v in values.items():
                if v is not None:
                    idx.append(self._code[f"gpu{gpu}/{metric}"])
                    val.append(float(v))
                    ts.append(when)

        for g in self._gpus:
            reading = self._api.classic(g)
            add(g, reading.ts_ns, reading.values)
            if self._gpm[g]:
                add(g, *self._gpm_interval(g))
        return SampleBatch(series=self.series, series_idx=np.asarray(idx, dtype=np.int64),
                           value=np.asarray(val, dtype=np.float64), ts_ns=np.asarray(ts, dtype=np.int64))

    def close(self) -> None:
        for s in self._prev.values():
            self._api.release(s)
        self._prev.clear()
        self._api.close()


class PynvmlApi:
    """:class:`NvmlApi` on the real driver through ``pynvml`` (nvidia-ml-py).

    ``module`` lets tests pass a stand-in for ``pynvml``; by default it is imported lazily and a
    missing package raises :class:`~ebb.errors.MissingExtraError` with the pip command.
    """

    def __init__(self, module: ModuleType | None = None, *, clock: Callable[[], int] = time.time_ns) -> None:
        self._nv = module if module is not None else require_extra("pynvml", "nvml")
        self._clock = clock
        self._call("nvmlInit")
        count = int(self._call("nvmlDeviceGetCount"))
        self._handles = [self._call("nvmlDeviceGetHandleByIndex", i) for i in range(count)]

    def _call(self, fn: str, *args: Any) -> Any:
        try:
            return getattr(self._nv, fn)(*args)
        except self._nv.NVMLError as exc:
            raise SourceUnavailable(f"NVML {fn} failed: {exc}") from exc

    def _optional(self, get: Callable[[], T]) -> T | None:
        try:
            return get()
        except SourceUnavailable as exc:
            if getattr(exc.__cause__, "value", None) == _NVML_ERROR_NOT_SUPPORTED:
                return None  # this board lacks the counter: omit the series, do not invent it
            raise

    def device_count(self) -> int:
        return len(self._handles)

    def classic(self, gpu: int) -> ClassicReading:
        h, nv = self._handles[gpu], self._nv
        util = self._optional(lambda: self._call("nvmlDeviceGetUtilizationRates", h))
        mem = self._optional(lambda: self._call("nvmlDeviceGetMemoryInfo", h))
        power = self._optional(lambda: self._call("nvmlDeviceGetPowerUsage", h))
        clock = self._optional(lambda: self._call("nvmlDeviceGetClockInfo", h, nv.NVML_CLOCK_SM))
        tx = self._optional(lambda: self._call("nvmlDeviceGetPcieThroughput", h, nv.NVML_PCIE_UTIL_TX_BYTES))
        rx = self._optional(lambda: self._call("nvmlDeviceGetPcieThroughput", h, nv.NVML_PCIE_UTIL_RX_BYTES))
        ts = self._clock()
        return ClassicReading(ts_ns=ts, values={
            "util_gpu_pct": None if util is None else float(util.gpu),
            "util_mem_pct": None if util is None else float(util.memory),
            "mem_used_mib": None if mem is None else float(mem.used) / 2**20,
            "power_w": None if power is None else float(power) / 1000.0,  # NVML reports milliwatts
            "sm_clock_mhz": None if clock is None else float(clock),
            "pcie_tx_kbs": None if tx is None else float(tx),
            "pcie_rx_kbs": None if rx is None else float(rx),
        })

    def gpm_supported(self, gpu: int) -> bool:
        try:
            return bool(self._call("nvmlGpmQueryDeviceSupport", self._handles[gpu]).isSupportedDevice)
        except SourceUnavailable:
            return False  # pre-Hopper driver or library without GPM: classic metrics only

    def gpm_sample(self, gpu: int) -> GpmSample:
        handle = self._call("nvmlGpmSampleAlloc")
        try:
            self._call("nvmlGpmSampleGet", self._handles[gpu], handle)
        except SourceUnavailable:
            self._call("nvmlGpmSampleFree", handle)
            raise
        return GpmSample(ts_ns=self._clock(), handle=handle)

    def gpm_metrics(self, gpu: int, first: GpmSample, second: GpmSample) -> dict[str, float | None]:
        nv = self._nv
        req = nv.c_nvmlGpmMetricsGet_t()
        req.version = nv.NVML_GPM_METRICS_GET_VERSION
        req.numMetrics = len(GPM_METRICS)
        req.sample1, req.sample2 = first.handle, second.handle
        for i, const in enumerate(GPM_METRICS.values()):
            req.metrics[i].metricId = getattr(nv, const)
        self._call("nvmlGpmMetricsGet", req)
        return {name: (float(req.metrics[i].value) if req.metrics[i].nvmlReturn == 0 else None)
                for i, name in enumerate(GPM_METRICS)}

    def release(self, sample: GpmSample) -> None:
        self._call("nvmlGpmSampleFree", sample.handle)

    def close(self) -> None:
        self._call("nvmlShutdown")


def _run_live(seconds: float, out: str, interval_s: float, gpm: bool) -> int:
    api = PynvmlApi()
    sampler = NvmlSampler(api, gpm=gpm, gpm_interval_s=interval_s)
    n = 0
    try:
        with open(out, "w", newline="", encoding="utf-8") as fh:
            w = csv.writer(fh)
            w.writerow(["ts_ns", "series", "value"])
            start = time.monotonic()
            tick = start
            while time.monotonic() - start < seconds:
                batch = sampler.read()
                for k, v, t in zip(batch.series_idx.tolist(), batch.value.tolist(), batch.ts_ns.tolist()):
                    w.writerow([t, batch.series[k], repr(v)])
                n += len(batch)
                # Deadline scheduling: the next tick is a fixed step from the last, so sampling does not drift.
                tick += interval_s
                time.sleep(max(0.0, tick - time.monotonic()))
    finally:
        sampler.close()
    gpm_gpus = [g for g in range(api.device_count()) if sampler.gpm_enabled(g)]
    print(f"wrote {n} samples of {len(sampler.series)} series from {api.device_count()} GPU(s) to {out}; "
          f"GPM on GPUs {gpm_gpus or 'none'}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m ebb.sources.nvml --seconds 5 --out FILE.csv``: sample live NVML at 100 ms."""
    ap = argparse.ArgumentParser(prog="python -m ebb.sources.nvml", description=main.__doc__)
    ap.add_argument("--seconds", type=float, default=5.0, help="how long to sample (default 5)")
    ap.add_argument("--out", required=True, help="CSV to write (ts_ns,series,value)")
    ap.add_argument("--interval-s", type=float, default=0.1, help="sampling period and GPM interval (default 0.1)")
    ap.add_argument("--no-gpm", action="store_true", help="classic metrics only")
    args = ap.parse_args(argv)
    from ebb.errors import EbbError

    try:
        return _run_live(args.seconds, args.out, args.interval_s, not args.no_gpm)
    except EbbError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
