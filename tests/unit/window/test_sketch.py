"""Properties of the columnar relative-error sketch (ebb.window.sketch)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ebb.window.mapping import LogMapping
from ebb.window.sketch import ColumnarSketch

ALPHA = 0.01
TOL = ALPHA * (1 + 1e-9)  # float rounding exactly on a bin edge

magnitudes = st.one_of(
    st.just(0.0),
    st.floats(min_value=1e-6, max_value=1e9, allow_nan=False, allow_infinity=False),
)
values = st.builds(lambda m, neg: -m if neg else m, magnitudes, st.booleans())
columns = st.lists(st.tuples(st.integers(0, 3), values), min_size=1, max_size=300)
qs = st.sampled_from([0.0, 0.01, 0.25, 0.5, 0.9, 0.95, 0.99, 0.999, 1.0])


def _split(rows: list[tuple[int, float]]) -> tuple[np.ndarray, np.ndarray]:
    return np.array([r[0] for r in rows], dtype=np.int64), np.array([r[1] for r in rows])


@settings(max_examples=200, deadline=None)
@given(rows=columns, q=qs)
def test_every_quantile_is_within_alpha_of_the_rank_selected_value(rows: list[tuple[int, float]], q: float) -> None:
    sid, v = _split(rows)
    sk = ColumnarSketch(4)
    sk.ingest(sid, v)
    est = sk.quantile(q)
    for s in range(4):
        x = v[sid == s]
        if x.size == 0:
            assert np.isnan(est[s])
            continue
        exact = float(np.quantile(x, q, method="lower"))
        if exact == 0.0:
            assert est[s] == 0.0
        else:
            assert abs(est[s] - exact) <= TOL * abs(exact)
            assert np.sign(est[s]) == np.sign(exact)


@settings(max_examples=100, deadline=None)
@given(a=columns, b=columns)
def test_merging_two_sketches_equals_ingesting_the_union(a: list[tuple[int, float]], b: list[tuple[int, float]]) -> None:
    sa, sb, su = ColumnarSketch(4), ColumnarSketch(4), ColumnarSketch(4)
    sa.ingest(*_split(a))
    sb.ingest(*_split(b))
    su.ingest(*_split(a + b))
    sa.merge(sb)
    np.testing.assert_array_equal(sa.counts, su.counts)
    np.testing.assert_array_equal(sa.blocks, su.blocks)
    np.testing.assert_array_equal(sa.count(), su.count())


def test_subtracting_what_was_added_leaves_an_empty_sketch() -> None:
    sk = ColumnarSketch(2)
    flat = sk.flat_index(np.array([0, 1, 1]), np.array([1.0, -2.0, 0.0]))
    sk.add_flat(flat)
    sk.subtract_flat(flat)
    assert not sk.counts.any() and not sk.blocks.any()


def test_zero_is_returned_exactly_and_negatives_keep_their_order() -> None:
    sk = ColumnarSketch(1)
    sk.ingest(np.zeros(5, dtype=np.int64), np.array([-100.0, -1.0, 0.0, 1.0, 100.0]))
    got = [float(sk.quantile(q)[0]) for q in (0.0, 0.25, 0.5, 0.75, 1.0)]
    assert got[2] == 0.0
    assert got == sorted(got)
    assert got[0] == pytest.approx(-100.0, rel=ALPHA)


def test_out_of_range_values_are_clamped_to_the_extreme_bins_and_counted() -> None:
    sk = ColumnarSketch(1)
    sk.ingest(np.zeros(4, dtype=np.int64), np.array([1e-12, 5e12, -7e15, 3.0]))
    assert sk.clamped == 3
    assert float(sk.quantile(1.0)[0]) == pytest.approx(1e9, rel=ALPHA)
    assert float(sk.quantile(0.0)[0]) == pytest.approx(-1e9, rel=ALPHA)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_values_are_rejected_with_the_value_and_count_quoted(bad: float) -> None:
    sk = ColumnarSketch(1)
    with pytest.raises(ValueError, match=r"1 non-finite value\(s\), first (nan|inf|-inf)"):
        sk.ingest(np.array([0, 0]), np.array([1.0, bad]))
    assert sk.count()[0] == 0  # all-or-nothing


def test_series_index_out_of_range_is_rejected_naming_it() -> None:
    with pytest.raises(ValueError, match="series_idx 5 out of range"):
        ColumnarSketch(2).ingest(np.array([5]), np.array([1.0]))
    with pytest.raises(ValueError, match="series_idx -1 out of range"):
        ColumnarSketch(2).ingest(np.array([-1]), np.array([1.0]))


def test_sketches_with_different_mappings_refuse_to_merge() -> None:
    with pytest.raises(ValueError, match="same mapping"):
        ColumnarSketch(1).merge(ColumnarSketch(1, LogMapping(alpha=0.02)))


def test_an_empty_series_reads_nan_and_a_quantile_outside_0_1_is_refused() -> None:
    sk = ColumnarSketch(3)
    sk.ingest(np.array([1]), np.array([2.0]))
    est = sk.quantile(0.5)
    assert np.isnan(est[0]) and np.isnan(est[2]) and est[1] == pytest.approx(2.0, rel=ALPHA)
    with pytest.raises(ValueError, match="1.5"):
        sk.quantile(1.5)


def test_the_mapping_rejects_impossible_parameters() -> None:
    with pytest.raises(ValueError, match="alpha"):
        LogMapping(alpha=1.0)
    with pytest.raises(ValueError, match="min_value"):
        LogMapping(min_value=10.0, max_value=1.0)


def test_default_mapping_covers_1e_minus_6_to_1e9_in_rows_of_whole_blocks() -> None:
    m = LogMapping()
    assert m.n_keys == 1728 and m.n_bins % 64 == 0 and m.n_bins >= 2 * m.n_keys + 1
