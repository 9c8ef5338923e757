"""read_engine / interval / LatencyDelta on synthetic text: sums, histogram assembly and validation, resets, quantiles."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from ebb.errors import ConfigError, InputError
from ebb.sources.engines import PROFILES, EngineProfile, HistogramSpec, interval, load_engines_file, read_engine_text
from ebb.sources.engines.reading import LatencyDelta

VLLM = PROFILES["vllm"]


def hist(family: str, bounds: list[str], counts: list[float], labels: str = "", total: float | None = None) -> str:
    sep = "," if labels else ""
    out = [f"{family}_bucket{{{labels}{sep}le=\"{b}\"}} {c}" for b, c in zip(bounds, counts)]
    out.append(f"{family}_count{{{labels}}} {counts[-1] if total is None else total}")
    out.append(f"{family}_sum{{{labels}}} 1.5")
    return "\n".join(out) + "\n"


def scrape(running: float = 2, waiting: float = 1, ttft: list[float] | None = None, busy: float = 10.0,
           extra: str = "") -> str:
    text = (f'vllm:num_requests_running{{engine="0",model_name="m"}} {running}\n'
            f'vllm:num_requests_waiting{{engine="0",model_name="m"}} {waiting}\n'
            f'vllm:kv_cache_usage_perc{{engine="0",model_name="m"}} 0.25\n'
            f'vllm:request_prefill_time_seconds_sum{{engine="0",model_name="m"}} {busy}\n')
    if ttft is not None:
        text += hist("vllm:time_to_first_token_seconds", ["0.1", "0.5", "1.0", "+Inf"], ttft, 'engine="0"')
    return text + extra


def test_running_and_waiting_are_summed_over_engines_and_kv_is_the_max() -> None:
    text = scrape(extra='vllm:num_requests_running{engine="1",model_name="m"} 3\n'
                        'vllm:num_requests_waiting{engine="1",model_name="m"} 4\n'
                        'vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.75\n')
    r = read_engine_text(text, VLLM, source="s")
    assert (r.running, r.waiting, r.kv_usage_ratio) == (5.0, 5.0, 0.75)
    assert r.busy_s_total == 10.0 and r.max_concurrency is None


def test_deprecated_names_are_fallbacks_only() -> None:
    both = scrape() + 'vllm:gpu_cache_usage_perc{model_name="m"} 0.9\n'
    assert read_engine_text(both, VLLM, source="s").kv_usage_ratio == 0.25
    old = scrape().replace("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
    r = read_engine_text(old, VLLM, source="s")
    assert r.kv_usage_ratio == 0.25 and r.read_from["kv_usage"] == "vllm:gpu_cache_usage_perc"


def test_missing_required_metric_names_the_metrics_tried_the_engine_and_the_fix() -> None:
    with pytest.raises(InputError) as e:
        read_engine_text("llamacpp:prompt_tokens_total 1\n", PROFILES["llamacpp"], source="http://p:8080/metrics")
    msg = str(e.value)
    assert "llama.cpp server (llamacpp) scrape has no running metric: tried llamacpp:requests_processing" in msg
    assert "start llama-server with --metrics" in msg and msg.startswith("http://p:8080/metrics: ")


def test_histograms_from_two_engines_with_the_same_bounds_are_summed_in_seconds() -> None:
    text = scrape(ttft=[1, 3, 4, 5]) + hist("vllm:time_to_first_token_seconds", ["0.1", "0.5", "1.0", "+Inf"],
                                            [0, 1, 1, 2], 'engine="1"')
    h = read_engine_text(text, VLLM, source="s").histograms["ttft"]
    assert h.upper_s.tolist() == [0.1, 0.5, 1.0, math.inf]
    assert h.cumulative.tolist() == [1, 4, 5, 7] and h.count == 7 and h.series == 2 and h.sum_s == 3.0


def test_bounds_are_sorted_numerically_whatever_the_text_order() -> None:
    text = scrape() + ('vllm:time_to_first_token_seconds_bucket{le="+Inf"} 5\n'
                       'vllm:time_to_first_token_seconds_bucket{le="10.0"} 4\n'
                       'vllm:time_to_first_token_seconds_bucket{le="2.0"} 3\n')
    h = read_engine_text(text, VLLM, source="s").histograms["ttft"]
    assert h.upper_s.tolist() == [2.0, 10.0, math.inf] and h.cumulative.tolist() == [3, 4, 5]
    assert math.isnan(h.sum_s)  # no _sum sample: not invented


@pytest.mark.parametrize("body, why", [
    (hist("vllm:time_to_first_token_seconds", ["0.1", "0.5", "+Inf"], [3, 2, 5]), "cumulative counts decrease"),
    (hist("vllm:time_to_first_token_seconds", ["0.1", "0.5"], [1, 2]), 'no le="+Inf" bucket'),
    (hist("vllm:time_to_first_token_seconds", ["0.1", "0.1", "+Inf"], [1, 2, 2]), "appears twice"),
    (hist("vllm:time_to_first_token_seconds", ["0.1", "x", "+Inf"], [1, 2, 2]), "no numeric le"),
    (hist("vllm:time_to_first_token_seconds", ["0.1", "+Inf"], [1, 2], 'engine="0"')
     + hist("vllm:time_to_first_token_seconds", ["0.2", "+Inf"], [1, 2], 'engine="1"'), "different bucket bounds"),
])
def test_invalid_histograms_are_dropped_whole_with_the_reason(body: str, why: str) -> None:
    r = read_engine_text(scrape() + body, VLLM, source="s")
    assert "ttft" not in r.histograms and "ttft" in r.missing
    assert any(why in d for d in r.dropped), r.dropped


def test_a_required_histogram_that_is_invalid_is_an_input_error() -> None:
    strict = EngineProfile(name="strict", title="Strict", source="test", running=("r",), waiting=("w",),
                           ttft=HistogramSpec(("t_ms",), unit_s=1e-3), required=("running", "waiting", "ttft"))
    assert read_engine_text("r 1\nw 0\n" + hist("t_ms", ["100", "+Inf"], [1, 2]), strict,
                            source="s").histograms["ttft"].upper_s.tolist() == [0.1, math.inf]
    with pytest.raises(InputError, match="no ttft metric: tried t_ms; histogram t_ms: cumulative counts decrease"):
        read_engine_text("r 1\nw 0\n" + hist("t_ms", ["100", "+Inf"], [3, 2]), strict, source="s")


def test_label_matchers_select_samples() -> None:
    text = ('tgi_batch_current_size 3\ntgi_queue_size 7\n'
            'tgi_batch_inference_duration_sum{method="prefill"} 2.5\n'
            'tgi_batch_inference_duration_sum{method="decode"} 40\n')
    r = read_engine_text(text, PROFILES["tgi"], source="s")
    assert (r.running, r.waiting, r.busy_s_total) == (3.0, 7.0, 2.5)


def test_kv_outside_zero_one_is_not_used() -> None:
    r = read_engine_text(scrape().replace(" 0.25", " 25"), VLLM, source="s")
    assert r.kv_usage_ratio is None and "kv_usage" in r.missing
    assert any("outside [0, 1]" in d for d in r.dropped)


def test_interval_deltas_busy_ratio_and_upper_bound_quantiles() -> None:
    a = read_engine_text(scrape(ttft=[1, 3, 4, 5], busy=10.0), VLLM, source="s")
    b = read_engine_text(scrape(ttft=[1, 3, 102, 105], busy=10.5), VLLM, source="s")
    iv = interval(a, b, 2.0)
    assert iv.busy_ratio == pytest.approx(0.25) and iv.resets == ()
    d = iv.latency["ttft"]
    assert d.upper_ms.tolist() == [100.0, 500.0, 1000.0, math.inf]
    assert d.counts.tolist() == [0, 0, 98, 2] and d.count == 100
    assert d.quantile_ms(0.5) == 1000.0  # the bucket's upper bound, never its lower one
    assert d.quantile_ms(0.98) == 1000.0
    assert d.quantile_ms(0.99) == math.inf  # rank 99 lies in +Inf: the P99 is not understated
    assert d.quantile_ms(0.0) == 1000.0  # the smallest observation's bucket
    assert math.isnan(interval(a, a, 1.0).latency["ttft"].quantile_ms(0.99))  # no observation in the interval
    with pytest.raises(ValueError):
        d.quantile_ms(1.5)


def test_counter_resets_drop_that_signal_for_the_interval() -> None:
    a = read_engine_text(scrape(ttft=[1, 3, 4, 50], busy=100.0), VLLM, source="s")
    b = read_engine_text(scrape(ttft=[0, 1, 1, 2], busy=0.2), VLLM, source="s")  # the engine restarted
    iv = interval(a, b, 1.0)
    assert iv.busy_ratio is None and iv.latency == {} and set(iv.resets) == {"busy_seconds", "ttft"}
    # a per-bucket decrease hidden behind a larger total is a reset too
    c = read_engine_text(scrape(ttft=[0, 3, 4, 60], busy=100.0), VLLM, source="s")
    assert interval(a, c, 1.0).resets == ("ttft",)


def _created(ttft_created: float, busy_created: float, start: float | None = None) -> str:
    out = (f'vllm:time_to_first_token_seconds_created{{engine="0"}} {ttft_created}\n'
           f'vllm:request_prefill_time_seconds_created{{engine="0",model_name="m"}} {busy_created}\n')
    return out + ("" if start is None else f"process_start_time_seconds {start}\n")


def test_a_reset_that_climbs_past_the_old_value_is_seen_from_the_created_series() -> None:
    # Between the scrapes the engine restarted and counted more than before: no decrease anywhere.
    a = read_engine_text(scrape(ttft=[1, 3, 4, 5], busy=10.0, extra=_created(100.0, 100.0)), VLLM, source="s")
    b = read_engine_text(scrape(ttft=[2, 30, 40, 50], busy=11.0, extra=_created(500.0, 100.0)), VLLM, source="s")
    iv = interval(a, b, 1.0)
    assert iv.resets == ("ttft",) and iv.latency == {} and iv.busy_ratio == 1.0  # busy's own stamp is unchanged
    assert a.created["ttft"] == {(("engine", "0"),): 100.0}
    # Unchanged stamps: a plain interval.
    c = read_engine_text(scrape(ttft=[2, 30, 40, 50], busy=11.0, extra=_created(100.0, 100.0)), VLLM, source="s")
    assert interval(a, c, 1.0).resets == () and interval(a, c, 1.0).latency["ttft"].count == 45


def test_a_changed_process_start_time_resets_every_counter_signal() -> None:
    a = read_engine_text(scrape(ttft=[1, 3, 4, 5], busy=10.0, extra=_created(1.0, 1.0, start=1.7e9)), VLLM, source="s")
    b = read_engine_text(scrape(ttft=[2, 30, 40, 50], busy=11.0, extra=_created(1.0, 1.0, start=1.7e9 + 60)),
                         VLLM, source="s")
    assert a.started_s == 1.7e9
    iv = interval(a, b, 1.0)
    assert set(iv.resets) == {"busy_seconds", "ttft"} and iv.busy_ratio is None and iv.latency == {}
    # A page without either (TGI, llama.cpp): undetectable, documented; the counters read as an increase.
    p = read_engine_text(scrape(ttft=[1, 3, 4, 5], busy=10.0), VLLM, source="s")
    q = read_engine_text(scrape(ttft=[2, 30, 40, 50], busy=11.0), VLLM, source="s")
    assert p.started_s is None and p.created == {} and interval(p, q, 1.0).resets == ()


def test_a_vanished_label_set_with_a_created_stamp_is_a_reset() -> None:
    two = ('vllm:time_to_first_token_seconds_created{engine="0"} 5\n'
           'vllm:time_to_first_token_seconds_created{engine="1"} 5\n')
    a = read_engine_text(scrape(ttft=[1, 3, 4, 5], extra=two), VLLM, source="s")
    b = read_engine_text(scrape(ttft=[1, 3, 4, 6], extra=two.splitlines()[0] + "\n"), VLLM, source="s")
    assert interval(a, b, 1.0).resets == ("ttft",)


def test_a_series_repeated_with_the_same_labels_counts_once() -> None:
    r = read_engine_text(scrape(running=3, extra='vllm:num_requests_running{engine="0",model_name="m"} 3\n'), VLLM,
                         source="s")
    assert r.running == 3.0
    assert any("the same series appears twice; the first is read" in d for d in r.dropped)


def test_busy_ratio_is_clamped_and_interval_checks_its_arguments() -> None:
    a = read_engine_text(scrape(busy=0.0), VLLM, source="s")
    b = read_engine_text(scrape(busy=5.0), VLLM, source="s")
    assert interval(a, b, 1.0).busy_ratio == 1.0  # overlapping per-request prefill sums exceed the wall clock
    with pytest.raises(ValueError):
        interval(a, b, 0.0)
    llama = read_engine_text("llamacpp:requests_processing 1\nllamacpp:requests_deferred 0\n", PROFILES["llamacpp"],
                             source="s")
    with pytest.raises(ValueError, match="different engines"):
        interval(a, llama, 1.0)


def test_latency_delta_quantile_on_fractional_and_single_bucket_counts() -> None:
    d = LatencyDelta(upper_ms=np.array([5.0, math.inf]), counts=np.array([0.5, 0.0]), count=0.5)
    assert d.quantile_ms(1.0) == 5.0 and d.quantile_ms(0.0) == 5.0


def test_a_page_that_is_not_exposition_at_all_says_how_to_turn_metrics_on() -> None:
    body = (b'{"error":{"code":501,"message":"This server does not support metrics endpoint. Start it with '
            b'`--metrics`","type":"not_supported_error"}}')  # llama-server without --metrics
    with pytest.raises(InputError) as e:
        read_engine_text(body, PROFILES["llamacpp"], source="http://p:8080/metrics")
    msg = str(e.value)
    assert msg.startswith("http://p:8080/metrics: no Prometheus exposition sample")
    assert msg.endswith("for llama.cpp server: start llama-server with --metrics (without it /metrics answers 501))")
    assert msg.count("http://p:8080/metrics") == 1 and "\n" not in msg


def sleep_lines(engine: str, awake: float, offloaded: float, discard: float) -> str:
    return "".join(f'vllm:engine_sleep_state{{engine="{engine}",model_name="m",sleep_state="{s}"}} {v}\n'
                   for s, v in (("awake", awake), ("weights_offloaded", offloaded), ("discard_all", discard)))


@pytest.mark.parametrize(("extra", "asleep"), [
    ("", None),  # no gauge: an engine without sleep mode, vLLM before PR #24176
    (sleep_lines("0", 1, 0, 0), False),
    (sleep_lines("0", 0, 1, 0), True),  # level 1
    (sleep_lines("0", 0, 0, 1), True),  # level 2
    (sleep_lines("0", 0, 0, 0), True),  # a partial wake: not awake, no level
    (sleep_lines("0", 1, 0, 0) + sleep_lines("1", 0, 1, 0), True),  # one engine of two asleep
    (sleep_lines("0", 1, 0, 0) + sleep_lines("1", 1, 0, 0), False),
])
def test_the_sleep_gauge_reads_awake_only_when_every_engine_is_fully_awake(extra: str, asleep: bool | None) -> None:
    assert read_engine_text(scrape(extra=extra), VLLM, source="s").asleep is asleep


def test_a_bad_sleep_series_is_dropped_alone_and_an_unreadable_gauge_reads_asleep() -> None:
    r = read_engine_text(scrape(extra=sleep_lines("0", 1, 0, 0).replace("} 1\n", "} 0.5\n", 1)), VLLM, source="s")
    assert r.asleep is True and r.running == 2.0  # its awake series dropped: not known awake, so asleep
    assert any("sleep state 0.5 is neither 0 nor 1" in d for d in r.dropped)
    ok = read_engine_text(scrape(extra=sleep_lines("0", 1, 0, 0) + sleep_lines("1", 1, 0, 7)), VLLM, source="s")
    assert ok.asleep is False and any("discard_all" in d and "7" in d for d in ok.dropped)


def test_a_custom_engine_names_its_sleep_gauge_and_a_bad_name_is_one_line(tmp_path: Path) -> None:
    f = tmp_path / "engines.yaml"
    f.write_text("version: 1\nengines:\n  fork:\n    extends: vllm\n    sleep_state: [fork:sleep_state]\n")
    prof = load_engines_file(f)["fork"]
    text = scrape(extra='fork:sleep_state{sleep_state="awake"} 0\nfork:sleep_state{sleep_state="discard_all"} 1\n')
    assert prof.sleep_state == ("fork:sleep_state",) and read_engine_text(text, prof, source="s").asleep is True
    f.write_text("version: 1\nengines:\n  fork:\n    extends: vllm\n    sleep_state: ['x{a=b}']\n")
    with pytest.raises(ConfigError) as info:
        load_engines_file(f)
    assert "engines.fork.sleep_state" in str(info.value) and "\n" not in str(info.value)
