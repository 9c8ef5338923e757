"""Structured logs: JSON lines with the cycle's trace id, human mode, idempotent configuration."""

from __future__ import annotations

import io
import json
import logging
import re
from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import TracerProvider

from ebb.telemetry.logs import configure_logging
from ebb.telemetry.tracing import CycleTracer
from ebb.testing.tracing import in_memory_provider


@pytest.fixture(autouse=True)
def restore_root_logger() -> Iterator[None]:
    """Remove the handler configure_logging installs (and only it) and restore the root level."""
    root = logging.getLogger()
    level = root.level
    yield
    for handler in list(root.handlers):
        if getattr(handler, "_ebb_telemetry_handler", False):
            root.removeHandler(handler)
            handler.close()
    root.setLevel(level)


@pytest.fixture
def provider() -> Iterator[TracerProvider]:
    provider, _ = in_memory_provider()
    yield provider
    provider.shutdown()


def _lines(stream: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_a_json_line_carries_the_trace_id_inside_a_cycle_and_not_outside(
        provider: TracerProvider) -> None:
    stream = io.StringIO()
    configure_logging(stream=stream)
    log = logging.getLogger("ebb.live.test")
    log.info("before")
    with CycleTracer(provider).cycle("c1", "r", "t") as cycle:
        log.info("inside %s", "cycle")
        with cycle.layer("l1") as layer:
            log.info("in layer")
    log.info("after")
    before, inside, in_layer, after = _lines(stream)
    assert "trace_id" not in before and "trace_id" not in after
    assert inside["trace_id"] == cycle.trace_id == in_layer["trace_id"]
    assert in_layer["span_id"] == format(layer.span.get_span_context().span_id, "016x")
    assert inside["msg"] == "inside cycle"
    assert inside["level"] == "INFO" and inside["logger"] == "ebb.live.test"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", str(inside["ts"]))


def test_extras_are_fields_and_unserialisable_ones_are_written_as_repr() -> None:
    stream = io.StringIO()
    configure_logging(stream=stream)

    class Opaque:
        def __repr__(self) -> str:
            return "<Opaque>"

    circular: dict[str, object] = {}
    circular["self"] = circular
    logging.getLogger("ebb").warning("x", extra={
        "replicas_to": 3, "obj": Opaque(), "ratio": float("nan"), "keys": {(1, 2): "tuple key"},
        "circular": circular})
    (line,) = _lines(stream)
    assert line["replicas_to"] == 3
    assert line["obj"] == "<Opaque>"
    assert line["ratio"] == "nan"
    assert line["keys"] == {"(1, 2)": "tuple key"}
    assert "circular" in line


def test_an_exception_adds_its_type_and_traceback() -> None:
    stream = io.StringIO()
    configure_logging(stream=stream)
    try:
        raise ValueError("bad")
    except ValueError:
        logging.getLogger("ebb").exception("failed")
    (line,) = _lines(stream)
    assert line["error.type"] == "ValueError"
    assert "ValueError: bad" in str(line["exc"])


def test_configuring_twice_keeps_one_handler_and_applies_the_second_settings() -> None:
    first, second = io.StringIO(), io.StringIO()
    before = len(logging.getLogger().handlers)
    configure_logging(stream=first)
    configure_logging(level="DEBUG", json=False, stream=second)
    assert len(logging.getLogger().handlers) == before + 1
    logging.getLogger("ebb").debug("once")
    assert first.getvalue() == ""
    assert second.getvalue().count("once") == 1
    assert "{" not in second.getvalue()


def test_human_lines_append_the_trace_id_only_inside_a_span(provider: TracerProvider) -> None:
    stream = io.StringIO()
    configure_logging(json=False, stream=stream)
    log = logging.getLogger("ebb.human")
    log.info("outside")
    with CycleTracer(provider).cycle("c1", "r", "t") as cycle:
        log.info("inside")
    outside, inside = stream.getvalue().splitlines()
    assert "trace=" not in outside and outside.endswith("INFO ebb.human: outside")
    assert inside.endswith(f"INFO ebb.human: inside trace={cycle.trace_id}")


def test_reconfiguring_after_the_old_stream_was_closed_does_not_raise() -> None:
    old = io.StringIO()
    handler = configure_logging(stream=old)
    old.close()
    new = io.StringIO()
    try:
        assert configure_logging(stream=new) is handler
        logging.getLogger("ebb.test").warning("still logging")
        assert "still logging" in new.getvalue()
    finally:
        logging.getLogger().removeHandler(handler)
