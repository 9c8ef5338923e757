"""Shared plumbing for the trace readers: opening (gzip-transparent), CSV tables, numeric columns.

Guarantees:

* Every reader opens files through :func:`open_binary` / :func:`open_text`, so a gzip file is read
  transparently whatever its name (detected by its magic bytes, not only by ``.gz``).
* Operating-system and decoding failures are re-raised as :class:`~ebb.errors.InputError` /
  :class:`~ebb.errors.TraceFormatError` with the original chained as ``__cause__``.
* Column converters are vectorised on the happy path; only when a value is bad do they walk the
  column in Python, to name the exact 1-based line of the first bad value.
* :func:`sort_by_time` sorts stably and records the fact in ``notes`` and on the
  ``ebb.sources.traces`` logger (never via :mod:`warnings`: the test suite turns warnings into errors).
* Integers are range-checked, vectorised: :func:`int_column` accepts ``[0, hi]`` (default
  :data:`MAX_TOKENS`, 10**7), so a value such as 10**20 is a :class:`TraceFormatError` naming its
  line, never numpy's ``OverflowError``.
"""

from __future__ import annotations

import csv
import gzip
import io
import logging
import math
import stat
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, cast

import numpy as np
import numpy.typing as npt

from ebb.errors import InputError, TraceFormatError
from ebb.model.ids import TraceName

LOG = logging.getLogger("ebb.sources.traces")

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

_GZIP_MAGIC = b"\x1f\x8b"

MAX_TOKENS = 10_000_000
"""Largest plausible token count of one request (prompt or completion): 10 M tokens, 10 times the
largest context window of 2025 models (1 M tokens). A bigger value is a unit or column mistake, and
one such request would cost the simulated fleet over a day of prefill and zero out a ``--peak-replicas``
calibration; readers refuse it with :class:`TraceFormatError` naming file, line, column and this
bound. Sums over MAX_REQUESTS (5 * 10**7) requests stay far inside int64 (5 * 10**14)."""


def is_gzip(path: Path) -> bool:
    """True when the file starts with the gzip magic bytes.

    Raises :class:`InputError` for anything but a regular file: a device such as ``/dev/zero`` or a
    FIFO would never end (or block), so it is refused before it is opened."""
    with _os_errors(path):
        if not stat.S_ISREG(path.stat().st_mode):
            raise InputError("not a regular file (a device, FIFO, socket or folder is not read as a trace)",
                             path=str(path), fix="point at a trace file")
        with path.open("rb") as fh:
            return fh.read(2) == _GZIP_MAGIC


@contextmanager
def _os_errors(path: Path) -> Iterator[None]:
    # Missing files and permission problems are the user's to fix, so they become InputError.
    try:
        yield
    except gzip.BadGzipFile as exc:  # an OSError subclass, but the file's fault, not the OS's
        raise TraceFormatError(f"corrupt gzip data: {exc}", path=str(path),
                               fix="re-download or re-compress the file (gzip -t FILE checks it)") from exc
    except FileNotFoundError as exc:
        raise InputError("trace file not found", path=str(path),
                         fix="check the path, or use a bundled trace such as 'azure-code'") from exc
    except OSError as exc:
        raise InputError(f"cannot read trace file: {exc.strerror or exc}", path=str(path),
                         fix="check the file permissions") from exc


@contextmanager
def open_binary(path: Path) -> Iterator[io.BufferedIOBase]:
    """Open ``path`` for binary reading, decompressing gzip on the fly."""
    with _os_errors(path):
        gz = is_gzip(path)
        raw: io.BufferedIOBase = gzip.GzipFile(path, "rb") if gz else path.open("rb")
    try:
        with _os_errors(path), raw:
            yield raw
    except EOFError as exc:  # gzip stream cut short
        raise TraceFormatError(f"truncated gzip data: {exc}", path=str(path),
                               fix="re-download or re-compress the file (gzip -t FILE checks it)") from exc


@contextmanager
def open_text(path: Path) -> Iterator[IO[str]]:
    """Open ``path`` as UTF-8 text (a leading BOM is dropped), decompressing gzip on the fly."""
    with open_binary(path) as raw:
        # newline="" lets the csv module see CRLF itself (the Azure files use CRLF).
        text = io.TextIOWrapper(cast(IO[bytes], raw), encoding="utf-8-sig", newline="")
        try:
            yield text
        except UnicodeDecodeError as exc:
            raise TraceFormatError("file is not UTF-8 text", path=str(path),
                                   fix="convert the file to UTF-8, or check that it is a trace at all") from exc
        finally:
            text.detach()


def trace_name(path: Path) -> TraceName:
    """File stem without ``.gz`` and the format suffix: ``conv.csv.gz`` -> ``conv``."""
    name = path.name
    if name.endswith(".gz"):
        name = name[:-3]
    return TraceName(Path(name).stem or name)


@dataclass
class Table:
    """A CSV read into string columns, with the 1-based file line of every data row."""

    header: list[str]
    columns: dict[str, list[str]]
    lines: list[int]

    @property
    def rows(self) -> int:
        return len(self.lines)


def resolve_column(ref: str, header: Sequence[str] | None) -> int | None:
    """The 0-based index a column reference names: a header name (exact, after trimming blanks) wins,
    else a string of digits is an index (``"0"`` = first column); None when it names nothing.
    Without a header (``header=None``) only indexes resolve."""
    if header is not None and ref in header:
        return list(header).index(ref)
    if ref.isascii() and ref.isdigit() and len(ref) <= 6:
        return int(ref)
    return None


def read_csv_table(path: Path, *, expected: Sequence[str], fix: str, no_header: bool = False) -> Table:
    """Read a CSV; every ``expected`` column reference (a header name, or a 0-based index, see
    :func:`resolve_column`) must exist. Blank lines are skipped. ``no_header``: the first row is data,
    and columns are named by index only; ``Table.header`` is then ``["0", "1", ...]``.

    ``fix`` is appended to the missing-column error (what the user should pass or change).
    ``Table.columns`` is keyed by the references as given.
    """
    src = str(path)
    with open_text(path) as fh:
        reader = csv.reader(fh)
        first: list[str] | None = None
        header_line = 0
        for row in reader:
            if any(cell.strip() for cell in row):
                first = row
                header_line = reader.line_num
                break
        if first is None:
            raise TraceFormatError("file is empty (no header and no data rows)", path=src, line=1,
                                   fix="point at a non-empty trace file")
        width = len(first)
        header = [str(i) for i in range(width)] if no_header else [cell.strip() for cell in first]
        where = {ref: resolve_column(ref, None if no_header else header) for ref in expected}
        missing = [c for c, k in where.items() if k is None or k >= width]
        if missing:
            found = ", ".join(_show(c) for c in header[:8]) + (f", ... ({len(header)} in all)" if len(header) > 8 else "")
            kind = f"{width} columns (0-based indexes 0 to {width - 1})" if no_header else f"columns {found}"
            raise TraceFormatError(
                f"missing column(s) {', '.join(map(repr, missing))}; found {kind}; "
                f"expected {', '.join(map(repr, expected))}",
                path=src, line=header_line, fix=fix)
        rows: list[list[str]] = [first] if no_header else []
        lines: list[int] = [header_line] if no_header else []
        try:
            for row in reader:
                if len(row) != width:
                    if not any(cell.strip() for cell in row):
                        continue  # blank line (often a trailing one)
                    raise TraceFormatError(
                        f"row has {len(row)} field(s) but the {'first row' if no_header else 'header'} has {width} "
                        f"({', '.join(h[:30] for h in header[:8])}{', ...' if width > 8 else ''})",
                        path=src, line=reader.line_num,
                        fix="make every row have one value per header column")
                rows.append(row)
                lines.append(reader.line_num)
        except csv.Error as exc:
            raise TraceFormatError(f"malformed CSV: {exc}", path=src, line=reader.line_num,
                                   fix="check quoting on this line") from exc
    if not rows:
        raise TraceFormatError("file has a header but no data rows", path=src, line=header_line + 1,
                               fix="point at a trace with at least one request")
    # One transpose instead of per-column list comprehensions over rows.
    transposed = list(zip(*rows))
    columns = {ref: list(transposed[k]) for ref, k in where.items() if k is not None}
    return Table(header=header, columns=columns, lines=lines)


def _show(text: str) -> str:
    """``repr`` of a bad value for a message, cut to 40 characters."""
    stripped = text.strip()
    return repr(stripped) if len(stripped) <= 40 else repr(stripped[:37] + "...")


def _describe_bad_number(text: str, hi: int = MAX_TOKENS) -> str:
    """Classify a value that is not an integer in ``[0, hi]``, for the error message."""
    stripped = text.strip()
    if not stripped:
        return "empty value"
    shown = _show(stripped)
    if stripped.isascii() and stripped.isdigit():  # only digits, so it failed for being too large
        return f"{shown} is larger than {hi:,}"
    try:
        value = float(stripped)
    except (ValueError, OverflowError):
        return f"{shown} is not a number"
    if not math.isfinite(value):
        return f"{shown} is not finite (NaN/inf)"
    if value < 0:
        return f"{shown} is negative"
    if value > hi:
        return f"{shown} is larger than {hi:,}"
    return f"{shown} is not an integer"


MAX_EXACT_FLOAT_INT = 2**53
"""Largest integral float accepted where an integer is expected (``63.0``): past 2**53 a float64
no longer holds every integer, so ``9007199254740993.0`` would silently change value."""


def _int_or_none(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:  # not an integer, or over Python's 4,300-digit conversion limit
        pass
    try:
        value = float(text)
    except (ValueError, OverflowError):
        return None
    # An integral float ("63.0", "1e3") is that integer; "63.5" is not an integer at all.
    if math.isfinite(value) and value.is_integer() and abs(value) <= MAX_EXACT_FLOAT_INT:
        return int(value)
    return None


def _integral_floats(values: Sequence[str], hi: int) -> IntArray | None:
    """The column as int64 when every value is an integral float in ``[0, min(hi, 2**53)]``, else None
    (vectorised; the caller's slow path then names the first bad value)."""
    try:
        f = np.asarray(values, dtype=np.str_).astype(np.float64)
    except (ValueError, OverflowError):
        return None
    ok = np.isfinite(f) & (f >= 0) & (f <= min(hi, MAX_EXACT_FLOAT_INT)) & (f == np.floor(f))
    return f.astype(np.int64) if bool(np.all(ok)) else None


def int_column(values: Sequence[str], *, what: str, path: Path, lines: Sequence[int],
               fix: str, hi: int = MAX_TOKENS) -> IntArray:
    """Convert strings to int64 in ``[0, hi]``, or raise naming the first bad value's line.

    ``hi`` must fit in int64 (default :data:`MAX_TOKENS`). Vectorised unless a value is bad or
    spelled in a way numpy does not parse (``1_000``); then one Python pass finds it. An integral
    float (``63.0``, up to 2**53) is that integer; ``63.5`` is refused as "not an integer".
    """
    if not 0 <= hi <= np.iinfo(np.int64).max:
        raise ValueError(f"int_column: hi must be within int64, got {hi!r}")
    arr: IntArray | None
    try:
        arr = np.asarray(values, dtype=np.str_).astype(np.int64)
    except (ValueError, OverflowError):
        arr = _integral_floats(values, hi)  # "63.0": a count written by a float-typed exporter
    if arr is not None:
        bad = np.flatnonzero((arr < 0) | (arr > hi))
        if len(bad) == 0:
            return arr
        first = int(bad[0])
        raise TraceFormatError(f"{what} {_describe_bad_number(values[first], hi)}", path=str(path),
                               line=lines[first], fix=fix)
    # Slow path: find the first value Python's int() rejects or that is out of range (numpy
    # refused the column, so one of them is bad or spelled in a way only Python accepts).
    parsed: list[int] = []
    for i, text in enumerate(values):
        v = _int_or_none(text)
        if v is None or not 0 <= v <= hi:
            raise TraceFormatError(f"{what} {_describe_bad_number(text, hi)}", path=str(path),
                                   line=lines[i], fix=fix)
        parsed.append(v)
    # numpy and Python disagree on some spellings ("1_000"); Python's int() is the rule we document.
    return np.array(parsed, dtype=np.int64)


def float_column(values: Sequence[str], *, what: str, path: Path, lines: Sequence[int],
                 fix: str) -> FloatArray | None:
    """Convert strings to finite float64; ``None`` if some value is not a number at all.

    A NaN/inf value raises (it is a number, but a useless one); a non-number returns ``None``
    so the caller can try another interpretation (e.g. ISO-8601 timestamps).
    """
    try:
        arr = np.asarray(values, dtype=np.str_).astype(np.float64)
    except ValueError:
        return None
    bad = np.flatnonzero(~np.isfinite(arr))
    if len(bad):
        first = int(bad[0])
        raise TraceFormatError(f"{what} {values[first].strip()!r} is not finite (NaN/inf)",
                               path=str(path), line=lines[first], fix=fix)
    return arr


def sort_by_time(arrival: FloatArray, *others: IntArray, source: str) -> tuple[FloatArray, list[IntArray], list[str]]:
    """Stable-sort ``arrival`` (and ``others`` alongside it); return notes saying whether it was needed."""
    if len(arrival) < 2 or bool(np.all(arrival[1:] >= arrival[:-1])):
        return arrival, list(others), []
    order = np.argsort(arrival, kind="stable")
    note = f"input was not sorted by time; sorted {len(arrival)} rows"
    LOG.warning("%s: %s", source, note)
    return arrival[order], [o[order] for o in others], [note]


def parse_epoch_or_iso(text: str) -> float | None:
    """Epoch seconds (``1700158623.98``) or ISO-8601 (``2023-11-16T18:17:03Z``) -> UTC epoch seconds.

    ISO values without a zone are taken as UTC (trace files are machine logs; local time would make
    the result depend on where Ebb runs). Returns ``None`` when ``text`` is neither, or not finite.
    """
    text = text.strip()
    try:
        value = float(text)
    except ValueError:
        pass
    else:
        return value if math.isfinite(value) else None
    try:
        stamp = datetime.fromisoformat(text)
    except ValueError:
        return None
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=timezone.utc)
    return stamp.timestamp()
