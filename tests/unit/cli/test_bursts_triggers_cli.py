"""``ebb bursts --triggers``: a trigger file evaluated over the CSV's columns at the last sample."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from ebb.cli.main import app
from ebb.errors import ConfigError, InputError

TRIGGER = """\
name: hot
any:
  - {signal: sm_pct, op: ">=", threshold: 75, sustain_s: 2, quantile: 0.5}
  - {signal: lat_ms, op: ">", threshold: 12, sustain_s: 0, quantile: 0.99}
"""


def _files(tmp_path: Path, sm: float, lat: float) -> tuple[Path, Path]:
    csv = tmp_path / "m.csv"
    # 5 s at 10 Hz: sm_pct steps from 10 to ``sm`` at t = 2 s; lat_ms is constant ``lat``.
    csv.write_text("t,sm_pct,lat_ms\n" + "".join(
        f"{i / 10:.1f},{10 if i < 20 else sm},{lat}\n" for i in range(50)))
    trig = tmp_path / "t.yaml"
    trig.write_text(TRIGGER)
    return csv, trig


def test_a_rule_held_for_its_sustain_fires_the_trigger(tmp_path: Path) -> None:
    csv, trig = _files(tmp_path, sm=90, lat=5)
    res = CliRunner().invoke(app, ["bursts", "--input", str(csv), "--triggers", str(trig), "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert out["bursts"] is None and out["trigger"]["name"] == "hot" and out["trigger"]["fired"] is True
    sm, lat = out["trigger"]["rules"]
    # The 1 s window's median crosses 75 about 0.5 s after the step at 2 s: ~2.4 s held >= 2 s.
    assert sm["holds"] is True and sm["held_s"] >= 2.0 and lat["holds"] is False


def test_below_threshold_the_trigger_does_not_fire_and_bursts_still_run(tmp_path: Path) -> None:
    csv, trig = _files(tmp_path, sm=50, lat=5)
    res = CliRunner().invoke(app, ["bursts", "--input", str(csv), "--value-col", "sm_pct", "--threshold", "40",
                                   "--min-duration-ms", "200", "--triggers", str(trig), "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert out["trigger"]["fired"] is False and len(out["bursts"]) == 1
    table = CliRunner().invoke(app, ["bursts", "--input", str(csv), "--triggers", str(trig)])
    assert table.exit_code == 0 and "does not fire" in table.output


def test_a_signal_missing_from_the_csv_names_the_column(tmp_path: Path) -> None:
    csv, trig = _files(tmp_path, sm=90, lat=5)
    trig.write_text(TRIGGER.replace("lat_ms", "nccl_ms"))
    res = CliRunner().invoke(app, ["bursts", "--input", str(csv), "--triggers", str(trig)])
    assert isinstance(res.exception, InputError) and "'nccl_ms'" in str(res.exception)


def test_neither_bursts_nor_triggers_asked_is_a_config_error(tmp_path: Path) -> None:
    csv, _ = _files(tmp_path, sm=90, lat=5)
    res = CliRunner().invoke(app, ["bursts", "--input", str(csv)])
    assert isinstance(res.exception, ConfigError) and "--triggers" in str(res.exception)


def test_triggers_default_evaluates_the_notes_chapter_one_triggers(tmp_path: Path) -> None:
    csv = tmp_path / "gpu.csv"
    # 70 s at 10 Hz: SM busy at 80 % throughout, PCIe and AllReduce quiet → the SM rule (≥ 75 % for 60 s) fires.
    csv.write_text("t,gpm_sm_util_pct,pcie_bw_util_pct,nccl_allreduce_latency_ms\n" + "".join(
        f"{i / 10:.1f},80,20,3\n" for i in range(700)))
    res = CliRunner().invoke(app, ["bursts", "--input", str(csv), "--triggers", "default", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)["trigger"]
    assert out["name"] == "chapter1-scale-out" and out["fired"] is True
    assert [r["holds"] for r in out["rules"]] == [True, False, False]


def test_bursts_and_a_trigger_read_the_csv_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Before, ``--threshold`` with ``--triggers`` opened and parsed the CSV twice."""
    csv, trig = _files(tmp_path, sm=90, lat=5)
    opened: list[Path] = []
    path_open = Path.open

    def counting(self: Path, *args: Any, **kwargs: Any) -> Any:
        if self == csv:
            opened.append(self)
        return path_open(self, *args, **kwargs)
    monkeypatch.setattr(Path, "open", counting)
    res = CliRunner().invoke(app, ["bursts", "--input", str(csv), "--value-col", "sm_pct", "--threshold", "50",
                                   "--min-duration-ms", "200", "--triggers", str(trig), "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert len(out["bursts"]) == 1 and out["trigger"]["fired"] is True
    assert len(opened) == 1


def test_a_csv_saved_with_a_byte_order_mark_is_read(tmp_path: Path) -> None:
    """Spreadsheet exports start with a BOM; before, ebb bursts read it into the first name: "no column 't'"."""
    csv, trig = _files(tmp_path, sm=90, lat=5)
    csv.write_bytes(b"\xef\xbb\xbf" + csv.read_bytes())
    res = CliRunner().invoke(app, ["bursts", "--input", str(csv), "--triggers", str(trig), "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["trigger"]["fired"] is True
