"""CLI conventions kubectl, helm and ruff users expect: --version, -h, NO_COLOR, refused enum values."""

from __future__ import annotations

import re
import sys
from importlib.metadata import version
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ebb.cli.app import app
from ebb.cli.main import main  # importing it registers every command on app

DATA = Path(__file__).resolve().parents[2] / "data" / "lint"
runner = CliRunner()

# Forced colour on a capable terminal, so that only NO_COLOR can turn colour off.
_COLOUR_ENV = {"FORCE_COLOR": "1", "TERM": "xterm-256color", "COLORTERM": "truecolor",
               "TTY_COMPATIBLE": None, "TTY_INTERACTIVE": None}


def _colour_codes(text: str) -> set[int]:
    """SGR parameters that set a foreground or background colour (30-49, 90-107); bold/dim are not colour."""
    params = {int(p) for m in re.findall(r"\x1b\[([0-9;]*)m", text) for p in m.split(";") if p}
    return {p for p in params if 30 <= p <= 49 or 90 <= p <= 107}


def test_version_prints_the_installed_package_version_and_exits_zero() -> None:
    res = runner.invoke(app, ["--version"])
    assert res.exit_code == 0, res.output
    assert res.output == f"ebb {version('ebb')}\n"


@pytest.mark.parametrize("command", [[], ["lint"], ["run"]])
def test_dash_h_is_help_on_the_app_and_on_subcommands(command: list[str]) -> None:
    short = runner.invoke(app, [*command, "-h"])
    long = runner.invoke(app, [*command, "--help"])
    assert short.exit_code == 0 and long.exit_code == 0, short.output
    assert "Usage: ebb" in short.output and short.output == long.output


def test_no_color_turns_colour_off_in_findings_errors_and_help() -> None:
    for args in (["lint", str(DATA / "EBB102" / "bad.json")], ["lint", "--format", "xml", "."], ["lint", "-h"]):
        coloured = runner.invoke(app, args, env={**_COLOUR_ENV, "NO_COLOR": None})
        assert _colour_codes(coloured.output), (args, coloured.output)  # the control: colour is on
        empty = runner.invoke(app, args, env={**_COLOUR_ENV, "NO_COLOR": ""})  # set but empty: still colour
        assert _colour_codes(empty.output), args
        plain = runner.invoke(app, args, env={**_COLOUR_ENV, "NO_COLOR": "1"})
        assert plain.exit_code == coloured.exit_code
        assert _colour_codes(plain.output) == set(), (args, plain.output)


@pytest.mark.parametrize("extra", [[], ["--engine", "vllm"], ["--react-ms", "50"]])
def test_run_refuses_an_unknown_source_first_in_one_line(extra: list[str], tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["ebb", "run", "--source", "foo", "--cycles", "1", *extra])
    with pytest.raises(SystemExit) as exc:
        main()
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--source must be agents or prometheus, got 'foo'" in err
    assert list(tmp_path.iterdir()) == []  # refused before anything starts (no ledger file)
