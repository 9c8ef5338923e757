"""One trace per decision cycle: span tree, attributes, sampling, error recording, failure isolation."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from ebb.errors import MissingExtraError, SourceUnavailable
from ebb.telemetry.logs import trace_fields
from ebb.telemetry.tracing import CycleTracer, configure_otlp, guarded_exporter
from ebb.testing.tracing import in_memory_provider


def current_trace_id() -> str | None:
    """The trace id a log line written now would carry (None outside a recording span)."""
    return trace_fields().get("trace_id")


@pytest.fixture
def memory() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    provider, exporter = in_memory_provider()
    yield provider, exporter
    provider.shutdown()


def _by_name(spans: Sequence[ReadableSpan]) -> dict[str, ReadableSpan]:
    return {s.name: s for s in spans}


def test_two_cycles_make_two_distinct_traces_even_inside_an_ambient_span(
        memory: tuple[TracerProvider, InMemorySpanExporter]) -> None:
    provider, exporter = memory
    tracer = CycleTracer(provider)
    ambient = provider.get_tracer("test").start_span("ambient")
    with trace.use_span(ambient, end_on_exit=True):
        with tracer.cycle("c1", "run", "default/llm") as first:
            pass
        with tracer.cycle("c2", "run", "default/llm") as second:
            pass
    cycles = [s for s in exporter.get_finished_spans() if s.name == "ebb.cycle"]
    assert len(cycles) == 2
    assert first.trace_id is not None and second.trace_id is not None
    assert first.trace_id != second.trace_id
    assert all(s.parent is None for s in cycles)
    assert ambient.get_span_context().trace_id not in {s.context.trace_id for s in cycles}


def test_layer_spans_are_children_of_their_cycle_with_ebb_names(
        memory: tuple[TracerProvider, InMemorySpanExporter]) -> None:
    provider, exporter = memory
    tracer = CycleTracer(provider)
    with tracer.cycle("c1", "run-1", "default/llm") as cycle:
        for layer in ("source", "l1", "l2", "l3", "gate.qos", "ledger", "actuate"):
            with cycle.layer(layer):
                pass
    spans = _by_name(exporter.get_finished_spans())
    root = spans["ebb.cycle"]
    children = {"ebb.source", "ebb.l1", "ebb.l2", "ebb.l3", "ebb.gate.qos", "ebb.ledger", "ebb.actuate"}
    assert children <= spans.keys()
    for name in children:
        assert spans[name].parent is not None
        assert spans[name].parent.span_id == root.context.span_id
        assert spans[name].context.trace_id == root.context.trace_id


def test_a_layer_opened_inside_a_layer_nests_under_it(
        memory: tuple[TracerProvider, InMemorySpanExporter]) -> None:
    provider, exporter = memory
    with CycleTracer(provider).cycle("c1", "r", "t") as cycle:
        with cycle.layer("l3"):
            with cycle.layer("gate.quota"):
                pass
    spans = _by_name(exporter.get_finished_spans())
    assert spans["ebb.gate.quota"].parent is not None
    assert spans["ebb.gate.quota"].parent.span_id == spans["ebb.l3"].context.span_id


def test_a_layer_opened_from_a_thread_without_the_context_still_joins_its_cycle(
        memory: tuple[TracerProvider, InMemorySpanExporter]) -> None:
    provider, exporter = memory
    with CycleTracer(provider).cycle("c1", "r", "t") as cycle:
        def work() -> None:
            with cycle.layer("source"):
                pass

        worker = threading.Thread(target=work)  # threads start with an empty context
        worker.start()
        worker.join(timeout=30)
    spans = _by_name(exporter.get_finished_spans())
    assert spans["ebb.source"].parent is not None
    assert spans["ebb.source"].parent.span_id == spans["ebb.cycle"].context.span_id


def test_cycle_and_layer_attributes_use_ebb_and_semantic_convention_keys(
        memory: tuple[TracerProvider, InMemorySpanExporter]) -> None:
    provider, exporter = memory
    tracer = CycleTracer(provider)
    with tracer.cycle("c7", "run-1", "prod/llama") as cycle:
        with cycle.layer("source", **{"ebb.data.staleness_s": 0.4, "server.port": 9090}):
            pass
        with cycle.layer("gate.qos", **{"ebb.gate.result": "pass"}):
            pass
        cycle.set(**{"ebb.decision.id": "d1", "ebb.decision.action": "scale_down",
                     "ebb.replicas.from": 4, "ebb.replicas.to": 3,
                     "ebb.veto.reasons": ["warming up: 3 s", "cooldown: 1 s"], "ignored": None})
    spans = _by_name(exporter.get_finished_spans())
    root = spans["ebb.cycle"].attributes or {}
    assert root["ebb.cycle.id"] == "c7"
    assert root["ebb.run.id"] == "run-1"
    assert root["k8s.namespace.name"] == "prod"
    assert root["k8s.deployment.name"] == "llama"
    assert root["ebb.replicas.from"] == 4 and root["ebb.replicas.to"] == 3
    assert root["ebb.veto.reasons"] == ("warming up: 3 s", "cooldown: 1 s")
    assert "ignored" not in root
    source = spans["ebb.source"].attributes or {}
    assert source["server.port"] == 9090
    assert source["ebb.data.staleness_s"] == 0.4
    assert (spans["ebb.gate.qos"].attributes or {})["ebb.gate.result"] == "pass"
    assert spans["ebb.cycle"].resource.attributes["service.name"] == "ebb-controller"


def test_high_cardinality_attributes_appear_on_the_sampled_fraction_only(
        memory: tuple[TracerProvider, InMemorySpanExporter]) -> None:
    provider, exporter = memory
    tracer = CycleTracer(provider, high_cardinality_sample_ratio=0.25, seed=7)
    for i in range(400):
        with tracer.cycle(f"c{i}", "r", "t") as cycle:
            cycle.set(**{"ebb.victims": ["w1", "w2"], "ebb.worker.inflight": {"w1": 3, "w2": 0},
                         "ebb.replicas.to": 2})
    roots = [s for s in exporter.get_finished_spans() if s.name == "ebb.cycle"]
    with_victims = [s for s in roots if "ebb.victims" in (s.attributes or {})]
    assert all((s.attributes or {})["ebb.replicas.to"] == 2 for s in roots)
    assert all((s.attributes or {})["ebb.high_cardinality.sampled"] for s in with_victims)
    assert all("ebb.worker.inflight" in (s.attributes or {}) for s in with_victims)
    assert 60 <= len(with_victims) <= 140  # 25 % of 400 = 100; binomial sd ≈ 8.7


def test_high_cardinality_sampling_is_a_function_of_seed_and_cycle_id() -> None:
    a = CycleTracer(high_cardinality_sample_ratio=0.5, seed=1)
    b = CycleTracer(high_cardinality_sample_ratio=0.5, seed=1)
    other = CycleTracer(high_cardinality_sample_ratio=0.5, seed=2)
    ids = [f"cycle-{i}" for i in range(64)]
    assert [a.sampled(i) for i in ids] == [b.sampled(i) for i in reversed(ids)][::-1]
    assert [a.sampled(i) for i in ids] != [other.sampled(i) for i in ids]
    assert not any(CycleTracer(high_cardinality_sample_ratio=0.0).sampled(i) for i in ids)
    assert all(CycleTracer(high_cardinality_sample_ratio=1.0).sampled(i) for i in ids)


def test_an_attribute_whose_str_raises_is_dropped_and_counted(
        memory: tuple[TracerProvider, InMemorySpanExporter]) -> None:
    provider, exporter = memory

    class Hostile:
        def __str__(self) -> str:
            raise RuntimeError("no")

    tracer = CycleTracer(provider)
    with tracer.cycle("c1", "r", "t") as cycle:
        cycle.set(**{"ebb.bad": Hostile(), "ebb.replicas.to": 2})
    root = _by_name(exporter.get_finished_spans())["ebb.cycle"].attributes or {}
    assert "ebb.bad" not in root and root["ebb.replicas.to"] == 2
    assert tracer.errors == 1


def test_a_sample_ratio_outside_zero_one_is_refused() -> None:
    with pytest.raises(ValueError, match="1.5"):
        CycleTracer(high_cardinality_sample_ratio=1.5)


def test_record_error_sets_error_status_type_and_event(
        memory: tuple[TracerProvider, InMemorySpanExporter]) -> None:
    provider, exporter = memory
    with CycleTracer(provider).cycle("c1", "r", "t") as cycle:
        cycle.record_error(SourceUnavailable("http://prom:9090 did not answer"))
    root = _by_name(exporter.get_finished_spans())["ebb.cycle"]
    assert root.status.status_code is StatusCode.ERROR
    assert (root.attributes or {})["error.type"] == "ebb.errors.SourceUnavailable"
    assert [e.name for e in root.events] == ["exception"]


def test_an_exception_in_a_layer_is_recorded_once_and_propagates(
        memory: tuple[TracerProvider, InMemorySpanExporter]) -> None:
    provider, exporter = memory
    with pytest.raises(KeyError):
        with CycleTracer(provider).cycle("c1", "r", "t") as cycle:
            with cycle.layer("ledger"):
                raise KeyError("d1")
    spans = _by_name(exporter.get_finished_spans())
    for name in ("ebb.ledger", "ebb.cycle"):
        assert spans[name].status.status_code is StatusCode.ERROR
        assert len(spans[name].events) == 1
        assert (spans[name].attributes or {})["error.type"] == "builtins.KeyError"


def test_without_an_sdk_everything_is_a_silent_no_op() -> None:
    tracer = CycleTracer(trace.NoOpTracerProvider())
    with tracer.cycle("c1", "r", "ns/dep") as cycle:
        with cycle.layer("source", **{"ebb.victims": ["w1"]}) as layer:
            layer.set(**{"ebb.replicas.to": 1})
            layer.record_error(RuntimeError("x"))
        assert current_trace_id() is None
        assert cycle.trace_id is None
    assert tracer.errors == 0


def test_the_default_provider_is_the_global_one_and_never_raises() -> None:
    with CycleTracer().cycle("c1", "r", "t") as cycle:
        cycle.set(**{"ebb.replicas.to": 1})


def test_log_lines_carry_the_cycles_32_hex_trace_id_inside_it_and_none_outside(
        memory: tuple[TracerProvider, InMemorySpanExporter]) -> None:
    provider, _ = memory
    assert current_trace_id() is None
    with CycleTracer(provider).cycle("c1", "r", "t") as cycle:
        inside = current_trace_id()
        with cycle.layer("l1"):
            assert current_trace_id() == inside
    assert inside is not None and len(inside) == 32 and int(inside, 16) > 0
    assert inside == cycle.trace_id
    assert current_trace_id() is None


class _Raising(SpanExporter):
    def __init__(self) -> None:
        self.calls = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.calls += 1
        raise ConnectionError("collector down")


class _RaisingProcessor(SimpleSpanProcessor):
    def on_end(self, span: ReadableSpan) -> None:
        raise RuntimeError("processor bug")


def test_an_exporter_that_raises_never_breaks_the_cycle_and_is_counted() -> None:
    failures: list[BaseException] = []
    raising = _Raising()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(guarded_exporter(raising, failures.append)))
    ran = []
    with CycleTracer(provider).cycle("c1", "r", "t") as cycle:
        with cycle.layer("actuate"):
            ran.append("actuate")
    provider.shutdown()
    assert ran == ["actuate"]
    assert raising.calls == 2
    assert len(failures) == 2 and all(isinstance(f, ConnectionError) for f in failures)


def test_a_span_processor_that_raises_is_swallowed_and_reported() -> None:
    failures: list[BaseException] = []
    provider = TracerProvider()
    provider.add_span_processor(_RaisingProcessor(InMemorySpanExporter()))
    tracer = CycleTracer(provider, on_error=failures.append)
    with tracer.cycle("c1", "r", "t") as cycle:
        with cycle.layer("l2"):
            pass
    provider.shutdown()
    assert tracer.errors == 2
    assert all(isinstance(f, RuntimeError) for f in failures)


def test_configure_otlp_without_the_exporter_names_the_extra_to_install() -> None:
    try:
        import opentelemetry.exporter.otlp.proto.http.trace_exporter  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("the OTLP exporter is installed here; the missing-extra path cannot be shown")
    with pytest.raises(MissingExtraError, match=r"pip install 'ebb\[otel\]'"):
        configure_otlp("http://127.0.0.1:4318")
