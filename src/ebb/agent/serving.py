"""The agent's HTTP server side: its limits, TLS, bearer authentication and connection gate.

:class:`~ebb.agent.server.Agent` serves through these; its endpoints are in :mod:`ebb.agent.server`.

Security of the server (every number is a :class:`ServerLimits` default):

* **Authentication.** With a ``token``, ``/v1/buckets`` (and ``/metrics`` with
  ``protect_metrics``) answer 401 unless the request carries ``Authorization: Bearer <token>``
  (compared in constant time); ``/healthz``, ``/readyz`` and ``/livez`` stay open for probes.
  Without a token every endpoint is open — for a developer run on 127.0.0.1 (the default ``bind``).
* **TLS.** With an ``ssl_context`` (:func:`server_tls_context`: a certificate and key, and a client
  CA for mutual TLS) the agent serves https only; a TLS handshake must finish within 5 s.
* **Connections.** At most 256 open connections, 64 from one peer address; past either, a new
  connection gets ``503`` and is closed at once (counted by reason). A connection whose request
  head (request line and headers, at most 32 headers of 8,190 bytes each) is not complete within
  5 s of connecting or of its previous answer is closed (slowloris), and a page not written within
  10 s (a reader that does not read) is cut.
* **The poller is not starved by readers.** Each bucket is encoded once, when it closes, so a page
  costs a join of ready bytes; pages are written at most 4 at a time.

Refusals are counted (``ebb_agent_refused_requests_total{reason}``,
``ebb_agent_refused_connections_total{reason}``) and logged at most once per subject per 10 s
(:mod:`ebb.log_limit`), on the agent's logger ``ebb.agent.server``. A request aiohttp's parser
refuses is one WARNING line without a traceback, at most one per 10 s
(:class:`ClientErrorLogFilter`; the router uses it too).
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import ssl
from collections import Counter as Tally
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Final

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from ebb.log_limit import LogLimiter, held_note
from ebb.agent.metrics import AgentMetrics
from ebb.errors import ConfigError

__all__ = ["ClientErrorLogFilter", "ConnectionGate", "GatedSite", "ServerLimits", "quiet_client_errors",
           "server_tls_context", "token_ok", "unauthorized"]

log = logging.getLogger("ebb.agent.server")  # the agent's logger, as before the split


@dataclass(frozen=True)
class ServerLimits:
    """Bounds of the agent's HTTP server. Every field: unit, default, why."""

    max_connections: int = 256
    """Open connections at most: a node's readers are a controller or two and a Prometheus."""
    max_connections_per_peer: int = 64
    """Open connections from one peer address: one pod cannot take every slot."""
    header_timeout_s: float = 5.0
    """Seconds to send a complete request head, from connecting or the previous answer (also the
    keep-alive idle limit): an honest client sends its head in one packet."""
    max_line_bytes: int = 8190
    """Longest request line / header line (aiohttp's default; our URLs are < 100 bytes)."""
    max_headers: int = 32
    """Headers per request (a controller sends 4, Prometheus 6)."""
    page_handlers: int = 4
    """Pages written at once; more get 503 so readers cannot queue without bound."""
    max_page_bytes: int = 8 * 1024 * 1024
    """Largest page (8 MiB, half the controller's 16 MiB read cap)."""
    write_timeout_s: float = 10.0
    """Seconds to write one page to its reader."""
    tls_handshake_timeout_s: float = 5.0
    """Seconds for a TLS handshake (asyncio's default is 60)."""

    def __post_init__(self) -> None:
        ints = (self.max_connections, self.max_connections_per_peer, self.max_line_bytes, self.max_headers,
                self.page_handlers, self.max_page_bytes)
        floats = (self.header_timeout_s, self.write_timeout_s, self.tls_handshake_timeout_s)
        if min(ints) < 1 or not all(x > 0 for x in floats):
            raise ValueError(f"every server limit must be > 0: {self!r}")


def server_tls_context(cert_file: str, key_file: str, client_ca: str | None = None) -> ssl.SSLContext:
    """A TLS 1.2+ server context for the agent; with ``client_ca``, clients must present a
    certificate it signed (mutual TLS). ConfigError naming the file that cannot be used."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_cert_chain(cert_file, key_file)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"cannot load the agent's TLS certificate {cert_file!r} / key {key_file!r}: {exc} "
                          "(fix: pass readable PEM files to --tls-cert and --tls-key)") from exc
    if client_ca is not None:
        try:
            ctx.load_verify_locations(cafile=client_ca)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(f"cannot load the client CA {client_ca!r}: {exc} "
                              "(fix: pass a readable PEM bundle to --tls-client-ca)") from exc
        ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


class ClientErrorLogFilter(logging.Filter):
    """For aiohttp's server logger: a request the HTTP parser refused (line too long, bad header …)
    is the client's fault, so it becomes one WARNING line without a traceback, at most one per 10 s
    (the count held back rides on the next). Every other record passes unchanged."""

    def __init__(self) -> None:
        super().__init__()
        self._limit = LogLimiter()

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if not isinstance(exc, HttpProcessingError):
            return True
        held = self._limit.allow("parse")
        if held is None:
            return False
        record.msg = f"{record.getMessage()}: refused a malformed request ({type(exc).__name__}: " \
                     f"{str(exc.message)[:120]}){held_note(held)}"
        record.args = ()
        record.exc_info, record.exc_text = None, None
        record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True


def quiet_client_errors(logger_name: str) -> logging.Logger:
    """The logger ``logger_name`` with one :class:`ClientErrorLogFilter` attached (idempotent)."""
    logger = logging.getLogger(logger_name)
    if not any(isinstance(f, ClientErrorLogFilter) for f in logger.filters):
        logger.addFilter(ClientErrorLogFilter())
    return logger


async def close_runner(runner: web.AppRunner, listening_fds: Iterable[int], settle_s: float = 0.05) -> None:
    """Stop accepting on ``listening_fds``, let the connections already accepted attach, then close
    the runner: every connection it accepted is closed, none outlives the loop.

    Why: the loop accepts a burst of connections in one callback and builds their transports a loop
    iteration later. On Python 3.11 a transport built after its server closed fails an assertion
    inside asyncio (``Server._attach``), which swallows it and leaks the accepted socket, open, past
    the loop's end (a ResourceWarning at a later garbage collection). Taking the listening sockets
    off the selector first (public ``loop.remove_reader``), waiting ``settle_s`` (0.05 s: hundreds
    of iterations of an idle loop) and only then closing the server gives every accepted
    connection a server to attach to and aiohttp a handler to close.
    """
    loop = asyncio.get_running_loop()
    for fd in listening_fds:
        loop.remove_reader(fd)
    await asyncio.sleep(settle_s)
    await runner.cleanup()


def token_ok(token: str) -> bool:
    """Whether ``token`` is usable as the agent's bearer token: 1-4096 visible ASCII characters, no spaces."""
    return 0 < len(token) <= 4096 and all(33 <= ord(c) <= 126 for c in token)


def unauthorized(request: web.Request, token: bytes | None, metrics: AgentMetrics,
                 limit: LogLimiter) -> web.Response | None:
    """None when ``request`` may read data (no ``token``, or ``Authorization: Bearer <token>``,
    compared in constant time); else the 401 to send, counted in ``refused_requests`` and logged
    at most once per peer per 10 s (``limit``)."""
    if token is None:
        return None
    scheme, _, cred = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() == "bearer" and hmac.compare_digest(cred.strip().encode("utf-8", "replace"), token):
        return None
    metrics.refused_requests.labels(reason="unauthorized").inc()
    peer = request.remote or "?"
    if (held := limit.allow(f"auth:{peer}")) is not None:
        log.warning("refused %s %s from %s: %s bearer token%s", request.method, request.path, peer,
                    "wrong" if scheme else "no", held_note(held))
    return web.Response(status=401, text="send Authorization: Bearer <the agent's token>\n",
                        headers={"WWW-Authenticate": 'Bearer realm="ebb-agent"'})


# -- connection gate ---------------------------------------------------------------------------
class ConnectionGate:
    """Counts open connections (total and per peer address) for :class:`_Gated` protocols."""

    def __init__(self, limits: ServerLimits, metrics: AgentMetrics) -> None:
        self.limits, self.metrics = limits, metrics
        self.open = 0
        self.by_peer: Tally[str] = Tally()
        self._log = LogLimiter()

    def admit(self, peer: str) -> bool:
        reason = ("total_cap" if self.open >= self.limits.max_connections else
                  "peer_cap" if self.by_peer[peer] >= self.limits.max_connections_per_peer else None)
        if reason is None:
            self.open += 1
            self.by_peer[peer] += 1
            return True
        self.metrics.refused_connections.labels(reason=reason).inc()
        if (held := self._log.allow(reason)) is not None:
            log.warning("refused a connection from %s: %d open, %d from that peer (caps %d / %d)%s", peer,
                        self.open, self.by_peer[peer], self.limits.max_connections,
                        self.limits.max_connections_per_peer, held_note(held))
        return False

    def release(self, peer: str) -> None:
        self.open -= 1
        self.by_peer[peer] -= 1
        if self.by_peer[peer] <= 0:
            del self.by_peer[peer]


_REFUSAL: Final = (b"HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nContent-Type: text/plain\r\n"
                   b"Content-Length: 40\r\nRetry-After: 1\r\n\r\ntoo many connections; retry in a second\n")


class _Gated(asyncio.Protocol):
    """Admits a connection through the gate, then hands every event to aiohttp's handler."""

    def __init__(self, gate: ConnectionGate, make: Callable[[], asyncio.Protocol]) -> None:
        self._gate, self._make = gate, make
        self._inner: asyncio.Protocol | None = None
        self._peer: str | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        peername = transport.get_extra_info("peername")
        peer = str(peername[0]) if isinstance(peername, tuple) and peername else "?"
        if not self._gate.admit(peer):
            if isinstance(transport, asyncio.WriteTransport):
                transport.write(_REFUSAL)
            transport.close()
            return
        self._peer = peer
        self._inner = self._make()
        self._inner.connection_made(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._peer is not None:
            self._gate.release(self._peer)
            self._peer = None
        if self._inner is not None:
            self._inner.connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._inner is not None:
            self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self._inner.eof_received() if self._inner is not None else None

    def pause_writing(self) -> None:
        if self._inner is not None:
            self._inner.pause_writing()

    def resume_writing(self) -> None:
        if self._inner is not None:
            self._inner.resume_writing()


class GatedSite(web.BaseSite):
    """A TCP site whose connections pass a :class:`ConnectionGate` and whose TLS handshakes are time-boxed."""

    def __init__(self, runner: web.AppRunner, host: str, port: int, gate: ConnectionGate,
                 ssl_context: ssl.SSLContext | None, handshake_s: float) -> None:
        super().__init__(runner, ssl_context=ssl_context)
        self._host, self._port, self._gate, self._handshake_s = host, port, gate, handshake_s
        self._listener: asyncio.Server | None = None

    @property
    def name(self) -> str:
        return f"{'https' if self._ssl_context else 'http'}://{self._host}:{self._port}"

    async def start(self) -> None:
        await super().start()
        server = self._runner.server
        assert server is not None
        gate = self._gate
        self._listener = await asyncio.get_running_loop().create_server(
            lambda: _Gated(gate, server), self._host, self._port, ssl=self._ssl_context,
            ssl_handshake_timeout=self._handshake_s if self._ssl_context else None, backlog=128)
        self._server = self._listener  # BaseSite.stop closes it

    @property
    def listening_fds(self) -> list[int]:
        """The listening sockets' descriptors (empty before :meth:`start`), for :func:`close_runner`."""
        return [] if self._listener is None else [sock.fileno() for sock in self._listener.sockets]
