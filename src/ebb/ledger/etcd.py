"""etcd v3 :class:`~ebb.ledger.base.Ledger`, through etcd's ``/v3/`` JSON gateway (``etcd3gw``).

Install with ``pip install 'ebb[etcd]'``; the client is imported only when an :class:`EtcdLedger` is made.

Keys (ids are percent-encoded, so ``/`` inside an id cannot break the layout)::

    /{prefix}/cycles/{cycle_id}              the whole cycle as canonical JSON (decisions included)
    /{prefix}/decisions/{decision_id}        one decision as canonical JSON
    /{prefix}/runs/{run_id}/{cycle_id}       run index; value is the cycle id

Guarantees (on top of :mod:`ebb.ledger.base`):

* **One etcd transaction per cycle.** ``append_cycle`` sends one ``Txn``: compare
  ``create_revision == 0`` on the cycle key and on every decision key; success puts all keys; failure
  reads those keys back in the same round trip. etcd applies a Txn atomically at one revision, so a
  cycle is all or nothing whatever happens to the client. Idempotency compares the stored value with
  the new cycle: equal → ``False``; different → :class:`~ebb.errors.LedgerConflict`.
* **Fenced writes.** With a ``fence`` the same Txn also compares ``create_revision(fence.key) ==
  fence.token`` (a missing key has ``create_revision`` 0, and tokens are >= 1), and its failure branch
  reads the election key too. etcd evaluates every comparison and applies the puts at one revision, so
  a leader whose key has expired, been revoked or been replaced by a newer leader's (higher
  ``create_revision``) writes nothing and gets :class:`~ebb.errors.NotLeader`. ``fence.key`` is used as
  is (not under ``prefix``): the elector and the ledger must talk to the same etcd cluster.
* **Size.** etcd limits a Txn to ``--max-txn-ops`` (default 128) operations per branch, so a cycle
  may hold at most ``max_txn_ops - 2`` decisions (126 by default; 125 with a fence, whose read takes
  one more operation); larger cycles are refused with :class:`~ebb.errors.ConfigError` before anything
  is sent.
* **Consistency.** Reads are linearizable (etcd's default), so a cycle is visible to every client
  once ``append_cycle`` returns. Multi-key reads for one run are pinned to one revision.
* **TLS and authentication** (:class:`~ebb.ledger.location.EtcdAuth`): ``ca_file`` replaces the
  system CA store for verifying etcd's server certificate (it is passed on every request, so
  ``REQUESTS_CA_BUNDLE`` cannot override it); ``cert_file``/``key_file`` are the client certificate
  for etcd's ``--client-cert-auth``; ``user``/``password`` authenticate once
  (``/v3/auth/authenticate``) and send the token on every request, authenticating again once when
  etcd answers that the token expired. Requests go to the ``/v3/`` gateway path (etcd >= 3.4).
* **Malformed keys** (see :mod:`ebb.ledger.base`): a value that does not decode, a record whose id does
  not match its key, a cycle listed under another run, or a run-index entry naming a cycle that is
  not stored is skipped by ``cycles()``/``decisions()`` (logged, in :attr:`EtcdLedger.skipped`) and
  raises :class:`~ebb.errors.InputError` naming the endpoint and key from ``get_cycle``/``get_decision``.
* **Errors.** Connection refused, timeouts and 5xx raise :class:`~ebb.errors.SourceUnavailable` naming
  the endpoint, with the client's exception chained. A TLS failure (unknown CA, a client certificate
  etcd refuses or lacks, a key that does not match its certificate, TLS against a plain-HTTP etcd)
  and an authentication failure (no or wrong credentials, permission denied) raise
  :class:`~ebb.errors.ConfigError` at once — no retry — naming the flag to fix (``--etcd-ca``,
  ``--etcd-cert``/``--etcd-key``, ``--etcd-user``/``--etcd-password-file``).
"""

from __future__ import annotations

import base64
import binascii
import logging
import os
import ssl
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Final
from urllib.parse import quote, urlsplit

from ebb.errors import ConfigError, InputError, SourceUnavailable, TransientError, require_extra
from ebb.ledger.base import (Fence, MalformedRow, RowSkips, check_fence_token, check_same_cycle, cycle_order,
                             decision_order, decision_taken, keep_last, not_leader)
from ebb.ledger.location import PASSWORD_ENV, EtcdAuth
from ebb.model.decisions import CycleRecord, DecisionRecord
from ebb.model.ids import CycleId, DecisionId, RunId
from ebb.untrusted import loads_json

__all__ = ["EtcdLedger", "EtcdGateway", "DEFAULT_PREFIX", "ROW_FIX"]

log = logging.getLogger(__name__)

DEFAULT_PREFIX: Final = "ebb/ledger"
API_PATH: Final = "/v3/"
ROW_FIX: Final = ("ebb never rewrites a recorded row: restore this key from a backup, or delete it "
                  "(etcdctl del KEY); the other rows stay readable")
_READ_BATCH: Final = 100
_GRPC_PERMISSION_DENIED: Final = 7
_GRPC_UNAUTHENTICATED: Final = 16


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(data: object) -> bytes:
    """Base64 text from the gateway as bytes; ValueError (binascii.Error) when it is not base64."""
    if not isinstance(data, str):
        raise ValueError(f"expected base64 text, got {type(data).__name__}")
    return base64.b64decode(data, validate=True)


def _key_text(key: bytes) -> str:
    return key.decode("utf-8", "backslashreplace")


def _q(ident: str) -> str:
    return quote(ident, safe="")


def _prefix_end(prefix: bytes) -> bytes:
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


class EtcdLedger:
    """Ledger stored in etcd under ``/{prefix}/``; ``endpoint`` is the client URL (``http://127.0.0.1:2379``).

    ``timeout_s`` bounds each HTTP request; ``max_txn_ops`` must match the server's ``--max-txn-ops``;
    ``auth`` holds the TLS files and user (module docstring).
    """

    def __init__(self, endpoint: str, *, prefix: str = DEFAULT_PREFIX, timeout_s: float = 5.0,
                 max_txn_ops: int = 128, auth: EtcdAuth | None = None) -> None:
        clean = prefix.strip("/")
        if not clean:
            raise ConfigError(f"etcd key prefix must be non-empty, got {prefix!r}")
        self._gw = EtcdGateway(endpoint, timeout_s=timeout_s, owner="EtcdLedger", auth=auth)
        self.endpoint = self._gw.endpoint
        self.prefix = clean
        self.max_txn_ops = max_txn_ops
        self._root = f"/{clean}/".encode()
        self._skipped: tuple[MalformedRow, ...] = ()

    @property
    def skipped(self) -> tuple[MalformedRow, ...]:
        return self._skipped

    # -- keys -----------------------------------------------------------------------------------------

    def _cycle_key(self, cycle_id: str) -> bytes:
        return self._root + b"cycles/" + _q(cycle_id).encode()

    def _decision_key(self, decision_id: str) -> bytes:
        return self._root + b"decisions/" + _q(decision_id).encode()

    def _run_prefix(self, run_id: str) -> bytes:
        return self._root + b"runs/" + _q(run_id).encode() + b"/"

    def _where(self, key: bytes) -> str:
        return f"etcd {self.endpoint} key {_key_text(key)}"

    def _malformed(self, key: bytes, what: str) -> InputError:
        return InputError(f"malformed ledger key: {what}", path=self._where(key), fix=ROW_FIX)

    # -- transport ------------------------------------------------------------------------------------

    def _post(self, path: str, payload: dict[str, Any], op: str) -> dict[str, Any]:
        return self._gw.post(path, payload, op)

    def check(self) -> None:
        """One read of the prefix (keys only, at most one): :class:`~ebb.errors.ConfigError` now for a TLS or
        authentication problem, :class:`~ebb.errors.SourceUnavailable` when etcd does not answer."""
        op = self._range_op(self._root, prefix=True, keys_only=True)
        op["limit"] = 1
        self._post("/kv/range", op, "open")

    @staticmethod
    def _range_op(key: bytes, *, prefix: bool = False, keys_only: bool = False,
                  revision: int | None = None) -> dict[str, Any]:
        op: dict[str, Any] = {"key": _b64(key)}
        if prefix:
            op["range_end"] = _b64(_prefix_end(key))
        if keys_only:
            op["keys_only"] = True
        if revision is not None:
            op["revision"] = revision
        return op

    def _range(self, key: bytes, op: str, **kw: Any) -> tuple[list[Any], int]:
        resp = self._post("/kv/range", self._range_op(key, **kw), op)
        kvs = resp.get("kvs", [])
        header = resp.get("header", {})
        try:
            rev = int(header.get("revision", 0)) if isinstance(header, dict) else 0
        except (TypeError, ValueError):
            rev = 0
        return (list(kvs) if isinstance(kvs, list) else []), rev

    @staticmethod
    def _key_of(kv: object, fallback: bytes) -> bytes:
        """The key of one gateway ``kv`` (``fallback`` when it has none readable: the error says so)."""
        try:
            return _unb64(kv.get("key", "")) if isinstance(kv, dict) else fallback
        except ValueError:
            return fallback

    def _kv(self, kv: object, fallback_key: bytes) -> tuple[bytes, bytes]:
        """(key, value) of one gateway ``kv``; InputError naming the key when either is not base64."""
        if not isinstance(kv, dict):
            raise self._malformed(fallback_key, f"the gateway returned {type(kv).__name__}, not a key-value object")
        try:
            key = _unb64(kv.get("key", ""))
        except ValueError as exc:
            raise self._malformed(fallback_key, f"its key is not base64 ({exc})") from exc
        try:
            return key, _unb64(kv.get("value", ""))
        except ValueError as exc:
            raise self._malformed(key, f"its value is not base64 ({exc})") from exc

    def _get_many(self, keys: Sequence[bytes], op: str, revision: int | None) -> list[object | None]:
        """The kv of each of ``keys`` (None where absent), read in read-only Txns of at most ``_READ_BATCH``."""
        out: list[object | None] = []
        for start in range(0, len(keys), _READ_BATCH):
            batch = keys[start:start + _READ_BATCH]
            resp = self._post("/kv/txn", {"compare": [], "success": [
                {"request_range": self._range_op(k, revision=revision)} for k in batch]}, op)
            for r in resp.get("responses", []):
                kvs = r.get("response_range", {}).get("kvs", []) if isinstance(r, dict) else []
                out.append(kvs[0] if isinstance(kvs, list) and kvs else None)
        if len(out) != len(keys):
            raise TransientError(f"etcd at {self.endpoint} answered {len(out)} of {len(keys)} reads ({op})")
        return out

    # -- decoding -------------------------------------------------------------------------------------

    def _cycle(self, key: bytes, raw: bytes, run_id: RunId | None = None) -> CycleRecord:
        """The cycle stored under ``key``; InputError naming the key when it is malformed or misplaced."""
        rec = CycleRecord.from_json(raw, where=self._where(key), fix=ROW_FIX)
        if self._cycle_key(rec.cycle_id) != key:
            raise self._malformed(key, f"it holds cycle {rec.cycle_id!r}, whose key is "
                                       f"{_key_text(self._cycle_key(rec.cycle_id))}")
        if run_id is not None and rec.run_id != run_id:
            raise self._malformed(key, f"cycle {rec.cycle_id!r} of run {rec.run_id!r} is listed under run {run_id!r}")
        return rec

    def _decision(self, key: bytes, raw: bytes) -> DecisionRecord:
        rec = DecisionRecord.from_json(raw, where=self._where(key), fix=ROW_FIX)
        if self._decision_key(rec.decision_id) != key:
            raise self._malformed(key, f"it holds decision {rec.decision_id!r}, whose key is "
                                       f"{_key_text(self._decision_key(rec.decision_id))}")
        return rec

    # -- writes ---------------------------------------------------------------------------------------

    def append_cycle(self, cycle: CycleRecord, fence: Fence | None = None) -> bool:
        if not isinstance(cycle, CycleRecord):
            raise TypeError(f"append_cycle expects a CycleRecord, got {cycle!r}")
        check_fence_token(cycle, fence)
        n = len(cycle.decisions)
        room = self.max_txn_ops - 2 - (0 if fence is None else 1)
        if n > room:
            raise ConfigError(
                f"cycle {cycle.cycle_id!r} has {n} decisions; one etcd transaction holds at most "
                f"{room} (etcd --max-txn-ops={self.max_txn_ops}); split the cycle or "
                "raise --max-txn-ops on the server and max_txn_ops here"
            )
        ckey = self._cycle_key(cycle.cycle_id)
        dkeys = [self._decision_key(d.decision_id) for d in cycle.decisions]
        puts = [(ckey, cycle.to_json().encode())]
        puts += [(k, d.to_json().encode()) for k, d in zip(dkeys, cycle.decisions)]
        puts.append((self._run_prefix(cycle.run_id) + _q(cycle.cycle_id).encode(), cycle.cycle_id.encode()))
        compare = [{"key": _b64(k), "result": "EQUAL", "target": "CREATE", "create_revision": 0}
                   for k in [ckey, *dkeys]]
        reads = [self._range_op(k) for k in [ckey, *dkeys]]
        if fence is not None:
            # Compared first and read last, so the failure answers line up with the ids below.
            compare.insert(0, {"key": _b64(fence.key.encode()), "result": "EQUAL", "target": "CREATE",
                               "create_revision": fence.token})
            reads.append(self._range_op(fence.key.encode()))
        txn = {
            "compare": compare,
            "success": [{"request_put": {"key": _b64(k), "value": _b64(v)}} for k, v in puts],
            "failure": [{"request_range": r} for r in reads],
        }
        resp = self._post("/kv/txn", txn, "append_cycle")
        if resp.get("succeeded"):
            return True
        found: list[Any] = []
        for r in resp.get("responses", []):
            kvs = r.get("response_range", {}).get("kvs", []) if isinstance(r, dict) else []
            found.append(kvs[0] if isinstance(kvs, list) and kvs else None)
        if fence is not None:
            self._check_fence_read(fence, cycle.cycle_id, found.pop() if found else None)
        keys = [ckey, *dkeys]
        if found and found[0] is not None:
            key, raw = self._kv(found[0], ckey)
            return check_same_cycle(self._cycle(key, raw), cycle)
        for d, k, kv in zip(cycle.decisions, keys[1:], found[1:]):
            if kv is not None:
                key, raw = self._kv(kv, k)
                raise decision_taken(d.decision_id, self._decision(key, raw).cycle_id, cycle.cycle_id)
        raise TransientError(f"etcd at {self.endpoint} rejected cycle {cycle.cycle_id!r} "
                             "but no conflicting key was found; retry", retry_after_s=0.1)

    @staticmethod
    def _check_fence_read(fence: Fence, cycle_id: str, kv: Any) -> None:
        """NotLeader unless the election key, as read in the failed Txn, still carries ``fence.token``."""
        if not isinstance(kv, dict):
            raise not_leader(fence, cycle_id, "the election key is gone: the lease expired or was revoked")
        try:
            created = int(kv.get("create_revision", 0))
        except (TypeError, ValueError):
            created = 0
        if created != fence.token:
            raise not_leader(fence, cycle_id, f"the election key was re-created at revision {created}")

    # -- reads ----------------------------------------------------------------------------------------

    def get_decision(self, decision_id: DecisionId) -> DecisionRecord | None:
        want = self._decision_key(decision_id)
        kvs, _ = self._range(want, "get_decision")
        if not kvs:
            return None
        key, raw = self._kv(kvs[0], want)
        return self._decision(key, raw)

    def get_cycle(self, cycle_id: CycleId) -> CycleRecord | None:
        want = self._cycle_key(cycle_id)
        kvs, _ = self._range(want, "get_cycle")
        if not kvs:
            return None
        key, raw = self._kv(kvs[0], want)
        return self._cycle(key, raw)

    def _all_cycles(self, run_id: RunId | None, skips: RowSkips) -> list[CycleRecord]:
        out: list[CycleRecord] = []
        if run_id is None:
            root = self._root + b"cycles/"
            kvs, _ = self._range(root, "cycles", prefix=True)
            for kv in kvs:
                key = self._key_of(kv, root)
                try:
                    key, raw = self._kv(kv, root)
                    out.append(self._cycle(key, raw))
                except InputError as exc:
                    skips.skip("cycle", _key_text(key), exc)
            return out
        run_root = self._run_prefix(run_id)
        kvs, rev = self._range(run_root, "cycles", prefix=True)
        wanted: list[bytes] = []
        for kv in kvs:
            key = self._key_of(kv, run_root)
            try:
                key, raw = self._kv(kv, run_root)
                try:
                    ident = raw.decode("utf-8")
                except UnicodeDecodeError as exc:
                    raise self._malformed(key, "run index entry whose value is not a UTF-8 cycle id") from exc
                if not ident or key != run_root + _q(ident).encode():
                    raise self._malformed(key, f"run index entry names cycle {ident!r}, which its key does not")
                wanted.append(self._cycle_key(ident))
            except InputError as exc:
                skips.skip("cycle", _key_text(key), exc)
        for ckey, kv in zip(wanted, self._get_many(wanted, "cycles", rev)):
            key = self._key_of(kv, ckey)
            try:
                if kv is None:
                    raise self._malformed(ckey, f"run {run_id!r} lists this cycle, but no cycle is stored here")
                key, raw = self._kv(kv, ckey)
                out.append(self._cycle(key, raw, run_id))
            except InputError as exc:
                skips.skip("cycle", _key_text(key), exc)
        return out

    def cycles(self, run_id: RunId | None = None, limit: int | None = None) -> list[CycleRecord]:
        keep_last([], limit)  # validates limit
        skips = RowSkips()
        found = self._all_cycles(run_id, skips)
        self._skipped = skips.result()
        return keep_last(sorted(found, key=cycle_order), limit)

    def decisions(self, run_id: RunId | None = None, target: str | None = None) -> list[DecisionRecord]:
        skips = RowSkips()
        if run_id is not None:
            found = [d for c in self._all_cycles(run_id, skips) for d in c.decisions]
        else:
            root = self._root + b"decisions/"
            kvs, _ = self._range(root, "decisions", prefix=True)
            found = []
            for kv in kvs:
                key = self._key_of(kv, root)
                try:
                    key, raw = self._kv(kv, root)
                    found.append(self._decision(key, raw))
                except InputError as exc:
                    skips.skip("decision", _key_text(key), exc)
        self._skipped = skips.result()
        return sorted((d for d in found if target is None or d.target == target), key=decision_order)

    def close(self) -> None:
        self._gw.close()

    def __enter__(self) -> EtcdLedger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"EtcdLedger({self.endpoint!r}, prefix={self.prefix!r})"
