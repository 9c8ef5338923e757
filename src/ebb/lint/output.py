"""Renderers for ``ebb lint``: human (rich), JSON and SARIF 2.1.0."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from ebb.lint.core import LintResult, Rule
from ebb.score.units import plural

__all__ = ["render_human", "to_json", "to_sarif", "dumps", "SARIF_SCHEMA", "SARIF_LEVELS"]

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
SARIF_LEVELS = {"error": "error", "warning": "warning", "info": "note"}
_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}


def render_human(result: LintResult, console: Console) -> None:
    """``file:line:col RULE severity message`` lines, the fix indented below, then a summary."""
    for e in result.errors:
        console.print(f"{escape(e.path)}:{e.line}: [bold red]parse error[/] {escape(e.message)}", highlight=False)
    for f in result.findings:
        console.print(f"{escape(f.path)}:{f.line}:{f.column}: [bold]{f.rule_id}[/] "
                      f"[{_STYLE.get(f.severity, 'white')}]{f.severity}[/] {escape(f.message)}", highlight=False)
        console.print(f"    fix: {escape(f.fix)}", highlight=False, style="dim")
    console.print(f"{plural(result.files, 'file')}, {plural(len(result.findings), 'finding')}, "
                  f"{plural(len(result.errors), 'parse error')}", highlight=False)


def to_json(result: LintResult, exit_code: int | None = None) -> dict[str, Any]:
    """``exit_code``: the one the command exits with (default: the result's at ``--fail-on warning``)."""
    return {
        "files": result.files,
        "findings": [{"rule_id": f.rule_id, "severity": f.severity, "message": f.message, "fix": f.fix,
                      "path": f.path, "line": f.line, "column": f.column} for f in result.findings],
        "errors": [{"path": e.path, "line": e.line, "message": e.message} for e in result.errors],
        "exit_code": result.exit_code if exit_code is None else exit_code,
    }


def _uri(path: str) -> str:
    p = Path(path)
    return p.as_posix() if not p.is_absolute() else p.as_uri()


def to_sarif(result: LintResult, rules: Sequence[Rule]) -> dict[str, Any]:
    """A SARIF 2.1.0 log with one run; parse errors become ``toolExecutionNotifications``."""
    index = {r.id: i for i, r in enumerate(rules)}
    results = []
    for f in result.findings:
        res: dict[str, Any] = {
            "ruleId": f.rule_id,
            "level": SARIF_LEVELS.get(f.severity, "warning"),
            "message": {"text": f"{f.message}. Fix: {f.fix}"},
            "locations": [{"physicalLocation": {"artifactLocation": {"uri": _uri(f.path)},
                                                "region": {"startLine": f.line, "startColumn": f.column}}}],
        }
        if f.rule_id in index:
            res["ruleIndex"] = index[f.rule_id]
        results.append(res)
    notifications = [{"level": "error", "message": {"text": e.message},
                      "locations": [{"physicalLocation": {"artifactLocation": {"uri": _uri(e.path)},
                                                          "region": {"startLine": e.line}}}]}
                     for e in result.errors]
    return {
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {
                "name": "ebb-lint",
                "rules": [{"id": r.id, "name": r.id, "shortDescription": {"text": r.title},
                           "fullDescription": {"text": r.why}, "help": {"text": r.fix, "markdown": r.doc},
                           "defaultConfiguration": {"level": SARIF_LEVELS.get(r.severity, "warning")}}
                          for r in rules],
            }},
            "invocations": [{"executionSuccessful": not result.errors,
                             "toolExecutionNotifications": notifications}],
            "results": results,
        }],
    }


def dumps(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=2, ensure_ascii=False)
