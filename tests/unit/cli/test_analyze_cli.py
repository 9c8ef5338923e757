"""`ebb analyze` end to end: terminal summary, HTML report, and clear errors for bad input."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from ebb.cli.main import app  # type: ignore[attr-defined]  # re-exported by registration

ALIBABA_DAY1 = (Path(__file__).resolve().parents[4] / "shared" / "data" / "traces" / "datacenter-util-aggregates"
                / "alibaba2018" / "day_1" / "machine_usage_day_1_grouped_10_seconds.csv")
runner = CliRunner()


def small_csv(tmp_path: Path) -> Path:
    rng = np.random.default_rng(0)
    n = 2_000
    cpu = np.clip(np.where(rng.random(n) < 0.6, rng.normal(45, 4, n), rng.normal(86, 2, n)), 0, 100)
    mem = np.clip(0.5 * cpu + rng.normal(20, 3, n), 0, 100)
    lines = ["t,cpu_util_pct,mem_util_pct"] + [f"{i * 0.1:.1f},{c:.3f},{m:.3f}" for i, (c, m) in enumerate(zip(cpu, mem))]
    p = tmp_path / "node.csv"
    p.write_text("\n".join(lines) + "\n")
    return p


def test_analyze_prints_modes_and_coupled_load_and_writes_a_self_contained_html(tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    r = runner.invoke(app, ["analyze", str(small_csv(tmp_path)), "--html", str(out)])
    assert r.exit_code == 0, r.output
    assert "cpu_util_pct" in r.output and "coupled load: cpu_util_pct ~ mem_util_pct" in r.output
    assert len(re.findall(r"\(\d+\.\d%\)", r.output.split("mem_util_pct")[0])) == 2  # two cpu modes
    page = out.read_text()
    assert page.startswith("<!DOCTYPE html>") and "<svg" in page
    assert not re.search(r"(src|href)=\"(https?:)?//", page) and "<script" not in page


def test_several_files_become_nodes_in_a_heat_map(tmp_path: Path) -> None:
    a = small_csv(tmp_path)
    b = tmp_path / "other.csv"
    b.write_text(a.read_text())
    r = runner.invoke(app, ["analyze", str(a), str(b), "--columns", "cpu_util_pct"])
    assert r.exit_code == 0, r.output
    assert "heat cpu_util_pct" in r.output and "other" in r.output


def test_a_malformed_file_exits_2_naming_the_line(tmp_path: Path) -> None:
    p = tmp_path / "bad.csv"
    p.write_text("t,cpu_util_pct\n0,1\n1,-4\n")
    r = runner.invoke(app, ["analyze", str(p)])
    assert r.exit_code != 0
    assert isinstance(r.exception, Exception) and "bad.csv:3" in str(r.exception)


@pytest.mark.skipif(not ALIBABA_DAY1.is_file(), reason=f"shared Alibaba 2018 day-1 file not present at {ALIBABA_DAY1}")
def test_the_alibaba_2018_day_one_file_is_analyzed_with_a_10_second_step(tmp_path: Path) -> None:
    r = runner.invoke(app, ["analyze", str(ALIBABA_DAY1), "--step-s", "10", "--html", str(tmp_path / "a.html")])
    assert r.exit_code == 0, r.output
    assert "8,641" in r.output and "86,400.0 s" in r.output
    assert "coupled load: net_in ~ net_out" in r.output


POD_LIST = (Path(__file__).resolve().parents[4] / "shared" / "data" / "traces" / "alibaba-gpu-2023"
            / "openb_pod_list_default.csv")


def test_a_datetime_time_column_is_read_as_simulate_reads_it(tmp_path: Path) -> None:
    from ebb.sources.traces import load_trace

    p = tmp_path / "dt.csv"
    p.write_text("time,count,gpu_util_pct\n2023-11-16T18:17:03Z,3,40\n2023-11-16 18:17:13,5,60\n"
                 "2023-11-16T19:17:13+01:00,2,50\n")
    r = runner.invoke(app, ["analyze", str(p), "--time-col", "time", "--columns", "gpu_util_pct"])
    assert r.exit_code == 0, r.output
    assert "3 samples, 1 series, span 10.0 s" in r.output
    counts = load_trace(p, "csv", time_col="time", count_col="count", bin_s=10.0)
    assert counts.bin_s * len(counts.counts) >= 10.0  # simulate accepts the same column


def test_a_bad_datetime_stops_analyze_naming_the_line_and_the_accepted_forms(tmp_path: Path) -> None:
    p = tmp_path / "dt.csv"
    p.write_text("time,gpu_util_pct\n2023-11-16T18:17:03Z,40\nyesterday,60\n")
    r = runner.invoke(app, ["analyze", str(p)])
    assert r.exit_code != 0
    message = str(r.exception)
    assert "dt.csv:3" in message and "'yesterday'" in message and "ISO-8601" in message


@pytest.mark.skipif(not POD_LIST.is_file(), reason=f"shared Alibaba GPU 2023 pod list not present at {POD_LIST}")
def test_the_alibaba_pod_lists_gpu_milli_shows_1000_and_0_as_atoms(tmp_path: Path) -> None:
    out = tmp_path / "pods.html"
    r = runner.invoke(app, ["analyze", str(POD_LIST), "--time-col", "creation_time",
                            "--columns", "gpu_milli,cpu_milli", "--html", str(out)], env={"COLUMNS": "240"})
    assert r.exit_code == 0, r.output
    assert "1,000: 48.9%" in r.output and " 0: 13.3%" in r.output
    page = out.read_text()
    assert page.count(">share of samples</text>") == 2 and "cpu_milli (log scale)</text>" in page
