"""Measurements CSVs for the Pareto frontier (``ebb pareto``): read and validated row by row.

Each data row is one *measurement* of one configuration: the configuration columns say which (by
default every column that is neither an objective nor the time column), the objective columns are
its costs (:func:`parse_objectives`: ``-tokens_per_s`` means "maximise ``tokens_per_s``", i.e.
minimise its negation), and an optional time column orders the rows for the online monitor.

Guarantees of :class:`MeasurementCsv`, all checked before a row is handed on: at most
:data:`MAX_BYTES` (64 MiB) and :data:`MAX_ROWS` (1,000,000) data rows; every named column exists
(header line 1, names distinct); every objective and time cell is a finite number; every row has as
many fields as the header; times never go backwards (equal times allowed) — a live feed cannot be
re-sorted either, and a backwards clock usually means concatenated files. Anything else is one
:class:`~ebb.errors.InputError` naming the file, the line, the column and the fix (a bad column
choice, e.g. one both configuration and objective, is a :class:`~ebb.errors.ConfigError`). Opening,
the header, column lookup and undecodable or malformed rows are
:class:`~ebb.analysis.csv_reader.CsvReader`'s, shared with ``ebb bursts``' reader (a byte-order
mark is no column name). Reading is streaming: memory holds the current row, not the file.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Final

from ebb.analysis.csv_reader import CsvReader
from ebb.errors import ConfigError, InputError

__all__ = ["MAX_BYTES", "MAX_ROWS", "Measurement", "MeasurementCsv", "Objective", "parse_objectives"]

MAX_BYTES: Final = 64 * 1024 * 1024
"""Largest measurements file read (bytes): a sweep is kilobytes; a year of minutely rows is ~50 MiB."""
MAX_ROWS: Final = 1_000_000
"""Most data rows read: keeps the batch arrays and the per-row Python objects under ~1 GB."""


@dataclass(frozen=True, slots=True)
class Objective:
    """One objective column; ``sign`` is +1 to minimise it, -1 to maximise it (given as ``-column``)."""

    column: str
    sign: float = 1.0

    @property
    def spec(self) -> str:
        """The objective as written on the command line: ``column`` or ``-column``."""
        return self.column if self.sign > 0 else f"-{self.column}"


@dataclass(frozen=True, slots=True)
class Measurement:
    """One data row: its 1-based line, its configuration cells and its objective values as written."""

    line: int
    config: tuple[str, ...]
    values: tuple[float, ...]
    ts_s: float | None = None


def parse_objectives(spec: str) -> tuple[Objective, ...]:
    """``"a,b,-c"`` → minimise a and b, maximise c. At least 2 distinct columns, else ConfigError."""
    out: list[Objective] = []
    for part in (p.strip() for p in spec.split(",")):
        if not part:
            continue
        neg = part.startswith("-")
        name = part[1:].strip() if neg else part
        if not name:
            raise ConfigError(f"--minimize: {part!r} names no column (fix: write -COLUMN to maximise COLUMN)")
        if any(o.column == name for o in out):
            raise ConfigError(f"--minimize names column {name!r} twice (fix: give each objective once)")
        out.append(Objective(name, -1.0 if neg else 1.0))
    if len(out) < 2:
        # One objective has no trade-off: its "frontier" is just the minimum.
        raise ConfigError(f"--minimize needs at least 2 objectives, got {len(out)} ({spec!r}) "
                          "(fix: e.g. --minimize peak_mem_mib,latency_ms_p90)")
    return tuple(out)


class MeasurementCsv:
    """A measurements CSV, header validated on construction, rows validated lazily as they are read.

    Use as a context manager; iterate once. Iteration raises :class:`InputError` (file, line,
    column, fix) on the first bad row, on the :data:`MAX_ROWS`-th + 1 row, and — when a time
    column is given — on a row whose time is earlier than the previous row's.
    """

    def __init__(self, path: Path, objectives: Sequence[Objective], *, config: Sequence[str] | None = None,
                 time_column: str | None = None) -> None:
        self.path = str(path)
        self.objectives = tuple(objectives)
        self.time_column = time_column
        try:
            size = os.stat(path).st_size
        except OSError as exc:
            raise InputError(f"cannot open: {exc.strerror or exc}", path=self.path,
                             fix="check the path and permissions") from exc
        if size > MAX_BYTES:
            raise InputError(f"file is {size:,} bytes, over the {MAX_BYTES:,}-byte limit", path=self.path,
                             fix="split it, or keep only the window you need")
        self._csv = CsvReader(path, open_fix="check the path and permissions")
        try:
            self.header = self._csv.header
            self._resolve(config)
        except BaseException:
            self._csv.close()
            raise
        self.n_rows = 0

    def _index(self, name: str, flag: str) -> int:
        return self._csv.column(name, f"pass {flag} with columns of the header")

    def _resolve(self, config: Sequence[str] | None) -> None:
        seen: set[str] = set()
        for h in self.header:
            if h in seen:
                raise InputError(f"column {h!r} appears twice in the header", path=self.path, line=1,
                                 fix="give every column a distinct name")
            seen.add(h)
        self._obj_idx = [self._index(o.column, "--minimize") for o in self.objectives]
        self._time_idx = None if self.time_column is None else self._index(self.time_column, "--time-column")
        taken = {o.column for o in self.objectives}
        if self.time_column is not None:
            if self.time_column in taken:
                raise ConfigError(f"--time-column {self.time_column!r} is also an objective "
                                  "(fix: pick different columns)")
            taken.add(self.time_column)
        if config is None:
            cols = [h for h in self.header if h not in taken]
        else:
            both = [c for c in config if c in taken]
            if both:
                raise ConfigError(f"--config column {both[0]!r} is also an objective or the time column "
                                  "(fix: a column identifies the configuration or is measured, not both)")
            if len(set(config)) != len(config):
                raise ConfigError("--config names a column twice (fix: give each column once)")
            cols = list(config)
        self.config_columns = tuple(cols)
        self._cfg_idx = [self._index(c, "--config") for c in cols]

    def _number(self, row: list[str], i: int, line: int, what: str) -> float:
        cell = row[i].strip()
        try:
            x = float(cell)
        except ValueError:
            raise InputError(f"{what} column {self.header[i]!r} (column {i + 1}) is not a number: {cell!r}",
                             path=self.path, line=line, fix="repair or remove the row") from None
        if not math.isfinite(x):
            raise InputError(f"{what} column {self.header[i]!r} (column {i + 1}) is not finite: {cell!r}",
                             path=self.path, line=line, fix="drop rows with NaN/inf measurements")
        return x

    def __iter__(self) -> Iterator[Measurement]:
        width = len(self.header)
        last_t = -math.inf
        for line, row in self._csv.rows():  # a blank line is not a measurement
            if len(row) != width:
                raise InputError(f"row has {len(row)} fields, header has {width}", path=self.path, line=line,
                                 fix="make every row match the header")
            if self.n_rows >= MAX_ROWS:
                raise InputError(f"more than {MAX_ROWS:,} data rows", path=self.path, line=line,
                                 fix="split the file, or keep only the window you need")
            ts = None
            if self._time_idx is not None:
                ts = self._number(row, self._time_idx, line, "time")
                if ts < last_t:
                    raise InputError(f"time column {self.time_column!r} goes backwards ({last_t:g} -> {ts:g})",
                                     path=self.path, line=line,
                                     fix="sort the file by time; the monitor reads rows in arrival order")
                last_t = ts
            values = tuple(self._number(row, i, line, "objective") for i in self._obj_idx)
            self.n_rows += 1
            yield Measurement(line, tuple(row[i].strip() for i in self._cfg_idx), values, ts)

    def __enter__(self) -> MeasurementCsv:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._csv.close()
