"""An in-process HTTP engine with vLLM's sleep mode, for the asleep tier's tests (no GPU, no model).

:class:`SleepyEngine` serves, on ``host:port`` (``127.0.0.N`` lets many "pods" share one port, as the
pods of one Deployment share their container port), what the Kubernetes actuator and the agent call:

=======  ==========================  ==============================================================
verb     path                        answer (vLLM source)
=======  ==========================  ==============================================================
POST     ``/sleep?level=1|2``        200, empty body; ``level`` other than an integer → 500 (vLLM's
                                     ``int(level)`` raises). Default ``mode=abort``: requests in
                                     flight are aborted (answer 500, counted in :attr:`aborted`).
POST     ``/wake_up[?tags=T...]``    200 once awake, after ``wake_s``; ``tags`` repeated
                                     (``weights``, ``kv_cache``): only those come back, and the
                                     engine stays sleeping until both are (a partial wake).
GET      ``/is_sleeping``            ``{"is_sleeping": bool}``
GET      ``/metrics``                ``vllm:num_requests_running``, ``vllm:num_requests_waiting``,
                                     ``vllm:kv_cache_usage_perc``, ``vllm:request_prefill_time_seconds_sum``
                                     and ``vllm:engine_sleep_state{sleep_state="awake"|"weights_offloaded"|
                                     "discard_all"}`` (1 on the active state; all 0 in a partial wake)
GET      ``/health``                 200, asleep or not (vLLM's health does not say it sleeps)
POST     ``/v1/completions``         200 JSON after ``service_s``; while sleeping 503 ("the model is
                                     sleeping", vLLM's protected endpoints), counted in :attr:`refused`
=======  ==========================  ==============================================================

Sources: the sleep endpoints are vLLM's ``vllm/entrypoints/serve/dev/sleep/api_router.py`` (vLLM
main at e7a47b82, 2025-12; the same routes since v0.8 under ``VLLM_SERVER_DEV_MODE=1``); the gauge
is ``vllm/v1/metrics/loggers.py`` ``record_sleep_state`` (v0.20.1, 132765e3, lines 1218-1235; PR
#24176); the 503 of a completion while asleep is vLLM's ``docs/source/features/sleep_mode.md``
("Protected Endpoints"). Knobs for faults: ``fail_wake`` (``/wake_up`` answers 500 and the engine
stays asleep), ``wake_s`` (a slow wake), ``service_s`` (how long each completion runs).
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

__all__ = ["SleepyEngine"]

_TAGS = ("weights", "kv_cache")


class SleepyEngine:
    """One fake vLLM pod (module docstring). Context manager; :attr:`url` once started."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0, *, service_s: float = 0.2, wake_s: float = 0.0,
                 model: str = "m") -> None:
        self.host, self.port, self.model = host, port, model
        self.service_s, self.wake_s = service_s, wake_s
        self.fail_wake = False
        self._lock = threading.Lock()
        self._level = 0
        """0 awake; 1 weights offloaded; 2 discarded."""
        self._back: set[str] = set(_TAGS)
        self._epoch = 0
        """Bumped by every sleep: a request started before it is aborted."""
        self.running = 0
        self.served = 0
        self.refused = 0
        self.aborted = 0
        self.sleeps: list[int] = []
        """The level of every ``/sleep`` call, in order."""
        self.wakes = 0
        self.busy_s = 0.0
        self._server: ThreadingHTTPServer | None = None
        self.url = ""

    # -- state -------------------------------------------------------------------------------------
    @property
    def sleeping(self) -> bool:
        with self._lock:
            return self._level != 0 or self._back != set(_TAGS)

    def metrics_text(self) -> str:
        with self._lock:
            awake = int(self._level == 0 and self._back == set(_TAGS))
            lv = self._level
            running, busy = self.running, self.busy_s
        labels = f'engine="0",model_name="{self.model}"'
        states = {"awake": awake, "weights_offloaded": int(lv == 1), "discard_all": int(lv == 2)}
        return ("# TYPE vllm:num_requests_running gauge\n"
                f"vllm:num_requests_running{{{labels}}} {float(running)}\n"
                f"vllm:num_requests_waiting{{{labels}}} 0.0\n"
                f"vllm:kv_cache_usage_perc{{{labels}}} {0.0 if lv else min(1.0, running / 8):.3f}\n"
                f"vllm:request_prefill_time_seconds_sum{{{labels}}} {busy:.6f}\n"
                "# TYPE vllm:engine_sleep_state gauge\n"
                + "".join(f'vllm:engine_sleep_state{{{labels},sleep_state="{s}"}} {float(v)}\n'
                          for s, v in states.items()))

    # -- handlers ----------------------------------------------------------------------------------
    def _sleep(self, query: dict[str, list[str]]) -> tuple[int, bytes, str]:
        try:
            level = int(query.get("level", ["1"])[0])
        except ValueError:
            return 500, b"Internal Server Error", "text/plain"
        with self._lock:
            self._level = level if level in (1, 2) else 1
            self._back = set()
            self._epoch += 1
            self.sleeps.append(level)
        return 200, b"", "text/plain"

    def _wake(self, query: dict[str, list[str]]) -> tuple[int, bytes, str]:
        tags = query.get("tags") or list(_TAGS)
        time.sleep(self.wake_s)
        if self.fail_wake:
            return 500, b"Internal Server Error", "text/plain"
        with self._lock:
            self._back |= {t for t in tags if t in _TAGS}
            if self._back == set(_TAGS):
                self._level = 0
                self.wakes += 1
        return 200, b"", "text/plain"

    def _complete(self) -> tuple[int, bytes, str]:
        with self._lock:
            if self._level != 0 or self._back != set(_TAGS):
                self.refused += 1
                return 503, json.dumps({"error": {"message": "the model is sleeping", "code": 503}}).encode(), \
                    "application/json"
            epoch = self._epoch
            self.running += 1
        time.sleep(self.service_s)
        with self._lock:
            self.running -= 1
            self.busy_s += self.service_s
            if epoch != self._epoch:
                self.aborted += 1
                return 500, json.dumps({"error": {"message": "request aborted: engine put to sleep"}}).encode(), \
                    "application/json"
            self.served += 1
        return 200, json.dumps({"object": "text_completion", "model": self.model,
                                "choices": [{"index": 0, "text": "ok", "finish_reason": "stop"}]}).encode(), \
            "application/json"

    def _route(self, method: str, raw_path: str) -> tuple[int, bytes, str]:
        parts = urlsplit(raw_path)
        query = parse_qs(parts.query)
        if method == "POST" and parts.path == "/sleep":
            return self._sleep(query)
        if method == "POST" and parts.path == "/wake_up":
            return self._wake(query)
        if method == "GET" and parts.path == "/is_sleeping":
            return 200, json.dumps({"is_sleeping": self.sleeping}).encode(), "application/json"
        if method == "GET" and parts.path == "/metrics":
            return 200, self.metrics_text().encode(), "text/plain; version=0.0.4"
        if method == "GET" and parts.path == "/health":
            return 200, b"", "text/plain"
        if method == "POST" and parts.path == "/v1/completions":
            return self._complete()
        return 404, b'{"detail":"Not Found"}', "application/json"

    # -- lifecycle ---------------------------------------------------------------------------------
    def start(self) -> SleepyEngine:
        engine = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _answer(self, method: str) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                if n:
                    self.rfile.read(n)
                code, body, ctype = engine._route(method, self.path)
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                self._answer("GET")

            def do_POST(self) -> None:  # noqa: N802
                self._answer("POST")

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer((self.host, self.port), Handler)
        self._server.daemon_threads = True
        self.port = int(self._server.server_address[1])
        self.url = f"http://{self.host}:{self.port}"
        threading.Thread(target=self._server.serve_forever, args=(0.05,), name=f"sleepy-{self.port}",
                         daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> SleepyEngine:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
