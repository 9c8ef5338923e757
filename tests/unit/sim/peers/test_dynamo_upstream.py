"""The Dynamo planner emulation passes every ported upstream case (replica formulas, predictors).

Fixtures: ``tests/data/upstream/dynamo/*.json`` (provenance inside each file and in the folder's
README section).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from ebb.sim.peers.dynamo import (
    corrected_itl_ms,
    decode_correction,
    decode_gpu_demand,
    global_gpu_budget,
    prefill_correction,
    prefill_gpu_demand,
    replicas_from_demand,
)
from ebb.sim.peers.dynamo_predictors import ConstantPredictor, KalmanPredictor, LoadPredictor

DIR = Path(__file__).resolve().parents[3] / "data" / "upstream" / "dynamo"
REPLICA = json.loads((DIR / "test_replica_calculation.json").read_text())
PREDICT = json.loads((DIR / "test_load_predictors.json").read_text())


def _merged(case: dict[str, Any], key: str) -> dict[str, Any]:
    return {**REPLICA["defaults"][key], **case.get(key, {})}


def _disagg(case: dict[str, Any]) -> tuple[int, int, float, float]:
    """Upstream's harness step: correction update, prefill and decode counts, global GPU budget."""
    cfg, obs, mocks, preset = (_merged(case, k) for k in ("config", "observed", "mocks", "preset"))
    pred = case["predicted"]
    p_corr = prefill_correction(obs["ttft_ms"], mocks["profile_ttft_ms"])
    d_corr = preset["d_correction"] if obs["num_d_workers"] == 0 else \
        decode_correction(obs["itl_ms"], mocks["profile_itl_ms"])
    itl = corrected_itl_ms(cfg["itl_ms"], d_corr)
    num_p = replicas_from_demand(prefill_gpu_demand(pred["num_req"], pred["isl"], cfg["interval_s"], p_corr,
                                                    mocks["prefill_thpt_per_gpu"], cfg["prefill_engine_num_gpu"]),
                                 cfg["min_endpoint"])
    num_d = replicas_from_demand(decode_gpu_demand(pred["num_req"], pred["osl"], cfg["interval_s"],
                                                   mocks["decode_thpt_per_gpu"], cfg["decode_engine_num_gpu"]),
                                 cfg["min_endpoint"])
    num_p, num_d = global_gpu_budget(num_p, num_d, cfg["prefill_engine_num_gpu"], cfg["decode_engine_num_gpu"],
                                     cfg["max_gpu_budget"], cfg["min_endpoint"])
    return num_p, num_d, p_corr, itl


def test_the_fixtures_hold_every_ported_case_with_unique_names() -> None:
    assert len(REPLICA["cases"]) == 11 and len(PREDICT["cases"]) == 9
    for doc in (REPLICA, PREDICT):
        assert len({c["name"] for c in doc["cases"]}) == len(doc["cases"])
        assert doc["provenance"]["repo"] == "ai-dynamo/dynamo"


@pytest.mark.parametrize("case", REPLICA["cases"], ids=[c["name"] for c in REPLICA["cases"]])
def test_replica_calculation_matches_upstream(case: dict[str, Any]) -> None:
    num_p, num_d, p_corr, itl = _disagg(case)
    cfg = _merged(case, "config")
    want = case["expect"]
    if "num_p" in want:
        assert num_p == want["num_p"]
    if "num_d" in want:
        assert num_d == want["num_d"]
    if "max_total_gpus" in want:
        assert num_p * cfg["prefill_engine_num_gpu"] + num_d * cfg["decode_engine_num_gpu"] <= want["max_total_gpus"]
    if "min_each" in want:
        assert num_p >= want["min_each"] and num_d >= want["min_each"]
    if "p_correction" in want:
        assert p_corr == pytest.approx(want["p_correction"])
    if "corrected_itl_ms" in want:
        assert itl == pytest.approx(want["corrected_itl_ms"])


def _predictor(case: dict[str, Any]) -> LoadPredictor:
    if case["predictor"] == "constant":
        return ConstantPredictor()
    k = PREDICT["kalman_config"]
    return KalmanPredictor(q_level=k["q_level"], q_trend=k["q_trend"], r=k["r"], min_points=k["min_points"],
                           log1p=bool(case.get("log1p", False)))


@pytest.mark.parametrize("case", PREDICT["cases"], ids=[c["name"] for c in PREDICT["cases"]])
def test_load_predictor_matches_upstream(case: dict[str, Any]) -> None:
    p = _predictor(case)
    for v in case["values"]:
        p.add_data_point(math.nan if v == "nan" else float(v))
    got = p.predict_next()
    want = case["expect"]
    if "predict" in want:
        assert got == want["predict"]
    if "predict_ge" in want:
        assert got >= want["predict_ge"]
    if want.get("predict_twice_equal"):
        assert p.predict_next() == got
    if "buffer_len" in want:
        assert isinstance(p, ConstantPredictor)
        assert len(p.buf.data) == want["buffer_len"]
