"""A throwaway single-node etcd on loopback, for tests and benchmarks (Debian's ``etcd-server``).

:func:`local_etcd` starts the real binary as a plain process on free ports with its own data
dir, waits until ``/health`` answers (at most 20 s), yields the client URL and stops it
(terminate, then kill after 10 s). No systemd, nothing outside loopback.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ETCD_INSTALL = "apt-get install -y etcd-server"


def etcd_binary() -> str | None:
    """Path of the etcd binary, or None when it is not installed."""
    found = shutil.which("etcd")
    if found:
        return found
    return "/usr/bin/etcd" if os.access("/usr/bin/etcd", os.X_OK) else None


def free_port() -> int:
    """A free TCP port on 127.0.0.1 (bound and released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def local_etcd(binary: str, data_dir: Path, *, log_path: Path | None = None,
               name: str = "ebb-local", healthy_within_s: float = 20.0) -> Iterator[str]:
    """Run etcd until the block ends; yields ``http://127.0.0.1:PORT``. RuntimeError if it
    exits or is not healthy in time (the log's tail is in the message when a log is kept)."""
    client_url, peer_url = f"http://127.0.0.1:{free_port()}", f"http://127.0.0.1:{free_port()}"
    args = [binary, "--name", name, "--data-dir", str(data_dir / "data"),
            "--listen-client-urls", client_url, "--advertise-client-urls", client_url,
            "--listen-peer-urls", peer_url, "--initial-advertise-peer-urls", peer_url,
            "--initial-cluster", f"{name}={peer_url}", "--logger", "zap", "--log-level", "error"]
    out = log_path.open("wb") if log_path is not None else subprocess.DEVNULL
    try:
        proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    finally:
        if log_path is not None and not isinstance(out, int):
            out.close()
    try:
        deadline = time.monotonic() + healthy_within_s
        while True:
            if proc.poll() is not None:
                tail = log_path.read_text(errors="replace")[-2000:] if log_path is not None else ""
                raise RuntimeError(f"etcd exited with {proc.returncode}: {tail}")
            try:
                with urllib.request.urlopen(f"{client_url}/health", timeout=1.0) as resp:
                    if resp.status == 200 and b"true" in resp.read():
                        break
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"etcd did not become healthy at {client_url} within {healthy_within_s:g} s")
            time.sleep(0.05)
        yield client_url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
