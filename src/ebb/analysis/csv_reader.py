"""The CSV core both analysis readers share (:mod:`ebb.analysis.csv_series`, :mod:`ebb.analysis.measurements`).

:class:`CsvReader` opens a file as UTF-8 text (a byte-order mark is dropped, never read into the
first column's name), reads the header row (names stripped), finds columns by name and yields the
data rows with their 1-based line numbers, blank lines skipped. Every failure is one
:class:`~ebb.errors.InputError` naming the file and, where there is one, the line: a file that
cannot be opened; an empty file; a column the header lacks (the header listed); bytes that are not
UTF-8 (a binary or gzipped file); a malformed row (a NUL byte, an over-long field, a bad quote).
Never a ``UnicodeDecodeError`` or a ``csv.Error``. Reading is streaming: memory holds the current
row. What a cell means (a number, finite) is the caller's, which names the column in its own terms.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import TextIO

from ebb.errors import InputError

__all__ = ["CsvReader"]

_NOT_TEXT_FIX = "pass a UTF-8 CSV file with a header row (decompress it first if it is gzipped)"


class CsvReader:
    """A CSV file: its header on construction, then its data rows once (a context manager)."""

    def __init__(self, path: Path, *, open_fix: str) -> None:
        """Open ``path`` and read its header; ``open_fix`` is the fix when it cannot be opened (the flag)."""
        self.path = str(path)
        try:
            self._fh: TextIO = path.open(newline="", encoding="utf-8-sig")  # a BOM is not a column name
        except OSError as exc:
            raise InputError(f"cannot open: {exc.strerror or exc}", path=self.path, fix=open_fix) from exc
        try:
            self._reader = csv.reader(self._fh)
            header = self._next()
            if header is None:
                raise InputError("empty file, expected a header row", path=self.path, line=1,
                                 fix="give a CSV file whose first row names the columns")
            self.header = [h.strip() for h in header]
            """The column names, stripped, in file order."""
        except BaseException:
            self._fh.close()
            raise

    def _next(self) -> list[str] | None:
        try:
            return next(self._reader, None)
        except UnicodeDecodeError:
            raise InputError("cannot read as CSV: not UTF-8 text", path=self.path,
                             line=self._reader.line_num + 1, fix=_NOT_TEXT_FIX) from None
        except csv.Error as exc:  # a NUL byte, an over-long field, a bad quote
            raise InputError(f"cannot read as CSV: malformed row ({exc})", path=self.path,
                             line=self._reader.line_num, fix="repair the row (or pass a CSV file)") from None

    def column(self, name: str, fix: str) -> int:
        """The 0-based index of column ``name``; InputError listing the header (line 1, ``fix``) when absent."""
        if name not in self.header:
            raise InputError(f"no column {name!r}; columns are: {', '.join(self.header)}", path=self.path, line=1,
                             fix=fix)
        return self.header.index(name)

    def rows(self) -> Iterator[tuple[int, list[str]]]:
        """(line, fields) of each data row, in file order; blank lines are skipped."""
        while (row := self._next()) is not None:
            if row:
                yield self._reader.line_num, row

    def __enter__(self) -> CsvReader:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._fh.close()

    def close(self) -> None:
        """Close the file (what leaving the ``with`` block does)."""
        self._fh.close()
