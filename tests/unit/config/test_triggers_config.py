"""Trigger YAML parsing (ebb.config.triggers) and pure evaluation (ebb.decide.triggers)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ebb.config.triggers import Rule, default_triggers, load_triggers, parse_triggers
from ebb.decide.triggers import evaluate_rule, evaluate_trigger
from ebb.errors import ConfigError


def test_the_default_triggers_are_the_notes_three_chapter_one_rules() -> None:
    trig = default_triggers()
    assert trig.combine == "any"
    assert trig.rules == (
        Rule("gpm_sm_util_pct", ">=", 75.0, 60.0, 0.5),
        Rule("pcie_bw_util_pct", ">", 90.0, 30.0, 0.5),
        Rule("nccl_allreduce_latency_ms", ">", 12.0, 0.0, 0.99),
    )


def test_a_trigger_file_is_parsed_with_defaults_and_its_name_from_the_file(tmp_path: Path) -> None:
    p = tmp_path / "scale.yaml"
    p.write_text("all:\n  - {signal: a_pct, op: '>', threshold: 1}\n")
    trig = load_triggers(p)
    assert trig.name == "scale" and trig.rules[0].sustain_s == 0.0 and trig.rules[0].quantile == 0.5


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("any: [ {signal: a, op: '>'", r"t\.yaml: line \d+: broken YAML"),
        ("any:\n  - {signal: a, op: '>', threshold: 1, sustian_s: 3}\n", r"any\[0\]\.sustian_s: unknown key"),
        ("any:\n  - {signal: a, op: '=>', threshold: 1}\n", r"any\[0\]\.op: unknown operator"),
        ("any:\n  - {signal: a, op: '>'}\n", r"any\[0\]\.threshold: missing"),
        ("any:\n  - {signal: a, op: '>', threshold: x}\n", r"threshold: expected a finite number"),
        ("any:\n  - {signal: a, op: '>', threshold: 1, quantile: 2}\n", r"quantile: 2 not in"),
        ("rules: []\n", r"rules: unknown key"),
        ("name: x\n", r"all/any: need exactly one"),
        ("any: []\n", r"any: expected a non-empty list"),
    ],
)
def test_broken_or_unknown_config_names_the_file_the_key_and_the_fix(
    tmp_path: Path, text: str, match: str
) -> None:
    p = tmp_path / "t.yaml"
    p.write_text(text)
    with pytest.raises(ConfigError, match=match) as err:
        load_triggers(p)
    assert str(p) in str(err.value) and "fix:" in str(err.value)


def test_a_missing_file_is_a_config_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="nope.yaml"):
        load_triggers(tmp_path / "nope.yaml")


def test_a_rule_holds_only_after_its_condition_was_sustained_unbroken() -> None:
    rule = parse_triggers("any:\n  - {signal: s, op: '>=', threshold: 75, sustain_s: 60}\n").rules[0]
    t = np.arange(0.0, 61.0, 1.0)
    v = np.full(t.size, 80.0)
    assert evaluate_rule(rule, t, v).holds
    v[30] = 70.0  # one dip restarts the clock
    res = evaluate_rule(rule, t, v)
    assert not res.holds and res.held_s == pytest.approx(29.0)  # runs from t=31 to t=60
    v[30] = np.nan  # an empty window also breaks the run
    assert not evaluate_rule(rule, t, v).holds


def test_any_fires_on_one_rule_all_needs_every_rule_and_missing_signals_fail_safe() -> None:
    t = np.arange(0.0, 61.0, 1.0)
    streams = {"nccl_allreduce_latency_ms": (t, np.full(t.size, 15.0))}
    assert evaluate_trigger(default_triggers(), streams).fired
    every = parse_triggers("all:\n  - {signal: nccl_allreduce_latency_ms, op: '>', threshold: 12}\n"
                           "  - {signal: pcie_bw_util_pct, op: '>', threshold: 90}\n")
    assert not evaluate_trigger(every, streams).fired
    streams["pcie_bw_util_pct"] = (t, np.full(t.size, 95.0))
    assert evaluate_trigger(every, streams).fired
