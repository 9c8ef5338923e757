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
* **Errors.** Connection refused, timeouts and 5xx raise :class:`~ebb.errors.SourceUnavailable` naming
  the endpoint, with the client's exception chained.
"""

from __future__ import annotations

import base64
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Final
from urllib.parse import quote, urlsplit

from ebb.errors import ConfigError, SourceUnavailable, TransientError, require_extra
from ebb.ledger.base import (Fence, check_fence_token, check_same_cycle, cycle_order, decision_order,
                             decision_taken, keep_last, not_leader)
from ebb.model.decisions import CycleRecord, DecisionRecord
from ebb.model.ids import CycleId, DecisionId, RunId

__all__ = ["EtcdLedger", "DEFAULT_PREFIX"]

DEFAULT_PREFIX: Final = "ebb/ledger"
_READ_BATCH: Final = 100


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(data: str) -> bytes:
    return base64.b64decode(data)


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


@contextmanager
def gateway_errors(exc_mod: Any, endpoint: str, op: str) -> Iterator[None]:
    """Map etcd3gw's exceptions to Ebb's tree: no answer → :class:`SourceUnavailable` (retry),
    a refused request → :class:`ConfigError`; the original is chained as the cause."""
    try:
        yield
    except (exc_mod.ConnectionFailedError, exc_mod.ConnectionTimeoutError,
            exc_mod.InternalServerError) as exc:
        detail = getattr(exc, "detail_text", None) or type(exc).__name__
        raise SourceUnavailable(f"etcd at {endpoint} did not answer ({op}): {detail}") from exc
    except exc_mod.Etcd3Exception as exc:
        detail = getattr(exc, "detail_text", None) or type(exc).__name__
        raise ConfigError(f"etcd at {endpoint} refused the request ({op}): {detail}") from exc
    except ValueError as exc:  # a non-JSON answer: not an etcd gateway
        raise SourceUnavailable(f"{endpoint} did not answer like an etcd v3 gateway ({op}): {exc}") from exc
    except OSError as exc:  # requests' RequestException is an OSError: a reply cut off mid-way (etcd killed)
        raise SourceUnavailable(f"etcd at {endpoint} did not answer ({op}): {type(exc).__name__}: {exc}") from exc


class EtcdGateway:
    """One HTTP session to etcd's v3 JSON gateway (``/v3/...``), shared by the ledger, the
    compensation log and the leader elector: one request at a time on the session; every failure
    mapped by :func:`gateway_errors`; ``close`` is idempotent and a closed gateway raises
    RuntimeError (a programming error, not an outage)."""

    def __init__(self, endpoint: str, *, timeout_s: float, owner: str) -> None:
        etcd3gw = require_extra("etcd3gw", "etcd")
        self._exc = require_extra("etcd3gw.exceptions", "etcd")
        protocol, host, port = _parse_endpoint(endpoint)
        self.endpoint = f"{protocol}://{host}:{port}"
        self._owner = owner
        self._lock = threading.Lock()
        self._closed = False
        self._client: Any = etcd3gw.Etcd3Client(host=host, port=port, protocol=protocol, timeout=timeout_s)

    def post(self, path: str, payload: dict[str, Any], op: str) -> dict[str, Any]:
        """POST ``payload`` to ``/v3{path}``; the decoded JSON answer."""
        with self._lock:
            if self._closed:
                raise RuntimeError(f"{self._owner}({self.endpoint!r}) is closed")
            with gateway_errors(self._exc, self.endpoint, op):
                result: dict[str, Any] = self._client.post(self._client.get_url(path), json=payload)
        return result

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                self._client.session.close()


class EtcdLedger:
    """Ledger stored in etcd under ``/{prefix}/``; ``endpoint`` is the client URL (``http://127.0.0.1:2379``).

    ``timeout_s`` bounds each HTTP request; ``max_txn_ops`` must match the server's ``--max-txn-ops``.
    """

    def __init__(self, endpoint: str, *, prefix: str = DEFAULT_PREFIX, timeout_s: float = 5.0,
                 max_txn_ops: int = 128) -> None:
        clean = prefix.strip("/")
        if not clean:
            raise ConfigError(f"etcd key prefix must be non-empty, got {prefix!r}")
        self._gw = EtcdGateway(endpoint, timeout_s=timeout_s, owner="EtcdLedger")
        self.endpoint = self._gw.endpoint
        self.prefix = clean
        self.max_txn_ops = max_txn_ops
        self._root = f"/{clean}/".encode()

    # -- keys -----------------------------------------------------------------------------------------

    def _cycle_key(self, cycle_id: str) -> bytes:
        return self._root + b"cycles/" + _q(cycle_id).encode()

    def _decision_key(self, decision_id: str) -> bytes:
        return self._root + b"decisions/" + _q(decision_id).encode()

    def _run_prefix(self, run_id: str) -> bytes:
        return self._root + b"runs/" + _q(run_id).encode() + b"/"

    # -- transport ------------------------------------------------------------------------------------

    def _post(self, path: str, payload: dict[str, Any], op: str) -> dict[str, Any]:
        return self._gw.post(path, payload, op)

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

    def _range(self, key: bytes, op: str, **kw: Any) -> tuple[list[dict[str, Any]], int]:
        resp = self._post("/kv/range", self._range_op(key, **kw), op)
        return list(resp.get("kvs", [])), int(resp.get("header", {}).get("revision", 0))

    @staticmethod
    def _values(kvs: Sequence[dict[str, Any]]) -> list[bytes]:
        return [_unb64(kv.get("value", "")) for kv in kvs]

    def _get_many(self, keys: Sequence[bytes], op: str, revision: int | None) -> list[bytes | None]:
        """Values of ``keys`` (None where absent), read in read-only Txns of at most ``_READ_BATCH`` ranges."""
        out: list[bytes | None] = []
        for start in range(0, len(keys), _READ_BATCH):
            batch = keys[start:start + _READ_BATCH]
            resp = self._post("/kv/txn", {"compare": [], "success": [
                {"request_range": self._range_op(k, revision=revision)} for k in batch]}, op)
            for r in resp.get("responses", []):
                kvs = r.get("response_range", {}).get("kvs", [])
                out.append(_unb64(kvs[0].get("value", "")) if kvs else None)
        if len(out) != len(keys):
            raise TransientError(f"etcd at {self.endpoint} answered {len(out)} of {len(keys)} reads ({op})")
        return out

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
        found: list[dict[str, Any] | None] = []
        for r in resp.get("responses", []):
            kvs = r.get("response_range", {}).get("kvs", [])
            found.append(kvs[0] if kvs else None)
        if fence is not None:
            self._check_fence_read(fence, cycle.cycle_id, found.pop() if found else None)
        raws = [None if kv is None else _unb64(kv.get("value", "")) for kv in found]
        if raws and raws[0] is not None:
            return check_same_cycle(CycleRecord.from_json(raws[0]), cycle)
        for d, raw in zip(cycle.decisions, raws[1:]):
            if raw is not None:
                raise decision_taken(d.decision_id, DecisionRecord.from_json(raw).cycle_id, cycle.cycle_id)
        raise TransientError(f"etcd at {self.endpoint} rejected cycle {cycle.cycle_id!r} "
                             "but no conflicting key was found; retry", retry_after_s=0.1)

    @staticmethod
    def _check_fence_read(fence: Fence, cycle_id: str, kv: dict[str, Any] | None) -> None:
        """NotLeader unless the election key, as read in the failed Txn, still carries ``fence.token``."""
        if kv is None:
            raise not_leader(fence, cycle_id, "the election key is gone: the lease expired or was revoked")
        created = int(kv.get("create_revision", 0))
        if created != fence.token:
            raise not_leader(fence, cycle_id, f"the election key was re-created at revision {created}")

    # -- reads ----------------------------------------------------------------------------------------

    def get_decision(self, decision_id: DecisionId) -> DecisionRecord | None:
        kvs, _ = self._range(self._decision_key(decision_id), "get_decision")
        return DecisionRecord.from_json(self._values(kvs)[0]) if kvs else None

    def get_cycle(self, cycle_id: CycleId) -> CycleRecord | None:
        kvs, _ = self._range(self._cycle_key(cycle_id), "get_cycle")
        return CycleRecord.from_json(self._values(kvs)[0]) if kvs else None

    def _all_cycles(self, run_id: RunId | None) -> list[CycleRecord]:
        if run_id is None:
            kvs, _ = self._range(self._root + b"cycles/", "cycles", prefix=True)
            return [CycleRecord.from_json(v) for v in self._values(kvs)]
        kvs, rev = self._range(self._run_prefix(run_id), "cycles", prefix=True)
        ids = [v.decode() for v in self._values(kvs)]
        raws = self._get_many([self._cycle_key(i) for i in ids], "cycles", rev)
        return [CycleRecord.from_json(raw) for raw in raws if raw is not None]

    def cycles(self, run_id: RunId | None = None, limit: int | None = None) -> list[CycleRecord]:
        keep_last([], limit)  # validates limit
        return keep_last(sorted(self._all_cycles(run_id), key=cycle_order), limit)

    def decisions(self, run_id: RunId | None = None, target: str | None = None) -> list[DecisionRecord]:
        if run_id is not None:
            found = [d for c in self._all_cycles(run_id) for d in c.decisions]
        else:
            kvs, _ = self._range(self._root + b"decisions/", "decisions", prefix=True)
            found = [DecisionRecord.from_json(v) for v in self._values(kvs)]
        return sorted((d for d in found if target is None or d.target == target), key=decision_order)

    def close(self) -> None:
        self._gw.close()

    def __enter__(self) -> EtcdLedger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"EtcdLedger({self.endpoint!r}, prefix={self.prefix!r})"

