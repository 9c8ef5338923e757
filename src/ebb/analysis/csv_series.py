"""Time series from a recorded CSV (``ebb bursts --input``): named numeric columns, read in one pass.

Guarantees of :func:`read_series`: the header row names every asked column (else an
:class:`~ebb.errors.InputError` listing the header, line 1); every cell of those columns is a finite
number (else the file, the line, the column and the fix); blank lines are skipped; a byte-order
mark is no part of the first column's name; a binary file, one with NUL bytes or a malformed quote
is one InputError, never a ``UnicodeDecodeError`` or a ``csv.Error`` (the file handling is
:class:`~ebb.analysis.csv_reader.CsvReader`'s, shared with the measurements reader). The arrays are
float64, one value per data row, in file order.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from ebb.analysis.csv_reader import CsvReader
from ebb.errors import InputError

__all__ = ["read_series"]


def read_series(path: Path, time_col: str, value_cols: Mapping[str, str]) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """The time column and every column of ``value_cols`` (name → the fix when it is missing) as
    float64 arrays, in one pass over the file; InputError names the file, line and fix."""
    wanted = {time_col: "pass --time-col with one of those names", **{c: src for c, src in value_cols.items() if c != time_col}}
    with CsvReader(path, open_fix="check the --input path") as csv_file:
        idx = [(csv_file.column(name, fix), name) for name, fix in wanted.items()]
        out: dict[str, list[float]] = {name: [] for name in wanted}
        for line_no, row in csv_file.rows():
            for col_i, name in idx:
                out[name].append(_cell(row[col_i] if col_i < len(row) else "", csv_file.path, line_no, name))
    if not out[time_col]:
        raise InputError("no data rows after the header", path=str(path), line=2, fix="add one row per sample")
    arrays = {name: np.asarray(v, dtype=np.float64) for name, v in out.items()}
    return arrays[time_col], {c: arrays[c] for c in value_cols}


def _cell(text: str, path: str, line: int, name: str) -> float:
    cell = text.strip()
    try:
        x = float(cell)
    except ValueError:
        raise InputError(f"column {name!r} is not numeric: {cell!r}", path=path, line=line,
                         fix="remove or repair the row") from None
    if not math.isfinite(x):
        raise InputError(f"column {name!r} is not finite: {cell!r}", path=path, line=line,
                         fix="drop rows with NaN/inf before running ebb bursts")
    return x
