"""Bounded parsing of text Ebb did not write: JSON with a depth cap, integers with a range check.

Every reader of outside input (trace files, configs, agent pages, Prometheus answers, ledger rows)
goes through these, so a hostile input ends in one :class:`ValueError` subclass the caller turns
into its own :class:`~ebb.errors.InputError` naming the file and the fix — never a
``RecursionError``, ``OverflowError`` or an unbounded walk.

Guarantees (numbers are the defaults):

* :func:`loads_json` accepts at most :data:`MAX_JSON_DEPTH` (64) levels of nesting and
  :data:`MAX_JSON_BYTES` (64 MiB) of text; deeper or larger input raises :class:`UntrustedInput`
  before (size) or instead of (depth) building the value. The depth check walks the parsed value
  iteratively, so its cost is one visit per container, and it stops at the first too-deep one.
* :func:`checked_int` accepts integers in ``[lo, hi]`` (default the int64 range) and refuses
  bools, floats that are not whole and anything outside the range.

This module imports only the standard library and sits beside :mod:`ebb.errors`: every layer,
pure decision code included, may use it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any, Final

__all__ = ["MAX_JSON_BYTES", "MAX_JSON_DEPTH", "UntrustedInput", "checked_int", "json_depth_ok", "loads_json",
           "loads_json_input"]

MAX_JSON_DEPTH: Final = 64
"""Nesting levels allowed in one JSON document: the deepest honest one Ebb reads (a ledger row,
a Prometheus matrix) has 6."""
MAX_JSON_BYTES: Final = 64 * 1024 * 1024
"""Largest JSON text parsed in one piece (64 MiB): larger answers are refused, not read."""
INT64_MIN: Final = -(2**63)
INT64_MAX: Final = 2**63 - 1


class UntrustedInput(ValueError):
    """Input outside the bounds this module enforces; the message says which bound and the value."""


def json_depth_ok(value: Any, max_depth: int = MAX_JSON_DEPTH) -> bool:
    """True when ``value`` (a parsed JSON value) nests at most ``max_depth`` containers deep."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        v, depth = stack.pop()
        if isinstance(v, dict):
            children: Iterable[Any] = v.values()
        elif isinstance(v, list):
            children = v
        else:
            continue
        if depth > max_depth:
            return False
        stack.extend((c, depth + 1) for c in children if isinstance(c, (dict, list)))
    return True


def loads_json(text: str | bytes, *, max_depth: int = MAX_JSON_DEPTH,
               max_bytes: int = MAX_JSON_BYTES) -> Any:
    """``json.loads`` with a size and a depth cap; :class:`UntrustedInput` (a ValueError) past either.

    Other malformed JSON raises :class:`json.JSONDecodeError` (also a ValueError) as usual, so a
    caller's one ``except ValueError`` covers every way the text can be bad.
    """
    if len(text) > max_bytes:
        raise UntrustedInput(f"JSON text of {len(text):,} bytes is larger than the {max_bytes:,}-byte limit")
    try:
        value = json.loads(text)
    except RecursionError as exc:  # the C scanner's own guard: nesting far past any cap
        raise UntrustedInput(f"JSON nested deeper than {max_depth} levels") from exc
    except UnicodeDecodeError as exc:
        raise UntrustedInput(f"JSON text is not UTF-8: {exc}") from exc
    if not json_depth_ok(value, max_depth):
        raise UntrustedInput(f"JSON nested deeper than {max_depth} levels")
    return value


def loads_json_input(text: str | bytes, *, what: str, path: str, fix: str, max_bytes: int = MAX_JSON_BYTES) -> Any:
    """:func:`loads_json`, with every way the text can be bad as one :class:`~ebb.errors.InputError`
    naming ``path`` (``"<what> refused: …"`` past a cap, ``"<what> is not JSON: …"`` otherwise)."""
    from ebb.errors import InputError  # errors imports nothing of Ebb's: no cycle

    try:
        return loads_json(text, max_bytes=max_bytes)
    except UntrustedInput as exc:
        raise InputError(f"{what} refused: {exc}", path=path, fix=fix) from exc
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError
        raise InputError(f"{what} is not JSON: {str(exc)[:200]}", path=path, fix=fix) from exc


def checked_int(value: Any, what: str, *, lo: int = INT64_MIN, hi: int = INT64_MAX) -> int:
    """``value`` as an int in ``[lo, hi]``; :class:`UntrustedInput` naming ``what`` otherwise.

    Accepts ints and whole floats (``63.0``); refuses bools, NaN, infinities, fractions and
    strings — a caller that reads text converts it first.
    """
    if isinstance(value, bool):
        raise UntrustedInput(f"{what} must be an integer, got {value!r}")
    if isinstance(value, float):
        if not value.is_integer():  # NaN and ±inf are not integers either
            raise UntrustedInput(f"{what} must be an integer, got {value!r}")
        value = int(value)
    if not isinstance(value, int):
        raise UntrustedInput(f"{what} must be an integer, got {type(value).__name__} {value!r:.40}")
    if not lo <= value <= hi:
        digits = str(value) if value.bit_length() < 200 else f"a {value.bit_length()}-bit integer"
        raise UntrustedInput(f"{what} = {digits} is outside [{lo}, {hi}]")
    return value
