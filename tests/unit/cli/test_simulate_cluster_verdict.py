"""The cluster headline and table mark every class over its limit with ✗, not only the class where Ebb wins.

Figures: docs/cluster.md's measured three-classes run (Ebb with l1=fleet against the best per-service peer).
"""

from __future__ import annotations

import io
from typing import Any, cast

from rich.console import Console

from ebb.cli.simulate_cluster import _table, class_limit_pct, cluster_verdict
from ebb.config.workloads import default_workload_classes, parse_workload_classes
from ebb.sim.cluster.run import ClusterResult, ClusterRun


def _online(pct: float) -> dict[str, float]:
    return {"requests": 1000.0, "violations": 10.0 * pct, "violation_pct": pct}


def _card(policy: str, lc: float, recs: float, training: float | None) -> dict[str, Any]:
    by_class: dict[str, Any] = {"order-fulfilment": _online(lc), "realtime-recommendation": _online(recs)}
    if training is not None:
        by_class["offline-training"] = {"demand_gpu_s": 1000.0, "unserved_gpu_s": 10.0 * training,
                                        "violation_pct": training}
    return {"policy": policy, "gpu_hours": 150.0, "gpu_hours_online": 121.2, "gpu_hours_batch": 28.8,
            "violations_by_class": by_class, "max_zone_skew": 1, "writes_per_s": 0.5, "max_writes_per_100ms": 3,
            "quota_breach_s": 0}


def _results(lc: float = 0.274, recs: float = 0.841, training: float = 22.5) -> list[ClusterResult]:
    return [ClusterResult(policy="ebb:l1=fleet", run=cast(ClusterRun, None), scorecard=_card("ebb:l1=fleet", lc, recs,
                                                                                               training))]


BEST = {"gpu_hours_online": 83.0, "violations_by_class": {"order-fulfilment": _online(2.091),
                                                          "realtime-recommendation": _online(1.266)}}


def test_the_headline_names_every_class_and_marks_each_one_over_its_limit() -> None:
    said = cluster_verdict(_results(), BEST)
    assert said is not None and said.startswith("Ebb: 121.2 online GPU-h = 1.46× the best per-service peer")
    assert "order-fulfilment 0.274 % ✗ vs 2.091 % ✗ (limit 0.1 %)" in said
    assert "realtime-recommendation 0.841 % ✗ vs 1.266 % ✗ (limit 0.1 %)" in said
    assert "offline-training 22.500 % ✗ unserved vs - (limit 2 %)" in said


def test_a_class_within_its_limit_carries_no_mark() -> None:
    said = cluster_verdict(_results(lc=0.05, recs=0.1, training=1.5), BEST)
    assert said is not None
    assert "order-fulfilment 0.050 % vs" in said and "realtime-recommendation 0.100 % vs" in said
    assert "offline-training 1.500 % unserved" in said and said.count("✗") == 2  # the peer's two


def test_the_limits_come_from_the_budget_and_the_class_s_epoch_completion_floor() -> None:
    classes = default_workload_classes()
    assert class_limit_pct("order-fulfilment", _online(1.0), classes) == 0.1
    batch = {"demand_gpu_s": 1.0, "violation_pct": 0.0}
    assert class_limit_pct("offline-training", batch, classes) == 2.0
    strict = parse_workload_classes("classes: [{name: offline-training, base_weight: 0.1, alpha: 0.3, "
                                    "epoch_completion_min: 0.995}]")
    assert class_limit_pct("offline-training", batch, strict) == 0.5
    no_floor = parse_workload_classes("classes: [{name: offline-training, base_weight: 0.1, alpha: 0.3}]")
    assert class_limit_pct("offline-training", batch, no_floor) is None


def test_the_table_marks_every_class_cell_over_its_limit_on_ebb_s_row_and_the_best_peer_s() -> None:
    out = io.StringIO()
    Console(width=200, file=out, color_system=None).print(_table(_results(), BEST, 200))
    text = out.getvalue()
    ebb_row = next(line for line in text.splitlines() if "ebb:l1=fleet" in line)
    assert "0.274 ✗" in ebb_row and "0.841 ✗" in ebb_row and "22.500 ✗" in ebb_row
    best_row = next(line for line in text.splitlines() if "best per-service peer" in line)
    assert "2.091 ✗" in best_row and "1.266 ✗" in best_row
    assert "offline-training 2 %" in text and "order-fulfilment 0.1 %" in text  # the caption says the limits
