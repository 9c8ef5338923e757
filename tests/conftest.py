"""Shared fixtures. ``etcd_endpoint``: a real, throwaway etcd server for the whole test session."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

ETCD_INSTALL = "apt-get install -y etcd-server"


def _etcd_binary() -> str | None:
    found = shutil.which("etcd")
    if found:
        return found
    return "/usr/bin/etcd" if os.access("/usr/bin/etcd", os.X_OK) else None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def etcd_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``http://127.0.0.1:PORT`` of a fresh single-node etcd; skipped (failed under CI=true) without the binary."""
    binary = _etcd_binary()
    if binary is None:
        msg = f"etcd binary not found; install it with: {ETCD_INSTALL}"
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI must provide etcd: {msg}")
        pytest.skip(msg)
    client, peer = _free_port(), _free_port()
    client_url, peer_url = f"http://127.0.0.1:{client}", f"http://127.0.0.1:{peer}"
    data_dir: Path = tmp_path_factory.mktemp("etcd")
    log_path = data_dir.parent / "etcd.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [binary, "--name", "ebb-test", "--data-dir", str(data_dir / "data"),
             "--listen-client-urls", client_url, "--advertise-client-urls", client_url,
             "--listen-peer-urls", peer_url, "--initial-advertise-peer-urls", peer_url,
             "--initial-cluster", f"ebb-test={peer_url}", "--logger", "zap", "--log-level", "error"],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )
    try:
        deadline = time.monotonic() + 20.0
        while True:
            if proc.poll() is not None:
                pytest.fail(f"etcd exited with {proc.returncode}: {log_path.read_text(errors='replace')[-2000:]}")
            try:
                with urllib.request.urlopen(f"{client_url}/health", timeout=1.0) as resp:
                    if resp.status == 200 and b"true" in resp.read():
                        break
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"etcd did not become healthy at {client_url} within 20 s")
            time.sleep(0.05)
        yield client_url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
