"""The samples ``ebb analyze`` reads: metric CSVs and DeepSpeed comms logs merged into one batch.

Inputs: metric CSVs (wide with a time column of seconds or ISO-8601 datetimes, read by the same
reader as ``ebb simulate --format csv``, :class:`~ebb.sources.replay.CsvReplaySource`; wide without
time given ``step_s``; or the long ``ts_ns,series,value`` files ``python -m ebb.sources.nvml``
writes) and DeepSpeed comms logs (``*.log``, :func:`~ebb.sources.deepspeed_comm.parse_comm_log`).
With several files each one becomes a node: its series are named ``<file stem>/...`` so the heat
map compares files. Malformed inputs raise the readers' errors (file, line and fix); two inputs
giving the same series name are a :class:`~ebb.errors.ConfigError`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ebb.errors import ConfigError
from ebb.model.samples import SampleBatch
from ebb.sources.deepspeed_comm import parse_comm_log
from ebb.sources.replay import CsvReplaySource

__all__ = ["load_samples", "merge_batches"]


def merge_batches(batches: Sequence[SampleBatch]) -> SampleBatch:
    """One batch holding every input batch's series (renumbered); series names must be distinct."""
    names: list[str] = []
    idx, val, ts = [], [], []
    for b in batches:
        offset = len(names)
        names += b.series
        idx.append(b.series_idx + offset)
        val.append(b.value)
        ts.append(b.ts_ns)
    if len(set(names)) != len(names):
        raise ConfigError("two inputs produce the same series name; give files distinct names")
    return SampleBatch(series=tuple(names), series_idx=np.concatenate(idx), value=np.concatenate(val),
                       ts_ns=np.concatenate(ts))


def load_samples(files: Sequence[Path], time_col: str | None, step_s: float | None,
                 columns: list[str] | None) -> SampleBatch:
    """Every file's samples, series prefixed with the file's stem when there are several files."""
    many = len(files) > 1
    batches = []
    for f in files:
        prefix = f.stem if many else None
        if f.suffix == ".log":
            b = parse_comm_log(f)
            if prefix:
                b = SampleBatch(series=tuple(f"{prefix}/{s}" for s in b.series), series_idx=b.series_idx,
                                value=b.value, ts_ns=b.ts_ns)
        else:
            b = CsvReplaySource(f, time_col=time_col, step_s=step_s, columns=columns, prefix=prefix).read()
        batches.append(b)
    return merge_batches(batches)
