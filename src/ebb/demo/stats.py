"""Wire helpers shared by the worker and the router: the completion ring behind ``GET /stats`` and
the validation of ``POST /v1/generate`` bodies.

Guarantees:

* :class:`CompletionRing` numbers completions 1, 2, 3, … (``seq``, never reused in a process) and
  keeps the newest 10,000; a reader whose cursor fell further behind is told how many it missed
  (``dropped``) instead of silently receiving a gap.
* :func:`parse_generate` accepts exactly ``{"input_tokens": int ≥ 1, "output_tokens": int ≥ 1}``
  (extra keys ignored; booleans and floats refused) of at most :data:`MAX_BODY_BYTES` (1 MiB) and
  64 levels of nesting (:func:`ebb.untrusted.loads_json`), and raises :class:`BadRequest` with a
  message naming the field and the fix otherwise — whatever the bytes (fuzz-tested), nothing else.
* :func:`parse_since` accepts a decimal integer in [0, 2^63-1] and raises :class:`BadRequest`
  otherwise.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from ebb.model.live import STATS_VERSION
from ebb.untrusted import INT64_MAX, UntrustedInput, loads_json

__all__ = ["MAX_BODY_BYTES", "RING_SIZE", "BadRequest", "CompletionRing", "GenerateRequest", "parse_generate",
           "parse_since", "stats_envelope"]

MAX_BODY_BYTES: Final = 1024 * 1024
"""Largest request body the router and workers read (1 MiB, aiohttp's default made explicit; a
``/v1/generate`` body is ~50 bytes, so this only bounds memory per request).
The servers refuse larger ones with 413 before reading them (aiohttp's ``client_max_size``)."""

RING_SIZE: Final = 10_000
"""Completions kept for ``/stats`` readers (≈ 100 s at 100 requests/s)."""

MAX_TOKENS: Final = 1_000_000
"""Upper bound on either token count: larger values are a client bug, not a workload."""


class BadRequest(ValueError):
    """A request body or query parameter is malformed; the message is sent back with a 400."""


@dataclass(frozen=True)
class GenerateRequest:
    """A validated ``/v1/generate`` body."""

    input_tokens: int
    output_tokens: int


def parse_generate(raw: bytes) -> GenerateRequest:
    """Validate a ``/v1/generate`` body; :class:`BadRequest` names the offending field."""
    try:
        body = loads_json(raw, max_bytes=MAX_BODY_BYTES)
    except UntrustedInput as exc:
        raise BadRequest(f'body refused: {exc}; send {{"input_tokens": 512, "output_tokens": 128}}') from exc
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, an integer past 4,300 digits
        raise BadRequest('body is not JSON; send {"input_tokens": 512, "output_tokens": 128}') from exc
    if not isinstance(body, dict):
        raise BadRequest(f"body must be a JSON object, got {type(body).__name__}; "
                         'send {"input_tokens": 512, "output_tokens": 128}')
    values: list[int] = []
    for key in ("input_tokens", "output_tokens"):
        v = body.get(key)
        # bool is an int subclass; "true tokens" is always a client bug.
        if not isinstance(v, int) or isinstance(v, bool) or not 1 <= v <= MAX_TOKENS:
            raise BadRequest(f"{key} must be an integer in [1, {MAX_TOKENS}], got {v!r:.80}")
        values.append(v)
    return GenerateRequest(values[0], values[1])


def parse_since(query: Mapping[str, str]) -> int:
    """The ``since`` cursor of ``/stats`` (default 0: everything still in the ring)."""
    raw = query.get("since", "0")
    if not (raw.isascii() and raw.isdigit() and len(raw) <= 19 and int(raw) <= INT64_MAX):
        raise BadRequest(f"since must be an integer in [0, 2^63-1] (the last seq you saw), got {raw[:40]!r}")
    return int(raw)


class CompletionRing:
    """The newest :data:`RING_SIZE` completions as ``[seq, t_s, ttft_ms, e2e_ms]`` rows.

    Not thread-safe: each server touches it from its own event loop only.
    """

    def __init__(self, size: int = RING_SIZE) -> None:
        self._rows: deque[list[float]] = deque(maxlen=size)
        self.seq = 0
        """Seq of the newest completion (0: none yet)."""

    def add(self, ttft_ms: float, e2e_ms: float, t_s: float | None = None) -> int:
        self.seq += 1
        self._rows.append([self.seq, time.time() if t_s is None else t_s, ttft_ms, e2e_ms])
        return self.seq

    def since(self, seq: int) -> tuple[list[list[float]], int]:
        """Rows with seq > ``seq`` and how many such rows already fell out of the ring."""
        if not self._rows or seq >= self.seq:
            return [], 0
        oldest = int(self._rows[0][0])
        dropped = max(0, oldest - 1 - seq)
        skip = max(0, seq - oldest + 1)
        rows = list(self._rows)[skip:]
        return rows, dropped


def stats_envelope(kind: str, name: str, ring: CompletionRing, since: int, **fields: Any) -> dict[str, Any]:
    """The versioned ``/stats`` JSON common to every component; ``fields`` adds the gauges."""
    rows, dropped = ring.since(since)
    out: dict[str, Any] = {"version": STATS_VERSION, "kind": kind, "name": name, "now_s": time.time(),
                           "seq": ring.seq, **fields, "completions": rows}
    if dropped:
        out["dropped"] = dropped
    return out
