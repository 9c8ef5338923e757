"""`ebb simulate --ledger` records every policy's decisions; `ebb explain` reads one back."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from ebb.cli.main import app
from ebb.ledger import SqliteLedger
from ebb.model.ids import DecisionId

runner = CliRunner()
ARGS = ["simulate", "--trace", "azure-conv", "--peak-replicas", "4", "--policy", "ebb,hpa,oracle", "--quiet"]
HINT = re.compile(r"(\d+) decisions recorded in .*?\(run (r[0-9a-f]{5})\);\s+explain one with:\s+ebb\s+explain\s+"
                  r"(r[0-9a-f]{5}-\d+-\d+)", re.S)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Result]:
    where = tmp_path_factory.mktemp("ledger") / "l.sqlite"
    result = runner.invoke(app, [*ARGS, "--ledger", str(where)])
    return where, result


def test_simulate_with_a_ledger_records_decisions_and_names_one_to_explain(recorded: tuple[Path, Result]) -> None:
    where, result = recorded
    assert result.exit_code == 0, result.output
    m = HINT.search(result.output)
    assert m is not None, result.output
    count, run_id, example = int(m.group(1)), m.group(2), m.group(3)
    assert example.startswith(f"{run_id}-")
    with SqliteLedger(where, create=False) as led:
        decisions = led.decisions()
        assert len(decisions) == count > 0
        assert {d.run_id for d in decisions} == {run_id}
        assert led.get_decision(DecisionId(example)) is not None
        policies = {c.policy for c in led.cycles()}
    assert "ebb" in policies and policies <= {"ebb", "hpa", "oracle"}


def test_explain_reads_the_named_decision_back_with_its_action_and_signals(recorded: tuple[Path, Result]) -> None:
    where, result = recorded
    m = HINT.search(result.output)
    assert m is not None, result.output
    example = m.group(3)
    shown = runner.invoke(app, ["explain", example, "--ledger", str(where)])
    assert shown.exit_code == 0, shown.output
    out = shown.output
    assert f"decision {example}" in out and "policy ebb" in out
    action = re.search(r"action\s+(scale_down|veto|scale_up|hold)\s+(\d+) → (\d+) replicas", out)
    assert action is not None, out
    signals = out.split("  signals")[1].split("  weights")[0]
    assert "need_replicas" in signals and "ready_replicas" in signals
    assert "(none recorded)" not in signals


def test_without_a_ledger_option_nothing_is_recorded_and_the_output_says_how_to(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, [a for a in ARGS if a != "--quiet"])
    assert result.exit_code == 0, result.output
    assert "decisions recorded" not in result.output and "add --ledger ebb-ledger.sqlite" in result.output
    assert list(tmp_path.iterdir()) == []  # not even ebb-ledger.sqlite


def test_explain_lists_the_latest_of_two_recorded_runs_at_trace_relative_times(
        recorded: tuple[Path, Result], tmp_path: Path) -> None:
    where, first = tmp_path / "two-runs.sqlite", recorded[1]
    shutil.copy(recorded[0], where)
    m = HINT.search(first.output)
    assert m is not None, first.output
    second = runner.invoke(app, [*ARGS, "--policy", "hpa", "--ledger", str(where)])
    assert second.exit_code == 0, second.output
    m2 = HINT.search(second.output)
    assert m2 is not None and m2.group(2) != m.group(2), second.output
    listed = runner.invoke(app, ["explain", "--list", "--ledger", str(where)])
    assert listed.exit_code == 0, listed.output
    assert f"(run {m2.group(2)}; 1 other run" in listed.output
    rows = listed.output.splitlines()[2:]
    assert rows and all(r.startswith("trace +") and " hpa " in r for r in rows), listed.output
    assert "1970" not in listed.output
    shown = runner.invoke(app, ["explain", m.group(3), "--ledger", str(where)])
    assert "cycle time  trace +" in shown.output and "1970" not in shown.output
