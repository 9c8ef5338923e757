"""`ebb demo`: without --live it points at the simulator; an unknown engine is refused before anything starts."""

from __future__ import annotations

from typer.testing import CliRunner

from ebb.cli.main import app

runner = CliRunner()


def test_demo_without_live_points_at_the_simulator() -> None:
    res = runner.invoke(app, ["demo"])
    assert res.exit_code == 0 and "--live" in res.output


def test_demo_with_an_unknown_engine_says_which_engines_exist() -> None:
    res = runner.invoke(app, ["demo", "--live", "--engine", "vllm"])
    assert res.exit_code != 0 and "--engine must be one of" in str(res.exception)
