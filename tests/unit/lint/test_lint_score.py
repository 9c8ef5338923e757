"""Scoring a lint run against labels: TP/FP/FN per rule and in total, precision and recall, and the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ebb.cli.main import app  # type: ignore[attr-defined]  # re-exported by registration
from ebb.errors import InputError
from ebb.lint import Finding, LintResult
from ebb.lint.score import Label, format_score, load_labels, score_against


def _finding(rule: str, path: str, line: int) -> Finding:
    return Finding(rule, "warning", "m", "f", path, line)


def test_matches_false_positives_and_false_negatives_are_counted_per_rule_and_in_total(tmp_path: Path) -> None:
    result = LintResult([_finding("EBB103", str(tmp_path / "a.py"), 3), _finding("EBB103", str(tmp_path / "b.py"), 1),
                         _finding("EBB104", str(tmp_path / "sub" / "c.py"), 9)], [], 3)
    labels = [Label("EBB103", "a.py", 3, "r"), Label("EBB104", "sub/c.py", 9, "r"), Label("EBB104", "c.py", 2, "r")]
    score = score_against(result, labels, [tmp_path])
    by_rule = {s.rule: (s.tp, s.fp, s.fn) for s in score.rules}
    assert by_rule == {"EBB103": (1, 1, 0), "EBB104": (1, 0, 1)}
    assert (score.total.tp, score.total.fp, score.total.fn) == (2, 1, 1)
    assert score.total.precision == pytest.approx(2 / 3) and score.total.recall == pytest.approx(2 / 3)
    assert score.false_positives == (("EBB103", "b.py", 1),) and score.false_negatives == (("EBB104", "c.py", 2),)
    assert not score.passes(0.95, 0.0) and score.passes(0.6, 0.6)
    assert "false positive: EBB103 b.py:1" in format_score(score)


def test_no_findings_and_no_labels_leave_precision_and_recall_undefined_and_passing() -> None:
    score = score_against(LintResult([], [], 0), [], [])
    assert score.total.precision is None and score.total.recall is None and score.passes(1.0, 1.0)


@pytest.mark.parametrize("text", ["{", "[]", '{"findings": [{"rule": "EBB103", "file": "a.py"}]}',
                                  '{"findings": [{"rule": "EBB103", "file": "a.py", "line": true}]}'])
def test_a_bad_labels_file_is_an_input_error_naming_the_file_and_the_fix(tmp_path: Path, text: str) -> None:
    path = tmp_path / "labels.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(InputError) as exc:
        load_labels(path)
    assert str(path) in str(exc.value) and "fix:" in str(exc.value)


def test_the_cli_prints_the_score_and_exits_by_the_precision_and_recall_floors(tmp_path: Path) -> None:
    data = Path(__file__).resolve().parents[2] / "data" / "lint" / "EBB103"
    labels = tmp_path / "labels.json"
    labels.write_text(json.dumps({"findings": [{"rule": "EBB103", "file": "bad.py", "line": 8, "reason": "r"}]}))
    runner = CliRunner()
    ok = runner.invoke(app, ["lint", str(data), "--expected", str(labels)])
    assert ok.exit_code == 0, ok.output
    assert "EBB103" in ok.output and "100.0 %" in ok.output
    labels.write_text(json.dumps({"findings": [{"rule": "EBB103", "file": "good.py", "line": 8, "reason": "r"}]}))
    bad = runner.invoke(app, ["lint", str(data), "--expected", str(labels), "--format", "json"])
    assert bad.exit_code == 1
    payload = json.loads(bad.output)
    assert payload["score"]["total"] == {"rule": "total", "tp": 0, "fp": 1, "fn": 1, "precision": 0.0, "recall": 0.0}
    assert runner.invoke(app, ["lint", str(data), "--expected", str(labels), "--min-recall", "0", "--min-precision",
                               "0"]).exit_code == 0
    assert runner.invoke(app, ["lint", str(data), "--expected", str(tmp_path / "none.json")]).exit_code == 2
    assert runner.invoke(app, ["lint", str(data), "--expected", str(labels), "--format", "sarif"]).exit_code == 2
