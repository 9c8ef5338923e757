"""In-memory fakes of Ebb's I/O seams, one per seam, for unit tests (ours and users').

Each fake keeps the guarantees its seam's module documents, so code tested against it behaves the
same on the real adapter (``tests/contract/`` runs the shared contract on both where one exists):

* :class:`StaticSource` fakes :class:`~ebb.sources.base.MetricSource` (``read() -> SampleBatch``):
  serves fixed batches with their own timestamps; never alters anything observed.
* :class:`FakeSignalSource` fakes :class:`~ebb.sources.live.SignalSource` (the live controller's
  ``read(since_s) -> LiveSignals``): serves what a callable produces; setting ``fail`` makes every
  read raise that error (outage drills), as an unreachable agent or Prometheus does.
* :class:`FakeActuator` fakes :class:`~ebb.actuate.base.Actuator`: idempotent by decision id,
  victims as hints (named ones first, then newest), scale-ups ready after ``ready_after_s`` of the
  injected clock, scale-downs removed at once; thread safe.
* :class:`ReplayNvml` fakes :class:`~ebb.sources.nvml.NvmlApi` (the driver): replays recorded
  NVML/GPM CSVs with their recorded timestamps, so :class:`~ebb.sources.nvml.NvmlSampler` runs on
  CPU; running past the recording raises :class:`~ebb.errors.SourceUnavailable`.

Product code never imports this module.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np

from ebb.actuate.base import ActuationResult, FleetState, ReplicaState
from ebb.errors import SourceUnavailable
from ebb.model.ids import DecisionId, ReplicaId
from ebb.model.live import LiveSignals
from ebb.model.observation import ScaleRequest
from ebb.model.samples import SampleBatch
from ebb.sources.nvml import CLASSIC_METRICS, ClassicReading, GpmSample
from ebb.sources.replay import read_table

__all__ = ["FakeActuator", "FakeSignalSource", "ReplayNvml", "StaticSource"]

# gpm.csv column (written by data/gpu/h200-gpm-probe/gpm_probe.py) -> series suffix.
_GPM_REPLAY_COLUMNS = {
    "sm_util": "gpm_sm_util_pct", "sm_occupancy": "gpm_sm_occupancy_pct", "tensor_util": "gpm_tensor_util_pct",
    "dram_bw_util": "gpm_dram_bw_util_pct", "pcie_tx_mibs": "gpm_pcie_tx_mibs", "pcie_rx_mibs": "gpm_pcie_rx_mibs",
}


class StaticSource:
    """An in-memory fake: returns the same batch on every ``read()`` (or each of a sequence in turn).

    With a sequence, ``read`` serves the batches in order and then keeps returning the last one,
    which mimics a source whose data stopped changing (its ``ts_ns`` then ages: useful for
    staleness tests). ``reads`` counts calls.
    """

    def __init__(self, batches: SampleBatch | Sequence[SampleBatch]) -> None:
        seq = (batches,) if isinstance(batches, SampleBatch) else tuple(batches)
        if not seq:
            raise ValueError("StaticSource needs at least one batch, got an empty sequence")
        self._batches = seq
        self.reads = 0

    def read(self) -> SampleBatch:
        batch = self._batches[min(self.reads, len(self._batches) - 1)]
        self.reads += 1
        return batch


class FakeSignalSource:
    """Serves whatever ``produce(since_s)`` returns; ``fail`` makes ``read`` raise it (outage drills)."""

    def __init__(self, produce: Callable[[float], LiveSignals]) -> None:
        self._produce = produce
        self._lock = threading.Lock()
        self.fail: Exception | None = None
        self.reads = 0

    def read(self, since_s: float) -> LiveSignals:
        with self._lock:
            self.reads += 1
            if self.fail is not None:
                raise self.fail
        return self._produce(since_s)


class FakeActuator:
    """In-memory actuator for unit tests: replicas become ready after ``ready_after_s`` of the
    injected clock and are removed at once on scale-down. Keeps the full contract (idempotency
    by id, victims as hints) and counts calls in ``applied_ids``."""

    def __init__(self, initial: int = 1, *, target: str = "fake/serving", ready_after_s: float = 0.0,
                 clock: Callable[[], float] | None = None, zones: tuple[str, ...] = ("a", "b", "c")) -> None:
        self._clock = clock or time.time
        self._ready_after = ready_after_s
        self._zones = zones
        self._next = 0
        self._lock = threading.Lock()
        self._replicas: list[ReplicaState] = []
        self._done: dict[DecisionId, ActuationResult] = {}
        self.applied_ids: list[DecisionId] = []
        self.target = target
        now = self._clock()
        for _ in range(initial):
            self._replicas.append(self._new(now, ready=True))

    def _new(self, now: float, ready: bool) -> ReplicaState:
        rid = ReplicaId(self._next)
        self._next += 1
        return ReplicaState(rid, f"replica-{int(rid)}", now, now if ready or self._ready_after <= 0 else None,
                            self._zones[int(rid) % len(self._zones)] if self._zones else "")

    def state(self) -> FleetState:
        with self._lock:
            now = self._clock()
            self._replicas = [r if r.ready_s is not None or now - r.created_s < self._ready_after
                              else replace(r, ready_s=r.created_s + self._ready_after) for r in self._replicas]
            return FleetState(self.target, len(self._replicas), tuple(self._replicas))

    def apply(self, decision_id: DecisionId, request: ScaleRequest) -> ActuationResult:
        with self._lock:
            if decision_id in self._done:
                return replace(self._done[decision_id], applied=False)
            before = len(self._replicas)
            want = max(0, request.replicas)
            removed: list[str] = []
            added: list[str] = []
            if want < before:
                order = [r for v in request.victims for r in self._replicas if r.replica == v]
                order += [r for r in reversed(self._replicas) if r not in order]
                gone = order[: before - want]
                removed = [r.name for r in gone]
                self._replicas = [r for r in self._replicas if r not in gone]
            elif want > before:
                now = self._clock()
                for _ in range(want - before):
                    r = self._new(now, ready=False)
                    self._replicas.append(r)
                    added.append(r.name)
            res = ActuationResult(decision_id, want != before, before, len(self._replicas), tuple(removed),
                                  tuple(added))
            self._done[decision_id] = res
            self.applied_ids.append(decision_id)
            return res


class ReplayNvml:
    """:class:`NvmlApi` that replays recorded CSVs, with the recorded timestamps.

    * ``fast_csv``: ``t, util_gpu, util_mem, mem_used_mib, power_w, sm_clock_mhz`` (as
      ``data/gpu/h200-serving/nvml_fast.csv``); each ``classic()`` call serves the next row.
    * ``pcie_csv`` (optional): ``t, pcie_tx_kbs, pcie_rx_kbs``; a classic reading carries the latest
      PCIe row at or before its time (NVML returns its last value); absent -> PCIe series omitted.
    * ``gpm_csv`` (optional): the GPM probe's ``gpm.csv``; each ``gpm_sample()`` takes the next
      row and ``gpm_metrics(a, b)`` returns row ``b``'s values (already rates over its interval).
      ``gpm_supported=False`` (or no file) replays a pre-Hopper GPU.

    Every GPU index serves the same recording, each with its own cursor. Timestamps are
    ``epoch_ns + t * 1e9``. Running past the end raises :class:`SourceUnavailable`.
    """

    def __init__(self, fast_csv: str | Path, *, pcie_csv: str | Path | None = None,
                 gpm_csv: str | Path | None = None, gpm_supported: bool = True, gpus: int = 1,
                 epoch_ns: int = 0) -> None:
        fast = read_table(fast_csv, time_col="t",
                          columns=["util_gpu", "util_mem", "mem_used_mib", "power_w", "sm_clock_mhz"])
        self._fast_path = str(fast_csv)
        self._fast_ts = epoch_ns + np.rint(fast.t_s * 1e9).astype(np.int64)
        self._fast = np.column_stack([fast.columns[c] for c in fast.columns])
        self._pcie_ts: np.ndarray | None = None
        self._pcie = np.zeros((0, 2))
        if pcie_csv is not None:
            pcie = read_table(pcie_csv, time_col="t", columns=["pcie_tx_kbs", "pcie_rx_kbs"])
            self._pcie_ts = epoch_ns + np.rint(pcie.t_s * 1e9).astype(np.int64)
            self._pcie = np.column_stack([pcie.columns["pcie_tx_kbs"], pcie.columns["pcie_rx_kbs"]])
        self._gpm_ts: np.ndarray | None = None
        self._gpm = np.zeros((0, len(_GPM_REPLAY_COLUMNS)))
        if gpm_csv is not None:
            gpm = read_table(gpm_csv, time_col="t", columns=list(_GPM_REPLAY_COLUMNS))
            self._gpm_ts = epoch_ns + np.rint(gpm.t_s * 1e9).astype(np.int64)
            self._gpm = np.column_stack([gpm.columns[c] for c in _GPM_REPLAY_COLUMNS])
        self._gpm_supported = gpm_supported and gpm_csv is not None
        self._gpus = gpus
        self._fast_cursor = [0] * gpus
        self._gpm_cursor = [0] * gpus
        self.released = 0

    def device_count(self) -> int:
        return self._gpus

    def classic(self, gpu: int) -> ClassicReading:
        i = self._fast_cursor[gpu]
        if i >= len(self._fast_ts):
            raise SourceUnavailable(f"NVML replay {self._fast_path} exhausted after {i} rows")
        self._fast_cursor[gpu] = i + 1
        row, ts = self._fast[i], int(self._fast_ts[i])
        values: dict[str, float | None] = dict(zip(CLASSIC_METRICS[:5], (float(x) for x in row)))
        tx: float | None = None
        rx: float | None = None
        if self._pcie_ts is not None:
            j = int(np.searchsorted(self._pcie_ts, ts, side="right")) - 1
            if j >= 0:
                tx, rx = float(self._pcie[j, 0]), float(self._pcie[j, 1])
        values["pcie_tx_kbs"], values["pcie_rx_kbs"] = tx, rx
        return ClassicReading(ts_ns=ts, values=values)

    def gpm_supported(self, gpu: int) -> bool:
        return self._gpm_supported

    def gpm_sample(self, gpu: int) -> GpmSample:
        if self._gpm_ts is None or not self._gpm_supported:
            raise SourceUnavailable("NVML replay: GPM is not supported by this recording")
        i = self._gpm_cursor[gpu]
        if i >= len(self._gpm_ts):
            raise SourceUnavailable(f"NVML replay: GPM recording exhausted after {i} rows")
        self._gpm_cursor[gpu] = i + 1
        return GpmSample(ts_ns=int(self._gpm_ts[i]), handle=i)

    def gpm_metrics(self, gpu: int, first: GpmSample, second: GpmSample) -> dict[str, float | None]:
        row = self._gpm[int(second.handle)]
        return {name: float(row[k]) for k, name in enumerate(_GPM_REPLAY_COLUMNS.values())}

    def release(self, sample: GpmSample) -> None:
        self.released += 1

    def close(self) -> None:
        return None
