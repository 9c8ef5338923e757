"""etcd's v3 JSON gateway (``/v3/``, through ``etcd3gw``): one session, TLS, authentication, errors.

:class:`EtcdGateway` is one HTTP session to etcd; :class:`~ebb.ledger.etcd.EtcdLedger`,
:class:`~ebb.ledger.review.EtcdCompensationLog` and :class:`~ebb.ledger.election.EtcdElectionStore`
each hold one. One request at a time per session, every failure mapped by :func:`gateway_errors`.
Install with ``pip install 'ebb[etcd]'``; the client is imported only when a gateway is made. The
key helpers (:func:`b64`, :func:`unb64`, :func:`quote_id`, :func:`prefix_end`, :func:`key_text`)
and :data:`READ_BATCH` are the ones every etcd store of Ebb uses.

* **TLS and authentication** (:class:`~ebb.ledger.location.EtcdAuth`): ``ca_file`` replaces the
  system CA store for verifying etcd's server certificate (it is passed on every request, so
  ``REQUESTS_CA_BUNDLE`` cannot override it); ``cert_file``/``key_file`` are the client certificate
  for etcd's ``--client-cert-auth``; ``user``/``password`` authenticate once
  (``/v3/auth/authenticate``) and send the token on every request, authenticating again once when
  etcd answers that the token expired. Requests go to the ``/v3/`` gateway path (etcd >= 3.4).
* **Errors.** Connection refused, timeouts and 5xx raise :class:`~ebb.errors.SourceUnavailable` naming
  the endpoint, with the client's exception chained. A TLS failure (unknown CA, a client certificate
  etcd refuses or lacks, a key that does not match its certificate, TLS against a plain-HTTP etcd)
  and an authentication failure (no or wrong credentials, permission denied) raise
  :class:`~ebb.errors.ConfigError` at once — no retry — naming the flag to fix (``--etcd-ca``,
  ``--etcd-cert``/``--etcd-key``, ``--etcd-user``/``--etcd-password-file``).

Log records (authentication disabled although ``--etcd-user`` was given) go to the logger
``ebb.ledger.etcd``, as before the gateway had a module of its own.
"""

from __future__ import annotations

import base64
import logging
import os
import ssl
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Final
from urllib.parse import quote, urlsplit

from ebb.errors import ConfigError, SourceUnavailable, require_extra
from ebb.ledger.location import PASSWORD_ENV, EtcdAuth
from ebb.untrusted import loads_json

__all__ = ["API_PATH", "READ_BATCH", "EtcdGateway", "b64", "gateway_errors", "key_text", "prefix_end", "quote_id",
           "unb64"]

log = logging.getLogger("ebb.ledger.etcd")  # the ledger's logger, as before the split

API_PATH: Final = "/v3/"
READ_BATCH: Final = 100
"""Keys read per read-only Txn: below etcd's default ``--max-txn-ops`` (128)."""
_GRPC_PERMISSION_DENIED: Final = 7
_GRPC_UNAUTHENTICATED: Final = 16


def b64(data: bytes) -> str:
    """``data`` as base64 text, as the gateway wants keys and values."""
    return base64.b64encode(data).decode("ascii")


def unb64(data: object) -> bytes:
    """Base64 text from the gateway as bytes; ValueError (binascii.Error) when it is not base64."""
    if not isinstance(data, str):
        raise ValueError(f"expected base64 text, got {type(data).__name__}")
    return base64.b64decode(data, validate=True)


def key_text(key: bytes) -> str:
    """A key for messages: UTF-8, undecodable bytes as ``\\xNN``."""
    return key.decode("utf-8", "backslashreplace")


def quote_id(ident: str) -> str:
    """``ident`` percent-encoded (``/`` included), so an id cannot break the key layout."""
    return quote(ident, safe="")


def prefix_end(prefix: bytes) -> bytes:
    """The smallest key greater than every key starting with ``prefix`` (etcd's ``range_end``)."""
    return prefix[:-1] + bytes([prefix[-1] + 1])


def _parse_endpoint(endpoint: str) -> tuple[str, str, int]:
    """``http://host:port`` (or ``host:port``) → (protocol, host, port)."""
    url = urlsplit(endpoint if "://" in endpoint else f"http://{endpoint}")
    scheme = {"etcd": "http", "etcd+https": "https"}.get(url.scheme, url.scheme)
    if scheme not in ("http", "https") or not url.hostname:
        raise ConfigError(f"etcd endpoint must look like http://HOST:PORT, got {endpoint!r}")
    try:
        port = url.port or 2379
    except ValueError as exc:
        raise ConfigError(f"etcd endpoint has an invalid port: {endpoint!r}") from exc
    return scheme, url.hostname, port


def _tls_failure(exc: BaseException) -> BaseException | None:
    """The TLS error inside ``exc`` (etcd3gw wraps requests' ``SSLError``, which wraps urllib3's, which
    wraps :class:`ssl.SSLError`), or None. Walks causes, contexts, ``reason`` and ``args`` (<= 64 hops)."""
    stack: list[BaseException] = [exc]
    seen: set[int] = set()
    found: BaseException | None = None
    while stack and len(seen) < 64:
        e = stack.pop()
        if id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, ssl.SSLError):
            return e
        if type(e).__name__ == "SSLError" and found is None:  # requests' / urllib3's wrapper
            found = e
        nxt = [e.__cause__, e.__context__, getattr(e, "reason", None), *getattr(e, "args", ())]
        stack.extend(x for x in nxt if isinstance(x, BaseException))
    return found


def _tls_config_error(tls: BaseException, endpoint: str, op: str, auth: EtcdAuth) -> ConfigError:
    reason = getattr(tls, "reason", None) or ""
    text = f"{reason} {tls}".upper()
    why = getattr(tls, "verify_message", None) or str(tls)
    if isinstance(tls, ssl.SSLCertVerificationError) or "CERTIFICATE_VERIFY_FAILED" in text:
        fix = ("pass the CA that signed etcd's server certificate with --etcd-ca FILE" if auth.ca_file is None
               else f"--etcd-ca {auth.ca_file} did not sign etcd's server certificate, or the certificate does not "
                    "name this host: pass the right CA with --etcd-ca")
        return ConfigError(f"etcd at {endpoint}: TLS verification of the server failed ({op}): {why} (fix: {fix})")
    if "KEY_VALUES_MISMATCH" in text:
        return ConfigError(f"etcd client certificate {auth.cert_file} and key {auth.key_file} do not match ({op}) "
                           "(fix: pass the key of that certificate with --etcd-key)")
    if "ALERT" in text or "HANDSHAKE_FAILURE" in text or isinstance(tls, ssl.SSLEOFError):
        fix = ("etcd requires a client certificate: pass --etcd-cert FILE --etcd-key FILE" if auth.cert_file is None
               else f"etcd refused the client certificate {auth.cert_file}: pass one signed by a CA in etcd's "
                    "--trusted-ca-file with --etcd-cert/--etcd-key")
        return ConfigError(f"etcd at {endpoint} ended the TLS handshake ({op}): {why} (fix: {fix})")
    if "WRONG_VERSION_NUMBER" in text or "RECORD_LAYER_FAILURE" in text:
        return ConfigError(f"etcd at {endpoint} does not speak TLS ({op}): {why} "
                           "(fix: use an etcd:// ledger URL for a plain-HTTP etcd)")
    return ConfigError(f"etcd at {endpoint}: TLS failed ({op}): {why} (fix: check --etcd-ca, --etcd-cert and "
                       "--etcd-key)")


def _cut_short(tls: BaseException, auth: EtcdAuth) -> bool:
    """True for a handshake that ended early (EOF) although a client certificate was sent: etcd going
    away mid-handshake looks like that, so it stays an outage (retried). Without a client certificate
    the same EOF is how etcd's ``--client-cert-auth`` refuses: permanent."""
    return isinstance(tls, ssl.SSLEOFError) and auth.cert_file is not None


def _gateway_error(exc: BaseException) -> tuple[int | None, str]:
    """(gRPC code, message) from the gateway's JSON error body, or (None, the raw text)."""
    text = getattr(exc, "detail_text", None)
    if not isinstance(text, str) or not text:
        return None, type(exc).__name__
    try:
        body = loads_json(text)
    except ValueError:
        return None, text.strip()[:300]
    if not isinstance(body, dict):
        return None, text.strip()[:300]
    code, message = body.get("code"), body.get("message") or body.get("error")
    return (code if isinstance(code, int) and not isinstance(code, bool) else None,
            message if isinstance(message, str) else text.strip()[:300])


def _refusal(exc: BaseException, endpoint: str, op: str, auth: EtcdAuth) -> ConfigError:
    """A request etcd answered with an error: permanent, with the flag to fix when it is about access."""
    code, detail = _gateway_error(exc)
    low = detail.lower()
    creds = f"--etcd-user NAME with --etcd-password-file FILE or {PASSWORD_ENV}"
    if "user name is empty" in low or (code == _GRPC_UNAUTHENTICATED and auth.user is None):
        return ConfigError(f"etcd at {endpoint} requires authentication ({op}): {detail} (fix: {creds})")
    if "authentication failed" in low or "invalid user id or password" in low:
        return ConfigError(f"etcd at {endpoint} refused user {auth.user!r} ({op}): {detail} (fix: check "
                           f"--etcd-user and the password in --etcd-password-file or {PASSWORD_ENV})")
    if code == _GRPC_PERMISSION_DENIED or "permission denied" in low:
        return ConfigError(f"etcd at {endpoint} denied user {auth.user!r} ({op}): {detail} (fix: grant that user's "
                           "role readwrite on the ledger prefix and the election key, or use another --etcd-user)")
    if "commonname of client" in low:
        return ConfigError(f"etcd at {endpoint} refuses client certificates on its JSON gateway while etcd auth is "
                           f"enabled ({op}): {detail} (fix: drop --etcd-cert/--etcd-key and use {creds})")
    if "http request to an https server" in low:
        return ConfigError(f"etcd at {endpoint} speaks TLS ({op}): {detail} (fix: use an etcd+https:// ledger "
                           "URL, with --etcd-ca FILE when its CA is private)")
    return ConfigError(f"etcd at {endpoint} refused the request ({op}): {detail}")


@contextmanager
def gateway_errors(exc_mod: Any, endpoint: str, op: str, auth: EtcdAuth | None = None) -> Iterator[None]:
    """Map etcd3gw's exceptions to Ebb's tree: no answer → :class:`SourceUnavailable` (retry); a TLS
    failure or a refused request (authentication included) → :class:`ConfigError` (permanent, naming the
    flag to fix); the original is chained as the cause."""
    opts = auth if auth is not None else EtcdAuth()
    try:
        yield
    except (exc_mod.ConnectionFailedError, exc_mod.ConnectionTimeoutError,
            exc_mod.InternalServerError) as exc:
        tls = _tls_failure(exc)
        if tls is not None and not _cut_short(tls, opts):
            raise _tls_config_error(tls, endpoint, op, opts) from exc
        detail = getattr(exc, "detail_text", None) or type(exc).__name__
        raise SourceUnavailable(f"etcd at {endpoint} did not answer ({op}): {detail}") from exc
    except exc_mod.Etcd3Exception as exc:
        raise _refusal(exc, endpoint, op, opts) from exc
    except ValueError as exc:  # a non-JSON answer: not an etcd gateway
        raise SourceUnavailable(f"{endpoint} did not answer like an etcd v3 gateway ({op}): {exc}") from exc
    except OSError as exc:  # requests' RequestException is an OSError: a reply cut off mid-way (etcd killed)
        tls = _tls_failure(exc)
        if tls is not None and not _cut_short(tls, opts):
            raise _tls_config_error(tls, endpoint, op, opts) from exc
        raise SourceUnavailable(f"etcd at {endpoint} did not answer ({op}): {type(exc).__name__}: {exc}") from exc


def _check_file(flag: str, path: str | None) -> None:
    if path is not None and not (os.path.isfile(path) and os.access(path, os.R_OK)):
        raise ConfigError(f"{flag} {path}: no readable file there (fix: check the path)")


class EtcdGateway:
    """One HTTP session to etcd's v3 JSON gateway (``/v3/...``), shared by the ledger, the
    compensation log and the leader elector: one request at a time on the session; every failure
    mapped by :func:`gateway_errors`; ``close`` is idempotent and a closed gateway raises
    RuntimeError (a programming error, not an outage).

    ``auth`` (:class:`~ebb.ledger.location.EtcdAuth`) adds TLS files and a user (see the module
    docstring). TLS options need an ``https`` endpoint and readable files
    (:class:`~ebb.errors.ConfigError` naming the flag, before anything is sent).
    """

    def __init__(self, endpoint: str, *, timeout_s: float, owner: str, auth: EtcdAuth | None = None) -> None:
        etcd3gw = require_extra("etcd3gw", "etcd")
        self._exc = require_extra("etcd3gw.exceptions", "etcd")
        protocol, host, port = _parse_endpoint(endpoint)
        self.endpoint = f"{protocol}://{host}:{port}"
        self.auth = auth if auth is not None else EtcdAuth()
        if self.auth.tls and protocol != "https":
            raise ConfigError(f"--etcd-ca/--etcd-cert/--etcd-key are TLS options, but the etcd ledger URL is plain "
                              f"HTTP ({self.endpoint}) (fix: use an etcd+https:// ledger URL)")
        _check_file("--etcd-ca", self.auth.ca_file)
        _check_file("--etcd-cert", self.auth.cert_file)
        _check_file("--etcd-key", self.auth.key_file)
        # Passed on every request: a session-wide `verify` loses against REQUESTS_CA_BUNDLE.
        self._verify: str | bool = self.auth.ca_file if self.auth.ca_file is not None else True
        self._cert: tuple[str, str] | None = (
            (self.auth.cert_file, self.auth.key_file)
            if self.auth.cert_file is not None and self.auth.key_file is not None else None)
        self._token: str | None = None  # etcd's auth token, once authenticated
        self._owner = owner
        self._lock = threading.Lock()
        self._closed = False
        self._client: Any = etcd3gw.Etcd3Client(host=host, port=port, protocol=protocol, timeout=timeout_s,
                                                api_path=API_PATH)

    def _send(self, path: str, payload: dict[str, Any]) -> Any:
        headers = {"Authorization": self._token} if self._token else None
        return self._client.post(self._client.get_url(path), json=payload, verify=self._verify, cert=self._cert,
                                 headers=headers)

    def _authenticate(self) -> None:
        """Get a token for ``auth.user`` (etcd's ``/v3/auth/authenticate``)."""
        assert self.auth.user is not None and self.auth.password is not None
        self._token = None
        try:
            resp = self._send("/auth/authenticate", {"name": self.auth.user, "password": self.auth.password})
        except self._exc.Etcd3Exception as exc:
            _, detail = _gateway_error(exc)
            if "not enabled" not in detail.lower():
                raise
            log.warning("etcd at %s has authentication disabled; --etcd-user %s is not needed",
                        self.endpoint, self.auth.user)
            self._token = ""
            return
        token = resp.get("token") if isinstance(resp, dict) else None
        if not isinstance(token, str) or not token:
            raise SourceUnavailable(f"{self.endpoint} did not answer like an etcd v3 gateway (authenticate): "
                                    "no token in the answer")
        self._token = token

    def post(self, path: str, payload: dict[str, Any], op: str) -> dict[str, Any]:
        """POST ``payload`` to ``/v3{path}``; the decoded JSON answer."""
        with self._lock:
            if self._closed:
                raise RuntimeError(f"{self._owner}({self.endpoint!r}) is closed")
            with gateway_errors(self._exc, self.endpoint, op, self.auth):
                if self.auth.user is not None and self._token is None:
                    self._authenticate()
                try:
                    result = self._send(path, payload)
                except self._exc.Etcd3Exception as exc:
                    code, detail = _gateway_error(exc)
                    expired = code == _GRPC_UNAUTHENTICATED or "invalid auth token" in detail.lower()
                    if not (expired and self.auth.user is not None and self._token):
                        raise
                    self._authenticate()  # the token expired (etcd --auth-token-ttl): once more
                    result = self._send(path, payload)
        if not isinstance(result, dict):
            raise SourceUnavailable(f"{self.endpoint} did not answer like an etcd v3 gateway ({op}): "
                                    f"a JSON {type(result).__name__}, not an object")
        return result

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                self._client.session.close()
