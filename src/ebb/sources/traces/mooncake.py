"""Reader for Mooncake (FAST'25) JSONL traces: ``{"timestamp": ms, "input_length": n, "output_length": m, ...}``.

Format (kvcache-ai/Mooncake ``FAST25-release/traces/*.jsonl``): one JSON object per line;
``timestamp`` is milliseconds relative to the trace start, ``input_length`` / ``output_length``
are token counts. Other keys (``hash_ids``) are ignored. Blank lines are skipped.

Guarantees:

* ``arrival_s = timestamp / 1000`` unchanged (the file is already relative, so it is not
  re-based); ``start_epoch_s`` is ``None`` because the file carries no wall-clock time.
* Timestamps must be finite and in [0, 2**53] ms (int or float; 2**53 ms is 285,000 years, and
  every integer below it is exact in float64); token counts must be JSON integers in
  [0, :data:`~ebb.sources.traces._common.MAX_TOKENS`] (``3.0`` and ``true`` are rejected, since a
  float token count means the file is not what we think).
* Each line is parsed by :func:`ebb.untrusted.loads_json`: at most 64 levels of nesting, so a line
  of 100,000 ``[`` is a one-line error, not a ``RecursionError``.
* Any malformed line raises :class:`~ebb.errors.TraceFormatError` naming file, 1-based line and fix;
  unsorted input is stable-sorted with a note.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from ebb.errors import TraceFormatError
from ebb.model.trace import RequestTrace
from ebb.sources.traces._common import MAX_TOKENS, open_text, sort_by_time, trace_name
from ebb.untrusted import MAX_JSON_DEPTH, UntrustedInput, loads_json

KEYS = ("timestamp", "input_length", "output_length")
MAX_TIMESTAMP_MS = 2**53
"""Largest timestamp (ms): every integer up to it is exact in float64."""
_FIX_SHAPE = ('each line must be a JSON object like {"timestamp": 0, "input_length": 512, '
              '"output_length": 64} (timestamp in ms)')
_TOKEN_FIX = f"token counts must be JSON integers from 0 to {MAX_TOKENS:,}"


def _shown(value: Any) -> str:
    """A JSON value for an error message, at most about 40 characters (never a huge int's repr)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return f"<a {value.bit_length()}-bit integer>"
    text = repr(value) if isinstance(value, (bool, int, float, str)) or value is None else type(value).__name__
    return text if len(text) <= 40 else text[:37] + "..."


def parse_line(raw: str) -> Any:
    """One JSONL line parsed with the depth (64) and size caps of :func:`ebb.untrusted.loads_json`.

    A line with at most 64 brackets cannot nest deeper than 64, so it skips loads_json's depth
    walk (a Mooncake line has one bracket pair): the caps cost nothing on honest input.
    """
    if raw.count("[") + raw.count("{") <= MAX_JSON_DEPTH:
        return json.loads(raw)
    return loads_json(raw)


def _token(obj: dict[str, object], key: str, *, path: Path, line: int) -> int:
    value = obj[key]
    # bool is an int subclass in Python; a JSON true is never a token count.
    if isinstance(value, bool) or not isinstance(value, int):
        raise TraceFormatError(f"{key} {_shown(value)} is not an integer", path=str(path), line=line,
                               fix=_TOKEN_FIX)
    if value < 0:
        raise TraceFormatError(f"{key} {_shown(value)} is negative", path=str(path), line=line, fix=_TOKEN_FIX)
    if value > MAX_TOKENS:
        raise TraceFormatError(f"{key} {_shown(value)} is larger than {MAX_TOKENS:,}", path=str(path),
                               line=line, fix=_TOKEN_FIX)
    return value


def read_mooncake(path: Path) -> RequestTrace:
    """Load a Mooncake JSONL trace (plain or gzip)."""
    src = str(path)
    ts: list[float] = []
    tin: list[int] = []
    tout: list[int] = []
    with open_text(path) as fh:
        for lineno, raw in enumerate(fh, start=1):
            if not raw.strip():
                continue
            try:
                obj = parse_line(raw)
            except json.JSONDecodeError as exc:
                raise TraceFormatError(f"bad JSON: {exc.msg} (column {exc.colno})", path=src, line=lineno,
                                       fix=_FIX_SHAPE) from exc
            except UntrustedInput as exc:
                raise TraceFormatError(f"JSON refused: {exc}", path=src, line=lineno, fix=_FIX_SHAPE) from exc
            except (ValueError, RecursionError) as exc:
                # ValueError: an integer over Python's 4,300-digit limit. RecursionError: nesting
                # that loads_json's own guard reports past the interpreter's stack, kept as a backstop.
                raise TraceFormatError(f"bad JSON: {' '.join(str(exc).split())[:120]}", path=src, line=lineno,
                                       fix=_FIX_SHAPE) from exc
            if not isinstance(obj, dict):
                raise TraceFormatError(f"expected a JSON object, found {type(obj).__name__}",
                                       path=src, line=lineno, fix=_FIX_SHAPE)
            missing = [k for k in KEYS if k not in obj]
            if missing:
                found = ", ".join(_shown(k) for k in list(obj)[:8]) + (", ..." if len(obj) > 8 else "")
                raise TraceFormatError(
                    f"missing key(s) {', '.join(map(repr, missing))}; found keys "
                    f"{found}; expected {', '.join(map(repr, KEYS))}",
                    path=src, line=lineno, fix=_FIX_SHAPE)
            t = obj["timestamp"]
            if isinstance(t, bool) or not isinstance(t, (int, float)):
                raise TraceFormatError(f"timestamp {_shown(t)} is not a number", path=src, line=lineno,
                                       fix="timestamp must be milliseconds since the trace start")
            # Compare before converting: float() of an int past 1.8e308 raises OverflowError.
            if (isinstance(t, float) and not math.isfinite(t)) or not 0 <= t <= MAX_TIMESTAMP_MS:
                problem = ("not finite (NaN/inf)" if isinstance(t, float) and not math.isfinite(t)
                           else "negative" if t < 0 else f"larger than {MAX_TIMESTAMP_MS:,} ms")
                raise TraceFormatError(f"timestamp {_shown(t)} is {problem}", path=src, line=lineno,
                                       fix="timestamp must be finite, non-negative milliseconds since the trace start")
            ts.append(float(t))
            tin.append(_token(obj, "input_length", path=path, line=lineno))
            tout.append(_token(obj, "output_length", path=path, line=lineno))
    if not ts:
        raise TraceFormatError("file has no data rows", path=src, line=1,
                               fix="point at a Mooncake JSONL trace with at least one request")
    arrival = np.asarray(ts, dtype=np.float64) / 1000.0
    arrival, (a_in, a_out), notes = sort_by_time(
        arrival, np.asarray(tin, dtype=np.int64), np.asarray(tout, dtype=np.int64), source=src)
    return RequestTrace(name=trace_name(path), arrival_s=arrival, tokens_in=a_in, tokens_out=a_out,
                        source=src, start_epoch_s=None, notes=tuple(notes))
