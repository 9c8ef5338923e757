"""``ebb simulate --from-prometheus`` at the command line: bad input is one line and exit 2; a saved trace replays
with its as-run row."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np

from ebb.model.ids import TraceName
from ebb.model.measured import BucketSeries, MeasuredFleet
from ebb.model.trace import RequestTrace
from ebb.sources.traces import bundled_trace
from ebb.sources.traces.history_file import write_history_trace
from ebb.testing.etcd import free_port

HISTORY = ["--selector", 'job="vllm"', "--start", "2024-03-04T00:00:00Z", "--end", "2024-03-04T06:00:00Z",
           "--policy", "static"]


def _ebb(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", "from ebb.cli.main import main; main()", *args],
                          capture_output=True, text=True, timeout=300)


@contextmanager
def _answering(body: bytes) -> Iterator[str]:
    """A loopback HTTP server that answers every request with ``body`` (HTTP 200)."""
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _one_error_line(res: subprocess.CompletedProcess[str]) -> str:
    assert res.returncode == 2, res.stdout + res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and "Traceback" not in res.stderr, res.stderr
    return lines[0]


def test_an_unreachable_prometheus_is_one_line_naming_it_and_the_fix() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    line = _one_error_line(_ebb("simulate", "--from-prometheus", url, *HISTORY))
    assert url in line and "fix: check that --from-prometheus" in line


def test_a_server_that_is_not_prometheus_is_one_line() -> None:
    with _answering(b'{"status": "success", "data": {"resultType": "matrix", "result": "nope"}}') as url:
        line = _one_error_line(_ebb("simulate", "--from-prometheus", url, *HISTORY))
    assert url in line and "holds a str, not a list" in line and "fix:" in line


def test_no_series_under_the_selector_is_one_line_naming_the_selector() -> None:
    with _answering(b'{"status": "success", "data": {"resultType": "matrix", "result": []}}') as url:
        line = _one_error_line(_ebb("simulate", "--from-prometheus", url, *HISTORY))
    assert "no finished-request counter series" in line and 'job="vllm"' in line and "fix: check --selector" in line


def test_a_trace_file_and_from_prometheus_together_are_refused() -> None:
    line = _one_error_line(_ebb("simulate", "--from-prometheus", "http://127.0.0.1:9", "--trace", "azure-code",
                                *HISTORY))
    assert "--from-prometheus gives the trace; --trace" in line


def test_a_range_past_a_month_is_refused_before_any_query() -> None:
    line = _one_error_line(_ebb("simulate", "--from-prometheus", "http://127.0.0.1:9", "--selector", 'job="v"',
                                "--since", "40d"))
    assert "longer than the 31 days" in line


def _saved(tmp_path: Path) -> Path:
    """Ten minutes of the bundled conversation slice as a saved history, with a fleet of 2 then 3 replicas."""
    src = bundled_trace("azure-conv")
    keep = src.arrival_s < 600
    ms = np.floor(src.arrival_s[keep] * 1000.0)
    tr = RequestTrace(TraceName("vllm fleet"), ms / 1000.0, src.tokens_in[keep], src.tokens_out[keep],
                      source="http://prom:9090", start_epoch_s=1.7e9)
    ttft = np.zeros((2, 3))
    ttft[:, 0], ttft[:, 2] = tr.requests / 2 - 3, 3  # 6 of them over 2.5 s
    measured = MeasuredFleet(start_unix_s=1.7e9, step_s=30.0, replicas=np.repeat([2.0, 3.0], 10), bin_s=300.0,
                             ttft_s=BucketSeries((0.5, 2.5, math.inf), ttft), e2e_s=None,
                             replicas_from='sum(up{job="vllm"})')
    path = tmp_path / "fleet.ebbh.gz"
    write_history_trace(path, tr, provenance={"prometheus": "http://prom:9090"}, measured=measured)
    return path


def test_a_saved_history_replays_offline_at_its_own_load_with_the_as_run_row(tmp_path: Path) -> None:
    out, rep = tmp_path / "cards.json", tmp_path / "r.html"
    res = _ebb("simulate", "--trace", str(_saved(tmp_path)), "--policy", "static,ebb,oracle", "--quiet",
               "--json", str(out), "--report", str(rep))
    assert res.returncode == 0, res.stderr
    cards = {c["policy"]: c for c in json.loads(out.read_text())}
    run = cards["as-run"]
    assert run["fidelity"] == "measured" and run["load_scale"] == 1.0
    assert run["gpu_hours"] == (10 * 2 + 10 * 3) * 30 / 3600
    assert run["slo_violations"] == 6
    assert "As run: your fleet used 0.42 GPU-h" in res.stdout and "Ebb (ebb) would have used" in res.stdout
    # the verdict's pick is a simulated policy, never the measured row; the report says the same
    assert "Deploy as-run" not in res.stdout
    html = rep.read_text()
    assert "As run: your fleet used 0.42 GPU-h" in html and "Deploy as-run" not in html and "as-run" in html


def test_a_scaled_replay_leaves_the_as_run_row_out_and_says_why(tmp_path: Path) -> None:
    out = tmp_path / "cards.json"
    res = _ebb("simulate", "--trace", str(_saved(tmp_path)), "--policy", "static", "--quiet", "--load-scale", "2",
               "--json", str(out))
    assert res.returncode == 0, res.stderr
    assert [c["policy"] for c in json.loads(out.read_text())] == ["static"]
    assert "no as-run row: the load is scaled" in res.stdout
