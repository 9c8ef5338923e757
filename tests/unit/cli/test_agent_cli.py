"""`ebb agent`: prints its URL, serves buckets, and exits cleanly on SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
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
