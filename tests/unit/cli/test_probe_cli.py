"""`ebb probe`: real captures, two-scrape intervals, servers without metrics (exit 2, one line), a live llama-server."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from ebb.cli.main import app
from ebb.errors import ConfigError, InputError
from ebb.testing.hostile_http import HostilePeer, answer

SHARED = Path(__file__).resolve().parents[3] / ".." / "shared" / "data" / "engine-metrics"
LLAMA = SHARED / "llamacpp" / "captured-here"
VLLM_CAPTURE = SHARED / "vllm" / "cncf__k8s-ai-conformance__v1.35__kops__tests__Test_SchedulingOrchestration_PodAutoscaling__output.md"
SGLANG_DOC = SHARED / "sglang" / "sgl-project__sglang__docs__references__production_metrics.md"
RUN = "import ebb.cli.main as m; m.main()"
NO_METRICS = b"This server does not support metrics endpoint"


def _need_shared() -> None:
    if not LLAMA.is_dir():
        msg = f"shared engine captures not present at {SHARED}"
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI must provide ../shared: {msg}")
        pytest.skip(msg)


def _capture_files() -> list[str]:
    return sorted(p.name for p in LLAMA.glob("*.txt")) if LLAMA.is_dir() else ["(shared data absent)"]


def value(text: str, name: str) -> float:
    """A label-less sample's value, read independently of the product's parser."""
    m = re.search(rf"^{re.escape(name)}(?:\{{[^}}]*\}})?\s+(\S+)\s*$", text, re.MULTILINE)
    assert m is not None, name
    return float(m.group(1))


def probe_json(*args: str) -> dict[str, Any]:
    res = CliRunner().invoke(app, ["probe", *args, "--json"])
    assert res.exit_code == 0, (res.output, res.exception)
    out: dict[str, Any] = json.loads(res.stdout)
    return out


def cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", RUN, "probe", *args], capture_output=True, text=True,
                          timeout=timeout, env=os.environ | {"COLUMNS": "400"})


# -- the captures -------------------------------------------------------------------------------
@pytest.mark.parametrize("name", _capture_files())
def test_each_llama_cpp_capture_prints_its_signals(name: str) -> None:
    _need_shared()
    path = LLAMA / name
    text = path.read_text(encoding="utf-8")
    res = CliRunner().invoke(app, ["probe", "--engine", "llamacpp", str(path)])
    assert res.exit_code == 0, res.output
    out = res.stdout
    running, waiting = value(text, "llamacpp:requests_processing"), value(text, "llamacpp:requests_deferred")
    assert re.search(rf"running\s+{running:g}\s+llamacpp:requests_processing", out)
    assert re.search(rf"waiting\s+{waiting:g}\s+llamacpp:requests_deferred", out)
    assert "unknown: give --max-concurrency" in out and "missing: kv_usage" in out
    j = probe_json("--engine", "llamacpp", str(path), "--max-concurrency", "4")
    assert (j["running"], j["waiting"], j["max_concurrency"], j["max_concurrency_from"]) == (
        running, waiting, 4, "--max-concurrency")
    assert j["slot_ratio"] == min(1.0, running / 4) and j["busy_ratio"] is None and j["scrapes"] == 1


def test_two_captures_give_the_busy_share_over_the_interval() -> None:
    _need_shared()
    busy, idle = LLAMA / "metrics_busy_4slots_6deferred.txt", LLAMA / "metrics_idle.txt"
    j = probe_json("--engine", "llamacpp", str(busy), str(idle), "--interval-s", "5")
    d = value(idle.read_text(), "llamacpp:prompt_seconds_total") - value(busy.read_text(), "llamacpp:prompt_seconds_total")
    assert j["busy_ratio"] == pytest.approx(d / 5) and j["interval_s"] == 5.0 and j["scrapes"] == 2
    assert j["read_from"]["busy_seconds"] == "llamacpp:prompt_seconds_total"
    res = CliRunner().invoke(app, ["probe", "--engine", "llamacpp", str(busy), str(idle), "--interval-s", "5"])
    assert "two scrapes 5 s apart" in res.stdout and f"{100 * d / 5:.1f} %" in res.stdout


def test_a_vllm_capture_block_gives_kv_usage_and_histogram_counts(tmp_path: Path) -> None:
    _need_shared()
    block = "\n".join(VLLM_CAPTURE.read_text(encoding="utf-8").splitlines()[114:675]) + "\n"
    page = tmp_path / "vllm.txt"
    page.write_text(block)
    j = probe_json("--engine", "vllm", str(page))
    assert j["kv_usage_ratio"] == value(block, "vllm:kv_cache_usage_perc")
    assert j["running"] == value(block, "vllm:num_requests_running") and j["max_concurrency"] is None
    assert j["latency"]["ttft"]["count"] == value(block, "vllm:time_to_first_token_seconds_count")
    assert j["latency"]["ttft"]["metric"] == "vllm:time_to_first_token_seconds"
    assert j["latency"]["ttft"]["window"] == "since start"


def test_an_sglang_capture_block_gives_p99_upper_bounds(tmp_path: Path) -> None:
    _need_shared()
    block = "\n".join(SGLANG_DOC.read_text(encoding="utf-8").splitlines()[10:125]) + "\n"
    page = tmp_path / "sglang.txt"
    page.write_text(block)
    j = probe_json("--engine", "sglang", str(page), "--max-concurrency", "256")
    assert j["running"] == value(block, "sglang:num_running_reqs")
    assert j["waiting"] == value(block, "sglang:num_queue_reqs")
    assert j["kv_usage_ratio"] == value(block, "sglang:token_usage")
    e2e = j["latency"]["e2e"]
    assert e2e["count"] == value(block, "sglang:e2e_request_latency_seconds_count")
    # the P99 from the buckets read here: the smallest bound whose cumulative count reaches 99 %
    bounds = [(float(m.group(1)), float(m.group(2))) for m in re.finditer(
        r'^sglang:e2e_request_latency_seconds_bucket\{le="([^"]+)"[^}]*\}\s+(\S+)$', block, re.MULTILINE)]
    need = 0.99 * e2e["count"]
    upper = next(b for b, c in sorted(bounds) if c >= need)
    if upper == float("inf"):
        assert e2e["p99_ms"] is None and e2e["p99_above_ms"] == 1000 * max(b for b, _ in bounds if b != upper)
    else:
        assert e2e["p99_ms"] == pytest.approx(1000 * upper)


# -- servers ------------------------------------------------------------------------------------
@pytest.fixture
def peers() -> Iterator[list[HostilePeer]]:
    started: list[HostilePeer] = []
    yield started
    for p in started:
        p.close()


def test_a_llama_server_without_metrics_exits_2_with_the_fix_and_no_traceback(peers: list[HostilePeer]) -> None:
    peer = HostilePeer(answer(NO_METRICS, status="501 Not Implemented"))
    peers.append(peer)
    res = cli("--engine", "llamacpp", f"{peer.url}/metrics")
    assert res.returncode == 2 and res.stdout == ""
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in res.stderr
    assert "501" in lines[0] and "start llama-server with --metrics" in lines[0]
    gone = HostilePeer(answer(b"not found", status="404 Not Found"))
    peers.append(gone)
    with pytest.raises(InputError, match="404"):
        CliRunner().invoke(app, ["probe", "--engine", "vllm", f"{gone.url}/metrics"], catch_exceptions=False)


def test_a_page_without_the_required_gauges_names_the_metric_and_the_engine(tmp_path: Path) -> None:
    page = tmp_path / "other.txt"
    page.write_text("# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total 12.5\n")
    res = cli("--engine", "sglang", str(page))
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert "sglang:num_running_reqs" in res.stderr and "--enable-metrics" in res.stderr
    missing = cli("--engine", "vllm", str(tmp_path / "absent.txt"))
    assert missing.returncode == 2 and "cannot read" in missing.stderr


def test_an_engines_file_with_an_empty_histogram_list_exits_2_with_one_line_naming_file_key_and_fix(
        tmp_path: Path) -> None:
    # The review's e15_empty_hist_list.yaml: was an internal error (ValueError) before.
    engines = tmp_path / "engines.yaml"
    engines.write_text("engines:\n  myeng:\n    extends: vllm\n    ttft: []\n")
    page = tmp_path / "scrape.txt"
    page.write_text('vllm:num_requests_running{model_name="m"} 3\nvllm:num_requests_waiting{model_name="m"} 1\n')
    res = cli("--engine", "myeng", "--engines-file", str(engines), str(page))
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2 and res.stdout == "" and len(lines) == 1 and "Traceback" not in res.stderr
    assert f"{engines}: engines.myeng.ttft: empty list" in lines[0] and "(fix: " in lines[0]
    assert "internal error" not in lines[0]


def test_two_scrapes_across_a_restart_that_climbed_past_the_old_counts_report_the_reset(tmp_path: Path) -> None:
    def page(created: float, count: int) -> str:
        return ('vllm:num_requests_running 1\nvllm:num_requests_waiting 0\n'
                f'vllm:time_to_first_token_seconds_bucket{{le="0.1"}} {count}\n'
                f'vllm:time_to_first_token_seconds_bucket{{le="+Inf"}} {count}\n'
                f'vllm:time_to_first_token_seconds_created {created}\n')
    before, after = tmp_path / "before.txt", tmp_path / "after.txt"
    before.write_text(page(100.0, 5))
    after.write_text(page(900.0, 50))  # restarted at 900 and counted 50 since: no decrease anywhere
    out = probe_json("--engine", "vllm", str(before), str(after))
    assert out["resets"] == ["ttft"] and "ttft" not in out["latency"]


def test_bad_arguments_are_config_errors(tmp_path: Path) -> None:
    f = tmp_path / "x.txt"
    f.write_text("x 1\n")
    for args in (["http://127.0.0.1:1/metrics", str(f)], [str(f), str(f), str(f)]):
        res = CliRunner().invoke(app, ["probe", "--engine", "vllm", *args])
        assert isinstance(res.exception, ConfigError)
    for flag, v in (("--interval-s", "0"), ("--interval-s", "nan"), ("--max-concurrency", "0")):
        res = CliRunner().invoke(app, ["probe", "--engine", "vllm", str(f), flag, v])
        assert isinstance(res.exception, ConfigError), res.output


def test_a_url_is_read_twice_and_the_interval_histograms_give_p99_upper_bounds(peers: list[HostilePeer]) -> None:
    n = {"calls": 0}
    lock = threading.Lock()

    def handle(conn: socket.socket, req: bytes) -> None:
        with lock:
            n["calls"] += 1
            k = n["calls"]
        # each call: 10 more observations at <= 0.1 s and, from the second call on, one more at <= 2.5 s
        fast, slow = 10 * k, max(0, k - 1)
        lines = ["vllm:num_requests_running 5", "vllm:num_requests_waiting 1", "vllm:kv_cache_usage_perc 0.7",
                 f"vllm:request_prefill_time_seconds_sum {0.05 * k}"]
        for le, c in (("0.1", fast), ("2.5", fast + slow), ("+Inf", fast + slow)):
            lines.append(f'vllm:time_to_first_token_seconds_bucket{{le="{le}"}} {c}')
        lines += [f"vllm:time_to_first_token_seconds_count {fast + slow}", "vllm:time_to_first_token_seconds_sum 1"]
        body = ("\n".join(lines) + "\n").encode()
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: "
                     + str(len(body)).encode() + b"\r\n\r\n" + body)
    peer = HostilePeer(handle)
    peers.append(peer)
    j = probe_json("--engine", "vllm", f"{peer.url}/metrics", "--interval-s", "0.2")
    assert n["calls"] == 2 and j["scrapes"] == 2 and j["pod"] == peer.url.removeprefix("http://")
    assert 0.2 <= j["interval_s"] < 3600.0  # the measured gap (at least the asked 0.2 s), not a clock reading
    ttft = j["latency"]["ttft"]
    assert ttft["count"] == 11 and ttft["window"] == "interval"
    assert ttft["p99_ms"] == 2500.0  # the upper bound of the bucket holding the 99th percentile
    assert j["slot_ratio"] == 0.7 and 0 < j["busy_ratio"] <= 0.25


# -- a live llama-server ------------------------------------------------------------------------
def _serve_llama(binary: str, model: Path, log: Path, *extra: str) -> tuple[subprocess.Popen[bytes], str]:
    from ebb.demo.local_prometheus import free_port

    port = free_port()
    with log.open("ab") as out:  # the child keeps its own copy of the descriptor
        proc = subprocess.Popen([binary, "-np", "2", "-c", "1024", "-t", "1", "--host", "127.0.0.1", "--port",
                                 str(port), "-m", str(model), "--no-webui", *extra], stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as resp:
                if resp.status == 200:
                    return proc, url
        except (urllib.error.URLError, OSError):
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            proc.wait()
            pytest.fail(f"llama-server did not become healthy; log: {log.read_text()[-2000:]}")
        time.sleep(0.2)


def test_probe_on_a_live_llama_server_with_and_without_metrics(llama_server_binary: str, llama_model: Path,
                                                               tmp_path: Path) -> None:
    with_metrics, url = _serve_llama(llama_server_binary, llama_model, tmp_path / "a.log", "--metrics")
    try:
        res = cli("--engine", "llamacpp", f"{url}/metrics", "--interval-s", "0.3", "--max-concurrency", "2", "--json")
        assert res.returncode == 0, res.stderr
        j = json.loads(res.stdout)
        assert j["running"] == 0.0 and j["waiting"] == 0.0 and j["max_concurrency"] == 2 and j["scrapes"] == 2
        assert j["busy_ratio"] == 0.0 and j["read_from"]["running"] == "llamacpp:requests_processing"
    finally:
        with_metrics.terminate()
        with_metrics.wait(20)
    without, url2 = _serve_llama(llama_server_binary, llama_model, tmp_path / "b.log")
    try:
        res = cli("--engine", "llamacpp", f"{url2}/metrics")
        assert res.returncode == 2 and "Traceback" not in res.stderr and len(res.stderr.strip().splitlines()) == 1
        assert "501" in res.stderr and "start llama-server with --metrics" in res.stderr
    finally:
        without.terminate()
        without.wait(20)
