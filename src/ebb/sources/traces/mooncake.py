"""Reader for Mooncake (FAST'25) JSONL traces: ``{"timestamp": ms, "input_length": n, "output_length": m, ...}``.

Format (kvcache-ai/Mooncake ``FAST25-release/traces/*.jsonl``): one JSON object per line;
``timestamp`` is milliseconds relative to the trace start, ``input_length`` / ``output_length``
are token counts. Other keys (``hash_ids``) are ignored. Blank lines are skipped.

Guarantees:

* ``arrival_s = timestamp / 1000`` unchanged (the file is already relative, so it is not
  re-based); ``start_epoch_s`` is ``None`` because the file carries no wall-clock time.
* Timestamps must be finite and >= 0 (int or float); token counts must be JSON integers >= 0
  (``3.0`` and ``true`` are rejected, since a float token count means the file is not what we think).
* Any malformed line raises :class:`~ebb.errors.TraceFormatError` naming file, 1-based line and fix;
  unsorted input is stable-sorted with a note.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from ebb.errors import TraceFormatError
from ebb.model.trace import RequestTrace
from ebb.sources.traces._common import open_text, sort_by_time, trace_name

KEYS = ("timestamp", "input_length", "output_length")
_FIX_SHAPE = ('each line must be a JSON object like {"timestamp": 0, "input_length": 512, '
              '"output_length": 64} (timestamp in ms)')


def _token(obj: dict[str, object], key: str, *, path: Path, line: int) -> int:
    value = obj[key]
    # bool is an int subclass in Python; a JSON true is never a token count.
    if isinstance(value, bool) or not isinstance(value, int):
        raise TraceFormatError(f"{key} {value!r} is not an integer", path=str(path), line=line,
                               fix="token counts must be non-negative JSON integers")
    if value < 0:
        raise TraceFormatError(f"{key} {value!r} is negative", path=str(path), line=line,
                               fix="token counts must be non-negative JSON integers")
    return value


def read_mooncake(path: Path) -> RequestTrace:
    """Load a Mooncake JSONL trace (plain or gzip)."""
    src = str(path)
    ts: list[float] = []
    tin: list[int] = []
    tout: list[int] = []
    decode = json.loads
    with open_text(path) as fh:
        for lineno, raw in enumerate(fh, start=1):
            if not raw.strip():
                continue
            try:
                obj = decode(raw)
            except json.JSONDecodeError as exc:
                raise TraceFormatError(f"bad JSON: {exc.msg} (column {exc.colno})", path=src, line=lineno,
                                       fix=_FIX_SHAPE) from exc
            if not isinstance(obj, dict):
                raise TraceFormatError(f"expected a JSON object, found {type(obj).__name__}",
                                       path=src, line=lineno, fix=_FIX_SHAPE)
            missing = [k for k in KEYS if k not in obj]
            if missing:
                raise TraceFormatError(
                    f"missing key(s) {', '.join(map(repr, missing))}; found keys "
                    f"{', '.join(map(repr, obj))}; expected {', '.join(map(repr, KEYS))}",
                    path=src, line=lineno, fix=_FIX_SHAPE)
            t = obj["timestamp"]
            if isinstance(t, bool) or not isinstance(t, (int, float)):
                raise TraceFormatError(f"timestamp {t!r} is not a number", path=src, line=lineno,
                                       fix="timestamp must be milliseconds since the trace start")
            if not math.isfinite(t) or t < 0:
                problem = "not finite (NaN/inf)" if not math.isfinite(t) else "negative"
                raise TraceFormatError(f"timestamp {t!r} is {problem}", path=src, line=lineno,
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
