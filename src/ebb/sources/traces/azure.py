"""Reader for the Azure LLM inference trace 2023 (``TIMESTAMP,ContextTokens,GeneratedTokens``).

Format (Azure/AzurePublicDataset, ``AzureLLMInferenceTrace_{code,conv}.csv``): one request per
row, ``TIMESTAMP`` like ``2023-11-16 18:17:03.9799600`` (7 fractional digits, no zone),
``ContextTokens`` / ``GeneratedTokens`` non-negative integers.

Guarantees:

* Timestamps are parsed exactly to the nanosecond (numpy ``datetime64[ns]``; Python's
  ``datetime`` would silently drop the 7th digit) and are taken as UTC, since the file gives no zone.
* ``arrival_s`` is relative to the earliest request and ``start_epoch_s`` is that request's
  UTC epoch time; differences are computed in integer nanoseconds before converting to float.
* Unsorted rows are stable-sorted (with a note); every malformed value raises
  :class:`~ebb.errors.TraceFormatError` naming the file, 1-based line and a fix.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from ebb.errors import TraceFormatError
from ebb.model.trace import RequestTrace
from ebb.sources.traces._common import (
    MAX_TOKENS,
    IntArray,
    int_column,
    read_csv_table,
    sort_by_time,
    trace_name,
)

TIME_COL = "TIMESTAMP"
IN_COL = "ContextTokens"
OUT_COL = "GeneratedTokens"
HEADER = (TIME_COL, IN_COL, OUT_COL)

# Date, time, optional fraction of up to 9 digits (numpy ns precision). Stricter than numpy's own
# parser, which would also accept a bare date or a time zone suffix.
_TS_RE = re.compile(r"\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(?:\.\d{1,9})?")
_TS_FIX = "timestamps must look like '2023-11-16 18:17:03.9799600' (UTC, no zone suffix)"


def parse_timestamps_ns(values: list[str], *, path: Path, lines: list[int]) -> IntArray:
    """Parse Azure-style naive timestamps to int64 UTC epoch nanoseconds, naming the first bad line."""
    stripped = [v.strip() for v in values]
    match = _TS_RE.fullmatch
    for i, text in enumerate(stripped):
        if match(text) is None:
            raise TraceFormatError(f"bad timestamp {values[i]!r}", path=str(path), line=lines[i], fix=_TS_FIX)
    try:
        return np.array(stripped, dtype="datetime64[ns]").astype(np.int64)
    except ValueError:
        pass
    # The shape was right but a field is out of range (month 13, 25:00); find which row.
    for i, text in enumerate(stripped):
        try:
            np.datetime64(text, "ns")
        except ValueError:
            raise TraceFormatError(f"bad timestamp {values[i]!r} (a date or time field is out of range)",
                                   path=str(path), line=lines[i], fix=_TS_FIX) from None
    raise AssertionError("unreachable: vectorised parse failed but every row parses")  # pragma: no cover


def read_azure(path: Path) -> RequestTrace:
    """Load an Azure LLM 2023 trace file (plain or gzip)."""
    table = read_csv_table(
        path, expected=HEADER,
        fix="an Azure LLM trace needs the header 'TIMESTAMP,ContextTokens,GeneratedTokens'; "
            "for other CSVs use --format csv --time-col ... --tokens-in-col ... --tokens-out-col ...")
    tok_fix = f"token counts must be integers from 0 to {MAX_TOKENS:,}"
    ns = parse_timestamps_ns(table.columns[TIME_COL], path=path, lines=table.lines)
    tin = int_column(table.columns[IN_COL], what=IN_COL, path=path, lines=table.lines, fix=tok_fix)
    tout = int_column(table.columns[OUT_COL], what=OUT_COL, path=path, lines=table.lines, fix=tok_fix)
    t0 = int(ns.min())
    # Subtract in integers first: float64 epoch-ns would only keep ~0.25 µs resolution.
    arrival = (ns - t0).astype(np.float64) / 1e9
    arrival, (tin, tout), notes = sort_by_time(arrival, tin, tout, source=str(path))
    return RequestTrace(
        name=trace_name(path), arrival_s=arrival, tokens_in=tin, tokens_out=tout,
        source=str(path), start_epoch_s=t0 / 1e9, notes=tuple(notes),
    )
