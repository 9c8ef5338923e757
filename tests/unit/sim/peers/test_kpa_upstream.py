"""The KPA emulation reproduces the ported Knative test cases (``tests/data/upstream/knative``)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from ebb.sim.peers.kpa_core import KpaSpec, kpa_initial_state, kpa_scale
from ebb.sim.peers.kpa_window import (
    TimedBuckets,
    WeightedBuckets,
    max_window_current,
    max_window_record,
    smoothing_coeff,
    time_window_index,
)

DATA = Path(__file__).resolve().parents[3] / "data" / "upstream" / "knative"
SCALE = json.loads((DATA / "autoscaler.json").read_text())
AGG = json.loads((DATA / "aggregation.json").read_text())


def _ids(cases: list[dict[str, Any]]) -> list[str]:
    return [c["name"] for c in cases]


def _spec(d: dict[str, Any]) -> KpaSpec:
    return KpaSpec(**d)


@pytest.mark.parametrize("case", SCALE["cases"], ids=_ids(SCALE["cases"]))
def test_decider_matches_upstream(case: dict[str, Any]) -> None:
    spec = _spec(case["spec"])
    state = kpa_initial_state(spec, case["created_ready"], case["created_at_s"])
    if "want_initial" in case:
        w = case["want_initial"]
        assert (state.panic_time_s is not None) == w["in_panic"]
        assert state.max_panic_pods == w["max_panic_pods"]
    if "prep" in case:
        t0 = case["steps"][0]["t_s"]
        state = type(state)(t0 + case["prep"]["panic_time_s"], case["prep"]["max_panic_pods"], state.delay)
    for i, step in enumerate(case["steps"]):
        if "spec" in step:
            spec = _spec(step["spec"])
        observed = None if step.get("no_data") else (float(step["stable"]), float(step["panic"]))
        got, state = kpa_scale(spec, state, observed, step["ready"], float(step["t_s"]))
        assert got == step["want"], f"step {i}: desired {got}, upstream {step['want']}"
        if "want_panic_time_s" in step:
            assert state.panic_time_s == step["want_panic_time_s"], f"step {i}: panic time"


@pytest.mark.parametrize("case", AGG["windows"], ids=_ids(AGG["windows"]))
def test_window_average_matches_upstream(case: dict[str, Any]) -> None:
    kind = WeightedBuckets if case["kind"] == "weighted" else TimedBuckets
    b = kind(case["window_s"], case["granularity_s"])
    for i, op in enumerate(case["ops"]):
        if op["op"] == "record":
            b.record(op["t_s"], op["value"])
        else:
            got = b.window_average(op["t_s"])
            assert math.isclose(got, op["want"], rel_tol=1e-12, abs_tol=1e-12), f"op {i}: {got} != {op['want']}"


@pytest.mark.parametrize("case", AGG["decay"], ids=_ids(AGG["decay"]))
def test_decay_coefficient_matches_upstream(case: dict[str, Any]) -> None:
    assert abs(smoothing_coeff(case["n_buckets"]) - case["want"]) <= case["tolerance"]
    assert smoothing_coeff(case["n_buckets"]) == pytest.approx(case["want"], abs=1e-5)


@pytest.mark.parametrize("case", AGG["max_window"], ids=_ids(AGG["max_window"]))
def test_max_window_matches_upstream(case: dict[str, Any]) -> None:
    size = int(math.ceil(case["window_s"] / case["granularity_s"]))
    w: tuple[tuple[int, int], ...] = ()
    for r in case["records"]:
        w = max_window_record(w, size, time_window_index(r["t_s"], case["granularity_s"]), r["value"])
    assert max_window_current(w) == case["want"]
