"""Pareto frontier (ebb.gates.pareto): batch mask, online monitor, H200 serving sweep."""

from __future__ import annotations

import csv
import importlib.util
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ebb.gates.pareto import FrontierMonitor, dominated_by, pareto_mask

H200_PARETO = Path(__file__).resolve().parents[2] / "data" / "h200" / "pareto.csv"
HAVE_PARETOSET = importlib.util.find_spec("paretoset") is not None


def dominates(a: np.ndarray, b: np.ndarray) -> bool:
    """The definition, as a reference: no worse in every objective, strictly better in one."""
    x, y = np.asarray(a), np.asarray(b)
    return bool(np.all(x <= y) and np.any(x < y))


def brute_force(points: np.ndarray) -> np.ndarray:
    n = points.shape[0]
    return np.array([not any(dominates(points[j], points[i]) for j in range(n) if j != i) for i in range(n)],
                    dtype=bool)


def point_sets(k: int, max_n: int = 40) -> st.SearchStrategy[np.ndarray]:
    row = st.lists(st.integers(0, 5), min_size=k, max_size=k)
    return st.lists(row, min_size=0, max_size=max_n).map(lambda rows: np.array(rows, dtype=float).reshape(-1, k))


# -- hand-made cases ---------------------------------------------------------------------------

def test_a_point_that_is_worse_in_both_objectives_is_dominated() -> None:
    assert pareto_mask([[1, 1], [2, 2]]).tolist() == [True, False]


def test_a_tie_in_one_objective_and_better_in_the_other_dominates() -> None:
    assert pareto_mask([[1, 2], [1, 1], [0, 3]]).tolist() == [False, True, True]


def test_duplicates_are_all_non_dominated() -> None:
    assert pareto_mask([[1, 1], [1, 1], [2, 0], [2, 0], [2, 2]]).tolist() == [True, True, True, True, False]


def test_duplicates_of_a_dominated_point_are_all_dominated() -> None:
    assert pareto_mask([[3, 3, 3], [3, 3, 3], [1, 1, 1]]).tolist() == [False, False, True]


def test_incomparable_points_are_all_on_the_frontier() -> None:
    assert pareto_mask([[0, 2, 1], [2, 0, 1], [1, 1, 0]]).all()


def test_empty_and_single_objective_inputs_are_handled() -> None:
    assert pareto_mask(np.empty((0, 3))).shape == (0,)
    assert pareto_mask([[2.0], [1.0], [1.0]]).tolist() == [False, True, True]


def test_infinite_objectives_are_allowed_and_nan_is_rejected() -> None:
    assert pareto_mask(np.array([[np.inf, 0, 0], [1, 1, 1], [-np.inf, 5, 5]])).tolist() == [True, True, True]
    with pytest.raises(ValueError, match="NaN"):
        pareto_mask([[np.nan, 1.0]])


def test_dominated_by_names_a_dominating_frontier_row() -> None:
    assert dominated_by([[2, 2], [0, 0]], [[3, 0], [1, 1]]).tolist() == [1, -1]


def test_large_inputs_take_the_prefilter_path_and_agree_with_the_block_algorithm() -> None:
    rng = np.random.default_rng(7)
    for k in (2, 3, 4):
        pts = rng.integers(0, 50, size=(5000, k)).astype(float)
        assert np.array_equal(pareto_mask(pts), brute_force_vectorised(pts))


def test_the_pivot_prefilter_run_down_to_a_few_hundred_survivors_keeps_the_exact_frontier() -> None:
    # continuous data: pivots keep removing points well below the 2,048-row entry threshold
    rng = np.random.default_rng(11)
    for k in (2, 3, 4):
        for pts in (rng.random((4000, k)), rng.standard_normal((4000, 1)) + 0.3 * rng.random((4000, k))):
            assert np.array_equal(pareto_mask(pts), brute_force_vectorised(pts))


def brute_force_vectorised(points: np.ndarray) -> np.ndarray:
    le = np.all(points[:, None, :] <= points[None, :, :], axis=2)
    lt = np.any(points[:, None, :] < points[None, :, :], axis=2)
    return np.asarray(~(le & lt).any(axis=0), dtype=bool)


# -- properties ----------------------------------------------------------------------------------

@pytest.mark.parametrize("k", [2, 3, 4])
def test_pareto_mask_equals_the_quadratic_definition(k: int) -> None:
    @settings(max_examples=150, deadline=None)
    @given(point_sets(k))
    def check(points: np.ndarray) -> None:
        assert np.array_equal(pareto_mask(points), brute_force(points))

    check()


ops = st.lists(
    st.one_of(
        st.tuples(st.just("insert"), st.integers(0, 30), st.lists(st.integers(0, 4), min_size=3, max_size=3)),
        st.tuples(st.just("expire"), st.integers(0, 40), st.just([])),
    ),
    max_size=60,
)


@settings(max_examples=200, deadline=None)
@given(ops)
def test_monitor_frontier_equals_pareto_mask_of_the_points_in_the_window(
        seq: list[tuple[str, int, list[int]]]) -> None:
    mon = FrontierMonitor(window_s=10.0, n_objectives=3)
    live: list[tuple[int, float, tuple[float, ...]]] = []
    for n, (op, t, obj) in enumerate(seq):
        if op == "insert":
            mon.insert(n, float(t), obj)
            live.append((n, float(t), tuple(map(float, obj))))
        else:
            mon.expire(float(t))
            live = [p for p in live if p[1] > t - 10.0]
        assert [p.config_id for p in mon.points()] == [p[0] for p in live]
        expected = pareto_mask(np.array([p[2] for p in live]).reshape(-1, 3))
        assert mon.frontier_mask() == expected.tolist()
        assert [p.config_id for p in mon.frontier()] == [p[0] for p, e in zip(live, expected) if e]
        for d in mon.dominated():
            assert dominates(d.by.objectives, d.point.objectives)
            assert d.by in mon.frontier()


@pytest.mark.skipif(not HAVE_PARETOSET, reason="paretoset not installed: pip install paretoset")
@pytest.mark.parametrize("k", [2, 3, 4])
def test_pareto_mask_matches_paretoset_on_random_data(k: int) -> None:
    import pandas as pd  # type: ignore[import-untyped]
    from paretoset import paretoset  # type: ignore[import-untyped]

    rng = np.random.default_rng(k)
    for n, hi in ((50, 4), (500, 20), (3000, 1000)):
        pts = rng.integers(0, hi, size=(n, k)).astype(float)
        ref = paretoset(pd.DataFrame(pts), sense=["min"] * k, distinct=False)
        assert np.array_equal(pareto_mask(pts), np.asarray(ref))


# -- the H200 serving sweep (documented in docs/pareto.md) ---------------------------------------

def _sweep_monitor(kind: str) -> FrontierMonitor:
    mon = FrontierMonitor(window_s=3600.0, n_objectives=3)
    with H200_PARETO.open(newline="") as f:
        for r in csv.DictReader(f):
            if r["kind"] == kind:
                mon.insert((int(r["batch"]), int(r["seq"])), 0.0,
                           (float(r["peak_mem_mib"]), float(r["latency_ms_p90"]), 1.0 / float(r["tokens_per_s"])))
    return mon


def test_h200_prefill_frontier_is_the_documented_one() -> None:
    mon = _sweep_monitor("prefill")
    assert [p.config_id for p in mon.frontier()] == [(1, 128), (1, 512), (2, 128), (4, 128)]
    by = {d.point.config_id: d.by.config_id for d in mon.dominated()}
    assert len(by) == 17
    assert by[(8, 128)] == (1, 128) and by[(1, 896)] == (1, 512)


def test_h200_decode_frontier_is_the_documented_one() -> None:
    mon = _sweep_monitor("decode")
    assert [p.config_id for p in mon.frontier()] == [(4, 128), (8, 128), (8, 896), (16, 512), (32, 128), (64, 128)]
    by = {d.point.config_id: d.by.config_id for d in mon.dominated()}
    assert len(by) == 15
    assert by[(1, 128)] == (4, 128) and by[(16, 128)] == (16, 512) and by[(64, 896)] == (64, 128)
