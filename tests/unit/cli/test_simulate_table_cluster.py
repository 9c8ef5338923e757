"""The cluster scorecard of ``ebb simulate --cluster`` fits 80 columns, keeping cost and every class."""

from __future__ import annotations

import io
from typing import Any, cast

from rich.console import Console

from ebb.cli.simulate_cluster import _table
from ebb.sim.cluster.run import ClusterResult, ClusterRun


def _result(policy: str, gpu_h: float) -> ClusterResult:
    card: dict[str, Any] = {
        "policy": policy, "gpu_hours": gpu_h, "gpu_hours_online": gpu_h * 0.7, "gpu_hours_batch": gpu_h * 0.3,
        "violations_by_class": {"order-fulfilment": {"violation_pct": 0.012}, "analytics": {"violation_pct": 1.5}},
        "max_zone_skew": 1, "writes_per_s": 12.34, "max_writes_per_100ms": 3, "quota_breach_s": 0}
    return ClusterResult(policy=policy, run=cast(ClusterRun, None), scorecard=card)


def test_the_cluster_table_fits_80_columns_and_keeps_cost_and_classes() -> None:
    results = [_result("ebb", 1234.5), _result("hpa:target=0.7", 2345.6), _result("kpa", 2000.0)]
    best = {"gpu_hours_online": 1500.0, "violations_by_class": {"order-fulfilment": {"violation_pct": 0.05}}}
    out = io.StringIO()
    Console(width=80, file=out, color_system=None).print(_table(results, best, 80))
    text = out.getvalue()
    assert all(len(line) <= 80 for line in text.splitlines())
    assert "…" not in text
    assert "1234.5" in text and "order-fulfilment" in text
    assert "analytics" in text and "best per-service peer" in text
    wide = io.StringIO()
    Console(width=200, file=wide, color_system=None).print(_table(results, best, 200))
    assert "max/100ms" in wide.getvalue() and "max/100ms" not in text
