"""The AIBrix emulation reproduces the ported AIBrix test cases (``tests/data/upstream/aibrix``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ebb.sim.peers.aibrix_core import (
    AibrixContext,
    MetricWindow,
    apa_target_replicas,
    desired_over_sources,
    kpa_target_replicas,
)

DATA = Path(__file__).resolve().parents[3] / "data" / "upstream" / "aibrix"
APA = json.loads((DATA / "apa.json").read_text())
KPA = json.loads((DATA / "kpa.json").read_text())
PIPE = json.loads((DATA / "pipeline.json").read_text())


def _ids(cases: list[dict[str, Any]]) -> list[str]:
    return [c["name"] for c in cases]


@pytest.mark.parametrize("case", APA["cases"], ids=_ids(APA["cases"]))
def test_apa_matches_upstream(case: dict[str, Any]) -> None:
    ctx = AibrixContext(**case["context"])
    assert apa_target_replicas(float(case["current_pods"]), case["current_use_per_pod"], ctx) == case["want"]


@pytest.mark.parametrize("case", KPA["cases"], ids=_ids(KPA["cases"]))
def test_kpa_matches_upstream(case: dict[str, Any]) -> None:
    ctx = AibrixContext(**case["context"])
    got = kpa_target_replicas(float(case["current_pods"]), case["stable"], case["panic"], ctx,
                              in_panic=case["in_panic"], max_panic_pods=case["max_panic_pods"])
    assert got == case["want"]


@pytest.mark.parametrize("case", PIPE["windows"], ids=_ids(PIPE["windows"]))
def test_time_window_matches_upstream(case: dict[str, Any]) -> None:
    w = MetricWindow(case["duration_s"], case["granularity_s"])
    for i, op in enumerate(case["ops"]):
        w.record(op["t_s"], op["value"])
        if "want_values" in op:
            assert w.values() == op["want_values"], f"op {i}"
        if "want_avg" in op:
            assert w.avg() == op["want_avg"], f"op {i}"


def _record(windows: tuple[MetricWindow, MetricWindow], t_s: float, pod_values: list[float]) -> None:
    mean = sum(pod_values) / len(pod_values)
    for w in windows:
        w.record(t_s, mean)


@pytest.mark.parametrize("case", PIPE["clients"], ids=_ids(PIPE["clients"]))
def test_metrics_client_matches_upstream(case: dict[str, Any]) -> None:
    windows = (MetricWindow(case["stable_s"]), MetricWindow(case["panic_s"]))
    for u in case["updates"]:
        _record(windows, u["t_s"], u["pod_values"])
    if "want_stable_values" in case:
        assert windows[0].values() == case["want_stable_values"]
        assert windows[1].values() == case["want_panic_values"]
    if "want_stable" in case:
        assert (windows[0].avg(), windows[1].avg()) == (case["want_stable"], case["want_panic"])


@pytest.mark.parametrize("case", PIPE["pipeline"], ids=_ids(PIPE["pipeline"]))
def test_compute_desired_replicas_matches_upstream(case: dict[str, Any]) -> None:
    sources = []
    for s in case["sources"]:
        stable, panic = MetricWindow(180.0), MetricWindow(60.0)
        _record((stable, panic), 0.0, s["pod_values"])
        sources.append((stable.avg(), panic.avg(), AibrixContext(target_value=s["target"], **case["context"])))
    assert desired_over_sources(case["algo"], case["current_replicas"], sources) == case["want"]
