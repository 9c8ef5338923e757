"""A scenario becomes the engine's arrays through the series reader it is handed (no file is read here)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from ebb.config.scenario import Scenario, ServiceSpec, parse_scenario
from ebb.errors import InputError
from ebb.sim.cluster.inputs import build_inputs, expand_services

SCENARIO = """
name: tiny
duration_s: 120
zones: {a: 4, b: 4}
quotas: [{namespace: shop, min_gpus: 2, max_gpus: 8}, {namespace: idle, min_gpus: 1}]
services:
  - {name: web, namespace: shop, class: order-fulfilment, arrivals: {bundled: azure-code},
     capacity_rps: 2, service_ms: 500, slo_ms: 2000, min_replicas: 1, max_replicas: 6, zones: [a]}
  - {name: burst, namespace: shop, class: order-fulfilment, qos: Burstable, arrivals: {bundled: azure-conv},
     capacity_rps: 1, max_replicas: 3, cold_start_s: 30.4}
  - {name: train, namespace: lab, class: offline-training, qos: BestEffort, priority: -1,
     demand: {alibaba_gpu: pods.csv}}
"""


class FakeSeries:
    """Constant arrivals per service (10, 20, ... per second) and 2.5 GPUs of demand; records the calls."""

    def __init__(self, clients: tuple[int, ...] = (), rate: int = 10) -> None:
        self.clients = clients
        self.rate = rate
        self.asked: list[tuple[str, int]] = []

    def client_ids(self, path: str, clients: int | Sequence[int]) -> tuple[int, ...]:
        return self.clients

    def arrivals(self, sc: Scenario, online: Sequence[ServiceSpec], seconds: int) -> np.ndarray:
        self.asked += [(s.name, seconds) for s in online]
        return np.repeat((np.arange(len(online), dtype=np.int32)[:, None] + 1) * self.rate, seconds, axis=1)

    def demand(self, service: ServiceSpec, seconds: int) -> np.ndarray:
        self.asked.append((service.name, seconds))
        return np.full(seconds, 2.5)


def test_online_and_batch_services_get_their_series_for_the_whole_duration() -> None:
    series = FakeSeries()
    inp = build_inputs(parse_scenario(SCENARIO, source="tiny.yaml"), series)
    assert series.asked == [("web", 120), ("burst", 120), ("train", 120)]
    assert inp.names == ("web", "burst") and inp.batch_names == ("train",)
    assert inp.arrivals.shape == (2, 120) and inp.batch_demand.shape == (1, 120)
    assert float(inp.batch_demand.sum()) == 2.5 * 120 and inp.seconds == 120


def test_namespaces_quotas_zones_and_borrowing_follow_the_scenario() -> None:
    inp = build_inputs(parse_scenario(SCENARIO, source="tiny.yaml"), FakeSeries())
    assert inp.namespace_names == ("idle", "lab", "shop")  # every service's and every quota's, sorted
    assert inp.quota_min.tolist() == [1, 0, 2] and inp.quota_max.tolist() == [-1, -1, 8]
    assert inp.zone_mask.tolist() == [[True, False], [True, True]] and inp.zone_gpus.tolist() == [4, 4]
    # the note's QuotaPolicy: only Guaranteed pods may borrow
    assert inp.may_borrow.tolist() == [True, False] and inp.batch_may_borrow.tolist() == [False]
    assert inp.cold_start_s.tolist() == [60, 30] and inp.batch_priority.tolist() == [-1]


def test_each_service_starts_at_what_its_first_minute_needs_at_seventy_percent_within_its_bounds() -> None:
    inp = build_inputs(parse_scenario(SCENARIO, source="tiny.yaml"), FakeSeries())
    # web: 10 rps / 2 rps per replica / 0.7 = 7.1 -> 8, capped at max 6; burst: 20 / 1 / 0.7 -> 29, capped at 3
    assert inp.initial.tolist() == [6, 3]
    quiet = build_inputs(parse_scenario(SCENARIO, source="tiny.yaml"), FakeSeries(rate=0))
    assert quiet.initial.tolist() == [1, 1]  # no arrivals: at least one replica each


def test_generated_services_are_one_per_client_named_by_their_pattern() -> None:
    text = SCENARIO + """
generate:
  - {servegen: language/m-mid, clients: 2, namespace: "tenants-{i}", name: "mmid-{client}",
     class: realtime-recommendation, capacity_rps: 1}
"""
    sc = parse_scenario(text, source="tiny.yaml")
    services = expand_services(sc, FakeSeries(clients=(7, 3)))
    extra = [s for s in services if s.name.startswith("mmid-")]
    assert [(s.name, s.namespace) for s in extra] == [("mmid-7", "tenants-0"), ("mmid-3", "tenants-1")]
    assert all(s.arrivals is not None and s.arrivals["kind"] == "servegen" for s in extra)


def test_doubled_braces_in_a_generated_name_are_literal_braces() -> None:
    text = SCENARIO + """
generate:
  - {servegen: language/m-mid, clients: 1, name: "mmid-{{x}}-{client}", class: realtime-recommendation,
     capacity_rps: 1}
"""
    services = expand_services(parse_scenario(text, source="tiny.yaml"), FakeSeries(clients=(7,)))
    assert [s.name for s in services if s.name.startswith("mmid-")] == ["mmid-{x}-7"]


def test_two_services_of_one_name_are_refused_naming_the_scenario() -> None:
    text = SCENARIO + "generate:\n  - {servegen: m, clients: 2, name: same, class: order-fulfilment}\n"
    with pytest.raises(InputError, match="two services are named 'same'") as exc:
        expand_services(parse_scenario(text, source="tiny.yaml"), FakeSeries(clients=(1, 2)))
    assert "tiny.yaml" in str(exc.value) and "{client}" in str(exc.value)
