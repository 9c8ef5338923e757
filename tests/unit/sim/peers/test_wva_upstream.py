"""llm-d WVA's saturation-analyzer Go tests, ported as data, run through our analyzer."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ebb.sim.peers.wva_analyzer import (
    ModelAnalysis,
    ReplicaMetrics,
    SaturationConfig,
    VariantAnalysis,
    VariantState,
    analyze_model,
    analyze_variant,
    saturation_targets,
)

DATA = Path(__file__).parents[3] / "data" / "upstream" / "llm-d" / "saturation_analyzer_test.json"
DOC = json.loads(DATA.read_text())
CASES: list[dict[str, Any]] = DOC["cases"]


def _metrics(rows: list[dict[str, Any]]) -> list[ReplicaMetrics]:
    return [ReplicaMetrics(r["pod"], r["kv_ratio"], r["queue"], r["variant"], r.get("cost", 10.0)) for r in rows]


def test_provenance_names_the_upstream_file() -> None:
    prov = DOC["provenance"]
    assert prov["repo"] == "llm-d/llm-d-workload-variant-autoscaler"
    assert len(prov["commit"]) == 40 and prov["tests"]


@pytest.mark.parametrize("case", CASES, ids=[f"{c['test']}/{c['name']}" for c in CASES])
def test_upstream_case(case: dict[str, Any]) -> None:
    exp = case["expect"]
    if case["kind"] == "analyze_model":
        a = analyze_model(_metrics(case["replica_metrics"]), SaturationConfig(**case["config"]))
        for key in ("should_scale_up", "scale_down_safe", "total_replicas", "non_saturated"):
            if key in exp:
                assert getattr(a, key) == exp[key], key
        for key in ("avg_spare_kv", "avg_spare_queue"):
            if key in exp:
                assert getattr(a, key) == pytest.approx(exp[key]), key
        if "variant_count" in exp:
            assert len(a.variants) == exp["variant_count"]
        if "variant_replica_counts" in exp:
            assert {v.name: v.replica_count for v in a.variants} == exp["variant_replica_counts"]
    elif case["kind"] == "analyze_variant":
        v = analyze_variant(case["variant"], _metrics(case["replica_metrics"]), SaturationConfig(**case["config"]))
        assert (v.replica_count, v.non_saturated) == (exp["replica_count"], exp["non_saturated"])
        assert sorted(v.saturated) == sorted(exp["saturated"])
    else:
        an = case["analysis"]
        variants = tuple(VariantAnalysis(v["name"], v["replica_count"], v["replica_count"], 0.0, 0.0, (),
                                         float(v["cost"])) for v in an["variants"])
        analysis = ModelAnalysis(0, 0, 0.0, 0.0, an["should_scale_up"], an["scale_down_safe"], variants)
        states = [VariantState(s["name"], s["current"], s["desired"]) for s in case["states"]]
        assert saturation_targets(analysis, states) == exp["targets"]
