"""Fleet files (``ebb run --workloads``): parsed once into frozen dataclasses, every error one line
naming the file and the key path."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from ebb.config.fleet import (
    ClusterLimits,
    FleetConfig,
    is_fleet_document,
    load_fleet,
    parse_fleet,
)
from ebb.errors import ConfigError

FLEET = """\
workloads:
  - {namespace: shop, deployment: checkout, class: order-fulfilment, min_replicas: 2, max_replicas: 16,
     zones: [zone-a, zone-b], priority: 1000, agents: [http://10.0.0.7:9401]}
  - {namespace: shop, deployment: recs, class: realtime-recommendation, slo_ttft_ms: 500, gpus_per_replica: 0.5}
  - {namespace: research, deployment: train, class: offline-training, policy: "ebb:profile=cautious",
     prometheus_selector: 'namespace="research"'}
quotas:
  - {namespace: shop, min_gpus: 4, max_gpus: 12}
  - {namespace: research, max_gpus: 8}
cluster: {disruption_budget: 2, writes_per_100ms: 3}
"""


def test_a_fleet_file_parses_into_frozen_records() -> None:
    cfg = parse_fleet(FLEET, "fleet.yaml")
    assert isinstance(cfg, FleetConfig) and cfg.source == "fleet.yaml"
    co, recs, train = cfg.workloads
    assert co.target == "shop/checkout" and co.workload_class.name == "order-fulfilment"
    assert (co.min_replicas, co.max_replicas, co.zones, co.priority) == (2, 16, ("zone-a", "zone-b"), 1000)
    assert co.agents == ("http://10.0.0.7:9401",) and co.gpu_milli_per_replica == 1000
    assert recs.gpu_milli_per_replica == 500 and recs.max_replicas == 64
    assert train.policy == "ebb:profile=cautious" and train.prometheus_selector == 'namespace="research"'
    assert cfg.quota("shop") is not None and cfg.quota("shop").min_milli == 4000  # type: ignore[union-attr]
    assert cfg.quota("research").max_milli == 8000 and cfg.quota("research").min_milli == 0  # type: ignore[union-attr]
    assert cfg.cluster == ClusterLimits(2, 3)
    with pytest.raises(dataclasses.FrozenInstanceError):
        co.min_replicas = 3  # type: ignore[misc]


def test_the_ttft_slo_is_the_workloads_then_the_classs_then_the_default() -> None:
    co, recs, train = parse_fleet(FLEET).workloads
    assert co.ttft_slo_ms(2000) == 800  # order-fulfilment: P99 < 800 ms
    assert recs.ttft_slo_ms(2000) == 500  # given
    assert train.ttft_slo_ms(2000) == 2000  # offline training has no latency SLO


def test_defaults_one_replica_budget_and_the_notes_write_bound() -> None:
    cfg = parse_fleet("workloads: [{namespace: a, deployment: b, class: offline-training}]")
    assert cfg.cluster == ClusterLimits(1, 3) and cfg.quotas == ()
    assert [c.name for c in cfg.classes] == ["order-fulfilment", "realtime-recommendation", "offline-training"]


def test_classes_may_be_defined_in_the_fleet_file() -> None:
    cfg = parse_fleet("classes: [{name: batch, base_weight: 0.05, alpha: 0.1}]\n"
                      "workloads: [{namespace: a, deployment: b, class: batch}]")
    assert cfg.workloads[0].workload_class.base_weight == 0.05


def test_a_classes_file_is_not_a_fleet_file() -> None:
    assert is_fleet_document({"workloads": []}) and not is_fleet_document({"classes": []})


@pytest.mark.parametrize(("text", "key"), [
    ("workloads: []", "workloads"),
    ("workloads: [{namespace: a, deployment: b}]", "workloads[0].class"),
    ("workloads: [{namespace: a, deployment: b, class: nope}]", "workloads[0].class"),
    ("workloads: [{namespace: A_B, deployment: b, class: offline-training}]", "workloads[0].namespace"),
    ("workloads: [{namespace: a, deployment: b, class: offline-training, max_replicas: 0}]",
     "workloads[0].max_replicas"),
    ("workloads: [{namespace: a, deployment: b, class: offline-training, min_replicas: 0}]",
     "workloads[0].min_replicas"),
    ("workloads: [{namespace: a, deployment: b, class: offline-training, slo_ttft_ms: -1}]",
     "workloads[0].slo_ttft_ms"),
    ("workloads: [{namespace: a, deployment: b, class: offline-training, gpus_per_replica: 0.0001}]",
     "workloads[0].gpus_per_replica"),
    ("workloads: [{namespace: a, deployment: b, class: offline-training, zones: [x, x]}]", "workloads[0].zones"),
    ("workloads: [{namespace: a, deployment: b, class: offline-training, replicas: 3}]", "workloads[0].replicas"),
    ("workloads: [{namespace: a, deployment: b, class: offline-training}, "
     "{namespace: a, deployment: b, class: offline-training}]", "workloads[1].deployment"),
    ("workloads: [{namespace: a, deployment: b, class: offline-training}]\nquotas: [{namespace: c, min_gpus: 1}]",
     "quotas[0].namespace"),
    ("workloads: [{namespace: a, deployment: b, class: offline-training}]\n"
     "quotas: [{namespace: a, min_gpus: 5, max_gpus: 4}]", "quotas[0].min_gpus"),
    ("workloads: [{namespace: a, deployment: b, class: offline-training}]\ncluster: {writes_per_100ms: 0}",
     "cluster.writes_per_100ms"),
    ("workloads: [{namespace: a, deployment: b, class: offline-training}]\ncluster: {budget: 1}",
     "cluster.budget"),
    ("workloads: [{namespace: a, deployment: b, class: offline-training}]\nservices: []", "services"),
    ("workloads: [{namespace: a, deployment: b, class: order-fulfilment}]\n"
     "classes: [{name: order-fulfilment, base_weight: 0.6, alpha: 1, min_replicas: 3}]", "workloads[0].min_replicas"),
])
def test_every_error_names_the_file_and_the_key(text: str, key: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_fleet(text, "fleet.yaml")
    msg = str(err.value)
    assert msg.startswith(f"fleet.yaml: {key}:") and "fix:" in msg and "\n" not in msg, msg


def test_load_fleet_names_an_unreadable_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="missing.yaml"):
        load_fleet(tmp_path / "missing.yaml")
    ok = tmp_path / "fleet.yaml"
    ok.write_text(FLEET)
    assert len(load_fleet(ok).workloads) == 3
