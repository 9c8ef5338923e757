"""Reader for any headed CSV, told which columns mean what (``--format csv --time-col ...``).

Column combinations (names match the header exactly, after trimming blanks):

=====================================  ==========================================================
given                                  result
=====================================  ==========================================================
time + tokens-in + tokens-out          :class:`RequestTrace`, one request per row
time + service-time (+ tokens)         :class:`RequestTrace` with ``service_s`` (tokens 0 if absent)
time + count                           :class:`CountSeries`: counts summed into ``bin_s`` bins
time only                              :class:`CountSeries`: each row is one request, binned
count only                             :class:`CountSeries`: one row per bin, in file order
=====================================  ==========================================================

A column is named by its header (exact, after trimming blanks) or by its 0-based index (``0``);
with ``no_header`` the first row is data and only indexes name columns (ServeGen-style files).
The service-time column may be ``END-START``, two columns whose difference is the service time
(``finished-admitted`` for a log such as the H200 ``requests.csv``); it must be finite and >= 0
seconds in every row. Integer columns accept integral floats (``63.0``), not ``63.5``.

Guarantees:

* A time column is epoch seconds (float) if every value parses as a number, else ISO-8601 for
  every value (no zone = UTC; microsecond precision). Times are re-based to the earliest row and
  ``start_epoch_s`` keeps that row's wall-clock time.
* Binning puts a row at time ``t`` into bin ``floor((t - t_min) / bin_s)``; empty bins are zeros.
* Unsorted request rows are stable-sorted with a note; every bad value raises
  :class:`~ebb.errors.TraceFormatError` naming file, 1-based line and fix.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np

from ebb.errors import ConfigError, TraceFormatError
from ebb.model.trace import CountSeries, RequestTrace
from ebb.sources.traces._common import (
    MAX_TOKENS,
    FloatArray,
    IntArray,
    Table,
    float_column,
    int_column,
    open_text,
    parse_epoch_or_iso,
    read_csv_table,
    resolve_column,
    sort_by_time,
    trace_name,
)

_COLUMNS_FIX = ("pass --time-col with --tokens-in-col and --tokens-out-col (a request log), "
                "or --count-col with an optional --time-col (a count series)")
MAX_COUNT = 10**18 - 1
"""Largest value of a count column: the counts reader's bound (``ebb.sources.traces.counts``)."""
_MAX_BINS = 100_000_000
"""More bins than this almost always means milliseconds were given where seconds are expected."""
_TIME_FIX = "times must be epoch seconds (1700158623.98) or ISO-8601 (2023-11-16T18:17:03Z) in every row"


def time_column(values: list[str], *, col: str, path: Path, lines: list[int]) -> FloatArray:
    """Epoch seconds for every row of a time column (numeric fast path, else ISO-8601 per row)."""
    numeric = float_column(values, what=f"time {col!r}", path=path, lines=lines, fix=_TIME_FIX)
    if numeric is not None:
        return numeric
    out = np.empty(len(values), dtype=np.float64)
    for i, text in enumerate(values):
        epoch = parse_epoch_or_iso(text)
        if epoch is None:
            raise TraceFormatError(f"bad timestamp {text!r} in column {col!r}", path=str(path),
                                   line=lines[i], fix=_TIME_FIX)
        out[i] = epoch
    return out


_SERVICE_FIX = "service times must be finite seconds >= 0 (for END-START: END >= START) in every row"


def service_refs(ref: str, header: list[str] | None) -> tuple[str, str | None]:
    """The column(s) a ``--service-time-column`` names: ``(col, None)`` for one column, or
    ``(end, start)`` for an ``END-START`` expression. A whole reference that names a column wins
    (a header may hold ``exec-time``); else the first ``-`` split whose two sides both name
    columns (by header name or index). Unresolvable → ``(ref, None)``, refused as a missing column."""
    if resolve_column(ref, header) is not None:
        return ref, None
    for k, ch in enumerate(ref):
        if ch == "-" and 0 < k < len(ref) - 1:
            end, start = ref[:k].strip(), ref[k + 1:].strip()
            if resolve_column(end, header) is not None and resolve_column(start, header) is not None:
                return end, start
    return ref, None


def _header_of(path: Path, no_header: bool) -> list[str] | None:
    """The header row (trimmed), or None without one: read only to resolve ``END-START``."""
    if no_header:
        return None
    with open_text(path) as fh:
        for row in csv.reader(fh):
            if any(cell.strip() for cell in row):
                return [cell.strip() for cell in row]
    return None


def _seconds(table: Table, col: str, *, path: Path) -> FloatArray:
    """One numeric column of seconds (finite in every row), or the error naming the first non-number."""
    values = table.columns[col]
    arr = float_column(values, what=f"service time {col!r}", path=path, lines=table.lines, fix=_SERVICE_FIX)
    if arr is None:
        i = next(k for k, v in enumerate(values) if parse_epoch_or_iso(v) is None)
        raise TraceFormatError(f"service time {col!r}: {values[i].strip()[:40]!r} is not a number",
                               path=str(path), line=table.lines[i], fix=_SERVICE_FIX)
    return arr


def _service_column(table: Table, end: str, start: str | None, *, path: Path) -> FloatArray:
    """Service seconds per row: one numeric column, or ``end - start``; finite and >= 0 everywhere."""
    svc = _seconds(table, end, path=path)
    if start is not None:
        svc = svc - _seconds(table, start, path=path)
    bad = np.flatnonzero(~(svc >= 0))
    if len(bad):
        what = end if start is None else f"{end}-{start}"
        raise TraceFormatError(f"service time {what!r} is {float(svc[int(bad[0])]):g} s (negative)",
                               path=str(path), line=table.lines[int(bad[0])], fix=_SERVICE_FIX)
    return svc


def read_csv(path: Path, *, time_col: str | None, count_col: str | None, tokens_in_col: str | None,
             tokens_out_col: str | None, bin_s: float = 1.0, service_col: str | None = None,
             no_header: bool = False) -> RequestTrace | CountSeries:
    """Load a generic CSV according to which columns were named (see the module table)."""
    if not (math.isfinite(bin_s) and bin_s > 0):
        raise ValueError(f"bin_s must be a positive finite number of seconds, got {bin_s!r}")
    if service_col is not None:
        return _read_service_log(path, time_col=time_col, count_col=count_col, tokens_in_col=tokens_in_col,
                                 tokens_out_col=tokens_out_col, service_col=service_col, no_header=no_header)
    has_tokens = tokens_in_col is not None or tokens_out_col is not None
    if has_tokens and (tokens_in_col is None or tokens_out_col is None or time_col is None):
        raise TraceFormatError("a request log needs --time-col, --tokens-in-col and --tokens-out-col together",
                               path=str(path), fix=_COLUMNS_FIX)
    if has_tokens and count_col is not None:
        raise TraceFormatError("--count-col cannot be combined with token columns", path=str(path),
                               fix=_COLUMNS_FIX)
    if time_col is None and count_col is None:
        raise TraceFormatError("no columns named for --format csv", path=str(path), fix=_COLUMNS_FIX)
    wanted = [c for c in (time_col, count_col, tokens_in_col, tokens_out_col) if c is not None]
    table = read_csv_table(path, expected=wanted, fix=_COLUMNS_FIX, no_header=no_header)
    name, src, lines = trace_name(path), str(path), table.lines

    if tokens_in_col is not None and tokens_out_col is not None and time_col is not None:
        tok_fix = f"token counts must be integers from 0 to {MAX_TOKENS:,}"
        t = time_column(table.columns[time_col], col=time_col, path=path, lines=lines)
        tin = int_column(table.columns[tokens_in_col], what=tokens_in_col, path=path, lines=lines, fix=tok_fix)
        tout = int_column(table.columns[tokens_out_col], what=tokens_out_col, path=path, lines=lines, fix=tok_fix)
        t0 = float(t.min())
        arrival, (tin, tout), notes = sort_by_time(t - t0, tin, tout, source=src)
        return RequestTrace(name=name, arrival_s=arrival, tokens_in=tin, tokens_out=tout, source=src,
                            start_epoch_s=t0, notes=tuple(notes))

    count_fix = "counts must be non-negative integers"
    weights: IntArray | None = None
    if count_col is not None:
        weights = int_column(table.columns[count_col], what=f"count {count_col!r}", path=path, lines=lines,
                             fix=count_fix, hi=MAX_COUNT)
    if time_col is None:
        assert weights is not None  # guaranteed by the argument checks above
        return CountSeries(name=name, counts=weights, bin_s=bin_s, source=src)
    t = time_column(table.columns[time_col], col=time_col, path=path, lines=lines)
    t0 = float(t.min())
    n_bins = int(math.floor(float(t.max() - t0) / bin_s)) + 1
    if n_bins > _MAX_BINS:
        raise TraceFormatError(
            f"times span {float(t.max() - t0):.6g} s, which is {n_bins} bins of {bin_s:g} s",
            path=src, fix=f"check the time unit of column {time_col!r} (seconds expected) or pass a larger --bin-s")
    bins = np.minimum(np.floor((t - t0) / bin_s).astype(np.int64), n_bins - 1)
    if weights is None:
        # bincount counts rows per bin in one pass and fills empty bins with zero.
        counts = np.bincount(bins, minlength=n_bins).astype(np.int64)
    else:
        counts = np.zeros(n_bins, dtype=np.int64)
        np.add.at(counts, bins, weights)  # exact integer sums (bincount would go through float64)
        if bool(np.any(counts < 0)):  # int64 wrapped: at least nine rows of ~10**18 in one bin
            first = int(np.flatnonzero(counts < 0)[0])
            raise TraceFormatError(f"counts in bin {first} ({first * bin_s:g} s) sum past int64",
                                   path=src, fix=f"{count_fix}, and each bin's total below 9.2e18")
    return CountSeries(name=name, counts=counts, bin_s=bin_s, source=src, start_epoch_s=t0)


def _read_service_log(path: Path, *, time_col: str | None, count_col: str | None, tokens_in_col: str | None,
                      tokens_out_col: str | None, service_col: str, no_header: bool) -> RequestTrace:
    """A request log with a service-time column: time + service (+ both token columns, optional)."""
    if time_col is None or count_col is not None or (tokens_in_col is None) != (tokens_out_col is None):
        raise TraceFormatError("a service-time log needs --time-column and --service-time-column (token columns "
                               "optional, both or neither; no --count-column)", path=str(path), fix=_COLUMNS_FIX)
    end, start = service_refs(service_col, _header_of(path, no_header))
    wanted = [c for c in (time_col, end, start, tokens_in_col, tokens_out_col) if c is not None]
    table = read_csv_table(path, expected=wanted, fix="name the columns by header name or 0-based index",
                           no_header=no_header)
    t = time_column(table.columns[time_col], col=time_col, path=path, lines=table.lines)
    svc = _service_column(table, end, start, path=path)
    n = len(t)
    tin = tout = np.zeros(n, dtype=np.int64)
    if tokens_in_col is not None and tokens_out_col is not None:
        tok_fix = f"token counts must be integers from 0 to {MAX_TOKENS:,}"
        tin = int_column(table.columns[tokens_in_col], what=tokens_in_col, path=path, lines=table.lines, fix=tok_fix)
        tout = int_column(table.columns[tokens_out_col], what=tokens_out_col, path=path, lines=table.lines,
                          fix=tok_fix)
    t0 = float(t.min())
    arrival, (tin, tout, idx), notes = sort_by_time(t - t0, tin, tout, np.arange(n, dtype=np.int64), source=str(path))
    return RequestTrace(name=trace_name(path), arrival_s=arrival, tokens_in=tin, tokens_out=tout, source=str(path),
                        start_epoch_s=t0, notes=tuple(notes), service_s=svc[idx])


def check_columns(path: Path, flags: dict[str, str], *, no_header: bool) -> None:
    """Every column flag names a column of ``path``'s first row (by header name or 0-based index,
    ``END-START`` for ``--service-time-column``), or :class:`~ebb.errors.ConfigError` naming the
    flag, the columns found and the fix. Reads one row: the CLI calls it before any work."""
    header = _header_of(path, no_header)
    if no_header:
        with open_text(path) as fh:
            first = next((row for row in csv.reader(fh) if any(c.strip() for c in row)), [])
        width = len(first)
    else:
        width = len(header or [])
    shown = (f"{width} columns, 0-based indexes 0 to {width - 1}" if no_header
             else "columns " + ", ".join(repr(h[:30]) for h in (header or [])[:10]) + (", ..." if width > 10 else ""))
    for flag, ref in flags.items():
        parts = service_refs(ref, header) if flag == "--service-time-column" else (ref, None)
        for part in (p for p in parts if p is not None):
            k = resolve_column(part, header)
            if k is None or k >= width:
                how = "a 0-based index (the file has no header)" if no_header else "a header name or a 0-based index"
                extra = " or END-START of two columns" if flag == "--service-time-column" else ""
                raise ConfigError(f"{flag} {ref!r}: no such column in {path} ({shown}) (fix: give {how}{extra})")
