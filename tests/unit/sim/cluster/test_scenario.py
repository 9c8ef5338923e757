"""Cluster scenarios parse once into dataclasses; every mistake names the file, the key and the fix."""

from __future__ import annotations

import pytest

from ebb.config.scenario import parse_scenario
from ebb.errors import ConfigError

GOOD = """
name: tiny
duration_s: 600
zones: {a: 4, b: 4, c: 4}
quotas: [{namespace: shop, min_gpus: 2, max_gpus: 8}]
services:
  - {name: web, namespace: shop, class: order-fulfilment, arrivals: {bundled: azure-code},
     capacity_rps: 3, service_ms: 500, slo_ms: 2000, max_replicas: 6}
  - {name: train, namespace: lab, class: offline-training, qos: BestEffort,
     demand: {alibaba_gpu: pods.csv, time_scale: 149}}
"""


def test_a_valid_scenario_parses_with_defaults_filled_in() -> None:
    sc = parse_scenario(GOOD, source="tiny.yaml")
    web, train = sc.services
    assert (sc.name, sc.duration_s, dict(sc.zones)) == ("tiny", 600, {"a": 4, "b": 4, "c": 4})
    assert web.online and not train.online
    assert web.zones == ("a", "b", "c") and web.min_replicas == 1 and web.cold_start_s == 60.0
    assert sc.cluster.writes_per_100ms == 3 and sc.quotas[0].max_gpus == 8
    assert train.demand is not None and train.demand["path"].endswith("pods.csv")


@pytest.mark.parametrize(("change", "key"), [
    (("capacity_rps: 3", "capacity_rps: -3"), "services[0].capacity_rps"),
    (("class: order-fulfilment", "class: nope"), "services[0].class"),
    (("arrivals: {bundled: azure-code}", "arrivals: {bundled: azure-code}, demand: {alibaba_gpu: x}"), "services[0]"),
    (("zones: {a: 4, b: 4, c: 4}", "zones: {a: 0}"), "zones.a"),
    (("max_gpus: 8", "max_gpus: 1"), "quotas[0].max_gpus"),
    (("name: tiny", "name: tiny\nzonez: 1"), "zonez"),
    (("slo_ms: 2000", "slo_ms: .nan"), "services[0].slo_ms"),
])
def test_each_mistake_is_one_config_error_naming_its_key(change: tuple[str, str], key: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_scenario(GOOD.replace(*change), source="tiny.yaml")
    assert f"tiny.yaml: {key}:" in str(err.value) and "fix:" in str(err.value)


def test_broken_yaml_names_the_line() -> None:
    with pytest.raises(ConfigError, match=r"tiny.yaml: line \d+"):
        parse_scenario("zones: {a: 1\nservices: [", source="tiny.yaml")


def test_duplicate_service_names_are_refused() -> None:
    text = GOOD.replace("name: train", "name: web")
    with pytest.raises(ConfigError, match="duplicate service name 'web'"):
        parse_scenario(text, source="tiny.yaml")


def test_a_warm_up_shorter_than_the_scenario_is_read_and_a_longer_one_refused() -> None:
    assert parse_scenario(GOOD, source="tiny.yaml").warmup_s == 0
    assert parse_scenario(GOOD.replace("duration_s: 600", "duration_s: 600\nwarmup_s: 120"),
                          source="tiny.yaml").warmup_s == 120
    for bad in ("600", "-1", "1.5"):
        with pytest.raises(ConfigError) as err:
            parse_scenario(GOOD.replace("duration_s: 600", f"duration_s: 600\nwarmup_s: {bad}"), source="tiny.yaml")
        assert "tiny.yaml: warmup_s:" in str(err.value) and "below duration_s (600)" in str(err.value)
