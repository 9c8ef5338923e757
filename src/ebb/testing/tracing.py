"""A tracer provider that keeps spans in memory: the test double of the OpenTelemetry export seam.

:func:`in_memory_provider` builds an SDK provider whose spans go, synchronously, to an
``InMemorySpanExporter``; pass it to :class:`~ebb.telemetry.tracing.CycleTracer` explicitly.
Guarantees: the global provider is never touched, every span is in ``exporter.get_finished_spans()``
as soon as its ``with`` block ends (no batching thread), and the provider carries the
``service.name`` resource as the product's providers do. Needs the ``otel`` extra.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ebb.errors import MissingExtraError
from ebb.telemetry.tracing import OTEL_INSTALL

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider as SdkTracerProvider
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

__all__ = ["in_memory_provider"]


def in_memory_provider(service_name: str = "ebb-controller"
                       ) -> tuple[SdkTracerProvider, InMemorySpanExporter]:
    """An SDK provider exporting synchronously to memory; never touches the global provider."""
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider as SdkProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    except ImportError as exc:
        raise MissingExtraError(
            f"in_memory_provider needs the OpenTelemetry SDK; install it with: {OTEL_INSTALL}") from exc
    exporter = InMemorySpanExporter()
    provider = SdkProvider(resource=Resource.create({"service.name": service_name}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter
