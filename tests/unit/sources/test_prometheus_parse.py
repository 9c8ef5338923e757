"""PrometheusClient and PrometheusSource against canned Prometheus answers on a loopback server."""

from __future__ import annotations

import json
import logging
import math
import threading
import urllib.parse
from collections.abc import Iterator, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np
import pytest

from ebb.errors import ConfigError, InputError, SourceUnavailable
from ebb.model import live as names
from ebb.sources.prometheus import DEFAULT_SELECTOR, PrometheusClient, PrometheusSource, PromQueries, Selector
from ebb.sources.live import SignalSource
from ebb.testing.etcd import free_port

Q = PromQueries.build(Selector.parse(DEFAULT_SELECTOR), "4s")


class FakePrometheus:
    """Answers each PromQL query with a canned (status, body); unknown queries get an empty matrix."""

    def __init__(self) -> None:
        self.answers: dict[str, tuple[int, bytes]] = {}
        self.release = threading.Event()
        self.hang_on: str | None = None
        self.asked: list[str] = []
        """Every query received, in order."""
        self.auth: list[str | None] = []
        """The Authorization header of every request."""
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                params = urllib.parse.parse_qs(urllib.parse.urlparse(self.path).query)
                query = params.get("query", [""])[0]
                fake.asked.append(query)
                fake.auth.append(self.headers.get("Authorization"))
                if query == fake.hang_on:
                    fake.release.wait(10)
                status, body = fake.answers.get(query, (200, _ok("matrix", [])))
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up waiting (the timeout test)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02},
                                       daemon=True)
        self.thread.start()

    def answer(self, query: str, kind: str, result: Any) -> None:
        self.answers[query] = (200, _ok(kind, result))

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(10)


def _ok(kind: str, result: Any) -> bytes:
    return json.dumps({"status": "success", "data": {"resultType": kind, "result": result}}).encode()


def _matrix(*series: tuple[Mapping[str, str], Mapping[float, float | str]]) -> list[dict[str, Any]]:
    return [{"metric": dict(labels), "values": [[t, v if isinstance(v, str) else repr(float(v))]
                                                for t, v in sorted(points.items())]}
            for labels, points in series]


@pytest.fixture
def fake() -> Iterator[FakePrometheus]:
    server = FakePrometheus()
    try:
        yield server
    finally:
        server.close()


# -- the client -------------------------------------------------------------------------------
def test_an_instant_vector_keeps_labels_times_and_special_values(fake: FakePrometheus) -> None:
    fake.answer("x", "vector", [{"metric": {"__name__": "x", "worker": "a"}, "value": [100.5, "NaN"]},
                                {"metric": {"worker": "b"}, "value": [100.5, "+Inf"]},
                                {"metric": {"worker": "c"}, "value": [100.5, "-Inf"]},
                                {"metric": {"worker": "d"}, "value": [100.5, "2.5"]}])
    got = PrometheusClient(fake.url).instant("x", at_s=100.5)
    assert [s.labels["worker"] for s in got] == ["a", "b", "c", "d"]
    assert got[0].labels["__name__"] == "x" and "__name__" not in got[0].key
    assert all(s.ts_s.tolist() == [100.5] for s in got)
    assert math.isnan(got[0].value[0]) and got[1].value[0] == math.inf and got[2].value[0] == -math.inf
    assert got[3].value[0] == 2.5


def test_a_range_matrix_and_a_scalar_parse_into_arrays(fake: FakePrometheus) -> None:
    fake.answer("m", "matrix", _matrix(({"worker": "a"}, {10.0: 1, 11.0: 2, 12.0: 3})))
    fake.answer("s", "scalar", [7.0, "4"])
    client = PrometheusClient(fake.url)
    (m,) = client.range("m", 10, 12, 1)
    assert m.ts_s.tolist() == [10.0, 11.0, 12.0] and m.value.tolist() == [1.0, 2.0, 3.0]
    (s,) = client.instant("s")
    assert dict(s.labels) == {} and s.value.tolist() == [4.0]


@pytest.mark.parametrize("status", [400, 422])
def test_bad_promql_is_an_input_error_quoting_prometheus(fake: FakePrometheus, status: int) -> None:
    fake.answers["rate(x["] = (status, json.dumps({"status": "error", "errorType": "bad_data",
                                                   "error": "1:8: parse error: unclosed left bracket"}).encode())
    with pytest.raises(InputError, match="unclosed left bracket") as info:
        PrometheusClient(fake.url).instant("rate(x[")
    assert fake.url in str(info.value) and "rate(x[" in str(info.value)


@pytest.mark.parametrize("status, body", [(503, b'{"status":"error","errorType":"timeout","error":"query timed out"}'),
                                          (500, b"internal error, not json")])
def test_a_server_error_is_a_source_unavailable(fake: FakePrometheus, status: int, body: bytes) -> None:
    fake.answers["up"] = (status, body)
    with pytest.raises(SourceUnavailable, match=str(status)) as info:
        PrometheusClient(fake.url).instant("up")
    assert fake.url in str(info.value)


def test_a_refused_connection_is_a_source_unavailable_naming_the_url_and_fix() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(SourceUnavailable, match="check that Prometheus runs") as info:
        PrometheusClient(url).instant("up")
    assert url in str(info.value)


def test_a_server_that_does_not_answer_in_time_is_a_source_unavailable(fake: FakePrometheus) -> None:
    fake.hang_on = "up"
    try:
        with pytest.raises(SourceUnavailable, match="within 0.2 s"):
            PrometheusClient(fake.url, timeout_s=0.2).instant("up")
    finally:
        fake.release.set()


@pytest.mark.parametrize("body, why", [(b"<html>not prometheus</html>", "not JSON"),
                                       (b'{"status":"error","error":"boom"}', "boom"),
                                       (_ok("string", [1.0, "hello"]), "resultType 'string'"),
                                       (b'{"status":"success","data":{"resultType":"vector","result":[{"x":1}]}}',
                                        "unreadable vector")])
def test_a_body_that_is_not_a_prometheus_answer_is_an_input_error(fake: FakePrometheus, body: bytes,
                                                                   why: str) -> None:
    fake.answers["up"] = (200, body)
    with pytest.raises(InputError, match=why):
        PrometheusClient(fake.url).instant("up")


# -- the source -------------------------------------------------------------------------------
NOW = 1_000.0
STEPS = [990.0 + i for i in range(11)]  # the last 10 s of the source's 30 s window


def _worker(name: str) -> dict[str, str]:
    return {"instance": f"{name}:8000", "job": "ebb", "worker": name}


def _fleet(fake: FakePrometheus, *, running: Mapping[str, float | str] | None = None,
           scraped_lag_s: Mapping[str, float] | None = None, prefill: float | str = 0.25,
           q: PromQueries = Q) -> None:
    """Two workers (max_batch 8) and a router, scraped 0.5 s before each step unless lagged."""
    running = running or {"a": 4, "b": 2}
    lag = {"a": 0.5, "b": 0.5, "router": 0.5, **(scraped_lag_s or {})}
    gauges = []
    for w in ("a", "b"):
        gauges += [({**_worker(w), "__name__": names.WORKER_RUNNING}, {t: running[w] for t in STEPS}),
                   ({**_worker(w), "__name__": names.WORKER_WAITING}, {t: 1 for t in STEPS}),
                   ({**_worker(w), "__name__": names.WORKER_MAX_BATCH}, {t: 8 for t in STEPS})]
    fake.answer(q.worker_gauges, "matrix", _matrix(*gauges))
    fake.answer(q.worker_scraped, "matrix", _matrix(*[(_worker(w), {t: max(t - lag[w], 985.0) for t in STEPS})
                                                      for w in ("a", "b")]))
    fake.answer(q.prefill, "matrix", _matrix(
        (_worker("a"), {t: prefill for t in STEPS}), (_worker("b"), {t: 0.5 for t in STEPS})))
    router = {"instance": "router:8000", "job": "ebb"}
    fake.answer(q.router_queued, "matrix", _matrix(({**router, "__name__": names.ROUTER_QUEUED}, {t: 2 for t in STEPS})))
    fake.answer(q.router_scraped, "matrix", _matrix((router, {t: t - lag["router"] for t in STEPS})))
    fake.answer(q.qps, "vector", [{"metric": {}, "value": [NOW, "12.5"]}])


def _source(fake: FakePrometheus) -> PrometheusSource:
    # settle_s 0: "now" is the clock itself, so the grid ends at NOW.
    return PrometheusSource(PrometheusClient(fake.url), scrape_interval_s=1.0, max_sample_age_s=3.0,
                            settle_s=0.0, clock=lambda: NOW)


def test_the_source_sums_workers_and_reports_the_newest_gauges(fake: FakePrometheus) -> None:
    _fleet(fake)
    src = _source(fake)
    assert isinstance(src, SignalSource)
    sig = src.read(995.0)
    assert sig.fine.t_s.tolist() == [996.0, 997.0, 998.0, 999.0, 1000.0]
    assert sig.fine.slot_replicas.tolist() == [0.75] * 5
    assert sig.fine.prefill_replicas.tolist() == [0.75] * 5
    assert sig.fine.queued.tolist() == [2.0] * 5
    assert dict(sig.inflight_by_replica) == {"a": 5.0, "b": 3.0}
    assert sig.queued == 2.0 and sig.total_qps == 12.5
    assert sig.newest_sample_s == 999.5
    assert sig.replicas_seen == 2


def test_a_stale_worker_drops_the_steps_it_would_understate(fake: FakePrometheus,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    # Worker b's last real scrape was at 985 s: Prometheus keeps serving it (lookback delta), and
    # leaving b out of the sums would understate demand.
    _fleet(fake, scraped_lag_s={"b": 100.0})
    with caplog.at_level(logging.WARNING, logger="ebb.sources.prometheus"):
        sig = _source(fake).read(985.0)
    assert len(sig.fine.t_s) == 0
    assert sig.newest_sample_s is None
    assert "stale worker sample" in caplog.text


def test_a_router_scraped_long_ago_leaves_no_data_and_no_fresh_timestamp(fake: FakePrometheus) -> None:
    _fleet(fake, scraped_lag_s={"router": 10.0})
    sig = _source(fake).read(0.0)
    assert len(sig.fine.t_s) == 0
    assert sig.newest_sample_s is None and sig.queued is None and sig.total_qps is None


@pytest.mark.parametrize("running, prefill, why", [
    ({"a": "NaN", "b": 2}, 0.25, "running count that is not finite"),
    ({"a": -1, "b": 2}, 0.25, "running count that is not finite"),
    ({"a": 81, "b": 2}, 0.25, "running > 10 x max_batch"),
    ({"a": 4, "b": 2}, "+Inf", "prefill share outside"),
    ({"a": 4, "b": 2}, -0.5, "prefill share outside"),
])
def test_malformed_values_are_dropped_with_a_logged_reason(fake: FakePrometheus, caplog: pytest.LogCaptureFixture,
                                                           running: dict[str, float | str], prefill: float | str,
                                                           why: str) -> None:
    _fleet(fake, running=running, prefill=prefill)
    with caplog.at_level(logging.WARNING, logger="ebb.sources.prometheus"):
        sig = _source(fake).read(0.0)
    assert len(sig.fine.t_s) == 0
    assert why in caplog.text
    assert np.all(np.isfinite(sig.fine.slot_replicas))


def test_no_worker_at_all_reads_as_no_data_not_as_no_demand(fake: FakePrometheus) -> None:
    _fleet(fake)
    fake.answer(Q.worker_gauges, "matrix", [])
    fake.answer(Q.worker_scraped, "matrix", [])
    sig = _source(fake).read(0.0)
    assert len(sig.fine.t_s) == 0 and sig.newest_sample_s is None


def test_histogram_increases_become_weighted_rows_at_bucket_upper_bounds(fake: FakePrometheus) -> None:
    _fleet(fake)
    ttft, e2e = names.ROUTER_TTFT + "_bucket", names.ROUTER_E2E + "_bucket"
    router = {"instance": "router:8000", "job": "ebb"}
    # Cumulative counts: +3 at 0.5 s at 997, +1 beyond 60 s at 998, then a restart (reset) at 999
    # that counts 2 requests at 0.1 s; e2e: +4 at 2 s at 997.
    series = [({**router, "__name__": ttft, "le": "0.1"}, {989.0: 0, 996.0: 0, 997.0: 0, 998.0: 0, 999.0: 2, 1000.0: 2}),
              ({**router, "__name__": ttft, "le": "0.5"}, {989.0: 5, 996.0: 5, 997.0: 8, 998.0: 8, 999.0: 2, 1000.0: 2}),
              ({**router, "__name__": ttft, "le": "+Inf"}, {989.0: 5, 996.0: 5, 997.0: 8, 998.0: 9, 999.0: 2, 1000.0: 2}),
              ({**router, "__name__": e2e, "le": "2"}, {996.0: 0, 997.0: 4, 998.0: 4}),
              ({**router, "__name__": e2e, "le": "+Inf"}, {996.0: 0, 997.0: 4, 998.0: 4})]
    fake.answer(Q.latency, "matrix", _matrix(*series))
    f = _source(fake).read(995.0).fine
    rows = sorted(zip(f.done_t_s.tolist(), f.done_ttft_ms.tolist(), f.done_e2e_ms.tolist(), f.done_weight.tolist(),
                      strict=True), key=lambda r: (r[0], r[3]))
    ttft_rows = [(t, ms, w) for t, ms, e, w in rows if not math.isnan(ms)]
    e2e_rows = [(t, e, w) for t, ms, e, w in rows if not math.isnan(e)]
    assert ttft_rows == [(997.0, 500.0, 3.0), (998.0, math.inf, 1.0), (999.0, 100.0, 2.0)]
    assert e2e_rows == [(997.0, 2000.0, 4.0)]
    assert all(math.isnan(e) for t, ms, e, w in rows if not math.isnan(ms))
    assert _source(fake).read(998.0).fine.done_weight.sum() == 2.0


def test_the_source_rejects_a_window_prometheus_would_refuse() -> None:
    with pytest.raises(ValueError, match="11000"):
        PrometheusSource(PrometheusClient("http://127.0.0.1:9"), step_s=0.001, lookback_s=60.0)
    with pytest.raises(ValueError, match="two scrapes"):
        PrometheusSource(PrometheusClient("http://127.0.0.1:9"), scrape_interval_s=15.0, rate_window_s=15.0)


# -- scope, fleet completeness, identity (red-team M1, H4) -------------------------------------
def test_every_query_carries_the_selector_inside_its_braces(fake: FakePrometheus) -> None:
    sel = 'job="ebb",namespace="serving"'
    q = PromQueries.build(Selector.parse(sel), "4s")
    _fleet(fake, q=q)
    src = PrometheusSource(PrometheusClient(fake.url), selector=sel, scrape_interval_s=1.0, max_sample_age_s=3.0,
                           settle_s=0.0, clock=lambda: NOW)
    sig = src.read(995.0)
    assert sig.fine.slot_replicas.tolist() == [0.75] * 5 and sig.total_qps == 12.5
    assert sorted(set(fake.asked)) == sorted([
        '{__name__=~"ebb_worker_running|ebb_worker_waiting|ebb_worker_max_batch",job="ebb",namespace="serving"}',
        'timestamp(ebb_worker_running{job="ebb",namespace="serving"})',
        'rate(ebb_worker_prefill_busy_seconds_total{job="ebb",namespace="serving"}[4s])',
        'ebb_router_queued{job="ebb",namespace="serving"}',
        'timestamp(ebb_router_queued{job="ebb",namespace="serving"})',
        '{__name__=~"ebb_router_ttft_seconds_bucket|ebb_router_e2e_seconds_bucket",job="ebb",namespace="serving"}',
        'sum(rate(ebb_router_requests_total{job="ebb",namespace="serving"}[4s]))'])


def test_the_default_source_asks_only_scoped_queries(fake: FakePrometheus) -> None:
    _fleet(fake)
    _source(fake).read(995.0)
    assert len(fake.asked) == 7
    assert all('job=~"ebb|ebb-.+"}' in query for query in fake.asked)


def _drop_worker_after(fake: FakePrometheus, worker: str, last_s: float) -> None:
    """Worker ``worker``'s series end at ``last_s``: its target vanished (staleness markers)."""
    for query in (Q.worker_gauges, Q.worker_scraped, Q.prefill):
        doc = json.loads(fake.answers[query][1])
        for r in doc["data"]["result"]:
            if r["metric"].get("worker") == worker:
                r["values"] = [p for p in r["values"] if p[0] <= last_s]
        fake.answers[query] = (200, json.dumps(doc).encode())


def test_replicas_seen_is_the_fewest_workers_behind_any_returned_step(fake: FakePrometheus) -> None:
    _fleet(fake)
    _drop_worker_after(fake, "b", 997.0)
    src = _source(fake)
    sig = src.read(995.0)
    # Steps after b vanished look complete with one worker fewer: the count says otherwise.
    assert sig.fine.t_s.tolist() == [996.0, 997.0, 998.0, 999.0, 1000.0]
    assert sig.fine.slot_replicas.tolist() == [0.75, 0.75, 0.5, 0.5, 0.5]
    assert sig.replicas_seen == 1
    assert src.read(990.0).replicas_seen == 1
    before = src.read(0.0)
    assert before.replicas_seen == 1 and dict(before.inflight_by_replica) == {"a": 5.0}
    assert src.read(1000.0).replicas_seen is None  # nothing returned, nothing counted


def test_replicas_seen_counts_only_steps_that_were_returned(fake: FakePrometheus) -> None:
    _fleet(fake)
    _drop_worker_after(fake, "b", 997.0)
    doc = json.loads(fake.answers[Q.worker_gauges][1])
    for r in doc["data"]["result"]:
        if r["metric"]["worker"] == "b":  # b is back at 1000: a fleet of 2 again
            r["values"].append([1000.0, "2" if r["metric"]["__name__"] == names.WORKER_RUNNING else "8"])
    fake.answers[Q.worker_gauges] = (200, json.dumps(doc).encode())
    doc = json.loads(fake.answers[Q.worker_scraped][1])
    for r in doc["data"]["result"]:
        if r["metric"]["worker"] == "b":
            r["values"].append([1000.0, "999.5"])
    fake.answers[Q.worker_scraped] = (200, json.dumps(doc).encode())
    src = _source(fake)
    assert src.read(999.0).replicas_seen == 2
    assert src.read(998.0).replicas_seen == 1


def test_two_series_naming_one_worker_drop_the_step(fake: FakePrometheus, caplog: pytest.LogCaptureFixture) -> None:
    # A second target (another instance) also says it is worker "a": summing both would double a's
    # demand, keeping one would be a guess.
    _fleet(fake)
    impostor = {"instance": "rogue:8000", "job": "ebb", "worker": "a"}
    for query, extra in ((Q.worker_gauges, [({**impostor, "__name__": names.WORKER_RUNNING}, {999.0: 8}),
                                            ({**impostor, "__name__": names.WORKER_MAX_BATCH}, {999.0: 8})]),
                         (Q.worker_scraped, [(impostor, {999.0: 998.9})])):
        doc = json.loads(fake.answers[query][1])
        doc["data"]["result"] += _matrix(*extra)
        fake.answers[query] = (200, json.dumps(doc).encode())
    with caplog.at_level(logging.WARNING, logger="ebb.sources.prometheus"):
        sig = _source(fake).read(995.0)
    assert sig.fine.t_s.tolist() == [996.0, 997.0, 998.0, 1000.0]
    assert "two series naming one replica (worker='a')" in caplog.text
    assert sig.replicas_seen == 2


def test_the_replica_label_names_replicas_and_a_series_without_it_drops_the_step(fake: FakePrometheus) -> None:
    _fleet(fake)
    for query in (Q.worker_gauges, Q.worker_scraped, Q.prefill):
        doc = json.loads(fake.answers[query][1])
        for r in doc["data"]["result"]:
            r["metric"]["pod"] = "serving-" + r["metric"]["worker"]
        fake.answers[query] = (200, json.dumps(doc).encode())
    src = PrometheusSource(PrometheusClient(fake.url), replica_label="pod", scrape_interval_s=1.0,
                           max_sample_age_s=3.0, settle_s=0.0, clock=lambda: NOW)
    sig = src.read(995.0)
    assert dict(sig.inflight_by_replica) == {"serving-a": 5.0, "serving-b": 3.0} and sig.replicas_seen == 2
    _fleet(fake)  # series without a pod label: not countable as a replica
    assert len(src.read(995.0).fine.t_s) == 0
    with pytest.raises(ConfigError, match="not a Prometheus label name"):
        PrometheusSource(PrometheusClient(fake.url), replica_label='worker"}')


def test_a_histogram_all_in_inf_reads_inf_never_nan(fake: FakePrometheus, caplog: pytest.LogCaptureFixture) -> None:
    # Red-team C1: every TTFT beyond the largest finite bound. The +Inf bucket is a latency of inf
    # (past any SLO), in the TTFT column, never NaN there; an 'le' that is not a bound is dropped.
    _fleet(fake)
    router = {"instance": "router:8000", "job": "ebb"}
    ttft = names.ROUTER_TTFT + "_bucket"
    counts = {989.0 + i: 10.0 * i for i in range(12)}
    series = [({**router, "__name__": ttft, "le": le}, {t: 0 for t in counts}) for le in ("0.5", "60")]
    series += [({**router, "__name__": ttft, "le": le}, counts) for le in ("+Inf", "NaN", "-1", "x")]
    fake.answer(Q.latency, "matrix", _matrix(*series))
    with caplog.at_level(logging.WARNING, logger="ebb.sources.prometheus"):
        f = _source(fake).read(995.0).fine
    assert f.done_t_s.tolist() == [996.0, 997.0, 998.0, 999.0, 1000.0]
    assert f.done_ttft_ms.tolist() == [math.inf] * 5
    assert f.done_weight.tolist() == [10.0] * 5
    assert np.isnan(f.done_e2e_ms).all()
    assert "3 × histogram series whose 'le' is not a number >= 0 or +Inf" in caplog.text


def test_a_scrape_time_after_its_step_is_dropped_not_taken_as_fresh(fake: FakePrometheus) -> None:
    # timestamp() can never be later than the step; a server that says so must not make the data
    # look fresher than the clock (newest_sample_s in the future would never go stale).
    _fleet(fake, scraped_lag_s={"router": -60.0})
    sig = _source(fake).read(0.0)
    assert len(sig.fine.t_s) == 0 and sig.newest_sample_s is None
    _fleet(fake, scraped_lag_s={"a": -60.0})
    assert len(_source(fake).read(0.0).fine.t_s) == 0


def test_a_point_at_a_nan_time_is_ignored(fake: FakePrometheus) -> None:
    _fleet(fake)
    doc = json.loads(fake.answers[Q.router_queued][1])
    doc["data"]["result"][0]["values"].append([math.nan, "5"])  # json writes NaN, and reads it back
    fake.answers[Q.router_queued] = (200, json.dumps(doc).encode())
    assert _source(fake).read(995.0).fine.queued.tolist() == [2.0] * 5
