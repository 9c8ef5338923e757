"""A hostile HTTP peer on loopback, for the tests of Ebb's bounded readers (:mod:`ebb.sources.http_get`
and the agent and Prometheus sources built on it).

:class:`HostilePeer` listens on ``127.0.0.1`` (a free port) and serves each connection on its own
daemon thread: it wraps the socket in TLS when given a server ``wrap`` context, reads the request
head (up to the blank line; no body), appends it to :attr:`HostilePeer.requests` and hands the
socket and the head to its handler, which writes whatever the test wants — a truncated body, a
trickle, 150 MB, JSON nested 200,000 deep, a redirect. The connection is closed when the handler
returns. A client that hangs up before the blank line is not answered (and not recorded).

Guarantees:

* the peer never raises into the test: a socket or TLS error (a client that gave up, a failed
  handshake) ends that one connection quietly;
* every connection (its TLS handshake included) has a 5 s socket timeout, so a handler blocked on a
  silent client ends;
* :meth:`HostilePeer.close` stops accepting within 0.1 s and closes the port; a handler still running
  then is a daemon thread, ended by its first failing write to the departed client.

It is **not** an HTTP server: one request per connection (no keep-alive), request bodies are not
read, nothing is routed — the handler sees every request. :func:`answer` makes the common handler
(a JSON answer whose ``Content-Length`` may lie), :func:`stream` the endless or trickled one (a head,
then one chunk many times, paced); :func:`self_signed` writes a throwaway certificate
for ``IP:127.0.0.1`` with the ``openssl`` binary (:func:`ebb.testing.etcd.run_openssl`) and
:func:`server_context` makes the ``wrap`` context that serves it.
"""

from __future__ import annotations

import socket
import ssl
import threading
import time
from collections.abc import Callable
from pathlib import Path

from ebb.testing.etcd import run_openssl

__all__ = ["Handler", "HostilePeer", "answer", "self_signed", "server_context", "stream"]

Handler = Callable[[socket.socket, bytes], None]
"""Writes the answer: called with the (TLS-wrapped when ``wrap``) connection and the request head."""


class HostilePeer:
    """An HTTP peer on 127.0.0.1 answering each request with ``handler`` on its own thread; ``url``
    is ``http://127.0.0.1:PORT`` (``https://`` with ``wrap``). Serves from construction until
    :meth:`close`."""

    def __init__(self, handler: Handler, wrap: ssl.SSLContext | None = None) -> None:
        self.handler, self.wrap = handler, wrap
        self.requests: list[bytes] = []
        """The head (request line and headers) of every request answered, in arrival order."""
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(16)
        self._sock.settimeout(0.1)
        self.url = f"{'https' if wrap else 'http'}://127.0.0.1:{self._sock.getsockname()[1]}"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name=f"hostile-peer {self.url}", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                continue
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn: socket.socket) -> None:
        try:
            conn.settimeout(5.0)
            if self.wrap is not None:
                conn = self.wrap.wrap_socket(conn, server_side=True)
            req = b""
            while b"\r\n\r\n" not in req:
                chunk = conn.recv(4096)
                if not chunk:
                    return
                req += chunk
            self.requests.append(req)
            self.handler(conn, req)
        except (OSError, ssl.SSLError):
            pass
        finally:
            conn.close()

    def close(self) -> None:
        """Stop accepting and close the port (idempotent)."""
        self._stop.set()
        self._thread.join(timeout=5.0)
        self._sock.close()


def answer(body: bytes, *, length: int | None = None, status: str = "200 OK", extra: str = "") -> Handler:
    """A handler that sends ``status``, ``Content-Type: application/json``, ``Content-Length: length``
    (``len(body)`` unless given: a larger one makes a truncated answer), the header lines in ``extra``
    (each ending in ``\\r\\n``), then ``body``."""
    def handle(conn: socket.socket, req: bytes) -> None:
        n = len(body) if length is None else length
        conn.sendall(f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {n}\r\n{extra}\r\n"
                     .encode() + body)
    return handle


def stream(head: bytes, chunk: bytes, *, times: int, pause_s: float = 0.0) -> Handler:
    """A handler that sends ``head`` (what of the status line and headers it wants), then ``chunk``
    ``times`` times, sleeping ``pause_s`` after each: a body past a size cap, or a trickle past a deadline."""
    def handle(conn: socket.socket, req: bytes) -> None:
        conn.sendall(head)
        for _ in range(times):
            conn.sendall(chunk)
            if pause_s:
                time.sleep(pause_s)
    return handle


def self_signed(directory: Path, name: str, openssl: str = "openssl") -> tuple[Path, Path]:
    """Write ``NAME.crt`` and ``NAME.key`` into ``directory``: a self-signed certificate (RSA 2048, valid
    1 day, ``CN=127.0.0.1``, ``subjectAltName=IP:127.0.0.1``), usable both as a server's certificate and
    as the CA file that trusts it. Returns (certificate, key); RuntimeError when openssl fails."""
    key, crt = directory / f"{name}.key", directory / f"{name}.crt"
    run_openssl(directory, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(crt),
                "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1", openssl=openssl)
    return crt, key


def server_context(cert: Path, key: Path) -> ssl.SSLContext:
    """A server-side TLS context presenting ``cert`` (its private key in ``key``): a peer's ``wrap``."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    return ctx
