"""An engine's own HTTP endpoints as the asleep tiers call them (vLLM's sleep mode, llama.cpp's idle sleep).

:class:`EngineHttp` speaks to one engine pod at ``http://POD_IP:PORT``, with the endpoints of vLLM's
``vllm/entrypoints/serve/dev/sleep/api_router.py`` (served with ``VLLM_SERVER_DEV_MODE=1`` and
``--enable-sleep-mode``; docs/tiers.md):

* :meth:`EngineHttp.sleep` — ``POST /sleep?level=1|2``; vLLM answers 200 with an empty body. Its
  default ``mode=abort`` aborts the requests in flight: the actuator calls it only after the pod's
  drain read zero in-flight requests.
* :meth:`EngineHttp.wake_up` — ``POST /wake_up`` (no ``tags``: weights and KV cache); 200 when done.
* :meth:`EngineHttp.is_sleeping` — ``GET /is_sleeping`` → ``{"is_sleeping": bool}``; anything else
  is an :class:`EngineCallError`, never read as awake.
* :meth:`EngineHttp.inflight` — ``GET /metrics``, the sum of the running and the waiting gauges
  (vLLM ``vllm:num_requests_running`` + ``vllm:num_requests_waiting``, every engine of the pod);
  **None whenever the page cannot be trusted** (not 200, over :data:`MAX_METRICS_BYTES`, a gauge
  absent, a value that is not a finite number ≥ 0): the caller then keeps draining until its budget
  runs out, never reads an unknown as idle.
* :meth:`EngineHttp.props_is_sleeping` — llama.cpp's ``GET /props`` → its ``"is_sleeping"`` field
  (served without waking the server); anything but a JSON object with a bool there is an
  :class:`EngineCallError`, never read as awake.
* :meth:`EngineHttp.tokenize` — llama.cpp's ``POST /tokenize``: a request that needs the model, so
  a server asleep reloads it first and answers once awake (``wait_until_no_sleep``).
* :meth:`EngineHttp.slots` — llama.cpp's ``GET /slots``: a slot-query task, which resets the
  server's idle timer (``--sleep-idle-seconds``); the answer is not read.

Every call is one request bounded by ``timeout_s`` (the whole exchange: a trickling answer is cut at
the deadline, at most one socket timeout late) and raises
:class:`EngineCallError` (one line, naming the URL) on a refused connection, a timeout or an
unexpected status. No redirects are followed. The parser here is deliberately small (actuators may
not import :mod:`ebb.sources`, where the full exposition reader lives): a sample line is
``NAME[{labels}] VALUE [TIMESTAMP]``; label values are skipped with their quoting, so a ``}`` or a
space inside a label value does not break a line.
"""

from __future__ import annotations

import json
import math
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Final

__all__ = ["MAX_METRICS_BYTES", "RUNNING_GAUGE", "WAITING_GAUGE", "EngineCallError", "EngineHttp", "gauge_sum"]

MAX_METRICS_BYTES: Final = 4 * 1024 * 1024
"""Largest ``/metrics`` page read (4 MiB; a full vLLM V1 page is about 60 KB)."""
RUNNING_GAUGE: Final = "vllm:num_requests_running"
WAITING_GAUGE: Final = "vllm:num_requests_waiting"


class EngineCallError(Exception):
    """An engine endpoint did not answer as its API says (one line: the URL and what happened)."""


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None


_OPENER = urllib.request.build_opener(_NoRedirect, urllib.request.ProxyHandler({}))


def _sample_value(line: str, name: str) -> float | None:
    """The value of ``line`` when it is a sample of ``name``; None for another metric; ValueError when
    it is a sample of ``name`` whose rest cannot be read."""
    if not line.startswith(name):
        return None
    rest = line[len(name):]
    if rest[:1] not in ("{", " ", "\t"):
        return None  # another metric sharing the prefix (vllm:num_requests_running_x)
    if rest.startswith("{"):
        i, quoted = 1, False
        while i < len(rest):
            c = rest[i]
            if quoted and c == "\\":
                i += 2
                continue
            if c == '"':
                quoted = not quoted
            elif c == "}" and not quoted:
                break
            i += 1
        else:
            raise ValueError("unterminated label set")
        rest = rest[i + 1:]
    parts = rest.split()
    if not parts:
        raise ValueError("no value")
    return float(parts[0])


def gauge_sum(text: str, name: str) -> float | None:
    """The sum of every sample of gauge ``name`` in exposition ``text``; None when there is none or any
    is not a finite number ≥ 0 (an unreadable gauge is unknown, never 0)."""
    total, seen = 0.0, False
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        try:
            v = _sample_value(line, name)
        except ValueError:
            return None
        if v is None:
            continue
        if not (math.isfinite(v) and v >= 0):
            return None
        total, seen = total + v, True
    return total if seen else None


@dataclass(frozen=True)
class EngineHttp:
    """One engine pod's HTTP API (module docstring)."""

    url: str
    """``http://POD_IP:PORT`` (no trailing slash)."""
    timeout_s: float = 5.0
    """Bound on each request (connect and read), s."""

    def _call(self, method: str, path: str, cap: int = 64 * 1024, timeout_s: float | None = None,
              body_json: object = None) -> bytes:
        data = json.dumps(body_json).encode() if body_json is not None else b"" if method == "POST" else None
        req = urllib.request.Request(self.url + path, method=method, data=data,
                                     headers={} if body_json is None else {"Content-Type": "application/json"})
        limit_s = self.timeout_s if timeout_s is None else timeout_s
        deadline = time.monotonic() + limit_s
        body = bytearray()
        try:
            with _OPENER.open(req, timeout=limit_s) as resp:
                if resp.status != 200:
                    raise EngineCallError(f"{method} {self.url}{path} answered HTTP {resp.status}")
                while chunk := resp.read1(64 * 1024):  # a trickle is cut at the deadline
                    body += chunk
                    if len(body) > cap:
                        break
                    if time.monotonic() > deadline:
                        raise EngineCallError(f"{method} {self.url}{path} took more than {limit_s:g} s")
        except urllib.error.HTTPError as exc:
            exc.close()  # it holds the answer's socket
            raise EngineCallError(f"{method} {self.url}{path} answered HTTP {exc.code}") from None
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise EngineCallError(f"{method} {self.url}{path} failed: {type(exc).__name__}: "
                                  f"{str(exc)[:200]}") from None
        if len(body) > cap:
            raise EngineCallError(f"{method} {self.url}{path} answered more than {cap:,} bytes")
        return bytes(body)

    def sleep(self, level: int = 1) -> None:
        """``POST /sleep?level=LEVEL`` (1: weights to host memory; 2: weights discarded)."""
        if level not in (1, 2):
            raise ValueError(f"sleep level must be 1 or 2, got {level!r}")
        self._call("POST", f"/sleep?level={level}")

    def wake_up(self, timeout_s: float | None = None) -> None:
        """``POST /wake_up`` (every tag); vLLM answers once the engine is awake, so ``timeout_s`` bounds
        the whole wake (default: the client's)."""
        self._call("POST", "/wake_up", timeout_s=timeout_s)

    def is_sleeping(self) -> bool:
        """``GET /is_sleeping``; EngineCallError for an answer that is not ``{"is_sleeping": bool}``."""
        return _bool_field(self._call("GET", "/is_sleeping"), "is_sleeping", f"GET {self.url}/is_sleeping")

    def props_is_sleeping(self) -> bool:
        """llama.cpp's ``GET /props`` ``"is_sleeping"``; EngineCallError when the answer has no bool there."""
        body = self._call("GET", "/props", cap=1024 * 1024)  # the chat template makes it a few KB
        return _bool_field(body, "is_sleeping", f"GET {self.url}/props")

    def tokenize(self, text: str, timeout_s: float | None = None) -> None:
        """llama.cpp's ``POST /tokenize`` of ``text``: answers once the model is loaded (a server asleep
        reloads it first), so ``timeout_s`` bounds the whole wake (default: the client's)."""
        self._call("POST", "/tokenize", timeout_s=timeout_s, body_json={"content": text})

    def slots(self) -> None:
        """llama.cpp's ``GET /slots`` (a task on the server's queue: it resets the idle timer)."""
        self._call("GET", "/slots", cap=1024 * 1024)

    def inflight(self) -> float | None:
        """Requests running + waiting on the engine now; None when its page cannot be trusted."""
        try:
            text = self._call("GET", "/metrics", cap=MAX_METRICS_BYTES).decode("utf-8", "replace")
        except EngineCallError:
            return None
        running, waiting = gauge_sum(text, RUNNING_GAUGE), gauge_sum(text, WAITING_GAUGE)
        return None if running is None or waiting is None else running + waiting


def _bool_field(body: bytes, key: str, call: str) -> bool:
    """``body``'s JSON object's bool ``key``; EngineCallError (naming ``call``) for anything else."""
    try:
        doc = json.loads(body)
    except ValueError:
        doc = None
    value = doc.get(key) if isinstance(doc, dict) else None
    if not isinstance(value, bool):
        raise EngineCallError(f"{call} answered {body[:80]!r}, not an object with {key!r}: bool")
    return value
