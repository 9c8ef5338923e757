"""Real-world sets: every file lints without a crash, and precision and recall against the reviewers'
labels are each at least 95 % (printed with ``pytest -s`` and in every assertion message). How long a
set takes is ``bench/limits.py``'s (``lint-corpus``, ``lint-heldout``: under 10 s each)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ebb.lint import ALL_RULES, lint_paths
from ebb.lint.score import format_score, load_labels, score_against

CORPUS = Path(__file__).resolve().parents[4] / "shared" / "lint-corpus"
DATA = Path(__file__).resolve().parents[2] / "data" / "lint"
EXPECTED = DATA / "corpus_expected.json"
HELDOUT = DATA / "heldout"
HELDOUT_EXPECTED = DATA / "heldout_expected.json"
FLOOR = 0.95

needs_corpus = pytest.mark.skipif(not CORPUS.is_dir(), reason=f"lint corpus not present at {CORPUS}")


def _precision_and_recall_hold(root: Path, labels: Path) -> None:
    result = lint_paths([root], ALL_RULES)
    score = score_against(result, load_labels(labels), [root])
    table = format_score(score)
    print(f"\n{root.name}: {result.files} files\n{table}")
    assert score.total.precision is not None and score.total.precision >= FLOOR, table
    assert score.total.recall is not None and score.total.recall >= FLOOR, table


@needs_corpus
def test_corpus_precision_and_recall_are_each_at_least_95_percent() -> None:
    _precision_and_recall_hold(CORPUS, EXPECTED)


def test_heldout_python_precision_and_recall_are_each_at_least_95_percent() -> None:
    _precision_and_recall_hold(HELDOUT, HELDOUT_EXPECTED)


def test_every_heldout_label_carries_a_reason_and_every_file_has_a_source() -> None:
    labels = load_labels(HELDOUT_EXPECTED)
    assert labels and all(lab.reason.strip() for lab in labels)
    sources = (HELDOUT / "SOURCES.md").read_text(encoding="utf-8")
    assert all(f"`{p.name}`" in sources for p in HELDOUT.glob("*.py"))


@needs_corpus
def test_corpus_parse_errors_are_exactly_the_labelled_ones() -> None:
    expected = json.loads(EXPECTED.read_text(encoding="utf-8"))
    result = lint_paths([CORPUS], ALL_RULES)
    configs = [p for p in CORPUS.rglob("*") if p.is_file() and p.suffix in (".json", ".yaml", ".yml", ".conf")]
    assert result.files == len(configs)
    errors = {(Path(e.path).relative_to(CORPUS).as_posix(), e.line) for e in result.errors}
    assert errors == {(e["file"], e["line"]) for e in expected["parse_errors"]}


@needs_corpus
def test_every_corpus_file_is_linted_on_its_own_without_a_crash() -> None:
    for path in sorted(p for p in CORPUS.rglob("*") if p.is_file() and p.name != "SOURCES.md"):
        result = lint_paths([path], ALL_RULES)
        assert result.files == 1
