"""The real-world corpus: every file is linted without a crash, fast, and every finding is a checked true positive."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from ebb.lint import ALL_RULES, lint_paths

CORPUS = Path(__file__).resolve().parents[4] / "shared" / "lint-corpus"
EXPECTED = Path(__file__).resolve().parents[2] / "data" / "lint" / "corpus_expected.json"

pytestmark = pytest.mark.skipif(not CORPUS.is_dir(), reason=f"lint corpus not present at {CORPUS}")


def test_the_whole_corpus_lints_in_under_ten_seconds_with_only_verified_findings() -> None:
    expected = json.loads(EXPECTED.read_text(encoding="utf-8"))
    start = time.perf_counter()
    result = lint_paths([CORPUS], ALL_RULES)
    elapsed = time.perf_counter() - start
    assert elapsed < 10.0
    configs = [p for p in CORPUS.rglob("*") if p.is_file() and p.suffix in (".json", ".yaml", ".yml", ".conf")]
    assert result.files == len(configs)
    got = {(f.rule_id, Path(f.path).relative_to(CORPUS).as_posix(), f.line) for f in result.findings}
    want = {(e["rule"], e["file"], e["line"]) for e in expected["findings"]}
    assert got - want == set(), "findings not verified as true positives"
    assert want - got == set(), "verified findings no longer reported"
    errors = {(Path(e.path).relative_to(CORPUS).as_posix(), e.line) for e in result.errors}
    assert errors == {(e["file"], e["line"]) for e in expected["parse_errors"]}


def test_every_corpus_file_is_linted_on_its_own_without_a_crash() -> None:
    for path in sorted(p for p in CORPUS.rglob("*") if p.is_file() and p.name != "SOURCES.md"):
        result = lint_paths([path], ALL_RULES)
        assert result.files == 1
