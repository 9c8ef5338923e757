"""The one bounded GET behind every live read: hostile peers end in an error of the tree, in time.

Written from the red-team reproductions H1 (truncated body, deep JSON) and M4 (150 MB answer,
trickled answer); the peers here are tiny socket servers on loopback that misbehave on purpose.
"""

from __future__ import annotations

import json
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from shutil import which

import pytest

from ebb.errors import InputError, SourceUnavailable
from ebb.sources.agents import AgentSource
from ebb.sources.http_get import HttpLimits, TlsOptions, check_url, get

Handler = Callable[[socket.socket, bytes], None]


class Peer:
    """A one-request-at-a-time HTTP peer on 127.0.0.1 that answers with ``handler``."""

    def __init__(self, handler: Handler, wrap: ssl.SSLContext | None = None) -> None:
        self.handler, self.wrap = handler, wrap
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sock.settimeout(0.2)
        self.url = f"{'https' if wrap else 'http'}://127.0.0.1:{self.sock.getsockname()[1]}"
        self.requests: list[bytes] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            try:
                if self.wrap is not None:
                    conn = self.wrap.wrap_socket(conn, server_side=True)
                conn.settimeout(5.0)
                req = b""
                while b"\r\n\r\n" not in req:
                    chunk = conn.recv(4096)
                    if not chunk:
                        break
                    req += chunk
                self.requests.append(req)
                self.handler(conn, req)
            except (OSError, ssl.SSLError):
                pass
            finally:
                conn.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5.0)
        self.sock.close()


@pytest.fixture
def peer() -> Iterator[Callable[..., Peer]]:
    made: list[Peer] = []

    def start(handler: Handler, wrap: ssl.SSLContext | None = None) -> Peer:
        made.append(Peer(handler, wrap))
        return made[-1]
    yield start
    for p in made:
        p.close()


def answer(body: bytes, *, length: int | None = None, status: str = "200 OK") -> Handler:
    def handle(conn: socket.socket, req: bytes) -> None:
        n = len(body) if length is None else length
        conn.sendall(f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {n}\r\n\r\n".encode()
                     + body)
    return handle


def test_a_truncated_answer_is_a_transient_outage_not_an_incomplete_read(peer: Callable[..., Peer]) -> None:
    p = peer(answer(b'{"version": 1', length=1000))
    with pytest.raises(SourceUnavailable, match="IncompleteRead"):
        get(p.url + "/v1/buckets")


def test_deeply_nested_json_from_an_agent_is_an_input_error_not_a_recursion_error(
        peer: Callable[..., Peer]) -> None:
    p = peer(answer(b"[" * 200_000 + b"]" * 200_000))
    with pytest.raises(InputError, match="nested deeper than 64"):
        AgentSource([p.url]).read(0.0)


def test_an_answer_larger_than_the_cap_is_refused_without_reading_it(peer: Callable[..., Peer]) -> None:
    announced = peer(answer(b"0", length=150 * 1024 * 1024))
    with pytest.raises(InputError, match="announced 157,286,400 bytes"):
        get(announced.url, HttpLimits(max_bytes=1024 * 1024))

    def unannounced(conn: socket.socket, req: bytes) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n")
        for _ in range(64):
            conn.sendall(b"0," * 32 * 1024)
    streamed = peer(unannounced)
    with pytest.raises(InputError, match="more than 1,048,576 bytes"):
        get(streamed.url, HttpLimits(max_bytes=1024 * 1024))


def test_a_trickled_answer_ends_at_the_total_deadline(peer: Callable[..., Peer]) -> None:
    def trickle(conn: socket.socket, req: bytes) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n")
        for _ in range(30):
            conn.sendall(b" ")
            time.sleep(0.1)
    p = peer(trickle)
    t0 = time.monotonic()
    with pytest.raises(SourceUnavailable, match="within 0.5 s"):
        get(p.url, HttpLimits(deadline_s=0.5))
    assert time.monotonic() - t0 < 1.5


def test_trickled_headers_also_end_at_the_deadline(peer: Callable[..., Peer]) -> None:
    def slow_headers(conn: socket.socket, req: bytes) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\n")
        for _ in range(30):
            conn.sendall(b"X-A: b\r\n")
            time.sleep(0.1)
    p = peer(slow_headers)
    t0 = time.monotonic()
    with pytest.raises(SourceUnavailable):
        get(p.url, HttpLimits(deadline_s=0.5))
    assert time.monotonic() - t0 < 1.5


def test_the_bearer_token_is_sent_and_a_refusal_names_the_flag(peer: Callable[..., Peer]) -> None:
    p = peer(answer(b'{"error": "unauthorized"}', status="401 Unauthorized"))
    with pytest.raises(InputError, match="bearer token"):
        AgentSource([p.url], token="s3cret").read(0.0)
    assert b"Authorization: Bearer s3cret" in p.requests[0]


@pytest.mark.parametrize("url", ["file:///etc/passwd", "gopher://127.0.0.1:70/", "http://127.0.0.1:",
                                 "http://127.0.0.1:0/", "http://user:pw@127.0.0.1:9/", "http:///path",
                                 "http://127.0.0.1:99999/"])
def test_only_http_urls_with_a_host_and_a_real_port_are_polled(url: str) -> None:
    with pytest.raises(InputError):
        check_url(url)
    with pytest.raises(InputError):
        get(url)


def test_nothing_listening_is_a_transient_outage() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(SourceUnavailable, match="ConnectionRefused"):
        get(f"http://127.0.0.1:{port}/")


def _self_signed(tmp: Path, name: str) -> tuple[Path, Path]:
    key, crt = tmp / f"{name}.key", tmp / f"{name}.crt"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out",
                    str(crt), "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True)
    return crt, key


@pytest.mark.skipif(which("openssl") is None, reason="needs the openssl command to make a throwaway certificate")
def test_tls_verifies_the_server_and_an_unknown_ca_is_a_permanent_error(
        peer: Callable[..., Peer], tmp_path: Path) -> None:
    crt, key = _self_signed(tmp_path, "server")
    other, _ = _self_signed(tmp_path, "other")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(crt, key)
    p = peer(answer(json.dumps({"ok": True}).encode()), wrap=ctx)
    assert get(p.url, HttpLimits(tls=TlsOptions(ca_file=str(crt)))).body == b'{"ok": true}'
    with pytest.raises(InputError, match="certificate"):
        get(p.url, HttpLimits(tls=TlsOptions(ca_file=str(other))))
    with pytest.raises(InputError, match="cannot load TLS files"):
        get(p.url, HttpLimits(tls=TlsOptions(ca_file=str(tmp_path / "missing.pem"))))
