"""The HTML report's histograms carry labelled axes with ticks, and draw atoms as spikes."""

from __future__ import annotations

import itertools
import re

import numpy as np

from ebb.analysis import analyze
from ebb.analysis.report_html import render_html
from ebb.sources.base import batch_from_columns


def page_for(values: np.ndarray, name: str) -> str:
    ts = np.arange(len(values), dtype=np.int64) * 10**9
    return render_html(analyze(batch_from_columns(ts, {name: values})))


def test_a_histogram_has_a_y_axis_labelled_share_of_samples_with_percent_ticks_and_an_x_axis_named_after_the_column() -> None:
    rng = np.random.default_rng(0)
    page = page_for(rng.normal(500, 50, 4_000), "gpu_milli")
    svg = page[page.index("<svg"):page.index("</svg>")]
    assert ">share of samples</text>" in svg and 'transform="rotate(-90' in svg
    ticks = re.findall(r'text-anchor="end">([\d.]+) %</text>', svg)
    assert len(ticks) >= 3 and float(ticks[0]) == 0.0
    assert all(float(b) > float(a) for a, b in itertools.pairwise(ticks))
    assert svg.endswith('text-anchor="middle">gpu_milli</text>')  # the last element: the x label


def test_atoms_are_drawn_as_spikes_whose_height_is_their_share_and_listed_in_a_table() -> None:
    rng = np.random.default_rng(1)
    page = page_for(np.concatenate([np.full(500, 1000.0), np.full(200, 0.0), rng.uniform(100, 900, 300)]), "gpu_milli")
    assert page.count("<title>atom ") == 2
    assert "<title>atom 1e+03: 50.0%</title>" in page or "<title>atom 1,000: 50.0%</title>" in page
    assert "<th>atom</th>" in page and "<td>50.0%</td>" in page


def test_a_log_scaled_rest_says_so_on_its_x_axis_and_still_draws_an_atom_at_zero() -> None:
    rng = np.random.default_rng(2)
    page = page_for(np.concatenate([np.zeros(1_000), rng.lognormal(8, 1.5, 5_000)]), "memory_mib")
    assert "memory_mib (log scale)</text>" in page
    assert "<title>atom 0: 16.7%</title>" in page
