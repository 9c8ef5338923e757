"""The load generator: replays a trace in order on its schedule, thins deterministically, counts
failures and refuses to raise the rate."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator

import numpy as np
import pytest
from aiohttp import web

from ebb.errors import ConfigError
from ebb.demo.loadgen import LoadGenerator
from ebb.model.ids import TraceName
from ebb.model.trace import RequestTrace
from ebb.testing.etcd import free_port


def trace_of(arrivals: list[float], tokens_in: list[int] | None = None) -> RequestTrace:
    n = len(arrivals)
    tin = tokens_in if tokens_in is not None else list(range(1, n + 1))
    return RequestTrace(TraceName("synthetic"), np.asarray(arrivals, dtype=np.float64),
                        np.asarray(tin, dtype=np.int64), np.full(n, 3, dtype=np.int64))


class Recorder:
    """A stub ``/v1/generate`` on its own loop: records (monotonic time, input_tokens); answers 500
    for ``input_tokens`` in ``fail``."""

    def __init__(self, fail: frozenset[int] = frozenset()) -> None:
        self.got: list[tuple[float, int]] = []
        self.fail = fail
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.runner: web.AppRunner | None = None
        self.url = asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(10)

    async def _start(self) -> str:
        async def handle(request: web.Request) -> web.Response:
            body = await request.json()
            self.got.append((time.monotonic(), body["input_tokens"]))
            if body["input_tokens"] in self.fail:
                return web.Response(status=500, text="nope")
            return web.json_response({"worker": "w", "ttft_ms": 2.0, "e2e_ms": 3.0, "router_queue_ms": 1.0})

        app = web.Application()
        app.add_routes([web.post("/v1/generate", handle)])
        self.runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=1.0)
        await self.runner.setup()
        await web.TCPSite(self.runner, "127.0.0.1", 0).start()
        return f"http://127.0.0.1:{self.runner.addresses[0][1]}"

    def close(self) -> None:
        assert self.runner is not None
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    r = Recorder(fail=frozenset({4}))
    yield r
    r.close()


def test_requests_are_replayed_in_order_on_the_compressed_schedule(recorder: Recorder) -> None:
    arrivals = [0.0, 0.2, 0.4, 0.6, 1.0]
    gen = LoadGenerator(recorder.url, trace_of(arrivals, [1, 2, 3, 5, 6]), time_scale=2.0)
    res = gen.run()
    assert [tokens for _, tokens in recorder.got] == [1, 2, 3, 5, 6]
    expected = np.asarray(arrivals) / 2.0
    offsets = res.sent_s - res.sent_s[0]
    assert np.all(offsets >= expected - 0.005), offsets
    assert np.all(offsets < expected + 1.0), offsets  # generous: the machine is shared and noisy
    assert list(res.index) == [0, 1, 2, 3, 4] and res.ok.all() and res.failed == 0
    assert list(res.status) == [200] * 5
    np.testing.assert_allclose(res.ttft_ms, 3.0)  # router queue 1 ms + worker TTFT 2 ms
    assert np.all(res.e2e_ms > 0)


def test_only_the_first_duration_s_of_the_trace_is_sent(recorder: Recorder) -> None:
    res = LoadGenerator(recorder.url, trace_of([0.0, 0.1, 5.0, 9.0])).run(duration_s=1.0)
    assert list(res.index) == [0, 1] and len(recorder.got) == 2


def test_non_200_answers_and_unreachable_servers_count_as_failed(recorder: Recorder) -> None:
    res = LoadGenerator(recorder.url, trace_of([0.0, 0.01, 0.02], [3, 4, 5])).run()
    assert list(res.ok) == [True, False, True] and res.failed == 1
    assert list(res.status) == [200, 500, 200] and np.isnan(res.ttft_ms[1])
    dead = LoadGenerator(f"http://127.0.0.1:{free_port()}", trace_of([0.0, 0.01]),
                         request_timeout_s=10.0).run()
    assert dead.failed == 2 and list(dead.status) == [0, 0]


def test_thinning_is_deterministic_by_seed() -> None:
    trace = trace_of(list(np.linspace(0, 100, 4000)), [1] * 4000)
    a = LoadGenerator("http://127.0.0.1:1", trace, rate_scale=0.3, seed=7)
    b = LoadGenerator("http://127.0.0.1:1", trace, rate_scale=0.3, seed=7)
    c = LoadGenerator("http://127.0.0.1:1", trace, rate_scale=0.3, seed=8)
    assert np.array_equal(a.indices, b.indices)
    assert not np.array_equal(a.indices, c.indices)
    assert 0.25 < len(a.indices) / 4000 < 0.35
    assert np.all(np.diff(a.indices) > 0)
    assert len(LoadGenerator("http://127.0.0.1:1", trace).indices) == 4000


@pytest.mark.parametrize("rate_scale", [1.5, 2.0])
def test_a_rate_scale_above_one_is_refused_with_the_reason(rate_scale: float) -> None:
    with pytest.raises(ConfigError, match="duplicating"):
        LoadGenerator("http://127.0.0.1:1", trace_of([0.0]), rate_scale=rate_scale)
    with pytest.raises(ConfigError, match="time_scale"):
        LoadGenerator("http://127.0.0.1:1", trace_of([0.0]), time_scale=0.0)


def test_a_background_replay_can_be_stopped_early(recorder: Recorder) -> None:
    gen = LoadGenerator(recorder.url, trace_of([0.0, 0.01, 30.0, 60.0], [1, 2, 3, 5]))
    gen.start()
    deadline = time.monotonic() + 20
    while len(recorder.got) < 2:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    res = gen.stop(wait_s=10.0)
    assert gen.wait(timeout_s=0)
    assert list(res.index) == [0, 1] and res.failed == 0


def test_hundreds_of_requests_per_second_are_all_answered(recorder: Recorder) -> None:
    n = 600
    res = LoadGenerator(recorder.url, trace_of(list(np.arange(n) / 300.0), [1] * n)).run()
    assert len(res.ok) == n and res.failed == 0 and len(recorder.got) == n
