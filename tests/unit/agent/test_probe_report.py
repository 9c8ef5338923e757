"""A probe's report from engine readings: P99 as a bucket's upper bound, busy share over two scrapes, strict JSON."""

from __future__ import annotations

import json

from ebb.agent.probe import PROBE_SIGNALS, probe_report
from ebb.sources.engines.profiles import engine_profile
from ebb.sources.engines.reading import read_engine_text

VLLM = engine_profile("vllm", None)


def _page(running: int, busy_s: float, fast: int, slow: int) -> bytes:
    lines = [f"vllm:num_requests_running {running}", "vllm:num_requests_waiting 1",
             "vllm:gpu_cache_usage_perc 0.5", f"vllm:request_prefill_time_seconds_sum {busy_s}"]
    for le, c in (("0.1", fast), ("2.5", fast + slow), ("+Inf", fast + slow)):
        lines.append(f'vllm:time_to_first_token_seconds_bucket{{le="{le}"}} {c}')
    lines += [f"vllm:time_to_first_token_seconds_count {fast + slow}", "vllm:time_to_first_token_seconds_sum 1"]
    return ("\n".join(lines) + "\n").encode()


def test_one_scrape_reports_latency_since_start_and_no_busy_share() -> None:
    cur = read_engine_text(_page(3, 0.5, 100, 0), VLLM, source="a.txt")
    r = probe_report(VLLM, cur, None, 1.0, source="a.txt", pod="a.txt", max_concurrency=4)
    assert (r["scrapes"], r["interval_s"], r["busy_ratio"]) == (1, None, None)
    assert r["max_concurrency"] == 4 and r["max_concurrency_from"] == "--max-concurrency"
    assert r["latency"]["ttft"] == {"count": 100.0, "p99_ms": 100.0, "p99_above_ms": None, "window": "since start",
                                    "metric": cur.read_from.get("ttft")}
    assert set(r["no_histogram"]) <= set(PROBE_SIGNALS)
    json.dumps(r, allow_nan=False)  # strict JSON: no NaN or Infinity anywhere


def test_two_scrapes_give_the_interval_latency_and_busy_share() -> None:
    prev = read_engine_text(_page(3, 0.5, 100, 0), VLLM, source="a")
    cur = read_engine_text(_page(3, 0.7, 101, 10), VLLM, source="b")
    r = probe_report(VLLM, cur, prev, 2.0, source="a -> b", pod="b")
    assert r["scrapes"] == 2 and r["interval_s"] == 2.0
    assert abs(r["busy_ratio"] - 0.1) < 1e-9  # 0.2 s busy over 2 s
    ttft = r["latency"]["ttft"]
    assert ttft["count"] == 11 and ttft["window"] == "interval" and ttft["p99_ms"] == 2500.0
    json.dumps(r, allow_nan=False)
