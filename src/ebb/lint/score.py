"""Precision and recall of a lint run against a labelled expected-findings file.

The labels file is JSON: ``{"findings": [{"rule": ID, "file": PATH, "line": N, "reason": TEXT}, ...],
"parse_errors": [{"file": PATH, "line": N}, ...]}`` where ``file`` is relative to the linted folder
that holds it (the file's own name when a file was linted directly). A finding matches a label when
rule, file and line are equal: a hit is a true positive (TP), an unlabelled finding a false positive
(FP), a label no finding hits a false negative (FN). Precision = TP/(TP+FP) and recall = TP/(TP+FN)
are ``None`` when their denominator is 0 (no findings, or no labels), which :meth:`Score.passes`
counts as meeting any floor. Nothing here reads the linted files: it compares two sets.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ebb.errors import InputError
from ebb.lint.core import LintResult

__all__ = ["Label", "RuleScore", "Score", "format_score", "load_labels", "relative_name", "score_against"]

Key = tuple[str, str, int]  # (rule id, file relative to its linted root, 1-based line)


@dataclass(frozen=True)
class Label:
    """One expected finding: a reviewer confirmed ``rule`` holds at ``file:line`` for ``reason``."""

    rule: str
    file: str
    line: int
    reason: str


@dataclass(frozen=True)
class RuleScore:
    """True positives, false positives and false negatives of one rule (or of all, ``rule == "total"``)."""

    rule: str
    tp: int
    fp: int
    fn: int

    @property
    def precision(self) -> float | None:
        return self.tp / (self.tp + self.fp) if self.tp + self.fp else None

    @property
    def recall(self) -> float | None:
        return self.tp / (self.tp + self.fn) if self.tp + self.fn else None


@dataclass(frozen=True)
class Score:
    """Per-rule scores (sorted by rule id), their total, and the unmatched keys that explain FP/FN."""

    rules: tuple[RuleScore, ...]
    total: RuleScore
    false_positives: tuple[Key, ...]
    false_negatives: tuple[Key, ...]

    def passes(self, min_precision: float, min_recall: float) -> bool:
        """True when the total precision and recall are each at least their floor (``None`` passes)."""
        p, r = self.total.precision, self.total.recall
        return (p is None or p >= min_precision) and (r is None or r >= min_recall)


def load_labels(path: Path) -> list[Label]:
    """The ``findings`` of a labels file; a bad file raises :class:`InputError` naming it and the fix."""
    fix = 'write {"findings": [{"rule": "EBB103", "file": "train.py", "line": 12, "reason": "..."}]}'
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read labels file: {exc}", path=str(path), fix="pass a readable JSON file") from exc
    except json.JSONDecodeError as exc:
        raise InputError(f"invalid JSON: {exc.msg}", path=str(path), line=exc.lineno, fix=fix) from exc
    items = data.get("findings") if isinstance(data, dict) else None
    if not isinstance(items, list):
        raise InputError("expected an object with a 'findings' list", path=str(path), fix=fix)
    labels = []
    for i, item in enumerate(items):
        ok = (isinstance(item, dict) and isinstance(item.get("rule"), str) and isinstance(item.get("file"), str)
              and isinstance(item.get("line"), int) and not isinstance(item.get("line"), bool))
        if not ok:
            raise InputError(f"findings[{i}] needs string 'rule' and 'file' and an integer 'line', got {item!r}",
                             path=str(path), fix=fix)
        labels.append(Label(item["rule"], item["file"], item["line"], str(item.get("reason", ""))))
    return labels


def relative_name(path: str, roots: Sequence[Path]) -> str:
    """``path`` relative to the first linted folder that holds it, else its own file name (POSIX)."""
    p = Path(path)
    for root in roots:
        if root.is_dir():
            try:
                return p.relative_to(root).as_posix()
            except ValueError:
                continue
    return p.name


def score_against(result: LintResult, labels: Iterable[Label], roots: Sequence[Path]) -> Score:
    """Compare ``result``'s findings (named relative to ``roots``) with ``labels``, per rule and in total."""
    got = {(f.rule_id, relative_name(f.path, roots), f.line) for f in result.findings}
    want = {(lab.rule, lab.file, lab.line) for lab in labels}
    rules = sorted({k[0] for k in got | want})
    per_rule = tuple(RuleScore(r, len({k for k in got & want if k[0] == r}), len({k for k in got - want if k[0] == r}),
                               len({k for k in want - got if k[0] == r})) for r in rules)
    total = RuleScore("total", len(got & want), len(got - want), len(want - got))
    return Score(per_rule, total, tuple(sorted(got - want)), tuple(sorted(want - got)))


def format_score(score: Score) -> str:
    """A fixed-width table: one row per rule, then the total; percentages to 0.1 %, ``-`` when undefined."""
    def pct(x: float | None) -> str:
        return "-" if x is None else f"{100 * x:.1f} %"

    rows = [f"{'rule':<14}{'TP':>5}{'FP':>5}{'FN':>5}{'precision':>12}{'recall':>10}"]
    for s in (*score.rules, score.total):
        rows.append(f"{s.rule:<14}{s.tp:>5}{s.fp:>5}{s.fn:>5}{pct(s.precision):>12}{pct(s.recall):>10}")
    rows += [f"false positive: {r} {f}:{ln}" for r, f, ln in score.false_positives]
    rows += [f"false negative: {r} {f}:{ln}" for r, f, ln in score.false_negatives]
    return "\n".join(rows)
