"""Fuzz the config readers (issue 12, M6): workload classes, metrics gates and scale triggers (YAML).

Seeds are the ConfigMap in ``deploy/configmap.yaml`` (its ``workloads.yaml`` and ``gates.yaml``) and
the built-in defaults. Inputs are seeds mutated two ways — as text (hostile tokens such as anchors,
aliases, merge keys, tags, brackets by the thousand, integers past int64 and past 4,300 digits,
NUL, tabs; bytes flipped, ranges deleted or duplicated, truncation) and as data (a value swapped for
a hostile one — deep nesting, huge or non-finite numbers, wrong types, empty values — a key dropped
or added, then dumped back to YAML) — plus structured hostile documents (billion laughs, deep flow
and block nesting, recursive aliases). The property: each reader returns its frozen value or raises
one single-line :class:`~ebb.errors.ConfigError` naming the source — never anything else — and a
refused file given to ``ebb run --workloads/--gates`` exits 2 with one stderr line naming it.
Budgets are fixed (``max_examples``), inputs derandomized, and each input has a 2 s deadline.
"""

from __future__ import annotations

import copy
import math
import sys
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from ebb.config.triggers import DEFAULT_TRIGGERS_YAML, Trigger, parse_triggers
from ebb.config.workloads import DEFAULT_WORKLOADS_YAML, WorkloadClass, parse_workload_classes
from ebb.errors import ConfigError, EbbError
from ebb.gates.metrics_gate import GateSpec, load_gates

from in_process import run_ebb as _main  # the tests' name for it: a test's source seeds its derandomized inputs
from mutations import (append, at, delete_run, duplicate, insert, laughs, mutate, mutate_tree, nest, nested, overwrite,
                       paths, truncate)

REPO = Path(__file__).resolve().parents[2]
_CONFIGMAP = yaml.safe_load((REPO / "deploy" / "configmap.yaml").read_text(encoding="utf-8"))["data"]
SEEDS = {"workloads": [_CONFIGMAP["workloads.yaml"], DEFAULT_WORKLOADS_YAML],
         "gates": [_CONFIGMAP["gates.yaml"]], "triggers": [DEFAULT_TRIGGERS_YAML]}
SOURCE = "fuzz.yaml"
FUZZ = settings(max_examples=300, deadline=timedelta(seconds=2), derandomize=True, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                       HealthCheck.data_too_large, HealthCheck.filter_too_much])
CLI = settings(FUZZ, max_examples=30)

TOKENS = ["&a ", "*a", "<<: *a\n", "!!python/object:os.system ", "!!binary ", "!!timestamp ", "!!int ", "!!bool ",
          "{", "}", "[", "]", "\x00", "\n- ", ": ", "---\n", "? ", "'", '"', "NaN", ".inf", "-.inf", "1e309",
          "-1", "0x", str(2**63), "9" * 5000, "2023-13-45", "\t", "~", "null", "", "#", "%YAML 1.1\n"]
OPS = [overwrite(chr, 0x2FF), insert(TOKENS), delete_run(), duplicate(), truncate(),
       nest([10, 70, 300, 3000], ["[", "{", "- "]), append(TOKENS)]


@st.composite
def text_mutated(draw: st.DrawFn, target: str) -> str:
    return mutate(draw, draw(st.sampled_from(SEEDS[target])), OPS)


hostile_values = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.sampled_from([2**63 - 1, -(2**63), 2**63]),
    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([math.nan, math.inf, 1e308, 5e-324, -0.0]),
    st.text(max_size=20), st.just("x" * 10_000), st.sampled_from(["result < 1", "result <= nan", "result[0] > 1e999",
                                                                  "result > 1 and result < 2", ">", "order-fulfilment"]),
    st.lists(st.integers(), max_size=3), st.dictionaries(st.text(max_size=5), st.integers(), max_size=3),
    st.integers(60, 120).map(lambda n: nested(n, 1)),  # past the 64-level cap; dumped as block YAML
)
NEW_KEYS = st.sampled_from(["zz", "name", "alpha", "count", "1"])


@st.composite
def data_mutated(draw: st.DrawFn, target: str) -> str:
    seed = copy.deepcopy(yaml.safe_load(draw(st.sampled_from(SEEDS[target]))))
    doc = mutate_tree(draw, seed, hostile_values, NEW_KEYS, depth=10)  # not below 10 levels: values nest 120 deep
    places = [p for p in paths(doc, depth=10) if p]
    if places and draw(st.booleans()):
        # one shared node (dumped as an anchor and an alias), never an ancestor of where it goes
        to, source = draw(st.sampled_from(places)), draw(st.sampled_from(places))
        if to[:len(source)] != source and source[:len(to)] != to and isinstance(at(doc, to[:-1]), (dict, list)):
            at(doc, to[:-1])[to[-1]] = at(doc, source)
    limit = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(0)
    try:
        return yaml.safe_dump(doc, sort_keys=False, width=10**6)
    except yaml.representer.RepresenterError:
        return str(doc)
    finally:
        sys.set_int_max_str_digits(limit)


def hostile_documents(target: str) -> st.SearchStrategy[str]:
    top = {"workloads": "classes", "gates": "gates", "triggers": "any"}[target]
    return st.one_of(
        st.builds(laughs, st.integers(1, 12), st.integers(2, 12), st.sampled_from(["", f"{top}: []\n"])),
        st.integers(60, 30_000).map(lambda n: f"{top}: " + "[" * n + "]" * n + "\n"),
        st.integers(60, 300).map(lambda n: f"{top}:\n" + "".join(" " * (i + 1) + "- k:\n" for i in range(n))),
        st.sampled_from([f"{top}: &a [*a]\n", f"{top}: &a {{b: *a}}\n", f"{top}:\n  - &x {{name: *x}}\n",
                         f"{top}: {'9' * 5000}\n", f"{top}: !!python/name:os.system\n", "\x00", "",
                         f"{top}:\n  - alpha:\n", f"{top}:\n  - ? [a]\n    : 1\n"]),
        st.text(max_size=300),
    )


def documents(target: str) -> st.SearchStrategy[str]:
    return st.one_of(text_mutated(target), data_mutated(target), hostile_documents(target))


def _expect_value_or_one_config_error(read: Callable[[], object], kind: type, *, short: bool = True) -> bool:
    """True when the reader accepted the document. ``short``: the message is also under 2,000
    characters (the config readers cut the values they quote; the gate parser quotes them whole)."""
    try:
        value = read()
    except ConfigError as exc:
        text = str(exc)
        assert "\n" not in text and text.startswith(f"{SOURCE}: "), text
        assert not short or len(text) < 2000, text
        return False
    assert isinstance(value, tuple) or isinstance(value, kind)
    return True


@FUZZ
@given(text=documents("workloads"))
def test_workload_classes_are_read_or_refused_with_one_config_error_line(
        text: str, fuzz_tried: Callable[[str], None]) -> None:
    fuzz_tried("workloads")
    if _expect_value_or_one_config_error(lambda: parse_workload_classes(text, SOURCE), WorkloadClass):
        for c in parse_workload_classes(text, SOURCE):
            assert isinstance(c, WorkloadClass) and math.isfinite(c.base_weight) and c.base_weight > 0
            assert math.isfinite(c.alpha) and 0 <= c.min_replicas <= 100_000


@FUZZ
@given(text=documents("gates"))
def test_gates_are_read_or_refused_with_one_config_error_line(text: str, fuzz_tried: Callable[[str], None]) -> None:
    fuzz_tried("gates")
    if _expect_value_or_one_config_error(lambda: load_gates(text, SOURCE), GateSpec, short=False):
        assert all(isinstance(g, GateSpec) for g in load_gates(text, SOURCE))


@FUZZ
@given(text=documents("triggers"))
def test_triggers_are_read_or_refused_with_one_config_error_line(text: str, fuzz_tried: Callable[[str], None]) -> None:
    fuzz_tried("triggers")
    _expect_value_or_one_config_error(lambda: parse_triggers(text, SOURCE), Trigger)


@CLI
@given(target=st.sampled_from(["workloads", "gates"]), data=st.data())
def test_ebb_run_exits_two_with_one_line_on_a_refused_config_file(
        target: str, data: st.DataObject, tmp_path: Path, fuzz_tried: Callable[[str], None],
        monkeypatch: pytest.MonkeyPatch) -> None:
    text = data.draw(st.one_of(hostile_documents(target), text_mutated(target)))
    read = (lambda: parse_workload_classes(text, SOURCE)) if target == "workloads" else (lambda: load_gates(text, SOURCE))
    try:
        read()
    except EbbError:
        pass
    else:
        assume(False)  # an accepted file would start the controller; only refusals are checked here
    fuzz_tried(target)
    path = tmp_path / f"{target}.yaml"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    monkeypatch.setenv("COLUMNS", "1000")  # the entry point prints with rich, which wraps at the width
    code, err = _main(["run", f"--{target}", str(path), "--agent", "http://127.0.0.1:9", "--cycles", "1",
                       "--ledger", str(tmp_path / "l.sqlite")])
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith(f"error: {path}"), err
