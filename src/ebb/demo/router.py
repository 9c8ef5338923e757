"""A least-loaded router with a FIFO queue in front of the workers, on its own event loop thread.

``Router(host, port, queue_timeout_s).start()`` serves ``POST /v1/generate`` (proxy),
``GET /stats?since=SEQ`` (``kind: router``), ``GET /metrics`` and ``GET /workers``; the actuator
calls the thread-safe :meth:`Router.add_worker`, :meth:`Router.drain` and :meth:`Router.workers`.

Guarantees:

* **Least loaded.** A request goes to the non-draining worker with the lowest
  ``inflight / max_batch`` (ties: the one added first) that has a free slot; when none has (or there
  is no worker) it waits in one FIFO queue and is dispatched as soon as a slot frees or a worker is
  added. Waiting longer than ``queue_timeout_s`` (default 120 s) answers 503.
* **A drain never fails a request.** :meth:`drain` stops routing to the worker at once; its future
  resolves when the worker's in-flight count reaches 0 and it has been removed.
* **One retry.** A worker error (connection failure, timeout, non-200 other than 400) is retried
  once on another worker; a worker that refused a connection is skipped for 1 s.
* Client-side latency: ``router_queue_ms`` = arrival at the router → dispatch to the worker that
  answered; TTFT = ``router_queue_ms`` + the worker's ``ttft_ms``; e2e = arrival → answer. Both
  feed ``/stats`` completions and the :data:`~ebb.model.live.ROUTER_TTFT` / ``ROUTER_E2E``
  histograms. ``/stats`` ``ready`` means "at least one routable worker"; ``prefill_busy_s_total``
  is always 0 (the router does not prefill).
* **Two worker APIs.** ``add_worker(..., api="ebb")`` workers get ``POST /v1/generate`` with the
  token counts. ``api="llamacpp"`` workers (real ``llama-server``) get ``POST /completion`` with
  ``{"prompt": [PROMPT_TOKEN_ID] * input_tokens, "n_predict": output_tokens, "ignore_eos": true,
  "cache_prompt": false, "temperature": 0}`` — exactly ``input_tokens`` prompt tokens (a list of
  token ids is not re-tokenized), exactly ``output_tokens`` generated, no prefix cache reuse. Their
  ``ttft_ms`` = ``timings.prompt_ms`` (slot start → the last prompt batch, whose logits give the
  first token) + one ``timings.predicted_per_token_ms`` (conservative by at most one decode step);
  the router answers ``{"ttft_ms", "e2e_ms" (prompt_ms + predicted_ms), "input_tokens",
  "output_tokens"}`` (llama.cpp's counts), not the generated text. An answer without numeric
  timings, or with counts other than the ones asked, is a malformed answer.
* **Hostile input is a 4xx, never a 500.** A ``/v1/generate`` body over 1 MiB gets 413 unread; a
  body that is not the documented JSON — nested past 64 levels, huge numbers, wrong types — gets
  400 naming the problem (:func:`~ebb.demo.stats.parse_generate`). A worker's answer is read up to
  1 MiB and parsed with the same caps; a malformed one counts as a worker error (retried once).
"""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

import aiohttp
from aiohttp import web
from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from ebb.agent.serving import close_runner, quiet_client_errors
from ebb.demo.stats import MAX_BODY_BYTES, BadRequest, CompletionRing, parse_generate, parse_since, stats_envelope
from ebb.model import live as names
from ebb.untrusted import loads_json

__all__ = ["Router"]

T = TypeVar("T")
COOLDOWN_S: Final = 1.0
"""How long a worker that refused a connection is skipped."""
MAX_TTFT_MS: Final = 1e9
"""Largest ``ttft_ms`` taken from a worker's answer (11.6 days); more is a malformed answer."""
PROMPT_TOKEN_ID: Final = 1000
"""The token id llama.cpp prompts are made of (any id of the served vocabulary works; 1000 is a plain
piece of the 32,000-token llama SPM vocabulary)."""
APIS: Final = ("ebb", "llamacpp")


async def _read_capped(resp: aiohttp.ClientResponse, cap: int) -> bytes:
    """A worker's whole answer, at most ``cap`` bytes (ValueError past it: a malformed answer)."""
    buf = bytearray()
    async for chunk in resp.content.iter_chunked(64 * 1024):
        buf += chunk
        if len(buf) > cap:
            raise ValueError(f"answer larger than {cap:,} bytes")
    return bytes(buf)


def _number(v: Any) -> float | None:
    """``v`` as a finite float in [0, MAX_TTFT_MS], else None (bools are not numbers here)."""
    if isinstance(v, int | float) and not isinstance(v, bool) and 0 <= v <= MAX_TTFT_MS:
        return float(v)
    return None


def _llamacpp_answer(answer: Any, payload: dict[str, int]) -> Any:
    """llama.cpp's ``/completion`` answer as the router's ``{ttft_ms, e2e_ms, input_tokens,
    output_tokens}``; None when the timings are missing or the counts differ from the request."""
    timings = answer.get("timings") if isinstance(answer, dict) else None
    if not isinstance(timings, dict):
        return None
    prompt_ms, per_token_ms, predicted_ms = (_number(timings.get(k)) for k in
                                             ("prompt_ms", "predicted_per_token_ms", "predicted_ms"))
    n_in, n_out = answer.get("tokens_evaluated"), answer.get("tokens_predicted")
    if prompt_ms is None or per_token_ms is None or predicted_ms is None or \
            type(n_in) is not int or type(n_out) is not int or \
            n_in != payload["input_tokens"] or n_out != payload["output_tokens"]:
        return None
    return {"ttft_ms": prompt_ms + per_token_ms, "e2e_ms": prompt_ms + predicted_ms, "input_tokens": n_in,
            "output_tokens": n_out}


class _QueueTimeout(Exception):
    pass


class _Closing(Exception):
    pass


@dataclass(eq=False)
class _Worker:
    name: str
    url: str
    max_batch: int
    order: int
    api: str = "ebb"
    inflight: int = 0
    draining: bool = False
    skip_until: float = 0.0
    drained: list[cf.Future[None]] = field(default_factory=list)

    def view(self) -> dict[str, Any]:
        return {"name": self.name, "url": self.url, "max_batch": self.max_batch, "inflight": self.inflight,
                "draining": self.draining, "api": self.api}


@dataclass(eq=False)
class _Waiter:
    fut: asyncio.Future[_Worker]
    exclude: str | None


class Router:
    """Least-loaded HTTP router. See the module docstring for guarantees."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0, queue_timeout_s: float = 120.0, *,
                 name: str = "router", request_timeout_s: float = 600.0) -> None:
        if queue_timeout_s <= 0 or request_timeout_s <= 0:
            raise ValueError(f"timeouts must be > 0, got queue_timeout_s={queue_timeout_s!r}, "
                             f"request_timeout_s={request_timeout_s!r}")
        self.host, self.port, self.name = host, port, name
        self.queue_timeout_s = queue_timeout_s
        self._request_timeout_s = request_timeout_s
        self._workers: dict[str, _Worker] = {}
        self._added = 0
        self._queue: deque[_Waiter] = deque()
        self._ring = CompletionRing()
        self._ok = 0
        self._failed = 0
        self._closing = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self._listener: socket.socket | None = None
        self._session: aiohttp.ClientSession | None = None
        self.url = ""
        self.registry = CollectorRegistry()
        self.registry.register(self)
        self._ttft = Histogram(names.ROUTER_TTFT, "Client-side time to first token (s)",
                               buckets=names.LATENCY_BUCKETS_S, registry=self.registry)
        self._e2e = Histogram(names.ROUTER_E2E, "End-to-end latency through the router (s)",
                              buckets=names.LATENCY_BUCKETS_S, registry=self.registry)

    # ---- lifecycle -------------------------------------------------------------------------------

    def start(self) -> str:
        """Start the server thread; returns ``http://HOST:PORT``. Raises what binding raised."""
        if self._thread is not None:
            raise RuntimeError(f"router {self.name} already started at {self.url}")
        ready: cf.Future[str] = cf.Future()
        self._thread = threading.Thread(target=self._run, args=(ready,), name=f"ebb-{self.name}", daemon=True)
        self._thread.start()
        self.url = ready.result(timeout=30.0)
        return self.url

    def stop(self) -> None:
        """Fail queued requests with 503, close the server and client session, join the thread."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None or not thread.is_alive():
            return
        asyncio.run_coroutine_threadsafe(self._teardown(), loop).result(timeout=30.0)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=30.0)

    def __enter__(self) -> Router:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self, ready: cf.Future[str]) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            ready.set_result(loop.run_until_complete(self._setup()))
        except BaseException as exc:  # the caller of start() re-raises it
            ready.set_exception(exc)
            loop.close()
            return
        try:
            loop.run_forever()
        finally:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    async def _setup(self) -> str:
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0),
            timeout=aiohttp.ClientTimeout(total=self._request_timeout_s, sock_connect=10.0))
        app = web.Application(client_max_size=MAX_BODY_BYTES)
        app.add_routes([web.post("/v1/generate", self._generate), web.get("/stats", self._stats),
                        web.get("/metrics", self._metrics), web.get("/workers", self._workers_view)])
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=5.0,
                                     logger=quiet_client_errors("ebb.demo.router.http"))
        await self._runner.setup()
        # our own listening socket, so that teardown can stop accepting before it closes (close_runner)
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        self._listener = socket.create_server((self.host, self.port), family=family, backlog=128)
        await web.SockSite(self._runner, self._listener).start()
        port = self._listener.getsockname()[1]
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{port}"

    async def _teardown(self) -> None:
        self._closing = True
        while self._queue:
            self._queue.popleft().fut.set_exception(_Closing())
        if self._runner is not None:
            await close_runner(self._runner, [self._listener.fileno()] if self._listener else [])
        if self._session is not None:
            await self._session.close()
        for w in self._workers.values():
            for f in w.drained:
                if not f.done():
                    f.set_exception(RuntimeError(f"router {self.name} stopped before {w.name} drained"))

    # ---- thread-safe API for the actuator --------------------------------------------------------

    def _call(self, fn: Callable[[], T]) -> T:
        loop, thread = self._loop, self._thread
        if loop is None or thread is None or not thread.is_alive():
            raise RuntimeError(f"router {self.name} is not running; call start() first")
        if threading.get_ident() == thread.ident:
            return fn()
        out: cf.Future[T] = cf.Future()

        def run() -> None:
            try:
                out.set_result(fn())
            except Exception as exc:
                out.set_exception(exc)

        loop.call_soon_threadsafe(run)
        return out.result(timeout=30.0)

    def add_worker(self, name: str, url: str, max_batch: int, api: str = "ebb") -> None:
        """Make a ready worker routable (at once: queued requests may be dispatched to it). ``api``:
        ``"ebb"`` (an :mod:`ebb.demo.worker`) or ``"llamacpp"`` (a ``llama-server``)."""
        if max_batch < 1:
            raise ValueError(f"max_batch must be ≥ 1, got {max_batch!r} for worker {name!r}")
        if api not in APIS:
            raise ValueError(f"api must be one of {', '.join(APIS)}, got {api!r} for worker {name!r}")

        def add() -> None:
            if name in self._workers:
                raise ValueError(f"worker {name!r} is already known to router {self.name}; use a new name")
            self._added += 1
            self._workers[name] = _Worker(name, url.rstrip("/"), max_batch, self._added, api)
            self._pump()

        self._call(add)

    def drain(self, name: str) -> cf.Future[None]:
        """Stop routing to ``name`` now; the future resolves once it is idle and removed (at once
        for an unknown name)."""
        done: cf.Future[None] = cf.Future()

        def mark() -> None:
            w = self._workers.get(name)
            if w is None:
                done.set_result(None)
                return
            w.draining = True
            w.drained.append(done)
            self._check_drained(w)

        self._call(mark)
        return done

    def workers(self) -> list[dict[str, Any]]:
        """Snapshot of the workers: name, url, max_batch, inflight, draining (in the order added)."""
        return self._call(lambda: [w.view() for w in self._workers.values()])

    # ---- routing (event loop thread only) --------------------------------------------------------

    def _pick(self, exclude: str | None) -> _Worker | None:
        now = time.monotonic()
        best: _Worker | None = None
        for w in self._workers.values():
            if w.draining or w.inflight >= w.max_batch or w.name == exclude or w.skip_until > now:
                continue
            if best is None or w.inflight * best.max_batch < best.inflight * w.max_batch:
                best = w  # insertion order = age, so a tie keeps the older worker
        return best

    def _pump(self) -> None:
        i = 0
        while i < len(self._queue):
            waiter = self._queue[i]
            w = self._pick(waiter.exclude)
            if w is None:
                if waiter.exclude is None:
                    return  # no free slot anywhere: FIFO order holds
                i += 1
                continue
            del self._queue[i]
            w.inflight += 1
            waiter.fut.set_result(w)

    def _release(self, w: _Worker) -> None:
        w.inflight -= 1
        self._check_drained(w)
        self._pump()

    def _check_drained(self, w: _Worker) -> None:
        if w.draining and w.inflight == 0 and self._workers.get(w.name) is w:
            del self._workers[w.name]
            for f in w.drained:
                if not f.done():
                    f.set_result(None)

    async def _acquire(self, exclude: str | None, timeout_s: float) -> _Worker:
        if self._closing:
            raise _Closing()
        if not self._queue:
            w = self._pick(exclude)
            if w is not None:
                w.inflight += 1
                return w
        waiter = _Waiter(asyncio.get_running_loop().create_future(), exclude)
        self._queue.append(waiter)
        try:
            await asyncio.wait({waiter.fut}, timeout=max(0.0, timeout_s))
        except asyncio.CancelledError:
            self._abandon(waiter)
            raise
        if not waiter.fut.done():
            self._abandon(waiter)
            raise _QueueTimeout()
        return waiter.fut.result()

    def _abandon(self, waiter: _Waiter) -> None:
        if waiter.fut.done():
            if not waiter.fut.cancelled() and waiter.fut.exception() is None:
                self._release(waiter.fut.result())
            return
        self._queue.remove(waiter)
        waiter.fut.cancel()

    # ---- handlers --------------------------------------------------------------------------------

    def _fail(self, status: int, text: str) -> web.Response:
        self._failed += 1
        return web.Response(status=status, text=text + "\n")

    async def _generate(self, request: web.Request) -> web.Response:
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        try:
            body = parse_generate(await request.read())
        except BadRequest as exc:
            return self._fail(400, str(exc))
        payload = {"input_tokens": body.input_tokens, "output_tokens": body.output_tokens}
        exclude: str | None = None
        errors: list[str] = []
        for _ in range(2):
            try:
                w = await self._acquire(exclude, t0 + self.queue_timeout_s - loop.time())
            except _QueueTimeout:
                return self._fail(503, f"no worker slot freed within queue_timeout_s={self.queue_timeout_s} s; "
                                       "add workers or retry later" + "".join(f"; {e}" for e in errors))
            except _Closing:
                return self._fail(503, f"router {self.name} is shutting down")
            dispatched = loop.time()
            try:
                answer, error = await self._forward(w, payload)
            finally:
                self._release(w)
            if answer is not None:
                return self._answered(answer, (dispatched - t0) * 1000.0, loop.time() - t0)
            if error.startswith("400"):
                return self._fail(400, error)
            errors.append(f"{w.name}: {error}")
            exclude = w.name
            if not any(o.name != w.name and not o.draining for o in self._workers.values()):
                break
        return self._fail(502, "worker(s) failed: " + "; ".join(errors))

    async def _forward(self, w: _Worker, payload: dict[str, int]) -> tuple[dict[str, Any] | None, str]:
        assert self._session is not None
        if w.api == "llamacpp":
            path = "/completion"
            body: dict[str, Any] = {"prompt": [PROMPT_TOKEN_ID] * payload["input_tokens"],
                                    "n_predict": payload["output_tokens"], "ignore_eos": True,
                                    "cache_prompt": False, "temperature": 0}
        else:
            path, body = "/v1/generate", dict(payload)
        try:
            async with self._session.post(w.url + path, json=body) as resp:
                raw = await _read_capped(resp, MAX_BODY_BYTES)
                if resp.status == 200:
                    # the worker's answer is untrusted too: bounded, depth-capped, type-checked
                    answer = loads_json(raw, max_bytes=MAX_BODY_BYTES)
                    if w.api == "llamacpp":
                        answer = _llamacpp_answer(answer, payload)
                    ttft = answer.get("ttft_ms") if isinstance(answer, dict) else None
                    if isinstance(ttft, int | float) and not isinstance(ttft, bool) and 0 <= ttft <= MAX_TTFT_MS:
                        return answer, ""
                    return None, f"malformed answer from {w.url}: {raw[:200]!r}"
                return None, f"{resp.status} from {w.url}: {raw[:200].decode('utf-8', 'replace').strip()}"
        except aiohttp.ClientConnectionError as exc:
            w.skip_until = time.monotonic() + COOLDOWN_S
            return None, f"cannot reach {w.url}: {exc}"
        except (aiohttp.ClientError, asyncio.TimeoutError, ValueError) as exc:
            return None, f"bad exchange with {w.url}: {exc!r}"

    def _answered(self, answer: dict[str, Any], queue_ms: float, e2e_s: float) -> web.Response:
        ttft_ms = queue_ms + float(answer["ttft_ms"])
        self._ok += 1
        self._ring.add(ttft_ms, e2e_s * 1000.0)
        self._ttft.observe(ttft_ms / 1000.0)
        self._e2e.observe(e2e_s)
        return web.json_response({**answer, "router_queue_ms": queue_ms})

    def _inflight(self) -> int:
        return sum(w.inflight for w in self._workers.values())

    def _slots(self) -> int:
        return sum(w.max_batch for w in self._workers.values() if not w.draining)

    async def _stats(self, request: web.Request) -> web.Response:
        try:
            since = parse_since(request.query)
        except BadRequest as exc:
            return web.Response(status=400, text=f"{exc}\n")
        inflight, queued = self._inflight(), len(self._queue)
        return web.json_response(stats_envelope(
            "router", self.name, self._ring, since, ready=self._slots() > 0, max_batch=self._slots(),
            running=inflight, waiting=queued, prefill_busy_s_total=0.0, completed_total=self._ok,
            queued=queued, inflight=inflight, failed_total=self._failed))

    def collect(self) -> Iterator[Metric]:
        """Prometheus collector protocol: gauges and outcome counters read at scrape time."""
        for metric, doc, v in ((names.ROUTER_QUEUED, "Requests waiting for a free slot", len(self._queue)),
                               (names.ROUTER_INFLIGHT, "Requests forwarded, not yet answered", self._inflight())):
            yield GaugeMetricFamily(metric, doc, value=float(v))
        c = CounterMetricFamily(names.ROUTER_REQUESTS, "Requests answered by the router", labels=["outcome"])
        c.add_metric(["ok"], float(self._ok))
        c.add_metric(["failed"], float(self._failed))
        yield c

    async def _metrics(self, request: web.Request) -> web.Response:
        return web.Response(body=generate_latest(self.registry), headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def _workers_view(self, request: web.Request) -> web.Response:
        return web.json_response([w.view() for w in self._workers.values()])
