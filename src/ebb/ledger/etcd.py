"""etcd v3 :class:`~ebb.ledger.base.Ledger`, through etcd's ``/v3/`` JSON gateway (``etcd3gw``).

Install with ``pip install 'ebb[etcd]'``; the client is imported only when an :class:`EtcdLedger` is made.

The HTTP session, TLS, authentication and the mapping of failures are
:mod:`ebb.ledger.etcd_gateway`'s (:class:`EtcdGateway`, re-exported here); the ledger adds the key
layout, transactions and decoding.

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
* **TLS and authentication** (:class:`~ebb.ledger.location.EtcdAuth`; details in
  :mod:`ebb.ledger.etcd_gateway`): a CA file, a client certificate and key, and a user and password
  (authenticated once, again once when the token expired). Requests go to the ``/v3/`` gateway
  path (etcd >= 3.4).
* **Malformed keys** (see :mod:`ebb.ledger.base`): a value that does not decode, a record whose id does
  not match its key, a cycle listed under another run, or a run-index entry naming a cycle that is
  not stored is skipped by ``cycles()``/``decisions()`` (logged, in :attr:`EtcdLedger.skipped`) and
  raises :class:`~ebb.errors.InputError` naming the endpoint and key from ``get_cycle``/``get_decision``.
* **Errors** (:func:`~ebb.ledger.etcd_gateway.gateway_errors`). No answer (refused, timeout, 5xx)
  → :class:`~ebb.errors.SourceUnavailable` naming the endpoint; a TLS or authentication failure →
  :class:`~ebb.errors.ConfigError` at once, no retry, naming the flag to fix.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from ebb.errors import ConfigError, InputError, TransientError
from ebb.ledger.base import (Fence, MalformedRow, RowSkips, check_fence_token, check_same_cycle, cycle_order,
                             decision_order, decision_taken, keep_last, not_leader)
from ebb.ledger.etcd_gateway import (API_PATH, READ_BATCH, EtcdGateway, b64, gateway_errors, key_text, prefix_end,
                                     quote_id, unb64)
from ebb.ledger.location import EtcdAuth
from ebb.model.decisions import CycleRecord, DecisionRecord
from ebb.model.ids import CycleId, DecisionId, RunId

__all__ = ["EtcdLedger", "EtcdGateway", "DEFAULT_PREFIX", "ROW_FIX", "API_PATH", "gateway_errors"]

DEFAULT_PREFIX: Final = "ebb/ledger"
ROW_FIX: Final = ("ebb never rewrites a recorded row: restore this key from a backup, or delete it "
                  "(etcdctl del KEY); the other rows stay readable")


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
        self.auth = auth
        """How it authenticates (a compensation log next to it opens with the same)."""
        self.max_txn_ops = max_txn_ops
        self._root = f"/{clean}/".encode()
        self._skipped: tuple[MalformedRow, ...] = ()

    @property
    def skipped(self) -> tuple[MalformedRow, ...]:
        return self._skipped

    # -- keys -----------------------------------------------------------------------------------------

    def _cycle_key(self, cycle_id: str) -> bytes:
        return self._root + b"cycles/" + quote_id(cycle_id).encode()

    def _decision_key(self, decision_id: str) -> bytes:
        return self._root + b"decisions/" + quote_id(decision_id).encode()

    def _run_prefix(self, run_id: str) -> bytes:
        return self._root + b"runs/" + quote_id(run_id).encode() + b"/"

    def _where(self, key: bytes) -> str:
        return f"etcd {self.endpoint} key {key_text(key)}"

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
        op: dict[str, Any] = {"key": b64(key)}
        if prefix:
            op["range_end"] = b64(prefix_end(key))
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
            return unb64(kv.get("key", "")) if isinstance(kv, dict) else fallback
        except ValueError:
            return fallback

    def _kv(self, kv: object, fallback_key: bytes) -> tuple[bytes, bytes]:
        """(key, value) of one gateway ``kv``; InputError naming the key when either is not base64."""
        if not isinstance(kv, dict):
            raise self._malformed(fallback_key, f"the gateway returned {type(kv).__name__}, not a key-value object")
        try:
            key = unb64(kv.get("key", ""))
        except ValueError as exc:
            raise self._malformed(fallback_key, f"its key is not base64 ({exc})") from exc
        try:
            return key, unb64(kv.get("value", ""))
        except ValueError as exc:
            raise self._malformed(key, f"its value is not base64 ({exc})") from exc

    def _get_many(self, keys: Sequence[bytes], op: str, revision: int | None) -> list[object | None]:
        """The kv of each of ``keys`` (None where absent), read in read-only Txns of at most ``READ_BATCH``."""
        out: list[object | None] = []
        for start in range(0, len(keys), READ_BATCH):
            batch = keys[start:start + READ_BATCH]
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
                                       f"{key_text(self._cycle_key(rec.cycle_id))}")
        if run_id is not None and rec.run_id != run_id:
            raise self._malformed(key, f"cycle {rec.cycle_id!r} of run {rec.run_id!r} is listed under run {run_id!r}")
        return rec

    def _decision(self, key: bytes, raw: bytes) -> DecisionRecord:
        rec = DecisionRecord.from_json(raw, where=self._where(key), fix=ROW_FIX)
        if self._decision_key(rec.decision_id) != key:
            raise self._malformed(key, f"it holds decision {rec.decision_id!r}, whose key is "
                                       f"{key_text(self._decision_key(rec.decision_id))}")
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
        puts.append((self._run_prefix(cycle.run_id) + quote_id(cycle.cycle_id).encode(), cycle.cycle_id.encode()))
        compare = [{"key": b64(k), "result": "EQUAL", "target": "CREATE", "create_revision": 0}
                   for k in [ckey, *dkeys]]
        reads = [self._range_op(k) for k in [ckey, *dkeys]]
        if fence is not None:
            # Compared first and read last, so the failure answers line up with the ids below.
            compare.insert(0, {"key": b64(fence.key.encode()), "result": "EQUAL", "target": "CREATE",
                               "create_revision": fence.token})
            reads.append(self._range_op(fence.key.encode()))
        txn = {
            "compare": compare,
            "success": [{"request_put": {"key": b64(k), "value": b64(v)}} for k, v in puts],
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
                    skips.skip("cycle", key_text(key), exc)
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
                if not ident or key != run_root + quote_id(ident).encode():
                    raise self._malformed(key, f"run index entry names cycle {ident!r}, which its key does not")
                wanted.append(self._cycle_key(ident))
            except InputError as exc:
                skips.skip("cycle", key_text(key), exc)
        for ckey, kv in zip(wanted, self._get_many(wanted, "cycles", rev)):
            key = self._key_of(kv, ckey)
            try:
                if kv is None:
                    raise self._malformed(ckey, f"run {run_id!r} lists this cycle, but no cycle is stored here")
                key, raw = self._kv(kv, ckey)
                out.append(self._cycle(key, raw, run_id))
            except InputError as exc:
                skips.skip("cycle", key_text(key), exc)
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
                    skips.skip("decision", key_text(key), exc)
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
