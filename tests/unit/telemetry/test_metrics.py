"""Ebb's own Prometheus metrics: names, bounded labels, error swallowing, the served endpoint."""

from __future__ import annotations

import math
import urllib.request
from collections.abc import Iterator

import pytest
from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from ebb.telemetry.metrics import MAX_LABEL_VALUES, EbbMetrics, veto_key


@pytest.fixture
def metrics() -> Iterator[EbbMetrics]:
    m = EbbMetrics()
    yield m
    m.stop()


def _samples(m: EbbMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(m.exposition().decode()):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_the_exposition_contains_every_metric(metrics: EbbMetrics) -> None:
    metrics.cycle("ok", duration_s=0.02)
    metrics.decision("scale_down")
    metrics.decision("veto", veto_reasons=["warming up: 3 s of history < 30 s"])
    metrics.gate_result("qos", "pass")
    metrics.compensation(1.5)
    metrics.staleness(0.3)
    metrics.set_leader(True)
    metrics.ledger_write_error()
    text = metrics.exposition().decode()
    for name in ("ebb_cycles_total", "ebb_decisions_total", "ebb_vetoes_total",
                 "ebb_gate_results_total", "ebb_compensation_seconds", "ebb_data_staleness_seconds",
                 "ebb_cycle_duration_seconds", "ebb_leader", "ebb_ledger_write_errors_total",
                 "ebb_telemetry_errors_total"):
        assert f"# TYPE {name} " in text, name
    s = _samples(metrics)
    assert s[("ebb_cycles_total", (("result", "ok"),))] == 1
    assert s[("ebb_cycles_total", (("result", "error"),))] == 0  # pre-created so rate() works
    assert s[("ebb_decisions_total", (("action", "veto"),))] == 1
    assert s[("ebb_vetoes_total", (("reason", "warming up"),))] == 1
    assert s[("ebb_gate_results_total", (("gate", "qos"), ("result", "pass")))] == 1
    assert s[("ebb_compensation_seconds_count", ())] == 1
    assert s[("ebb_data_staleness_seconds", ())] == 0.3
    assert s[("ebb_leader", ())] == 1
    assert s[("ebb_ledger_write_errors_total", ())] == 1


def test_compensations_are_counted_by_result_from_zero(metrics: EbbMetrics) -> None:
    assert _samples(metrics)[("ebb_compensations_total", (("result", "review"),))] == 0
    metrics.compensation_result("compensated")
    metrics.compensation_result("vanished")
    s = _samples(metrics)
    assert s[("ebb_compensations_total", (("result", "compensated"),))] == 1
    assert s[("ebb_compensations_total", (("result", "other"),))] == 1
    assert s[("ebb_telemetry_errors_total", (("where", "compensation_result"),))] == 1


def test_staleness_is_unknown_until_the_first_cycle_reports_it(metrics: EbbMetrics) -> None:
    assert math.isnan(metrics.registry.get_sample_value("ebb_data_staleness_seconds") or 0.0)


def test_observe_cycle_maps_the_controller_outcome_to_a_result(metrics: EbbMetrics) -> None:
    metrics.observe_cycle("scale_down", 0.01, 0.5)
    metrics.observe_cycle("follower", 0.002, None)
    metrics.observe_cycle("error", 0.003, 2.0)
    s = _samples(metrics)
    assert s[("ebb_cycles_total", (("result", "ok"),))] == 1
    assert s[("ebb_cycles_total", (("result", "skipped"),))] == 1
    assert s[("ebb_cycles_total", (("result", "error"),))] == 1
    assert s[("ebb_cycle_duration_seconds_count", ())] == 3
    assert s[("ebb_data_staleness_seconds", ())] == 2.0


def test_the_global_registry_is_never_used() -> None:
    EbbMetrics()
    EbbMetrics()  # a second instance would collide on a shared registry
    assert REGISTRY.get_sample_value("ebb_leader") is None


def test_an_explicit_registry_receives_the_metrics() -> None:
    registry = CollectorRegistry()
    EbbMetrics(registry).set_leader(True)
    assert registry.get_sample_value("ebb_leader") == 1


def test_veto_key_is_the_text_before_the_first_colon() -> None:
    assert veto_key("cooldown: 12 s since the last scale-up < 60 s") == "cooldown"
    assert veto_key("stale data") == "stale data"
    assert veto_key(": nothing") == "other"


def test_veto_reasons_beyond_the_bound_are_counted_as_other(metrics: EbbMetrics) -> None:
    reasons = [f"reason {i}: detail {i}" for i in range(MAX_LABEL_VALUES + 5)]
    metrics.vetoes(reasons)
    metrics.vetoes(["reason 0: again"])
    s = _samples(metrics)
    labels = {dict(k[1])["reason"] for k in s if k[0] == "ebb_vetoes_total"}
    assert len(labels) == MAX_LABEL_VALUES + 1
    assert s[("ebb_vetoes_total", (("reason", "other"),))] == 5
    assert s[("ebb_vetoes_total", (("reason", "reason 0"),))] == 2


def test_unknown_results_and_actions_count_as_other_and_as_a_telemetry_error(
        metrics: EbbMetrics) -> None:
    metrics.cycle("exploded")
    metrics.decision("teleport")
    s = _samples(metrics)
    assert s[("ebb_cycles_total", (("result", "other"),))] == 1
    assert s[("ebb_decisions_total", (("action", "other"),))] == 1
    assert s[("ebb_telemetry_errors_total", (("where", "cycle"),))] == 1
    assert s[("ebb_telemetry_errors_total", (("where", "decision"),))] == 1


def test_a_failing_metric_call_is_swallowed_and_counted(metrics: EbbMetrics) -> None:
    metrics.staleness("not a number")  # type: ignore[arg-type]
    metrics.vetoes(None)  # type: ignore[arg-type]
    s = _samples(metrics)
    assert s[("ebb_telemetry_errors_total", (("where", "staleness"),))] == 1
    assert s[("ebb_telemetry_errors_total", (("where", "vetoes"),))] == 1


def test_the_served_endpoint_answers_with_the_exposition(metrics: EbbMetrics) -> None:
    metrics.set_leader(True)
    url = metrics.serve()
    assert url.startswith("http://127.0.0.1:") and url.endswith("/metrics")
    assert metrics.serve() == url
    with urllib.request.urlopen(url, timeout=10) as response:
        body = response.read().decode()
    assert "ebb_leader 1.0" in body
    metrics.stop()
    metrics.stop()


def test_a_port_that_cannot_be_bound_is_reported_not_raised(metrics: EbbMetrics) -> None:
    url = metrics.serve()
    port = int(url.split(":")[2].split("/")[0])
    other = EbbMetrics()
    assert other.serve(port) == ""
    assert other.registry.get_sample_value("ebb_telemetry_errors_total", {"where": "serve"}) == 1
