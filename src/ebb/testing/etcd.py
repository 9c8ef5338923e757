"""A throwaway single-node etcd on loopback, for tests and benchmarks (Debian's ``etcd-server``).

:func:`local_etcd` starts the real binary as a plain process on free ports with its own data
dir, waits until ``/health`` answers (at most 20 s), yields the client URL and stops it
(SIGTERM once, SIGKILL after 10 s). No systemd, nothing outside loopback. On Linux etcd never
outlives the process that started it, even one killed with SIGKILL (:func:`ebb.actuate.children.spawn`).

TLS and auth, for the tests of the ledger's ``--etcd-*`` options: :func:`make_tls_files` writes a
throwaway CA, a server certificate for ``IP:127.0.0.1``, a client certificate and an unrelated second
CA with the ``openssl`` binary (RSA 2048, valid 2 days; :func:`run_openssl` runs one openssl command
for it and for :func:`ebb.testing.hostile_http.self_signed`); ``local_etcd(..., tls=files)`` serves
``https://`` with them (``client_cert_auth=True`` adds etcd's ``--client-cert-auth``); and
:func:`enable_etcd_auth` creates a root user, one user whose role may read and write one key range,
and turns authentication on.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ebb.actuate.children import spawn, stop

ETCD_INSTALL = "apt-get install -y etcd-server"
OPENSSL_INSTALL = "apt-get install -y openssl"


def openssl_binary() -> str | None:
    """Path of the openssl binary, or None when it is not installed."""
    return shutil.which("openssl")


@dataclass(frozen=True)
class TlsFiles:
    """PEM files made by :func:`make_tls_files` (``other_ca`` signed none of the others)."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    other_ca: Path


def run_openssl(directory: Path, *args: str, openssl: str = "openssl") -> None:
    """Run ``openssl ARGS`` in ``directory`` (no stdin, at most 60 s); RuntimeError with the tail of
    openssl's output when it fails."""
    res = subprocess.run([openssl, *args], cwd=directory, capture_output=True, text=True, timeout=60,
                         stdin=subprocess.DEVNULL)
    if res.returncode != 0:
        raise RuntimeError(f"openssl {' '.join(args[:2])} failed: {res.stderr[-1000:]}")


def make_tls_files(directory: Path, openssl: str = "openssl") -> TlsFiles:
    """Write a CA, a server certificate (``CN=127.0.0.1``, ``subjectAltName=IP:127.0.0.1``), a client
    certificate (``CN=ebb``) signed by it, and an unrelated CA, into ``directory``; RuntimeError with
    openssl's output when a step fails."""
    directory.mkdir(parents=True, exist_ok=True)
    d = directory

    def run(*args: str) -> None:
        run_openssl(d, *args, openssl=openssl)

    for ca in ("ca", "other-ca"):
        run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{ca}.key", "-out", f"{ca}.crt",
            "-days", "2", "-subj", f"/CN=ebb-test-{ca}")
    (d / "server.ext").write_text("subjectAltName=IP:127.0.0.1\n", encoding="ascii")
    (d / "client.ext").write_text("extendedKeyUsage=clientAuth\n", encoding="ascii")
    for who, cn in (("server", "127.0.0.1"), ("client", "ebb")):
        run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{who}.key", "-out", f"{who}.csr",
            "-subj", f"/CN={cn}")
        run("x509", "-req", "-in", f"{who}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
            "-out", f"{who}.crt", "-days", "2", "-extfile", f"{who}.ext")
    return TlsFiles(ca=d / "ca.crt", server_cert=d / "server.crt", server_key=d / "server.key",
                    client_cert=d / "client.crt", client_key=d / "client.key", other_ca=d / "other-ca.crt")


def _context(tls: TlsFiles | None, client_cert_auth: bool) -> ssl.SSLContext | None:
    if tls is None:
        return None
    ctx = ssl.create_default_context(cafile=str(tls.ca))
    if client_cert_auth:
        ctx.load_cert_chain(str(tls.client_cert), str(tls.client_key))
    return ctx


def _gateway_post(url: str, body: dict[str, Any], ctx: ssl.SSLContext | None, token: str | None = None) -> Any:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json",
                                          **({"Authorization": token} if token else {})})
    with urllib.request.urlopen(req, timeout=5.0, context=ctx) as resp:
        return json.loads(resp.read())


def enable_etcd_auth(client_url: str, *, user: str, password: str, key_prefix: str,
                     tls: TlsFiles | None = None, root_password: str = "root-pw") -> None:
    """Turn on etcd's authentication: user ``root`` (``root_password``) and ``user`` whose role may read
    and write every key starting with ``key_prefix`` (e.g. ``/ebb/``). Over the JSON gateway, so etcd
    must not run with ``--client-cert-auth`` (its gateway refuses client certificates once auth is on)."""
    ctx = _context(tls, False)

    def b64(raw: str) -> str:
        return base64.b64encode(raw.encode()).decode()

    end = key_prefix[:-1] + chr(ord(key_prefix[-1]) + 1)
    for path, body in (
        ("/auth/role/add", {"name": "root"}),
        ("/auth/user/add", {"name": "root", "password": root_password}),
        ("/auth/user/grant", {"user": "root", "role": "root"}),
        ("/auth/role/add", {"name": f"{user}-rw"}),
        ("/auth/role/grant", {"name": f"{user}-rw", "perm": {"permType": "READWRITE", "key": b64(key_prefix),
                                                              "range_end": b64(end)}}),
        ("/auth/user/add", {"name": user, "password": password}),
        ("/auth/user/grant", {"user": user, "role": f"{user}-rw"}),
        ("/auth/enable", {}),
    ):
        _gateway_post(f"{client_url}/v3{path}", body, ctx)


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
               name: str = "ebb-local", healthy_within_s: float = 20.0, tls: TlsFiles | None = None,
               client_cert_auth: bool = False) -> Iterator[str]:
    """Run etcd until the block ends; yields ``http://127.0.0.1:PORT`` (``https://`` with ``tls``).
    RuntimeError if it exits or is not healthy in time (the log's tail is in the message when a log
    is kept). ``client_cert_auth`` (needs ``tls``) makes etcd require a client certificate signed by
    ``tls.ca``."""
    if client_cert_auth and tls is None:
        raise ValueError("client_cert_auth needs tls files")
    scheme = "https" if tls is not None else "http"
    client_url, peer_url = f"{scheme}://127.0.0.1:{free_port()}", f"http://127.0.0.1:{free_port()}"
    args = [binary, "--name", name, "--data-dir", str(data_dir / "data"),
            "--listen-client-urls", client_url, "--advertise-client-urls", client_url,
            "--listen-peer-urls", peer_url, "--initial-advertise-peer-urls", peer_url,
            "--initial-cluster", f"{name}={peer_url}", "--logger", "zap", "--log-level", "error"]
    if tls is not None:
        args += ["--cert-file", str(tls.server_cert), "--key-file", str(tls.server_key)]
        if client_cert_auth:
            args += ["--client-cert-auth", "--trusted-ca-file", str(tls.ca)]
    ctx = _context(tls, client_cert_auth)
    out = log_path.open("wb") if log_path is not None else subprocess.DEVNULL
    try:
        proc = spawn(args, stdout=out, stderr=subprocess.STDOUT)
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
                with urllib.request.urlopen(f"{client_url}/health", timeout=1.0, context=ctx) as resp:
                    if resp.status == 200 and b"true" in resp.read():
                        break
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"etcd did not become healthy at {client_url} within {healthy_within_s:g} s")
            time.sleep(0.05)
        yield client_url
    finally:
        stop(proc, grace_s=10.0)
