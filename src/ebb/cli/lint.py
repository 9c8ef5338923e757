"""``ebb lint PATH...``: find cost/stability pitfalls in configs (DeepSpeed, Kubernetes, Prometheus, PyTorch).

``--format human|json|sarif``; ``--explain ID`` prints a rule's documentation; ``--config`` points at an
``.ebb-lint.yaml`` (default: the one in the current folder, if any) whose ``disable:`` lists rule ids.
Inline ``# ebb: ignore[ID]`` on a finding's line suppresses it. ``-`` as a PATH reads YAML from stdin
(``helm template CHART | ebb lint -``); a Helm template file itself gets one ``info`` finding saying so.
``--fail-on error|warning|info|never`` (default ``warning``): the lowest severity that fails the run.
Exit codes: 0 clean (or only findings below ``--fail-on``), 1 a finding at or above ``--fail-on``,
2 usage or parse error (after linting every other file; whatever ``--fail-on``). The JSON ``exit_code``
is the process's.
``--expected LABELS.json`` scores the run instead (:mod:`ebb.lint.score`): it prints per-rule TP/FP/FN,
precision and recall and the totals (``--format json``: the same as one JSON object) and exits 0 when the
total precision and recall are at least ``--min-precision``/``--min-recall`` (default 0.95 each), 1 when
either is below, 2 on a usage error or a bad labels file. Every
error is one line naming the file (and line) and the fix; a hostile file (billion laughs, deep
nesting) is a parse error within milliseconds, never a hang or a traceback (see :mod:`ebb.lint.core`).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape

from ebb.cli.app import app
from ebb.errors import ConfigError, InputError
from ebb.lint import (
    ALL_RULES,
    CONFIG_NAME,
    LintResult,
    lint_paths,
    load_disabled,
    rule_by_id,
)
from ebb.lint.core import FAIL_ON
from ebb.lint.output import dumps, render_human, to_json, to_sarif
from ebb.lint.score import RuleScore, Score, format_score, load_labels, score_against
from ebb.score.units import plural

__all__ = ["lint"]


@app.command("lint")
def lint(
    paths: Annotated[list[Path] | None, typer.Argument(help="Files or folders to lint; - reads YAML from stdin.")]
    = None,
    fmt: Annotated[str, typer.Option("--format", "-o", help="human, json or sarif (on stdout).")] = "human",
    explain: Annotated[str | None, typer.Option("--explain", help="Print a rule's documentation.")] = None,
    config: Annotated[Path | None, typer.Option("--config", help=f"Config file (default ./{CONFIG_NAME}).")] = None,
    fail_on: Annotated[str, typer.Option(
        "--fail-on", help="Exit 1 when a finding is at or above this severity: error, warning, info or never.")]
    = "warning",
    expected: Annotated[Path | None, typer.Option(
        "--expected", help="Labelled expected findings (JSON): print precision/recall instead of findings.")] = None,
    min_precision: Annotated[float, typer.Option(
        "--min-precision", help="With --expected: exit 1 when total precision is below this (0-1).")] = 0.95,
    min_recall: Annotated[float, typer.Option(
        "--min-recall", help="With --expected: exit 1 when total recall is below this (0-1).")] = 0.95,
) -> None:
    """Lint configs for cost and stability pitfalls."""
    err = Console(stderr=True, soft_wrap=True)  # soft_wrap: every error stays on one line
    if explain is not None:
        rule = rule_by_id(explain)
        if rule is None:
            err.print(f"[bold red]error:[/] unknown rule {escape(repr(explain))}; known: "
                      + ", ".join(r.id for r in ALL_RULES), highlight=False)
            raise typer.Exit(2)
        typer.echo(rule.doc)
        raise typer.Exit(0)
    if fmt not in ("human", "json", "sarif"):
        err.print(f"[bold red]error:[/] unknown --format {escape(repr(fmt))} (human, json, sarif)", highlight=False)
        raise typer.Exit(2)
    if fail_on not in FAIL_ON:
        err.print(f"[bold red]error:[/] unknown --fail-on {escape(repr(fail_on))} ({', '.join(FAIL_ON)})",
                  highlight=False)
        raise typer.Exit(2)
    if not paths:
        err.print("[bold red]error:[/] give at least one file or folder", highlight=False)
        raise typer.Exit(2)
    if expected is not None and (fmt == "sarif" or not (0.0 <= min_precision <= 1.0 and 0.0 <= min_recall <= 1.0)):
        err.print("[bold red]error:[/] --expected takes --format human or json and --min-precision/--min-recall "
                  f"between 0 and 1 (got {escape(fmt)}, {min_precision}, {min_recall})", highlight=False)
        raise typer.Exit(2)
    use_stdin = any(str(p) == "-" for p in paths)
    paths = [p for p in paths if str(p) != "-"]
    missing = [p for p in paths if not p.exists()]
    if missing:
        err.print(f"[bold red]error:[/] no such file or folder: {escape(', '.join(map(str, missing)))}", highlight=False)
        raise typer.Exit(2)
    cfg = config if config is not None else Path.cwd() / CONFIG_NAME
    if config is not None and not config.is_file():
        err.print(f"[bold red]error:[/] config file not found: {escape(str(config))}", highlight=False)
        raise typer.Exit(2)
    try:
        disabled = load_disabled(cfg)
    except ConfigError as exc:
        err.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False)
        raise typer.Exit(2) from exc
    stdin: str | None = None
    if use_stdin:
        try:
            stdin = sys.stdin.read()
        except (OSError, UnicodeDecodeError) as exc:
            err.print(f"[bold red]error:[/] cannot read stdin: {escape(' '.join(str(exc).split()))}", highlight=False)
            raise typer.Exit(2) from exc
    result = lint_paths(paths, ALL_RULES, disabled, stdin=stdin)
    if expected is not None:
        _score(result, expected, paths, fmt, min_precision, min_recall, err)
    code = result.exit_code_for(fail_on)
    if fmt == "json":
        sys.stdout.write(dumps(to_json(result, exit_code=code)) + "\n")
    elif fmt == "sarif":
        sys.stdout.write(dumps(to_sarif(result, ALL_RULES)) + "\n")
    else:
        render_human(result, Console(highlight=False, soft_wrap=True))
    raise typer.Exit(code)


def _score_json(score: Score) -> dict[str, Any]:
    def row(s: RuleScore) -> dict[str, object]:
        return {"rule": s.rule, "tp": s.tp, "fp": s.fp, "fn": s.fn, "precision": s.precision, "recall": s.recall}
    return {"rules": [row(s) for s in score.rules], "total": row(score.total),
            "false_positives": [list(k) for k in score.false_positives],
            "false_negatives": [list(k) for k in score.false_negatives]}


def _score(result: LintResult, labels_path: Path, roots: list[Path], fmt: str, min_precision: float,
           min_recall: float, err: Console) -> None:
    """Print the run's precision/recall against ``labels_path`` and exit 0 (both at their floor) or 1."""
    try:
        labels = load_labels(labels_path)
    except InputError as exc:
        err.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False)
        raise typer.Exit(2) from exc
    score = score_against(result, labels, roots)
    ok = score.passes(min_precision, min_recall)
    if fmt == "json":
        payload = {"score": _score_json(score), "files": result.files, "parse_errors": len(result.errors),
                   "exit_code": 0 if ok else 1}
        sys.stdout.write(dumps(payload) + "\n")
    else:
        typer.echo(format_score(score))
        typer.echo(f"{plural(result.files, 'file')}, {plural(len(result.errors), 'parse error')}; floors: precision "
                   f">= {100 * min_precision:.1f} %, recall >= {100 * min_recall:.1f} %: {'pass' if ok else 'FAIL'}")
    raise typer.Exit(0 if ok else 1)
