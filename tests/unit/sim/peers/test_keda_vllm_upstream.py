"""KEDA's Go tests of the Prometheus scaler's value and of the scale executor, ported as data."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ebb.sim.peers.keda_vllm import PromQueryError, prom_instant_value, request_scale

ROOT = Path(__file__).parents[3] / "data" / "upstream" / "keda"
PROM = json.loads((ROOT / "prometheus_scaler_test.json").read_text())
EXEC = json.loads((ROOT / "scale_scaledobjects_test.json").read_text())


def test_provenance_names_the_upstream_files() -> None:
    for doc in (PROM, EXEC):
        assert doc["provenance"]["repo"] == "kedacore/keda" and len(doc["provenance"]["commit"]) == 40


@pytest.mark.parametrize("case", PROM["cases"], ids=[c["name"] for c in PROM["cases"]])
def test_prometheus_scaler_value(case: dict[str, Any]) -> None:
    results = [r.get("value", []) for r in case["body"].get("data", {}).get("result", [])]
    ok = 200 <= case["response_status"] <= 299
    if case["expect"]["error"]:
        with pytest.raises(PromQueryError):
            prom_instant_value(ok, results, ignore_null_values=case["ignore_null_values"])
    else:
        assert prom_instant_value(ok, results, ignore_null_values=case["ignore_null_values"]) == \
            case["expect"]["value"]


@pytest.mark.parametrize("case", EXEC["cases"], ids=[c["test"] for c in EXEC["cases"]])
def test_scale_executor(case: dict[str, Any]) -> None:
    step = request_scale(case["current"], active=case["active"], error=case["error"],
                         min_replicas=case["min_replicas"], now_s=case["now_s"],
                         last_active_s=case["last_active_s"], created_s=case["created_s"],
                         idle_replicas=case["idle_replicas"], fallback_replicas=case["fallback_replicas"])
    assert step.replicas == case["expect"]["replicas"]
    assert (step.last_active_s == case["now_s"]) == case["expect"]["last_active_set"]
