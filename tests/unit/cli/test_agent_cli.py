"""`ebb agent`: prints its URL, serves buckets, and exits cleanly on SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request

import pytest

import ebb.cli.agent  # noqa: F401  (registers the command until ebb.cli.main lists it)
from ebb.cli.agent import open_nvml
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
