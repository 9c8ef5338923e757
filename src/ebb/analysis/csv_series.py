"""Time series from a recorded CSV (``ebb bursts --input``): named numeric columns, read in one pass.

Guarantees of :func:`read_series`: the header row names every asked column (else an
:class:`~ebb.errors.InputError` listing the header, line 1); every cell of those columns is a finite
number (else the file, the line, the column and the fix); blank lines are skipped; a binary file,
one with NUL bytes or a malformed quote is one InputError, never a ``UnicodeDecodeError`` or a
``csv.Error``. The arrays are float64, one value per data row, in file order.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterator, Mapping
from pathlib import Path

import numpy as np

from ebb.errors import InputError

__all__ = ["read_columns", "read_series"]


def read_columns(path: Path, time_col: str, value_col: str) -> tuple[np.ndarray, np.ndarray]:
    """(t seconds, value) as float64 arrays; InputError names the file, line and fix."""
    t_s, values = read_series(path, time_col, {value_col: "pass --value-col with one of those names"})
    return t_s, values[value_col]


def read_series(path: Path, time_col: str, value_cols: Mapping[str, str]) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """The time column and every column of ``value_cols`` (name → the fix when it is missing) as
    float64 arrays, in one pass over the file; InputError names the file, line and fix."""
    p = str(path)
    try:
        fh = path.open(newline="", encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot open: {exc.strerror}", path=p, fix="check the --input path") from exc
    wanted = {time_col: "pass --time-col with one of those names", **{c: src for c, src in value_cols.items() if c != time_col}}
    with fh:
        try:
            return _parse_series(csv.reader(fh), p, time_col, value_cols, wanted)
        except (UnicodeDecodeError, csv.Error) as exc:
            # A binary file (an image, a gzip) or one with NUL bytes: not a CSV, whatever its name.
            why = "not UTF-8 text" if isinstance(exc, UnicodeDecodeError) else f"not a CSV ({exc})"
            raise InputError(f"cannot read as CSV: {why}", path=p,
                             fix="pass a UTF-8 CSV file with a header row (decompress it first if it is gzipped)") from None


def _parse_series(reader: Iterator[list[str]], p: str, time_col: str, value_cols: Mapping[str, str],
                  wanted: Mapping[str, str]) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    header = next(reader, None)
    if header is None:
        raise InputError("empty file, expected a header row", path=p, line=1)
    cols = [h.strip() for h in header]
    for name, fix in wanted.items():
        if name not in cols:
            raise InputError(f"no column {name!r}; columns are: {', '.join(cols)}", path=p, line=1, fix=fix)
    idx = [(cols.index(name), name) for name in wanted]
    out: dict[str, list[float]] = {name: [] for name in wanted}
    for line_no, row in enumerate(reader, start=2):
        if not row:
            continue
        for col_i, name in idx:
            cell = row[col_i].strip() if col_i < len(row) else ""
            try:
                x = float(cell)
            except ValueError:
                raise InputError(
                    f"column {name!r} is not numeric: {cell!r}", path=p, line=line_no,
                    fix="remove or repair the row",
                ) from None
            if not math.isfinite(x):
                raise InputError(
                    f"column {name!r} is not finite: {cell!r}", path=p, line=line_no,
                    fix="drop rows with NaN/inf before running ebb bursts",
                )
            out[name].append(x)
    if not out[time_col]:
        raise InputError("no data rows after the header", path=p, line=2)
    arrays = {name: np.asarray(v, dtype=np.float64) for name, v in out.items()}
    return arrays[time_col], {c: arrays[c] for c in value_cols}
