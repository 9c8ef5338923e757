"""Open-loop load generator: replays a :class:`~ebb.model.trace.RequestTrace` against ``/v1/generate``.

Request ``i`` is sent at ``start + arrival_s[i] / time_scale`` with the trace's token counts (0 is
sent as 1: the worker needs at least one token each way), whether or not earlier requests have been
answered — an open loop, as real users are. ``rate_scale`` < 1 keeps each request independently with
that probability (Bernoulli thinning, seeded), which lowers the rate but keeps the trace's bursts and
lulls in place. ``rate_scale`` > 1 is refused: the only way to raise it would be duplicating requests,
which stacks copies at the same instants and manufactures bursts the trace never had (compress time
with ``time_scale`` instead).

Token scaling (for servers slower than the trace's, e.g. CPU inference): ``tokens_in_scale`` /
``tokens_out_scale`` multiply the trace's counts (rounded up, so a request keeps ≥ 1 token each
way), then ``max_tokens_in`` / ``max_tokens_out`` cap them (so prompt + output fit a server's
context). Defaults (1, 1, no cap) send the trace's counts as recorded.

Guarantees: one asyncio loop and one aiohttp session (up to 10,000 connections) for all requests, no
thread per request; sustains well over 100 requests/s on two cores. A request that is late is sent at
once (never skipped). Failures — any non-200 answer, connection error or timeout — are counted, never
raised. ``ttft_ms`` = the router's ``router_queue_ms`` (0 when absent) + the worker's ``ttft_ms``;
``e2e_ms`` is measured by the generator from send to answer.
"""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass
from typing import Final

import aiohttp
import numpy as np
import numpy.typing as npt

from ebb.errors import ConfigError
from ebb.model.trace import RequestTrace

__all__ = ["LoadGenerator", "LoadResults"]

CONNECTION_LIMIT: Final = 10_000


@dataclass(frozen=True)
class LoadResults:
    """One row per request sent, in trace order. ``status`` 0 = no HTTP answer (connection error,
    timeout, or still in flight when stopped); ``ttft_ms``/``e2e_ms`` are NaN for failures."""

    index: npt.NDArray[np.int64]
    """Position of the request in the trace."""
    sent_s: npt.NDArray[np.float64]
    """Unix time the request was sent."""
    ok: npt.NDArray[np.bool_]
    ttft_ms: npt.NDArray[np.float64]
    e2e_ms: npt.NDArray[np.float64]
    status: npt.NDArray[np.int64]
    failed: int


def _scaled(tokens: npt.NDArray[np.int64], scale: float, cap: int | None) -> npt.NDArray[np.int64]:
    """``ceil(tokens × scale)`` in [1, cap] (no upper bound without a cap)."""
    out = np.maximum(1, np.ceil(tokens.astype(np.float64) * scale)).astype(np.int64)
    return out if cap is None else np.minimum(out, cap)


class LoadGenerator:
    """Replays ``trace`` against ``url`` (the router's base URL, or a full ``/v1/generate`` URL)."""

    def __init__(self, url: str, trace: RequestTrace, time_scale: float = 1.0, rate_scale: float = 1.0,
                 seed: int = 0, *, request_timeout_s: float = 600.0, tokens_in_scale: float = 1.0,
                 tokens_out_scale: float = 1.0, max_tokens_in: int | None = None,
                 max_tokens_out: int | None = None) -> None:
        if not time_scale > 0:
            raise ConfigError(f"time_scale must be > 0 (2 replays twice as fast), got {time_scale!r}")
        if rate_scale > 1:
            raise ConfigError(
                f"rate_scale must be in (0, 1], got {rate_scale!r}: raising the rate would mean duplicating "
                "requests, which stacks copies at the same instants and changes the trace's burst shape; "
                "use time_scale > 1 to replay faster instead")
        if not rate_scale > 0:
            raise ConfigError(f"rate_scale must be in (0, 1] (the share of requests kept), got {rate_scale!r}")
        if not (tokens_in_scale > 0 and tokens_out_scale > 0):
            raise ConfigError(f"token scales must be > 0, got tokens_in_scale={tokens_in_scale!r}, "
                              f"tokens_out_scale={tokens_out_scale!r}")
        if (max_tokens_in is not None and max_tokens_in < 1) or (max_tokens_out is not None and max_tokens_out < 1):
            raise ConfigError(f"token caps must be ≥ 1, got max_tokens_in={max_tokens_in!r}, "
                              f"max_tokens_out={max_tokens_out!r}")
        self.endpoint = url if url.rstrip("/").endswith("/v1/generate") else url.rstrip("/") + "/v1/generate"
        self.trace = trace
        self.time_scale = time_scale
        keep = np.random.default_rng(seed).random(trace.requests) < rate_scale if rate_scale < 1 else \
            np.ones(trace.requests, dtype=bool)
        self.indices: npt.NDArray[np.int64] = np.flatnonzero(keep).astype(np.int64)
        """Trace positions that will be replayed (after thinning), in order."""
        self._offsets_s = trace.arrival_s[self.indices] / time_scale
        self._tin = _scaled(trace.tokens_in[self.indices], tokens_in_scale, max_tokens_in)
        self._tout = _scaled(trace.tokens_out[self.indices], tokens_out_scale, max_tokens_out)
        n = len(self.indices)
        self._sent_s = np.full(n, np.nan)
        self._ok = np.zeros(n, dtype=bool)
        self._ttft = np.full(n, np.nan)
        self._e2e = np.full(n, np.nan)
        self._status = np.zeros(n, dtype=np.int64)
        self._sent = 0
        self._timeout = aiohttp.ClientTimeout(total=request_timeout_s, sock_connect=10.0)
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._scheduler: asyncio.Task[None] | None = None
        self._drain_s: float | None = None
        self._used = False

    # ---- public API ------------------------------------------------------------------------------

    def run(self, duration_s: float | None = None) -> LoadResults:
        """Replay (the first ``duration_s`` seconds of wall time of) the trace, wait for every answer.
        One replay per generator: a second call raises RuntimeError."""
        if self._used:
            raise RuntimeError("this LoadGenerator already replayed its trace; make a new one")
        self._used = True
        asyncio.run(self._main(duration_s))
        return self.results()

    def start(self, duration_s: float | None = None) -> None:
        """Replay in a background thread; see :meth:`stop` and :meth:`wait`."""
        if self._thread is not None:
            raise RuntimeError("LoadGenerator.start() was already called; make a new generator")
        self._thread = threading.Thread(target=self.run, args=(duration_s,), name="ebb-loadgen", daemon=True)
        self._thread.start()

    def stop(self, wait_s: float = 60.0) -> LoadResults:
        """Stop sending, give in-flight requests up to ``wait_s`` to answer (the rest count as
        failed with status 0), join the thread and return the results."""
        loop, thread = self._loop, self._thread
        if thread is not None and loop is not None and thread.is_alive():
            self._drain_s = wait_s
            sched = self._scheduler
            if sched is not None:
                loop.call_soon_threadsafe(sched.cancel)
            thread.join(timeout=wait_s + 30.0)
        return self.results()

    def wait(self, timeout_s: float | None = None) -> bool:
        """Block until a :meth:`start`-ed replay finished; False if ``timeout_s`` passed first."""
        if self._thread is None:
            return True
        self._thread.join(timeout_s)
        return not self._thread.is_alive()

    def results(self) -> LoadResults:
        """The requests sent so far (a snapshot while running)."""
        n = self._sent
        ok = self._ok[:n].copy()
        return LoadResults(self.indices[:n].copy(), self._sent_s[:n].copy(), ok, self._ttft[:n].copy(),
                           self._e2e[:n].copy(), self._status[:n].copy(), int(n - ok.sum()))

    # ---- the loop --------------------------------------------------------------------------------

    async def _main(self, duration_s: float | None) -> None:
        self._loop = asyncio.get_running_loop()
        connector = aiohttp.TCPConnector(limit=CONNECTION_LIMIT)
        async with aiohttp.ClientSession(connector=connector, timeout=self._timeout) as session:
            pending: set[asyncio.Task[None]] = set()
            self._scheduler = asyncio.create_task(self._schedule(session, pending, duration_s))
            try:
                await self._scheduler
            except asyncio.CancelledError:
                pass  # stop(): no more sends; the in-flight ones may still finish
            if pending:
                await asyncio.wait(set(pending), timeout=self._drain_s)
            for task in list(pending):
                task.cancel()
            if pending:
                await asyncio.gather(*pending, return_exceptions=True)

    async def _schedule(self, session: aiohttp.ClientSession, pending: set[asyncio.Task[None]],
                        duration_s: float | None) -> None:
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        for k in range(len(self.indices)):
            at = float(self._offsets_s[k])
            if duration_s is not None and at >= duration_s:
                return
            delay = t0 + at - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            elif k % 64 == 0:
                await asyncio.sleep(0)  # when far behind, still let answers be read
            task = asyncio.create_task(self._one(session, k))
            pending.add(task)
            task.add_done_callback(pending.discard)
            self._sent = k + 1

    async def _one(self, session: aiohttp.ClientSession, k: int) -> None:
        loop = asyncio.get_running_loop()
        payload = {"input_tokens": int(self._tin[k]), "output_tokens": int(self._tout[k])}
        self._sent_s[k] = time.time()
        t = loop.time()
        try:
            async with session.post(self.endpoint, json=payload) as resp:
                status = resp.status
                if status == 200:
                    body = await resp.json()
                    ttft = float(body.get("router_queue_ms", 0.0)) + float(body["ttft_ms"])
                    self._e2e[k] = (loop.time() - t) * 1000.0
                    self._ttft[k] = ttft
                    self._ok[k] = True
                else:
                    await resp.read()
                self._status[k] = status
        except (aiohttp.ClientError, asyncio.TimeoutError, ValueError, KeyError, TypeError, AttributeError):
            self._status[k] = 0
