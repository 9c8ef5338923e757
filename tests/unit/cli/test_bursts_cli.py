"""`ebb bursts` end to end through the shared Typer app."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ebb.cli.main import app
from ebb.errors import ConfigError, InputError


def _csv(tmp_path: Path, rows: list[str], header: str = "t,util_gpu") -> Path:
    p = tmp_path / "u.csv"
    p.write_text("\n".join([header, *rows]) + "\n")
    return p


def _spiky(tmp_path: Path) -> Path:
    rows = [f"{i * 0.05:.2f},{99 if 40 <= i < 50 else 10}" for i in range(120)]
    return _csv(tmp_path, rows)


def test_json_output_lists_each_burst_with_start_end_peak_and_delay(tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["bursts", "--input", str(_spiky(tmp_path)), "--threshold", "95",
                                   "--min-duration-ms", "200", "--json"])
    assert res.exit_code == 0, res.output
    (b,) = json.loads(res.output)
    assert set(b) == {"start_s", "end_s", "peak", "detect_delay_ms"}
    assert b["start_s"] == pytest.approx(2.1) and b["detect_delay_ms"] == 200.0
    assert b["peak"] == pytest.approx(99.0, rel=0.01)


def test_the_default_output_is_a_table(tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["bursts", "--input", str(_spiky(tmp_path)), "--threshold", "95",
                                   "--min-duration-ms", "200"])
    assert res.exit_code == 0 and "1 burst in" in res.output and "detect_delay_ms" in res.output


def test_bad_input_exits_with_the_error_not_a_traceback(tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["bursts", "--input", str(_csv(tmp_path, ["0,x"])),
                                   "--threshold", "1", "--min-duration-ms", "0"])
    assert res.exit_code != 0 and isinstance(res.exception, InputError)


def test_a_window_that_is_not_a_multiple_of_the_bucket_is_a_config_error(tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["bursts", "--input", str(_spiky(tmp_path)), "--threshold", "1",
                                   "--min-duration-ms", "0", "--window-ms", "250", "--bucket-ms", "100"])
    assert isinstance(res.exception, ConfigError)
