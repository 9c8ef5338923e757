"""`ebb demo`: without --live it points at the simulator; an unknown engine is refused before anything starts."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from ebb.cli.main import app
from ebb.errors import ConfigError

runner = CliRunner()


def test_demo_without_live_points_at_the_simulator() -> None:
    res = runner.invoke(app, ["demo"])
    assert res.exit_code == 0 and "--live" in res.output


def test_demo_with_an_unknown_engine_says_which_engines_exist() -> None:
    res = runner.invoke(app, ["demo", "--live", "--engine", "vllm"])
    assert res.exit_code != 0 and "--engine must be one of" in str(res.exception)


def test_an_unknown_source_is_refused_naming_the_flag_and_the_choices(tmp_path: Path) -> None:
    # #35: --source foo was accepted silently.
    res = runner.invoke(app, ["demo", "--live", "--source", "foo", "--workdir", str(tmp_path / "live")])
    assert isinstance(res.exception, ConfigError)
    assert "--source 'foo'" in str(res.exception) and "auto, prometheus, agents" in str(res.exception)
    assert "fix:" in str(res.exception) and not (tmp_path / "live").exists()


def test_a_start_past_the_end_of_the_trace_is_refused_with_the_trace_length(tmp_path: Path) -> None:
    # #35: --start-s 999999 was accepted silently (the replay would send nothing).
    res = runner.invoke(app, ["demo", "--live", "--start-s", "999999", "--workdir", str(tmp_path / "live")])
    assert isinstance(res.exception, ConfigError)
    text = str(res.exception)
    assert "--start-s 999999" in text and "azure-code" in text and "1,788 s long" in text and "fix:" in text
    assert not (tmp_path / "live").exists()
