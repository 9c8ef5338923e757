"""The terminal scorecard of ``ebb simulate`` fits 80 columns: nothing cut, long specs in a legend."""

from __future__ import annotations

import io

import numpy as np
import pytest
from rich.console import Console

from ebb.cli.simulate import _table
from ebb.score.results import PolicyRun, Scorecard, Timeline
from ebb.sim.baselines.oracle import OracleSearch
from ebb.sim.compare import Comparison

LONG = "ebb:profile=balanced,canary=on,min=1,max=40,budget=0.001,slack_fraction=0.5"


def _card(policy: str, gpu_hours: float, pct: float) -> Scorecard:
    return Scorecard(policy=policy, trace="azure-code", fidelity="request", requests=12_345_678,
                     gpu_hours=gpu_hours, cost_usd=gpu_hours * 4, slo_violations=123_456, slo_violation_pct=pct,
                     ttft_p50_ms=1234.0, ttft_p99_ms=123_456.0, e2e_p50_ms=23_456.0, e2e_p99_ms=654_321.0,
                     scale_ups=1234, scale_downs=1233, dropped_requests=12_345, peak_replicas=1234,
                     mean_replicas=56.7, slo_ttft_ms=2000.0, slo_e2e_ms=60000.0, wall_s=12.0,
                     misjudged_scale_downs=321, canary_passes=111, canary_aborts=22)


def _cmp(policies: list[tuple[str, float, float]], *, requests: int = 12_345_678,
         duration_s: float = 58.6 * 86400) -> Comparison:
    one = np.zeros(1)
    tl = Timeline(t_s=one, bin_s=1.0, demand_rps=one, replicas=one, ready_replicas=one, ttft_p50_ms=one,
                  ttft_p99_ms=one, e2e_p50_ms=one, e2e_p99_ms=one, violations=np.zeros(1, dtype=np.int64))
    oracle = OracleSearch(schedule=np.zeros(1, dtype=np.int64), headroom=1.0, smoothing_s=0, replica_seconds=0.0,
                          violation_pct=0.0, tried=1)
    return Comparison(runs=tuple(PolicyRun(_card(*p), tl) for p in policies), workload_name="azure-code",
                      requests=requests, duration_s=duration_s, load_scale=1.0, fidelity="request", oracle=oracle)


POLICIES = [("hpa:target=0.5", 12_345.67, 0.05), ("hpa:target=0.8", 9_876.54, 1.234), ("keda:threshold=40", 11_111.11, 0.2),
            ("static", 20_000.0, 0.0), (LONG, 8_765.43, 0.03), ("ebb", 9_000.0, 12.345), ("oracle", 7_000.0, 0.0)]


def _printed(cmp: Comparison, width: int) -> str:
    out = io.StringIO()
    console = Console(width=width, file=out, color_system=None)
    table, legend = _table(cmp, width)
    console.print(table)
    for line in legend:
        console.print(line)
    return out.getvalue()


@pytest.mark.parametrize("width", [80, 100, 150])
def test_the_scorecard_fits_the_terminal_without_cutting_a_cell(width: int) -> None:
    text = _printed(_cmp(POLICIES), width)
    assert all(len(line) <= width for line in text.splitlines())
    assert "…" not in text
    # The headline numbers survive whole, and the long spec is spelled out once in the legend.
    for gpu_h in ("12,345.67", "9,876.54", "8,765.43", "20,000.00"):
        assert gpu_h in text
    assert "P1 = keda:threshold=40" in text and "P2 = " + LONG in text.replace("\n", "")
    assert "vs HPA" in text


def test_at_80_columns_the_p99s_stay_and_the_legend_says_columns_were_left_out() -> None:
    text = _printed(_cmp(POLICIES), 80)
    assert "123456" in text and "654321" in text  # TTFT and E2E p99
    assert "every number is in --json" in text
    wide = _printed(_cmp(POLICIES), 200)
    assert "canary" in wide and "every number is in --json" not in wide


def test_the_title_prints_spans_and_counts_in_human_units() -> None:
    assert "12.3 M requests over 58.6 days" in _printed(_cmp(POLICIES), 150).replace("\n", " ")
    one_row = _printed(_cmp(POLICIES[:1], requests=5050, duration_s=1.0), 150)
    assert "5,050 requests over 1 s" in one_row
