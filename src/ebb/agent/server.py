"""The node agent process: poll local ``/stats`` every 100 ms, serve buckets, metrics and health.

``Agent(endpoints).start()`` runs an aiohttp server and the poller on one private event loop in a
daemon thread and returns the agent's URL; ``stop()`` ends both and closes every socket.

Endpoints:

* ``GET /v1/buckets?since_ns=N`` → a :mod:`ebb.sources.agent_wire` page of the kept buckets (last 600 =
  60 s by default) ending after ``N`` (Unix ns in [0, 2^63-1]; default 0 = all), oldest first, at
  most ``limits.max_page_bytes`` (8 MiB) of them: a longer page holds the oldest buckets that fit
  (the reader's next ``since_ns`` continues it; ``newest_ns`` always names the agent's newest).
  400 on a malformed ``since_ns``; 503 (``Retry-After: 1``) while ``limits.page_handlers`` (4)
  pages are being written.
* ``GET /metrics`` → Prometheus text from a private registry: ``ebb_agent_buckets_total``,
  ``ebb_agent_poll_errors_total{endpoint}``, ``ebb_agent_last_poll_age_seconds``,
  ``ebb_agent_late_completions_total``, ``ebb_agent_skipped_buckets_total``,
  ``ebb_agent_dropped_completions_total{reason}``, ``ebb_agent_tick_errors_total``,
  ``ebb_agent_refused_endpoints{reason}``, ``ebb_agent_name_collisions``,
  ``ebb_agent_asleep_workers`` (workers whose engine said it sleeps in the newest bucket),
  ``ebb_agent_refused_requests_total{reason}``, ``ebb_agent_refused_connections_total{reason}``,
  and the latest ``ebb_agent_gpu{series}`` / ``ebb_agent_host{series}`` sampler values.
* ``GET /readyz`` (readiness; ``/healthz`` is the same) → 200 while the poll loop has closed a
  bucket within the last 5 s, else 503; also 503 while the agent polls no endpoint because its last
  discovery failed (a misconfigured router URL, an API server that refuses the listing): the
  body's ``reason`` says which. A node whose discovery answers with no pod is ready
  (``"endpoints": 0``).
* ``GET /livez`` (liveness) → 200 while the poll loop runs: it has tried to close a bucket, with
  success or not, within the last 60 s; else 503. A transient overload (slow engines, a bucket
  that fails to close, a discovery that fails) makes the agent unready, never dead, so a liveness
  probe on ``/livez`` restarts only an agent whose loop has stopped, not one in a restart loop.

Security of the server (the details: :mod:`ebb.agent.serving`; every number is a
:class:`~ebb.agent.serving.ServerLimits` default): with a ``token``, ``/v1/buckets`` (and
``/metrics`` with ``protect_metrics``) answer 401 without ``Authorization: Bearer <token>``, while
``/healthz``, ``/readyz`` and ``/livez`` stay open; with an ``ssl_context``, https only (a TLS
handshake within 5 s); at most 256 open connections, 64 per peer address (past either: ``503`` and
closed); a request head must be complete within 5 s (slowloris), and a page not written within 10 s is cut. **The poller is not
starved by readers.** Each bucket is encoded once, when it closes, so a page costs a join of ready
bytes; pages are written at most 4 at a time.

Polling guarantees: bucket ends are multiples of ``bucket_ms`` in Unix time, so buckets of agents on
different nodes line up for merging. At each end ``E`` every endpoint is polled once, concurrently,
with a timeout of 0.9 × ``bucket_ms``; then bucket ``E`` is closed. An answer is read up to
:data:`~ebb.agent.buckets.MAX_STATS_BYTES` (4 MiB; no compression, no redirects) and parsed with the
64-level depth cap. An endpoint that errors, times out or answers anything malformed — or whose
answer trips an error no rule foresaw — is counted in ``ebb_agent_poll_errors_total`` and left out of
that bucket (listed in ``missing``), never filled in; its failures are logged at most once per 10 s.
**The loop never stops on a peer's answer:** an error while closing a bucket is logged (rate
limited) and counted in ``ebb_agent_tick_errors_total``, and the next bucket is polled as usual. A
loop that falls more than a bucket behind (an overloaded host) skips the buckets it missed rather
than back-filling them, counted in ``ebb_agent_skipped_buckets_total``.

Discovery: with ``endpoints_from`` the router's ``GET /workers`` is read every ``discover_s``
(1 s): listed workers are added, unlisted ones dropped together with their metric series (draining
ones stay until they leave the list); the router itself is polled as an endpoint. Each listed URL
must pass :func:`~ebb.agent.discovery.check_endpoint` (http(s), a host, a port if written, no user
info, query or fragment) and the polled set is capped at ``max_endpoints`` (256); the refused
ones are logged (at most once per 10 s) and counted in ``ebb_agent_refused_endpoints{reason}``.
Endpoints are keyed by URL: two reporting one name are both kept (see :mod:`ebb.agent.buckets`).
GPU/host samplers (:class:`~ebb.sources.base.MetricSource`, blocking) run in worker threads, one
read per bucket at most; the agent does not close them (their owner does).

Engines (:mod:`ebb.agent.engine_poll`): with ``engine`` (an ``EngineProfile``), each of
``engine_endpoints`` (full metrics URLs) is GET once per bucket under the same timeout, missing and
never-stops rules (4 MiB at most) and is a worker named ``host:port``; a router's ``/workers`` are
then polled at ``{url}{metrics_path}`` while the router stays a ``/stats`` endpoint (client view).
Each page is parsed off the event loop within ``parse_budget_s`` of CPU (:mod:`ebb.agent.parse_pool`:
by default a bucket, at least 100 ms) and 4 budgets of wall time (at least 1 s); a page past the
wall limit lists its endpoint as missing for that bucket (counted in
``ebb_agent_poll_errors_total``), and an endpoint over its CPU budget rests 9 times that time.
``engine_pods`` (blocking: :class:`~ebb.agent.kube_pods.EndpointSliceLister` or
:class:`~ebb.agent.kube_pods.PodLister`) runs every ``discover_s``
in a thread; the URLs it returns are engine endpoints, a failing call keeps the current ones.
``engine_model`` (``--model``) reads one model's series from each engine page; a page serving several
models without it is refused, never summed (:mod:`ebb.agent.engine_poll`).
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import math
import socket
import ssl
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Final

import aiohttp
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from ebb.agent.buckets import MAX_STATS_BYTES, BucketAggregator, decode_stats
from ebb.agent.discovery import MAX_ENDPOINTS, MAX_WORKERS_BYTES, check_endpoint, parse_workers, plan
from ebb.agent.engine_poll import EnginePoller, read_capped
from ebb.agent.parse_pool import ParsePool, default_budget_s
from ebb.log_limit import LogLimiter, held_note
from ebb.agent.metrics import AgentMetrics
from ebb.agent.serving import (ClientErrorLogFilter, ConnectionGate, GatedSite, ServerLimits, close_runner,
                               quiet_client_errors, server_tls_context, token_ok, unauthorized)
from ebb.sources.agent_wire import encode_bucket_json, page_json
from ebb.errors import ConfigError, EbbError, InputError
from ebb.sources.base import MetricSource
from ebb.sources.engines.profiles import EngineProfile
from ebb.untrusted import INT64_MAX

__all__ = ["Agent", "ClientErrorLogFilter", "ServerLimits", "quiet_client_errors", "server_tls_context"]

log = logging.getLogger(__name__)
_HEALTHY_TICK_S: Final = 5.0
_LIVE_TICK_S: Final = 60.0
_POLL_HEADERS: Final = {"Accept": "application/json", "Accept-Encoding": "identity"}
_STATS_FIX: Final = "check that the URL points at an Ebb worker or router"


# -- the agent -----------------------------------------------------------------------------------
class Agent:
    """One node's agent; see the module docstring for endpoints and guarantees.

    ``token`` (None: no authentication), ``protect_metrics``, ``ssl_context``, ``limits`` and
    ``max_endpoints`` default to an open developer server on 127.0.0.1 with the documented limits.
    """

    def __init__(self, endpoints: Sequence[str] = (), *, port: int = 0, bucket_ms: int = 100,
                 nvml: MetricSource | None = None, host: MetricSource | None = None,
                 name: str | None = None, endpoints_from: str | None = None, bind: str = "127.0.0.1",
                 keep: int = 600, discover_s: float = 1.0, token: str | None = None,
                 protect_metrics: bool = False, ssl_context: ssl.SSLContext | None = None,
                 limits: ServerLimits = ServerLimits(), max_endpoints: int = MAX_ENDPOINTS,
                 engine: EngineProfile | None = None, engine_endpoints: Sequence[str] = (),
                 max_concurrency: int | None = None,
                 engine_pods: Callable[[], Sequence[str]] | None = None,
                 parse_budget_s: float | None = None, engine_model: str | None = None) -> None:
        if not endpoints and endpoints_from is None and not engine_endpoints and engine_pods is None:
            raise ValueError("Agent needs endpoints, engine_endpoints, engine_pods or endpoints_from (a router URL)")
        if (engine_endpoints or engine_pods is not None) and engine is None:
            raise ConfigError("engine endpoints need an engine profile (fix: give --engine NAME)")
        if engine_model is not None and engine is None:
            raise ConfigError("--model selects a model on engine pages: it needs --engine NAME")
        self._engines = EnginePoller(engine, max_concurrency, engine_model) if engine is not None else None
        if parse_budget_s is not None and not 0 < parse_budget_s <= 60:
            raise ConfigError(f"--parse-budget-ms must be in (0, 60000], got {parse_budget_s * 1000:g}")
        self._parser = ParsePool(parse_budget_s or default_budget_s(bucket_ms))
        try:
            static = list(dict.fromkeys(check_endpoint(u) for u in endpoints))
            source = check_endpoint(endpoints_from) if endpoints_from is not None else None
            eng = [u for u in dict.fromkeys(check_endpoint(u) for u in engine_endpoints) if u not in static]
        except InputError as exc:
            raise ConfigError(f"endpoint refused: {exc}") from exc
        self._engine_urls = set(eng)
        self._pods = engine_pods
        self._listed: dict[str, tuple[str, ...]] = {}  # discovery source -> the URLs it listed last
        fixed = static + eng + ([source] if source and source not in static else [])
        if max_endpoints < 1 or len(fixed) > max_endpoints:
            raise ConfigError(f"{len(fixed)} endpoint(s) given but the agent polls at most {max_endpoints} "
                              "(fix: split them over several agents, or raise --max-endpoints)")
        if token is not None and not token_ok(token):
            raise ConfigError("the agent's token must be 1-4096 visible ASCII characters without spaces "
                              "(fix: write the token alone, on one line, into the --token-file)")
        self.name = name or f"agent-{socket.gethostname()}"
        self.bucket_ms = bucket_ms
        self._from = source
        self._src = f"{source}/workers" if source else None
        self._fixed = fixed
        self._port, self._bind, self._discover_s = port, bind, discover_s
        self._token = token.encode() if token is not None else None
        self._protect_metrics = protect_metrics
        self._ssl = ssl_context
        self.limits = limits
        self.max_endpoints = max_endpoints
        self._samplers = {g: s for g, s in (("gpu", nvml), ("host", host)) if s is not None}
        self.aggregator = BucketAggregator(bucket_ms=bucket_ms, keep=keep)
        for u in fixed:
            self.aggregator.add(u)
        self._encoded: deque[tuple[int, bytes]] = deque(maxlen=keep)
        self.metrics = AgentMetrics()
        self.metrics.last_poll_age.set_function(self._poll_age)
        self._gate = ConnectionGate(limits, self.metrics)
        self._writing = 0
        self._log = LogLimiter()
        self._fail_log = LogLimiter(burst=20)  # all endpoints together: a fleet going down is 20 lines
        self._discovery_error = ""  # the last discovery's failure ("" after a success): healthz names it
        self._drops_seen = {"bad_row": 0, **dict.fromkeys(self.aggregator.implausible, 0)}
        self._collisions: tuple[str, ...] = ()
        self._last_ok_s: float | None = None
        self._last_tick_s = time.monotonic()
        self._failing: set[str] = set()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self.url = ""

    def attach_samplers(self, *, nvml: MetricSource | None = None, host: MetricSource | None = None) -> None:
        """Add GPU / host samplers after construction (before :meth:`start`)."""
        if self._thread is not None:
            raise RuntimeError("attach samplers before start()")
        self._samplers |= {g: s for g, s in (("gpu", nvml), ("host", host)) if s is not None}

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self, timeout_s: float = 10.0) -> str:
        """Start serving; returns ``http(s)://HOST:PORT``. Raises what prevented the start."""
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
                                  "(fix: pick a free --port, or 0 for any, and an address of this host "
                                  "for --bind)") from self._error
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
        self._last_tick_s = time.monotonic()  # healthz counts from the start, not from construction
        self._last_attempt_s = self._last_tick_s
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        app = web.Application()
        app.router.add_get("/v1/buckets", self._buckets)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/healthz", self._readyz)
        app.router.add_get("/readyz", self._readyz)
        app.router.add_get("/livez", self._livez)
        lim = self.limits
        # keepalive_timeout doubles as the request-head deadline: aiohttp arms it at connect and
        # after each answer, and closes a connection whose next request is still incomplete then
        runner = web.AppRunner(app, access_log=None, handle_signals=False, keepalive_timeout=lim.header_timeout_s,
                               max_line_size=lim.max_line_bytes, max_field_size=lim.max_line_bytes,
                               max_headers=lim.max_headers, shutdown_timeout=1.0,
                               logger=quiet_client_errors("ebb.agent.http"))
        await runner.setup()
        site: GatedSite | None = None
        try:
            site = GatedSite(runner, self._bind, self._port, self._gate, self._ssl, lim.tls_handshake_timeout_s)
            await site.start()
            port = runner.addresses[0][1]
            host = f"[{self._bind}]" if ":" in self._bind else self._bind
            self.url = f"{'https' if self._ssl else 'http'}://{host}:{port}"
            timeout = aiohttp.ClientTimeout(total=0.9 * self.bucket_ms / 1000)
            connector = aiohttp.TCPConnector(limit=self.max_endpoints + 2)
            async with aiohttp.ClientSession(timeout=timeout, connector=connector, auto_decompress=False) as session:
                tasks = [asyncio.create_task(self._tick_loop(session))]
                tasks += [asyncio.create_task(self._sample_loop(g, s)) for g, s in self._samplers.items()]
                if self._from:
                    tasks.append(asyncio.create_task(self._discover_loop(session)))
                if self._pods is not None:
                    tasks.append(asyncio.create_task(self._pods_loop()))
                self._ready.set()
                await self._stop.wait()
                for t in tasks:
                    t.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
        finally:
            self._parser.close()
            await close_runner(runner, site.listening_fds if site is not None else ())

    # -- polling -----------------------------------------------------------------------------
    def _next_end(self, now_ns: int) -> int:
        b = self.aggregator.bucket_ns
        return (now_ns // b + 1) * b

    async def _tick_loop(self, session: aiohttp.ClientSession) -> None:
        end = self._next_end(time.time_ns())
        while True:
            await asyncio.sleep(max(0.0, (end - time.time_ns()) / 1e9))
            self._last_attempt_s = time.monotonic()
            try:
                await self._tick(session, end)
            except Exception as exc:  # the loop must outlive any one bucket's trouble
                self.metrics.tick_errors.inc()
                if (held := self._log.allow("tick")) is not None:
                    log.error("closing the bucket ending at %d failed (%s: %s); polling goes on%s", end,
                              type(exc).__name__, str(exc)[:300], held_note(held), exc_info=exc)
            else:
                self._last_tick_s = time.monotonic()
            nxt = self._next_end(time.time_ns())
            if nxt > end + self.aggregator.bucket_ns:
                self.metrics.skipped.inc((nxt - end) // self.aggregator.bucket_ns - 1)
            end = max(nxt, end + self.aggregator.bucket_ns)

    async def _tick(self, session: aiohttp.ClientSession, end: int) -> None:
        agg = self.aggregator
        await asyncio.gather(*(self._poll(session, u, end) for u in agg.endpoints))
        late_before = agg.late
        bucket = agg.close(end)
        self.metrics.buckets.inc()
        self.metrics.asleep.set(sum(1 for w in bucket.workers.values() if w.asleep))
        self.metrics.late.inc(agg.late - late_before)
        self._encoded.append((bucket.ts_ns, encode_bucket_json(bucket)))
        self._report_drops()
        if agg.collisions != self._collisions:
            self._collisions = agg.collisions
            self.metrics.collisions.set(len(agg.collisions))
            if agg.collisions:
                log.warning("name(s) %s are reported by more than one endpoint; each is kept as NAME@URL "
                            "(fix: give every worker its own --name)", ", ".join(agg.collisions)[:500])

    def _report_drops(self) -> None:
        now = {"bad_row": self.aggregator.bad_rows, **self.aggregator.implausible}
        new = {k: v - self._drops_seen[k] for k, v in now.items() if v > self._drops_seen[k]}
        for reason, n in new.items():
            self.metrics.dropped.labels(reason=reason).inc(n)
        self._drops_seen = now
        if new and (held := self._log.allow("drops")) is not None:
            log.warning("dropped completion rows: %s (bad_row: malformed; future: over %d ms ahead of this "
                        "agent's clock; too_old: older than the kept window)%s",
                        ", ".join(f"{k}={v}" for k, v in sorted(new.items())),
                        5 * self.bucket_ms, held_note(held))

    async def _poll(self, session: aiohttp.ClientSession, url: str, end: int) -> None:
        try:
            if self._engines is not None and url in self._engine_urls:
                eng = self._engines
                self._parser.check(url)  # an endpoint whose page overran the parse budget rests first
                raw = await eng.fetch(session, url)
                received_s = time.monotonic()
                reading = await self._parser.parse(url, lambda: eng.parse(url, raw))
                if url in self.aggregator.endpoints:  # not removed by discovery while in flight
                    self.aggregator.engine_ok(url, eng.advance(url, reading, received_s), end)
            else:
                params = {"since": str(self.aggregator.cursor(url))}
                async with session.get(f"{url}/stats", params=params, headers=_POLL_HEADERS,
                                       allow_redirects=False) as resp:
                    raw = await read_capped(resp, MAX_STATS_BYTES, f"{url}/stats", _STATS_FIX)
                poll = decode_stats(raw, url)
                if url not in self.aggregator.endpoints:
                    return  # removed by discovery while in flight
                self.aggregator.poll_ok(url, poll, time.time_ns())
        except (aiohttp.ClientError, asyncio.TimeoutError, EbbError) as exc:
            self._failed(url, exc)
            return
        except Exception as exc:  # an answer no rule foresaw: count it, keep polling
            self._failed(url, exc, unexpected=True)
            return
        self._last_ok_s = time.monotonic()
        if url in self._failing:
            self._failing.discard(url)
            if (held := self._log.allow(url)) is not None:
                log.info("endpoint %s answers again%s", url, held_note(held))

    def _failed(self, url: str, exc: BaseException, *, unexpected: bool = False) -> None:
        if url != self._src and url not in self.aggregator.endpoints:
            return  # dropped by discovery while in flight: no series to bring back
        self.metrics.poll_errors.labels(endpoint=url).inc()
        if url != self._src:
            self.aggregator.poll_failed(url)
        first = url not in self._failing
        self._failing.add(url)
        # log a change of state, and a persisting failure at most every 10 s per endpoint
        if (first or unexpected) and (held := self._log.allow(url)) is not None:
            if (others := self._fail_log.allow("all")) is not None:
                log.warning("endpoint %s failed (%s: %s); left out of buckets until it answers%s%s", url,
                            type(exc).__name__, str(exc)[:300], held_note(held),
                            f" ({others} failure line(s) of other endpoints held back)" if others else "",
                            exc_info=exc if unexpected else None)

    async def _discover_loop(self, session: aiohttp.ClientSession) -> None:
        src = self._src
        assert src is not None
        while True:
            try:
                await self._discover(session, src)
                self._discovery_error = ""
            except Exception as exc:  # keep the current endpoints and try again
                self._discovery_error = _failure(f"discovery from {src}", exc)
                expected = isinstance(exc, aiohttp.ClientError | asyncio.TimeoutError | EbbError)
                self._failed(src, exc, unexpected=not expected)
            await asyncio.sleep(self._discover_s)

    async def _discover(self, session: aiohttp.ClientSession, src: str) -> None:
        async with session.get(src, headers=_POLL_HEADERS, allow_redirects=False) as resp:
            raw = await read_capped(resp, MAX_WORKERS_BYTES, src, _STATS_FIX)
        listed = parse_workers(raw, src)
        if src in self._failing:
            self._failing.discard(src)
            log.info("%s answers again", src)
        eng = self._engines
        urls = tuple(check_endpoint(eng.metrics_url(u)) for u in listed.urls) if eng else listed.urls
        self._apply(src, urls, len(listed.refused), listed.refused[0] if listed.refused else "-")

    async def _pods_loop(self) -> None:
        assert self._pods is not None
        while True:
            try:
                self._apply("pods", tuple(check_endpoint(u) for u in await asyncio.to_thread(self._pods)), 0, "-")
                self._discovery_error = ""
            except Exception as exc:  # keep the current endpoints and try again
                self._discovery_error = _failure("engine pod discovery", exc)
                if (held := self._log.allow("pods")) is not None:
                    log.warning("engine pod discovery failed (%s: %s); polling the pods known%s", type(exc).__name__,
                                str(exc)[:300], held_note(held), exc_info=None if isinstance(exc, EbbError) else exc)
            await asyncio.sleep(self._discover_s)

    def _apply(self, src: str, urls: tuple[str, ...], n_invalid: int, first_invalid: str) -> None:
        """Poll the fixed endpoints and what every discovery source listed last (``src`` now ``urls``)."""
        self._listed[src] = urls
        if self._engines is not None:
            self._engine_urls |= set(urls)
        listed = tuple(dict.fromkeys(u for us in self._listed.values() for u in us))
        agg = self.aggregator
        want, over = plan(self._fixed, agg.endpoints, listed, self.max_endpoints)
        keep = set(want)
        for u in [u for u in agg.endpoints if u not in keep]:
            self._forget(u)
            log.info("endpoint %s left %s; no longer polled", u, src)
        for u in want:
            agg.add(u)
        if src != "pods":
            self.metrics.refused_endpoints.labels(reason="invalid").set(n_invalid)
        self.metrics.refused_endpoints.labels(reason="over_cap").set(len(over))
        if (n_invalid or over) and (held := self._log.allow("discovery")) is not None:
            log.warning("%s listed %d endpoint(s) the agent refused: %d invalid (first: %s), %d over the cap "
                        "of %d polled endpoints (first: %s)%s", src, n_invalid + len(over), n_invalid,
                        first_invalid, len(over), self.max_endpoints, over[0] if over else "-", held_note(held))

    def _forget(self, url: str) -> None:
        """Stop polling ``url`` and drop its per-endpoint state and metric series."""
        self.aggregator.forget(url)
        self._failing.discard(url)
        self._engine_urls.discard(url)
        if self._engines is not None:
            self._engines.forget(url)
            self._parser.forget(url)
        self._log.forget(url)
        try:
            self.metrics.poll_errors.remove(url)
        except KeyError:  # it never failed: no series to remove
            pass

    async def _sample_loop(self, group: str, sampler: MetricSource) -> None:
        gauge = self.metrics.gpu if group == "gpu" else self.metrics.host
        while True:
            try:
                batch = await asyncio.to_thread(sampler.read)
                self.aggregator.sampled(group, batch)
                for k, v in zip(batch.series_idx.tolist(), batch.value.tolist(), strict=True):
                    gauge.labels(series=batch.series[k]).set(v)
            except Exception as exc:  # a sampler's trouble must not end its loop
                if (held := self._log.allow(f"sampler:{group}")) is not None:
                    log.warning("%s sampler failed: %s%s", group, exc, held_note(held),
                                exc_info=None if isinstance(exc, EbbError) else exc)
            await asyncio.sleep(max(0.0, (self._next_end(time.time_ns()) - time.time_ns()) / 1e9))

    def _poll_age(self) -> float:
        return math.nan if self._last_ok_s is None else time.monotonic() - self._last_ok_s

    # -- HTTP --------------------------------------------------------------------------------
    def _denied(self, request: web.Request) -> web.Response | None:
        """None when ``request`` may read data; else the 401 to send (see :func:`unauthorized`)."""
        return unauthorized(request, self._token, self.metrics, self._log)

    async def _buckets(self, request: web.Request) -> web.StreamResponse:
        if (denied := self._denied(request)) is not None:
            return denied
        raw = request.query.get("since_ns", "0")
        since = int(raw) if raw.isascii() and raw.isdigit() and len(raw) <= 19 else -1
        if not 0 <= since <= INT64_MAX:
            raise web.HTTPBadRequest(text=f"since_ns must be an integer in [0, 2^63-1] (Unix ns), got {raw[:40]!r}")
        if self._writing >= self.limits.page_handlers:
            self.metrics.refused_requests.labels(reason="busy").inc()
            return web.Response(status=503, text="agent busy writing pages; retry in a second\n",
                                headers={"Retry-After": "1"})
        body = self._page(since)
        self._writing += 1
        resp = web.StreamResponse(headers={"Content-Type": "application/json"})
        resp.content_length = len(body)
        try:
            async with asyncio.timeout(self.limits.write_timeout_s):
                await resp.prepare(request)
                await resp.write(body)
                await resp.write_eof()
        except TimeoutError:
            if request.transport is not None:
                request.transport.abort()  # a reader that does not read keeps no slot
            if (held := self._log.allow("slow-reader")) is not None:
                log.warning("cut a page to %s: not written within %g s%s", request.remote,
                            self.limits.write_timeout_s, held_note(held))
        finally:
            self._writing -= 1
        return resp

    def _page(self, since: int) -> bytes:
        items = list(self._encoded)
        i = bisect.bisect_right([ts for ts, _ in items], since)
        parts: list[bytes] = []
        size = 200  # the envelope
        for _, b in items[i:]:
            size += len(b) + 1
            if size > self.limits.max_page_bytes and parts:
                break  # the oldest buckets that fit: the reader's next since_ns continues from there
            parts.append(b)
        return page_json(self.name, self.bucket_ms, self.aggregator.newest_ns, parts, time.time_ns())

    async def _metrics(self, request: web.Request) -> web.Response:
        if self._protect_metrics and (denied := self._denied(request)) is not None:
            return denied
        return web.Response(body=generate_latest(self.metrics.registry),
                            headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def _livez(self, request: web.Request) -> web.Response:
        age = time.monotonic() - self._last_attempt_s
        why = f"the poll loop has not tried to close a bucket for {age:.1f} s" if age >= _LIVE_TICK_S else ""
        body: dict[str, object] = {"ok": not why, "agent": self.name, "last_attempt_age_s": round(age, 3)}
        if why:
            body["reason"] = why
        return web.json_response(body, status=503 if why else 200)

    async def _readyz(self, request: web.Request) -> web.Response:
        age = time.monotonic() - self._last_tick_s
        n = len(self.aggregator.endpoints)
        why = (f"no bucket closed for {age:.1f} s" if age >= _HEALTHY_TICK_S else
               f"polling no endpoint: {self._discovery_error}" if n == 0 and self._discovery_error else "")
        body: dict[str, object] = {"ok": not why, "agent": self.name, "last_tick_age_s": round(age, 3), "endpoints": n}
        if why:
            body["reason"] = why
        return web.json_response(body, status=503 if why else 200)


def _failure(what: str, exc: BaseException) -> str:
    """``what failed (Type: message)``, the message cut to 200 characters (what healthz names)."""
    return f"{what} failed ({type(exc).__name__}: {str(exc)[:200]})"
