"""A throwaway Prometheus server on loopback for ``ebb demo --live`` (Debian's ``prometheus``); tests use it too.

:class:`LocalPrometheus` runs the real binary as a plain process on ``127.0.0.1`` with its own
TSDB directory and ``--web.enable-lifecycle`` (so ``reload()`` re-reads the config). ``start()``
returns once ``/-/ready`` answers 200 (at most 30 s; otherwise :class:`~ebb.errors.SourceUnavailable`
with the log's tail and the fix);
``stop()`` terminates (SIGTERM once, SIGKILL after 10 s), ``kill()`` sends SIGKILL at once (no clean
shutdown: no staleness markers are written, the state a crashed server leaves). ``start()`` again
reuses the same port and data dir, so a test can bring the server back over its old samples. On
Linux the server never outlives the process that started it, even one killed with SIGKILL
(:func:`ebb.actuate.children.spawn`).

:func:`write_config` writes the config (global intervals + the given scrape configs); the
file-SD variant tests use is in :mod:`ebb.testing.prometheus`.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from ebb.actuate.children import spawn, stop
from ebb.errors import SourceUnavailable

__all__ = ["PROMETHEUS_INSTALL", "LocalPrometheus", "free_port", "prometheus_binary", "write_config"]

PROMETHEUS_INSTALL = "apt-get install -y prometheus"


def free_port() -> int:
    """A free TCP port on 127.0.0.1 (bound and released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def prometheus_binary() -> str | None:
    """Path of the prometheus binary, or None when it is not installed."""
    found = shutil.which("prometheus")
    if found:
        return found
    return "/usr/bin/prometheus" if os.access("/usr/bin/prometheus", os.X_OK) else None


def write_config(path: Path, scrape_configs: Sequence[Mapping[str, Any]], *,
                 scrape_interval_s: float = 1.0) -> Path:
    """Write a Prometheus config with these ``scrape_configs`` (dicts as in prometheus.yml)."""
    interval = _duration(scrape_interval_s)
    doc = {"global": {"scrape_interval": interval, "evaluation_interval": interval,
                      "scrape_timeout": _duration(min(scrape_interval_s, 10.0))},
           "scrape_configs": [dict(c) for c in scrape_configs]}
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def _duration(seconds: float) -> str:
    # Prometheus durations take integer units: express sub-second values in milliseconds.
    ms = round(seconds * 1000)
    return f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms}ms"


class LocalPrometheus:
    """One Prometheus process on a fixed loopback port and data dir; restartable."""

    def __init__(self, binary: str, data_dir: Path, config_path: Path, *, port: int | None = None,
                 log_path: Path | None = None, ready_within_s: float = 30.0, retention: str = "1d") -> None:
        self.binary = binary
        self.retention = retention  # backfilled history (tests) is kept only within it of the newest sample
        # Prometheus resolves relative paths against the config's directory, not our cwd.
        self.data_dir = data_dir.resolve()
        self.config_path = config_path.resolve()
        self.port = port if port is not None else free_port()
        self.log_path = log_path
        self.ready_within_s = ready_within_s
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> str:
        """Start the server (no-op when running) and wait until ready; returns its URL."""
        if self.running:
            return self.url
        args = [self.binary, f"--config.file={self.config_path}",
                f"--storage.tsdb.path={self.data_dir / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{self.port}", "--web.enable-lifecycle",
                f"--storage.tsdb.retention.time={self.retention}", "--log.level=warn"]
        out = self.log_path.open("ab") if self.log_path is not None else subprocess.DEVNULL
        try:
            self._proc = spawn(args, stdout=out, stderr=subprocess.STDOUT)
        finally:
            if not isinstance(out, int):
                out.close()
        try:
            self._wait_ready()
        except BaseException:
            self.kill()
            raise
        return self.url

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.ready_within_s
        assert self._proc is not None
        while True:
            if self._proc.poll() is not None:
                raise SourceUnavailable(f"prometheus exited with {self._proc.returncode} (fix: check its config "
                                        f"{self.config_path} and that port {self.port} is free): {self._log_tail()}")
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=1.0) as resp:
                    if resp.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                raise SourceUnavailable(f"prometheus not ready at {self.url} within {self.ready_within_s:g} s "
                                        f"(fix: retry; a loaded machine may need longer): {self._log_tail()}")
            time.sleep(0.05)

    def _log_tail(self) -> str:
        if self.log_path is None or not self.log_path.exists():
            return "(no log kept)"
        return self.log_path.read_text(errors="replace")[-2000:]

    def reload(self) -> None:
        """Ask the server to re-read its config (``POST /-/reload``)."""
        req = urllib.request.Request(f"{self.url}/-/reload", method="POST", data=b"")
        with urllib.request.urlopen(req, timeout=10.0) as resp:
            resp.read()

    def stop(self) -> None:
        """Clean shutdown: SIGTERM once, SIGKILL after 10 s."""
        if self._proc is None:
            return
        stop(self._proc, grace_s=10.0)
        self._proc = None

    def kill(self) -> None:
        """Crash: SIGKILL, no shutdown work (no staleness markers for the live series)."""
        if self._proc is None:
            return
        self._proc.kill()
        self._proc.wait()
        self._proc = None

    def restart(self) -> str:
        """Stop (cleanly) when running, then start again on the same port and data dir."""
        self.stop()
        return self.start()
