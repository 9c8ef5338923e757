"""Replay a metrics CSV as a :class:`~ebb.model.samples.SampleBatch`; malformed metrics are rejected here.

Accepted layouts:

* **wide**: a header, one time column in seconds (``--time-col``, or auto-detected among
  ``t, time, timestamp, ts, time_s, t_s``) and numeric value columns, one series per column;
  a time column that is not numeric is read as ``ebb simulate --format csv`` reads it (ISO-8601
  datetimes, UTC when no zone is given, to epoch seconds);
* **wide without time** (e.g. the datacenter-util-aggregates files): pass ``step_s`` and row ``i``
  (0-based) is stamped ``i * step_s``;
* **long**: exactly the header ``ts_ns,series,value`` (what ``python -m ebb.sources.nvml`` writes).

Guarantees: every value that reaches a batch is finite, and non-negative when its unit forbids a
sign (the unit is the last ``_``-separated token of the name: ``pct``, ``percent``, ``w``,
``mib``, ``kbs``, ``mhz``, ``ms``...). Anything else raises :class:`~ebb.errors.InputError` that
names the file, the 1-based line, the column and the fix; nothing is dropped or guessed silently.
Non-numeric columns (a ``phase`` label) are skipped when no ``columns`` were requested, and
reported in :attr:`CsvTable.skipped`. Time values must be finite and non-decreasing.
Timestamps in the batch are ``epoch_ns + round(t * 1e9)``: run-relative unless an epoch is given.
"""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import numpy.typing as npt

from ebb.errors import InputError
from ebb.model.samples import SampleBatch
from ebb.sources.base import batch_from_columns
from ebb.sources.traces.generic_csv import time_column

__all__ = ["CsvTable", "CsvReplaySource", "read_table", "unit_of", "NONNEGATIVE_UNITS", "TIME_COLUMNS"]

TIME_COLUMNS = ("t", "time", "timestamp", "ts", "time_s", "t_s")
NONNEGATIVE_UNITS = frozenset({
    "pct", "percent", "ratio", "w", "mib", "mibs", "kib", "kb", "kbs", "mb", "gb", "bytes",
    "mhz", "ms", "us", "ns", "s", "iops", "gbps", "count",
})
_LONG_HEADER = ["ts_ns", "series", "value"]


def unit_of(name: str) -> str:
    """The unit token of a series name: the last ``_``- or ``/``-separated token, lower-cased."""
    return re.split(r"[_/]", name.strip())[-1].lower()


@dataclass(frozen=True)
class CsvTable:
    """A validated wide table: ``t_s`` (seconds) and one float column per series."""

    path: str
    t_s: npt.NDArray[np.float64]
    columns: dict[str, npt.NDArray[np.float64]]
    skipped: tuple[str, ...] = field(default=())

    def to_batch(self, *, epoch_ns: int = 0, prefix: str | None = None) -> SampleBatch:
        ts_ns = epoch_ns + np.rint(self.t_s * 1e9).astype(np.int64)
        pre = f"{prefix}/" if prefix else ""
        return batch_from_columns(ts_ns, {pre + k: v for k, v in self.columns.items()})


def _fail(path: str, line: int | None, message: str, fix: str) -> InputError:
    return InputError(message, path=path, line=line, fix=fix)


def _to_float(path: str, name: str, cells: Sequence[str], lines: Sequence[int],
              *, optional: bool) -> npt.NDArray[np.float64] | None:
    """Convert one column; ``None`` when ``optional`` and the column is not numeric at all."""
    try:
        # Vectorised parse; the slow per-cell loop below runs only to locate a failure.
        return np.asarray(cells, dtype=np.str_).astype(np.float64)
    except ValueError:
        pass
    for i, cell in enumerate(cells):
        try:
            float(cell)
        except ValueError:
            if optional and i == 0 and cell.strip():
                return None
            what = "an empty cell" if not cell.strip() else f"non-numeric value {cell!r}"
            raise _fail(path, lines[i], f"column {name!r} has {what}",
                        "write a number in every cell, or list only numeric columns with --columns") from None
    raise AssertionError("unreachable: vectorised parse failed but every cell parses")


def _check_values(path: str, name: str, values: npt.NDArray[np.float64], lines: Sequence[int]) -> None:
    bad = ~np.isfinite(values)
    if bad.any():
        i = int(np.argmax(bad))
        raise _fail(path, lines[i], f"column {name!r} has non-finite value {values[i]!r}",
                    "drop or repair the row at the exporter; Ebb does not guess missing metrics")
    if unit_of(name) in NONNEGATIVE_UNITS:
        neg = values < 0
        if neg.any():
            i = int(np.argmax(neg))
            raise _fail(path, lines[i], f"column {name!r} has negative value {values[i]!r} "
                        f"but its unit {unit_of(name)!r} cannot be negative",
                        "check the exporter, or rename the column if its unit is not what the name says")


def _check_time(path: str, name: str, t: npt.NDArray[np.float64], lines: Sequence[int]) -> None:
    bad = ~np.isfinite(t)
    if bad.any():
        i = int(np.argmax(bad))
        raise _fail(path, lines[i], f"time column {name!r} has non-finite value {t[i]!r}",
                    "every row needs a finite time in seconds")
    back = np.diff(t) < 0
    if back.any():
        i = int(np.argmax(back)) + 1
        raise _fail(path, lines[i], f"time column {name!r} goes backwards ({t[i - 1]!r} -> {t[i]!r})",
                    "sort the file by time before replaying it")


def _read_rows(path: str) -> tuple[list[str], list[list[str]], list[int]]:
    try:
        with open(path, newline="", encoding="utf-8") as fh:
            reader = csv.reader(fh)
            header = next(reader, None)
            if header is None:
                raise _fail(path, None, "file is empty", "give a CSV with a header row")
            rows: list[list[str]] = []
            lines: list[int] = []
            for row in reader:
                if not row:
                    continue  # a trailing blank line is not data
                if len(row) != len(header):
                    raise _fail(path, reader.line_num, f"row has {len(row)} fields, header has {len(header)}",
                                "make every row match the header")
                rows.append(row)
                lines.append(reader.line_num)
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror or exc}", path=path,
                         fix="check the path and permissions") from exc
    except UnicodeDecodeError as exc:
        raise InputError("not UTF-8 text", path=path, fix="give a UTF-8 CSV file") from exc
    return [h.strip() for h in header], rows, lines


def read_table(path: str | Path, *, time_col: str | None = None, step_s: float | None = None,
               columns: Sequence[str] | None = None) -> CsvTable:
    """Read and validate a wide CSV (see the module docstring for the rules)."""
    p = str(path)
    if step_s is not None and not (math.isfinite(step_s) and step_s > 0):
        raise ValueError(f"step_s must be a positive number of seconds, got {step_s!r}")
    header, rows, lines = _read_rows(p)
    if header == _LONG_HEADER:
        raise _fail(p, 1, "this is a long-format file (ts_ns,series,value)", "use read_long or CsvReplaySource")
    if not rows:
        raise _fail(p, None, "no data rows", "give a CSV with at least one row after the header")
    cols_t = list(zip(*rows))
    index = {name: j for j, name in enumerate(header)}
    if time_col is None and step_s is None:
        time_col = next((c for c in TIME_COLUMNS if c in index), None)
        if time_col is None:
            raise _fail(p, 1, f"no time column (looked for {', '.join(TIME_COLUMNS)})",
                        "name it with --time-col, or give --step-s for files with one row per fixed step")
    if time_col is not None and time_col not in index:
        raise _fail(p, 1, f"time column {time_col!r} not in header {header}", "pass an existing --time-col")
    if time_col is not None:
        cells = cols_t[index[time_col]]
        t = _to_float(p, time_col, cells, lines, optional=True)
        if t is None:  # datetimes: read by the very function `ebb simulate --format csv` uses
            t = time_column(list(cells), col=time_col, path=Path(p), lines=lines)
        _check_time(p, time_col, t, lines)
    else:
        assert step_s is not None
        t = np.arange(len(rows), dtype=np.float64) * step_s
    wanted = list(columns) if columns else [h for h in header if h != time_col]
    missing = [c for c in wanted if c not in index]
    if missing:
        raise _fail(p, 1, f"columns {missing} not in header {header}", "pass existing names to --columns")
    out: dict[str, npt.NDArray[np.float64]] = {}
    skipped: list[str] = []
    for name in wanted:
        v = _to_float(p, name, cols_t[index[name]], lines, optional=not columns)
        if v is None:
            skipped.append(name)
            continue
        _check_values(p, name, v, lines)
        out[name] = v
    if not out:
        raise _fail(p, 1, "no numeric value columns", "give at least one numeric column besides time")
    return CsvTable(path=p, t_s=t, columns=out, skipped=tuple(skipped))


def read_long(path: str | Path, *, epoch_ns: int = 0, prefix: str | None = None) -> SampleBatch:
    """Read a long-format ``ts_ns,series,value`` CSV into a batch, with the same value checks."""
    p = str(path)
    header, rows, lines = _read_rows(p)
    if header != _LONG_HEADER:
        raise _fail(p, 1, f"header {header} is not {_LONG_HEADER}", "use read_table for wide files")
    if not rows:
        raise _fail(p, None, "no data rows", "give at least one sample")
    ts_c, name_c, val_c = zip(*rows)
    vals = _to_float(p, "value", val_c, lines, optional=False)
    assert vals is not None
    try:
        # int64 parse: nanosecond epochs do not fit a float64 mantissa exactly.
        ts = np.asarray(ts_c, dtype=np.str_).astype(np.int64)
    except ValueError:
        bad = next(i for i, c in enumerate(ts_c) if not c.strip().lstrip("-").isdigit())
        raise _fail(p, lines[bad], f"ts_ns {ts_c[bad]!r} is not an integer",
                    "write integer nanoseconds in ts_ns") from None
    _check_time(p, "ts_ns", ts.astype(np.float64), lines)
    names = tuple(dict.fromkeys(name_c))
    code = {n: k for k, n in enumerate(names)}
    idx = np.fromiter((code[n] for n in name_c), dtype=np.int64, count=len(name_c))
    for k, name in enumerate(names):
        m = idx == k
        _check_values(p, name, vals[m], [ln for ln, keep in zip(lines, m) if keep])
    pre = f"{prefix}/" if prefix else ""
    return SampleBatch(series=tuple(pre + n for n in names), series_idx=idx, value=vals,
                       ts_ns=epoch_ns + ts)


class CsvReplaySource:
    """A :class:`~ebb.sources.base.MetricSource` over one CSV file (wide or long).

    The file is parsed and validated on the first ``read()`` and the same batch is returned on
    every call (a recorded file does not change; reading it is side-effect free).
    """

    def __init__(self, path: str | Path, *, time_col: str | None = None, step_s: float | None = None,
                 columns: Sequence[str] | None = None, epoch_ns: int = 0, prefix: str | None = None) -> None:
        self.path = str(path)
        self._time_col, self._step_s, self._columns = time_col, step_s, columns
        self._epoch_ns, self._prefix = epoch_ns, prefix
        self._batch: SampleBatch | None = None
        self.skipped: tuple[str, ...] = ()

    def _is_long(self) -> bool:
        try:
            with open(self.path, newline="", encoding="utf-8") as fh:
                first = next(csv.reader(fh), [])
        except (OSError, UnicodeDecodeError):
            return False  # read_table reports the problem with its own message
        return [h.strip() for h in first] == _LONG_HEADER

    def read(self) -> SampleBatch:
        if self._batch is None:
            if self._is_long():
                self._batch = read_long(self.path, epoch_ns=self._epoch_ns, prefix=self._prefix)
            else:
                table = read_table(self.path, time_col=self._time_col, step_s=self._step_s,
                                   columns=self._columns)
                self.skipped = table.skipped
                self._batch = table.to_batch(epoch_ns=self._epoch_ns, prefix=self._prefix)
        return self._batch
