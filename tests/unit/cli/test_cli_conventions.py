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


def _ebb(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> "subprocess.CompletedProcess[str]":
    import os
    import subprocess
    return subprocess.run([sys.executable, "-c", "from ebb.cli.main import main; main()", *args],
                          capture_output=True, text=True, timeout=300, cwd=cwd, stdin=subprocess.DEVNULL,
                          env={**os.environ, "COLUMNS": "100", **(env or {})})


def test_completion_scripts_are_printed_for_bash_and_zsh() -> None:
    import os
    import subprocess
    ebb = Path(sys.executable).with_name("ebb")  # the console script: completion is keyed on its name
    for shell, needle in (("bash", "complete -o default -F _ebb_completion ebb"), ("zsh", "compdef _ebb_completion ebb")):
        res = subprocess.run([str(ebb), "--show-completion", shell], capture_output=True, text=True, timeout=120,
                             stdin=subprocess.DEVNULL, env={**os.environ, "_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION": "1"})
        assert res.returncode == 0 and needle in res.stdout, (shell, res.stdout[-500:], res.stderr[-500:])


def test_every_option_reads_its_ebb_environment_variable_and_the_flag_wins(tmp_path: Path) -> None:
    missing = tmp_path / "from-env.sqlite"
    res = runner.invoke(app, ["explain", "--list"], env={"EBB_EXPLAIN_LEDGER": str(missing)})
    assert res.exit_code == 2 and "from-env.sqlite" in res.output
    flag = runner.invoke(app, ["explain", "--list", "--ledger", str(tmp_path / "flag.sqlite")],
                         env={"EBB_EXPLAIN_LEDGER": str(missing)})
    assert flag.exit_code == 2 and "flag.sqlite" in flag.output and "from-env" not in flag.output


def test_an_ebb_version_variable_does_not_turn_every_command_into_version() -> None:
    res = runner.invoke(app, ["explain"], env={"EBB_VERSION": "1.2.3"})
    assert res.exit_code == 2 and "--list" in res.output and not res.output.startswith("ebb ")


@pytest.mark.parametrize("to_stdout", [["--json", "-"], ["-o", "json"]])
def test_json_on_stdout_is_only_the_json_and_the_human_output_goes_to_stderr(tmp_path: Path,
                                                                              to_stdout: list[str]) -> None:
    import json

    res = _ebb("simulate", "--trace", "azure-conv", "--peak-replicas", "4", "--policy", "hpa,static", *to_stdout,
               cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-2000:]
    cards = json.loads(res.stdout)
    assert [c["policy"] for c in cards] == ["hpa", "static"]
    assert "hpa" in res.stderr and "scorecards written" not in res.stderr
    assert list(tmp_path.iterdir()) == []  # no file named "-"


def test_logs_are_human_on_a_terminal_and_json_in_a_pipe_unless_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    from ebb.cli.run import _json_logs

    for tty, asked, want in ((True, None, False), (False, None, True), (True, True, True), (False, False, False)):
        monkeypatch.setattr(sys.stderr, "isatty", lambda tty=tty: tty)
        assert _json_logs(asked) is want, (tty, asked)


def test_dash_o_json_is_the_json_of_every_printing_command_and_other_values_are_refused(tmp_path: Path) -> None:
    import json

    from ebb.errors import ConfigError
    from ebb.ledger import SqliteLedger
    from ebb.model.decisions import CycleRecord, DecisionRecord
    from ebb.model.ids import CycleId, DecisionId, RunId

    path = tmp_path / "l.sqlite"
    d = DecisionRecord(DecisionId("d-1"), CycleId("c-1"), RunId("r"), 5_000_000_000, "chat", "scale_down", 3, 2)
    with SqliteLedger(path) as led:
        led.append_cycle(CycleRecord(CycleId("c-1"), RunId("r"), 5_000_000_000, "ebb", (d,)))
    base = ["explain", "--list", "--ledger", str(path)]
    by_o, by_flag = runner.invoke(app, [*base, "-o", "json"]), runner.invoke(app, [*base, "--json"])
    assert by_o.exit_code == by_flag.exit_code == 0, by_o.output
    assert json.loads(by_o.stdout) == json.loads(by_flag.stdout) and json.loads(by_o.stdout)[0]["decision_id"] == "d-1"
    table = runner.invoke(app, [*base, "-o", "table"])
    assert "trace +0:00:05.000" in table.stdout
    for command in (base, ["bursts", "--input", "x.csv"], ["pareto", "x.csv"], ["probe", "http://127.0.0.1:9", "--engine", "vllm"]):
        res = runner.invoke(app, [*command, "-o", "yaml"])
        assert isinstance(res.exception, ConfigError) and "-o 'yaml'" in str(res.exception), command


def test_lint_takes_dash_o_for_its_format() -> None:
    import json

    res = runner.invoke(app, ["lint", "-o", "json", str(DATA / "EBB102" / "bad.json")])
    assert res.exit_code == 1 and {f["rule_id"] for f in json.loads(res.stdout)["findings"]} == {"EBB102"}


def test_simulate_refuses_dash_o_json_together_with_a_json_file(tmp_path: Path) -> None:
    from ebb.errors import ConfigError

    res = runner.invoke(app, ["simulate", "-o", "json", "--json", str(tmp_path / "x.json")])
    assert isinstance(res.exception, ConfigError) and "give one of the two" in str(res.exception)
