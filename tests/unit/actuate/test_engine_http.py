"""EngineHttp (the asleep tier's engine calls) against the in-process vLLM sleep engine; gauge_sum on hostile text."""

from __future__ import annotations

import math
import threading
import time
import urllib.request

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ebb.actuate.engine_http import RUNNING_GAUGE, EngineCallError, EngineHttp, gauge_sum
from ebb.actuate.kube_tier import TierSettings
from ebb.config.tiers import SleepTier
from ebb.errors import ConfigError
from ebb.testing.hostile_http import Handler, HostilePeer, answer, stream
from ebb.testing.vllm_sleep import SleepyEngine


def test_gauge_sum_sums_every_series_and_refuses_what_it_cannot_read() -> None:
    page = ('# HELP vllm:num_requests_running r\nvllm:num_requests_running{engine="0",m="a} b"} 2\n'
            'vllm:num_requests_running{engine="1"} 3.0 1700000000\nvllm:num_requests_running_x 9\n')
    assert gauge_sum(page, RUNNING_GAUGE) == 5.0
    assert gauge_sum("other 1\n", RUNNING_GAUGE) is None  # absent: unknown, never 0
    assert gauge_sum(page + "vllm:num_requests_running NaN\n", RUNNING_GAUGE) is None
    assert gauge_sum(page + "vllm:num_requests_running -1\n", RUNNING_GAUGE) is None
    assert gauge_sum('vllm:num_requests_running{a="x 1\n', RUNNING_GAUGE) is None  # unterminated labels


@settings(max_examples=300, deadline=None)
@given(text=st.text(alphabet=st.sampled_from(list('vlm:_numrequestsig{}="\\ 0123456789.-+eNaIf#\n\t')), max_size=200))
def test_gauge_sum_never_raises_and_gives_a_finite_count_or_none(text: str) -> None:
    v = gauge_sum(RUNNING_GAUGE + text, RUNNING_GAUGE)
    assert v is None or (math.isfinite(v) and v >= 0)


def complete(url: str, out: list[int]) -> threading.Thread:
    def go() -> None:
        try:
            with urllib.request.urlopen(urllib.request.Request(url + "/v1/completions", data=b"{}", method="POST"),
                                        timeout=5) as r:
                out.append(r.status)
        except urllib.error.HTTPError as exc:
            exc.close()
            out.append(exc.code)
    t = threading.Thread(target=go)
    t.start()
    return t


def test_sleep_wake_and_in_flight_follow_vllm_and_a_sleep_aborts_what_runs() -> None:
    with SleepyEngine(service_s=0.5) as e:
        api = EngineHttp(e.url, timeout_s=2)
        assert api.inflight() == 0 and api.is_sleeping() is False
        out: list[int] = []
        t = complete(e.url, out)
        while e.running == 0:
            time.sleep(0.01)
        assert api.inflight() == 1
        api.sleep(1)  # vLLM's default mode=abort: why the actuator drains first
        t.join()
        assert out == [500] and e.aborted == 1 and api.is_sleeping() and e.sleeps == [1]
        assert 'sleep_state="weights_offloaded"} 1.0' in e.metrics_text()
        complete(e.url, out).join()
        assert out[-1] == 503 and e.refused == 1
        with urllib.request.urlopen(urllib.request.Request(e.url + "/wake_up?tags=weights", data=b"", method="POST")):
            pass
        assert api.is_sleeping() and 'sleep_state="awake"} 0.0' in e.metrics_text()  # a partial wake
        api.wake_up()
        assert not api.is_sleeping() and e.wakes == 1
        e.fail_wake = True
        api.sleep(2)
        with pytest.raises(EngineCallError, match="wake_up answered HTTP 500"):
            api.wake_up()
        assert api.is_sleeping() and 'sleep_state="discard_all"} 1.0' in e.metrics_text()
        with pytest.raises(ValueError):
            api.sleep(3)
    with pytest.raises(EngineCallError, match="failed"):
        EngineHttp(e.url, timeout_s=0.5).is_sleeping()  # stopped: refused, one line
    assert EngineHttp(e.url, timeout_s=0.5).inflight() is None


def test_tier_settings_refuse_bad_values_in_one_line_and_bound_the_wake() -> None:
    tier = SleepTier(wake_s=4)
    assert TierSettings(tier).wake_deadline_s == 20.0 and TierSettings(SleepTier(wake_s=1)).wake_deadline_s == 10.0
    for kw in ({"engine_port": 0}, {"drain_budget_s": 0}, {"settle_s": 500.0}, {"sleep_level": 3},
               {"tick_s": 0}, {"scan_s": 0.01}):
        with pytest.raises(ConfigError) as info:
            TierSettings(tier, **kw)
        assert "\n" not in str(info.value)


@pytest.mark.parametrize(("handler", "what"), [
    (answer(b"not an exposition {{{"), "garbage"),
    (answer(b"vllm:num_requests_running 1\n"), "no waiting gauge"),
    (answer(b"vllm:num_requests_running 1\nvllm:num_requests_waiting 1e400\n"), "an infinite count"),
    (answer(b"x", status="500 Internal Server Error"), "a 500"),
    (answer(b"", extra="Location: http://10.0.0.1/\r\n", status="302 Found"), "a redirect, not followed"),
    (stream(b"HTTP/1.1 200 OK\r\nContent-Length: 100000000\r\n\r\n", b"vllm:num_requests_running 0\n" * 2000,
            times=200), "past the size cap"),
    (stream(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n", b"#", times=100, pause_s=0.05),
     "a trickle past the deadline"),
])
def test_a_hostile_engine_page_is_never_read_as_idle(handler: Handler, what: str) -> None:
    peer = HostilePeer(handler)
    try:
        start = time.monotonic()
        assert EngineHttp(peer.url, timeout_s=1.0).inflight() is None, what
        assert time.monotonic() - start < 3.0
        with pytest.raises(EngineCallError) as info:
            EngineHttp(peer.url, timeout_s=1.0).is_sleeping()
        assert "\n" not in str(info.value)
    finally:
        peer.close()
