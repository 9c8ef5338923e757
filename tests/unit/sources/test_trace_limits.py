"""Trace readers on hostile files (issue 12, M6): deep JSON lines, integers past int64 (and past
Python's 4,300-digit conversion limit), huge tokens and timestamps each end in one
TraceFormatError naming the file and the line — never a RecursionError or OverflowError — and
``ebb simulate`` then exits 2 with one line.

The hostile files are built here; the red-team reproductions in ``../shared/redteam`` are replayed
too when that folder is present. How long each refusal takes is ``bench/limits.py``'s (``trace-*``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ebb.errors import TraceFormatError
from ebb.model.trace import CountSeries, RequestTrace
from ebb.sources.traces import load_trace
from ebb.sources.traces._common import MAX_TOKENS
from ebb.testing.hostile_inputs import mooncake_line

REDTEAM = Path(__file__).resolve().parents[4] / "shared" / "redteam" / "inputs"
RUN = "from ebb.cli.main import main; main()"
AZURE = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
ROW = "2023-11-16 18:17:03.9799600,{},{}\n"


def _load_error(path: Path, fmt: str) -> TraceFormatError:
    with pytest.raises(TraceFormatError) as exc:
        load_trace(path, fmt)
    text = str(exc.value)
    assert "\n" not in text and text.startswith(f"{path}:") and "(fix: " in text and len(text) < 400
    return exc.value


@pytest.mark.parametrize("fmt", ["mooncake", "auto"])
def test_a_deeply_nested_mooncake_line_is_a_trace_format_error_naming_its_line(tmp_path: Path, fmt: str) -> None:
    """mooncake_deep.jsonl: RecursionError in the reader and in auto-detection."""
    path = tmp_path / "deep.jsonl"
    path.write_text(mooncake_line() + '{"timestamp": 1, "x": ' + "[" * 100_000 + "]" * 100_000 + "}\n")
    err = _load_error(path, fmt)
    assert err.line == 2 and "nested deeper than 64" in str(err)


def test_a_deep_first_line_is_refused_by_auto_detection(tmp_path: Path) -> None:
    path = tmp_path / "deep.jsonl"
    path.write_text('{"timestamp": ' + "[" * 5000 + "]" * 5000 + "}\n")
    err = _load_error(path, "auto")
    assert err.line == 1 and "nested deeper than 64" in str(err)


def test_json_nested_to_the_cap_with_extra_keys_still_loads(tmp_path: Path) -> None:
    path = tmp_path / "ok.jsonl"
    path.write_text(mooncake_line().replace('"hash_ids": [1]', '"x": ' + "[" * 63 + "]" * 63) * 3)
    trace = load_trace(path, "auto")
    assert isinstance(trace, RequestTrace) and trace.requests == 3


@pytest.mark.parametrize("fmt", ["mooncake", "auto"])
@pytest.mark.parametrize("tokens, needle", [
    ("99999999999999999999999", "77-bit integer> is larger than 10,000,000"),
    (str(MAX_TOKENS + 1), "larger than 10,000,000"),
    ("1000000000", "input_length 1000000000 is larger than 10,000,000"),
    ("9" * 5000, "bad JSON"),  # json refuses ints over 4,300 digits with a plain ValueError
    ("-1", "negative"),
])
def test_mooncake_token_counts_are_range_checked(tmp_path: Path, fmt: str, tokens: str, needle: str) -> None:
    """mooncake_bigint.jsonl: OverflowError converting 10**23 to int64."""
    path = tmp_path / "big.jsonl"
    path.write_text(mooncake_line() + mooncake_line(1, tokens))
    err = _load_error(path, fmt)
    assert err.line == 2 and needle in str(err)


def test_token_counts_at_the_bound_load(tmp_path: Path) -> None:
    path = tmp_path / "edge.jsonl"
    path.write_text(mooncake_line(0, MAX_TOKENS, 0))
    trace = load_trace(path, "mooncake")
    assert isinstance(trace, RequestTrace) and int(trace.tokens_in[0]) == MAX_TOKENS


@pytest.mark.parametrize("timestamp, needle", [
    ("1" + "0" * 400, "larger than"),  # float() of it raised OverflowError
    (str(2**53 + 1), "larger than"),
    ("1e400", "not finite"),  # json.loads reads it as inf
    ("NaN", "not finite"),
    ("-5", "negative"),
])
def test_mooncake_timestamps_are_range_checked(tmp_path: Path, timestamp: str, needle: str) -> None:
    path = tmp_path / "ts.jsonl"
    path.write_text(mooncake_line(timestamp))
    err = _load_error(path, "mooncake")
    assert err.line == 1 and needle in str(err)


@pytest.mark.parametrize("value, needle", [
    ("99999999999999999999", "'99999999999999999999' is larger than 10,000,000"),
    ("12345678901234567890123", "ContextTokens '12345678901234567890123' is larger than 10,000,000"),
    ("1000000000", "ContextTokens '1000000000' is larger than 10,000,000"),
    (str(MAX_TOKENS + 1), "larger than 10,000,000"),
    ("9" * 5000, "is larger than"),
    ("1e30", "larger than"),
    ("-3", "negative"),
])
def test_azure_token_counts_are_range_checked_naming_the_line(tmp_path: Path, value: str, needle: str) -> None:
    """azure_bigint.csv: OverflowError in the int64 conversion of ContextTokens."""
    path = tmp_path / "big.csv"
    path.write_text(AZURE + ROW.format(10, 5) + ROW.format(value, 5))
    err = _load_error(path, "azure")
    assert err.line == 3 and needle in str(err) and "ContextTokens" in str(err)


def test_an_azure_file_with_tokens_at_the_bound_loads_on_the_vectorised_path(tmp_path: Path) -> None:
    path = tmp_path / "ok.csv"
    path.write_text(AZURE + ROW.format(MAX_TOKENS, 0) * 1000)
    trace = load_trace(path, "azure")
    assert isinstance(trace, RequestTrace) and int(trace.tokens_in.max()) == MAX_TOKENS


def test_generic_csv_counts_are_range_checked_and_bin_sums_never_wrap(tmp_path: Path) -> None:
    big = tmp_path / "big.csv"
    big.write_text("t,n\n0,1\n1," + "9" * 19 + "\n")
    with pytest.raises(TraceFormatError, match="larger than 999,999,999,999,999,999") as exc:
        load_trace(big, "csv", time_col="t", count_col="n")
    assert exc.value.line == 3
    wrap = tmp_path / "wrap.csv"
    wrap.write_text("t,n\n" + f"0.5,{10**18 - 1}\n" * 10)
    with pytest.raises(TraceFormatError, match="sum past int64"):
        load_trace(wrap, "csv", time_col="t", count_col="n")


def test_a_count_token_megabytes_long_is_named_in_a_short_message(tmp_path: Path) -> None:
    path = tmp_path / "c.txt"
    path.write_text("1\n2\n" + "7" * 2_000_000 + "x\n")
    err = _load_error(path, "counts")
    assert err.line == 3 and "..." in str(err)


def test_counts_at_the_reader_bound_still_load(tmp_path: Path) -> None:
    path = tmp_path / "c.txt"
    path.write_text(f"{10**18 - 1}\n0\n")
    series = load_trace(path, "counts")
    assert isinstance(series, CountSeries) and series.counts.dtype == np.int64 and int(series.counts[0]) == 10**18 - 1


def _simulate(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", RUN, "simulate", "--quiet", "--ledger", "", *args],
                          capture_output=True, text=True, timeout=120, env=os.environ | {"COLUMNS": "1000"})


def test_simulate_on_hostile_traces_exits_two_with_one_line_naming_the_file(tmp_path: Path) -> None:
    deep = tmp_path / "deep.jsonl"
    deep.write_text(mooncake_line() + '{"timestamp": 1, "x": ' + "[" * 100_000 + "}\n")
    big = tmp_path / "big.csv"
    big.write_text(AZURE + ROW.format("99999999999999999999", 10))
    for args in (["--trace", str(deep), "--format", "mooncake"], ["--trace", str(deep)],
                 ["--trace", str(big), "--format", "azure"]):
        res = _simulate(*args)
        assert res.returncode == 2 and res.stdout == "", (args, res.stdout, res.stderr)
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"error: {args[1]}:") and "fix:" in lines[0], lines


_TRACE_REPRO = [("repro/mooncake_deep.jsonl", "mooncake"), ("repro/mooncake_deep.jsonl", "auto"),
                ("repro/azure_bigint.csv", "azure"), ("repro/mooncake_bigint.jsonl", "mooncake"),
                ("repro/mooncake_bigint.jsonl", "auto")]


@pytest.mark.parametrize("name, fmt", _TRACE_REPRO)
def test_the_red_team_trace_reproductions_are_one_trace_format_error(name: str, fmt: str) -> None:
    path = REDTEAM / name
    if not path.is_file():
        pytest.skip(f"{path} is absent (the shared red-team folder is not beside the repository)")
    _load_error(path, fmt)


def test_the_red_team_trace_crashers_give_a_trace_or_one_trace_format_error() -> None:
    folder = REDTEAM / "crashers" / "traces"
    if not folder.is_dir():
        pytest.skip(f"{folder} is absent (the shared red-team folder is not beside the repository)")
    crashers = sorted(folder.glob("*.trace"))
    assert crashers
    for path in crashers:
        fmt = path.with_suffix(".fmt").read_text().strip()
        try:
            load_trace(path, fmt)
        except TraceFormatError as exc:
            assert "\n" not in str(exc) and str(exc).startswith(str(path))


def test_a_mooncake_reader_result_keeps_json_semantics(tmp_path: Path) -> None:
    # the bracket-count shortcut must parse exactly as json.loads does
    lines = [mooncake_line(i * 10, 100 + i, 7) for i in range(5)]
    path = tmp_path / "m.jsonl"
    path.write_text("".join(lines))
    trace = load_trace(path, "mooncake")
    assert isinstance(trace, RequestTrace)
    assert trace.tokens_in.tolist() == [json.loads(line)["input_length"] for line in lines]
