"""Modes: dominant exact values (atoms) are always reported, the rest's modes on the right scale."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ebb.analysis import distribution
from ebb.analysis.modes import find_atoms, prefers_log_scale, split_atoms

POD_LIST = (Path(__file__).resolve().parents[4] / "shared" / "data" / "traces" / "alibaba-gpu-2023"
            / "openb_pod_list_default.csv")


def pod_column(name: str) -> np.ndarray:
    with POD_LIST.open(newline="", encoding="utf-8") as fh:
        return np.array([float(row[name]) for row in csv.DictReader(fh)])


@pytest.mark.skipif(not POD_LIST.is_file(), reason=f"shared Alibaba GPU 2023 pod list not present at {POD_LIST}")
def test_the_alibaba_pod_lists_gpu_milli_reports_1000_and_0_as_its_dominant_atoms() -> None:
    d = distribution("gpu_milli", pod_column("gpu_milli"))
    atoms = {a.value: a.share for a in d.atoms}
    assert d.n == 8_152
    assert 0.48 < atoms[1000.0] < 0.50 and 0.12 < atoms[0.0] < 0.14
    assert max(atoms, key=lambda v: atoms[v]) == 1000.0
    # the GPU-sharing fractions between them are modes of the continuous rest
    assert any(m.lo <= 325 <= m.hi for m in d.modes)


@pytest.mark.skipif(not POD_LIST.is_file(), reason=f"shared Alibaba GPU 2023 pod list not present at {POD_LIST}")
def test_the_alibaba_pod_lists_cpu_milli_rest_is_binned_on_a_log_scale() -> None:
    d = distribution("cpu_milli", pod_column("cpu_milli"))
    assert d.log_scale
    assert 3152.0 in {a.value for a in d.atoms}
    widths = np.diff(d.edges)
    assert widths[-1] > 5 * widths[0]  # geometric bins
    assert all(d.lo <= m.lo <= m.peak <= m.hi <= d.hi for m in d.modes)


def test_a_mixture_of_two_spikes_and_a_lognormal_reports_both_spikes_and_the_lognormal_mode() -> None:
    rng = np.random.default_rng(11)
    v = np.concatenate([np.full(4_000, 1000.0), np.full(1_500, 0.0), rng.lognormal(np.log(300), 0.3, 4_500)])
    d = distribution("gpu_milli", v)
    assert [(a.value, a.count) for a in d.atoms] == [(0.0, 1_500), (1000.0, 4_000)]
    (m,) = d.modes
    assert 200 < m.peak < 400 and 0.3 < m.share <= 0.45


def test_a_positive_right_skewed_rest_prefers_a_log_scale_and_a_symmetric_one_does_not() -> None:
    rng = np.random.default_rng(2)
    assert prefers_log_scale(rng.lognormal(5, 1.2, 5_000))
    assert not prefers_log_scale(rng.normal(50, 5, 5_000))
    assert not prefers_log_scale(np.array([0.0, 1.0, 1.0, 2.0, 1000.0]))  # a zero cannot be logged


def test_an_atom_needs_at_least_min_share_of_the_sample() -> None:
    v = np.array([1.0] * 5 + [float(k) + 0.5 for k in range(95)])
    assert [a.value for a in find_atoms(v, min_share=0.05)] == [1.0]
    assert find_atoms(v, min_share=0.06) == ()
    assert len(split_atoms(v, find_atoms(v))) == 95
    with pytest.raises(ValueError, match="min_share"):
        find_atoms(v, min_share=0.0)


@settings(max_examples=150, deadline=None)
@given(atom=st.floats(min_value=-1e6, max_value=1e6, allow_nan=False),
       share=st.floats(min_value=0.10, max_value=1.0),
       n=st.integers(min_value=10, max_value=3_000),
       seed=st.integers(min_value=0, max_value=2**32 - 1),
       skewed=st.booleans())
def test_an_atom_holding_at_least_10_percent_of_the_sample_is_always_reported(
        atom: float, share: float, n: int, seed: int, skewed: bool) -> None:
    rng = np.random.default_rng(seed)
    k = int(np.ceil(share * n))
    rest = rng.lognormal(np.log(abs(atom) + 1), 1.5, n - k) if skewed else rng.normal(atom, 10 + abs(atom) * 0.1, n - k)
    d = distribution("x", np.concatenate([np.full(k, atom), rest]))
    reported = {a.value: a.count for a in d.atoms}
    assert atom in reported and reported[atom] >= k
    assert sum(a.share for a in d.atoms) + sum(m.share for m in d.modes) <= 1.0 + 1e-12
