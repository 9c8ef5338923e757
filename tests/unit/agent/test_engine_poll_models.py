"""The agent's engine poller reads one model per page: ``model`` given, that model's series alone; a page of
several models without one is an InputError naming them (the endpoint then counts as missing), never one pod
summed from two workloads."""

from __future__ import annotations

import pytest

from ebb.agent.engine_poll import EnginePoller, check_engine
from ebb.errors import ConfigError, InputError
from ebb.sources.engines.profiles import PROFILES

URL = "http://10.0.0.7:8000/metrics"


def page(prefill: tuple[float, float] = (1.0, 2.0)) -> bytes:
    return "".join(f'vllm:num_requests_running{{engine="0",model_name="{m}"}} {r}\n'
                   f'vllm:num_requests_waiting{{engine="0",model_name="{m}"}} {w}\n'
                   f'vllm:kv_cache_usage_perc{{engine="0",model_name="{m}"}} {kv}\n'
                   f'vllm:request_prefill_time_seconds_sum{{engine="0",model_name="{m}"}} {b}\n'
                   for m, r, w, kv, b in (("llama-8b", 3, 1, 0.25, prefill[0]), ("qwen-7b", 5, 4, 0.75, prefill[1]))
                   ).encode()


def test_a_two_model_page_without_a_model_is_refused_naming_both() -> None:
    poller = EnginePoller(PROFILES["vllm"], max_concurrency=8)
    with pytest.raises(InputError) as e:
        poller.observe(URL, page(), t_s=1.0)
    assert "serves 2 models (model_name: 'llama-8b', 'qwen-7b')" in str(e.value) and str(e.value).startswith(URL)


def test_the_model_asked_for_is_read_alone_gauges_and_busy_share() -> None:
    poller = EnginePoller(PROFILES["vllm"], max_concurrency=8, model="qwen-7b")
    first = poller.observe(URL, page((1.0, 2.0)), t_s=10.0)
    g = first.gauges
    assert (g.running, g.waiting, g.max_batch, g.slot_ratio) == (5.0, 4.0, 8, 0.75)
    second = poller.observe(URL, page((1.0, 3.0)), t_s=12.0)  # qwen: 1 busy s in 2 s; llama idle
    assert second.gauges.prefill_busy_ratio == pytest.approx(0.5)


def test_a_model_for_an_engine_that_labels_none_is_refused_at_startup() -> None:
    with pytest.raises(ConfigError, match="labels no model"):
        check_engine(PROFILES["llamacpp"], 4, "m")
    with pytest.raises(ConfigError, match="labels no model"):
        EnginePoller(PROFILES["tgi"], 4, model="m")
