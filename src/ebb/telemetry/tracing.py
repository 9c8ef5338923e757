"""One OpenTelemetry trace per decision cycle, a child span per layer and gate.

Span tree of one cycle (``docs/telemetry.md`` has the attribute table)::

    ebb.cycle                      root of a NEW trace every cycle (never parented to an ambient span)
    ├── ebb.source                 reading the signal source
    ├── ebb.l1 / ebb.l2 / ebb.l3   the policy's layers
    ├── ebb.gate.<name>            ebb.gate.result
    ├── ebb.ledger                 appending the decision
    └── ebb.actuate                ebb.replicas.from, ebb.replicas.to

Tests record spans with :func:`ebb.testing.tracing.in_memory_provider`.

Guarantees:

* **Telemetry never changes behaviour.** Every call into OpenTelemetry is guarded: a span processor
  or exporter that raises is swallowed, counted in :attr:`CycleTracer.errors` and passed to
  ``on_error``; the code inside ``with`` blocks runs exactly as without tracing. Exceptions raised
  by that code are recorded on the span (status ERROR, ``error.type``, an exception event) and
  propagate unchanged.
* **Cheap when off.** Without an SDK the API's default provider hands out non-recording spans;
  attributes are then not even converted (one ``is_recording()`` check per call).
* **High-cardinality attributes are sampled.** Keys in :data:`HIGH_CARDINALITY_KEYS` or under
  ``ebb.worker.`` (victim lists, per-replica ids, per-worker values) are attached only on cycles
  chosen with probability ``high_cardinality_sample_ratio`` (default 0.1). With ``seed`` set the
  choice is a hash of ``(seed, cycle_id)``: the same cycle id always gets the same answer, whatever
  the order of cycles or a restart; without it the choice is random. The root span says which
  (``ebb.high_cardinality.sampled``).
"""

from __future__ import annotations

import hashlib
import random
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Final, TypeVar, cast
from urllib.parse import urlsplit

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer, TracerProvider
from opentelemetry.util.types import AttributeValue

from ebb.errors import MissingExtraError, require_extra

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.sdk.trace import TracerProvider as SdkTracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter

__all__ = [
    "CycleSpan", "CycleTracer", "HIGH_CARDINALITY_KEYS", "LayerSpan", "configure_otlp",
    "guarded_exporter", "local_provider",
]

OTEL_INSTALL: Final = "pip install 'ebb[otel]'"
_T = TypeVar("_T")

# Ebb's own attribute keys (``ebb.*``); semantic-convention keys are spelled inline where used.
CYCLE_ID: Final = "ebb.cycle.id"
RUN_ID: Final = "ebb.run.id"
TARGET: Final = "ebb.target"
DECISION_ID: Final = "ebb.decision.id"
DECISION_ACTION: Final = "ebb.decision.action"
REPLICAS_FROM: Final = "ebb.replicas.from"
REPLICAS_TO: Final = "ebb.replicas.to"
VETO_REASONS: Final = "ebb.veto.reasons"
GATE_RESULT: Final = "ebb.gate.result"
DATA_STALENESS_S: Final = "ebb.data.staleness_s"
HC_SAMPLED: Final = "ebb.high_cardinality.sampled"
VICTIMS: Final = "ebb.victims"
REPLICA_NAMES: Final = "ebb.replica.names"
REPLICA_IDS: Final = "ebb.replica.ids"

HIGH_CARDINALITY_KEYS: Final = frozenset({VICTIMS, REPLICA_NAMES, REPLICA_IDS})
"""Keys attached only on sampled cycles (plus every key starting with ``ebb.worker.``)."""
_HC_PREFIX: Final = "ebb.worker."


def _is_high_cardinality(key: str) -> bool:
    return key in HIGH_CARDINALITY_KEYS or key.startswith(_HC_PREFIX)


def _coerce(value: object) -> AttributeValue | None:
    """An OTel-legal attribute value (primitive or homogeneous sequence); None drops the key."""
    if value is None:
        return None
    if isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, Mapping):
        # Per-worker maps become "name=value" strings: OTel has no map-valued attributes.
        return tuple(f"{k}={v}" for k, v in value.items())
    if isinstance(value, Sequence) and not isinstance(value, (bytes, bytearray)):
        items = list(value)
        for kind in (bool, int, float):
            if items and all(type(i) is kind for i in items):
                return tuple(items)
        return tuple(str(i) for i in items)
    return str(value)


def _ids(span: Span) -> tuple[str, str] | None:
    ctx = span.get_span_context()
    if not ctx.is_valid:
        return None
    return trace.format_trace_id(ctx.trace_id), trace.format_span_id(ctx.span_id)


class LayerSpan:
    """One span (a layer, a gate, or the cycle itself); every method is safe to call and never raises."""

    def __init__(self, span: Span, owner: CycleTracer, sampled: bool) -> None:
        self.span = span
        self._owner = owner
        self._sampled = sampled
        self._error_recorded = False

    @property
    def trace_id(self) -> str | None:
        ids = _ids(self.span)
        return None if ids is None else ids[0]

    def set(self, **attrs: object) -> None:
        """Set attributes (keys verbatim: ``set(**{"ebb.replicas.to": 3})``); None values are skipped."""
        if not self._owner._guard(self.span.is_recording):
            return
        clean: dict[str, AttributeValue] = {}
        for key, value in attrs.items():
            if _is_high_cardinality(key) and not self._sampled:
                continue
            coerced = self._owner._guard(lambda: _coerce(value))  # a __str__ may raise
            if coerced is not None:
                clean[key] = coerced
        if clean:
            self._owner._guard(lambda: self.span.set_attributes(clean))

    def record_error(self, exc: BaseException) -> None:
        """Status ERROR, ``error.type`` and an exception event; re-raising is the caller's job."""
        self._error_recorded = True
        error_type = f"{type(exc).__module__}.{type(exc).__qualname__}"

        def record() -> None:
            self.span.set_attribute("error.type", error_type)
            self.span.record_exception(exc)
            self.span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))

        self._owner._guard(record)


class CycleSpan(LayerSpan):
    """The root span of one cycle; :meth:`layer` opens its children."""

    @contextmanager
    def layer(self, name: str, **attrs: object) -> Iterator[LayerSpan]:
        """A child span ``ebb.<name>`` (``source``, ``l1``, ``gate.qos``...; an ``ebb.`` prefix is kept).

        Parented to the innermost open span of this cycle, or to the cycle span when the current
        context belongs elsewhere (a worker thread that did not inherit the context).
        """
        full = name if name.startswith("ebb.") else f"ebb.{name}"
        current = trace.get_current_span()
        mine = self.span.get_span_context()
        theirs = current.get_span_context()
        nested = mine.is_valid and theirs.is_valid and theirs.trace_id == mine.trace_id
        parent = trace.set_span_in_context(current if nested else self.span)
        with self._owner._open(full, parent, self._sampled) as child:
            child.set(**attrs)
            yield child


class CycleTracer:
    """Opens one trace per decision cycle on ``tracer_provider`` (default: the global one, a no-op
    until an SDK is configured). ``service_name`` names the instrumentation scope; providers built
    by this module also carry it as the ``service.name`` resource."""

    def __init__(self, tracer_provider: TracerProvider | None = None, *,
                 service_name: str = "ebb-controller", high_cardinality_sample_ratio: float = 0.1,
                 seed: int | None = None,
                 on_error: Callable[[BaseException], None] | None = None) -> None:
        if not 0.0 <= high_cardinality_sample_ratio <= 1.0:
            raise ValueError(
                f"high_cardinality_sample_ratio must be in [0, 1], got {high_cardinality_sample_ratio!r}")
        provider = tracer_provider if tracer_provider is not None else trace.get_tracer_provider()
        self.service_name = service_name
        self._tracer: Tracer = provider.get_tracer(service_name)
        self._ratio = high_cardinality_sample_ratio
        self._seed = seed
        self._rng = random.Random()
        self._on_error = on_error
        self._lock = threading.Lock()
        self.errors = 0
        """Telemetry failures swallowed so far (a raising processor/exporter, a bad attribute)."""

    def _guard(self, call: Callable[[], _T]) -> _T | None:
        try:
            return call()
        except Exception as exc:  # telemetry must never break the loop: count and go on
            with self._lock:
                self.errors += 1
            if self._on_error is not None:
                try:
                    self._on_error(exc)
                except Exception:
                    pass  # an error hook that fails has nowhere left to report to
            return None

    def sampled(self, cycle_id: str) -> bool:
        """Whether ``cycle_id`` gets high-cardinality attributes (deterministic when ``seed`` is set)."""
        if self._ratio >= 1.0:
            return True
        if self._ratio <= 0.0:
            return False
        if self._seed is None:
            with self._lock:
                return self._rng.random() < self._ratio
        digest = hashlib.sha256(f"{self._seed}\x00{cycle_id}".encode()).digest()
        return int.from_bytes(digest[:8], "big") / 2.0**64 < self._ratio

    @contextmanager
    def _open(self, name: str, parent: otel_context.Context, sampled: bool,
              span_type: type[LayerSpan] = LayerSpan) -> Iterator[LayerSpan]:
        span = self._guard(lambda: self._tracer.start_span(name, context=parent, kind=SpanKind.INTERNAL))
        if span is None:
            span = trace.INVALID_SPAN
        wrapped = span_type(span, self, sampled)
        token = self._guard(lambda: otel_context.attach(trace.set_span_in_context(span)))
        try:
            yield wrapped
        except Exception as exc:
            if not wrapped._error_recorded:
                wrapped.record_error(exc)
            raise
        finally:
            if token is not None:
                self._guard(lambda: otel_context.detach(token))
            self._guard(span.end)

    @contextmanager
    def cycle(self, cycle_id: str, run_id: str, target: str) -> Iterator[CycleSpan]:
        """The root span ``ebb.cycle`` of a new trace; ``target`` ``ns/deployment`` adds the k8s keys."""
        sampled = self.sampled(cycle_id)
        # An empty context: the cycle never joins whatever trace happens to be current.
        with self._open("ebb.cycle", otel_context.Context(), sampled, CycleSpan) as opened:
            root = cast(CycleSpan, opened)
            attrs: dict[str, object] = {CYCLE_ID: cycle_id, RUN_ID: run_id, TARGET: target,
                                        HC_SAMPLED: sampled}
            namespace, sep, deployment = target.partition("/")
            if sep and namespace and deployment and "/" not in deployment:
                attrs["k8s.namespace.name"] = namespace
                attrs["k8s.deployment.name"] = deployment
            root.set(**attrs)
            yield root


def local_provider(service_name: str = "ebb-controller") -> SdkTracerProvider | None:
    """An SDK provider that records spans but exports nothing, or None without the SDK.

    With it every cycle has real trace and span ids, so log lines can be correlated by trace id
    even when no collector is configured; without the SDK (no ``otel`` extra) tracing stays the
    API's no-op and log lines carry no trace id."""
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider as SdkProvider
    except ImportError:
        return None
    return SdkProvider(resource=Resource.create({"service.name": service_name}))


def guarded_exporter(exporter: SpanExporter, on_error: Callable[[BaseException], None] | None
                     ) -> SpanExporter:
    """Wrap ``exporter`` so an export that raises or fails returns FAILURE and reports to ``on_error``.

    The SDK's processors already catch exporter exceptions (and log them); this wrapper is how the
    failures get counted (``EbbMetrics.telemetry_error``) instead of only logged.
    """
    try:
        from opentelemetry.sdk.trace.export import SpanExporter as SdkExporter
        from opentelemetry.sdk.trace.export import SpanExportResult
    except ImportError as exc:
        raise MissingExtraError(
            f"guarded_exporter needs the OpenTelemetry SDK; install it with: {OTEL_INSTALL}") from exc

    def report(exc: BaseException) -> None:
        if on_error is not None:
            try:
                on_error(exc)
            except Exception:
                pass  # the error hook itself failed: nothing left to report to

    class Guarded(SdkExporter):
        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            try:
                result = exporter.export(spans)
            except Exception as exc:
                report(exc)
                return SpanExportResult.FAILURE
            if result is not SpanExportResult.SUCCESS:
                report(RuntimeError(f"span exporter {type(exporter).__name__} failed to export "
                                    f"{len(spans)} span(s); check the collector is reachable"))
            return result

        def shutdown(self) -> None:
            try:
                exporter.shutdown()
            except Exception as exc:
                report(exc)

        def force_flush(self, timeout_millis: int = 30000) -> bool:
            try:
                return exporter.force_flush(timeout_millis)
            except Exception as exc:
                report(exc)
                return False

    return Guarded()


def configure_otlp(endpoint: str, *, service_name: str = "ebb-controller", set_global: bool = False,
                   on_error: Callable[[BaseException], None] | None = None) -> SdkTracerProvider:
    """An SDK provider batching spans to the OTLP/HTTP collector at ``endpoint``.

    ``endpoint`` is the collector's base URL (``http://collector:4318``; ``/v1/traces`` is added
    unless a path is given). Export failures go to ``on_error`` (see :func:`guarded_exporter`).
    Spans are exported from a background thread (queue of 2048, dropped
    when full), so a slow or dead collector never blocks a cycle. ``set_global`` also installs it
    as the process-wide provider (possible once per process). Raises
    :class:`~ebb.errors.MissingExtraError` when the ``otel`` extra is not installed.
    """
    exporter_mod = require_extra("opentelemetry.exporter.otlp.proto.http.trace_exporter", "otel")
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider as SdkProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError as exc:
        raise MissingExtraError(
            f"configure_otlp needs the OpenTelemetry SDK; install it with: {OTEL_INSTALL}") from exc
    url = endpoint.rstrip("/")
    if urlsplit(url).path in ("", "/"):
        url += "/v1/traces"
    exporter: SpanExporter = exporter_mod.OTLPSpanExporter(endpoint=url)
    provider = SdkProvider(resource=Resource.create({"service.name": service_name}))
    provider.add_span_processor(BatchSpanProcessor(guarded_exporter(exporter, on_error)))
    if set_global:
        trace.set_tracer_provider(provider)
    return provider
