"""deploy/grafana/ebb-dashboard.json: a well-formed Grafana dashboard that charts only metrics Ebb exports.

That every query returns data from a real Prometheus is checked by the live loop
(``tests/integration/test_live_loop.py``); here the structure and the metric names are checked.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from ebb.agent.metrics import AgentMetrics
from ebb.model import live as names
from ebb.telemetry.metrics import EbbMetrics

DASHBOARD = Path(__file__).resolve().parents[3] / "deploy" / "grafana" / "ebb-dashboard.json"
SUFFIXES = ("_bucket", "_count", "_sum", "_total")


def dashboard() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    return doc


def chart_panels() -> list[dict[str, Any]]:
    return [p for p in dashboard()["panels"] if p["type"] != "row"]


def exported_metric_names() -> set[str]:
    """Every metric family Ebb's controller, agent, router and workers expose."""
    out = {m.name for m in EbbMetrics().registry.collect()} | {m.name for m in AgentMetrics().registry.collect()}
    out |= {v for k, v in vars(names).items() if k.startswith(("WORKER_", "ROUTER_")) and isinstance(v, str)}
    return {n.removesuffix("_total") for n in out}


def test_the_dashboard_has_a_prometheus_datasource_variable_and_a_current_schema() -> None:
    d = dashboard()
    assert 36 <= d["schemaVersion"] <= 41 and d["uid"] and d["title"]
    (var,) = [v for v in d["templating"]["list"] if v["name"] == "datasource"]
    assert var["type"] == "datasource" and var["query"] == "prometheus"


def test_every_panel_has_a_unique_id_a_grid_position_and_a_templated_datasource_with_queries() -> None:
    panels = dashboard()["panels"]
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids))
    for p in chart_panels():
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
        assert p["title"] and p["targets"], p["title"]
        refs = [t["refId"] for t in p["targets"]]
        assert len(refs) == len(set(refs)), p["title"]
        for t in p["targets"]:
            assert t["expr"].strip() and t["datasource"] == p["datasource"], p["title"]
    for p in panels:
        g = p["gridPos"]
        assert g["w"] > 0 and g["h"] > 0 and g["x"] >= 0 and g["y"] >= 0 and g["x"] + g["w"] <= 24, p["title"]


def test_no_two_panels_overlap_on_the_grid() -> None:
    cells: dict[tuple[int, int], str] = {}
    for p in dashboard()["panels"]:
        g = p["gridPos"]
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, f"{p['title']!r} overlaps {cells[(x, y)]!r}"
                cells[(x, y)] = p["title"]


def test_every_query_names_only_metrics_ebb_exports() -> None:
    known = exported_metric_names()
    used: set[str] = set()
    for p in chart_panels():
        for t in p["targets"]:
            for metric in re.findall(r"\bebb_[a-z0-9_]+\b", t["expr"]):
                base = metric
                for suffix in SUFFIXES:
                    base = base.removesuffix(suffix)
                assert base in known or metric.removesuffix("_total") in known, (p["title"], metric)
                used.add(base)
    # the controller's decisions, cycles and staleness and the router's latency are all charted
    assert {"ebb_decisions", "ebb_cycles", "ebb_data_staleness_seconds", "ebb_cycle_duration_seconds",
            names.ROUTER_TTFT, names.ROUTER_E2E} <= used
