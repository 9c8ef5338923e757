"""One bounded HTTP GET for every live read the controller makes (agents, Prometheus, gates).

``get(url, limits)`` returns the status and body of one request, or raises an error of the tree.
Guarantees, whatever the peer does:

* **Total deadline.** The whole exchange — connect, status line, headers, body — ends within
  ``limits.deadline_s`` (default 2 s): a watchdog shuts the socket down when the deadline passes,
  so a peer that trickles a byte every 0.4 s cannot stretch a read past it.
* **Size cap.** At most ``limits.max_bytes`` (default 16 MiB) of body are read; a larger answer
  (announced or not) is refused without reading the rest. Headers are capped by ``http.client``
  (100 headers, 64 KiB a line).
* **Every failure classified.** Refused, reset, timed out, truncated (``IncompleteRead``), cut by
  the deadline, or a protocol error → :class:`~ebb.errors.SourceUnavailable` (retry next cycle;
  the controller fails static meanwhile). A body over the cap, or a TLS certificate the peer or
  we reject → :class:`~ebb.errors.InputError` (permanent: fix the configuration). Nothing else
  escapes.
* **Only http and https.** No redirects are followed, no other scheme is opened (``file:``,
  ``ftp:`` …); a bearer token, when given, is sent as ``Authorization: Bearer …`` and never logged.
"""

from __future__ import annotations

import functools
import http.client
import socket
import ssl
import threading
import urllib.parse
from dataclasses import dataclass, field
from typing import Final

from ebb.errors import InputError, SourceUnavailable

__all__ = ["HttpLimits", "HttpReply", "TlsOptions", "check_url", "get"]

_CHUNK: Final = 64 * 1024


@dataclass(frozen=True)
class TlsOptions:
    """Client-side TLS for https URLs: a CA bundle to trust and an optional client certificate."""

    ca_file: str | None = None
    """PEM bundle of CAs that sign the server (None: the system store)."""
    cert_file: str | None = None
    """PEM client certificate for mutual TLS (with ``key_file``)."""
    key_file: str | None = None

    @functools.cached_property
    def _context(self) -> ssl.SSLContext:
        return self._load()

    def context(self) -> ssl.SSLContext:
        """An ``ssl`` context that verifies the server (built once per options object); InputError
        naming a file that cannot be used."""
        return self._context

    def _load(self) -> ssl.SSLContext:
        try:
            ctx = ssl.create_default_context(cafile=self.ca_file)
            if self.cert_file is not None:
                ctx.load_cert_chain(self.cert_file, self.key_file)
        except (OSError, ssl.SSLError) as exc:
            raise InputError(f"cannot load TLS files: {exc}", path=self.cert_file or self.ca_file,
                             fix="pass readable PEM files to the --*-ca / --*-cert / --*-key flags") from exc
        return ctx


@dataclass(frozen=True)
class HttpLimits:
    """Bounds of one GET. Every field: unit, default, why."""

    deadline_s: float = 2.0
    """Whole exchange, connect to last byte (s)."""
    max_bytes: int = 16 * 1024 * 1024
    """Largest body read (bytes): a 1-hour agent page is ~4 MiB, a Prometheus range read < 1 MiB."""
    token: str | None = field(default=None, repr=False)
    """Bearer token sent as ``Authorization``; None sends none. Never in a repr or a message."""
    tls: TlsOptions | None = None

    def __post_init__(self) -> None:
        if not (self.deadline_s > 0 and self.max_bytes > 0):
            raise ValueError(f"deadline_s and max_bytes must be > 0: {self!r}")
        if self.token is not None and (not self.token or any(not 33 <= ord(c) <= 126 for c in self.token)):
            raise ValueError("token must be non-empty visible ASCII (no spaces, control or non-ASCII characters)")


@dataclass(frozen=True)
class HttpReply:
    """Status and body of one answered request (any status: the caller decides what 4xx/5xx mean)."""

    status: int
    reason: str
    body: bytes


def get(url: str, limits: HttpLimits = HttpLimits()) -> HttpReply:
    """GET ``url`` within ``limits``; see the module docstring for what can be raised."""
    parts, port = _split(url)
    assert parts.hostname is not None
    conn = _connection(parts.scheme, parts.hostname, port, limits)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    headers = {"Accept": "application/json", "Connection": "close"}
    if limits.token:
        headers["Authorization"] = f"Bearer {limits.token}"
    expired = threading.Event()
    watchdog = threading.Timer(limits.deadline_s, _cut, (conn, expired))
    watchdog.daemon = True
    watchdog.start()
    try:
        conn.request("GET", path, headers=headers)
        resp = conn.getresponse()
        body = _read_body(resp, limits.max_bytes, url)
        if expired.is_set():  # the watchdog's shutdown reads as an early EOF
            raise _timeout(url, limits)
        if resp.length:  # closed before the announced Content-Length
            raise http.client.IncompleteRead(body, resp.length)
        return HttpReply(resp.status, resp.reason, body)
    except (InputError, SourceUnavailable):
        raise
    except ssl.SSLCertVerificationError as exc:
        raise InputError(f"TLS certificate of {_safe(url)} rejected: {exc.verify_message}",
                         fix="pass the CA that signed it (--*-ca) or use the right host name") from exc
    except ssl.SSLError as exc:
        if expired.is_set():
            raise _timeout(url, limits) from exc
        raise InputError(f"TLS handshake with {_safe(url)} failed: {exc}",
                         fix="check the client certificate/key and that the server speaks TLS") from exc
    except (OSError, http.client.HTTPException, ValueError) as exc:
        # The socket's own timeout is the deadline too: whichever of it and the watchdog fires
        # first, the caller hears the same thing (a race the watchdog used to win only mostly).
        if expired.is_set() or isinstance(exc, TimeoutError):
            raise _timeout(url, limits) from exc
        raise SourceUnavailable(f"{_safe(url)} did not answer properly: {type(exc).__name__}: {exc}"[:400]) from exc
    finally:
        watchdog.cancel()
        conn.close()


def check_url(url: str) -> str:
    """``url`` when it is an http(s) URL with a host and, if a port is written, one in 1-65535.

    :class:`~ebb.errors.InputError` otherwise (``file:``, ``gopher:``, ``http://host:`` with an
    empty port, user info, fragments): the one rule for every URL Ebb is told to poll.
    """
    _split(url)
    return url


def _split(url: str) -> tuple[urllib.parse.SplitResult, int | None]:
    fix = "use http://HOST:PORT/PATH or https://HOST:PORT/PATH"
    if len(url) > 2048 or any(ord(ch) < 33 or ord(ch) == 127 for ch in url):
        raise InputError(f"not a usable URL: {url[:80]!r}", fix=fix)
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InputError(f"not an http(s) URL: {url[:200]!r}", fix=fix)
    if "@" in parts.netloc or "#" in url:
        raise InputError(f"URL with user info or a fragment: {_safe(url)!r}", fix=fix)
    try:
        port = parts.port
    except ValueError as exc:
        raise InputError(f"bad port in {url[:200]!r}: {exc}", fix=fix) from exc
    if parts.netloc.endswith(":") or port == 0:
        raise InputError(f"empty or zero port in {url[:200]!r}", fix=fix)
    return parts, port


def _connection(scheme: str, host: str, port: int | None, limits: HttpLimits) -> http.client.HTTPConnection:
    if scheme == "https":
        ctx = (limits.tls or TlsOptions()).context()
        return http.client.HTTPSConnection(host, port, timeout=limits.deadline_s, context=ctx)
    return http.client.HTTPConnection(host, port, timeout=limits.deadline_s)


def _read_body(resp: http.client.HTTPResponse, max_bytes: int, url: str) -> bytes:
    announced = resp.getheader("Content-Length")
    if announced is not None and announced.strip().isdigit() and int(announced) > max_bytes:
        raise InputError(f"{_safe(url)} announced {int(announced):,} bytes, over the {max_bytes:,}-byte limit",
                         fix="ask for a shorter window, or check that the URL points at the right server")
    chunks: list[bytes] = []
    size = 0
    while True:
        chunk = resp.read1(_CHUNK)  # one recv at most: the watchdog bounds the whole loop
        if not chunk:
            return b"".join(chunks)
        size += len(chunk)
        if size > max_bytes:
            raise InputError(f"{_safe(url)} sent more than {max_bytes:,} bytes; the rest was not read",
                             fix="ask for a shorter window, or check that the URL points at the right server")
        chunks.append(chunk)


def _cut(conn: http.client.HTTPConnection, expired: threading.Event) -> None:
    """Watchdog: end a read that outlived its deadline (unblocks a recv in the reading thread)."""
    expired.set()
    sock = conn.sock
    if sock is not None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def _timeout(url: str, limits: HttpLimits) -> SourceUnavailable:
    # no "retrying": a one-shot caller (ebb probe) does not retry, and the loops say so themselves
    return SourceUnavailable(f"{_safe(url)} did not finish answering within {limits.deadline_s:g} s "
                             "(total deadline)")


def _safe(url: str) -> str:
    """The URL without user info (never log a password)."""
    p = urllib.parse.urlsplit(url)
    host = p.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    if p.port:
        host += f":{p.port}"
    return urllib.parse.urlunsplit((p.scheme, host, p.path, p.query, ""))

