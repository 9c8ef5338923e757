"""Reader for any headed CSV, told which columns mean what (``--format csv --time-col ...``).

Column combinations (names match the header exactly, after trimming blanks):

=====================================  ==========================================================
given                                  result
=====================================  ==========================================================
time + tokens-in + tokens-out          :class:`RequestTrace`, one request per row
time + count                           :class:`CountSeries`: counts summed into ``bin_s`` bins
time only                              :class:`CountSeries`: each row is one request, binned
count only                             :class:`CountSeries`: one row per bin, in file order
=====================================  ==========================================================

Guarantees:

* A time column is epoch seconds (float) if every value parses as a number, else ISO-8601 for
  every value (no zone = UTC; microsecond precision). Times are re-based to the earliest row and
  ``start_epoch_s`` keeps that row's wall-clock time.
* Binning puts a row at time ``t`` into bin ``floor((t - t_min) / bin_s)``; empty bins are zeros.
* Unsorted request rows are stable-sorted with a note; every bad value raises
  :class:`~ebb.errors.TraceFormatError` naming file, 1-based line and fix.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from ebb.errors import TraceFormatError
from ebb.model.trace import CountSeries, RequestTrace
from ebb.sources.traces._common import (
    MAX_TOKENS,
    FloatArray,
    IntArray,
    float_column,
    int_column,
    parse_epoch_or_iso,
    read_csv_table,
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


def _time_column(values: list[str], *, col: str, path: Path, lines: list[int]) -> FloatArray:
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


def read_csv(path: Path, *, time_col: str | None, count_col: str | None, tokens_in_col: str | None,
             tokens_out_col: str | None, bin_s: float = 1.0) -> RequestTrace | CountSeries:
    """Load a generic CSV according to which columns were named (see the module table)."""
    if not (math.isfinite(bin_s) and bin_s > 0):
        raise ValueError(f"bin_s must be a positive finite number of seconds, got {bin_s!r}")
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
    table = read_csv_table(path, expected=wanted, fix=_COLUMNS_FIX)
    name, src, lines = trace_name(path), str(path), table.lines

    if tokens_in_col is not None and tokens_out_col is not None and time_col is not None:
        tok_fix = f"token counts must be integers from 0 to {MAX_TOKENS:,}"
        t = _time_column(table.columns[time_col], col=time_col, path=path, lines=lines)
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
    t = _time_column(table.columns[time_col], col=time_col, path=path, lines=lines)
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
