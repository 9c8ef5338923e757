"""Reader for count series: one non-negative integer per bin, separated by whitespace or newlines.

Format::

    # start=2023-11-16T18:00:00Z      (optional; epoch seconds or ISO-8601, no zone = UTC)
    # bin_s=1                         (optional; seconds per bin, default 1)
    12
    9 14 0
    ...

Guarantees:

* Streaming: the file is read in fixed-size blocks and each block is parsed by numpy on its raw
  bytes (no Python object per value), so memory is O(block + result) and millions of lines load
  in well under a second per few million values.
* Header lines (``# key=value``) count only before the first value; later ``#`` lines and
  unknown keys are comments. A ``#`` must be the first non-blank character of its line.
* Any byte that is not a digit, whitespace or part of a comment line raises
  :class:`~ebb.errors.TraceFormatError` with the file, the 1-based line of that value, what is
  wrong with it (negative, non-integer, NaN/inf, not a number) and the fix.
* Values above 10**18 - 1 are rejected (int64 has no room for the sum of many of them).
"""

from __future__ import annotations

import math
import re
from pathlib import Path
import io

import numpy as np
import numpy.typing as npt

from ebb.errors import TraceFormatError
from ebb.model.trace import CountSeries
from ebb.sources.traces._common import (
    LOG,
    IntArray,
    open_binary,
    parse_epoch_or_iso,
    trace_name,
)

BLOCK_BYTES = 8 << 20
"""Bytes read per block; big enough that numpy's per-call overhead is negligible."""

LONG_LINE_BYTES = 16 << 20
"""A line longer than this (many values on one line) is split at a blank instead of buffered whole."""

_MAX_DIGITS = 18
_POW10 = 10 ** np.arange(_MAX_DIGITS, dtype=np.int64)
_FIX = "a count series holds one non-negative integer per bin, separated by spaces or newlines"

# Byte classes: 0 whitespace, 1 digit, 2 anything else (an error).
_CLASS = np.full(256, 2, dtype=np.uint8)
_CLASS[[9, 10, 11, 12, 13, 32]] = 0
_CLASS[ord("0"):ord("9") + 1] = 1
_WHITESPACE = b" \t\n\r\v\f"
_HEADER_RE = re.compile(rb"#\s*(start|bin_s)\s*=\s*(.*?)\s*")


class _Header:
    def __init__(self) -> None:
        self.start_epoch_s: float | None = None
        self.bin_s: float | None = None


def _shown(token: bytes) -> str:
    """A token for an error message, cut to 40 characters (a bad token can be megabytes long)."""
    text = token.decode("utf-8", "replace")
    return text if len(text) <= 40 else text[:37] + "..."


def _describe(token: bytes) -> str:
    text = _shown(token)
    try:
        value = float(token.decode("utf-8", "replace"))
    except ValueError:
        return f"count {text!r} is not a number"
    if not math.isfinite(value):
        return f"count {text!r} is not finite (NaN/inf)"
    if value < 0:
        return f"count {text!r} is negative"
    return f"count {text!r} is not an integer"


def _token_around(chunk: bytes, i: int) -> bytes:
    """The whitespace-delimited token containing ``chunk[i]`` (C-speed searches: it can be long)."""
    lo = max(chunk.rfind(bytes([w]), 0, i) for w in _WHITESPACE) + 1
    ends = [e for e in (chunk.find(bytes([w]), i) for w in _WHITESPACE) if e != -1]
    return chunk[lo:min(ends) if ends else len(chunk)]


def _blank_comments(chunk: bytes, *, at_line_start: bool, path: Path, first_line: int) -> bytes:
    """Overwrite ``#`` comment lines with spaces (keeping newlines, so line numbers stay right)."""
    buf = bytearray(chunk)
    pos = chunk.find(b"#")
    while pos != -1:
        line_start = chunk.rfind(b"\n", 0, pos) + 1
        before = chunk[line_start:pos]
        if before.strip() or (line_start == 0 and not at_line_start):
            raise TraceFormatError(f"'#' in the middle of a line: {_shown(_token_around(chunk, pos))!r}",
                                   path=str(path), line=first_line + chunk.count(b"\n", 0, pos),
                                   fix="comments must be whole lines starting with '#'")
        end = chunk.find(b"\n", pos)
        end = len(chunk) if end == -1 else end
        buf[pos:end] = b" " * (end - pos)
        pos = chunk.find(b"#", end)
    return bytes(buf)


def parse_block(chunk: bytes, *, path: Path, first_line: int, at_line_start: bool = True) -> IntArray:
    """Parse whitespace-separated non-negative integers from raw bytes, vectorised.

    ``first_line`` is the 1-based file line of ``chunk[0]``, used in error messages.
    """
    if b"#" in chunk:
        chunk = _blank_comments(chunk, at_line_start=at_line_start, path=path, first_line=first_line)
    raw = np.frombuffer(chunk, dtype=np.uint8)
    cls = _CLASS[raw]
    bad = np.flatnonzero(cls == 2)
    if len(bad):
        i = int(bad[0])
        raise TraceFormatError(_describe(_token_around(chunk, i)), path=str(path),
                               line=first_line + chunk.count(b"\n", 0, i), fix=_FIX)
    is_digit = cls == 1
    # A value starts at a digit not preceded by a digit and ends at one not followed by a digit.
    starts = is_digit.copy()
    starts[1:] &= ~is_digit[:-1]
    ends = is_digit.copy()
    ends[:-1] &= ~is_digit[1:]
    start_idx = np.flatnonzero(starts)
    end_idx = np.flatnonzero(ends)
    if len(start_idx) == 0:
        return np.zeros(0, dtype=np.int64)
    lengths = end_idx - start_idx + 1
    too_long = np.flatnonzero(lengths > _MAX_DIGITS)
    if len(too_long):
        i = int(start_idx[too_long[0]])
        raise TraceFormatError(f"count {_shown(_token_around(chunk, i))!r} is too large", path=str(path),
                               line=first_line + chunk.count(b"\n", 0, i), fix="counts must be below 10**18")
    digit_pos = np.flatnonzero(is_digit)
    digits = (raw[digit_pos] - ord("0")).astype(np.int64)
    # Each digit's power of ten is its distance to the end of its value.
    exponent = np.repeat(end_idx, lengths) - digit_pos
    offsets = np.cumsum(lengths) - lengths
    return np.add.reduceat(digits * _POW10[exponent], offsets).astype(np.int64, copy=False)


def _apply_header(line: bytes, header: _Header, *, path: Path, lineno: int) -> None:
    m = _HEADER_RE.fullmatch(line.strip())
    if m is None:
        return  # an ordinary comment
    key, value = m.group(1).decode(), m.group(2).decode("utf-8", "replace")
    if key == "start":
        epoch = parse_epoch_or_iso(value)
        if epoch is None:
            raise TraceFormatError(f"bad start time {value!r}", path=str(path), line=lineno,
                                   fix="use '# start=<epoch seconds>' or '# start=2023-11-16T18:00:00Z'")
        header.start_epoch_s = epoch
    else:
        try:
            bin_s = float(value)
        except ValueError:
            bin_s = math.nan
        if not (math.isfinite(bin_s) and bin_s > 0):
            raise TraceFormatError(f"bad bin width {value!r}", path=str(path), line=lineno,
                                   fix="use '# bin_s=<seconds>' with a positive number")
        header.bin_s = bin_s


def _read_header(fh: io.BufferedIOBase, header: _Header, *, path: Path) -> tuple[bytes, int]:
    """Consume leading blank and ``#`` lines; return the first data line and its 1-based number."""
    lineno = 0
    while True:
        line = fh.readline()
        if not line:
            return b"", lineno + 1
        lineno += 1
        if lineno == 1 and line.startswith(b"\xef\xbb\xbf"):
            line = line[3:]  # UTF-8 BOM written by some editors
        stripped = line.strip()
        if not stripped:
            continue
        if stripped.startswith(b"#"):
            _apply_header(stripped, header, path=path, lineno=lineno)
            continue
        return line, lineno


def read_counts(path: Path, *, bin_s: float | None = None) -> CountSeries:
    """Load a count series. ``bin_s`` is used when the file has no ``# bin_s=`` header.

    When both are given and differ, the file wins (it describes its own data) and a note says so.
    """
    header = _Header()
    parts: list[IntArray] = []
    with open_binary(path) as fh:
        pending, line_no = _read_header(fh, header, path=path)
        at_line_start = True
        in_comment = False  # inside an over-long comment line whose start was already dropped
        while True:
            block = fh.read(BLOCK_BYTES)
            if in_comment:
                nl = block.find(b"\n")
                if nl == -1 and block:
                    continue
                in_comment = False
                block = block[nl:] if nl != -1 else b""  # keep the newline: it ends the comment line
            buf = pending + block
            cut_mid_line = False
            if block:
                # Cut after the last newline so no value (or comment) is split between blocks.
                cut = buf.rfind(b"\n") + 1
                if cut == 0:
                    if len(buf) < LONG_LINE_BYTES:
                        pending = buf  # keep reading until the line ends
                        continue
                    # A line longer than LONG_LINE_BYTES: drop it if it is a comment, else cut at
                    # its last blank so memory stays bounded.
                    if at_line_start and buf.lstrip(b" \t\r\v\f").startswith(b"#"):
                        in_comment, pending = True, b""
                        continue
                    cut = max(buf.rfind(b" "), buf.rfind(b"\t")) + 1
                    if cut == 0:
                        pending = buf  # one giant token; parse_block reports it as too large
                        continue
                    cut_mid_line = True
            else:
                cut = len(buf)
            chunk, pending = buf[:cut], buf[cut:]
            parts.append(parse_block(chunk, path=path, first_line=line_no, at_line_start=at_line_start))
            line_no += chunk.count(b"\n")
            at_line_start = not cut_mid_line
            if not block:
                break
    counts: npt.NDArray[np.int64] = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
    if len(counts) == 0:
        raise TraceFormatError("file has no counts (no data rows)", path=str(path), line=line_no,
                               fix="write one non-negative integer per bin")
    notes: list[str] = []
    used_bin = header.bin_s if header.bin_s is not None else (bin_s if bin_s is not None else 1.0)
    if header.bin_s is not None and bin_s is not None and bin_s != header.bin_s:
        note = f"file header says bin_s={header.bin_s:g}; ignored the requested bin_s={bin_s:g}"
        LOG.warning("%s: %s", path, note)
        notes.append(note)
    return CountSeries(name=trace_name(path), counts=counts, bin_s=used_bin, source=str(path),
                       start_epoch_s=header.start_epoch_s, notes=tuple(notes))
