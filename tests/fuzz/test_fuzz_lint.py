"""Fuzz the ``ebb lint`` readers and rules (issue 12, M6): YAML, JSON, ``.conf`` and Python files.

Seeds are the lint rule fixtures (``tests/data/lint``), the manifests in ``deploy/`` and, when it is
beside the repository, the real-world corpus (``../shared/lint-corpus``). Inputs are seeds with one
to six byte-level mutations (aliases and anchors, merge keys, brackets by the thousand, tags such as
``!!python/object``, integers past int64 and past 4,300 digits, NUL, BOMs, CRLF, truncation), seeds
parsed and written back with values of the wrong type in random places (a mapping as ``kind``, a
string as ``args``, a number as ``matchExpressions``), plus structured hostile files (billion laughs of random depth and fan-out, deep YAML/JSON/Python,
recursive aliases, random bytes). The property: :func:`ebb.lint.lint_paths` never raises — a file it
cannot read is one single-line parse error and exit code 2 — and through the CLI (``CliRunner``) the
exit code is 0, 1 or 2 with every parse error on one line. Budgets are fixed (``max_examples``),
inputs derandomized, and each input has a 2 s deadline, so a hang fails instead of stalling CI.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from ebb.cli.main import app
from ebb.lint import ALL_RULES, lint_paths

from mutations import (append, at, byte, delete_run, duplicate, insert, laughs, mutate, nest, overwrite, paths, replace,
                       truncate)

REPO = Path(__file__).resolve().parents[2]
CORPUS = REPO.parent / "shared" / "lint-corpus"
SUFFIXES = (".yaml", ".yml", ".json", ".conf", ".py")
FUZZ = settings(max_examples=600, deadline=timedelta(seconds=2), derandomize=True, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                       HealthCheck.data_too_large])
CLI = settings(FUZZ, max_examples=60)


def _seeds() -> list[tuple[str, bytes]]:
    out: list[tuple[str, bytes]] = []
    for root in (REPO / "tests" / "data" / "lint", REPO / "deploy", CORPUS):
        if root.is_dir():
            out += [(p.suffix, p.read_bytes()) for p in sorted(root.rglob("*"))
                    if p.is_file() and p.suffix in SUFFIXES and p.stat().st_size < 200_000]
    return out


SEEDS = _seeds()
TOKENS = [b"&a ", b"*a", b"<<: *a\n", b"!!python/object:os.system ", b"!!binary ", b"!!timestamp ", b"!!int ",
          b"{", b"}", b"[", b"]", b"\x00", b"\xff\xfe", b"\xef\xbb\xbf", b"\n- ", b": ", b"---\n", b"...\n",
          b"? ", b"%YAML 1.1\n", b"'", b'"', b"\\u0000", b"NaN", b"Infinity", b"1e309", b"-1", b"0x",
          str(2**63).encode(), b"9" * 5000, b"2023-13-45", b"\t", b"\r", b"#", b"(" * 50, b"lambda: " * 20,
          b"\\", b"import torch\n", b"for x in y:\n    model(x)\n", b"\"zero_optimization\": {\"stage\": 3},"]
OPS = [overwrite(byte, 255), insert(TOKENS), delete_run(), duplicate(), truncate(),
       nest([10, 70, 300, 3000], [b"[", b"{", b"(", b"- "]), replace(b"\n", b"\r\n", 3), append(TOKENS)]


@st.composite
def mutated(draw: st.DrawFn) -> tuple[str, bytes]:
    suffix, seed = draw(st.sampled_from(SEEDS))
    data = mutate(draw, seed, OPS)
    return draw(st.sampled_from([suffix, suffix, ".yaml", ".json", ".conf", ".py"])), data


def _parsed_seeds() -> list[tuple[str, list[Any]]]:
    out: list[tuple[str, list[Any]]] = []
    for suffix, raw in SEEDS:
        if suffix not in (".yaml", ".yml", ".json"):
            continue
        try:
            docs = list(yaml.safe_load_all(raw.decode("utf-8")))
        except (yaml.YAMLError, UnicodeDecodeError):
            continue
        if docs and all(isinstance(d, (dict, list)) for d in docs):
            out.append((suffix, docs))
    return out


PARSED = _parsed_seeds()
wrong_types = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**63), 2**63 - 1), st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12), st.sampled_from(["Deployment", "HorizontalPodAutoscaler", "autoscaling/v2", "DoNotSchedule",
                                           "--metric-resolution=90s", "metrics-server:v0.7", "1m30s", "prometheus"]),
    st.lists(st.one_of(st.none(), st.integers(), st.text(max_size=5), st.just({"a": [1]})), max_size=3),
    st.dictionaries(st.sampled_from(["type", "key", "operator", "values", "matchLabels", "image", "args", "a"]),
                    st.one_of(st.none(), st.integers(), st.text(max_size=5), st.just([{"x": 1}])), max_size=3),
)


@st.composite
def data_mutated(draw: st.DrawFn) -> tuple[str, bytes]:
    """A parsed seed with 1-4 values (or whole subtrees) swapped for ones of the wrong type, written back:
    what the rules read must not be assumed to have the shape a valid manifest has."""
    suffix, docs = draw(st.sampled_from(PARSED))
    docs = copy.deepcopy(docs)
    for _ in range(draw(st.integers(1, 4))):
        i = draw(st.integers(0, len(docs) - 1))
        path = draw(st.sampled_from(paths(docs[i])))
        # a copy: st.just() hands out one shared object, and a later swap inside it would change
        # what the next test case draws (Hypothesis: FlakyStrategyDefinition)
        value = copy.deepcopy(draw(wrong_types))
        if not path:
            docs[i] = value
            continue
        at(docs[i], path[:-1])[path[-1]] = value
    if suffix == ".json" and len(docs) == 1:
        return suffix, json.dumps(docs[0]).encode()
    return suffix, yaml.safe_dump_all(docs, sort_keys=False).encode()


def _laughs(levels: int, fan_out: int) -> bytes:
    return laughs(levels, fan_out, prefix="apiVersion: v1\nkind: ConfigMap\n", sep=",").encode()


def _fits_or_overflows(levels_fan: tuple[int, int]) -> bool:
    # far below the 1,000,000-node cap (milliseconds) or past it (refused at once); a document just
    # under the cap is linted in about 3 s, which is the unit tests' business, not a 2 s fuzz input
    levels, fan = levels_fan
    nodes = sum(fan**k for k in range(1, levels + 1))
    return nodes < 200_000 or nodes > 1_000_000


hostile = st.one_of(
    st.tuples(st.integers(1, 12), st.integers(2, 12)).filter(_fits_or_overflows).map(
        lambda lf: (".yaml", _laughs(*lf))),
    st.integers(60, 30_000).map(lambda n: (".yaml", b"x: " + b"[" * n + b"]" * n)),
    st.integers(60, 400).map(lambda n: (".yaml", b"".join(b" " * i + b"k:\n" for i in range(n)))),
    st.integers(60, 30_000).map(lambda n: (".json", b"[" * n + b"]" * n)),
    st.integers(60, 30_000).map(lambda n: (".conf", b'{"a":' * n + b"1" + b"}" * n)),
    st.integers(100, 100_000).map(lambda n: (".py", b"import torch\nx = " + b"-" * n + b"1\n")),
    st.integers(100, 30_000).map(lambda n: (".py", b"import torch\nx = a" + b".b" * n + b"\n")),
    st.sampled_from([(".yaml", b"&a [*a]"), (".yaml", b"a: &a {b: *a}"), (".py", b"import torch\x00"),
                     (".json", b'{"fp16": {"enabled": true, "loss_scale": ' + b"9" * 5000 + b"}}"),
                     (".json", b'{"fp16": {"enabled": true, "loss_scale": 1' + b"0" * 400 + b"}}")]),
    st.tuples(st.sampled_from(SUFFIXES), st.binary(max_size=400)),
)


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    return tmp_path


def _write(folder: Path, case: tuple[str, bytes]) -> Path:
    suffix, data = case
    for old in folder.iterdir():
        old.unlink()
    path = folder / f"input{suffix}"
    path.write_bytes(data)
    return path


@FUZZ
@given(case=st.one_of(mutated(), data_mutated(), hostile))
def test_lint_never_raises_and_a_bad_file_is_one_parse_error_line(
        case: tuple[str, bytes], folder: Path, fuzz_tried: Callable[[str], None]) -> None:
    fuzz_tried("lint")
    path = _write(folder, case)
    result = lint_paths([path], ALL_RULES)
    assert result.files == 1 and len(result.errors) <= 1
    for error in result.errors:
        assert "\n" not in error.message and error.line >= 1 and error.path == str(path)
    # the default threshold (--fail-on warning): an info-only result passes
    failing = any(f.severity in ("warning", "error") for f in result.findings)
    assert result.exit_code == (2 if result.errors else 1 if failing else 0)


@CLI
@given(case=st.one_of(hostile, mutated(), data_mutated()))
def test_the_lint_cli_exits_zero_one_or_two_with_one_line_per_parse_error(
        case: tuple[str, bytes], folder: Path, fuzz_tried: Callable[[str], None]) -> None:
    fuzz_tried("lint")
    path = _write(folder, case)
    res = CliRunner().invoke(app, ["lint", str(path)])
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    assert res.exit_code in (0, 1, 2)
    lines = res.stdout.strip().splitlines()
    assert lines[-1].startswith("1 file, ")
    if res.exit_code == 2:
        assert lines[-1].endswith(" 1 parse error") and len(lines) == 2 and "parse error" in lines[0]
