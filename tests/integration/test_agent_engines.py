"""Engine metrics pages (derived from real captures) → a real Agent over HTTP → buckets and AgentSource.

The pages are the real vLLM V1 capture (../shared/data/engine-metrics/vllm, cncf kops transcript
lines 115-675) and the llama.cpp captures made here, with the values the test controls rewritten
line by line: every request advances the counters and histograms, and a scripted request answers
garbage, HTTP 500, or comes from a restarted engine (counters back near zero).
"""

from __future__ import annotations

import asyncio
import math
import os
import re
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from aiohttp import web

from ebb.agent.server import Agent
from ebb.sources.agent_wire import Bucket
from ebb.sources.agents import AgentSource
from ebb.sources.engines.profiles import PROFILES

SHARED = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "engine-metrics"
VLLM_CAPTURE = SHARED / "vllm" / "cncf__k8s-ai-conformance__v1.35__kops__tests__Test_SchedulingOrchestration_PodAutoscaling__output.md"
LLAMA_BUSY = SHARED / "llamacpp" / "captured-here" / "metrics_busy_4slots_6deferred.txt"
DEADLINE_S = 30.0  # generous: two noisy cores are shared with other test runs
_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(\{[^}]*\})?\s+(\S+)$")
_LE = re.compile(r'le="([^"]+)"')


@pytest.fixture(scope="module")
def shared() -> Path:
    if not VLLM_CAPTURE.is_file() or not LLAMA_BUSY.is_file():
        msg = f"shared engine captures not present at {SHARED}"
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI must provide ../shared: {msg}")
        pytest.skip(msg)
    return SHARED


def rewrite(template: str, gauges: dict[str, float], histograms: dict[str, dict[float, int]]) -> str:
    """``template`` with the named samples' values replaced (histograms: observations per upper bound)."""
    out = []
    for line in template.splitlines():
        m = _SAMPLE.match(line)
        if m is None:
            out.append(line)
            continue
        name, labels, _ = m.groups()
        value: float | None = gauges.get(name)
        for fam, obs in histograms.items():
            if name == f"{fam}_bucket":
                le = _LE.search(labels or "")
                bound = math.inf if le is None or le.group(1) == "+Inf" else float(le.group(1))
                value = float(sum(n for u, n in obs.items() if u <= bound))
            elif name == f"{fam}_count":
                value = float(sum(obs.values()))
            elif name == f"{fam}_sum":
                value = float(sum(u * n for u, n in obs.items() if math.isfinite(u)))
        out.append(line if value is None else f"{name}{labels or ''} {value!r}")
    return "\n".join(out) + "\n"


class FakeVllm:
    """A vLLM page that advances on every request: ``ttft_s`` observations (and one +Inf) per request,
    prefill seconds following the wall clock at ``busy_share``; ``script`` maps a request number to
    "garbage", "500" or "reset"."""

    TTFT = "vllm:time_to_first_token_seconds"
    E2E = "vllm:e2e_request_latency_seconds"

    def __init__(self, template: str, *, running: float, waiting: float, kv: float, busy_share: float,
                 ttft_s: float, script: dict[int, str] | None = None) -> None:
        self.template, self.running, self.waiting, self.kv = template, running, waiting, kv
        self.busy_share, self.ttft_s, self.script = busy_share, ttft_s, script or {}
        self.lock = threading.Lock()
        self.n = 0
        self.answered: list[tuple[int, str]] = []
        self._restart()

    def _restart(self) -> None:
        self.start = time.monotonic()
        self.ttft: dict[float, int] = {self.ttft_s: 0, math.inf: 0}
        self.e2e: dict[float, int] = {5.0: 0}

    async def metrics(self, request: web.Request) -> web.Response:
        with self.lock:
            self.n += 1
            action = self.script.get(self.n, "ok")
            if action == "reset":
                self._restart()
            self.ttft[self.ttft_s] += 2
            self.ttft[math.inf] += 1
            self.e2e[5.0] += 3
            self.answered.append((self.n, action))
            if action == "garbage":
                return web.Response(text="<html><body>upstream connect error</body></html>", content_type="text/html")
            if action == "500":
                return web.Response(status=500, text="internal error")
            page = rewrite(self.template, {
                "vllm:num_requests_running": self.running, "vllm:num_requests_waiting": self.waiting,
                "vllm:kv_cache_usage_perc": self.kv,
                "vllm:request_prefill_time_seconds_sum": self.busy_share * (time.monotonic() - self.start)},
                {self.TTFT: dict(self.ttft), self.E2E: dict(self.e2e)})
        return web.Response(text=page, content_type="text/plain")

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/metrics", self.metrics)
        return app


class Servers:
    """aiohttp apps served from one background event loop; ``close()`` releases every socket."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.runners: list[web.AppRunner] = []

    def serve(self, app: web.Application, host: str = "127.0.0.1", port: int = 0) -> str:
        async def go() -> str:
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            await web.TCPSite(runner, host, port).start()
            self.runners.append(runner)
            return f"http://{host}:{runner.addresses[0][1]}"
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


def wait_until(ok: object, what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not ok():  # type: ignore[operator]
        if time.monotonic() > deadline:
            pytest.fail(f"{what} not within {DEADLINE_S} s")
        time.sleep(0.05)


def rows_near(b: Bucket, value_ms: float) -> int:
    vals, wts = b.ttft_ms.rows()
    return int(wts[np.abs(vals - value_ms) <= 0.011 * value_ms].sum())


def test_an_agent_polls_two_vllm_pages_into_gauges_busy_shares_and_upper_bound_rows(
        shared: Path, servers: Servers) -> None:
    template = "\n".join(VLLM_CAPTURE.read_text(encoding="utf-8").splitlines()[114:675])
    a = FakeVllm(template, running=3, waiting=2, kv=0.25, busy_share=0.4, ttft_s=0.08)
    b = FakeVllm(template, running=2, waiting=0, kv=0.5, busy_share=0.2, ttft_s=0.25,
                 script={6: "garbage", 10: "500", 14: "reset"})
    ua, ub = (f"{servers.serve(f.app())}/metrics" for f in (a, b))
    na, nb = (u.removeprefix("http://").removesuffix("/metrics") for u in (ua, ub))
    with Agent(engine=PROFILES["vllm"], engine_endpoints=[ua, ub], max_concurrency=8, name="node-e") as agent:
        source = AgentSource([agent.url], timeout_s=2.0)
        start_s = time.time()
        wait_until(lambda: b.n >= 22 and a.n >= 22, "22 scrapes of each page")
        sig = source.read(start_s)
        with urllib.request.urlopen(f"{agent.url}/metrics", timeout=10) as resp:
            agent_metrics = resp.read().decode()
    buckets = agent.aggregator.since(0)
    seen_a = [k for k in buckets if na in k.workers]
    seen_b = [k for k in buckets if nb in k.workers]
    # gauges as served; slot share = max(running / --max-concurrency, KV usage)
    wa, wb = seen_a[-1].workers[na], seen_b[-1].workers[nb]
    assert (wa.running, wa.waiting, wa.max_batch, wa.ready, wa.slot_ratio) == (3.0, 2.0, 8, True, 3 / 8)
    assert (wb.running, wb.waiting, wb.slot_ratio) == (2.0, 0.0, 0.5)
    # busy share over the agent's receive times: the first answer has none
    assert seen_a[0].workers[na].prefill_busy_ratio is None
    shares = [k.workers[na].prefill_busy_ratio for k in seen_a[1:]]
    assert all(s is not None for s in shares)
    assert float(np.median([s for s in shares if s is not None])) == pytest.approx(0.4, abs=0.08)
    # the garbage answer and the 500 are missing endpoints, never filled in, and counted
    assert sum(ub in k.missing and nb not in k.workers for k in buckets) >= 2
    errors = re.search(rf'ebb_agent_poll_errors_total{{endpoint="{re.escape(ub)}"}} (\S+)', agent_metrics)
    assert errors is not None and float(errors.group(1)) >= 2
    # the restarted engine: its counters went back, so that interval has no share and no rows
    after_first = seen_b[1:]
    assert any(k.workers[nb].prefill_busy_ratio is None and rows_near(k, 250.0) == 0 for k in after_first)
    # latency rows at the bucket upper bounds: 80 ms (a), 250 ms (b), +Inf at 10 x 2560 s
    a_rows = sum(rows_near(k, 80.0) for k in buckets)
    assert 2 * (len(seen_a) - 1) <= a_rows <= 2 * (a.n - 1) and a_rows % 2 == 0
    assert all(v in (80.0, 250.0, 25_600_000.0) or any(abs(v - u) <= 0.011 * u for u in (80.0, 250.0, 25_600_000.0))
               for k in buckets for v in k.ttft_ms.rows()[0].tolist())
    # a missed scrape delays b's rows to its next good answer, it never loses them
    assert max(rows_near(k, 250.0) for k in buckets) >= 2
    assert all(k.latency_from == "workers" for k in buckets if k.workers)
    # AgentSource: times where every worker that answered has a share reach the fine signals, summed
    # over those workers; a missing endpoint lowers replicas_seen there (the controller's completeness
    # check then blocks scale-down and extrapolates the demand for scale-ups)
    f = sig.fine
    assert len(f.t_s) >= 5 and np.all(np.diff(f.t_s) > 0)
    usable = {k.ts_ns / 1e9: k for k in buckets
              if k.workers and all(w.prefill_busy_ratio is not None for w in k.workers.values())}
    assert set(f.t_s.tolist()) <= set(usable)
    for t, slot in zip(f.t_s.tolist(), f.slot_replicas.tolist(), strict=True):
        assert slot == pytest.approx(sum(w.slot_ratio for w in usable[t].workers.values()), rel=1e-9)
    both = np.array([len(usable[t].workers) == 2 for t in f.t_s.tolist()])
    assert both.sum() >= 5
    np.testing.assert_allclose(f.slot_replicas[both], 3 / 8 + 0.5, rtol=1e-9)
    assert float(np.median(f.prefill_replicas[both])) == pytest.approx(0.6, abs=0.12)
    ttft_rows = ~np.isnan(f.done_ttft_ms)
    assert f.done_weight[ttft_rows].sum() > 0 and float(np.nanmax(f.done_ttft_ms)) >= 600_000.0
    assert sig.replicas_seen == (2 if both.all() else 1) and set(sig.inflight_by_replica) == {na, nb}


def test_an_agent_reads_llama_cpp_slots_from_the_flag_and_its_prompt_seconds_as_busy(
        shared: Path, servers: Servers) -> None:
    template = LLAMA_BUSY.read_text(encoding="utf-8")
    t0 = time.monotonic()

    async def metrics(request: web.Request) -> web.Response:
        return web.Response(text=rewrite(template, {"llamacpp:prompt_seconds_total": 0.3 * (time.monotonic() - t0)},
                                         {}), content_type="text/plain")
    app = web.Application()
    app.router.add_get("/metrics", metrics)
    url = f"{servers.serve(app)}/metrics"
    name = url.removeprefix("http://").removesuffix("/metrics")
    with Agent(engine=PROFILES["llamacpp"], engine_endpoints=[url], max_concurrency=4, bucket_ms=200) as agent:
        wait_until(lambda: sum(name in k.workers for k in agent.aggregator.since(0)) >= 6, "6 buckets")
    seen = [k.workers[name] for k in agent.aggregator.since(0) if name in k.workers]
    assert all((w.running, w.waiting, w.max_batch, w.slot_ratio) == (4.0, 6.0, 4, 1.0) for w in seen)
    shares = [w.prefill_busy_ratio for w in seen[1:] if w.prefill_busy_ratio is not None]
    assert len(shares) == len(seen) - 1 and float(np.median(shares)) == pytest.approx(0.3, abs=0.06)
    assert all(k.ttft_ms.count == 0 for k in agent.aggregator.since(0))  # llama.cpp has no latency histograms


def test_the_workers_a_router_lists_are_polled_as_engines_and_the_router_as_stats(
        shared: Path, servers: Servers) -> None:
    template = "\n".join(VLLM_CAPTURE.read_text(encoding="utf-8").splitlines()[114:675])
    eng = FakeVllm(template, running=1, waiting=0, kv=0.1, busy_share=0.1, ttft_s=0.08)
    worker = servers.serve(eng.app())
    listed = [{"name": "w0", "url": worker, "max_batch": 8, "inflight": 0, "draining": False}]

    async def stats(request: web.Request) -> web.Response:
        return web.json_response({"version": 1, "kind": "router", "name": "router", "now_s": time.time(), "seq": 0,
                                  "ready": True, "queued": 1, "inflight": 1, "completed_total": 0,
                                  "failed_total": 0, "completions": []})

    async def workers(request: web.Request) -> web.Response:
        return web.json_response(listed)
    app = web.Application()
    app.router.add_get("/stats", stats)
    app.router.add_get("/workers", workers)
    router = servers.serve(app)
    name = worker.removeprefix("http://")
    with Agent(endpoints_from=router, engine=PROFILES["vllm"], discover_s=0.2) as agent:
        wait_until(lambda: any(name in k.workers and "router" in k.routers for k in agent.aggregator.since(0)),
                   "a bucket with the router and the engine worker")
        assert f"{worker}/metrics" in agent.aggregator.endpoints and router in agent.aggregator.endpoints
    b = next(k for k in agent.aggregator.since(0) if name in k.workers and "router" in k.routers)
    assert b.workers[name].slot_ratio == pytest.approx(0.1) and b.routers["router"].queued == 1.0
    assert b.latency_from == "router"  # client view first, as with Ebb workers


def test_engine_pods_discovered_on_this_node_are_polled_and_an_unready_one_is_dropped(
        shared: Path, servers: Servers) -> None:
    pytest.importorskip("kubernetes")
    from kubernetes import client

    from ebb.agent.kube_pods import PodLister
    from ebb.testing.fake_kube import FakeKubeApiServer

    template = "\n".join(VLLM_CAPTURE.read_text(encoding="utf-8").splitlines()[114:675])
    e1 = FakeVllm(template, running=1, waiting=0, kv=0.2, busy_share=0.1, ttft_s=0.08)
    e2 = FakeVllm(template, running=2, waiting=1, kv=0.4, busy_share=0.1, ttft_s=0.08)
    port = int(servers.serve(e1.app()).rsplit(":", 1)[1])
    try:
        servers.serve(e2.app(), host="127.0.0.2", port=port)
    except OSError as exc:
        pytest.skip(f"cannot listen on 127.0.0.2:{port} here: {exc}")
    with FakeKubeApiServer() as fake:
        fake.add_pod("vllm-1", {"app": "vllm"}, node="node-a", ip="127.0.0.1", namespace="serving")
        fake.add_pod("vllm-2", {"app": "vllm"}, node="node-a", ip="127.0.0.2", namespace="serving", ready=False)
        fake.add_pod("vllm-3", {"app": "vllm"}, node="node-b", ip="127.0.0.3", namespace="serving")
        api = client.ApiClient(fake.configuration())
        try:
            lister = PodLister("app=vllm", "node-a", port, namespace="serving", api_client=api)
            with Agent(engine=PROFILES["vllm"], engine_pods=lister, discover_s=0.2) as agent:
                n1, n2 = f"127.0.0.1:{port}", f"127.0.0.2:{port}"
                wait_until(lambda: any(n1 in k.workers for k in agent.aggregator.since(0)), "the ready pod polled")
                assert all(n2 not in k.workers for k in agent.aggregator.since(0))
                fake.set_pod_ready("vllm-2", True, namespace="serving")
                wait_until(lambda: any({n1, n2} <= set(k.workers) for k in agent.aggregator.since(0)),
                           "both pods polled")
                fake.set_pod_ready("vllm-1", False, namespace="serving")
                wait_until(lambda: agent.aggregator.endpoints == (f"http://{n2}/metrics",), "the unready pod dropped")
                t_drop = agent.aggregator.newest_ns or 0
                wait_until(lambda: (agent.aggregator.newest_ns or 0) > t_drop + 300_000_000, "3 more buckets")
            later = [k for k in agent.aggregator.since(t_drop)]
            # the dropped pod is never polled again; the ready one is, in most buckets (under load a
            # poll of it may time out: missing, never filled in)
            assert later and all(n1 not in k.workers and not any(n1 in m for m in k.missing) for k in later[1:])
            assert sum(set(k.workers) == {n2} for k in later[1:]) >= len(later[1:]) // 2
            assert all("127.0.0.3" not in u for u in agent.aggregator.endpoints)
        finally:
            api.close()


def test_an_engine_without_metrics_is_missing_counted_and_logged_with_the_fix(
        servers: Servers, caplog: pytest.LogCaptureFixture) -> None:
    async def no_metrics(request: web.Request) -> web.Response:
        return web.Response(status=501, text="This server does not support metrics endpoint")
    app = web.Application()
    app.router.add_get("/metrics", no_metrics)
    url = f"{servers.serve(app)}/metrics"
    with caplog.at_level("WARNING", logger="ebb.agent.server"):
        with Agent(engine=PROFILES["llamacpp"], engine_endpoints=[url], max_concurrency=2) as agent:
            wait_until(lambda: len(agent.aggregator.since(0)) >= 3, "3 buckets")
    buckets = agent.aggregator.since(0)
    assert all(b.missing == (url,) and not b.workers for b in buckets)
    assert any("start llama-server with --metrics" in r.getMessage() for r in caplog.records)


def _healthz(agent: Agent) -> tuple[int, dict[str, object]]:
    import json
    import urllib.error
    try:
        with urllib.request.urlopen(agent.url + "/healthz", timeout=5) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_an_agent_whose_discovery_fails_and_polls_nothing_is_unhealthy_and_says_why() -> None:
    # Red-team T3-M5: a discovery that fails every time left the agent polling nothing, healthz 200.
    def refusing() -> list[str]:
        raise RuntimeError("the API server refused the pod listing")

    with Agent(engine=PROFILES["vllm"], engine_pods=refusing, discover_s=0.2) as agent:
        wait_until(lambda: _healthz(agent)[0] == 503, "healthz 503")
        status, body = _healthz(agent)
        assert body["endpoints"] == 0 and "refused the pod listing" in str(body["reason"])
    with Agent(engine=PROFILES["vllm"], engine_pods=lambda: [], discover_s=0.2) as agent:  # a node without pods
        wait_until(lambda: len(agent.aggregator.since(0)) >= 3, "3 buckets")
        status, body = _healthz(agent)
        assert status == 200 and body["ok"] is True and body["endpoints"] == 0 and "reason" not in body
