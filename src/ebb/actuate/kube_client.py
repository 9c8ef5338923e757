"""Throttling, retries and error mapping for every Kubernetes API call of :mod:`ebb.actuate.kubernetes`.

Guarantees (``qps``, ``burst``, ``max_retries`` and ``backoff_s`` come from the actuator):

* **Throttled.** :class:`RateLimiter` is a blocking token bucket (``qps`` refill, ``burst``
  capacity, full at start) in front of every attempt, retries included: over any span of ``t``
  seconds at most ``burst + qps·t`` calls start. Clock and sleep are injected, so tests need no
  real time.
* **Retried, boundedly.** 429, any 5xx and transport errors (urllib3 ``HTTPError``, ``OSError``)
  are retried at most ``max_retries`` times (per call: ``retries``). Attempt ``k`` (0-based) then
  waits ``min(30 s, backoff_s·2^k)`` jittered to 50–100 %, but never less than the server's
  ``Retry-After`` (seconds; an HTTP-date is ignored). Once retries are spent →
  :class:`~ebb.errors.TransientError` naming the call and the API host, the last error chained,
  ``retry_after_s`` set to the delay it would have waited.
* **Mapped, never swallowed.** 409 → :class:`WriteConflict` (the caller re-reads and decides
  again); any other 4xx (401, 403, 404, 422...) → :class:`~ebb.errors.PermanentError` with the
  server's message and the fix (401: credentials, 403: ``deploy/rbac.yaml``, 404: the target's
  name). An ``intercept`` hook sees each ``ApiException`` first and may turn it into an answer
  (e.g. 404 on a pod that is already gone).

Retry messages log to ``ebb.actuate.kubernetes``, the actuator's logger.
"""

from __future__ import annotations

import json
import logging
import random
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ebb.ratelimit import TokenBucket
from ebb.errors import PermanentError, TransientError

__all__ = ["DECISION_ANNOTATION", "DECISION_REPLICAS_ANNOTATION", "DELETION_COST_ANNOTATION", "MAX_BACKOFF_S", "ApiCaller",
           "KubeDeployment", "KubePod", "RateLimiter", "WriteConflict"]

DECISION_ANNOTATION = "ebb.dev/last-decision-id"
DECISION_REPLICAS_ANNOTATION = "ebb.dev/last-decision-replicas"
DELETION_COST_ANNOTATION = "controller.kubernetes.io/pod-deletion-cost"
"""The ReplicaSet controller deletes lower-cost pods first (after not-Ready ones; Kubernetes ≥ 1.22)."""

# the actuator's logger, so that filtering on it keeps covering its retries
log = logging.getLogger("ebb.actuate.kubernetes")

MAX_BACKOFF_S = 30.0

T = TypeVar("T")


class RateLimiter:
    """Blocking token bucket (``qps`` refill, ``burst`` capacity) on an injectable clock and sleep."""

    def __init__(self, qps: float, burst: int, *, clock: Callable[[], float],
                 sleep: Callable[[float], None]) -> None:
        self._bucket = TokenBucket(rate_per_s=qps, burst=float(burst), tokens=float(burst))
        self._clock, self._sleep = clock, sleep
        self._lock = threading.Lock()
        self.waited_s = 0.0
        """Total time spent waiting for tokens (s)."""

    def acquire(self) -> None:
        with self._lock:
            while True:
                now = self._clock()
                res = self._bucket.take(now)
                self._bucket = res.bucket
                if res.granted:
                    return
                delay = max(res.next_ok_s - now, 1e-3)
                self.waited_s += delay
                self._sleep(delay)


class WriteConflict(Exception):
    """409 on a write: re-read and decide again."""


class ApiCaller:
    """Runs API calls for one target (``namespace/deployment``) under the guarantees above."""

    def __init__(self, *, api_client: Any, target: str, limiter: RateLimiter, max_retries: int, backoff_s: float,
                 sleep: Callable[[float], None], rng: random.Random, api_error: Any,
                 transport_errors: tuple[type[BaseException], ...]) -> None:
        self._api = api_client
        self.target = target
        self.limiter = limiter
        self.max_retries, self.backoff_s = max_retries, backoff_s
        self._sleep, self._rng = sleep, rng
        self._api_error = api_error
        """``kubernetes.client.exceptions.ApiException``: passed in, so this module needs no client library."""
        self._transport_errors = transport_errors

    def call(self, what: str, fn: Callable[[], T], *, retries: int | None = None,
             intercept: Callable[[Any], T | None] | None = None) -> T:
        """``fn()``, throttled and retried; ``what`` ("read scale of ns/name") names the call in errors."""
        api_error = self._api_error
        limit = self.max_retries if retries is None else retries
        attempt = 0
        while True:
            self.limiter.acquire()
            retry_after: float | None = None
            last: BaseException
            try:
                return fn()
            except api_error as exc:
                status = int(exc.status or 0)
                if intercept is not None and (answer := intercept(exc)) is not None:
                    return answer
                if status == 409:
                    raise WriteConflict(what) from exc
                if status != 429 and status < 500:
                    raise PermanentError(self._permanent_message(what, status, exc)) from exc
                retry_after = self._retry_after(exc)
                last = exc
                cause = f"HTTP {status}"
            except self._transport_errors as exc:
                last, cause = exc, f"{type(exc).__name__}: {exc}"
            delay = min(MAX_BACKOFF_S, self.backoff_s * 2 ** attempt) * (0.5 + 0.5 * self._rng.random())
            delay = max(delay, retry_after or 0.0)
            if attempt >= limit:
                raise TransientError(f"{what} on {self._api.configuration.host} failed after {attempt + 1} "
                                     f"tries ({cause}); retry later", retry_after_s=delay) from last
            log.info("%s: %s, retrying in %.2f s", what, cause, delay)
            self._sleep(delay)
            attempt += 1

    def _permanent_message(self, what: str, status: int, exc: Any) -> str:
        host = self._api.configuration.host
        fixes = {401: "check the kubeconfig or service-account token",
                 403: "apply deploy/rbac.yaml: the controller's ServiceAccount lacks this permission",
                 404: f"check that deployment {self.target} exists (--namespace, --deployment)"}
        fix = fixes.get(status, "the request was rejected as invalid; report it with the message")
        message = exc.reason
        try:
            message = json.loads(exc.body or "{}").get("message", exc.reason)
        except (ValueError, AttributeError):
            pass
        return f"{what} on {host}: HTTP {status} {message} (fix: {fix})"

    @staticmethod
    def _retry_after(exc: Any) -> float | None:
        value = (exc.headers or {}).get("Retry-After")
        try:
            return max(0.0, float(value)) if value is not None else None
        except ValueError:  # an HTTP-date: fall back to our own backoff
            return None


@dataclass(frozen=True)
class KubeDeployment:
    """A Deployment as the actuator reads it."""

    replicas: int
    resource_version: str
    uid: str
    selector: str
    annotations: Mapping[str, str]


@dataclass(frozen=True)
class KubePod:
    """A pod of the Deployment as the actuator reads it."""

    name: str
    created_s: float
    ready_s: float | None
    node: str
    terminating: bool
    annotations: Mapping[str, str]
    ip: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)

    @property
    def cost(self) -> int:
        try:
            return int(self.annotations.get(DELETION_COST_ANNOTATION, "0"))
        except ValueError:
            return 0
