"""``ebb pareto MEASUREMENTS.csv``: which serving configurations are on the Pareto frontier.

SPEC §3.5 / note §4.3. Each data row of the CSV is one *measurement* of one configuration: the
``--config`` columns say which configuration (default: every column that is neither an objective
nor the time column), the ``--minimize`` columns are its objectives (at least 2, all minimised;
``-tokens_per_s`` means "maximise ``tokens_per_s``", i.e. minimise its negation). A measurement is
*dominated* when another one costs no more in every objective and less in at least one; the
*frontier* is every measurement nothing dominates. Configurations measured more than once appear
once per measurement (each row is a point; noise can make a configuration dominate itself).

Two modes, both with the library in :mod:`ebb.gates.pareto` doing the work:

* **batch** (no ``--time-column``): every row, :func:`~ebb.gates.pareto.pareto_mask` then
  :func:`~ebb.gates.pareto.dominated_by`, vectorised (O(n log n) for 2 objectives).
* **windowed** (``--time-column T --window-s W``): rows are fed in file order into a
  :class:`~ebb.gates.pareto.FrontierMonitor`: ``expire(t)`` then ``insert`` per row, exactly what
  the online monitor does as measurements arrive. The result is the frontier *at the last
  timestamp* ``t_last``: the measurements with ``t > t_last - W``. A configuration dominated only by
  measurements that expired is back on the frontier (the monitor re-examines it). Rows must be in
  time order (equal times allowed): a row earlier than the one before it is an
  :class:`~ebb.errors.InputError` naming its line, never silently sorted, because a live feed
  cannot be re-sorted either and a backwards clock usually means concatenated files. Reading is
  streaming: memory holds the window, not the file.

In both modes the reported dominator of a dominated measurement is the *earliest* (in file order)
frontier measurement that dominates it, so the windowed mode with a window longer than the file
gives exactly the batch result.

Guarantees on the input, all checked before any output: at most :data:`MAX_BYTES` (64 MiB) and
:data:`MAX_ROWS` (1,000,000) data rows; every named column exists (header line 1); every
objective and time cell is a finite number; every row has as many fields as the header. Anything
else stops the command with one line naming the file, the line, the column and the fix (exit 2).
Exit 0 otherwise, dominated configurations or not: this is a report, not a gate.

``--json`` prints ``{"path", "objectives", "config_columns", "measurements", "window",
"frontier": [point], "dominated": [point + {"dominated_by": point}]}`` where a point is
``{"line", "config": {column: cell as written}, "values": {column: value as written}}`` (plus
``"ts_s"`` when windowed) and ``window`` is ``null`` (batch) or ``{"time_column", "window_s",
"now_s", "live", "expired"}``.
"""

from __future__ import annotations

import csv
import json
import math
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Annotated, Any, Final, TextIO, cast

import numpy as np
import typer

from ebb.cli.app import app
from ebb.cli.output_option import OutputOpt, wants_json
from ebb.errors import ConfigError, InputError
from ebb.gates.pareto import FrontierMonitor, dominated_by, pareto_mask

__all__ = [
    "MAX_BYTES", "MAX_ROWS", "Measurement", "MeasurementCsv", "Objective", "ParetoReport",
    "batch_frontier", "parse_objectives", "pareto_report", "report_json", "windowed_frontier",
]

MAX_BYTES: Final = 64 * 1024 * 1024
"""Largest measurements file read (bytes): a sweep is kilobytes; a year of minutely rows is ~50 MiB."""
MAX_ROWS: Final = 1_000_000
"""Most data rows read: keeps the batch arrays and the per-row Python objects under ~1 GB."""
_SHOWN: Final = 50  # dominated rows printed in the table; --json has all of them


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


@dataclass(frozen=True, slots=True)
class ParetoReport:
    """The frontier (file order) and each dominated measurement with its earliest frontier dominator."""

    path: str
    objectives: tuple[Objective, ...]
    config_columns: tuple[str, ...]
    n_rows: int
    frontier: tuple[Measurement, ...]
    dominated: tuple[tuple[Measurement, Measurement], ...]
    time_column: str | None = None
    window_s: float | None = None
    now_s: float | None = None
    expired: int = 0


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


def _columns(spec: str | None) -> list[str] | None:
    return None if spec is None else [c.strip() for c in spec.split(",") if c.strip()]


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
            self._fh: TextIO = path.open(newline="", encoding="utf-8-sig")  # a BOM is not a column name
        except OSError as exc:
            raise InputError(f"cannot open: {exc.strerror or exc}", path=self.path,
                             fix="check the path and permissions") from exc
        try:
            if size > MAX_BYTES:
                raise InputError(f"file is {size:,} bytes, over the {MAX_BYTES:,}-byte limit", path=self.path,
                                 fix="split it, or keep only the window you need")
            self._reader = csv.reader(self._fh)
            header = self._next()
            if header is None:
                raise InputError("file is empty", path=self.path, line=1,
                                 fix="give a CSV with a header row and one row per measurement")
            self.header = [h.strip() for h in header]
            self._resolve(config)
        except BaseException:
            self._fh.close()
            raise
        self.n_rows = 0

    def _next(self) -> list[str] | None:
        try:
            return next(self._reader, None)
        except UnicodeDecodeError as exc:
            raise InputError("not UTF-8 text", path=self.path, line=self._reader.line_num + 1,
                             fix="give a UTF-8 CSV file") from exc
        except csv.Error as exc:  # an over-long field, a NUL byte, a bad quote
            raise InputError(f"malformed CSV: {exc}", path=self.path, line=self._reader.line_num,
                             fix="repair the row") from exc

    def _index(self, name: str, flag: str) -> int:
        if name not in self.header:
            raise InputError(f"no column {name!r}; columns are: {', '.join(self.header)}", path=self.path,
                             line=1, fix=f"pass {flag} with columns of the header")
        return self.header.index(name)

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
        while (row := self._next()) is not None:
            if not row:
                continue  # a blank line is not a measurement
            line = self._reader.line_num
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
        self._fh.close()


def _signs(objectives: Sequence[Objective]) -> np.ndarray:
    return np.array([o.sign for o in objectives], dtype=np.float64)


def batch_frontier(rows: Sequence[Measurement], objectives: Sequence[Objective],
                   ) -> tuple[list[Measurement], list[tuple[Measurement, Measurement]]]:
    """Frontier (input order) and (dominated, earliest dominating frontier row), vectorised."""
    if not rows:
        return [], []
    pts = np.array([r.values for r in rows], dtype=np.float64) * _signs(objectives)
    mask = pareto_mask(pts)
    front_idx = np.flatnonzero(mask)
    dom_idx = np.flatnonzero(~mask)
    by = dominated_by(pts[dom_idx], pts[front_idx])
    frontier = [rows[int(i)] for i in front_idx]
    return frontier, [(rows[int(i)], frontier[int(b)]) for i, b in zip(dom_idx, by, strict=True)]


def windowed_frontier(rows: Iterator[Measurement] | Sequence[Measurement], objectives: Sequence[Objective],
                      window_s: float) -> tuple[list[Measurement], list[tuple[Measurement, Measurement]],
                                                float | None, int]:
    """Feed rows (time order) into a :class:`FrontierMonitor`; the frontier at the last timestamp.

    Returns (frontier, dominated pairs, last timestamp or None when no rows, rows expired).
    """
    signs = _signs(objectives)
    mon = FrontierMonitor(window_s, len(signs))
    now: float | None = None
    expired = 0
    for r in rows:
        if r.ts_s is None:
            raise ValueError(f"line {r.line}: a windowed frontier needs a timestamp on every row")
        now = r.ts_s
        expired += mon.expire(now)  # before the insert: a row is never expired by its own time
        mon.insert(r, now, (np.asarray(r.values) * signs).tolist())
    frontier = [cast(Measurement, p.config_id) for p in mon.frontier()]
    dominated = [(cast(Measurement, d.point.config_id), cast(Measurement, d.by.config_id))
                 for d in mon.dominated()]
    return frontier, dominated, now, expired


def pareto_report(path: Path, objectives: Sequence[Objective], *, config: Sequence[str] | None = None,
                  time_column: str | None = None, window_s: float | None = None) -> ParetoReport:
    """Read ``path`` and compute the frontier (see the module docstring for both modes)."""
    if (time_column is None) != (window_s is None):
        raise ConfigError("--time-column and --window-s go together (fix: give both for the windowed "
                          "monitor, or neither for the whole file)")
    if window_s is not None and not (math.isfinite(window_s) and window_s > 0):
        raise ConfigError(f"--window-s must be a positive number of seconds, got {window_s:g}")
    with MeasurementCsv(path, objectives, config=config, time_column=time_column) as src:
        now: float | None = None
        expired = 0
        if window_s is None:
            rows = list(src)
            frontier, dominated = batch_frontier(rows, objectives)
        else:
            frontier, dominated, now, expired = windowed_frontier(iter(src), objectives, window_s)
        if src.n_rows == 0:
            raise InputError("no data rows after the header", path=str(path), line=2,
                             fix="add one row per measurement")
        return ParetoReport(str(path), tuple(objectives), src.config_columns, src.n_rows, tuple(frontier),
                            tuple(dominated), time_column, window_s, now, expired)


def _point(report: ParetoReport, m: Measurement) -> dict[str, Any]:
    out: dict[str, Any] = {
        "line": m.line,
        "config": dict(zip(report.config_columns, m.config, strict=True)),
        "values": {o.column: v for o, v in zip(report.objectives, m.values, strict=True)},
    }
    if m.ts_s is not None:
        out["ts_s"] = m.ts_s
    return out


def report_json(report: ParetoReport) -> dict[str, Any]:
    """The ``--json`` object (see the module docstring)."""
    window = None
    if report.window_s is not None:
        window = {"time_column": report.time_column, "window_s": report.window_s, "now_s": report.now_s,
                  "live": len(report.frontier) + len(report.dominated), "expired": report.expired}
    return {
        "path": report.path,
        "objectives": [o.spec for o in report.objectives],
        "config_columns": list(report.config_columns),
        "measurements": report.n_rows,
        "window": window,
        "frontier": [_point(report, m) for m in report.frontier],
        "dominated": [{**_point(report, m), "dominated_by": _point(report, by)} for m, by in report.dominated],
    }


def _num(x: float) -> str:
    return f"{int(x):,}" if x.is_integer() and abs(x) < 1e15 else f"{x:.6g}"


def _label(m: Measurement) -> str:
    # Compact (the column header names the parts) so it stays on one line in an 80-column log.
    return f"{'/'.join(m.config)} (line {m.line})" if m.config else f"line {m.line}"


def _print(report: ParetoReport) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = Console(soft_wrap=True)
    objs = ", ".join(o.column if o.sign > 0 else f"{o.column} (max)" for o in report.objectives)
    if report.window_s is not None:
        live = len(report.frontier) + len(report.dominated)
        console.print(f"window {report.window_s:g} s on {escape(str(report.time_column))} at t = "
                      f"{report.now_s:g}: {live:,} of {report.n_rows:,} measurement(s) live, "
                      f"{report.expired:,} expired", highlight=False)
    front = Table(title=escape(f"frontier: {len(report.frontier)} of {len(report.frontier) + len(report.dominated)} "
                               f"measurement(s) non-dominated (minimising {objs})"))
    heads = ["line", *report.config_columns, *(o.column for o in report.objectives)]
    for i, h in enumerate(heads):
        front.add_column(escape(h), justify="left" if 0 < i <= len(report.config_columns) else "right")
    for m in report.frontier:
        front.add_row(str(m.line), *(escape(c) for c in m.config), *(_num(v) for v in m.values))
    console.print(front)
    if not report.dominated:
        console.print("no dominated configuration")
        return
    dom = Table(title=escape(f"dominated: {len(report.dominated)} measurement(s); the dominator costs no more "
                             "in every objective and less in one"))
    for i, h in enumerate(heads):
        dom.add_column(escape(h), justify="left" if 0 < i <= len(report.config_columns) else "right")
    dom.add_column("dominated by", justify="left")
    for m, by in report.dominated[:_SHOWN]:
        dom.add_row(str(m.line), *(escape(c) for c in m.config), *(_num(v) for v in m.values),
                    escape(_label(by)))
    console.print(dom)
    if len(report.dominated) > _SHOWN:
        console.print(f"... {len(report.dominated) - _SHOWN:,} more dominated (see --json)")


@app.command("pareto")
def pareto_cmd(
    measurements: Annotated[Path, typer.Argument(help="CSV, one row per measurement of a serving configuration")],
    config: Annotated[str | None, typer.Option("--config", help="comma-separated columns naming a configuration "
                                               "(default: every column not an objective or the time)")] = None,
    minimize: Annotated[str, typer.Option("--minimize", help="comma-separated objective columns, >= 2, all "
                                          "minimised; -COL maximises COL (e.g. -tokens_per_s)")]
        = "peak_mem_mib,latency_ms_p90",
    time_column: Annotated[str | None, typer.Option("--time-column", help="time in seconds; with --window-s "
                                                    "rows feed the online monitor in this order")] = None,
    window_s: Annotated[float | None, typer.Option("--window-s", help="sliding window (s): the frontier at the "
                                                   "last timestamp over the rows newer than last - W")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="same as -o json (the frontier and the dominated)")] = False,
    output: OutputOpt = "table",
) -> None:
    """Pareto frontier of serving configurations; flag the dominated ones and what dominates each."""
    as_json = wants_json(output, as_json)
    report = pareto_report(measurements, parse_objectives(minimize), config=_columns(config),
                           time_column=time_column, window_s=window_s)
    if as_json:
        typer.echo(json.dumps(report_json(report)))
        return
    _print(report)
