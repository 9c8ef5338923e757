"""Analysis: modes of a distribution, Pearson correlation and per-node heat, on known inputs."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from ebb.analysis import analyze, distribution, pearson_matrix
from ebb.analysis.correlation import align
from ebb.sources.base import batch_from_columns


def bimodal(n: int = 50_000, seed: int = 7) -> np.ndarray:
    rng = np.random.default_rng(seed)
    k = int(n * 0.65)
    v = np.concatenate([rng.normal(45, 4, k), rng.normal(86, 2.5, n - k)])
    clipped: np.ndarray = np.clip(v, 0, 100)
    return clipped


def test_a_bimodal_mixture_yields_two_modes_with_the_right_ranges_and_shares() -> None:
    d = distribution("cpu_util_pct", bimodal())
    assert len(d.modes) == 2
    low, high = d.modes
    assert 30 <= low.lo < 45 < low.hi <= 60
    assert 75 <= high.lo < 86 < high.hi <= 95
    # a range holds most of its component's mass (the component weights are 65 % and 35 %)
    assert 0.52 < low.share <= 0.65 and 0.26 < high.share <= 0.35
    assert abs(low.peak - 45) < 3 and abs(high.peak - 86) < 3


def test_a_unimodal_sample_yields_one_mode() -> None:
    rng = np.random.default_rng(1)
    d = distribution("gpu_util_pct", rng.normal(50, 5, 20_000))
    assert d.edges[0] == 0.0 and d.edges[-1] == 100.0  # a percent series is binned over [0, 100]
    assert len(d.modes) == 1


def test_a_constant_series_is_one_atom_holding_every_sample_and_leaves_no_continuous_mode() -> None:
    d = distribution("x", np.full(100, 7.0))
    (a,) = d.atoms
    assert (a.value, a.share, a.count) == (7.0, 1.0, 100)
    assert d.modes == () and int(d.counts.sum()) == 0


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(min_value=-1e6, max_value=1e6, allow_nan=False), min_size=1, max_size=400),
       st.integers(min_value=3, max_value=120))
def test_mode_shares_sum_to_at_most_one_and_mode_ranges_are_disjoint(values: list[float], bins: int) -> None:
    d = distribution("x", np.array(values), bins=bins, min_share=0.0)
    modes = d.modes
    assert sum(m.share for m in modes) + sum(a.share for a in d.atoms) <= 1.0 + 1e-12
    assert sum(m.count for m in modes) + sum(a.count for a in d.atoms) <= len(values)
    for m in modes:
        assert 0.0 <= m.share <= 1.0 and m.lo <= m.peak <= m.hi
    for a, b in zip(modes, modes[1:]):
        assert a.hi <= b.lo


def test_pearson_matches_numpy_corrcoef_on_complete_data() -> None:
    rng = np.random.default_rng(3)
    base = rng.normal(size=2_000)
    x = np.column_stack([base, 0.7 * base + rng.normal(size=2_000), rng.normal(size=2_000), -base])
    np.testing.assert_allclose(pearson_matrix(x), np.corrcoef(x, rowvar=False), atol=1e-12)


def test_pearson_uses_pairwise_complete_rows_and_gives_nan_for_a_constant_column() -> None:
    rng = np.random.default_rng(4)
    x = rng.normal(size=(500, 3))
    x[:, 2] = 1.0
    holed = x.copy()
    holed[::7, 1] = np.nan
    r = pearson_matrix(holed)
    keep = np.isfinite(holed[:, 1])
    assert np.isclose(r[0, 1], np.corrcoef(x[keep, 0], x[keep, 1])[0, 1])
    assert np.isnan(r[0, 2]) and np.isnan(r[2, 2])


def test_series_on_different_clocks_are_binned_before_they_are_correlated() -> None:
    t_fast = np.arange(0, 10_000, 100, dtype=np.int64)
    t_slow = np.arange(0, 10_000, 1_000, dtype=np.int64)
    m = align([(t_fast, t_fast.astype(float)), (t_slow, t_slow.astype(float) * 2)])
    assert m.shape == (10, 2)
    assert np.isclose(pearson_matrix(m)[0, 1], 1.0)


def test_analyze_flags_coupled_load_and_builds_a_heat_map_per_node_metric() -> None:
    rng = np.random.default_rng(5)
    n = 3_000
    ts = np.arange(n, dtype=np.int64) * 10**8
    cols = {}
    for node in ("node1", "node2", "node10"):
        cpu = rng.uniform(20, 90, n)
        cols[f"{node}/cpu_util_pct"] = cpu
        cols[f"{node}/mem_util_pct"] = np.clip(0.8 * cpu + rng.normal(0, 8, n), 0, 100)
        cols[f"{node}/disk_util_pct"] = rng.uniform(0, 100, n)
    report = analyze(batch_from_columns(ts, cols), heat_bins=12)
    assert report.resources == ("cpu_util_pct", "mem_util_pct", "disk_util_pct")
    assert [(c.a, c.b) for c in report.coupled] == [("cpu_util_pct", "mem_util_pct")]
    assert {d.name: d.n for d in report.distributions}["cpu_util_pct"] == 3 * n
    heat = {h.metric: h for h in report.heatmaps}["cpu_util_pct"]
    assert heat.nodes == ("node1", "node2", "node10") and heat.cells.shape == (3, 12)
    assert np.all((heat.cells > 40) & (heat.cells < 70))
