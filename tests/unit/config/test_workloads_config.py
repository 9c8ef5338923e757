"""Workload class YAML parsing (ebb.config.workloads)."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from ebb.config.workloads import (
    DEFAULT_WORKLOADS_YAML,
    WorkloadClass,
    default_workload_classes,
    load_workload_classes,
    parse_workload_classes,
)
from ebb.errors import ConfigError


def test_the_defaults_are_the_notes_three_classes() -> None:
    order, reco, train = default_workload_classes()
    assert (order.name, order.base_weight, order.alpha) == ("order-fulfilment", 0.65, 1.2)
    assert order.p99_latency_ms == 800.0 and order.success_rate_min == 0.9995
    assert (reco.name, reco.base_weight, reco.alpha) == ("realtime-recommendation", 0.25, 0.9)
    assert reco.p95_latency_ms == 300.0 and reco.p99_latency_ms is None
    assert reco.ctr_decay_max == 0.03
    assert (train.name, train.base_weight, train.alpha) == ("offline-training", 0.10, 0.3)
    assert train.gpu_util_min == 0.70 and train.epoch_completion_min == 0.98
    assert train.latency_slo is None


def test_the_default_weights_sum_to_one_and_the_veto_margin_is_eighty_percent() -> None:
    classes = default_workload_classes()
    assert sum(c.base_weight for c in classes) == pytest.approx(1.0)
    assert all(c.veto_margin == 0.8 and c.min_replicas == 1 for c in classes)


def test_every_workload_class_field_has_a_docstring() -> None:
    source = Path(__file__).parents[3] / "src/ebb/config/workloads.py"
    tree = ast.parse(source.read_text(encoding="utf-8"))
    (cls,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "WorkloadClass"]
    documented = {
        a.target.id
        for a, b in zip(cls.body, cls.body[1:], strict=False)
        if isinstance(a, ast.AnnAssign) and isinstance(a.target, ast.Name)
        and isinstance(b, ast.Expr) and isinstance(b.value, ast.Constant) and isinstance(b.value.value, str)
    }
    assert documented == {f.name for f in dataclasses.fields(WorkloadClass)}


def test_a_class_is_frozen() -> None:
    c = default_workload_classes()[0]
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.alpha = 2.0  # type: ignore[misc]


def test_a_file_is_loaded_from_a_path_and_from_a_yaml_path_string(tmp_path: Path) -> None:
    p = tmp_path / "classes.yaml"
    p.write_text(DEFAULT_WORKLOADS_YAML, encoding="utf-8")
    assert load_workload_classes(p) == default_workload_classes()
    assert load_workload_classes(str(p)) == default_workload_classes()


def test_inline_text_is_parsed_as_yaml() -> None:
    (c,) = load_workload_classes(
        "classes:\n  - {name: batch, base_weight: 0.2, alpha: 0, min_replicas: 3, veto_margin: 0.9}\n"
    )
    assert c == WorkloadClass("batch", 0.2, 0.0, veto_margin=0.9, min_replicas=3)


def test_a_missing_file_names_the_path_and_the_fix(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"nope\.yaml: cannot read .*fix: check the path"):
        load_workload_classes(tmp_path / "nope.yaml")


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("classes: [ {name: a", r"w\.yaml: line \d+: broken YAML"),
        ("- a\n", r"<top>: expected a mapping"),
        ("clases: []\n", r"w\.yaml: clases: unknown key .*fix: use only classes"),
        ("classes: []\n", r"classes: expected a non-empty list"),
        ("classes: [3]\n", r"classes\[0\]: expected a mapping"),
        ("classes:\n  - {name: a, base_weight: 1, alpha: 1, p99_ms: 5}\n",
         r"classes\[0\]\.p99_ms: unknown key .*fix: use only name, base_weight"),
        ("classes:\n  - {name: a, alpha: 1}\n", r"classes\[0\]\.base_weight: missing"),
        ("classes:\n  - {name: '', base_weight: 1, alpha: 1}\n", r"classes\[0\]\.name: expected"),
        ("classes:\n  - {name: a, base_weight: x, alpha: 1}\n",
         r"base_weight: expected a finite number, got 'x' \(fix: use a weight > 0"),
        ("classes:\n  - {name: a, base_weight: 0, alpha: 1}\n", r"base_weight: 0 out of range"),
        ("classes:\n  - {name: a, base_weight: 1, alpha: -1}\n", r"alpha: -1 out of range"),
        ("classes:\n  - {name: a, base_weight: 1, alpha: 1, success_rate_min: 99.95}\n",
         r"success_rate_min: 99\.95 out of range \(fix: use a fraction in \(0, 1\]"),
        ("classes:\n  - {name: a, base_weight: 1, alpha: 1, veto_margin: 0}\n", r"veto_margin: 0 out"),
        ("classes:\n  - {name: a, base_weight: 1, alpha: 1, p99_latency_ms: .nan}\n",
         r"p99_latency_ms: expected a finite number"),
        ("classes:\n  - {name: a, base_weight: 1, alpha: 1, min_replicas: 1.5}\n",
         r"min_replicas: expected an integer >= 0"),
        ("classes:\n  - {name: a, base_weight: 1, alpha: true}\n", r"alpha: expected a finite number"),
        ("classes:\n  - {name: a, base_weight: 1, alpha: 1}\n  - {name: a, base_weight: 2, alpha: 1}\n",
         r"classes\[1\]\.name: duplicate class name 'a'"),
    ],
    ids=["broken-yaml", "not-a-mapping", "unknown-top-key", "empty-list", "class-not-mapping",
         "unknown-class-key", "missing-key", "empty-name", "non-number", "zero-weight",
         "negative-alpha", "percent-instead-of-fraction", "zero-margin", "nan-latency",
         "fractional-replicas", "boolean-number", "duplicate-name"],
)
def test_bad_yaml_raises_a_config_error_naming_file_key_and_fix(text: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        parse_workload_classes(text, "w.yaml")
