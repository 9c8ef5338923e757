"""The "as run" row: GPU-hours from the replica curve, violations and percentiles from the engine's histograms."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from ebb.model.measured import BucketSeries, MeasuredFleet
from ebb.score.as_run import AS_RUN, as_run, as_run_lines, bucket_exceed, bucket_quantiles, is_as_run
from ebb.score.results import Scorecard

TTFT = (0.5, 1.0, 2.5, 5.0, math.inf)


def _fleet(replicas: list[float], ttft_rows: list[list[float]], step_s: float = 60.0, bin_steps: int = 5
           ) -> MeasuredFleet:
    return MeasuredFleet(start_unix_s=1.7e9, step_s=step_s, replicas=np.array(replicas, dtype=float),
                         bin_s=bin_steps * step_s, ttft_s=BucketSeries(TTFT, np.array(ttft_rows, dtype=float)),
                         e2e_s=None, replicas_from="sum(up)")


def _card(policy: str, gpu_h: float, viol_pct: float) -> Scorecard:
    return Scorecard(policy=policy, trace="t", fidelity="request", requests=100, gpu_hours=gpu_h,
                     cost_usd=4 * gpu_h, slo_violations=0, slo_violation_pct=viol_pct, ttft_p50_ms=1, ttft_p99_ms=2,
                     e2e_p50_ms=3, e2e_p99_ms=4, scale_ups=0, scale_downs=0, dropped_requests=0, peak_replicas=2,
                     mean_replicas=1.5, slo_ttft_ms=2000, slo_e2e_ms=60000, wall_s=0.1)


def test_an_slo_on_a_bucket_bound_counts_exactly_the_buckets_above_it() -> None:
    counts = np.array([[10.0, 5.0, 3.0, 2.0, 1.0]])
    assert bucket_exceed(TTFT, counts, 2.5).tolist() == [3.0]
    assert bucket_exceed(TTFT, counts, 0.0).tolist() == [21.0]


def test_an_slo_inside_a_bucket_reads_an_exponential_tail_between_the_bucket_edges() -> None:
    counts = np.array([[0.0, 0.0, 90.0, 10.0, 0.0]])  # 100 above 1 s, 10 above 2.5 s
    assert bucket_exceed(TTFT, counts, 2.0).tolist() == pytest.approx([100.0 * 0.1 ** (1.0 / 1.5)])
    assert 10.0 <= bucket_exceed(TTFT, counts, 1.2)[0] <= 100.0


def test_with_nothing_above_the_bucket_the_share_above_the_slo_is_linear() -> None:
    counts = np.array([[0.0, 0.0, 10.0, 0.0, 0.0]])  # all in (1.0, 2.5]
    assert bucket_exceed(TTFT, counts, 2.0).tolist() == pytest.approx([10.0 * 0.5 / 1.5])
    assert bucket_exceed(TTFT, np.array([[0.0, 0, 0, 0, 4.0]]), 7.0).tolist() == [4.0]  # +Inf: all above
    assert bucket_exceed((1.0, 2.0), np.array([[3.0, 4.0]]), 9.0).tolist() == [0.0]  # no +Inf: none above


def test_quantiles_follow_prometheus_histogram_quantile() -> None:
    counts = np.array([[10.0, 10.0, 0.0, 0.0, 0.0], [0.0, 0, 0, 0, 0], [0.0, 0, 0, 0, 5.0]])
    q = bucket_quantiles(TTFT, counts, 0.5)
    assert q[0] == pytest.approx(0.5)  # rank 10 ends the first bucket
    assert math.isnan(q[1])
    assert q[2] == 5.0  # the +Inf bucket answers its lower bound
    assert bucket_quantiles(TTFT, counts[:1], 0.75)[0] == pytest.approx(0.75)


def test_the_row_bills_the_integral_of_the_replica_curve_and_judges_ttft_only() -> None:
    m = _fleet([2, 2, 3, 3, 1, 1, 1, 2, 2, 2], [[50, 30, 15, 4, 1], [60, 30, 10, 0, 0]])
    run = as_run(m, np.arange(0, 600, 3.0), trace="fleet", slo_ttft_ms=2500, slo_e2e_ms=60000, gpu_hour_usd=4.0)
    c = run.scorecard
    assert c.policy == AS_RUN and c.fidelity == "measured" and is_as_run(c)
    assert c.gpu_hours == pytest.approx(19 * 60 / 3600)
    assert c.cost_usd == pytest.approx(4 * c.gpu_hours)
    assert c.slo_violations == 5 and c.slo_violation_pct == pytest.approx(100 * 5 / 200)
    assert (c.scale_ups, c.scale_downs, c.peak_replicas) == (2, 1, 3)
    assert c.requests == 200 and math.isnan(c.e2e_p99_ms)
    t = run.timeline
    assert t.bin_s == 300.0 and t.replicas.tolist() == [2.2, 1.6]
    assert t.violations.tolist() == [5, 0] and t.demand_rps.tolist() == pytest.approx([100 / 300] * 2)


def test_the_warm_up_is_neither_billed_nor_judged() -> None:
    m = _fleet([4] * 5 + [1] * 5, [[0, 0, 0, 0, 9], [10, 0, 0, 0, 0]])
    c = as_run(m, np.zeros(0), trace="t", slo_ttft_ms=2000, slo_e2e_ms=60000, gpu_hour_usd=1, warmup_s=300).scorecard
    assert c.gpu_hours == pytest.approx(5 * 60 / 3600) and c.slo_violations == 0 and c.warmup_s == 300


def test_a_fleet_without_a_ttft_histogram_has_no_row() -> None:
    m = replace(_fleet([1] * 5, [[1, 0, 0, 0, 0]]), ttft_s=None)
    with pytest.raises(ValueError, match="TTFT"):
        as_run(m, np.zeros(0), trace="t", slo_ttft_ms=2000, slo_e2e_ms=60000, gpu_hour_usd=1)


def test_the_verdict_line_says_how_much_less_ebb_would_have_used_than_the_fleet_did() -> None:
    measured = replace(_card(AS_RUN, 100.0, 0.5), fidelity="measured")
    lines = as_run_lines(measured, [_card("hpa", 90, 0.0), _card("ebb", 69.0, 0.01), measured])
    assert lines[0].startswith("As run: your fleet used 100.00 GPU-h at 0.500 % TTFT violations (measured")
    assert lines[1] == ("Ebb (ebb) would have used 31 % fewer GPU-hours than your fleet did (69.00 vs 100.00 GPU-h), "
                        "at 0.010 % simulated violations vs 0.500 % measured.")
    without_ebb = as_run_lines(measured, [_card("static", 120, 0.0), measured])
    assert "The pick, static, would have used 20 % more GPU-hours" in without_ebb[1]
