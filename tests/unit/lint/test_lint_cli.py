"""`ebb lint` end to end: human, JSON and SARIF output, --explain, config files and exit codes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped]  # no stubs in the dev extras
import pytest
from typer.testing import CliRunner

from ebb.cli.main import app  # type: ignore[attr-defined]  # re-exported by registration
from ebb.lint import ALL_RULES

DATA = Path(__file__).resolve().parents[2] / "data" / "lint"
runner = CliRunner()


def test_human_output_shows_file_line_rule_and_fix_and_exits_one_on_findings() -> None:
    res = runner.invoke(app, ["lint", str(DATA / "EBB102" / "bad.json")])
    assert res.exit_code == 1
    assert "bad.json:5:1: EBB102 warning" in res.output and "fix:" in res.output


def test_a_clean_file_exits_zero() -> None:
    res = runner.invoke(app, ["lint", str(DATA / "EBB102" / "good.json")])
    assert res.exit_code == 0, res.output
    assert "0 findings" in res.output


def test_json_output_lists_findings_and_parse_errors_and_a_parse_error_exits_two() -> None:
    res = runner.invoke(app, ["lint", "--format", "json", str(DATA / "broken"), str(DATA / "EBB101")])
    assert res.exit_code == 2
    data = json.loads(res.stdout)
    assert {f["rule_id"] for f in data["findings"]} == {"EBB101"}
    assert len(data["errors"]) == 3 and data["exit_code"] == 2
    assert set(data["findings"][0]) == {"rule_id", "severity", "message", "fix", "path", "line", "column"}


SARIF_SCHEMA = DATA / "sarif-schema-2.1.0.json"  # official OASIS schema, provenance in tests/data/lint/README.md


def _sarif_validator() -> jsonschema.protocols.Validator:
    schema = json.loads(SARIF_SCHEMA.read_text(encoding="utf-8"))
    assert schema["$schema"] == "http://json-schema.org/draft-04/schema#"
    validator_cls = jsonschema.validators.validator_for(schema)
    assert validator_cls is jsonschema.Draft4Validator
    validator_cls.check_schema(schema)
    return validator_cls(schema)


def _schema_errors(log: dict[str, Any]) -> list[str]:
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in _sarif_validator().iter_errors(log)]


def _check_sarif_structure(log: dict[str, Any]) -> None:
    # The official schema cannot check cross-references (ruleIndex → rules[i].id), so those are checked by hand.
    assert _schema_errors(log) == []
    assert log["version"] == "2.1.0" and "sarif" in log["$schema"]
    run = log["runs"][0]
    driver = run["tool"]["driver"]
    assert driver["name"] and [r["id"] for r in driver["rules"]] == [r.id for r in ALL_RULES]
    for rule in driver["rules"]:
        assert rule["shortDescription"]["text"] and rule["defaultConfiguration"]["level"] in ("error", "warning",
                                                                                                 "note")
    for result in run["results"]:
        assert result["level"] in ("error", "warning", "note", "none")
        assert driver["rules"][result["ruleIndex"]]["id"] == result["ruleId"]
        assert result["message"]["text"]
        loc = result["locations"][0]["physicalLocation"]
        assert loc["artifactLocation"]["uri"] and loc["region"]["startLine"] >= 1


def test_sarif_output_has_the_required_2_1_0_structure() -> None:
    res = runner.invoke(app, ["lint", "--format", "sarif", str(DATA / "EBB202"), str(DATA / "EBB101")])
    assert res.exit_code == 1
    log = json.loads(res.stdout)
    _check_sarif_structure(log)
    levels = {r["ruleId"] + ":" + r["level"] for r in log["runs"][0]["results"]}
    assert {"EBB202:note", "EBB202:warning", "EBB101:warning"} <= levels
    assert log["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"].startswith(
        "file://")


def test_sarif_output_of_every_fixture_validates_against_the_official_2_1_0_schema() -> None:
    res = runner.invoke(app, ["lint", "--format", "sarif", str(DATA)])
    assert res.exit_code == 2  # the broken/ fixtures are parse errors, reported as notifications
    log = json.loads(res.stdout)
    _check_sarif_structure(log)
    # every rule but EBB204, whose bad.yaml is covered by good_split/pdb.yaml when all fixtures share one run
    assert {r["ruleId"] for r in log["runs"][0]["results"]} == {r.id for r in ALL_RULES} - {"EBB204"}
    assert log["runs"][0]["invocations"][0]["toolExecutionNotifications"]


def test_the_schema_check_rejects_a_log_that_breaks_sarif() -> None:
    res = runner.invoke(app, ["lint", "--format", "sarif", str(DATA / "EBB104")])
    log = json.loads(res.stdout)
    assert _schema_errors(log) == []
    log["runs"][0]["results"][0]["level"] = "info"  # SARIF has note, not info
    log["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["region"]["startLine"] = 0
    errors = _schema_errors(log)
    assert any("level" in e for e in errors) and any("startLine" in e for e in errors)


def test_explain_prints_the_rule_documentation() -> None:
    res = runner.invoke(app, ["lint", "--explain", "ebb203"])
    assert res.exit_code == 0
    assert res.output.startswith("# EBB203:") and "## Fix" in res.output


@pytest.mark.parametrize("args", [["lint", "--explain", "EBB999"], ["lint"], ["lint", "--format", "xml", "."],
                                  ["lint", "/no/such/path"], ["lint", "--config", "/no/such.yaml", "."]])
def test_usage_errors_exit_two(args: list[str]) -> None:
    assert runner.invoke(app, args).exit_code == 2


def test_a_config_file_disables_rules(tmp_path: Path) -> None:
    cfg = tmp_path / ".ebb-lint.yaml"
    cfg.write_text("disable: [EBB102]\n")
    res = runner.invoke(app, ["lint", "--config", str(cfg), str(DATA / "EBB102" / "bad.json")])
    assert res.exit_code == 0, res.output


def test_the_config_file_in_the_working_folder_is_used_by_default(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / ".ebb-lint.yaml").write_text("disable: [EBB102]\n")
    monkeypatch.chdir(tmp_path)
    assert runner.invoke(app, ["lint", str(DATA / "EBB102" / "bad.json")]).exit_code == 0


# ------------------------------------------------------------------------------------ --fail-on
INFO_ONLY = DATA / "EBB104" / "bad_no_grad.py"  # one EBB104 finding, severity info
WARNING = DATA / "EBB102" / "bad.json"  # one EBB102 finding, severity warning


@pytest.mark.parametrize(("fail_on", "info_only", "warning"), [
    ("error", 0, 0), ("warning", 0, 1), ("info", 1, 1), ("never", 0, 0), (None, 0, 1),  # None: the default
])
def test_fail_on_exits_one_only_for_a_finding_at_or_above_the_threshold(fail_on: str | None, info_only: int,
                                                                        warning: int) -> None:
    opt = [] if fail_on is None else ["--fail-on", fail_on]
    for path, want in ((INFO_ONLY, info_only), (WARNING, warning)):
        res = runner.invoke(app, ["lint", *opt, str(path)])
        assert res.exit_code == want, (fail_on, path.name, res.output)
        assert "1 finding," in res.output  # the threshold changes the exit code, never what is reported
        data = json.loads(runner.invoke(app, ["lint", "--format", "json", *opt, str(path)]).stdout)
        assert data["exit_code"] == want and len(data["findings"]) == 1


def test_fail_on_never_still_exits_two_on_a_parse_error_and_an_unknown_value_is_a_usage_error() -> None:
    assert runner.invoke(app, ["lint", "--fail-on", "never", str(DATA / "broken")]).exit_code == 2
    res = runner.invoke(app, ["lint", "--fail-on", "critical", str(WARNING)])
    assert res.exit_code == 2 and "error, warning, info, never" in res.output


def test_fail_on_leaves_sarif_unchanged() -> None:
    default = runner.invoke(app, ["lint", "--format", "sarif", str(INFO_ONLY), str(WARNING)])
    info = runner.invoke(app, ["lint", "--format", "sarif", "--fail-on", "info", str(INFO_ONLY), str(WARNING)])
    assert default.stdout == info.stdout and default.exit_code == info.exit_code == 1


# ------------------------------------------------------------------------------ Helm and stdin
HELM_VALUE = ("apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n"
              "  replicas: {{ .Values.replicaCount }}\n")
HELM_BLOCK = ('apiVersion: v1\nkind: Service\nmetadata:\n  name: {{ include "web.fullname" . }}\n  labels:\n'
              '    {{- include "web.labels" . | nindent 4 }}\n')


@pytest.mark.parametrize(("text", "line"), [(HELM_VALUE, 6), (HELM_BLOCK, 4)])
def test_a_helm_template_gets_one_info_line_saying_how_to_lint_it_not_a_parse_error(tmp_path: Path, text: str,
                                                                                    line: int) -> None:
    path = tmp_path / "templates" / "deployment.yaml"
    path.parent.mkdir()
    path.write_text(text)
    res = runner.invoke(app, ["lint", str(tmp_path)])
    assert res.exit_code == 0, res.output  # info: below the default --fail-on warning
    first = res.output.splitlines()[0]
    assert first.startswith(f"{path}:{line}:1: helm-template info Helm template")
    assert "helm template CHART | ebb lint -" in first
    assert "parse error" not in first and "0 parse errors" in res.output
    data = json.loads(runner.invoke(app, ["lint", "--format", "json", str(path)]).stdout)
    assert data["errors"] == [] and [f["severity"] for f in data["findings"]] == ["info"]
    log = json.loads(runner.invoke(app, ["lint", "--format", "sarif", str(path)]).stdout)
    assert _schema_errors(log) == [] and log["runs"][0]["results"][0]["level"] == "note"
    assert runner.invoke(app, ["lint", "--fail-on", "info", str(path)]).exit_code == 1


def test_prometheus_templates_in_strings_are_still_linted_and_broken_yaml_is_still_a_parse_error(
        tmp_path: Path) -> None:
    rules = tmp_path / "rules.yaml"
    rules.write_text('groups:\n- name: g\n  rules:\n  - alert: Down\n    expr: up == 0\n'
                     '    annotations:\n      summary: "{{ $labels.instance }} down"\n      description: |\n'
                     '        {{ $value }} targets\n')
    res = runner.invoke(app, ["lint", str(rules)])
    assert res.exit_code == 0 and "helm" not in res.output, res.output
    broken = tmp_path / "broken.yaml"
    broken.write_text("a: [1, 2\n")
    res = runner.invoke(app, ["lint", str(broken)])
    assert res.exit_code == 2 and "parse error" in res.output and "helm" not in res.output


def test_dash_lints_yaml_from_stdin_alongside_paths() -> None:
    text = (DATA / "EBB202" / "bad.yaml").read_text(encoding="utf-8")
    res = runner.invoke(app, ["lint", "-", str(WARNING)], input=text)
    assert res.exit_code == 1, res.output
    assert "<stdin>:" in res.output and "EBB202" in res.output and "EBB102" in res.output
    assert "2 files," in res.output
    res = runner.invoke(app, ["lint", "-"], input="a: [1, 2\n")
    assert res.exit_code == 2 and "<stdin>:" in res.output and "parse error" in res.output
