"""An inference worker on loopback whose service time follows the calibrated latency model.

``python -m ebb.demo.worker --name W --port 0 --max-batch 8 --warmup-s 5 --speed 1.0`` binds
127.0.0.1, prints exactly one stdout line ``LISTENING http://127.0.0.1:PORT`` once bound, and serves
``POST /v1/generate``, ``GET /healthz``, ``GET /stats?since=SEQ``, ``GET /metrics`` and vLLM's sleep
endpoints (``POST /sleep``, ``POST /wake_up``, ``GET /is_sleeping``, below).

Service model (:class:`ebb.model.latency.LatencyModel`, the simulator's H200 fit, as in
``ebb.sim.request_engine``): requests wait in a FIFO until one of ``max_batch`` slots is free;
admitted requests are prefilled one at a time (``prefill_ms(input_tokens)``), which produces their
first token; then one decode step (``step_ms(batch)``) advances every running sequence by one token,
so a request needs ``output_tokens − 1`` steps after prefill. All admitted requests are prefilled
before the next decode step (prefill stalls decode). ``--speed K`` divides every service time by K.

Guarantees:

* One asyncio task drives the batch with one timer per prefill or step, not one per request. Steps
  are scheduled on a deadline that advances by the modelled time, so timer granularity (1 ms with
  epoll) does not accumulate; a lag over 50 ms is forgiven rather than caught up in a burst.
* ``ttft_ms`` = arrival at the worker → end of its prefill; ``e2e_ms`` = arrival → last token, both
  measured on the monotonic clock. ``prefill_busy_s_total`` counts modelled (÷ speed) seconds.
* ``/healthz`` and ``/v1/generate`` answer 503 for ``--warmup-s`` after start (cold start) and
  once draining. SIGTERM (or the death of ``--parent-pid``) starts a drain: new requests get 503,
  in-flight ones finish, and the process exits 0 — or 1 if ``--drain-timeout-s`` (120 s) passes.

Sleep mode, with the semantics of vLLM's dev endpoints (``vllm/entrypoints/serve/dev/sleep/api_router.py``):

* ``POST /sleep?level=1|2`` (default 1) answers 200 with an empty body at once; another level is a
  400. From then ``/v1/generate`` answers 503 (real vLLM V1 parks such a request until the client
  times out, vllm #45268: an actuator must take a replica out of routing and drain it *before* it
  sleeps, as :class:`~ebb.actuate.local.LocalActuator` does). Requests already admitted finish.
* ``POST /wake_up`` (optional repeated ``tags=weights`` / ``tags=kv_cache``; none: both) answers 200
  with an empty body once the wake completes, ``--wake-s`` (2 s) after the call; a tag not in that
  list is a 400, and a wake of an awake worker answers at once.
* ``GET /is_sleeping`` → ``{"is_sleeping": bool}``: true from the sleep until every part (weights,
  KV cache) is awake again, so through the whole wake. ``/healthz`` stays 200 while asleep (vLLM's
  ``/health`` does): only ``/is_sleeping`` or the gauge says whether a worker sleeps.
* The gauge :data:`~ebb.model.live.WORKER_SLEEP_STATE` (``sleep_state`` = awake, weights_offloaded,
  discard_all; one of them 1) is vLLM's ``vllm:engine_sleep_state`` in the worker's naming.
* Fault switch for tests: ``--wake-fails error`` answers every wake with 500 at once and stays
  asleep; ``--wake-fails hang`` never completes a wake (the call hangs, ``is_sleeping`` stays true).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Final

from aiohttp import web
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from ebb.demo.stats import (
    MAX_BODY_BYTES, BadRequest, CompletionRing, GenerateRequest, parse_generate, parse_since, stats_envelope,
)
from ebb.model import live as names
from ebb.model.latency import H200_DEFAULT, LatencyModel

__all__ = ["SLEEP_STATES", "WAKE_FAULTS", "Engine", "WorkerServer", "main"]

MAX_LAG_S: Final = 0.05
"""A schedule lag beyond this is dropped instead of being caught up with back-to-back steps."""
SLEEP_STATES: Final = ("awake", "weights_offloaded", "discard_all")
"""The gauge's ``sleep_state`` values by sleep level (0 = awake), as vLLM names them."""
WAKE_FAULTS: Final = ("none", "error", "hang")
"""``--wake-fails``: wakes work, answer 500 at once, or never complete."""
_PARTS: Final = frozenset(("weights", "kv_cache"))
"""What a sleep puts away and ``/wake_up?tags=`` brings back (vLLM's tags)."""


@dataclass(eq=False)
class _Seq:
    req: GenerateRequest
    arrival: float
    done: asyncio.Future[tuple[float, float]]
    remaining: int = 0
    ttft_ms: float = 0.0


@dataclass
class Engine:
    """The continuous-batching loop. Call :meth:`run` as one task; :meth:`submit` from handlers."""

    max_batch: int
    speed: float = 1.0
    model: LatencyModel = H200_DEFAULT
    ring: CompletionRing = field(default_factory=CompletionRing)
    prefill_busy_s: float = 0.0
    completed: int = 0
    waiting: deque[_Seq] = field(default_factory=deque)
    admitted: deque[_Seq] = field(default_factory=deque)
    running: list[_Seq] = field(default_factory=list)
    _wake: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def slots_used(self) -> int:
        """Sequences holding a batch slot: admitted (prefilling or about to) plus decoding."""
        return len(self.admitted) + len(self.running)

    @property
    def idle(self) -> bool:
        return not (self.waiting or self.admitted or self.running)

    async def submit(self, req: GenerateRequest) -> tuple[float, float]:
        """Queue ``req`` and wait for its last token; returns ``(ttft_ms, e2e_ms)``."""
        loop = asyncio.get_running_loop()
        seq = _Seq(req, loop.time(), loop.create_future())
        self.waiting.append(seq)
        self._wake.set()
        return await seq.done

    def _finish(self, seq: _Seq, now: float) -> None:
        e2e_ms = (now - seq.arrival) * 1000.0
        self.completed += 1
        self.ring.add(seq.ttft_ms, e2e_ms)
        if not seq.done.done():
            seq.done.set_result((seq.ttft_ms, e2e_ms))

    async def run(self) -> None:
        clock = asyncio.get_running_loop().time
        deadline = clock()
        while True:
            while self.waiting and self.slots_used < self.max_batch:
                self.admitted.append(self.waiting.popleft())
            if not self.admitted and not self.running:
                self._wake.clear()
                await self._wake.wait()
                deadline = clock()
                continue
            deadline = max(deadline, clock() - MAX_LAG_S)
            if self.admitted:
                seq = self.admitted[0]
                dur = self.model.prefill_ms_scalar(float(seq.req.input_tokens)) / 1000.0 / self.speed
                deadline += dur
                await _sleep_until(clock, deadline)
                self.admitted.popleft()
                self.prefill_busy_s += dur
                now = clock()
                seq.ttft_ms = (now - seq.arrival) * 1000.0
                seq.remaining = seq.req.output_tokens - 1
                if seq.remaining <= 0:
                    self._finish(seq, now)
                else:
                    self.running.append(seq)
                continue
            deadline += self.model.step_ms_scalar(float(len(self.running))) / 1000.0 / self.speed
            await _sleep_until(clock, deadline)
            now = clock()
            still: list[_Seq] = []
            for seq in self.running:
                seq.remaining -= 1
                if seq.remaining <= 0:
                    self._finish(seq, now)
                else:
                    still.append(seq)
            self.running = still


async def _sleep_until(clock: Callable[[], float], deadline: float) -> None:
    delay = deadline - clock()
    # Always yield, so HTTP handlers run even when the schedule is behind.
    await asyncio.sleep(delay if delay > 0 else 0)


class WorkerServer:
    """The HTTP face of one worker: readiness, drain, ``/stats`` and a private metrics registry."""

    def __init__(self, name: str, engine: Engine, warmup_s: float, *, wake_s: float = 2.0,
                 wake_fails: str = "none") -> None:
        if wake_fails not in WAKE_FAULTS:
            raise ValueError(f"wake_fails must be one of {', '.join(WAKE_FAULTS)}, got {wake_fails!r}")
        self.name = name
        self.engine = engine
        self._ready_at = time.monotonic() + warmup_s
        self.draining = False
        self.handling = 0
        self.wake_s, self.wake_fails = wake_s, wake_fails
        self.sleep_level = 0
        """0 awake, else the level of the last sleep (1 weights offloaded, 2 discarded) until fully awake."""
        self.asleep_parts: frozenset[str] = frozenset()
        """Parts (weights, kv_cache) still asleep: ``/is_sleeping`` is true while any is."""
        self.registry = CollectorRegistry()
        self.registry.register(self)
        self.app = web.Application(client_max_size=MAX_BODY_BYTES)
        self.app.add_routes([web.post("/v1/generate", self.generate), web.get("/healthz", self.healthz),
                             web.get("/stats", self.stats), web.get("/metrics", self.metrics),
                             web.post("/sleep", self.sleep), web.post("/wake_up", self.wake_up),
                             web.get("/is_sleeping", self.is_sleeping)])

    def collect(self) -> Iterator[Metric]:
        """Prometheus collector protocol: every value is read from the engine at scrape time."""
        e, lbl, val = self.engine, ["worker"], [self.name]
        for metric, doc, v in ((names.WORKER_RUNNING, "Sequences holding a batch slot", e.slots_used),
                               (names.WORKER_WAITING, "Requests waiting for a batch slot", len(e.waiting)),
                               (names.WORKER_MAX_BATCH, "Batch slots", e.max_batch),
                               (names.WORKER_READY, "1 once warm, awake and not draining", int(self.ready))):
            g = GaugeMetricFamily(metric, doc, labels=lbl)
            g.add_metric(val, float(v))
            yield g
        g = GaugeMetricFamily(names.WORKER_SLEEP_STATE, "Sleep state (vLLM's engine_sleep_state): 1 for the "
                              "state the worker is in", labels=["worker", "sleep_state"])
        for level, state in enumerate(SLEEP_STATES):
            g.add_metric([self.name, state], float(level == self.sleep_level))
        yield g
        for metric, doc, total in ((names.WORKER_PREFILL_BUSY, "Seconds spent prefilling", e.prefill_busy_s),
                                   (names.WORKER_REQUESTS, "Requests completed", float(e.completed))):
            c = CounterMetricFamily(metric, doc, labels=lbl)
            c.add_metric(val, total)
            yield c

    @property
    def healthy(self) -> bool:
        """Warm and not draining: what ``/healthz`` says (200 even asleep, as vLLM's ``/health``)."""
        return not self.draining and time.monotonic() >= self._ready_at

    @property
    def ready(self) -> bool:
        """Healthy and awake: serves ``/v1/generate``."""
        return self.healthy and not self.asleep_parts

    def _unavailable(self) -> web.Response:
        if self.draining:
            return web.Response(status=503, text=f"worker {self.name} is draining; send to another worker\n")
        if self.asleep_parts:
            return web.Response(status=503, text=f"worker {self.name} is asleep (level {self.sleep_level}); "
                                                 "POST /wake_up first\n")
        left = self._ready_at - time.monotonic()
        return web.Response(status=503, text=f"worker {self.name} is warming up; ready in {left:.1f} s\n")

    async def generate(self, request: web.Request) -> web.Response:
        if not self.ready:
            return self._unavailable()
        try:
            req = parse_generate(await request.read())
        except BadRequest as exc:
            return web.Response(status=400, text=f"{exc}\n")
        self.handling += 1
        try:
            ttft_ms, e2e_ms = await self.engine.submit(req)
        finally:
            self.handling -= 1
        return web.json_response({"worker": self.name, "ttft_ms": ttft_ms, "e2e_ms": e2e_ms})

    async def healthz(self, request: web.Request) -> web.Response:
        return web.Response(text="ok\n") if self.healthy else self._unavailable()

    async def sleep(self, request: web.Request) -> web.Response:
        """``POST /sleep?level=1|2``: 200, empty, at once (module docstring)."""
        level = request.query.get("level", "1")
        if level not in ("1", "2"):
            return web.Response(status=400, text=f"level must be 1 or 2, got {level[:20]!r}\n")
        if self.draining:
            return self._unavailable()
        self.sleep_level, self.asleep_parts = int(level), _PARTS
        return web.Response()

    async def wake_up(self, request: web.Request) -> web.Response:
        """``POST /wake_up[?tags=weights&tags=kv_cache]``: 200, empty, once awake (module docstring)."""
        tags = frozenset(request.query.getall("tags", ())) or _PARTS
        if not tags <= _PARTS:
            return web.Response(status=400, text=f"tags must be among {', '.join(sorted(_PARTS))}\n")
        if not self.asleep_parts & tags:
            return web.Response()
        if self.wake_fails == "error":
            return web.Response(status=500, text=f"worker {self.name}: wake failed (--wake-fails error)\n")
        # "hang": a wake that never completes (the server's shutdown cancels it)
        await asyncio.sleep(self.wake_s if self.wake_fails == "none" else 86_400.0)
        self.asleep_parts -= tags
        if not self.asleep_parts:
            self.sleep_level = 0
        return web.Response()

    async def is_sleeping(self, request: web.Request) -> web.Response:
        return web.json_response({"is_sleeping": bool(self.asleep_parts)})

    async def stats(self, request: web.Request) -> web.Response:
        try:
            since = parse_since(request.query)
        except BadRequest as exc:
            return web.Response(status=400, text=f"{exc}\n")
        e = self.engine
        return web.json_response(stats_envelope(
            "worker", self.name, e.ring, since, ready=self.ready, max_batch=e.max_batch, running=e.slots_used,
            waiting=len(e.waiting), prefill_busy_s_total=e.prefill_busy_s, completed_total=e.completed))

    async def metrics(self, request: web.Request) -> web.Response:
        return web.Response(body=generate_latest(self.registry), headers={"Content-Type": CONTENT_TYPE_LATEST})


async def serve(args: argparse.Namespace) -> int:
    """Run until drained; returns the exit status."""
    loop = asyncio.get_running_loop()
    engine = Engine(args.max_batch, args.speed)
    server = WorkerServer(args.name, engine, args.warmup_s, wake_s=args.wake_s, wake_fails=args.wake_fails)
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    runner = web.AppRunner(server.app, access_log=None, handle_signals=False, shutdown_timeout=5.0)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", args.port)
    await site.start()
    port = runner.addresses[0][1]
    sys.stdout.write(f"LISTENING http://127.0.0.1:{port}\n")
    sys.stdout.flush()
    batcher = asyncio.create_task(engine.run())
    watcher = asyncio.create_task(_watch_parent(args.parent_pid, stop)) if args.parent_pid else None
    await stop.wait()
    server.draining = True
    deadline = time.monotonic() + args.drain_timeout_s
    while not (engine.idle and server.handling == 0) and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    drained = engine.idle and server.handling == 0
    await runner.cleanup()
    for task in (batcher, watcher):
        if task is not None:
            task.cancel()
    if not drained:
        print(f"worker {args.name}: drain timed out after {args.drain_timeout_s} s with requests in flight",
              file=sys.stderr)
    return 0 if drained else 1


async def _watch_parent(parent_pid: int, stop: asyncio.Event) -> None:
    # A worker whose actuator died must not outlive it: reparenting changes getppid().
    while not stop.is_set():
        if os.getppid() != parent_pid:
            stop.set()
        await asyncio.sleep(0.5)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m ebb.demo.worker", description=__doc__.splitlines()[0])
    p.add_argument("--name", required=True, help="worker name (metrics label, /stats name)")
    p.add_argument("--port", type=int, default=0, help="TCP port on 127.0.0.1; 0 picks a free one")
    p.add_argument("--max-batch", type=int, default=8, help="batch slots (concurrent sequences)")
    p.add_argument("--warmup-s", type=float, default=5.0, help="cold start: 503 until this many seconds pass")
    p.add_argument("--speed", type=float, default=1.0, help="divide every service time by this factor")
    p.add_argument("--drain-timeout-s", type=float, default=120.0, help="give up draining after this long")
    p.add_argument("--parent-pid", type=int, default=0, help="exit (draining) once this process is gone")
    p.add_argument("--wake-s", type=float, default=2.0, help="seconds from POST /wake_up to awake")
    p.add_argument("--wake-fails", choices=WAKE_FAULTS, default="none",
                   help="test fault: wakes answer 500 (error) or never complete (hang)")
    return p


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.max_batch < 1 or args.speed <= 0 or args.warmup_s < 0 or args.drain_timeout_s <= 0 or \
            not 0 <= args.wake_s < 3600:
        parser.error("need --max-batch ≥ 1, --speed > 0, --warmup-s ≥ 0, --drain-timeout-s > 0 and "
                     "0 ≤ --wake-s < 3600")
    return asyncio.run(serve(args))


if __name__ == "__main__":
    sys.exit(main())
