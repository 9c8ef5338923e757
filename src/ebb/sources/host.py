"""Host sampler (psutil): CPU, memory, network and disk rates as a SampleBatch.

Series (optionally under ``prefix/``, e.g. the node name):
``cpu_util_pct`` (all cores), ``cpuN/cpu_util_pct`` (per core), ``mem_used_pct``,
``net_rx_bytes_s``, ``net_tx_bytes_s``, ``disk_read_bytes_s``, ``disk_write_bytes_s``.

Guarantees: every sample of one ``read()`` is stamped with one timestamp from the injected clock
(``time.time_ns`` by default), taken right after the counters were read. Utilisation and rates are
computed from psutil's cumulative counters against the previous read (the first interval starts
when the sampler is built), so no psutil module-global state is used or disturbed; a rate is
omitted when no time has passed, and CPU values are clipped into [0, 100]. Rates never go negative:
a counter that wrapped or was reset reads as 0 for that interval. psutil is imported lazily
(``pip install 'ebb[host]'``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np

from ebb.errors import SourceUnavailable, require_extra
from ebb.model.samples import SampleBatch

__all__ = ["HostSampler"]


def _busy_total(t: Any) -> tuple[float, float]:
    """(busy, total) CPU seconds of a psutil cpu_times tuple; idle and iowait count as not busy."""
    total = float(sum(t))
    idle = float(t.idle) + float(getattr(t, "iowait", 0.0))
    # guest time is already included in user time on Linux: do not count it twice
    total -= float(getattr(t, "guest", 0.0)) + float(getattr(t, "guest_nice", 0.0))
    return total - idle, total


class HostSampler:
    """A :class:`~ebb.sources.base.MetricSource` over this machine's psutil counters."""

    def __init__(self, *, clock: Callable[[], int] = time.time_ns, prefix: str | None = None,
                 per_core: bool = True, module: ModuleType | None = None) -> None:
        self._ps = module if module is not None else require_extra("psutil", "host")
        self._clock = clock
        self._per_core = per_core
        pre = f"{prefix}/" if prefix else ""
        self._counters = self._snapshot()
        n_cores = self._n_cores = len(self._counters[1])
        names = [f"{pre}cpu_util_pct"]
        if per_core:
            names += [f"{pre}cpu{i}/cpu_util_pct" for i in range(n_cores)]
        names += [f"{pre}{m}" for m in ("mem_used_pct", "net_rx_bytes_s", "net_tx_bytes_s",
                                        "disk_read_bytes_s", "disk_write_bytes_s")]
        self.series = tuple(names)

    def _snapshot(self) -> tuple[Any, list[Any], Any, Any, int]:
        ps = self._ps
        try:
            cpu = ps.cpu_times()
            cores = ps.cpu_times(percpu=True)
            net = ps.net_io_counters()
            disk = ps.disk_io_counters()
        except (OSError, RuntimeError) as exc:
            raise SourceUnavailable(f"psutil could not read host counters: {exc}") from exc
        return cpu, list(cores), net, disk, self._clock()

    def read(self) -> SampleBatch:
        prev_cpu, prev_cores, prev_net, prev_disk, prev_ts = self._counters
        cpu, cores, net, disk, ts = self._snapshot()
        try:
            mem_pct = float(self._ps.virtual_memory().percent)
        except (OSError, RuntimeError) as exc:
            raise SourceUnavailable(f"psutil could not read memory: {exc}") from exc
        self._counters = (cpu, cores, net, disk, ts)

        values: list[float | None] = [_util(prev_cpu, cpu)]
        if self._per_core:
            per = [_util(a, b) for a, b in zip(prev_cores, cores)][: self._n_cores]
            values += per + [None] * (self._n_cores - len(per))  # a core went offline: omit it
        dt = (ts - prev_ts) / 1e9
        values.append(min(100.0, max(0.0, mem_pct)))
        for a, b, attr in ((prev_net, net, "bytes_recv"), (prev_net, net, "bytes_sent"),
                           (prev_disk, disk, "read_bytes"), (prev_disk, disk, "write_bytes")):
            # disk/net counters are None on machines without such devices (containers)
            if dt <= 0 or a is None or b is None:
                values.append(None)
            else:
                values.append(max(0.0, float(getattr(b, attr) - getattr(a, attr))) / dt)
        keep = [k for k, v in enumerate(values) if v is not None]
        return SampleBatch(
            series=self.series,
            series_idx=np.asarray(keep, dtype=np.int64),
            value=np.asarray([values[k] for k in keep], dtype=np.float64),
            ts_ns=np.full(len(keep), ts, dtype=np.int64),
        )


def _util(a: Any, b: Any) -> float | None:
    busy0, total0 = _busy_total(a)
    busy1, total1 = _busy_total(b)
    d_total = total1 - total0
    if d_total <= 0:
        return None  # no CPU time elapsed between reads: there is no utilisation to report
    return min(100.0, max(0.0, 100.0 * (busy1 - busy0) / d_total))
