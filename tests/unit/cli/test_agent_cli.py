"""`ebb agent`: prints its URL, serves buckets, and exits cleanly on SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

import ebb.cli.agent  # noqa: F401  (registers the command until ebb.cli.main lists it)
from ebb.agent.server import Agent
from ebb.cli.agent import TOKEN_ENV, open_nvml, read_token
from ebb.cli.main import app
from ebb.errors import ConfigError, MissingExtraError
from ebb.testing.etcd import free_port

# main.py may not list the agent module yet: import it before running the app
RUN = "import ebb.cli.main as m, ebb.cli.agent; m.main()"


def test_the_agent_prints_its_url_serves_health_and_stops_on_sigterm() -> None:
    dead_worker = f"http://127.0.0.1:{free_port()}"
    proc = subprocess.Popen([sys.executable, "-c", RUN, "agent", "--endpoint", dead_worker, "--no-nvml",
                             "--name", "cli-test"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=os.environ | {"PYTHONUNBUFFERED": "1"})
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:"), proc.stderr.read() if proc.stderr else ""
        with urllib.request.urlopen(f"{url}/healthz", timeout=10) as resp:
            assert json.loads(resp.read())["agent"] == "cli-test"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()


def test_the_agent_needs_an_endpoint() -> None:
    from typer.testing import CliRunner

    res = CliRunner().invoke(app, ["agent", "--no-nvml"])
    assert isinstance(res.exception, ConfigError) and "--endpoint" in str(res.exception)


def test_nvml_when_requested_but_missing_names_the_extra_and_is_skipped_otherwise() -> None:
    try:
        import pynvml  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("pynvml is installed here; the missing-package path cannot be shown")
    with pytest.raises(MissingExtraError, match=r"ebb\[nvml\]"):
        open_nvml(True)
    assert open_nvml(None) is None and open_nvml(False) is None


# -- issue 12: URLs, bind, token, TLS flags (L7, H3, M3) ----------------------------------------
def _start(*args: str, env: dict[str, str] | None = None) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen([sys.executable, "-c", RUN, "agent", "--no-nvml", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            env=os.environ | {"PYTHONUNBUFFERED": "1"} | (env or {}))
    assert proc.stdout is not None
    return proc, proc.stdout.readline().strip()


def _stop(proc: subprocess.Popen[str]) -> str:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    err = proc.stderr.read() if proc.stderr else ""
    for stream in (proc.stdout, proc.stderr):
        if stream is not None:
            stream.close()
    return err


def test_an_empty_port_exits_2_with_one_line_and_no_traceback() -> None:
    # L7: `ebb agent --endpoint http://127.0.0.1:` polled port 80
    res = subprocess.run([sys.executable, "-c", RUN, "agent", "--endpoint", "http://127.0.0.1:", "--no-nvml"],
                         capture_output=True, text=True, timeout=60, env=os.environ | {"COLUMNS": "400"})
    assert res.returncode == 2 and res.stdout == ""
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "empty or zero port" in lines[0] and "fix:" in lines[0]


@pytest.mark.parametrize("args", [
    ["--endpoint", "http://127.0.0.1:0"], ["--endpoint", "ftp://10.0.0.1:21"],
    ["--endpoint", "http://u:p@10.0.0.1:8000"], ["--endpoint", "http://10.0.0.1:8000/x?y=1"],
    ["--endpoints-from", "gopher://10.0.0.1:1"], ["--endpoints-from", "http://10.0.0.1:"],
    ["--endpoint", "http://10.0.0.1:1", "--tls-cert", "/x.crt"],
    ["--endpoint", "http://10.0.0.1:1", "--tls-client-ca", "/ca.crt"],
    ["--endpoint", "http://10.0.0.1:1", "--max-endpoints", "0"],
    ["--endpoint", "http://10.0.0.1:1", "--endpoint", "http://10.0.0.2:1", "--max-endpoints", "1"],
    ["--endpoint", "http://10.0.0.1:1", "--tls-cert", "/nonexistent.crt", "--tls-key", "/nonexistent.key"],
], ids=lambda a: " ".join(a))
def test_unusable_urls_and_flag_combinations_are_config_errors(args: list[str]) -> None:
    from typer.testing import CliRunner

    res = CliRunner().invoke(app, ["agent", "--no-nvml", *args])
    assert isinstance(res.exception, ConfigError), res.output
    assert "fix" in str(res.exception) or "--" in str(res.exception)


def test_the_token_comes_from_the_file_else_the_environment(tmp_path: Path) -> None:
    f = tmp_path / "token"
    f.write_text("  s3cret-from-file\n")
    assert read_token(f, {TOKEN_ENV: "from-env"}) == "s3cret-from-file"
    assert read_token(None, {TOKEN_ENV: " from-env\n"}) == "from-env"
    assert read_token(None, {TOKEN_ENV: ""}) is None and read_token(None, {}) is None
    for bad, why in ((tmp_path / "missing", "cannot read"), (tmp_path / "empty", "empty")):
        if why == "empty":
            bad.write_text("\n")
        with pytest.raises(ConfigError, match=why):
            read_token(bad, {})
    big = tmp_path / "big"
    big.write_bytes(b"x" * (64 * 1024 + 1))
    with pytest.raises(ConfigError, match="64 KiB"):
        read_token(big, {})


def test_a_token_with_spaces_is_refused() -> None:
    with pytest.raises(ConfigError, match="token"):
        Agent(["http://127.0.0.1:1"], token="two words")


def test_bind_is_honoured_and_the_env_token_guards_the_buckets() -> None:
    # H3: the bind flag must exist and work; M3: the token from EBB_AGENT_TOKEN
    proc, url = _start("--endpoint", f"http://127.0.0.1:{free_port()}", "--bind", "127.0.0.2",
                       env={TOKEN_ENV: "tok-123"})
    try:
        assert url.startswith("http://127.0.0.2:"), proc.stderr.read() if proc.stderr else ""
        with urllib.request.urlopen(f"{url}/healthz", timeout=10) as resp:
            assert resp.status == 200
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(f"{url}/v1/buckets", timeout=10)
        assert err.value.code == 401
        err.value.close()
        req = urllib.request.Request(f"{url}/v1/buckets", headers={"Authorization": "Bearer tok-123"})
        with urllib.request.urlopen(req, timeout=10) as resp:
            assert json.loads(resp.read())["version"] == 1
        port = url.rsplit(":", 1)[1]
        with pytest.raises(OSError):  # bound to 127.0.0.2 only
            urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5)
    finally:
        err_text = _stop(proc)
    assert "without a token" not in err_text  # loopback with a token: no warning


def test_serving_beyond_loopback_without_a_token_warns() -> None:
    proc, url = _start("--endpoint", f"http://127.0.0.1:{free_port()}", "--bind", "0.0.0.0")
    try:
        assert url.startswith("http://0.0.0.0:")
    finally:
        err_text = _stop(proc)
    assert "without a token" in err_text and "--token-file" in err_text


# -- issue 14: engines -------------------------------------------------------------------------
@pytest.mark.parametrize("args, needle", [
    (["--engine", "tgi", "--endpoint", "http://10.0.0.1:80/metrics"], "--max-concurrency"),
    (["--engine", "vllm", "--endpoint", "http://10.0.0.1:8000/metrics", "--poll-ms", "50"], "--poll-ms"),
    (["--engine", "vllm", "--endpoint", "http://10.0.0.1:8000/metrics", "--poll-ms", "2000"], "--poll-ms"),
    (["--engine", "vllm", "--endpoint", "http://10.0.0.1:8000/metrics", "--poll-ms", "500", "--bucket-ms", "200"],
     "disagree"),
    (["--engine", "nosuch", "--endpoint", "http://10.0.0.1:8000/metrics"], "nosuch"),
    (["--endpoint", "http://10.0.0.1:8000", "--max-concurrency", "4"], "--engine"),
    (["--pod-selector", "app=vllm"], "--engine"),
    (["--engine", "vllm", "--pod-selector", "app=vllm", "--node-name", ""], "--node-name"),
    (["--engine", "vllm", "--pod-selector", "novalue", "--node-name", "n1"], "--pod-selector"),
    (["--engine", "vllm", "--endpoint", "http://10.0.0.1:8000/metrics?x=1"], "query"),
    (["--engine", "vllm", "--endpoint", "http://10.0.0.1:8000/metrics", "--parse-budget-ms", "0"],
     "--parse-budget-ms"),
    (["--engine", "vllm", "--endpoint", "http://10.0.0.1:8000/metrics", "--parse-budget-ms", "nan"],
     "--parse-budget-ms"),
    (["--endpoint", "http://10.0.0.1:8000", "--model", "m"], "--engine"),
    (["--engine", "tgi", "--endpoint", "http://10.0.0.1:80/metrics", "--max-concurrency", "4", "--model", "m"],
     "labels no model"),
], ids=lambda a: " ".join(a) if isinstance(a, list) else a)
def test_engine_flags_that_cannot_work_are_config_errors(args: list[str], needle: str,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    monkeypatch.delenv("NODE_NAME", raising=False)
    res = CliRunner().invoke(app, ["agent", "--no-nvml", *args])
    assert isinstance(res.exception, ConfigError), (res.output, res.exception)
    assert needle in str(res.exception)


_LLAMA_PAGE = (b"# TYPE llamacpp:prompt_seconds_total counter\nllamacpp:prompt_seconds_total 1.5\n"
               b"# TYPE llamacpp:requests_processing gauge\nllamacpp:requests_processing 3\n"
               b"# TYPE llamacpp:requests_deferred gauge\nllamacpp:requests_deferred 1\n")


def _engine_page(page: bytes = _LLAMA_PAGE) -> tuple[str, Callable[[], None]]:
    """``page`` served on a loopback port: (URL, stop)."""
    import http.server
    import threading

    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(page)))
            self.end_headers()
            self.wfile.write(page)

        def log_message(self, *a: object) -> None:
            pass
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, args=(0.05,), daemon=True).start()

    def stop() -> None:
        srv.shutdown()
        srv.server_close()
    return f"http://127.0.0.1:{srv.server_address[1]}", stop


def _worker_in_buckets(url: str, name: str) -> dict[str, object]:
    import time

    deadline = time.monotonic() + 20
    while True:
        with urllib.request.urlopen(f"{url}/v1/buckets", timeout=10) as resp:
            page = json.loads(resp.read())
        for b in page["buckets"]:
            if name in b["workers"]:
                return dict(b["workers"][name])
        if time.monotonic() > deadline:
            pytest.fail(f"{name} never in the agent's buckets: {page['buckets'][-1:]}")
        time.sleep(0.2)


def test_an_engine_agent_polls_its_endpoint_at_the_poll_period() -> None:
    engine_url, stop = _engine_page()
    try:
        proc, url = _start("--engine", "llamacpp", "--endpoint", f"{engine_url}/metrics", "--max-concurrency", "4",
                           "--poll-ms", "200")
        try:
            assert url.startswith("http://127.0.0.1:"), proc.stderr.read() if proc.stderr else ""
            w = _worker_in_buckets(url, engine_url.removeprefix("http://"))
            assert (w["running"], w["waiting"], w["max_batch"], w["slot_ratio"]) == (3.0, 1.0, 4, 0.75)
            with urllib.request.urlopen(f"{url}/v1/buckets", timeout=10) as resp:
                assert json.loads(resp.read())["bucket_ms"] == 200
        finally:
            _stop(proc)
    finally:
        stop()


def test_engine_pods_are_found_through_the_kubeconfig(tmp_path: Path) -> None:
    pytest.importorskip("kubernetes")
    from ebb.testing.fake_kube import FakeKubeApiServer

    engine_url, stop = _engine_page()
    port = engine_url.rsplit(":", 1)[1]
    try:
        with FakeKubeApiServer() as fake:
            fake.add_pod("llama-0", {"app": "llama"}, node="node-a", ip="127.0.0.1", namespace="serving")
            kubeconfig = fake.write_kubeconfig(tmp_path / "kubeconfig")
            proc, url = _start("--engine", "llamacpp", "--max-concurrency", "2", "--pod-selector", "app=llama",
                               "--pod-port", port, "--pod-namespace", "serving",
                               env={"KUBECONFIG": str(kubeconfig), "NODE_NAME": "node-a",
                                    "KUBERNETES_SERVICE_HOST": ""})
            try:
                assert url.startswith("http://127.0.0.1:"), proc.stderr.read() if proc.stderr else ""
                w = _worker_in_buckets(url, f"127.0.0.1:{port}")
                assert w["slot_ratio"] == 1.0 and w["max_batch"] == 2
            finally:
                _stop(proc)
            listed = fake.calls("GET", "/api/v1/namespaces/serving/pods")
            assert listed and listed[0].query["fieldSelector"] == "spec.nodeName=node-a"
    finally:
        stop()


def test_the_gpus_can_come_from_a_dcgm_exporter() -> None:
    dcgm = (b'DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-1",modelName="H200",Hostname="n1"} 37\n'
            b'DCGM_FI_PROF_GR_ENGINE_ACTIVE{gpu="0",UUID="GPU-1",modelName="H200",Hostname="n1"} 0.5\n'
            b'DCGM_FI_DEV_FB_USED{gpu="0",UUID="GPU-1",modelName="H200",Hostname="n1"} 2048\n')
    exporter, stop_dcgm = _engine_page(dcgm)
    engine_url, stop = _engine_page()
    try:
        proc, url = _start("--engine", "llamacpp", "--endpoint", f"{engine_url}/metrics", "--max-concurrency", "4",
                           "--dcgm", f"{exporter}/metrics")
        try:
            import time

            deadline = time.monotonic() + 20
            gpu: dict[str, float] = {}
            while not gpu and time.monotonic() < deadline:
                with urllib.request.urlopen(f"{url}/v1/buckets", timeout=10) as resp:
                    gpu = next((b["gpu"] for b in json.loads(resp.read())["buckets"] if b["gpu"]), {})
                time.sleep(0.2)
        finally:
            _stop(proc)
    finally:
        stop()
        stop_dcgm()
    assert gpu.get("gpu0/busy_pct") == 50.0 and gpu.get("gpu0/util_gpu_pct") == 37.0
    assert gpu.get("gpu0/mem_used_mib") == 2048.0


_TWO_MODELS = "".join(f'vllm:num_requests_running{{engine="0",model_name="{m}"}} {r}\n'
                      f'vllm:num_requests_waiting{{engine="0",model_name="{m}"}} {w}\n'
                      f'vllm:kv_cache_usage_perc{{engine="0",model_name="{m}"}} 0.5\n'
                      f'vllm:request_prefill_time_seconds_sum{{engine="0",model_name="{m}"}} 1.0\n'
                      for m, r, w in (("llama-8b", 3, 1), ("qwen-7b", 5, 4))).encode()


def test_an_engine_agent_reads_the_model_it_is_given_and_refuses_a_two_model_page_without_one() -> None:
    engine_url, stop = _engine_page(_TWO_MODELS)
    name = engine_url.removeprefix("http://")
    try:
        proc, url = _start("--engine", "vllm", "--endpoint", f"{engine_url}/metrics", "--max-concurrency", "8",
                           "--model", "qwen-7b", "--poll-ms", "200")
        try:
            w = _worker_in_buckets(url, name)
            assert (w["running"], w["waiting"]) == (5.0, 4.0)  # qwen-7b's alone, never 8 / 5
        finally:
            _stop(proc)
        proc, url = _start("--engine", "vllm", "--endpoint", f"{engine_url}/metrics", "--max-concurrency", "8",
                           "--poll-ms", "200")
        try:
            import time

            time.sleep(1.5)  # several polls
            with urllib.request.urlopen(f"{url}/v1/buckets", timeout=10) as resp:
                page = json.loads(resp.read())
            assert page["buckets"] and all(name not in b["workers"] for b in page["buckets"])
            assert any(name in str(b.get("missing", [])) for b in page["buckets"])
        finally:
            err = _stop(proc)
    finally:
        stop()
    said = [line for line in err.splitlines() if "serves 2 models" in line]
    assert len(said) == 1 and "--model NAME" in said[0]  # said once, not every poll
