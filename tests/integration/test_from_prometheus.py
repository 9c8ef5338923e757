"""``ebb simulate --from-prometheus`` against a real Prometheus backfilled with a week of vLLM-shaped series.

The week (:mod:`ebb.testing.vllm_history`): the bundled Azure code slice repeated over 7 days with a
day/night and weekend modulation (491 k requests), served by a synthetic HPA-driven vLLM fleet of 1-3
pods scraped every 30 s (a new pod name per scale-up, one container restart), written as OpenMetrics,
backfilled with ``promtool tsdb create-blocks-from openmetrics`` and served by ``prometheus`` on
loopback. One run reads the week (20,160 steps: two range queries per series), rebuilds the trace,
saves it and simulates it; the same trace is then given as a file, and the saved trace replayed
offline. About 3-4 minutes on a 2-core machine; the figures are printed (``pytest -s``) and recorded
in docs/from-prometheus.md.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ebb.sources.traces.history_file import read_history_trace
from ebb.testing.vllm_history import (
    TOKEN_BOUNDS,
    FleetHistory,
    backfilled_prometheus,
    fleet_history,
    week_trace,
    write_azure_csv,
    write_openmetrics,
)

pytestmark = pytest.mark.slow

START = 1_709_510_400.0  # Monday 2024-03-04 00:00:00 UTC
END = START + 7 * 86_400
POLICIES = "keda,static,oracle"
RANGE = ["--start", "2024-03-04T00:00:00Z", "--end", "2024-03-11T00:00:00Z"]


@dataclass(frozen=True)
class Week:
    url: str
    truth: FleetHistory
    source_csv: Path
    tmp: Path


def _ebb(*args: str) -> subprocess.CompletedProcess[str]:
    res = subprocess.run([sys.executable, "-c", "from ebb.cli.main import main; main()", *args],
                         capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    return res


def _cards(path: Path) -> dict[str, dict[str, Any]]:
    return {c["policy"]: c for c in json.loads(path.read_text())}


@pytest.fixture(scope="module")
def week(prometheus_binary_path: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Week]:
    promtool = shutil.which("promtool") or str(Path(prometheus_binary_path).with_name("promtool"))
    if not Path(promtool).exists():
        msg = "promtool not found (it ships with Prometheus; install it with: apt-get install prometheus)"
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI must provide promtool: {msg}")
        pytest.skip(msg)
    tmp = tmp_path_factory.mktemp("week")
    truth = fleet_history(week_trace(), START)
    om = tmp / "week.om"
    write_openmetrics(truth, om)
    source = tmp / "week.csv"
    write_azure_csv(truth.trace, source, START)
    with backfilled_prometheus(om, tmp / "prom", prometheus=prometheus_binary_path, promtool=promtool) as server:
        om.unlink()  # 300 MB of text: the TSDB holds it now
        yield Week(server.url, truth, source, tmp)


@pytest.fixture(scope="module")
def rebuilt(week: Week) -> tuple[Path, Path, str]:
    """The --from-prometheus run: (its scorecards, its saved trace, its output)."""
    out, saved = week.tmp / "prom.json", week.tmp / "week.ebbh.gz"
    res = _ebb("simulate", "--from-prometheus", week.url, "--selector", 'job="vllm"', "--deployment",
               "serving/vllm-llama", *RANGE, "--policy", POLICIES, "--save-trace", str(saved), "--json", str(out),
               "--max-run-min", "0", "--quiet")
    return out, saved, res.stdout


def test_the_step_is_the_detected_scrape_interval_and_the_week_is_read_in_chunks(rebuilt: tuple[Path, Path, str]
                                                                                 ) -> None:
    _, saved, stdout = rebuilt
    assert "step 30 s (the scrape interval detected" in stdout
    assert "20,160 steps of 30 s" in stdout  # two range queries per series: 11,000 + 9,160 points


def test_arrivals_per_hour_are_within_one_percent_of_the_source_trace(week: Week,
                                                                      rebuilt: tuple[Path, Path, str]) -> None:
    tr = read_history_trace(rebuilt[1])
    truth = np.bincount((week.truth.trace.arrival_s // 3600).astype(int), minlength=168)[:168]
    got = np.bincount((tr.arrival_s // 3600).astype(int), minlength=168)[:168]
    err = np.abs(got - truth) / truth
    print(f"\narrivals: {tr.requests:,} rebuilt of {week.truth.trace.requests:,}; per hour max error "
          f"{100 * err.max():.2f} % (hour {int(err.argmax())}), median {100 * np.median(err):.3f} %")
    assert err.max() < 0.01


def test_token_quantiles_fall_in_the_same_histogram_bucket(week: Week, rebuilt: tuple[Path, Path, str]) -> None:
    tr = read_history_trace(rebuilt[1])
    bounds = np.asarray(TOKEN_BOUNDS)
    for side, truth, got in (("prompt", week.truth.trace.tokens_in, tr.tokens_in),
                             ("output", week.truth.trace.tokens_out, tr.tokens_out)):
        for q in (0.1, 0.5, 0.9, 0.99):
            t, g = np.quantile(truth, q, method="lower"), np.quantile(got, q, method="lower")
            print(f"{side} tokens p{round(100 * q)}: source {t:g}, rebuilt {g:g}")
            assert np.searchsorted(bounds, g) == np.searchsorted(bounds, t)


def test_the_as_run_row_bills_the_integral_of_the_replica_gauge(week: Week, rebuilt: tuple[Path, Path, str]) -> None:
    run = _cards(rebuilt[0])["as-run"]
    integral_h = week.truth.replica_integral_s(START, END) / 3600.0
    # resolution: a change of the gauge is seen at the first step after its sample, one step late at most
    changes = float(np.abs(np.diff(week.truth.replicas)).sum())
    print(f"as-run: {run['gpu_hours']:.4f} GPU-h, gauge integral {integral_h:.4f} GPU-h "
          f"(bound {changes * 30 / 3600:.2f}), {run['slo_violation_pct']:.3f} % TTFT violations measured")
    assert run["fidelity"] == "measured"
    assert abs(run["gpu_hours"] - integral_h) <= changes * 30 / 3600
    assert abs(run["gpu_hours"] - integral_h) <= 1e-3 * integral_h
    # the 2 s SLO sits inside vLLM's (1, 2.5] bucket: the measured share is read off an exponential tail across
    # it, between the true shares above the bucket's two edges (exact where the SLO is a bound)
    counted = week.truth.ttft_s[week.truth.slot_of >= 0]
    above = {b: 100.0 * float((counted > b).mean()) for b in (1.0, 2.0, 2.5)}
    print(f"TTFT > 1 s / 2 s / 2.5 s in the source: {above[1.0]:.3f} / {above[2.0]:.3f} / {above[2.5]:.3f} %")
    assert above[2.5] <= run["slo_violation_pct"] <= above[1.0]
    assert abs(run["slo_violation_pct"] - above[2.0]) <= 0.2


def test_the_simulated_rows_match_those_of_the_same_trace_given_as_a_file(week: Week,
                                                                         rebuilt: tuple[Path, Path, str]) -> None:
    from_file = week.tmp / "file.json"
    _ebb("simulate", "--trace", str(week.source_csv), "--peak-replicas", "off", "--policy", POLICIES,
         "--json", str(from_file), "--max-run-min", "0", "--quiet")
    a, b = _cards(from_file), _cards(rebuilt[0])
    assert set(b) == set(a) | {"as-run"}
    for policy in POLICIES.split(","):
        fa, fb = a[policy], b[policy]
        print(f"{policy}: GPU-h {fa['gpu_hours']:.3f} vs {fb['gpu_hours']:.3f}; viol {fa['slo_violation_pct']:.4f} "
              f"vs {fb['slo_violation_pct']:.4f} %; TTFT p99 {fa['ttft_p99_ms']:.0f} vs {fb['ttft_p99_ms']:.0f} ms; "
              f"E2E p99 {fa['e2e_p99_ms']:.0f} vs {fb['e2e_p99_ms']:.0f} ms")
        assert fb["requests"] == pytest.approx(fa["requests"], rel=1e-4)
        assert fb["gpu_hours"] == pytest.approx(fa["gpu_hours"], rel=0.01)
        assert abs(fb["slo_violation_pct"] - fa["slo_violation_pct"]) <= 0.05
        assert fb["peak_replicas"] == fa["peak_replicas"]
        for key in ("ttft_p99_ms", "e2e_p99_ms"):
            assert fb[key] == pytest.approx(fa[key], rel=0.35)  # sizes drawn within their buckets


def test_the_saved_trace_replays_offline_to_the_same_scorecard(week: Week, rebuilt: tuple[Path, Path, str]) -> None:
    replay = week.tmp / "replay.json"
    res = _ebb("simulate", "--trace", str(rebuilt[1]), "--policy", POLICIES, "--json", str(replay),
               "--max-run-min", "0", "--quiet")
    assert "As run: your fleet used" in res.stdout

    def strip(cards: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        return {p: {k: v for k, v in c.items() if k != "wall_s"} for p, c in cards.items()}

    assert strip(_cards(replay)) == strip(_cards(rebuilt[0]))
    assert not math.isnan(_cards(replay)["as-run"]["gpu_hours"])
