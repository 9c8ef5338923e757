"""PrometheusSource in engine mode (vLLM, SGLang profiles) against canned Prometheus answers on loopback."""

from __future__ import annotations

import json
import logging
import math
import threading
import urllib.parse
from collections.abc import Iterator, Mapping
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from ebb.errors import ConfigError, InputError, SourceUnavailable
from ebb.sources.engines.profiles import PROFILES, EngineProfile, HistogramSpec
from ebb.sources.live import SignalSource
from ebb.sources.prometheus import PrometheusClient, PrometheusSource
from ebb.sources.promql import EngineQueries, Selector, check_metric_name

VLLM, SGLANG = PROFILES["vllm"], PROFILES["sglang"]
SEL = 'namespace="serving",job="vllm"'
NOW = 1_000.0
STEPS = [990.0 + i for i in range(11)]


class FakePrometheus:
    """Answers each PromQL query with a canned body; unknown queries get an empty answer."""

    def __init__(self) -> None:
        self.answers: dict[str, bytes] = {}
        self.asked: list[str] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                query = urllib.parse.parse_qs(urllib.parse.urlparse(self.path).query).get("query", [""])[0]
                fake.asked.append(query)
                kind = "vector" if self.path.startswith("/api/v1/query?") else "matrix"
                body = fake.answers.get(query, _ok(kind, []))
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
        self.thread.start()

    def matrix(self, query: str, *series: tuple[Mapping[str, str], Mapping[float, float | str]]) -> None:
        self.answers[query] = _ok("matrix", [
            {"metric": dict(labels), "values": [[t, v if isinstance(v, str) else repr(float(v))]
                                                for t, v in sorted(points.items())]} for labels, points in series])

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(10)


def _ok(kind: str, result: Any) -> bytes:
    return json.dumps({"status": "success", "data": {"resultType": kind, "result": result}}).encode()


@pytest.fixture
def fake() -> Iterator[FakePrometheus]:
    server = FakePrometheus()
    try:
        yield server
    finally:
        server.close()


def pod(name: str, job: str = "vllm") -> dict[str, str]:
    return {"pod": name, "job": job, "instance": f"10.0.0.{ord(name[-1]) % 200}:8000"}


def source(fake: FakePrometheus, profile: EngineProfile = VLLM, max_concurrency: int | None = 8,
           **kw: Any) -> PrometheusSource:
    return PrometheusSource(PrometheusClient(fake.url), selector=SEL, engine=profile, max_concurrency=max_concurrency,
                            scrape_interval_s=1.0, max_sample_age_s=3.0, settle_s=0.0, clock=lambda: NOW, **kw)


def fleet(fake: FakePrometheus, src: PrometheusSource, *, running: Mapping[str, float | str] | None = None,
          lag: Mapping[str, float] | None = None, kv: Mapping[str, float | str] | None = None,
          busy: float | str = 0.25, kv_name: int = 0, running_name: int = 0) -> None:
    """Pods a and b: running 4 / 2, waiting 1 each, KV 0.25 / 0.75, scraped 0.5 s before each step."""
    q = src.engine.queries  # type: ignore[union-attr]
    running = running or {"a": 4, "b": 2}
    kv = kv or {"a": 0.25, "b": 0.75}
    lag = {"a": 0.5, "b": 0.5, **(lag or {})}
    fake.matrix(q.running[running_name], *[(pod(p), {t: running[p] for t in STEPS}) for p in ("a", "b")])
    fake.matrix(q.scraped[running_name], *[(pod(p), {t: t - lag[p] for t in STEPS}) for p in ("a", "b")])
    fake.matrix(q.waiting[0], *[(pod(p), {t: 1 for t in STEPS}) for p in ("a", "b")])
    fake.matrix(q.kv[kv_name], *[(pod(p), {t: kv[p] for t in STEPS}) for p in ("a", "b")])
    if q.busy:
        fake.matrix(q.busy[0], (pod("a"), {t: busy for t in STEPS}), (pod("b"), {t: 0.5 for t in STEPS}))


def test_vllm_pods_become_the_fleet_signals_the_controller_reads(fake: FakePrometheus) -> None:
    src = source(fake)
    assert isinstance(src, SignalSource)
    fleet(fake, src)
    sig = src.read(995.0)
    assert sig.fine.t_s.tolist() == [996.0, 997.0, 998.0, 999.0, 1000.0]
    # slot = max(running / 8, kv): a max(0.5, 0.25) + b max(0.25, 0.75)
    assert sig.fine.slot_replicas.tolist() == [1.25] * 5
    assert sig.fine.prefill_replicas.tolist() == [0.75] * 5
    # No router: the engines' waiting requests are the backlog; a pod's in-flight is its running.
    assert sig.fine.queued.tolist() == [2.0] * 5 and sig.queued == 2.0
    assert dict(sig.inflight_by_replica) == {"a": 4.0, "b": 2.0}
    assert sig.newest_sample_s == 999.5 and sig.replicas_seen == 2
    assert sig.total_qps is None  # histograms queried, none scraped
    assert all(SEL in query for query in fake.asked)
    assert set(fake.asked) == {
        'sum by (pod,job,instance) (vllm:num_requests_running{namespace="serving",job="vllm"})',
        'min by (pod,job,instance) (timestamp(vllm:num_requests_running{namespace="serving",job="vllm"}))',
        'sum by (pod,job,instance) (vllm:num_requests_waiting{namespace="serving",job="vllm"})',
        'max by (pod,job,instance) (vllm:kv_cache_usage_perc{namespace="serving",job="vllm"})',
        'max by (pod,job,instance) (vllm:gpu_cache_usage_perc{namespace="serving",job="vllm"})',
        'sum by (pod,job,instance) (rate(vllm:request_prefill_time_seconds_sum{namespace="serving",job="vllm"}[4s]))',
        'sum by (pod,job,instance) (rate(vllm:time_to_first_token_seconds_sum{namespace="serving",job="vllm"}[4s]))',
        'sum by (pod,job,instance,le) (vllm:time_to_first_token_seconds_bucket{namespace="serving",job="vllm"})',
        'sum by (pod,job,instance,le) (vllm:e2e_request_latency_seconds_bucket{namespace="serving",job="vllm"})',
        'count by (pod,job,instance) (group by (pod,job,instance,model_name) '
        '(vllm:num_requests_running{namespace="serving",job="vllm"}))'}


def test_the_first_name_of_the_profile_wins_per_pod_never_both(fake: FakePrometheus) -> None:
    # Pod a exports the V1 KV name and the deprecated one (vLLM 0.11 does), pod b only the V0 name.
    src = source(fake, max_concurrency=100)
    fleet(fake, src, kv={"a": 0.25, "b": 0.5}, kv_name=1)  # V0 name: a 0.25, b 0.5
    q = src.engine.queries  # type: ignore[union-attr]
    fake.matrix(q.kv[0], (pod("a"), {t: 0.75 for t in STEPS}))  # V1 name: a 0.75
    assert src.read(995.0).fine.slot_replicas.tolist() == [1.25] * 5  # a 0.75 (V1), b 0.5 (V0)


def test_the_busy_share_is_clamped_to_one_not_dropped(fake: FakePrometheus) -> None:
    src = source(fake)
    fleet(fake, src, busy=7.5)  # 30 requests prefilled in one batch: 30 × the batch's time
    assert src.read(995.0).fine.prefill_replicas.tolist() == [1.5] * 5


def test_sglang_pods_on_old_and_new_names_read_alike(fake: FakePrometheus) -> None:
    src = source(fake, SGLANG, max_concurrency=4)
    q = src.engine.queries  # type: ignore[union-attr]
    assert q.running == ('sum by (pod,job,instance) (sglang:num_running_reqs{namespace="serving",job="vllm"})',
                         'sum by (pod,job,instance) (sglang:num_requests_running{namespace="serving",job="vllm"})')
    assert q.busy == ('sum by (pod,job,instance) (rate(sglang:time_to_first_token_seconds_sum'
                      '{namespace="serving",job="vllm"}[4s]))',)
    fake.matrix(q.running[0], (pod("a"), {t: 4 for t in STEPS}))
    fake.matrix(q.scraped[0], (pod("a"), {t: t - 0.5 for t in STEPS}))
    fake.matrix(q.running[1], (pod("b"), {t: 1 for t in STEPS}))  # an older SGLang on pod b
    fake.matrix(q.scraped[1], (pod("b"), {t: t - 0.25 for t in STEPS}))
    fake.matrix(q.waiting[0], (pod("a"), {t: 3 for t in STEPS}))
    fake.matrix(q.waiting[1], (pod("b"), {t: 2 for t in STEPS}))
    sig = src.read(995.0)
    assert sig.fine.slot_replicas.tolist() == [1.25] * 5  # 4/4 + 1/4 (no KV series)
    assert sig.fine.prefill_replicas.tolist() == [0.0] * 5  # its busy proxy (the TTFT sum) has no samples
    assert dict(sig.inflight_by_replica) == {"a": 4.0, "b": 1.0} and sig.queued == 5.0
    assert sig.newest_sample_s == 999.5 and sig.replicas_seen == 2


def test_a_renamed_profile_reads_the_names_it_lists(fake: FakePrometheus) -> None:
    renamed = replace(VLLM, name="vllm-fork", running=("fork:running",), waiting=('fork:queue{state="waiting"}',),
                      kv_usage=(), busy_seconds=("fork:busy_seconds_total",), ttft=None, e2e=None)
    src = source(fake, renamed)
    q = src.engine.queries  # type: ignore[union-attr]
    assert q.waiting == ('sum by (pod,job,instance) (fork:queue{state="waiting",namespace="serving",job="vllm"})',)
    fake.matrix(q.running[0], (pod("a"), {t: 2 for t in STEPS}))
    fake.matrix(q.scraped[0], (pod("a"), {t: t for t in STEPS}))
    fake.matrix(q.waiting[0], (pod("a"), {t: 0 for t in STEPS}))
    sig = src.read(995.0)
    assert sig.fine.slot_replicas.tolist() == [0.25] * 5 and sig.total_qps is None


def _hist(target: Mapping[str, str], counts: Mapping[str, Mapping[float, float]]
          ) -> list[tuple[dict[str, str], Mapping[float, float]]]:
    return [({**target, "le": le}, pts) for le, pts in counts.items()]


def test_histogram_buckets_become_rows_per_pod_at_upper_bounds(fake: FakePrometheus) -> None:
    src = source(fake)
    fleet(fake, src)
    q = src.engine.queries  # type: ignore[union-attr]
    base = {t: 0.0 for t in [989.0, *STEPS]}
    # Pod a: +3 TTFTs in (0.25, 0.5] at 997, +1 beyond the last bound at 998, a restart (reset)
    # at 999 counting 2 in <= 0.1. Pod b has other bounds (another vLLM version): +4 in (1, 2.5]
    # at 997. Pod c appears at 996 with 1000 old requests: they add nothing.
    a = {"0.1": {**base, 999.0: 2, 1000.0: 2}, "0.5": {**base, 997.0: 3, 998.0: 3, 999.0: 2, 1000.0: 2},
         "+Inf": {**base, 997.0: 3, 998.0: 4, 999.0: 2, 1000.0: 2}}
    for le in ("0.5", "+Inf"):
        a[le].update({t: a[le][t] + 5 for t in base if t < 999.0})  # 5 older requests before the window
    b = {"1": dict(base), "2.5": {**base, 997.0: 4, 998.0: 4, 999.0: 4, 1000.0: 4},
         "+Inf": {**base, 997.0: 4, 998.0: 4, 999.0: 4, 1000.0: 4}}
    c = {"0.1": {t: 1000.0 for t in STEPS[6:]}, "+Inf": {t: 1000.0 for t in STEPS[6:]}}
    fake.matrix(q.ttft[0], *_hist(pod("a"), a), *_hist(pod("b"), b), *_hist(pod("c"), c))
    fake.matrix(q.e2e[0], *_hist(pod("a"), {"5": {**base, 998.0: 6}, "+Inf": {**base, 998.0: 6}}))
    sig = src.read(995.0)
    f = sig.fine
    rows = list(zip(f.done_t_s.tolist(), f.done_ttft_ms.tolist(), f.done_e2e_ms.tolist(), f.done_weight.tolist(),
                    strict=True))
    ttft = [(t, ms, w) for t, ms, e, w in rows if not math.isnan(ms)]
    e2e = [(t, e, w) for t, ms, e, w in rows if not math.isnan(e)]
    assert ttft == [(997.0, 500.0, 3.0), (997.0, 2500.0, 4.0), (998.0, math.inf, 1.0), (999.0, 100.0, 2.0)]
    assert e2e == [(998.0, 5000.0, 6.0)]
    assert all(math.isnan(e) for t, ms, e, w in rows if not math.isnan(ms))
    assert sig.total_qps == 6.0 / 4.0  # e2e completions over the 4 s rate window before 1000
    assert source(fake).read(998.0).fine.done_weight.sum() == 2.0


def test_a_stale_pod_drops_the_steps_and_freezes_newest_sample(fake: FakePrometheus,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    src = source(fake)
    fleet(fake, src, lag={"b": 100.0})
    with caplog.at_level(logging.WARNING, logger="ebb.sources.prometheus"):
        sig = src.read(985.0)
    assert len(sig.fine.t_s) == 0 and sig.newest_sample_s is None
    assert "stale engine sample" in caplog.text


def test_a_scrape_time_after_its_step_is_dropped(fake: FakePrometheus) -> None:
    src = source(fake)
    fleet(fake, src, lag={"a": -60.0})
    sig = src.read(0.0)
    assert len(sig.fine.t_s) == 0 and sig.newest_sample_s is None


def test_two_targets_naming_one_pod_drop_the_step(fake: FakePrometheus, caplog: pytest.LogCaptureFixture) -> None:
    # One pod scraped by two jobs (a ServiceMonitor and a PodMonitor): summing both doubles it.
    src = source(fake)
    fleet(fake, src)
    q = src.engine.queries  # type: ignore[union-attr]
    doc = json.loads(fake.answers[q.running[0]])
    doc["data"]["result"].append({"metric": pod("a", job="vllm-pods"), "values": [[999.0, "4"]]})
    fake.answers[q.running[0]] = json.dumps(doc).encode()
    doc = json.loads(fake.answers[q.waiting[0]])
    doc["data"]["result"].append({"metric": pod("a", job="vllm-pods"), "values": [[999.0, "1"]]})
    fake.answers[q.waiting[0]] = json.dumps(doc).encode()
    doc = json.loads(fake.answers[q.scraped[0]])
    doc["data"]["result"].append({"metric": pod("a", job="vllm-pods"), "values": [[999.0, "998.9"]]})
    fake.answers[q.scraped[0]] = json.dumps(doc).encode()
    with caplog.at_level(logging.WARNING, logger="ebb.sources.prometheus"):
        sig = src.read(995.0)
    assert sig.fine.t_s.tolist() == [996.0, 997.0, 998.0, 1000.0]
    assert "two targets naming one replica (pod='a')" in caplog.text


@pytest.mark.parametrize("running", ["NaN", -1, -47, 2e6])
def test_a_bad_running_series_drops_that_pod_alone_and_logs_pod_and_metric(
        fake: FakePrometheus, caplog: pytest.LogCaptureFixture, running: float | str) -> None:
    # The agent path's rule (VALUE_RANGES), one target's series at a time: pod a sits out, b still counts.
    src = source(fake)
    fleet(fake, src, running={"a": running, "b": 2})
    with caplog.at_level(logging.WARNING, logger="ebb.sources.prometheus_engine"):
        sig = src.read(995.0)
    assert sig.fine.t_s.tolist() == [996.0, 997.0, 998.0, 999.0, 1000.0]  # never the whole read
    assert dict(sig.inflight_by_replica) == {"b": 2.0} and sig.replicas_seen == 1  # the controller sees one missing
    assert sig.fine.slot_replicas.tolist() == [0.75] * 5 and sig.fine.queued.tolist() == [1.0] * 5
    assert "pod=a: vllm:num_requests_running = " in caplog.text and "is outside [0, 1e+06]" in caplog.text
    assert src.engine is not None and src.engine.series_dropped == {"a/vllm:num_requests_running": 5}


def test_a_kv_usage_outside_zero_one_drops_that_series_and_the_pod_reads_from_max_concurrency(
        fake: FakePrometheus, caplog: pytest.LogCaptureFixture) -> None:
    src = source(fake)
    fleet(fake, src, kv={"a": 1.5, "b": 0.5})
    with caplog.at_level(logging.WARNING, logger="ebb.sources.prometheus_engine"):
        sig = src.read(995.0)
    assert sig.replicas_seen == 2 and dict(sig.inflight_by_replica) == {"a": 4.0, "b": 2.0}
    assert sig.fine.slot_replicas.tolist() == [1.0] * 5  # a: 4/8 without its KV series, b: max(2/8, 0.5)
    assert "pod=a: vllm:kv_cache_usage_perc = 1.5 is outside [0, 1]" in caplog.text


def test_series_drops_are_counted_every_read_but_logged_once_per_pod_and_metric_per_ten_seconds(
        fake: FakePrometheus, caplog: pytest.LogCaptureFixture) -> None:
    src = source(fake)
    fleet(fake, src, running={"a": -1, "b": -2})
    with caplog.at_level(logging.WARNING, logger="ebb.sources.prometheus_engine"):
        first = src.read(995.0)
        src.read(995.0)
    # Every pod sat out: no data, never "no demand".
    assert len(first.fine.t_s) == 0 and first.replicas_seen is None and first.newest_sample_s is None
    assert src.engine is not None and src.engine.series_dropped == {
        "a/vllm:num_requests_running": 10, "b/vllm:num_requests_running": 10}
    assert caplog.text.count("vllm:num_requests_running = ") == 2  # one line per pod, the second read held


def test_running_above_ten_times_max_concurrency_leaves_that_pod_out_with_a_reason(
        fake: FakePrometheus, caplog: pytest.LogCaptureFixture) -> None:
    src = source(fake)
    fleet(fake, src, running={"a": 81, "b": 2})
    with caplog.at_level(logging.WARNING, logger="ebb.sources.prometheus"):
        sig = src.read(995.0)
    assert len(sig.fine.t_s) == 5 and dict(sig.inflight_by_replica) == {"b": 2.0} and sig.replicas_seen == 1
    assert "5 × engine target left out of a step: running > 10 x max concurrency" in caplog.text


def test_a_series_without_the_replica_label_drops_the_step(fake: FakePrometheus) -> None:
    src = source(fake, replica_label="worker")
    fleet(fake, src)  # series carry pod, not worker
    assert len(src.read(0.0).fine.t_s) == 0


# -- missing series: which error -------------------------------------------------------------------
def test_no_target_at_all_is_a_source_unavailable(fake: FakePrometheus) -> None:
    with pytest.raises(SourceUnavailable, match="no target matches selector"):
        source(fake).read(0.0)


def test_targets_up_without_the_metric_is_an_input_error_naming_metric_engine_and_fix(fake: FakePrometheus) -> None:
    src = source(fake)
    fake.answers['up{namespace="serving",job="vllm"}'] = _ok("vector", [
        {"metric": pod("a"), "value": [NOW, "1"]}, {"metric": pod("b"), "value": [NOW, "1"]}])
    with pytest.raises(InputError, match="vllm:num_requests_running") as info:
        src.read(0.0)
    assert "engine vllm" in str(info.value) and "2 targets" in str(info.value)
    assert info.value.fix is not None and "vLLM" in info.value.fix


def test_targets_all_down_is_a_source_unavailable(fake: FakePrometheus) -> None:
    src = source(fake)
    fake.answers['up{namespace="serving",job="vllm"}'] = _ok("vector", [{"metric": pod("a"), "value": [NOW, "0"]}])
    with pytest.raises(SourceUnavailable, match="down"):
        src.read(0.0)


def test_running_without_waiting_is_an_input_error(fake: FakePrometheus) -> None:
    src = source(fake)
    fleet(fake, src)
    del fake.answers[src.engine.queries.waiting[0]]  # type: ignore[union-attr]
    with pytest.raises(InputError, match="vllm:num_requests_waiting"):
        src.read(0.0)


def test_no_capacity_signal_is_an_input_error_naming_the_fix(fake: FakePrometheus) -> None:
    src = source(fake, max_concurrency=None)
    fleet(fake, src)
    del fake.answers[src.engine.queries.kv[0]]  # type: ignore[union-attr]
    with pytest.raises(InputError, match="neither a max concurrency nor a KV") as info:
        src.read(0.0)
    assert info.value.fix is not None and "--max-concurrency" in info.value.fix


# -- construction ------------------------------------------------------------------------------------
def test_engine_mode_needs_a_selector_and_defaults_to_the_pod_label() -> None:
    client = PrometheusClient("http://127.0.0.1:9")
    with pytest.raises(ConfigError, match="needs a Prometheus selector"):
        PrometheusSource(client, engine=VLLM, max_concurrency=8)
    assert PrometheusSource(client, selector="", engine=VLLM).replica_label == "pod"
    assert PrometheusSource(client).replica_label == "worker"
    with pytest.raises(ConfigError, match="engine mode only"):
        PrometheusSource(client, max_concurrency=8)
    with pytest.raises(ConfigError, match="whole number"):
        PrometheusSource(client, selector=SEL, engine=VLLM, max_concurrency=0)


def test_a_profile_without_any_capacity_signal_needs_max_concurrency() -> None:
    bare = replace(VLLM, kv_usage=())
    with pytest.raises(ConfigError, match="--max-concurrency"):
        PrometheusSource(PrometheusClient("http://127.0.0.1:9"), selector=SEL, engine=bare)


def test_a_profile_without_a_busy_counter_is_refused_rather_than_read_as_idle() -> None:
    with pytest.raises(ConfigError, match="busy-seconds"):
        PrometheusSource(PrometheusClient("http://127.0.0.1:9"), selector=SEL, engine=replace(VLLM, busy_seconds=()))


def test_no_name_or_label_can_carry_promql() -> None:
    for bad in ('up{job="x"} or vector(1)', "a b", "9lives", 'x"}'):
        with pytest.raises(ConfigError, match="not a Prometheus metric name"):
            check_metric_name(bad, "test")

    class Name:
        name = "vllm:x"
        matchers = (("__name__", "y"),)

    with pytest.raises(ConfigError, match="label name"):
        EngineQueries.build(Selector(), "4s", replica_label="pod", running=[Name()], waiting=[])


def test_a_pod_exporting_two_histogram_names_counts_the_first_only(fake: FakePrometheus) -> None:
    two = replace(VLLM, ttft=HistogramSpec(("new:ttft_seconds", "old:ttft_seconds")), e2e=None)
    src = source(fake, two)
    fleet(fake, src)
    q = src.engine.queries  # type: ignore[union-attr]
    counts = {"0.5": {996.0: 0.0, 997.0: 3.0}, "+Inf": {996.0: 0.0, 997.0: 3.0}}
    fake.matrix(q.ttft[0], *_hist(pod("a"), counts))
    fake.matrix(q.ttft[1], *_hist(pod("a"), counts), *_hist(pod("b"), counts))  # b: only the old name
    f = src.read(995.0).fine
    assert f.done_t_s.tolist() == [997.0] and f.done_weight.tolist() == [6.0] and f.done_ttft_ms.tolist() == [500.0]


# -- one model per workload ------------------------------------------------------------------------
def test_a_pod_serving_two_models_is_left_out_with_the_reason_never_summed(
        fake: FakePrometheus, caplog: pytest.LogCaptureFixture) -> None:
    # Pod a's running series carry two model_name values (its sum, 4, is two workloads' figures); b serves one.
    src = source(fake)
    fleet(fake, src)
    q = src.engine.queries  # type: ignore[union-attr]
    assert q.models == ('count by (pod,job,instance) (group by (pod,job,instance,model_name) '
                        '(vllm:num_requests_running{namespace="serving",job="vllm"}))',)
    fake.matrix(q.models[0], (pod("a"), {t: 2 for t in STEPS}), (pod("b"), {t: 1 for t in STEPS}))
    with caplog.at_level(logging.WARNING, logger="ebb.sources.prometheus"):
        sig = src.read(995.0)
    assert len(sig.fine.t_s) == 5 and dict(sig.inflight_by_replica) == {"b": 2.0} and sig.replicas_seen == 1
    assert sig.fine.queued.tolist() == [1.0] * 5  # b's waiting alone
    assert "5 × engine target left out of a step: it serves several models" in caplog.text
    assert 'model_name="NAME"' in caplog.text


def test_a_model_matcher_in_the_selector_scopes_the_engine_series_but_not_up(fake: FakePrometheus) -> None:
    src = PrometheusSource(PrometheusClient(fake.url), selector='namespace="serving",model_name="llama-8b"',
                           engine=VLLM, max_concurrency=8, clock=lambda: NOW)
    q = src.engine.queries  # type: ignore[union-attr]
    assert q.up == 'up{namespace="serving"}'  # up carries no model label: with it no target would match
    assert q.running[0] == 'sum by (pod,job,instance) (vllm:num_requests_running{namespace="serving",model_name="llama-8b"})'
    assert all('model_name="llama-8b"' in x for x in (*q.waiting, *q.kv, *q.busy, *q.ttft, *q.e2e, *q.models))
    fake.answers['up{namespace="serving"}'] = _ok("vector", [{"metric": pod("a"), "value": [NOW, "1"]}])
    with pytest.raises(InputError, match="1 targets"):  # up answered: the engine's series are what is missing
        src.read(0.0)


def test_an_engine_without_model_labels_asks_no_models_query(fake: FakePrometheus) -> None:
    src = source(fake, profile=PROFILES["llamacpp"], max_concurrency=4)
    assert src.engine is not None and src.engine.queries.models == ()
