"""Every rule fires on its positive fixtures at the right line and stays silent on its negative ones."""

from __future__ import annotations

from pathlib import Path

import pytest

from ebb.lint import ALL_RULES, Finding, lint_paths
from ebb.lint.rules import parse_duration_s, selector_matches

DATA = Path(__file__).resolve().parents[2] / "data" / "lint"
DOCS = Path(__file__).resolve().parents[3] / "docs" / "lint"


def lint(*names: str) -> list[Finding]:
    return lint_paths([DATA / n for n in names], ALL_RULES).findings


def ids_lines(findings: list[Finding]) -> list[tuple[str, str, int]]:
    return [(f.rule_id, Path(f.path).name, f.line) for f in findings]


@pytest.mark.parametrize(("fixture", "expected"), [
    ("EBB101/bad_no_offload.json", [("EBB101", "bad_no_offload.json", 4)]),
    ("EBB101/bad_offload_unpinned.json", [("EBB101", "bad_offload_unpinned.json", 5)]),
    ("EBB102/bad.json", [("EBB102", "bad.json", 5)]),
    ("EBB103/bad.py", [("EBB103", "bad.py", 8)]),
    ("EBB201/bad.yaml", [("EBB201", "bad.yaml", 9), ("EBB201", "bad.yaml", 20), ("EBB202", "bad.yaml", 20)]),
    ("EBB202/bad.yaml", [("EBB202", "bad.yaml", 15)]),
    ("EBB202/info_missing.yaml", [("EBB202", "info_missing.yaml", 5)]),
    ("EBB203/bad.yaml", [("EBB203", "bad.yaml", 16)]),
    ("EBB204/bad.yaml", [("EBB204", "bad.yaml", 14)]),
    ("EBB205/bad_metrics_server.yaml", [("EBB205", "bad_metrics_server.yaml", 16)]),
    ("EBB205/bad_default.yaml", [("EBB205", "bad_default.yaml", 14)]),
    ("EBB205/prom_bad", [("EBB205", "prometheus.yml", 2)]),
])
def test_each_positive_fixture_yields_exactly_the_expected_findings_at_the_right_lines(
        fixture: str, expected: list[tuple[str, str, int]]) -> None:
    assert ids_lines(lint(fixture)) == expected


@pytest.mark.parametrize("fixture", [
    "EBB101/good.json", "EBB101/good_stage1.json", "EBB102/good.json", "EBB103/good.py",
    "EBB103/good_cpu_only.py", "EBB201/good.yaml", "EBB202/good.yaml", "EBB203/good.yaml",
    "EBB204/good_split", "EBB205/good_metrics_server.yaml", "EBB205/prom_good",
])
def test_each_negative_fixture_is_clean(fixture: str) -> None:
    assert lint(fixture) == []


def test_a_missing_scale_down_window_is_reported_as_info_and_a_short_one_as_warning() -> None:
    assert [f.severity for f in lint("EBB202/info_missing.yaml")] == ["info"]
    assert [f.severity for f in lint("EBB202/bad.yaml")] == ["warning"]


def test_the_dataloader_finding_names_every_missing_setting_and_the_column() -> None:
    (f,) = lint("EBB103/bad.py")
    assert "num_workers=0" in f.message and "pin_memory" in f.message and "prefetch_factor" in f.message
    assert f.column == 14


def test_the_metric_pipeline_finding_counts_the_stale_rereads() -> None:
    (f,) = lint("EBB205/bad_metrics_server.yaml")
    assert "4 times" in f.message


def test_a_pdb_in_another_file_of_the_same_run_satisfies_the_spread_rule() -> None:
    assert lint("EBB204/good_split/deployment.yaml") != []
    assert lint("EBB204/good_split") == []


def test_rule_ids_are_unique_and_each_has_a_doc_page_matching_its_explain_text() -> None:
    ids = [r.id for r in ALL_RULES]
    assert len(ids) == len(set(ids))
    for rule in ALL_RULES:
        page = DOCS / f"{rule.id}.md"
        assert page.read_text(encoding="utf-8") == rule.doc, rule.id
        assert rule.severity in ("error", "warning", "info")


@pytest.mark.parametrize(("text", "seconds"), [("15s", 15.0), ("1m", 60.0), ("1m30s", 90.0), ("500ms", 0.5),
                                               ("10m", 600.0), ("abc", None), ("", None)])
def test_durations_parse_like_go_and_prometheus(text: str, seconds: float | None) -> None:
    assert parse_duration_s(text) == seconds


def test_label_selectors_follow_kubernetes_semantics() -> None:
    labels = {"app": "web", "tier": "front"}
    assert selector_matches({"matchLabels": {"app": "web"}}, labels)
    assert not selector_matches({"matchLabels": {"app": "db"}}, labels)
    assert selector_matches({"matchExpressions": [{"key": "tier", "operator": "In", "values": ["front"]}]}, labels)
    assert not selector_matches({"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["front"]}]},
                                labels)
    assert selector_matches({"matchExpressions": [{"key": "zone", "operator": "DoesNotExist"}]}, labels)
    assert not selector_matches({"matchExpressions": [{"key": "zone", "operator": "Exists"}]}, labels)
    assert not selector_matches(None, labels)
