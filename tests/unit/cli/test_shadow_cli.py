"""``ebb shadow report``: verdict first, both GPU-hour figures and the risk minutes, JSON and HTML, and one
``error:`` line with exit 2 for each bad input."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ebb.cli.main import app
from ebb.cli.shadow import parse_since
from ebb.errors import InputError
from ebb.ledger import SqliteLedger
from ebb.model.decisions import CycleRecord, DecisionRecord
from ebb.model.ids import CycleId, DecisionId, RunId
from ebb.model.shadow import SLOTS, ShadowMinute, shadow_cycle

runner = CliRunner()


def minute(start_s: int, as_run: int, ebb: int, p99: float) -> ShadowMinute:
    return ShadowMinute(start_s=start_s, target="default/vllm", as_run=(as_run,) * SLOTS, ebb=(ebb,) * SLOTS,
                        ttft_p99_ms=(p99,) * SLOTS, minute_ttft_p99_ms=p99, completions=120.0, slo_ttft_ms=2000.0,
                        policy="ebb:profile=balanced")


@pytest.fixture()
def ledger(tmp_path: Path) -> Path:
    path = tmp_path / "ledger.sqlite"
    now = int(time.time()) // SLOTS * SLOTS  # at the fixture, not at import: the tests read "the last 4 minutes"
    with SqliteLedger(path) as led:
        for k in range(10):  # ten minutes, the last three near the SLO with Ebb below the fleet
            start = now - SLOTS * (10 - k)
            led.append_cycle(shadow_cycle(minute(start, 6, 4, 1700.0 if k >= 7 else 300.0), RunId("rec")))
        d = DecisionRecord(DecisionId("rec-1"), CycleId("rec-c1"), RunId("rec"), (now - 600) * 10**9, "default/vllm",
                           "scale_down", 6, 4, reasons=("comeback: 4 replicas hold a 62 s rise",))
        led.append_cycle(CycleRecord(CycleId("rec-c1"), RunId("rec"), d.ts_ns, "ebb", (d,)))
        led.append_cycle(shadow_cycle(minute(now - 30 * 86_400, 2, 2, 100.0), RunId("old")))
    return path


def test_the_report_prints_the_verdict_first_then_both_gpu_hours_and_the_risk_minutes(ledger: Path,
                                                                                     tmp_path: Path) -> None:
    page = tmp_path / "shadow.html"
    res = runner.invoke(app, ["shadow", "report", "--ledger", str(ledger), "--html", str(page)])
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert lines[0].startswith("Do not switch: Ebb would have held fewer replicas than your fleet in 3 risk minutes")
    assert "as run 1.000, as Ebb would have run 0.667 (33.3% fewer)" in lines[1]
    assert lines[2].startswith("  risk minutes  3 of 10 (180 risk seconds)")
    assert "run rec, target default/vllm" in res.output and "rec-1 scale_down 6 → 4" in res.output
    text = page.read_text(encoding="utf-8")
    assert "<svg" in text and "<script" not in text and "risk minutes" in text and "rec-1 scale_down" in text


def test_json_output_holds_the_figures(ledger: Path) -> None:
    res = runner.invoke(app, ["shadow", "report", "--ledger", str(ledger), "-o", "json", "--near", "0.9"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert doc["run_id"] == "rec" and doc["verdict"] == "keep watching" and doc["risk_minutes"] == 0
    assert abs(doc["as_run_gpu_h"] - 1.0) < 1e-9 and abs(doc["saving"] - 1 / 3) < 1e-9


def test_since_keeps_the_recent_rows_and_run_id_picks_the_run(ledger: Path) -> None:
    recent = runner.invoke(app, ["shadow", "report", "--ledger", str(ledger), "--since", "4m", "-o", "json"])
    assert json.loads(recent.output)["compared_s"] in (3 * SLOTS, 4 * SLOTS)  # the minute at the cut may count
    old = runner.invoke(app, ["shadow", "report", "--ledger", str(ledger), "--run-id", "old", "--since", "all"])
    assert old.exit_code == 0 and "as run 0.033, as Ebb would have run 0.033" in old.output


@pytest.mark.parametrize(("args", "words"), [
    (["--since", "7 parsecs"], "--since '7 parsecs': not a duration"),
    (["--run-id", "nope"], "no shadow rows for run 'nope'"),
    (["--run-id", "old"], "no shadow row of run old in the last 7d"),
    (["--near", "2"], "--near 2.0: must be within (0, 1]"),
    (["-o", "yaml"], "-o 'yaml'"),
])
def test_bad_input_is_one_error_line_naming_it_and_the_fix_with_exit_2(ledger: Path, args: list[str],
                                                                       words: str) -> None:
    res = runner.invoke(app, ["shadow", "report", "--ledger", str(ledger), *args])
    assert res.exit_code == 2, res.output
    (line,) = [ln for ln in res.output.splitlines() if ln.strip()]
    assert line.startswith("error: ") and words in line and "fix" in line


def test_a_missing_ledger_or_one_without_shadow_rows_is_refused(tmp_path: Path) -> None:
    res = runner.invoke(app, ["shadow", "report", "--ledger", str(tmp_path / "none.sqlite")])
    assert res.exit_code == 2 and "no ledger file" in res.output and not (tmp_path / "none.sqlite").exists()
    SqliteLedger(tmp_path / "empty.sqlite").close()
    res = runner.invoke(app, ["shadow", "report", "--ledger", str(tmp_path / "empty.sqlite")])
    assert res.exit_code == 2 and "no shadow rows for any run" in res.output and "--mode recommend" in res.output


def test_since_reads_each_unit_and_all() -> None:
    assert parse_since("90m") == 5400 and parse_since("2w") == 1_209_600 and parse_since("all") is None
    for bad in ("", "7", "-1d", "0h", "d"):
        with pytest.raises(InputError):
            parse_since(bad)
