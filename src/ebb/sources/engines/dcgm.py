"""The GPU side from NVIDIA's dcgm-exporter: :func:`read_dcgm` per GPU, and :class:`DcgmSource`, a blocking MetricSource.

Fields (names, types and units from ``../shared/data/engine-metrics/dcgm/source/
NVIDIA__dcgm-exporter__etc__default-counters.csv``, 4.8.2):
``DCGM_FI_PROF_SM_ACTIVE``, ``_SM_OCCUPANCY``, ``_PIPE_TENSOR_ACTIVE``, ``_DRAM_ACTIVE``,
``_GR_ENGINE_ACTIVE`` (ratios 0..1; SM_ACTIVE and SM_OCCUPANCY are commented out of the default
CSV, so most exporters lack them), ``DCGM_FI_PROF_PCIE_TX_BYTES`` / ``_RX_BYTES`` (gauges of
bytes/s), ``DCGM_FI_DEV_FB_USED`` (MiB, reported as bytes) and ``DCGM_FI_DEV_GPU_UTIL`` (%,
reported as a ratio).

``busy_ratio`` is SM active, else GR engine active, else — flagged with ``util_fallback`` —
``GPU_UTIL``: the classic utilisation says "a kernel was resident", not "SMs were busy" (the design
note's pitfall; NVML read 94 % with 0 % SM activity on the H200 probe), so a consumer can refuse it.

Missing, never invented: a field the exporter does not send is None; DCGM's blank sentinels
(int64 blanks from 9223372036854775792 = 0x7ffffffffffffff0 up, fp64 blanks from 2**47 =
140737488355328, e.g. ``MEMORY_TEMP … 9223372036854775794`` in the exporter README) are None;
a ratio outside [0, 1] or a negative rate is None with its reason in ``dropped``.

Identity labels: ``gpu``, ``UUID`` (or ``uuid``), ``modelName``, ``Hostname`` (≤ 4.8.2) or
``hostname`` (main after #655), ``pod``/``namespace`` (Kubernetes pod mapping; "" otherwise),
``GPU_I_ID`` (MIG instance). A series without a ``gpu`` label is ignored.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

import numpy as np

from ebb.errors import InputError, SourceUnavailable
from ebb.model.samples import SampleBatch
from ebb.sources import http_get
from ebb.sources.engines.exposition import Exposition, parse_exposition

__all__ = ["DCGM_SERIES", "DcgmSource", "GpuReading", "read_dcgm"]

_BLANK_FROM: Final = 140737488355328.0  # DCGM_FT_FP64_BLANK (2**47); int64 blanks (~9.22e18) are above it
_RATIOS: Final = {
    "sm_active_ratio": "DCGM_FI_PROF_SM_ACTIVE",
    "sm_occupancy_ratio": "DCGM_FI_PROF_SM_OCCUPANCY",
    "tensor_active_ratio": "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
    "dram_active_ratio": "DCGM_FI_PROF_DRAM_ACTIVE",
    "gr_engine_active_ratio": "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
}
_RATES: Final = {"pcie_tx_bytes_per_s": "DCGM_FI_PROF_PCIE_TX_BYTES", "pcie_rx_bytes_per_s": "DCGM_FI_PROF_PCIE_RX_BYTES"}
_FB_USED: Final = "DCGM_FI_DEV_FB_USED"
_GPU_UTIL: Final = "DCGM_FI_DEV_GPU_UTIL"
_MIB: Final = 1024.0 * 1024.0

# Series written by DcgmSource per GPU (``gpuN/<name>``), in NVML's names where they mean the same
# thing (ebb.sources.nvml: GPM SM/occupancy/tensor/DRAM in %, PCIe in MiB/s, memory in MiB, util %).
DCGM_SERIES: Final = {
    "gpm_sm_util_pct": ("sm_active_ratio", 100.0),
    "gpm_sm_occupancy_pct": ("sm_occupancy_ratio", 100.0),
    "gpm_tensor_util_pct": ("tensor_active_ratio", 100.0),
    "gpm_dram_bw_util_pct": ("dram_active_ratio", 100.0),
    "gr_engine_active_pct": ("gr_engine_active_ratio", 100.0),
    "gpm_pcie_tx_mibs": ("pcie_tx_bytes_per_s", 1.0 / _MIB),
    "gpm_pcie_rx_mibs": ("pcie_rx_bytes_per_s", 1.0 / _MIB),
    "mem_used_mib": ("fb_used_bytes", 1.0 / _MIB),
    "util_gpu_pct": ("gpu_util_ratio", 100.0),
    "busy_pct": ("busy_ratio", 100.0),
}


@dataclass(frozen=True)
class GpuReading:
    """One GPU (or MIG instance) in one dcgm-exporter scrape; None = the exporter did not send it."""

    gpu: str
    """The ``gpu`` label, with ``/migI`` appended for a MIG instance (``GPU_I_ID``)."""
    uuid: str
    model: str
    hostname: str
    pod: str
    namespace: str
    sm_active_ratio: float | None
    sm_occupancy_ratio: float | None
    tensor_active_ratio: float | None
    dram_active_ratio: float | None
    gr_engine_active_ratio: float | None
    pcie_tx_bytes_per_s: float | None
    pcie_rx_bytes_per_s: float | None
    fb_used_bytes: float | None
    gpu_util_ratio: float | None
    """Classic ``DCGM_FI_DEV_GPU_UTIL`` / 100."""
    busy_ratio: float | None
    """SM active, else GR engine active, else GPU_UTIL (then ``util_fallback``)."""
    util_fallback: bool
    """True when ``busy_ratio`` came from GPU_UTIL (the design note's pitfall)."""
    dropped: tuple[str, ...] = ()


def _label(labels: tuple[tuple[str, str], ...], *keys: str) -> str:
    d = dict(labels)
    for k in keys:
        if k in d:
            return d[k]
    return ""


def read_dcgm(expo: Exposition, *, source: str) -> tuple[GpuReading, ...]:
    """One :class:`GpuReading` per GPU of scrape ``expo`` (sorted by host then numeric gpu index).

    A GPU is any ``gpu`` label on a ``DCGM_FI_*`` series; the fields it lacks are None. InputError
    (``path=source``) when the scrape holds no ``DCGM_FI_*`` series with a ``gpu`` label.
    A GPU shared by several pods (one series per pod) keeps the first series' values and pod.
    """
    per: dict[tuple[str, str, str], dict[str, float]] = {}
    ident: dict[tuple[str, str, str], tuple[str, str, str, str]] = {}
    wanted = set(_RATIOS.values()) | set(_RATES.values()) | {_FB_USED, _GPU_UTIL}
    for name, samples in expo.samples.items():
        if not name.startswith("DCGM_FI_"):
            continue
        for s in samples:
            gpu = s.label("gpu")
            if gpu is None:
                continue
            mig = s.label("GPU_I_ID")
            host = _label(s.labels, "Hostname", "hostname")
            key = (host, gpu if not mig else f"{gpu}/mig{mig}", _label(s.labels, "UUID", "uuid"))
            ident.setdefault(key, (_label(s.labels, "modelName"), host, _label(s.labels, "pod"),
                                   _label(s.labels, "namespace")))
            fields = per.setdefault(key, {})
            if name in wanted:
                fields.setdefault(name, s.value)
    if not per:
        raise InputError("no DCGM_FI_* series with a gpu label in the scrape", path=source,
                         fix="point at dcgm-exporter's /metrics (default port 9400)")

    def order(k: tuple[str, str, str]) -> tuple[str, int, str]:
        head = k[1].split("/")[0]
        return (k[0], int(head) if head.isdigit() else 1 << 30, k[1])

    out: list[GpuReading] = []
    for key in sorted(per, key=order):
        vals = per[key]
        dropped: list[str] = []

        def get(field: str, what: str) -> float | None:
            v = vals.get(field)
            if v is None:
                return None
            if v >= _BLANK_FROM:
                dropped.append(f"gpu {key[1]}: {field} {v:.0f} is DCGM's blank sentinel (no value)")
                return None
            if v < 0 or (what == "ratio" and v > 1.0) or (what == "pct" and v > 100.0):
                dropped.append(f"gpu {key[1]}: {field} {v:g} is outside the {what} range; not used")
                return None
            return v

        ratios = {k: get(f, "ratio") for k, f in _RATIOS.items()}
        rates = {k: get(f, "rate") for k, f in _RATES.items()}
        fb = get(_FB_USED, "rate")
        util_pct = get(_GPU_UTIL, "pct")
        util = None if util_pct is None else util_pct / 100.0
        busy = ratios["sm_active_ratio"]
        if busy is None:
            busy = ratios["gr_engine_active_ratio"]
        fallback = busy is None and util is not None
        if fallback:
            busy = util
        model, host, pod, ns = ident[key]
        out.append(GpuReading(
            gpu=key[1], uuid=key[2], model=model, hostname=host, pod=pod, namespace=ns,
            sm_active_ratio=ratios["sm_active_ratio"], sm_occupancy_ratio=ratios["sm_occupancy_ratio"],
            tensor_active_ratio=ratios["tensor_active_ratio"], dram_active_ratio=ratios["dram_active_ratio"],
            gr_engine_active_ratio=ratios["gr_engine_active_ratio"],
            pcie_tx_bytes_per_s=rates["pcie_tx_bytes_per_s"], pcie_rx_bytes_per_s=rates["pcie_rx_bytes_per_s"],
            fb_used_bytes=None if fb is None else fb * _MIB, gpu_util_ratio=util, busy_ratio=busy,
            util_fallback=fallback, dropped=tuple(dropped)))
    return tuple(out)


def _gpu_prefix(r: GpuReading, hosts: int) -> str:
    g = r.gpu.replace("/", "")
    return f"{r.hostname}/gpu{g}" if hosts > 1 else f"gpu{g}"


class DcgmSource:
    """A blocking :class:`~ebb.sources.base.MetricSource` over one dcgm-exporter URL.

    ``read()`` GETs ``url`` (one bounded :func:`ebb.sources.http_get.get`: 2 s deadline and 16 MiB
    by default), parses it and returns ``gpuN/<series>`` for every field present (names:
    :data:`DCGM_SERIES`, NVML's where they mean the same thing), plus ``gpuN/busy_util_fallback``
    (1.0 when ``busy_pct`` came from GPU_UTIL). Every sample is stamped with the time the answer
    arrived. HTTP 5xx and network failures: SourceUnavailable; other non-200 answers and text that
    is not a DCGM exposition: InputError.
    """

    def __init__(self, url: str, *, limits: http_get.HttpLimits = http_get.HttpLimits(),
                 clock: Callable[[], int] = time.time_ns,
                 get: Callable[[str, http_get.HttpLimits], http_get.HttpReply] = http_get.get) -> None:
        self.url = http_get.check_url(url)
        self._limits = limits
        self._clock = clock
        self._get = get
        self.last: tuple[GpuReading, ...] = ()

    def read(self) -> SampleBatch:
        reply = self._get(self.url, self._limits)
        ts = self._clock()
        if reply.status >= 500:
            raise SourceUnavailable(f"dcgm-exporter {self.url} answered HTTP {reply.status}; retrying next cycle")
        if reply.status != 200:
            raise InputError(f"dcgm-exporter answered HTTP {reply.status} {reply.reason}", path=self.url,
                             fix="check the URL: dcgm-exporter serves /metrics on port 9400 by default")
        readings = read_dcgm(parse_exposition(reply.body, source=self.url), source=self.url)
        self.last = readings
        hosts = len({r.hostname for r in readings})
        names: list[str] = []
        values: list[float] = []
        for r in readings:
            prefix = _gpu_prefix(r, hosts)
            for series, (field, scale) in DCGM_SERIES.items():
                v = getattr(r, field)
                if v is not None and math.isfinite(v):
                    names.append(f"{prefix}/{series}")
                    values.append(float(v) * scale)
            if r.busy_ratio is not None:
                names.append(f"{prefix}/busy_util_fallback")
                values.append(1.0 if r.util_fallback else 0.0)
        first: dict[str, float] = {}
        for n, v in zip(names, values):
            first.setdefault(n, v)  # one value per series even if two GPUs claim one index
        return SampleBatch(series=tuple(first), series_idx=np.arange(len(first), dtype=np.int64),
                           value=np.asarray(list(first.values()), dtype=np.float64),
                           ts_ns=np.full(len(first), ts, dtype=np.int64))
