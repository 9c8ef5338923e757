"""Engine endpoints in the agent: scrapes → gauges and upper-bound latency rows (pure: no I/O, no clock)."""

from __future__ import annotations

from dataclasses import replace

import math

import numpy as np
import pytest

from ebb.agent.buckets import MAX_PENDING_ROWS, BucketAggregator, EnginePoll
from ebb.agent.engine_poll import (OVERFLOW_MIN_MS, EnginePoller, check_engine, engine_name, latency_rows,
                                   overflow_ms, slot_share)
from ebb.errors import ConfigError, InputError
from ebb.sources.agent_wire import Sketch, WorkerGauges
from ebb.sources.engines.profiles import PROFILES
from ebb.sources.engines.reading import LatencyDelta

URL = "http://10.0.0.7:8000/metrics"
T0 = 1_700_000_000
NS = 1_000_000_000
TTFT_LE = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0,
           80.0, 160.0, 640.0, 2560.0)


def end(k: int) -> int:
    return T0 * NS + k * 100_000_000


def vllm_text(*, running: float = 3, waiting: float = 2, kv: float | None = 0.25, prefill_s: float = 0.0,
              ttft: dict[float, int] | None = None) -> str:
    """A vLLM V1 page (names and labels as in the real capture) with ``ttft`` = observations per upper bound."""
    lab = 'engine="0",model_name="m"'
    lines = ["# TYPE vllm:num_requests_running gauge", f"vllm:num_requests_running{{{lab}}} {running}",
             "# TYPE vllm:num_requests_waiting gauge", f"vllm:num_requests_waiting{{{lab}}} {waiting}"]
    if kv is not None:
        lines += ["# TYPE vllm:kv_cache_usage_perc gauge", f"vllm:kv_cache_usage_perc{{{lab}}} {kv}"]
    lines += ["# TYPE vllm:request_prefill_time_seconds histogram",
              f'vllm:request_prefill_time_seconds_bucket{{{lab},le="+Inf"}} 1.0',
              f"vllm:request_prefill_time_seconds_count{{{lab}}} 1.0",
              f"vllm:request_prefill_time_seconds_sum{{{lab}}} {prefill_s}"]
    obs = ttft or {}
    lines.append("# TYPE vllm:time_to_first_token_seconds histogram")
    for le in (*TTFT_LE, math.inf):
        cum = sum(n for u, n in obs.items() if u <= le)
        text = "+Inf" if math.isinf(le) else repr(le)
        lines.append(f'vllm:time_to_first_token_seconds_bucket{{{lab},le="{text}"}} {float(cum)}')
    total = sum(obs.values())
    lines += [f"vllm:time_to_first_token_seconds_count{{{lab}}} {float(total)}",
              f"vllm:time_to_first_token_seconds_sum{{{lab}}} {sum(u * n for u, n in obs.items() if u < 1e9)}"]
    return "\n".join(lines) + "\n"


# -- Sketch.of_counts ---------------------------------------------------------------------------
def test_weighted_sketch_equals_the_sketch_of_the_repeated_values() -> None:
    vals, counts = [80.0, 250.0, 0.0, 80.0], [3, 1, 2, 0]
    assert Sketch.of_counts(vals, counts) == Sketch.of([80.0] * 3 + [250.0] + [0.0] * 2)
    assert Sketch.of_counts(vals, counts).count == 6
    assert Sketch.of_counts([], []) == Sketch()
    for bad_v, bad_c in (([math.inf], [1]), ([-1.0], [1]), ([1.0], [-1]), ([1.0], [1.5]), ([1.0], [1, 2])):
        with pytest.raises(ValueError):
            Sketch.of_counts(bad_v, bad_c)  # type: ignore[arg-type]


# -- rows at upper bounds -----------------------------------------------------------------------
def test_latency_rows_sit_at_bucket_upper_bounds_and_inf_at_the_overflow_value() -> None:
    upper = np.array([10.0, 80.0, 2_560_000.0, math.inf])
    rows = latency_rows(LatencyDelta(upper_ms=upper, counts=np.array([0.0, 2.0, 0.0, 1.0]), count=3.0))
    assert rows == ((80.0, 2), (25_600_000.0, 1))
    assert overflow_ms([5.0, 100.0, math.inf]) == OVERFLOW_MIN_MS == 600_000.0
    assert overflow_ms([math.inf]) == OVERFLOW_MIN_MS
    # llama.cpp-style 6-digit printing: float noise rounds to whole observations, zero rows vanish
    noisy = LatencyDelta(upper_ms=np.array([1.0, math.inf]), counts=np.array([2.0000004, 0.3]), count=2.3)
    assert latency_rows(noisy) == ((1.0, 2),)


def test_slot_share_is_the_larger_known_term_clamped() -> None:
    assert slot_share(3, 8, 0.25) == pytest.approx(0.375)
    assert slot_share(1, 8, 0.9) == pytest.approx(0.9)
    assert slot_share(20, 8, None) == 1.0
    assert slot_share(2, None, 0.4) == pytest.approx(0.4)
    assert slot_share(2, None, None) is None


def test_an_engine_without_max_concurrency_or_kv_usage_needs_the_flag() -> None:
    with pytest.raises(ConfigError, match="--max-concurrency"):
        check_engine(PROFILES["tgi"], None)
    check_engine(PROFILES["tgi"], 4)
    check_engine(PROFILES["vllm"], None)  # KV usage is enough
    with pytest.raises(ConfigError, match="--max-concurrency"):
        EnginePoller(PROFILES["tgi"], 0)


def test_an_engine_without_a_busy_counter_is_refused_at_startup() -> None:
    # its buckets could never be complete: the controller would silently never scale on it
    with pytest.raises(ConfigError, match="busy-seconds"):
        check_engine(replace(PROFILES["vllm"], busy_seconds=()), 8)
    for p in PROFILES.values():
        check_engine(p, 8)  # every built-in names one


def test_worker_names_are_host_port() -> None:
    assert engine_name("http://10.0.0.7:8000/metrics") == "10.0.0.7:8000"
    assert engine_name("https://pod.example/metrics") == "pod.example:443"
    assert engine_name("http://[fd00::7]:8000/metrics") == "[fd00::7]:8000"
    long = "http://" + "a" * 250 + ".b:8000/metrics"
    assert len(engine_name(long)) == 253 and "@" not in engine_name(long)


# -- one endpoint over scrapes --------------------------------------------------------------------
def test_busy_share_uses_the_agents_receive_times_and_rows_the_histogram_delta() -> None:
    p = EnginePoller(PROFILES["vllm"], max_concurrency=8)
    first = p.observe(URL, vllm_text(prefill_s=10.0, ttft={0.08: 5}).encode(), t_s=100.0)
    assert first.gauges.prefill_busy_ratio is None and first.ttft_ms == ()  # nothing to difference yet
    assert first.name == "10.0.0.7:8000"
    assert (first.gauges.running, first.gauges.waiting, first.gauges.max_batch) == (3.0, 2.0, 8)
    assert first.gauges.slot_ratio == pytest.approx(3 / 8) and first.gauges.ready
    second = p.observe(URL, vllm_text(prefill_s=10.04, ttft={0.08: 7, 0.5: 1, math.inf: 1}).encode(), t_s=100.1)
    assert second.gauges.prefill_busy_ratio == pytest.approx(0.4)
    assert second.ttft_ms == ((80.0, 2), (500.0, 1), (25_600_000.0, 1))
    sk = Sketch.of_counts([v for v, _ in second.ttft_ms], [c for _, c in second.ttft_ms])
    assert sk.quantile(0.5) >= 80.0 * 0.99 and sk.quantile(1.0) >= 600_000.0 * 0.99


def test_a_counter_reset_gives_no_share_and_no_rows_never_negative_ones() -> None:
    p = EnginePoller(PROFILES["vllm"], max_concurrency=8)
    p.observe(URL, vllm_text(prefill_s=50.0, ttft={0.08: 100}).encode(), t_s=1.0)
    restarted = p.observe(URL, vllm_text(prefill_s=0.1, ttft={0.08: 1}).encode(), t_s=1.1)
    assert restarted.gauges.prefill_busy_ratio is None and restarted.ttft_ms == () and p.resets == 1
    after = p.observe(URL, vllm_text(prefill_s=0.12, ttft={0.08: 2}).encode(), t_s=1.2)
    assert after.gauges.prefill_busy_ratio == pytest.approx(0.2) and after.ttft_ms == ((80.0, 1),)


def test_the_engines_max_concurrency_wins_over_the_flag() -> None:
    text = ('nv_trt_llm_request_metrics{request_type="active"} 3\nnv_trt_llm_request_metrics{request_type="waiting"} 1\n'
            'nv_trt_llm_request_metrics{request_type="max"} 16\n')
    got = EnginePoller(PROFILES["triton"], max_concurrency=4).observe(URL, text.encode(), t_s=1.0)
    assert got.gauges.max_batch == 16 and got.gauges.slot_ratio == pytest.approx(3 / 16)


def test_a_page_giving_no_slot_share_is_an_error_not_a_guess() -> None:
    p = EnginePoller(PROFILES["vllm"])  # KV usage expected, flag absent
    assert p.observe(URL, vllm_text(kv=0.5).encode(), t_s=1.0).gauges.slot_ratio == 0.5
    with pytest.raises(InputError, match="--max-concurrency"):
        p.observe(URL, vllm_text(kv=None).encode(), t_s=1.1)


def test_garbage_and_pages_without_the_gauges_are_input_errors_naming_the_metric() -> None:
    p = EnginePoller(PROFILES["llamacpp"], max_concurrency=4)
    with pytest.raises(InputError, match="llamacpp:requests_processing"):
        p.observe(URL, b"# nothing here\nfoo 1\n", t_s=1.0)
    with pytest.raises(InputError):
        p.observe(URL, b"\xff\xfe<html>", t_s=1.0)


# -- in the aggregator ------------------------------------------------------------------------------
def poll(name: str = "10.0.0.7:8000", *, busy: float | None = 0.5, ttft: tuple[tuple[float, int], ...] = (),
         running: float = 2.0) -> EnginePoll:
    return EnginePoll(name, WorkerGauges(running, 1.0, 4, True, running / 4, busy), ttft, ())


def test_engine_polls_are_workers_with_weighted_latency_rows_in_the_closed_bucket() -> None:
    agg = BucketAggregator()
    agg.add(URL)
    assert agg.close(end(0)).missing == (URL,)  # never answered: missing, not zero
    agg.engine_ok(URL, poll(ttft=((80.0, 3), (600_000.0, 1))), end(1))
    b = agg.close(end(1))
    assert b.workers["10.0.0.7:8000"] == poll().gauges and b.missing == ()
    assert b.ttft_ms.count == 4 and b.e2e_ms.count == 0 and b.latency_from == "workers"
    assert b.ttft_ms.quantile(0.5) == pytest.approx(80.0, rel=0.01)
    assert b.ttft_ms.quantile(1.0) == pytest.approx(600_000.0, rel=0.01)
    assert b.latency_names == ("10.0.0.7:8000",)
    assert agg.close(end(2)).missing == (URL,)  # one answer fills one bucket: then it is stale


def test_two_endpoints_with_one_name_are_both_kept_and_rows_are_capped() -> None:
    agg = BucketAggregator()
    other = "https://10.0.0.7:8000/metrics"
    agg.engine_ok(URL, poll(running=1.0), end(0))
    agg.engine_ok(other, poll(running=3.0), end(0))
    b = agg.close(end(0))
    assert set(b.workers) == {f"10.0.0.7:8000@{URL}", f"10.0.0.7:8000@{other}"} and agg.collisions == ("10.0.0.7:8000",)
    agg.engine_ok(URL, poll(ttft=tuple((float(i + 1), 1) for i in range(MAX_PENDING_ROWS + 5))), end(1))
    assert agg.implausible["pending_cap"] == 5
    assert agg.close(end(1)).ttft_ms.count == MAX_PENDING_ROWS


def test_a_router_in_the_fleet_is_the_latency_view_and_engine_rows_are_not_mixed_in() -> None:
    from ebb.agent.buckets import parse_stats

    agg = BucketAggregator()
    router = "http://127.0.0.1:8000"
    agg.poll_ok(router, parse_stats({"version": 1, "kind": "router", "name": "router", "now_s": T0 + 0.05, "seq": 1,
                                     "ready": True, "queued": 0, "inflight": 1, "completed_total": 1,
                                     "completions": [[1, T0 + 0.05, 12.0, 40.0]]}, router), end(0))
    agg.engine_ok(URL, poll(ttft=((80.0, 9),)), end(1))
    b = agg.close(end(1))
    assert b.latency_from == "router" and b.ttft_ms.count == 1 and "10.0.0.7:8000" in b.workers


def test_engine_names_are_refused_when_they_could_forge_a_collision_label() -> None:
    with pytest.raises(ValueError):
        poll(name="a@b")


def test_mangled_pages_raise_input_error_or_read_nothing_else() -> None:
    rng = np.random.default_rng(14)
    base = vllm_text(prefill_s=3.0, ttft={0.08: 5, math.inf: 1}).encode()
    p = EnginePoller(PROFILES["vllm"], max_concurrency=8)
    outcomes = {"ok": 0, "input_error": 0}
    for i in range(300):
        raw = bytearray(base)
        for _ in range(int(rng.integers(1, 12))):
            k = int(rng.integers(0, len(raw)))
            op = int(rng.integers(0, 3))
            if op == 0:
                raw[k] = int(rng.integers(0, 256))
            elif op == 1:
                del raw[k:k + int(rng.integers(1, 40))]
            else:
                raw[k:k] = rng.choice([b"NaN", b"-1", b"+Inf", b"}", b'{le="', b"\n", b"1e400"]).tobytes()
        try:
            got = p.observe(URL, bytes(raw), t_s=float(i))
        except InputError:
            outcomes["input_error"] += 1
            continue
        outcomes["ok"] += 1
        g = got.gauges
        assert 0.0 <= g.slot_ratio <= 1.0 and g.max_batch >= 1 and g.running >= 0 and g.waiting >= 0
        assert g.prefill_busy_ratio is None or 0.0 <= g.prefill_busy_ratio <= 1.0
        assert all(v > 0 and math.isfinite(v) and n > 0 for v, n in got.ttft_ms)
    assert outcomes["ok"] > 0 and outcomes["input_error"] > 0, outcomes
