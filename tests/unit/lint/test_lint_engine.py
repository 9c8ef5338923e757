"""The engine: readers keep line numbers, broken files are reported without stopping the run, suppression works."""

from __future__ import annotations

from pathlib import Path

import pytest

from ebb.errors import ConfigError
from ebb.lint import ALL_RULES, Finding, lint_paths, load_disabled
from ebb.lint.core import Workspace, discover, read_file, suppressed

DATA = Path(__file__).resolve().parents[2] / "data" / "lint"


def test_yaml_documents_are_split_and_every_key_keeps_its_line() -> None:
    docs, err = read_file(DATA / "EBB201" / "bad.yaml", Workspace())
    assert err is None
    assert [d.get("metadata", "name") for d in docs] == ["web", "old"]
    assert docs[0].line_of(("spec", "metrics", 0, "type")) == 10
    assert docs[1].line_of(("spec", "targetCPUUtilizationPercentage")) == 23
    assert docs[1].start_line == 16


def test_json_keys_get_their_lines_from_the_scan() -> None:
    (doc,), err = read_file(DATA / "EBB102" / "bad.json", Workspace())
    assert err is None and doc.kind == "deepspeed"
    assert doc.line_of(("fp16", "loss_scale_window")) == 6
    assert doc.line_of(("fp16", "no_such_key")) == 3


def test_broken_files_become_parse_errors_with_lines_and_the_run_goes_on() -> None:
    result = lint_paths([DATA / "broken", DATA / "EBB102" / "bad.json"], ALL_RULES)
    assert sorted((Path(e.path).name, e.line) for e in result.errors) == [("bad.json", 4), ("bad.py", 1),
                                                                          ("bad.yaml", 5)]
    assert [f.rule_id for f in result.findings] == ["EBB102"]
    assert result.exit_code == 2


def test_inline_comments_suppress_only_the_named_rule_on_that_line() -> None:
    result = lint_paths([DATA / "suppress"], ALL_RULES)
    assert result.findings == [] and result.exit_code == 0
    f = Finding("EBB201", "warning", "m", "x", "p", 1)
    assert suppressed(["metrics:  # ebb: ignore[EBB202, EBB201]"], f)
    assert not suppressed(["metrics:  # ebb: ignore[EBB202]"], f)
    assert not suppressed([], f)


def test_the_config_file_disables_rules(tmp_path: Path) -> None:
    cfg = tmp_path / ".ebb-lint.yaml"
    cfg.write_text("disable: [EBB101]\n")
    assert load_disabled(cfg) == {"EBB101"}
    assert load_disabled(tmp_path / "absent.yaml") == set()
    assert lint_paths([DATA / "EBB101"], ALL_RULES, load_disabled(cfg)).findings == []
    cfg.write_text("disable: EBB101\n")
    with pytest.raises(ConfigError, match="list"):
        load_disabled(cfg)


def test_discovery_walks_folders_for_config_and_python_files_and_skips_hidden_ones(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "x.yaml").write_text("a: 1\n")
    (tmp_path / "a.yaml").write_text("a: 1\n")
    (tmp_path / "b.txt").write_text("x\n")
    (tmp_path / "c.py").write_text("x = 1\n")
    assert [p.name for p in discover([tmp_path])] == ["a.yaml", "c.py"]


def test_exit_code_is_zero_when_clean_and_one_with_findings() -> None:
    assert lint_paths([DATA / "EBB102" / "good.json"], ALL_RULES).exit_code == 0
    assert lint_paths([DATA / "EBB102" / "bad.json"], ALL_RULES).exit_code == 1


def test_findings_are_frozen() -> None:
    f = Finding("EBB101", "warning", "m", "x", "p", 1)
    with pytest.raises(AttributeError):
        f.line = 2  # type: ignore[misc]


def test_a_conf_file_that_is_not_json_is_read_as_yaml_and_a_yml_deepspeed_config_is_recognised(tmp_path: Path) -> None:
    conf = tmp_path / "ds.conf"
    conf.write_text("# DeepSpeed\nzero_optimization:\n  stage: 3\n")
    result = lint_paths([conf], ALL_RULES)
    assert [(f.rule_id, f.line) for f in result.findings] == [("EBB101", 3)]
    assert result.errors == []


def test_exit_code_for_ranks_error_over_warning_over_info() -> None:
    from ebb.lint import LintResult, ParseError

    def result(*severities: str) -> LintResult:
        return LintResult([Finding("X", s, "m", "f", "p", 1) for s in severities], [], 1)

    table = {("error",): (1, 1, 1, 0), ("warning",): (0, 1, 1, 0), ("info",): (0, 0, 1, 0), (): (0, 0, 0, 0),
             ("info", "error"): (1, 1, 1, 0)}
    for severities, codes in table.items():
        assert tuple(result(*severities).exit_code_for(t) for t in ("error", "warning", "info", "never")) == codes
    assert result("info").exit_code == 0 and result("warning").exit_code == 1  # default: --fail-on warning
    assert LintResult([], [ParseError("p", 1, "bad")], 1).exit_code_for("never") == 2
    with pytest.raises(ValueError, match="fail_on"):
        result().exit_code_for("critical")
