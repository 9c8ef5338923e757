"""Bounded YAML (issue 12, M6): every config reader refuses billion laughs, deep nesting, recursive
aliases and integers past int64 with one ConfigError line naming the file, the line and the fix.

The hostile documents are built here; the red-team reproductions in ``../shared/redteam`` are
replayed too when that folder is present. How long each refusal takes is ``bench/limits.py``'s
(``yaml-*``); here the bound is on the work done: nodes composed, brackets scanned.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from ebb.config.triggers import load_triggers, parse_triggers
from ebb.config.workloads import load_workload_classes, parse_workload_classes
from ebb.config.yamlio import MAX_YAML_DEPTH, MAX_YAML_NODES, BoundedSafeLoader, describe, load_yaml
from ebb.errors import ConfigError
from ebb.gates.metrics_gate import load_gates
from ebb.testing.hostile_inputs import laughs

REDTEAM = Path(__file__).resolve().parents[4] / "shared" / "redteam" / "inputs"

VALID_CLASS = "  - {name: a, base_weight: 0.5, alpha: 1.0}\n"


def flow_nested(depth: int) -> str:
    return "x: " + "[" * depth + "]" * depth + "\n"


def block_nested(depth: int) -> str:
    """``depth`` levels of block mappings (``k:`` under ``k:``), the indented way to nest."""
    return "".join(" " * i + "k:\n" for i in range(depth - 1)) + " " * (depth - 1) + "k: 1\n"


def _one_line_error(exc: pytest.ExceptionInfo[ConfigError], source: str) -> str:
    text = str(exc.value)
    assert "\n" not in text and text.startswith(f"{source}: ") and "(fix: " in text
    return text


def _count_calls(monkeypatch: pytest.MonkeyPatch, method: str) -> list[int]:
    """Counts the loader's calls of ``method`` (one PyYAML step each) while the test runs."""
    calls = [0]
    original = getattr(BoundedSafeLoader, method)

    def counted(self: BoundedSafeLoader, *args: object) -> object:
        calls[0] += 1
        return original(self, *args)

    monkeypatch.setattr(BoundedSafeLoader, method, counted)
    return calls


def test_a_billion_laughs_document_is_refused_after_composing_fewer_than_100_nodes(
        monkeypatch: pytest.MonkeyPatch) -> None:
    composed = _count_calls(monkeypatch, "compose_node")
    with pytest.raises(ConfigError) as exc:
        load_yaml(laughs(9), "laughs.yaml")
    assert composed[0] < 100  # before the fix: 10**9 nodes (> 60 s and > 1.3 GB)
    text = _one_line_error(exc, "laughs.yaml")
    assert f"more than {MAX_YAML_NODES:,} nodes" in text and "line 6" in text


def test_alias_expansion_under_the_cap_is_read_and_the_cap_counts_expanded_nodes() -> None:
    data = load_yaml(laughs(5), "l5.yaml")  # 10**5 leaves: 111,111 nodes in a4 after expansion
    assert len(data["a4"]) == 10 and data["a4"][9][9][9][9] == ["lol"] * 10
    with pytest.raises(ConfigError, match="1,111,111 here"):
        load_yaml(laughs(6), "l6.yaml")


@pytest.mark.parametrize("nest", [flow_nested, block_nested], ids=["flow", "block"])
def test_nesting_is_allowed_to_the_cap_and_refused_one_level_past_it(nest: Callable[[int], str]) -> None:
    # the top mapping is level 1 and its value adds the rest
    load_yaml(nest(MAX_YAML_DEPTH - 1), "ok.yaml")
    with pytest.raises(ConfigError) as exc:
        load_yaml(nest(MAX_YAML_DEPTH), "deep.yaml")
    assert f"nested deeper than {MAX_YAML_DEPTH} levels" in _one_line_error(exc, "deep.yaml")


def test_a_hundred_thousand_brackets_are_refused_at_the_65th_not_a_recursion_error(
        monkeypatch: pytest.MonkeyPatch) -> None:
    opened = _count_calls(monkeypatch, "fetch_flow_collection_start")
    with pytest.raises(ConfigError, match="nested deeper"):
        load_yaml(flow_nested(100_000), "deep.yaml")
    assert opened[0] == MAX_YAML_DEPTH + 1  # the scanner stops at the first bracket past the cap


def test_depth_is_counted_through_aliases() -> None:
    inner = "[" * 40 + "1" + "]" * 40
    text = f"a: &a {inner}\nb: " + "[" * 30 + "*a" + "]" * 30 + "\n"
    with pytest.raises(ConfigError, match="through aliases"):
        load_yaml(text, "alias-deep.yaml")


@pytest.mark.parametrize("text", ["&a [*a]", "a: &a {b: *a}", "- &a [1, [2, *a]]"])
def test_recursive_aliases_are_refused(text: str) -> None:
    with pytest.raises(ConfigError, match="recursive alias"):
        load_yaml(text, "rec.yaml")


def test_integers_must_fit_in_int64() -> None:
    assert load_yaml(f"x: {2**63 - 1}\ny: {-(2**63)}", "s") == {"x": 2**63 - 1, "y": -(2**63)}
    for big in (str(2**63), str(-(2**63) - 1), str(10**30), "9" * 5000):  # 5000 digits: Python's int() refuses
        with pytest.raises(ConfigError, match="int64|cannot read") as exc:
            load_yaml(f"x: {big}", "big.yaml")
        assert len(str(exc.value)) < 400  # the value is cut, never printed whole


@pytest.mark.parametrize("text", ["x: 2023-13-45", "x: !!bool maybe", "x: !!int 0x", "x: !!float abc",
                                  "x: !!int ''", "x: !!float _", "x: !!timestamp x", "!!timestamp name: t",
                                  "x: !!timestamp 2001-12-14t21:59:43.10-99:00", "x: !!python/object:os.system 1",
                                  "? [a]\n: 1", "<<: 5", "\x00", "x: [", "a: 1\n---\nb: 2"])
def test_malformed_yaml_of_every_kind_is_one_config_error_line(text: str) -> None:
    with pytest.raises(ConfigError) as exc:
        load_yaml(text, "bad.yaml")
    _one_line_error(exc, "bad.yaml")


def test_describe_never_prints_a_huge_value_whole() -> None:
    assert describe(10**5000) == "<a 16610-bit integer>"
    assert len(describe(["x" * 10_000] * 1000)) == 80
    assert describe({"a": 1}) == "{'a': 1}"


def test_an_empty_required_workload_key_is_a_config_error_not_an_assertion() -> None:
    """wl_null_alpha.yaml: ``alpha:`` with no value made ``ebb run --workloads`` die with AssertionError."""
    text = "classes:\n  - name: a\n    base_weight: 0.5\n    alpha:\n"
    with pytest.raises(ConfigError, match=r"w.yaml: classes\[0\].alpha: has no value \(fix: "):
        parse_workload_classes(text, "w.yaml")


@pytest.mark.parametrize("extra, match", [
    ("    min_replicas: 1000000000000\n", "min_replicas: expected an integer >= 0 and <= 100,000"),
    ("    p99_latency_ms: 1.0e+400\n", "p99_latency_ms: expected a finite number, got inf"),
    ("    p99_latency_ms: 99999999999999999999\n", "int64"),
])
def test_workload_numbers_are_range_checked(extra: str, match: str) -> None:
    text = "classes:\n  - name: a\n    base_weight: 0.5\n    alpha: 1.0\n" + extra
    with pytest.raises(ConfigError, match=match):
        parse_workload_classes(text, "w.yaml")


def test_every_config_reader_is_bounded() -> None:
    deep = flow_nested(5000)
    for reader in (lambda t: parse_workload_classes(t, "w.yaml"), lambda t: load_gates(t, "w.yaml"),
                   lambda t: parse_triggers(t, "w.yaml")):
        for text in (deep, laughs(9), "classes:\n" + VALID_CLASS + laughs(9)):
            with pytest.raises(ConfigError) as exc:
                reader(text)
            _one_line_error(exc, "w.yaml")


def test_config_files_that_are_not_utf8_are_one_config_error_line(tmp_path: Path) -> None:
    bad = tmp_path / "w.yaml"
    bad.write_bytes(b"classes:\n  - name: \xb3\n")
    for load in (load_workload_classes, load_triggers):
        with pytest.raises(ConfigError, match="not UTF-8") as exc:
            load(bad)
        _one_line_error(exc, str(bad))


def test_trigger_keys_of_mixed_types_are_a_config_error_not_a_type_error() -> None:
    with pytest.raises(ConfigError, match="unknown key"):
        parse_triggers("name: t\nany:\n  - {signal: s, op: '>', threshold: 1, 1: x, zz: y}\n", "t.yaml")
    with pytest.raises(ConfigError, match="unknown key"):
        parse_triggers("1: a\nzz: b\nany: [{signal: s, op: '>', threshold: 1}]\n", "t.yaml")


_REPRO = ["repro/wl_deep.yaml", "repro/wl_null_alpha.yaml", "crashers/workloads/01_AssertionError.txt",
          "crashers/workloads/02_RecursionError.txt", "crashers/workloads/03_HANG>3s.txt"]
_REPRO_GATES = ["repro/gates_deep.yaml", "crashers/gates/01_RecursionError.txt", "crashers/gates/02_HANG>3s.txt"]


@pytest.mark.parametrize("name", _REPRO + _REPRO_GATES)
def test_the_red_team_config_reproductions_are_one_config_error_line(name: str) -> None:
    path = REDTEAM / name
    if not path.is_file():
        pytest.skip(f"{path} is absent (the shared red-team folder is not beside the repository)")
    with pytest.raises(ConfigError) as exc:
        if name in _REPRO_GATES:
            load_gates(path.read_bytes().decode("utf-8", "replace"), str(path))
        else:
            load_workload_classes(path)
    _one_line_error(exc, str(path))


@pytest.mark.parametrize("flag, text, needle", [
    ("--workloads", "classes:\n  - " + "[" * 5000 + "\n", "nested deeper than 64"),
    ("--workloads", "classes:\n  - name: a\n    base_weight: 0.5\n    alpha:\n", "classes[0].alpha: has no value"),
    ("--gates", "gates: " + "[" * 5000 + "\n", "nested deeper than 64"),
    ("--gates", laughs(9), "1,000,000 nodes"),
])
def test_ebb_run_exits_two_with_one_line_on_a_hostile_config_file(tmp_path: Path, flag: str, text: str,
                                                                   needle: str) -> None:
    """wl_deep.yaml, wl_null_alpha.yaml, gates_deep.yaml: RecursionError / AssertionError tracebacks, exit 1."""
    path = tmp_path / "config.yaml"
    path.write_text(text)
    res = subprocess.run([sys.executable, "-c", "from ebb.cli.main import main; main()", "run", flag, str(path),
                          "--agent", "http://127.0.0.1:9", "--cycles", "1", "--ledger", str(tmp_path / "l.sqlite")],
                         capture_output=True, text=True, timeout=120, env=os.environ | {"COLUMNS": "1000"})
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {path}: ") and needle in lines[0] and "fix:" in lines[0]
