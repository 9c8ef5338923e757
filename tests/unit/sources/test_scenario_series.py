"""A cluster scenario's trace sources read as per-second arrays: cut or padded, errors naming the service."""

from __future__ import annotations

import numpy as np
import pytest

from ebb.config.scenario import parse_scenario
from ebb.errors import InputError
from ebb.model.ids import TraceName
from ebb.model.trace import CountSeries, RequestTrace
from ebb.sources.traces import bundled_trace
from ebb.sources.traces.scenario_series import TraceSeries, per_second


def test_a_request_log_is_binned_by_arrival_second_and_cut_or_padded() -> None:
    ones = np.ones(4, dtype=np.int64)
    log = RequestTrace(TraceName("log"), np.array([0.1, 0.9, 1.5, 3.2]), ones, ones)
    assert per_second(log, 5).tolist() == [2, 1, 0, 1, 0]
    assert per_second(log, 2).tolist() == [2, 1]


def test_counts_of_wider_bins_land_at_their_bin_start() -> None:
    counts = CountSeries(TraceName("c"), np.array([4, 6], dtype=np.int64), bin_s=2.0)
    assert per_second(counts, 5).tolist() == [4, 0, 6, 0, 0]
    assert per_second(CountSeries(TraceName("c"), np.array([1, 2, 3], dtype=np.int64)), 2).tolist() == [1, 2]


def test_bundled_arrivals_match_the_bundled_slice_binned_per_second() -> None:
    sc = parse_scenario("""
duration_s: 60
zones: {a: 4}
services:
  - {name: code, namespace: shop, class: order-fulfilment, arrivals: {bundled: azure-code}}
""", source="s.yaml")
    got = TraceSeries().arrivals(sc, sc.services, 60)
    assert got.shape == (1, 60) and got.dtype == np.int32
    assert got[0].tolist() == per_second(bundled_trace("azure-code"), 60).tolist()


def test_an_unreadable_trace_names_the_service_and_the_scenario() -> None:
    sc = parse_scenario("""
duration_s: 60
zones: {a: 4}
services:
  - {name: web, namespace: shop, class: order-fulfilment, arrivals: {trace: no-such-file.csv}}
""", source="s.yaml")
    with pytest.raises(InputError, match="service 'web'") as exc:
        TraceSeries().arrivals(sc, sc.services, 60)
    assert "s.yaml" in str(exc.value) and "arrivals:" in str(exc.value)
