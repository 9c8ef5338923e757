"""The node agent process: poll local ``/stats`` every 100 ms, serve buckets, metrics and health.

``Agent(endpoints).start()`` runs an aiohttp server and the poller on one private event loop in a
daemon thread and returns the agent's URL; ``stop()`` ends both and closes every socket.

Endpoints:

* ``GET /v1/buckets?since_ns=N`` → a :mod:`ebb.agent.wire` page of the kept buckets (last 600 =
  60 s by default) ending after ``N`` (Unix ns; default 0 = all). 400 on a malformed ``since_ns``.
* ``GET /metrics`` → Prometheus text from a private registry: ``ebb_agent_buckets_total``,
  ``ebb_agent_poll_errors_total{endpoint}``, ``ebb_agent_last_poll_age_seconds``,
  ``ebb_agent_late_completions_total``, ``ebb_agent_skipped_buckets_total``, and the latest
  ``ebb_agent_gpu{series}`` / ``ebb_agent_host{series}`` sampler values.
* ``GET /healthz`` → 200 while the poll loop has ticked within the last 5 s, else 503.

Timing guarantees: bucket ends are multiples of ``bucket_ms`` in Unix time, so buckets of agents on
different nodes line up for merging. At each end ``E`` every endpoint is polled once, concurrently,
with a timeout of 0.9 × ``bucket_ms``; then bucket ``E`` is closed. An endpoint that errors or times
out is counted and left out of that bucket (listed in ``missing``) — never filled in. A loop that
falls more than a bucket behind (an overloaded host) skips the buckets it missed rather than
back-filling them, counted in ``ebb_agent_skipped_buckets_total``. With ``endpoints_from`` the
router's ``GET /workers`` is read every ``discover_s`` (1 s): listed workers are added, unlisted ones
dropped (draining ones stay until they leave the list); the router itself is polled as an endpoint.
GPU/host samplers (:class:`~ebb.sources.base.MetricSource`, blocking) run in worker threads, one
read per bucket at most; the agent does not close them (their owner does).
"""

from __future__ import annotations

import asyncio
import logging
import math
import socket
import threading
import time
import urllib.parse
from collections.abc import Sequence

import aiohttp
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, generate_latest

from ebb.agent.buckets import BucketAggregator, parse_stats
from ebb.agent.wire import BucketPage, encode_page
from ebb.errors import ConfigError, EbbError
from ebb.sources.base import MetricSource

__all__ = ["Agent"]

log = logging.getLogger(__name__)
_HEALTHY_TICK_S = 5.0


class _Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.buckets = Counter("ebb_agent_buckets", "Buckets closed.", registry=r)
        self.poll_errors = Counter("ebb_agent_poll_errors", "Polls that failed (refused, timeout, "
                                   "bad answer).", ["endpoint"], registry=r)
        self.last_poll_age = Gauge("ebb_agent_last_poll_age_seconds", "Seconds since the newest "
                                   "successful poll of any endpoint (NaN before the first).", registry=r)
        self.late = Counter("ebb_agent_late_completions", "Completions fetched after their bucket "
                            "closed (placed in the next bucket).", registry=r)
        self.skipped = Counter("ebb_agent_skipped_buckets", "Bucket ends the loop was too late for.",
                               registry=r)
        self.gpu = Gauge("ebb_agent_gpu", "Latest NVML sample per series (unit in the name).", ["series"],
                         registry=r)
        self.host = Gauge("ebb_agent_host", "Latest host sample per series (unit in the name).", ["series"],
                          registry=r)


class Agent:
    """One node's agent; see the module docstring for endpoints and guarantees."""

    def __init__(self, endpoints: Sequence[str] = (), *, port: int = 0, bucket_ms: int = 100,
                 nvml: MetricSource | None = None, host: MetricSource | None = None,
                 name: str | None = None, endpoints_from: str | None = None, bind: str = "127.0.0.1",
                 keep: int = 600, discover_s: float = 1.0) -> None:
        if not endpoints and endpoints_from is None:
            raise ValueError("Agent needs endpoints or endpoints_from (a router URL)")
        for url in [*endpoints, *([endpoints_from] if endpoints_from else [])]:
            parts = urllib.parse.urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ConfigError(f"endpoint {url!r} is not an http(s) URL "
                                  "(fix: e.g. --endpoint http://127.0.0.1:8000)")
        self.name = name or f"agent-{socket.gethostname()}"
        self.bucket_ms = bucket_ms
        self._static = [u.rstrip("/") for u in endpoints]
        self._from = endpoints_from.rstrip("/") if endpoints_from else None
        self._port, self._bind, self._discover_s = port, bind, discover_s
        self._samplers = {g: s for g, s in (("gpu", nvml), ("host", host)) if s is not None}
        self.aggregator = BucketAggregator(bucket_ms=bucket_ms, keep=keep)
        for u in self._static + ([self._from] if self._from else []):
            self.aggregator.add(u)
        self.metrics = _Metrics()
        self.metrics.last_poll_age.set_function(self._poll_age)
        self._last_ok_s: float | None = None
        self._last_tick_s = time.monotonic()
        self._failing: set[str] = set()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self.url = ""

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self, timeout_s: float = 10.0) -> str:
        """Start serving; returns ``http://HOST:PORT``. Raises what prevented the start."""
        if self._thread is not None:
            return self.url
        self._thread = threading.Thread(target=self._run, name=f"ebb-agent-{self.name}", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout_s):
            raise RuntimeError(f"agent did not start within {timeout_s:g} s")
        if self._error is not None:
            self._thread.join()
            self._thread = None
            if isinstance(self._error, OSError):
                raise ConfigError(f"agent cannot listen on {self._bind}:{self._port}: {self._error} "
                                  "(fix: pick a free --port, or 0 for any)") from self._error
            raise self._error
        return self.url

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop polling and serving; idempotent."""
        thread, loop, stop = self._thread, self._loop, self._stop
        if thread is None or loop is None or stop is None:
            return
        loop.call_soon_threadsafe(stop.set)
        thread.join(timeout_s)
        self._thread = None

    def __enter__(self) -> Agent:
        self.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as exc:  # surfaced to start() when it happens before ready
            self._error = exc
            if self._ready.is_set():
                log.exception("agent %s stopped on an error", self.name)
        finally:
            self._ready.set()

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        app = web.Application()
        app.router.add_get("/v1/buckets", self._buckets)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/healthz", self._healthz)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        try:
            site = web.TCPSite(runner, self._bind, self._port)
            await site.start()
            port = runner.addresses[0][1]
            self.url = f"http://{self._bind}:{port}"
            timeout = aiohttp.ClientTimeout(total=0.9 * self.bucket_ms / 1000)
            async with aiohttp.ClientSession(timeout=timeout) as session:
                tasks = [asyncio.create_task(self._tick_loop(session))]
                tasks += [asyncio.create_task(self._sample_loop(g, s)) for g, s in self._samplers.items()]
                if self._from:
                    tasks.append(asyncio.create_task(self._discover_loop(session)))
                self._ready.set()
                await self._stop.wait()
                for t in tasks:
                    t.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
        finally:
            await runner.cleanup()

    # -- polling -----------------------------------------------------------------------------
    def _next_end(self, now_ns: int) -> int:
        b = self.aggregator.bucket_ns
        return (now_ns // b + 1) * b

    async def _tick_loop(self, session: aiohttp.ClientSession) -> None:
        end = self._next_end(time.time_ns())
        while True:
            await asyncio.sleep(max(0.0, (end - time.time_ns()) / 1e9))
            self._last_tick_s = time.monotonic()
            urls = self.aggregator.endpoints
            await asyncio.gather(*(self._poll(session, u) for u in urls))
            late_before = self.aggregator.late
            self.aggregator.close(end)
            self.metrics.buckets.inc()
            self.metrics.late.inc(self.aggregator.late - late_before)
            nxt = self._next_end(time.time_ns())
            if nxt > end + self.aggregator.bucket_ns:
                self.metrics.skipped.inc((nxt - end) // self.aggregator.bucket_ns - 1)
            end = max(nxt, end + self.aggregator.bucket_ns)

    async def _poll(self, session: aiohttp.ClientSession, url: str) -> None:
        try:
            async with session.get(f"{url}/stats", params={"since": str(self.aggregator.cursor(url))}) as resp:
                resp.raise_for_status()
                body = await resp.json(content_type=None)
            poll = parse_stats(body, url)
        except (aiohttp.ClientError, asyncio.TimeoutError, ValueError, EbbError) as exc:
            self._failed(url, exc)
            return
        if url not in self.aggregator.endpoints:
            return  # removed by discovery while in flight
        self.aggregator.poll_ok(url, poll)
        self._last_ok_s = time.monotonic()
        if url in self._failing:
            self._failing.discard(url)
            log.info("endpoint %s answers again", url)

    def _failed(self, url: str, exc: BaseException) -> None:
        self.metrics.poll_errors.labels(endpoint=url).inc()
        self.aggregator.poll_failed(url)
        if url not in self._failing:  # log state changes, not every 100 ms failure
            self._failing.add(url)
            log.warning("endpoint %s failed (%s: %s); left out of buckets until it answers",
                        url, type(exc).__name__, exc)

    async def _discover_loop(self, session: aiohttp.ClientSession) -> None:
        assert self._from is not None
        src = f"{self._from}/workers"
        while True:
            try:
                async with session.get(src) as resp:
                    resp.raise_for_status()
                    listed = await resp.json(content_type=None)
                urls = {str(w["url"]).rstrip("/") for w in listed}
            except (aiohttp.ClientError, asyncio.TimeoutError, ValueError, TypeError, KeyError) as exc:
                self._failed(src, exc)
            else:
                self._failing.discard(src)
                want = urls | {self._from, *self._static}
                for u in set(self.aggregator.endpoints) - want:
                    self.aggregator.forget(u)
                    log.info("endpoint %s left %s; no longer polled", u, src)
                for u in want - set(self.aggregator.endpoints):
                    self.aggregator.add(u)
            await asyncio.sleep(self._discover_s)

    async def _sample_loop(self, group: str, sampler: MetricSource) -> None:
        gauge = self.metrics.gpu if group == "gpu" else self.metrics.host
        while True:
            try:
                batch = await asyncio.to_thread(sampler.read)
            except EbbError as exc:
                log.warning("%s sampler failed: %s", group, exc)
            else:
                self.aggregator.sampled(group, batch)
                for k, v in zip(batch.series_idx.tolist(), batch.value.tolist(), strict=True):
                    gauge.labels(series=batch.series[k]).set(v)
            await asyncio.sleep(max(0.0, (self._next_end(time.time_ns()) - time.time_ns()) / 1e9))

    def _poll_age(self) -> float:
        return math.nan if self._last_ok_s is None else time.monotonic() - self._last_ok_s

    # -- HTTP --------------------------------------------------------------------------------
    async def _buckets(self, request: web.Request) -> web.Response:
        raw = request.query.get("since_ns", "0")
        try:
            since = int(raw)
        except ValueError:
            raise web.HTTPBadRequest(text=f"since_ns must be an integer (Unix ns), got {raw!r}") from None
        page = BucketPage(self.name, self.bucket_ms, self.aggregator.newest_ns, self.aggregator.since(since))
        return web.json_response(encode_page(page))

    async def _metrics(self, request: web.Request) -> web.Response:
        return web.Response(body=generate_latest(self.metrics.registry),
                            headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def _healthz(self, request: web.Request) -> web.Response:
        age = time.monotonic() - self._last_tick_s
        ok = age < _HEALTHY_TICK_S
        return web.json_response({"ok": ok, "agent": self.name, "last_tick_age_s": round(age, 3),
                                  "endpoints": len(self.aggregator.endpoints)}, status=200 if ok else 503)
