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

import contextlib
import copy
import io
import math
import sys
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from ebb.cli.main import main
from ebb.config.triggers import DEFAULT_TRIGGERS_YAML, Trigger, parse_triggers
from ebb.config.workloads import DEFAULT_WORKLOADS_YAML, WorkloadClass, parse_workload_classes
from ebb.errors import ConfigError, EbbError
from ebb.gates.metrics_gate import GateSpec, load_gates

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


@st.composite
def text_mutated(draw: st.DrawFn, target: str) -> str:
    data = draw(st.sampled_from(SEEDS[target]))
    for _ in range(draw(st.integers(1, 6))):
        op = draw(st.integers(0, 6))
        i = draw(st.integers(0, len(data)))
        if op == 0 and i < len(data):
            data = data[:i] + chr(draw(st.integers(0, 0x2FF))) + data[i + 1:]
        elif op == 1:
            data = data[:i] + draw(st.sampled_from(TOKENS)) + data[i:]
        elif op == 2:
            data = data[:i] + data[i + draw(st.integers(1, 64)):]
        elif op == 3:
            j = draw(st.integers(0, len(data)))
            data = data[:i] + data[j:j + draw(st.integers(1, 200))] + data[i:]
        elif op == 4:
            data = data[:i]
        elif op == 5:
            n = draw(st.sampled_from([10, 70, 300, 3000]))
            data = data[:i] + draw(st.sampled_from(["[", "{", "- "])) * n + data[i:]
        else:
            data += draw(st.sampled_from(TOKENS)) * draw(st.integers(1, 5))
    return data


def nested(depth: int, leaf: Any = 1) -> Any:
    value = leaf
    for i in range(depth):
        value = [value] if i % 2 else {"k": value}
    return value


hostile_values = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.sampled_from([2**63 - 1, -(2**63), 2**63]),
    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([math.nan, math.inf, 1e308, 5e-324, -0.0]),
    st.text(max_size=20), st.just("x" * 10_000), st.sampled_from(["result < 1", "result <= nan", "result[0] > 1e999",
                                                                  "result > 1 and result < 2", ">", "order-fulfilment"]),
    st.lists(st.integers(), max_size=3), st.dictionaries(st.text(max_size=5), st.integers(), max_size=3),
    st.integers(60, 120).map(nested),  # past the 64-level cap; dumped as block YAML
)


def _paths(doc: Any) -> list[tuple[Any, ...]]:
    """Places to mutate: every key/index down to 10 levels (iterative: values may nest 120 deep)."""
    out: list[tuple[Any, ...]] = []
    stack: list[tuple[Any, tuple[Any, ...]]] = [(doc, ())]
    while stack:
        node, prefix = stack.pop()
        out.append(prefix)
        if len(prefix) >= 10:
            continue
        if isinstance(node, dict):
            stack += [(v, (*prefix, k)) for k, v in node.items()]
        elif isinstance(node, list):
            stack += [(v, (*prefix, i)) for i, v in enumerate(node)]
    return sorted(out, key=repr)


def _at(doc: Any, path: tuple[Any, ...]) -> Any:
    for step in path:
        doc = doc[step]
    return doc


@st.composite
def data_mutated(draw: st.DrawFn, target: str) -> str:
    doc = copy.deepcopy(yaml.safe_load(draw(st.sampled_from(SEEDS[target]))))
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(_paths(doc)))
        if not path:
            doc = draw(hostile_values)
            continue
        parent = _at(doc, path[:-1])
        action = draw(st.sampled_from(["replace", "replace", "drop", "add"]))
        if action == "drop" and isinstance(parent, dict):
            parent.pop(path[-1], None)
        elif action == "add" and isinstance(parent, dict):
            parent[draw(st.sampled_from(["zz", "name", "alpha", "count", "1"]))] = draw(hostile_values)
        elif isinstance(parent, (dict, list)):
            parent[path[-1]] = draw(hostile_values)
    paths = [p for p in _paths(doc) if p]
    if paths and draw(st.booleans()):
        # one shared node (dumped as an anchor and an alias), never an ancestor of where it goes
        to, source = draw(st.sampled_from(paths)), draw(st.sampled_from(paths))
        if to[:len(source)] != source and source[:len(to)] != to and isinstance(_at(doc, to[:-1]), (dict, list)):
            _at(doc, to[:-1])[to[-1]] = _at(doc, source)
    limit = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(0)
    try:
        return yaml.safe_dump(doc, sort_keys=False, width=10**6)
    except yaml.representer.RepresenterError:
        return str(doc)
    finally:
        sys.set_int_max_str_digits(limit)


def _laughs(levels: int, fan_out: int, prefix: str) -> str:
    lines = ["a0: &a0 [" + ", ".join(['"lol"'] * fan_out) + "]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * fan_out) + "]" for i in range(1, levels)]
    return prefix + "\n".join(lines) + "\n"


def hostile_documents(target: str) -> st.SearchStrategy[str]:
    top = {"workloads": "classes", "gates": "gates", "triggers": "any"}[target]
    return st.one_of(
        st.builds(_laughs, st.integers(1, 12), st.integers(2, 12), st.sampled_from(["", f"{top}: []\n"])),
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


def _main(argv: list[str]) -> tuple[int, str]:
    """``ebb ARGV`` in-process as the console script runs it; (exit code, stderr)."""
    err = io.StringIO()
    old_argv = sys.argv
    sys.argv = ["ebb", *argv]
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            try:
                main()
                code = 0
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 1
    finally:
        sys.argv = old_argv
    return code, err.getvalue()


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
