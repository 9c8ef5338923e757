"""Engine-mode PrometheusSource against the real Prometheus binary scraping two "vLLM pods".

Each pod serves, at ``/metrics``, the real vLLM V1 exposition captured from a Kubernetes cluster
(``../shared/data/engine-metrics/vllm/cncf__k8s-ai-conformance__...PodAutoscaling__output.md``
lines 115-675: HELP/TYPE lines, ``engine="0",model_name=...`` labels, ``_created`` series, the
python/process/http collectors), with the values of a live pod put in: running, waiting and KV
usage set by the test, ``vllm:request_prefill_time_seconds_sum`` growing at a set share of wall
time, and the TTFT and end-to-end histograms advanced (bucket, ``_count`` and ``_sum`` lines) when
the test observes requests. Prometheus scrapes both every second (job ``vllm``, a ``pod`` label
per target from file-SD, as relabelling from pod metadata would set it); the test reads with
``PrometheusSource(engine=vllm)`` and checks running / waiting / slot / prefill / completions
against what it served, checks which error a missing metric gives (a profile the pods do not
match, a selector matching nothing), then stops one pod and checks that the fleet reads as
incomplete.
About 20-30 s. Skipped with a reason when ``../shared`` is absent, failed under CI=true.
"""

from __future__ import annotations

import json
import math
import os
import re
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, TypeVar

import pytest

from ebb.errors import InputError, SourceUnavailable
from ebb.demo.local_prometheus import LocalPrometheus
from ebb.model.live import LiveSignals
from ebb.sources.engines.profiles import PROFILES
from ebb.sources.prometheus import PrometheusClient, PrometheusSource
from ebb.testing.prometheus import local_prometheus

T = TypeVar("T")
CAPTURE = (Path(__file__).resolve().parents[2].parent / "shared" / "data" / "engine-metrics" / "vllm"
           / "cncf__k8s-ai-conformance__v1.35__kops__tests__Test_SchedulingOrchestration_PodAutoscaling__output.md")
FIRST_LINE, LAST_LINE = 115, 675  # the exposition block, per the data folder's README
SCRAPE_S = 1.0
SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(\{[^}]*\})? (\S+)$")
LE = re.compile(r'le="([^"]+)"')


def capture() -> list[str]:
    if not CAPTURE.exists():
        msg = f"{CAPTURE} is absent (the shared data folder is not beside the repository)"
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI must provide the shared data: {msg}")
        pytest.skip(msg)
    return CAPTURE.read_text(encoding="utf-8").splitlines()[FIRST_LINE - 1:LAST_LINE]


class VllmPod:
    """The real capture served on loopback, with a live pod's values put in (see the module docstring)."""

    def __init__(self, lines: list[str]) -> None:
        self.lines = lines
        self.running = self.waiting = self.kv = self.share = 0.0
        self._busy, self._last = 0.0, time.monotonic()
        self._obs: dict[str, list[float]] = {"vllm:time_to_first_token_seconds": [],
                                             "vllm:e2e_request_latency_seconds": []}
        self._lock = threading.Lock()
        pod = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = pod.render()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05},
                                       daemon=True)
        self.thread.start()

    def set(self, *, running: float, waiting: float, kv: float, share: float) -> None:
        with self._lock:
            self._integrate()
            self.running, self.waiting, self.kv, self.share = running, waiting, kv, share

    def observe(self, family: str, seconds: float, n: int) -> None:
        with self._lock:
            self._obs[family] += [seconds] * n

    def _integrate(self) -> None:
        now = time.monotonic()
        self._busy += self.share * (now - self._last)
        self._last = now

    def render(self) -> bytes:
        with self._lock:
            self._integrate()
            gauges = {"vllm:num_requests_running": self.running, "vllm:num_requests_waiting": self.waiting,
                      "vllm:kv_cache_usage_perc": self.kv, "vllm:request_prefill_time_seconds_sum": self._busy}
            out = []
            for line in self.lines:
                m = SAMPLE.match(line)
                if m is None:
                    out.append(line)
                    continue
                name, labels, value = m.group(1), m.group(2) or "", float(m.group(3))
                family = name.rsplit("_", 1)[0]
                if name in gauges:
                    value = gauges[name]
                elif family in self._obs:
                    obs = self._obs[family]
                    if name.endswith("_bucket"):
                        le = LE.search(labels)
                        assert le is not None
                        value += sum(1 for o in obs if o <= float(le.group(1)))
                    elif name.endswith("_count"):
                        value += len(obs)
                    elif name.endswith("_sum"):
                        value += sum(obs)
                out.append(f"{name}{labels} {value!r}")
            return ("\n".join(out) + "\n").encode()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(10)


def poll(fn: Callable[[], T | None], within_s: float, what: str) -> T:
    deadline = time.monotonic() + within_s
    last: object = None
    while time.monotonic() < deadline:
        try:
            got = fn()
        except SourceUnavailable as exc:  # Prometheus starting, first scrape not in yet
            got, last = None, exc
        if got is not None:
            return got
        time.sleep(0.25)
    pytest.fail(f"{what} not seen within {within_s:g} s (last error: {last})")


@pytest.fixture
def pods() -> Iterator[dict[str, VllmPod]]:
    lines = capture()
    started = {"vllm-0": VllmPod(lines), "vllm-1": VllmPod(lines)}
    try:
        yield started
    finally:
        for p in started.values():
            p.close()


@pytest.fixture
def prometheus(prometheus_binary_path: str, tmp_path: Path, pods: dict[str, VllmPod]) -> Iterator[LocalPrometheus]:
    targets = tmp_path / "vllm-targets.json"
    targets.write_text(json.dumps([{"targets": [f"127.0.0.1:{p.port}"], "labels": {"pod": name}}
                                   for name, p in pods.items()]))
    job = {"job_name": "vllm", "file_sd_configs": [{"files": [str(targets)], "refresh_interval": "1s"}]}
    with local_prometheus(prometheus_binary_path, tmp_path, scrape_configs=[job], scrape_interval_s=SCRAPE_S,
                          log_path=tmp_path / "prometheus.log") as prom:
        yield prom


def test_engine_mode_reads_real_vllm_expositions_through_real_prometheus(
        prometheus: LocalPrometheus, pods: dict[str, VllmPod]) -> None:
    pods["vllm-0"].set(running=3, waiting=2, kv=0.4, share=0.3)
    pods["vllm-1"].set(running=1, waiting=0, kv=0.1, share=0.2)
    src = PrometheusSource(PrometheusClient(prometheus.url), selector='job="vllm"', engine=PROFILES["vllm"],
                           max_concurrency=8, scrape_interval_s=SCRAPE_S, max_sample_age_s=3.0)

    # 1. Gauges: per pod running, the engines' waiting as the backlog, slot = max(running/8, KV).
    def settled() -> LiveSignals | None:
        sig = src.read(time.time() - 10)
        f = sig.fine
        if len(f.t_s) == 0 or sig.replicas_seen != 2 or abs(f.prefill_replicas[-1] - 0.5) > 0.05:
            return None
        return sig
    sig = poll(settled, 30, "both pods with their prefill shares")
    assert dict(sig.inflight_by_replica) == {"vllm-0": 3.0, "vllm-1": 1.0}
    assert sig.queued == 2.0 and sig.fine.queued[-1] == 2.0
    assert math.isclose(sig.fine.slot_replicas[-1], 0.4 + 1 / 8)
    assert sig.newest_sample_s is not None and time.time() - sig.newest_sample_s < 3.0 + 2 * SCRAPE_S + 1
    assert sig.total_qps == 0.0  # histograms scraped, nothing completed yet

    # Which error for a missing metric, on the real API: targets up but not that engine's names
    # (the engine does not export it: InputError naming it); a selector matching no target (retry).
    with pytest.raises(InputError, match="sglang:num_running_reqs") as info:
        PrometheusSource(PrometheusClient(prometheus.url), selector='job="vllm"', engine=PROFILES["sglang"],
                         max_concurrency=8).read(time.time() - 10)
    assert "2 targets" in str(info.value) and info.value.fix is not None and "--enable-metrics" in info.value.fix
    with pytest.raises(SourceUnavailable, match="no target matches selector"):
        PrometheusSource(PrometheusClient(prometheus.url), selector='job="sglang"', engine=PROFILES["vllm"],
                         max_concurrency=8).read(time.time() - 10)

    # 2. Completions: what the pods observe arrives once, at the vLLM bucket's upper bound.
    cursor = time.time()
    pods["vllm-0"].observe("vllm:time_to_first_token_seconds", 0.3, 5)   # (0.25, 0.5]
    pods["vllm-1"].observe("vllm:time_to_first_token_seconds", 0.05, 2)  # (0.04, 0.06]
    pods["vllm-1"].observe("vllm:e2e_request_latency_seconds", 1.2, 3)   # (1.0, 1.5]
    seen: list[tuple[float, float, float]] = []

    def rows() -> bool | None:
        nonlocal cursor
        f = src.read(cursor).fine
        seen.extend(zip(f.done_ttft_ms.tolist(), f.done_e2e_ms.tolist(), f.done_weight.tolist(), strict=True))
        cursor = max(cursor, f.t_s.max(initial=cursor), f.done_t_s.max(initial=cursor))
        return True if sum(w for *_, w in seen) >= 10 else None
    poll(rows, 15, "10 weighted completions")
    time.sleep(2 * SCRAPE_S)
    rows()
    ttft = sorted((ms, w) for ms, e2e, w in seen if not math.isnan(ms))
    e2e = sorted((ms, w) for _, ms, w in seen if not math.isnan(ms))
    assert ttft == [(60.0, 2.0), (500.0, 5.0)]
    assert e2e == [(1500.0, 3.0)]

    # 3. A pod's target gone (staleness markers): one replica seen, not a smaller fleet.
    pods["vllm-1"].close()
    gone = time.time()

    def one_seen() -> LiveSignals | None:
        s = src.read(gone + 1)
        return s if len(s.fine.t_s) and s.replicas_seen == 1 else None
    sig = poll(one_seen, 15, "one replica seen after vllm-1 stopped")
    assert dict(sig.inflight_by_replica) == {"vllm-0": 3.0}
