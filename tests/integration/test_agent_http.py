"""Fake worker and router servers → a real Agent over HTTP → AgentSource → LiveSignals."""

from __future__ import annotations

import asyncio
import json
import math
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from aiohttp import web

from ebb.agent.server import Agent
from ebb.errors import InputError, SourceUnavailable
from ebb.model.live import LiveSignals
from ebb.sources.agents import AgentSource
from ebb.sources.live import SignalSource
from ebb.testing.etcd import free_port

ALPHA_TOL = 0.01 * (1 + 1e-9)
DEADLINE_S = 20.0  # generous: two noisy cores are shared with other test runs


class FakeStats:
    """A /stats endpoint whose counters follow the wall clock exactly, so the truth is known."""

    def __init__(self, kind: str, name: str, *, busy_share: float = 0.0, running: int = 0,
                 max_batch: int = 8, queued: int = 0) -> None:
        self.kind, self.name = kind, name
        self.busy_share, self.running, self.max_batch, self.queued = busy_share, running, max_batch, queued
        self.start_s = time.time()
        self.lock = threading.Lock()
        self.done: list[list[float]] = []
        self.workers: list[dict[str, Any]] = []

    def complete(self, ttft_ms: float, e2e_ms: float) -> None:
        with self.lock:
            self.done.append([len(self.done) + 1, time.time(), ttft_ms, e2e_ms])

    async def stats(self, request: web.Request) -> web.Response:
        since = int(request.query.get("since", "0"))
        with self.lock:
            now = time.time()
            body: dict[str, Any] = {"version": 1, "kind": self.kind, "name": self.name, "now_s": now,
                                    "seq": len(self.done), "ready": True, "completed_total": len(self.done),
                                    "completions": [r for r in self.done if r[0] > since]}
        if self.kind == "worker":
            body |= {"max_batch": self.max_batch, "running": self.running, "waiting": 1,
                     "prefill_busy_s_total": self.busy_share * (now - self.start_s)}
        else:
            body |= {"queued": self.queued, "inflight": 3, "failed_total": 0}
        return web.json_response(body)

    async def list_workers(self, request: web.Request) -> web.Response:
        return web.json_response(self.workers)

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/stats", self.stats)
        app.router.add_get("/workers", self.list_workers)
        return app


class Servers:
    """aiohttp apps served from one background event loop; ``close()`` releases every socket."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.runners: list[web.AppRunner] = []

    def serve(self, app: web.Application) -> str:
        async def go() -> str:
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            await web.TCPSite(runner, "127.0.0.1", 0).start()
            self.runners.append(runner)
            return f"http://127.0.0.1:{runner.addresses[0][1]}"
        return asyncio.run_coroutine_threadsafe(go(), self.loop).result(10)

    def close(self) -> None:
        async def down() -> None:
            for r in self.runners:
                await r.cleanup()
        asyncio.run_coroutine_threadsafe(down(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


@pytest.fixture
def servers() -> Iterator[Servers]:
    s = Servers()
    try:
        yield s
    finally:
        s.close()


def wait_for(read: Callable[[], LiveSignals], ok: Callable[[LiveSignals], bool]) -> LiveSignals:
    deadline = time.monotonic() + DEADLINE_S
    while True:
        sig = read()
        if ok(sig):
            return sig
        if time.monotonic() > deadline:
            pytest.fail(f"condition not met within {DEADLINE_S} s; last read: {sig}")
        time.sleep(0.1)


def weighted_p99(values: np.ndarray, weights: np.ndarray) -> float:
    """The policy's rule: smallest value whose cumulative weight reaches 99 % of the total."""
    order = np.argsort(values)
    cw = np.cumsum(weights[order])
    return float(values[order][min(int(np.searchsorted(cw, 0.99 * cw[-1])), len(values) - 1)])


def test_agent_buckets_give_the_fleet_shares_and_a_p99_within_the_sketch_bound(servers: Servers) -> None:
    w0 = FakeStats("worker", "w0", busy_share=0.25, running=2)
    w1 = FakeStats("worker", "w1", busy_share=0.5, running=6)
    rt = FakeStats("router", "router", queued=2)
    urls = [servers.serve(f.app()) for f in (w0, w1, rt)]
    with Agent(urls, name="node-a") as agent:
        source = AgentSource([agent.url], timeout_s=2.0)
        assert isinstance(source, SignalSource)
        start_s = time.time()
        rng = np.random.default_rng(11)
        ttft = rng.lognormal(5.0, 1.0, 3000)
        e2e = ttft + rng.lognormal(7.0, 0.5, 3000)
        for i in range(len(ttft)):  # spread over ~0.6 s so completions fill several buckets
            rt.complete(float(ttft[i]), float(e2e[i]))
            if i % 500 == 499:
                time.sleep(0.1)
        w0.complete(1e6, 1e6)  # a worker's view must not leak into the router-view latency
        last_done_s = time.time()
        sig = wait_for(lambda: source.read(start_s),
                       lambda s: s.newest_sample_s is not None and s.newest_sample_s > last_done_s + 0.3)
    f = sig.fine
    assert len(f.t_s) >= 3 and np.all(np.diff(f.t_s) > 0)
    np.testing.assert_allclose(f.prefill_replicas, 0.75, rtol=1e-3)
    np.testing.assert_allclose(f.slot_replicas, 2 / 8 + 6 / 8, rtol=1e-9)
    np.testing.assert_array_equal(f.queued, 2.0)
    assert sig.queued == 2.0 and dict(sig.inflight_by_replica) == {"w0": 3.0, "w1": 7.0}
    is_ttft = ~np.isnan(f.done_ttft_ms)
    assert np.all(np.isnan(f.done_e2e_ms[is_ttft])) and np.all(~np.isnan(f.done_e2e_ms[~is_ttft]))
    assert f.done_weight[is_ttft].sum() == len(ttft) == f.done_weight[~is_ttft].sum()
    for est_rows, col, truth in ((f.done_ttft_ms, is_ttft, ttft), (f.done_e2e_ms, ~is_ttft, e2e)):
        est = weighted_p99(est_rows[col], f.done_weight[col])
        true = weighted_p99(truth, np.ones(len(truth)))
        assert abs(est - true) <= ALPHA_TOL * true
    span_s = (f.done_t_s.max() - f.done_t_s.min())
    assert sig.total_qps is not None and 0 < sig.total_qps <= len(ttft) / max(span_s, 0.1) + 1e-9


def test_a_discovered_worker_is_polled_and_a_removed_one_is_dropped(servers: Servers) -> None:
    w0 = FakeStats("worker", "w0", busy_share=0.1, running=1)
    w1 = FakeStats("worker", "w1", busy_share=0.2, running=2)
    rt = FakeStats("router", "router")
    u0, u1, ur = (servers.serve(f.app()) for f in (w0, w1, rt))
    rt.workers = [{"name": "w0", "url": u0, "max_batch": 8, "inflight": 0, "draining": False},
                  {"name": "w1", "url": u1, "max_batch": 8, "inflight": 0, "draining": True}]
    with Agent(endpoints_from=ur, discover_s=0.2) as agent:
        source = AgentSource([agent.url], timeout_s=2.0)
        t0 = time.time()
        wait_for(lambda: source.read(t0), lambda s: set(s.inflight_by_replica) == {"w0", "w1"})
        rt.workers = rt.workers[:1]
        sig = wait_for(lambda: source.read(time.time() - 0.3),
                       lambda s: len(s.fine.t_s) > 0 and set(s.inflight_by_replica) == {"w0"})
    assert set(sig.inflight_by_replica) == {"w0"}
    np.testing.assert_allclose(sig.fine.prefill_replicas, 0.1, rtol=1e-3)


def test_an_agent_that_is_down_raises_source_unavailable_naming_it(servers: Servers) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(SourceUnavailable, match=dead):
        AgentSource([dead], timeout_s=1.0).read(0.0)
    w0 = FakeStats("worker", "w0", busy_share=0.3, running=1)
    with Agent([servers.serve(w0.app())]) as agent:
        with pytest.raises(SourceUnavailable, match=dead):
            AgentSource([agent.url, dead], timeout_s=1.0).read(0.0)  # partial sums would understate
        partial = AgentSource([agent.url, dead], timeout_s=1.0, allow_partial=True)
        t0 = time.time()
        sig = wait_for(lambda: partial.read(t0), lambda s: len(s.fine.t_s) > 0)
    assert partial.last_failed == (dead,) and set(sig.inflight_by_replica) == {"w0"}


def test_an_agent_page_of_another_version_raises_input_error_naming_the_url(servers: Servers) -> None:
    async def wrong(request: web.Request) -> web.Response:
        return web.json_response({"version": 99, "agent": "x", "bucket_ms": 100, "newest_ns": None,
                                  "buckets": []})
    app = web.Application()
    app.router.add_get("/v1/buckets", wrong)
    url = servers.serve(app)
    with pytest.raises(InputError, match="version") as err:
        AgentSource([url]).read(0.0)
    assert url in str(err.value)


def test_a_failing_endpoint_is_counted_in_metrics_and_left_out_of_buckets(servers: Servers) -> None:
    w0 = FakeStats("worker", "w0", busy_share=0.3, running=1)
    dead = f"http://127.0.0.1:{free_port()}"
    with Agent([servers.serve(w0.app()), dead]) as agent:
        source = AgentSource([agent.url], timeout_s=2.0)
        t0 = time.time()
        wait_for(lambda: source.read(t0), lambda s: s.newest_sample_s is not None and s.newest_sample_s > t0 + 0.3)
        with urllib.request.urlopen(f"{agent.url}/v1/buckets?since_ns=0", timeout=5) as resp:
            page = json.loads(resp.read())
        with urllib.request.urlopen(f"{agent.url}/metrics", timeout=5) as resp:
            metrics = resp.read().decode()
        with urllib.request.urlopen(f"{agent.url}/healthz", timeout=5) as resp:
            assert json.loads(resp.read())["ok"] is True
        sig = source.read(t0)
    buckets = page["buckets"]
    assert buckets and all(b["missing"] == [dead] and set(b["workers"]) == {"w0"} for b in buckets)
    assert len(sig.fine.t_s) == 0  # every bucket misses an endpoint: no fleet sum is invented
    assert sig.inflight_by_replica == {"w0": 2.0}
    errors = [ln for ln in metrics.splitlines() if ln.startswith(f'ebb_agent_poll_errors_total{{endpoint="{dead}"}}')]
    assert errors and float(errors[0].split()[-1]) >= 1
    assert "ebb_agent_buckets_total" in metrics and "ebb_agent_last_poll_age_seconds" in metrics
    age = next(ln for ln in metrics.splitlines() if ln.startswith("ebb_agent_last_poll_age_seconds "))
    assert math.isfinite(float(age.split()[-1]))


def test_gpu_and_host_samples_travel_in_buckets_and_metrics(servers: Servers) -> None:
    from ebb.sources.base import StaticSource, batch_from_columns
    from ebb.sources.host import HostSampler

    gpu = StaticSource(batch_from_columns([time.time_ns()], {"gpu0/util_gpu_pct": [42.0],
                                                             "gpu0/gpm_sm_util_pct": [17.5]}))
    w0 = FakeStats("worker", "w0", busy_share=0.3, running=1)
    with Agent([servers.serve(w0.app())], nvml=gpu, host=HostSampler(per_core=False)) as agent:
        deadline = time.monotonic() + DEADLINE_S
        while True:
            with urllib.request.urlopen(f"{agent.url}/v1/buckets?since_ns=0", timeout=5) as resp:
                buckets = json.loads(resp.read())["buckets"]
            if any(b["gpu"] and "mem_used_pct" in b["host"] for b in buckets):
                break
            assert time.monotonic() < deadline, buckets
            time.sleep(0.1)
        with urllib.request.urlopen(f"{agent.url}/metrics", timeout=5) as resp:
            metrics = resp.read().decode()
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(f"{agent.url}/v1/buckets?since_ns=soon", timeout=5)
        assert err.value.code == 400
        err.value.close()
    assert next(b["gpu"] for b in buckets if b["gpu"]) == {"gpu0/gpm_sm_util_pct": 17.5, "gpu0/util_gpu_pct": 42.0}
    assert 'ebb_agent_gpu{series="gpu0/util_gpu_pct"} 42.0' in metrics
    assert 'ebb_agent_host{series="mem_used_pct"}' in metrics
