"""KEDA's external scaler, served from Ebb's decisions (``ebb run --serve-keda ADDR``; extra ``keda``).

KEDA calls an external scaler over gRPC (``externalscaler.proto``, vendored in
:mod:`ebb.actuate.keda_pb` from kedacore/keda, Apache-2.0; its messages from the compiled descriptor). For each ScaledObject whose trigger is
``type: external`` with ``scalerAddress`` at this server, Ebb answers with the replicas it decided
for the scale target the trigger's metadata names (:mod:`ebb.decide.handoff`):

* ``GetMetricSpec`` → one metric, ``ebb-desired-replicas``, target 1 (``targetSizeFloat`` 1.0 and the
  deprecated integer ``targetSize`` 1), so with the trigger's default ``metricType: AverageValue``
  the HPA computes ``ceil(desired / 1)``: Ebb's number (outside the HPA's tolerance: see docs/keda.md).
* ``GetMetrics`` → that metric's value: the target's desired replicas.
* ``IsActive`` → ``desired > 0``: false only when Ebb would scale the target to zero.
* ``StreamIsActive`` / ``StreamMetricSpec`` (the push scaler) → the current answer at once, then one
  message per change (the spec never changes), until KEDA cancels; at most ``max_streams`` (8) open.

Matching (``scalerMetadata``): ``deployment`` (default: the ScaledObject's name), ``namespace``
(default: the ScaledObject's namespace) and, optionally, ``workloadClass``, which must equal the class
Ebb runs the target with. An unknown target is ``NOT_FOUND``, a class mismatch
``FAILED_PRECONDITION``, and a target whose data Ebb has not read for ``stale_after_s`` is
``UNAVAILABLE`` (so is every answer of a replica that is not the leader): every failure is an error KEDA counts toward the ScaledObject's ``fallback``, which
with ``behavior: currentReplicasIfHigher`` keeps the current replicas. Ebb never answers with a
number it does not hold.

Security: TLS with ``cert``/``key`` (mTLS when ``client_ca`` is given: KEDA's TriggerAuthentication
``caCert``/``tlsClientCert``/``tlsClientKey``), and an optional token: KEDA sends no call headers, so
the token travels in the trigger's metadata (``tokenFromEnv``, resolved by KEDA from the scale
target's environment, or ``token``) or, for other clients, as ``authorization: Bearer``; it is compared
in constant time, and a call without it is ``UNAUTHENTICATED``. Requests are at most 64 KiB.
"""

from __future__ import annotations

import hmac
import logging
import threading
from collections.abc import Callable, Iterator, Mapping
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from ebb.decide.handoff import HandoffBoard, HandoffReading
from ebb.actuate.keda_pb import messages
from ebb.errors import ConfigError, require_extra

__all__ = ["METRIC_NAME", "SERVICE", "KedaScalerServer", "TargetMatch", "match_target"]

log = logging.getLogger(__name__)

SERVICE: Final = "externalscaler.ExternalScaler"
"""The gRPC service KEDA calls (package ``externalscaler`` of the upstream proto)."""
METRIC_NAME: Final = "ebb-desired-replicas"
MAX_REQUEST_BYTES: Final = 64 * 1024
STREAM_POLL_S: Final = 5.0
"""A stream re-checks KEDA's cancellation and the server's stop at least this often (s)."""


@dataclass(frozen=True)
class TargetMatch:
    """What a ScaledObjectRef asks for: the scale target and, optionally, its workload class."""

    target: str
    workload_class: str | None


def match_target(name: str, namespace: str, metadata: Mapping[str, str]) -> TargetMatch:
    """The ``namespace/deployment`` a ScaledObjectRef names (module docstring: matching)."""
    deployment = metadata.get("deployment") or name
    ns = metadata.get("namespace") or namespace
    return TargetMatch(f"{ns}/{deployment}", metadata.get("workloadClass") or None)


class _Refused(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message


class KedaScalerServer:
    """The external scaler over a :class:`HandoffBoard` (module docstring). ``classes`` maps a target
    to the workload class Ebb runs it with (checked against ``workloadClass``)."""

    def __init__(self, board: HandoffBoard, *, classes: Mapping[str, str] | None = None, token: str | None = None,
                 cert_file: str | None = None, key_file: str | None = None, client_ca_file: str | None = None,
                 max_streams: int = 8, workers: int = 4) -> None:
        self._grpc = require_extra("grpc", "keda")
        self._pb = messages()
        if (cert_file is None) != (key_file is None):
            raise ConfigError("--keda-cert and --keda-key go together (fix: give both, or neither)")
        if client_ca_file is not None and cert_file is None:
            raise ConfigError("--keda-client-ca needs --keda-cert/--keda-key: mTLS is TLS first (fix: add them)")
        self.board = board
        self._classes = dict(classes or {})
        self._token = token.encode() if token else None
        self._tls = self._read_tls(cert_file, key_file, client_ca_file)
        self._streams = threading.BoundedSemaphore(max_streams)
        self._stop = threading.Event()
        self._workers = workers + max_streams  # a stream holds a worker for its life
        self._server: Any = None
        self.address = ""
        self.is_leader: Callable[[], bool] = lambda: True
        """With leader election, only the leader answers (a follower decides nothing): set to the elector's."""

    # -- lifecycle ----------------------------------------------------------------------------------
    def start(self, address: str) -> str:
        """Listen on ``address`` (``HOST:PORT``; ``:PORT`` means all interfaces); return ``host:port``."""
        grpc = self._grpc
        host, _, port = address.rpartition(":")
        if not port.isdigit():
            raise ConfigError(f"--serve-keda {address!r}: expected HOST:PORT or :PORT (fix: e.g. --serve-keda :9090)")
        bind = f"{host or '[::]'}:{port}"
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=self._workers, thread_name_prefix="keda"),
                             options=[("grpc.max_receive_message_length", MAX_REQUEST_BYTES)],
                             maximum_concurrent_rpcs=self._workers * 4)
        server.add_generic_rpc_handlers((self._handlers(),))
        try:
            bound = server.add_secure_port(bind, self._credentials()) if self._tls else server.add_insecure_port(bind)
        except RuntimeError as exc:
            raise ConfigError(f"--serve-keda {address}: cannot listen ({exc}) (fix: a free port)") from exc
        if not bound:
            raise ConfigError(f"--serve-keda {address}: cannot listen there (fix: a free port, an address of this host)")
        server.start()
        self._server = server
        self.address = f"{host or '0.0.0.0'}:{bound}"
        return self.address

    def stop(self, grace_s: float = 1.0) -> None:
        """End open streams and stop serving (at most ``grace_s`` for calls in flight)."""
        self._stop.set()
        if self._server is not None:
            self._server.stop(grace_s).wait(grace_s + 1.0)
            self._server = None

    @staticmethod
    def _read_tls(cert: str | None, key: str | None, ca: str | None) -> tuple[bytes, bytes, bytes | None] | None:
        """(key, cert, client CA) PEM bytes, read now so a bad path is refused before anything starts."""
        if cert is None or key is None:
            return None
        try:
            return Path(key).read_bytes(), Path(cert).read_bytes(), Path(ca).read_bytes() if ca else None
        except OSError as exc:
            raise ConfigError(f"--keda-cert/--keda-key/--keda-client-ca: {exc} (fix: point them at readable PEM files)"
                              ) from exc

    def _credentials(self) -> Any:
        assert self._tls is not None
        key, cert, root = self._tls
        return self._grpc.ssl_server_credentials([(key, cert)], root_certificates=root,
                                                 require_client_auth=root is not None)

    # -- the service ----------------------------------------------------------------------------------
    def _handlers(self) -> Any:
        grpc, pb = self._grpc, self._pb
        ref, req = pb.ScaledObjectRef, pb.GetMetricsRequest

        def unary(fn: Callable[[Any, Any], Any], request: Any) -> Any:
            return grpc.unary_unary_rpc_method_handler(self._guarded(fn), request_deserializer=request.FromString,
                                                       response_serializer=lambda m: m.SerializeToString())

        def stream(fn: Callable[[Any, Any], Iterator[Any]]) -> Any:
            return grpc.unary_stream_rpc_method_handler(self._guarded_stream(fn), request_deserializer=ref.FromString,
                                                        response_serializer=lambda m: m.SerializeToString())

        return grpc.method_handlers_generic_handler(SERVICE, {
            "IsActive": unary(self._is_active, ref), "GetMetricSpec": unary(self._metric_spec, ref),
            "GetMetrics": unary(self._metrics, req), "StreamIsActive": stream(self._stream_is_active),
            "StreamMetricSpec": stream(self._stream_metric_spec)})

    def _reading(self, ref: Any, context: Any) -> HandoffReading:
        """The board's numbers for the target ``ref`` names, after the token check; _Refused otherwise."""
        meta = dict(ref.scalerMetadata)
        self._authenticate(meta, context)
        if not self.is_leader():
            raise _Refused("UNAVAILABLE", "this ebb replica is not the leader; it decides nothing (fix: route the "
                           "scaler's Service to the leader, or run one replica)")
        match = match_target(ref.name, ref.namespace, meta)
        if match.workload_class is not None and (have := self._classes.get(match.target)) is not None \
                and have != match.workload_class:
            raise _Refused("FAILED_PRECONDITION", f"{match.target} runs workload class {have!r}, the trigger asks "
                           f"for {match.workload_class!r} (fix: the trigger's workloadClass)")
        reading = self.board.reading(match.target)
        if reading is None:
            if match.target not in self.board.targets():
                raise _Refused("NOT_FOUND", f"ebb does not scale {match.target} (fix: the trigger's namespace/"
                               f"deployment metadata, or run ebb for it; it scales {', '.join(self.board.targets())})")
            raise _Refused("UNAVAILABLE", f"ebb has not read {match.target} for over {self.board.stale_after_s:.0f} s; "
                           "no answer until it has (KEDA's fallback holds the replicas)")
        return reading

    def _authenticate(self, meta: Mapping[str, str], context: Any) -> None:
        if self._token is None:
            return
        given = meta.get("tokenFromEnv") or meta.get("token") or ""
        if not given:
            for key, value in context.invocation_metadata() or ():
                if key == "authorization" and value.startswith("Bearer "):
                    given = value[len("Bearer "):]
        if not hmac.compare_digest(given.encode(), self._token):
            raise _Refused("UNAUTHENTICATED", "missing or wrong token (fix: tokenFromEnv in the trigger's metadata)")

    def _is_active(self, ref: Any, context: Any) -> Any:
        return self._pb.IsActiveResponse(result=self._reading(ref, context).desired_replicas > 0)

    def _metric_spec(self, ref: Any, context: Any) -> Any:
        self._reading(ref, context)  # a spec only for a target Ebb scales, and only with the token
        return self._pb.GetMetricSpecResponse(metricSpecs=[
            self._pb.MetricSpec(metricName=METRIC_NAME, targetSize=1, targetSizeFloat=1.0)])

    def _metrics(self, request: Any, context: Any) -> Any:
        if request.metricName and request.metricName != METRIC_NAME:
            raise _Refused("NOT_FOUND", f"unknown metric {request.metricName[:80]!r} (fix: ebb serves {METRIC_NAME})")
        desired = self._reading(request.scaledObjectRef, context).desired_replicas
        return self._pb.GetMetricsResponse(metricValues=[
            self._pb.MetricValue(metricName=METRIC_NAME, metricValue=desired, metricValueFloat=float(desired))])

    def _stream_is_active(self, ref: Any, context: Any) -> Iterator[Any]:
        last: bool | None = None
        version = -1
        while not self._stop.is_set() and context.is_active():
            active = self._reading(ref, context).desired_replicas > 0
            if active != last:
                last = active
                yield self._pb.IsActiveResponse(result=active)
            version = self.board.wait_change(version, STREAM_POLL_S)

    def _stream_metric_spec(self, ref: Any, context: Any) -> Iterator[Any]:
        yield self._metric_spec(ref, context)  # the spec is constant: sent once, the stream kept open
        while not self._stop.is_set() and context.is_active():
            self._stop.wait(STREAM_POLL_S)

    # -- errors as gRPC status codes --------------------------------------------------------------------
    def _guarded(self, fn: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
        def call(request: Any, context: Any) -> Any:
            try:
                return fn(request, context)
            except _Refused as r:
                context.abort(getattr(self._grpc.StatusCode, r.code), r.message)
            except Exception as exc:  # a bug must not take the server down; KEDA's fallback covers the call
                log.exception("KEDA scaler call failed: %s", exc)
                context.abort(self._grpc.StatusCode.INTERNAL, f"ebb: {type(exc).__name__}")
        return call

    def _guarded_stream(self, fn: Callable[[Any, Any], Iterator[Any]]) -> Callable[[Any, Any], Iterator[Any]]:
        def call(request: Any, context: Any) -> Iterator[Any]:
            if not self._streams.acquire(blocking=False):
                context.abort(self._grpc.StatusCode.RESOURCE_EXHAUSTED, "ebb: too many open streams (fix: poll)")
            try:
                yield from fn(request, context)
            except _Refused as r:
                context.abort(getattr(self._grpc.StatusCode, r.code), r.message)
            finally:
                self._streams.release()
        return call
