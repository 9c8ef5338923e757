"""One Kubernetes ``coordination.k8s.io/v1`` Lease, read and written for :mod:`ebb.ledger.kube_lease`.

An adapter over the official ``kubernetes`` client (``pip install 'ebb[k8s]'``, imported when a store
is made). Three calls, each one HTTP request bounded by ``timeout_s``, none retried here (the
elector's loop is the retry policy):

* :meth:`KubeLeaseStore.get`: the Lease as a :class:`LeaseRecord`, None when absent (404).
* :meth:`KubeLeaseStore.create`: POST; None when another candidate created it first (409).
* :meth:`KubeLeaseStore.update`: PUT of the *observed* object with a new spec, carrying the observed
  ``resourceVersion`` (and ``uid``): None when anyone wrote the Lease since it was observed (409),
  which is the optimistic concurrency the election rests on. Labels and annotations observed are
  sent back unchanged, as client-go's ``LeaseLock.Update`` does.

MicroTimes (``acquireTime``, ``renewTime``) are written by :func:`micro_time`, never on a whole
second: the API server parses them with Go's ``RFC3339Micro`` layout, which needs six fraction
digits, and the official client (v37 validates bodies into its models) re-serializes times with
Python's ``isoformat``, which drops a zero fraction; a whole second is sent 1 µs later instead. They
are compared as the server answered them, never as times: the election reads only the local clock.

Errors: 401/403 → :class:`~ebb.errors.PermanentError` naming the RBAC rule to grant; a missing
namespace (404 on create), 400 and 422 → :class:`~ebb.errors.PermanentError`; 429, 5xx, timeouts
and refused connections → :class:`~ebb.errors.TransientError`. Credentials that cannot be loaded →
:class:`~ebb.errors.ConfigError` at construction.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Final

from ebb.errors import ConfigError, EbbError, PermanentError, TransientError, require_extra

__all__ = ["LeaseRecord", "KubeLeaseStore", "lease_name", "load_kube_client", "micro_time"]

_MAX_NAME: Final = 63
_DNS_LABEL: Final = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


def micro_time(wall_s: float) -> str:
    """A Unix time as a Kubernetes MicroTime: UTC, six fraction digits, ``Z``; a whole second is moved
    1 µs later (module docstring: the client would send it without a fraction)."""
    when = datetime.fromtimestamp(wall_s, tz=timezone.utc)
    return (when if when.microsecond else when.replace(microsecond=1)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def lease_name(target: str) -> str:
    """The Lease name for a run target (``namespace/deployment``, ``fleet-<stem>``): ``ebb-`` + the
    target lower-cased with every other character than ``a-z0-9`` as ``-``, then ``-`` + the first 8
    hex digits of the target's SHA-256, cut to 63 characters in all (a DNS-1123 label, so valid as
    a Lease name and as a label value). The hash keeps targets apart that read the same once
    cleaned (``a-b/c`` and ``a/b-c``): two controllers never share a Lease by accident."""
    if not target:
        raise ConfigError("a Lease name needs a non-empty run target (fix: pass --deployment, or a fleet file)")
    digest = hashlib.sha256(target.encode()).hexdigest()[:8]
    readable = re.sub(r"[^a-z0-9]+", "-", target.lower()).strip("-")
    head = f"ebb-{readable}"[: _MAX_NAME - len(digest) - 1].rstrip("-")
    return f"{head}-{digest}"


def load_kube_client(kubeconfig: str | None = None, in_cluster: bool = False) -> Any:
    """A ``kubernetes.client.ApiClient`` from a kubeconfig (default ``~/.kube/config``) or the pod's
    service account, the client's own retries off; ConfigError naming the source when it cannot load."""
    k = require_extra("kubernetes.client", "k8s")
    config = require_extra("kubernetes.config", "k8s")
    cfg = k.Configuration()
    try:
        if in_cluster:
            config.load_incluster_config(client_configuration=cfg)
        else:
            config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
    except (config.ConfigException, OSError, ValueError) as exc:
        where = "in-cluster service account" if in_cluster else (kubeconfig or "~/.kube/config")
        raise ConfigError(f"cannot load Kubernetes credentials for the Lease election from {where}: {exc} "
                          "(fix: pass a valid --kubeconfig, or run in a pod with --in-cluster)") from exc
    cfg.retries = False  # the elector's loop is the only retry policy
    return k.ApiClient(cfg)


@dataclass(frozen=True)
class LeaseRecord:
    """One observed Lease: its election record (the spec) and what an update must send back.

    ``lease_duration_s`` is 0 when the spec has none (client-go then treats the Lease as expired);
    times are the server's MicroTime text, "" when unset."""

    holder: str
    lease_duration_s: int
    acquire_time: str
    renew_time: str
    transitions: int
    resource_version: str
    metadata: Mapping[str, Any] = field(default_factory=dict, compare=False)

    @property
    def record(self) -> tuple[str, int, str, str, int]:
        """The election record compared between reads: a change restarts the expiry count."""
        return self.holder, self.lease_duration_s, self.acquire_time, self.renew_time, self.transitions


def _record(obj: Mapping[str, Any]) -> LeaseRecord:
    spec, meta = obj.get("spec") or {}, obj.get("metadata") or {}
    return LeaseRecord(str(spec.get("holderIdentity") or ""), int(spec.get("leaseDurationSeconds") or 0),
                       str(spec.get("acquireTime") or ""), str(spec.get("renewTime") or ""),
                       int(spec.get("leaseTransitions") or 0), str(meta.get("resourceVersion") or ""),
                       {k: v for k, v in meta.items() if k != "managedFields"})


class KubeLeaseStore:
    """The Lease ``namespace/name`` (module docstring). ``api_client`` is shared and left open; without
    one, a client is loaded from ``kubeconfig`` / ``in_cluster`` and closed by :meth:`close`."""

    def __init__(self, namespace: str, name: str, *, timeout_s: float, api_client: Any = None,
                 kubeconfig: str | None = None, in_cluster: bool = False) -> None:
        for what, value in (("namespace", namespace), ("name", name)):
            if not isinstance(value, str) or len(value) > _MAX_NAME or not _DNS_LABEL.fullmatch(value):
                raise ConfigError(f"Lease {what} {value!r} is not a DNS-1123 label (fix: lower-case letters, digits "
                                  "and '-', at most 63, e.g. --lease-namespace ebb-system)")
        if not timeout_s > 0:
            raise ConfigError(f"Lease request timeout must be > 0 s, got {timeout_s!r}")
        k = require_extra("kubernetes.client", "k8s")
        urllib3 = require_extra("urllib3", "k8s")
        self.namespace, self.name, self.timeout_s = namespace, name, timeout_s
        self._owns = api_client is None
        self._api_client = load_kube_client(kubeconfig, in_cluster) if api_client is None else api_client
        self._api = k.CoordinationV1Api(self._api_client)
        self._api_error = k.exceptions.ApiException
        self._transport_errors: tuple[type[BaseException], ...] = (urllib3.exceptions.HTTPError, OSError)
        self.where = f"Lease {namespace}/{name}"

    def get(self) -> LeaseRecord | None:
        """The Lease, None when absent."""
        return self._call("read", lambda: self._api.read_namespaced_lease(
            self.name, self.namespace, _preload_content=False, _request_timeout=self.timeout_s), absent_ok=True)

    def create(self, spec: Mapping[str, Any]) -> LeaseRecord | None:
        """Create the Lease with ``spec``; None when it exists already (another candidate was first)."""
        body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace}, "spec": dict(spec)}
        return self._call("create", lambda: self._api.create_namespaced_lease(
            self.namespace, body, _preload_content=False, _request_timeout=self.timeout_s), taken_ok=True)

    def update(self, observed: LeaseRecord, spec: Mapping[str, Any]) -> LeaseRecord | None:
        """Replace the observed Lease's spec with ``spec`` if nobody wrote it since; None otherwise."""
        body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {**observed.metadata, "name": self.name, "namespace": self.namespace,
                             "resourceVersion": observed.resource_version},
                "spec": dict(spec)}
        return self._call("update", lambda: self._api.replace_namespaced_lease(
            self.name, self.namespace, body, _preload_content=False, _request_timeout=self.timeout_s), taken_ok=True)

    def _call(self, op: str, send: Callable[[], Any], *, absent_ok: bool = False,
              taken_ok: bool = False) -> LeaseRecord | None:
        try:
            resp = send()
            obj = json.loads(resp.data)
        except self._api_error as exc:
            status = int(exc.status or 0)
            if absent_ok and status == 404:
                return None
            if taken_ok and status == 409:
                return None
            raise self._error(op, status, exc) from exc
        except self._transport_errors as exc:
            raise TransientError(f"{self.where}: {op} got no answer from the API server: {exc}") from exc
        except ValueError as exc:  # not JSON: a proxy's page, not the API server
            raise TransientError(f"{self.where}: {op} answered something that is not JSON: {exc}") from exc
        if not isinstance(obj, dict):
            raise TransientError(f"{self.where}: {op} answered {type(obj).__name__}, not a Lease")
        return _record(obj)

    def _error(self, op: str, status: int, exc: Any) -> EbbError:
        said = _message(exc)
        if status in (401, 403):
            return PermanentError(f"{self.where}: {op} refused ({status}: {said}) (fix: grant the controller's "
                                  f"service account get, create and update on coordination.k8s.io leases in "
                                  f"namespace {self.namespace}, as deploy/rbac.yaml does)")
        if status == 404:
            return PermanentError(f"{self.where}: {op}: {said} (fix: create namespace {self.namespace}, or pass "
                                  "--lease-namespace with the controller's own namespace)")
        if status == 429 or status >= 500 or status == 0:
            return TransientError(f"{self.where}: {op} failed ({status}: {said})")
        return PermanentError(f"{self.where}: {op} refused ({status}: {said})")

    def close(self) -> None:
        """Close the API client if this store loaded it."""
        if self._owns:
            self._api_client.close()


def _message(exc: Any) -> str:
    """The ``Status`` message of an API error, else its reason."""
    try:
        body = json.loads(exc.body or "{}")
    except (TypeError, ValueError):
        body = {}
    msg = body.get("message") if isinstance(body, dict) else None
    return str(msg or exc.reason or "no message")[:300]
