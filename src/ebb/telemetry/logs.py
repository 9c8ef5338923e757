"""Structured logs: one JSON object per line, carrying the trace id of the current cycle.

A JSON line (``configure_logging(json=True)``)::

    {"ts": "2025-01-02T03:04:05.678Z", "level": "INFO", "logger": "ebb.live", "msg": "scaled down",
     "trace_id": "4bf92f3577b34da6a3ce929d0e0e4736", "span_id": "00f067aa0ba902b7", "replicas_to": 3}

Guarantees:

* ``ts`` is RFC 3339 in UTC with millisecond precision; ``trace_id`` (32 hex) and ``span_id``
  (16 hex) are present exactly when a recording span is current in the logging thread (inside a
  cycle with an SDK configured), absent otherwise. Fields passed with ``extra=`` follow; an
  exception adds ``error.type`` and ``exc`` (the formatted traceback).
* Formatting never raises: values JSON cannot encode (objects, non-finite floats, non-string keys,
  cycles) are written as their ``repr``.
* :func:`configure_logging` is idempotent: it installs one handler on the root logger and, when
  called again, reconfigures that handler instead of adding a second one.
"""

from __future__ import annotations

import json as jsonlib
import logging
import math
import sys
from datetime import UTC, datetime
from typing import IO, Final

from opentelemetry import trace

__all__ = ["HumanFormatter", "JsonFormatter", "configure_logging", "trace_fields"]

# Attributes every LogRecord has; anything else on a record came from ``extra=``.
_RESERVED: Final = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message", "asctime", "taskName",
}
_HANDLER_MARK: Final = "_ebb_telemetry_handler"


def trace_fields() -> dict[str, str]:
    """``trace_id``/``span_id`` of the current span when it is recording, else an empty dict."""
    span = trace.get_current_span()
    ctx = span.get_span_context()
    if not (ctx.is_valid and span.is_recording()):
        return {}
    return {"trace_id": trace.format_trace_id(ctx.trace_id),
            "span_id": trace.format_span_id(ctx.span_id)}


def _rfc3339(created_s: float) -> str:
    stamp = datetime.fromtimestamp(created_s, tz=UTC).isoformat(timespec="milliseconds")
    return stamp.replace("+00:00", "Z")


def _jsonable(value: object, depth: int = 0) -> object:
    """A value ``json.dumps`` accepts and that round-trips as valid JSON (no NaN), else its repr."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if depth < 8 and isinstance(value, dict):
        return {k if isinstance(k, str) else repr(k): _jsonable(v, depth + 1) for k, v in value.items()}
    if depth < 8 and isinstance(value, (list, tuple)):
        return [_jsonable(v, depth + 1) for v in value]
    return repr(value)


class JsonFormatter(logging.Formatter):
    """One JSON object per record; see the module docstring for the fields."""

    def format(self, record: logging.LogRecord) -> str:
        try:
            return self._format(record)
        except Exception as exc:  # a log line must never take the caller down
            return jsonlib.dumps({"ts": _rfc3339(record.created), "level": record.levelname,
                                  "logger": record.name, "msg": repr(record.msg),
                                  "format_error": repr(exc)})

    def _format(self, record: logging.LogRecord) -> str:
        try:
            message = record.getMessage()
        except Exception as exc:  # bad %-args: keep the template and say why
            message = f"{record.msg!r} (unformattable args {record.args!r}: {exc})"
        out: dict[str, object] = {"ts": _rfc3339(record.created), "level": record.levelname,
                                  "logger": record.name, "msg": message}
        out.update(trace_fields())
        for key, value in vars(record).items():
            if key not in _RESERVED and not key.startswith("_"):
                out[key] = _jsonable(value)
        if record.exc_info and record.exc_info[0] is not None:
            out["error.type"] = record.exc_info[0].__qualname__
            out["exc"] = self.formatException(record.exc_info)
        return jsonlib.dumps(out, allow_nan=False)


class HumanFormatter(logging.Formatter):
    """``2025-01-02T03:04:05.678Z INFO ebb.live: message trace=<id>`` (trace only inside a span)."""

    def __init__(self) -> None:
        super().__init__("%(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        try:
            line = f"{_rfc3339(record.created)} {super().format(record)}"
        except Exception as exc:
            line = f"{_rfc3339(record.created)} {record.levelname} {record.name}: {record.msg!r} ({exc})"
        trace_id = trace_fields().get("trace_id")
        return line if trace_id is None else f"{line} trace={trace_id}"


def configure_logging(level: str | int = "INFO", json: bool = True,
                      stream: IO[str] | None = None) -> logging.Handler:
    """Send the root logger to ``stream`` (default stderr) as JSON lines or human text; idempotent.

    Returns the one handler Ebb owns; a second call updates its level, format and stream.
    """
    root = logging.getLogger()
    handler = next((h for h in root.handlers if getattr(h, _HANDLER_MARK, False)), None)
    target = stream if stream is not None else sys.stderr
    if isinstance(handler, logging.StreamHandler):
        # Not setStream(): it flushes the old stream, which may be closed by now (a finished CLI
        # run's captured stderr) — reconfiguring must never raise.
        handler.acquire()
        try:
            handler.stream = target
        finally:
            handler.release()
    else:
        handler = logging.StreamHandler(target)
        setattr(handler, _HANDLER_MARK, True)
        root.addHandler(handler)
    handler.setFormatter(JsonFormatter() if json else HumanFormatter())
    root.setLevel(level.upper() if isinstance(level, str) else level)
    return handler
