"""The per-replica latency model: its formulas, its scalar fast paths, and its fit to the H200 data."""

from __future__ import annotations

import csv
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ebb.model.latency import H200_DEFAULT, LatencyModel

_SHARED = Path(__file__).resolve().parents[3].parent / "shared"
_H200 = _SHARED / "data" / "gpu" / "h200-serving"

_models = st.builds(
    LatencyModel,
    prefill_floor_ms=st.floats(0.0, 50.0),
    prefill_ms_per_token=st.floats(0.0, 0.1),
    decode_base_ms=st.floats(0.0, 20.0),
    decode_ms_per_seq=st.floats(0.0, 1.0),
    max_batch=st.integers(1, 256),
)


def test_prefill_below_the_floor_costs_the_floor() -> None:
    lat = LatencyModel(prefill_floor_ms=4.0, prefill_ms_per_token=0.01)
    np.testing.assert_allclose(lat.prefill_ms(np.array([0.0, 1.0, 100.0, 399.0])), 4.0)


def test_prefill_above_the_floor_grows_linearly_with_prompt_tokens() -> None:
    lat = LatencyModel(prefill_floor_ms=4.0, prefill_ms_per_token=0.01)
    np.testing.assert_allclose(lat.prefill_ms(np.array([400.0, 1000.0, 2000.0])), [4.0, 10.0, 20.0])


def test_the_default_prefill_crosses_its_floor_near_336_tokens() -> None:
    cross = H200_DEFAULT.prefill_floor_ms / H200_DEFAULT.prefill_ms_per_token
    assert 330 < cross < 340
    assert float(H200_DEFAULT.prefill_ms(300)) == H200_DEFAULT.prefill_floor_ms
    assert float(H200_DEFAULT.prefill_ms(1000)) == pytest.approx(11.9)


def test_decode_step_is_base_plus_per_sequence_cost() -> None:
    lat = LatencyModel(decode_base_ms=3.0, decode_ms_per_seq=0.5, max_batch=64)
    np.testing.assert_allclose(lat.step_ms(np.array([1.0, 2.0, 10.0, 64.0])), [3.5, 4.0, 8.0, 35.0])


def test_decode_step_clips_the_batch_to_one_and_to_max_batch() -> None:
    lat = LatencyModel(decode_base_ms=3.0, decode_ms_per_seq=0.5, max_batch=8)
    np.testing.assert_allclose(lat.step_ms(np.array([-5.0, 0.0, 0.5])), 3.5)
    np.testing.assert_allclose(lat.step_ms(np.array([8.0, 9.0, 1000.0])), 7.0)


def test_vectorised_functions_accept_a_plain_float_and_keep_the_input_shape() -> None:
    assert np.shape(H200_DEFAULT.prefill_ms(512.0)) == ()
    assert np.shape(H200_DEFAULT.step_ms(np.ones((2, 3)))) == (2, 3)
    assert float(H200_DEFAULT.step_ms(1.0)) == pytest.approx(3.79 + 0.0425)


@settings(max_examples=200, deadline=None)
@given(lat=_models, tokens=st.floats(0.0, 1e5, allow_nan=False))
def test_scalar_prefill_equals_the_vectorised_prefill(lat: LatencyModel, tokens: float) -> None:
    assert lat.prefill_ms_scalar(tokens) == float(lat.prefill_ms(tokens))


@settings(max_examples=200, deadline=None)
@given(lat=_models, batch=st.floats(-10.0, 1000.0, allow_nan=False))
def test_scalar_step_equals_the_vectorised_step(lat: LatencyModel, batch: float) -> None:
    assert lat.step_ms_scalar(batch) == float(lat.step_ms(batch))


@settings(max_examples=100, deadline=None)
@given(lat=_models, batches=st.lists(st.floats(-10.0, 1000.0, allow_nan=False), min_size=1, max_size=20))
def test_vectorised_step_equals_the_scalar_step_elementwise(lat: LatencyModel, batches: list[float]) -> None:
    vec = lat.step_ms(np.array(batches))
    assert vec.tolist() == [lat.step_ms_scalar(b) for b in batches]


def _require_h200() -> Path:
    if not _H200.is_dir():
        pytest.skip(f"calibration data not present at {_H200}")
    return _H200


def test_refitting_the_decode_step_on_the_h200_iterations_reproduces_the_defaults() -> None:
    root = _require_h200()
    steps: dict[int, list[float]] = defaultdict(list)
    with (root / "iterations.csv").open(newline="") as f:
        for row in csv.DictReader(f):
            if int(row["prefill_tokens"]) == 0:
                steps[int(row["batch"])].append(float(row["step_ms"]))
    batches = np.array(sorted(steps), dtype=np.float64)
    assert len(batches) >= 10, "too few batch sizes to refit"
    median = np.array([np.median(steps[int(b)]) for b in batches])
    weight = np.sqrt(np.array([len(steps[int(b)]) for b in batches], dtype=np.float64))
    design = np.column_stack([np.ones_like(batches), batches])
    (intercept, slope), *_ = np.linalg.lstsq(design * weight[:, None], median * weight, rcond=None)
    assert intercept == pytest.approx(H200_DEFAULT.decode_base_ms, rel=0.05)
    assert slope == pytest.approx(H200_DEFAULT.decode_ms_per_seq, rel=0.05)


def test_the_prefill_model_is_within_15_percent_of_every_long_prompt_sweep_point() -> None:
    root = _require_h200()
    checked = 0
    with (root / "pareto.csv").open(newline="") as f:
        for row in csv.DictReader(f):
            if row["kind"] != "prefill" or int(row["seq"]) < 512:
                continue
            per_request = float(row["latency_ms_median"]) / int(row["batch"])
            model = float(H200_DEFAULT.prefill_ms(float(row["seq"])))
            assert abs(model - per_request) / per_request <= 0.15, row
            checked += 1
    assert checked > 0, "pareto.csv holds no prefill point with seq >= 512"
