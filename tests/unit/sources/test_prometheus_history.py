"""Reading a fleet's history from Prometheus: chunks within the 11,000-point limit, steps stitched, clear errors."""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ebb.errors import ConfigError, InputError, SourceUnavailable
from ebb.sources.prometheus_api import PromSeries
from ebb.sources.prometheus_history import (
    HISTORY_METRICS,
    MAX_POINTS,
    HistoryRange,
    chunks,
    deployment_selector,
    increase_query,
    read_history,
    scrape_interval_s,
)
from ebb.sources.promql import Selector

VLLM = HISTORY_METRICS["vllm"]
SEL = Selector.parse('namespace="serving",job="vllm"')
START = 1_709_510_400.0
BOUNDS = ("1.0", "2.0", "5.0", "+Inf")


def _done(t: np.ndarray) -> np.ndarray:
    """Finished requests counted in the step ending at ``t`` (a pattern the test can recompute)."""
    return (np.floor(t / 30.0) % 7).astype(float)


class FakeHistory:
    """A RangeClient answering the reader's query shapes from patterns of time, recording every call."""

    base_url = "http://prom.test:9090"

    def __init__(self, *, replicas: bool = True, ttft: bool = True, counter: bool = True) -> None:
        self.calls: list[tuple[str, float, float, float]] = []
        self.replicas, self.ttft, self.counter = replicas, ttft, counter

    def range(self, query: str, start_s: float, end_s: float, step_s: float, *,
              timeout_s: float | None = None) -> tuple[PromSeries, ...]:
        self.calls.append((query, start_s, end_s, step_s))
        t = start_s + step_s * np.arange(int(round((end_s - start_s) / step_s)) + 1)

        def one(values: np.ndarray, labels: Mapping[str, str] | None = None) -> PromSeries:
            return PromSeries(MappingProxyType(dict(labels or {})), t.copy(), values.astype(float))

        if "count_over_time" in query:
            return (one(np.full(len(t), 120.0)),)
        if "timestamp" in query:
            return (one(np.full(len(t), 7.0)),)
        if "kube_deployment_status_replicas" in query:
            return (one(1.0 + (np.floor(t / 600.0) % 3)),) if self.replicas else ()
        if query.startswith("sum(up"):
            return ()
        if "time_to_first_token" in query and not self.ttft:
            return ()
        if query.startswith("sum by (le)"):
            # bucket le=B holds min(done, j + 1) of the step's requests: cumulative, growing with the bound
            return tuple(one(np.minimum(_done(t), j + 1.0 if b != "+Inf" else 99.0), {"le": b})
                         for j, b in enumerate(BOUNDS))
        if "_sum" in query:
            return (one(_done(t) * 2.5),)
        if not self.counter:
            return ()
        return (one(_done(t)),)


@given(st.integers(1, 60_000), st.integers(1, 20_000))
def test_chunks_cover_every_step_once_within_the_point_limit(steps: int, limit: int) -> None:
    got = chunks(steps, limit)
    assert got[0][0] == 0 and got[-1][1] == steps - 1
    assert all(b - a + 1 <= limit for a, b in got)
    assert all(nxt[0] == cur[1] + 1 for cur, nxt in zip(got, got[1:]))


def test_the_increase_query_counts_a_reset_or_a_new_series_in_full() -> None:
    q = increase_query("vllm:request_success_total", SEL, 30.0, by_le=False)
    x = 'vllm:request_success_total{namespace="serving",job="vllm"}'
    assert q == f"sum(({x} - {x} offset 30s) >= 0 or {x})"
    assert increase_query("a_bucket", Selector(), 15.0, by_le=True) == "sum by (le) ((a_bucket - a_bucket offset 15s) >= 0 or a_bucket)"


def test_a_deployment_becomes_kube_state_metrics_matchers() -> None:
    assert deployment_selector("serving/vllm-llama").render() == 'namespace="serving",deployment="vllm-llama"'
    for bad in ("vllm", "a/b/c", '/x', 'ns/x"y'):
        with pytest.raises(ConfigError, match="NAMESPACE/NAME"):
            deployment_selector(bad)


def test_a_week_in_30_s_steps_is_read_in_two_queries_per_series_and_stitched_exactly() -> None:
    fake = FakeHistory()
    rng = HistoryRange(START, START + 7 * 86_400, 30.0)
    h = read_history(fake, VLLM, SEL, rng, deployment=deployment_selector("serving/vllm-llama"))
    assert rng.steps == 20_160 and h.steps == 20_160
    ranges = [c for c in fake.calls if "count_over_time" not in c[0] and "timestamp" not in c[0]]
    assert all(round((e - s) / st) + 1 <= MAX_POINTS for _, s, e, st in ranges)
    ends = START + 30.0 * np.arange(1, 20_161)  # step k ends at start + (k+1)·step
    assert np.array_equal(h.requests, _done(ends))
    assert h.tokens_in.bounds == (1.0, 2.0, 5.0, math.inf)
    assert np.array_equal(h.tokens_in.counts.sum(axis=1), _done(ends))
    assert h.e2e_s is not None and h.e2e_s.sums is not None and np.array_equal(h.e2e_s.sums, 2.5 * _done(ends))
    assert h.tokens_in.sums is not None and h.ttft_s is not None and h.ttft_s.sums is None
    assert h.replicas is not None and np.array_equal(h.replicas, 1.0 + np.floor((ends - 30.0) / 600.0) % 3)
    assert h.lag_s == 7.0
    assert h.provenance["requests"] == "vllm:request_success_total" and "deployment=\"vllm-llama\"" in h.replicas_from


def test_the_scrape_interval_is_read_from_samples_per_hour() -> None:
    assert scrape_interval_s(FakeHistory(), "vllm:request_success_total", SEL,
                             HistoryRange(START, START + 86_400, 600.0)) == 30.0


def test_no_request_counter_under_the_selector_names_the_selector_and_the_fix() -> None:
    with pytest.raises(InputError, match=r"no finished-request counter series \(vllm:request_success_total\).*"
                                         r"namespace=\"serving\".*fix: check --selector"):
        read_history(FakeHistory(counter=False), VLLM, SEL, HistoryRange(START, START + 3600, 30.0))


def test_without_replica_series_the_history_says_there_is_no_as_run_row() -> None:
    h = read_history(FakeHistory(replicas=False), VLLM, SEL, HistoryRange(START, START + 3600, 30.0),
                     deployment=deployment_selector("serving/x"))
    assert h.replicas is None and any("no as-run row" in n for n in h.notes)


def test_an_engine_without_a_ttft_histogram_still_gives_a_trace() -> None:
    h = read_history(FakeHistory(ttft=False), VLLM, SEL, HistoryRange(START, START + 3600, 30.0))
    assert h.ttft_s is None and h.tokens_out.bins == 120


def test_an_unreachable_server_is_one_input_error_naming_the_url_and_the_fix() -> None:
    class Down(FakeHistory):
        def range(self, query: str, start_s: float, end_s: float, step_s: float, *,
                  timeout_s: float | None = None) -> tuple[PromSeries, ...]:
            raise SourceUnavailable("Prometheus at http://prom.test:9090/api/v1/query_range: connection refused")

    with pytest.raises(InputError, match=r"connection refused.*fix: check that --from-prometheus http://prom.test"):
        read_history(Down(), VLLM, SEL, HistoryRange(START, START + 3600, 30.0))


@pytest.mark.parametrize(("end", "step", "message"), [
    (START + 40 * 86_400, 30.0, "longer than the 31 days"),
    (START + 10, 30.0, "shorter than one step"),
    (START + 30 * 86_400, 2.0, "more than 1,000,000"),
    (START + 3600, 0.0, "must be > 0"),
])
def test_a_range_ebb_will_not_read_is_refused_before_any_query(end: float, step: float, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        HistoryRange(START, end, step)


ENGINE_DATA = Path(__file__).resolve().parents[3] / ".." / "shared" / "data" / "engine-metrics"


@pytest.mark.parametrize("engine", sorted(HISTORY_METRICS))
def test_every_history_metric_name_is_defined_in_the_engine_source_it_cites(engine: str) -> None:
    if not (ENGINE_DATA / "README.md").is_file():
        pytest.skip(f"shared engine-metrics data not present at {ENGINE_DATA} (the cited engine sources)")
    m = HISTORY_METRICS[engine]
    text = "\n".join(p.read_text(encoding="utf-8") for p in (ENGINE_DATA / engine / "source").rglob("*.py"))
    for name in (*m.requests, *m.prompt_tokens, *m.output_tokens, *m.ttft, *m.e2e, *m.service):
        # a counter is defined without the _total its samples carry (prometheus_client adds it)
        assert f'"{name}"' in text or f'"{name.removesuffix("_total")}"' in text, name
