"""``ebb COMMAND --help`` reads whole at 80 columns: no option name, word or environment variable cut (#35).

At 80 columns typer's four-column table cut option names (``--time-col,--time-c…``), environment
variables (``EBB_SIMULATE_TOKENS_IN…``) and value lists with "…"; below 100 columns each option's help
now goes under its names (:mod:`ebb.cli.help_format`). Every command and subcommand is checked, so a new
option with a long name or a typer upgrade that bypasses the layout fails here, naming the line.
"""

from __future__ import annotations

from typing import Any

import pytest
import typer
from rich.text import Text
from typer.core import TyperOption
from typer.testing import CliRunner

from ebb.cli.main import app

_BORDERS = str.maketrans({c: " " for c in "│╭╮╰╯─"})


def _commands() -> list[tuple[list[str], Any]]:
    """Every command and subcommand (typer's own click commands), with its path under ``ebb``."""
    root: Any = typer.main.get_command(app)
    out: list[tuple[list[str], Any]] = [([], root)]
    for name, cmd in root.commands.items():
        out.append(([name], cmd))
        out += [([name, sub], c) for sub, c in getattr(cmd, "commands", {}).items()]
    return out


COMMANDS = _commands()


def _help(path: list[str], columns: int) -> str:
    res = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": str(columns)})
    assert res.exit_code == 0, res.output
    return res.output


@pytest.mark.parametrize(("path", "command"), COMMANDS, ids=[" ".join(p) or "ebb" for p, _ in COMMANDS])
def test_help_at_80_columns_keeps_every_name_word_and_variable_whole(path: list[str], command: Any) -> None:
    out = _help(path, 80)
    lines = out.splitlines()
    assert all(len(line) <= 80 for line in lines), max(lines, key=len)
    assert not [line for line in lines if "…" in line], [line for line in lines if "…" in line]
    words = " ".join(out.translate(_BORDERS).split())
    tokens = {t.strip(",") for t in words.split()}
    for param in command.params:
        if getattr(param, "hidden", False):
            continue
        if isinstance(param, TyperOption):
            missing = [o for o in (*param.opts, *param.secondary_opts) if o not in tokens]
            assert not missing, f"{' '.join(path)}: option names cut or missing: {missing}"
            if path and param.show_envvar and param.allow_from_autoenv and param.envvar is None:
                var = "_".join(["EBB", *(p.replace("-", "_").upper() for p in path), str(param.name).upper()])
                assert f"[env var: {var}]" in words, f"{' '.join(path)}: {var} cut or missing"
        help_text = Text.from_markup(getattr(param, "help", None) or "").plain
        cut = [w for w in help_text.split() if w not in tokens and w.strip(",") not in tokens]
        assert not cut, f"{' '.join(path)} {param.name}: help words cut: {cut}"


@pytest.mark.parametrize("path", [["simulate"], ["run"], ["explain"]], ids=["simulate", "run", "explain"])
def test_wide_terminals_keep_the_table_layout_uncut(path: list[str]) -> None:
    out = _help(path, 120)
    assert "…" not in out and all(len(line) <= 120 for line in out.splitlines())
    assert any("--trace" in line or "--ledger" in line for line in out.splitlines())
