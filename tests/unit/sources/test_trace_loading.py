"""Trace loading: every format, auto-detection, gzip, bundled slices and precise malformed-input errors."""

from __future__ import annotations

import gzip
import logging
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ebb.errors import ConfigError, InputError, TraceFormatError
from ebb.model.trace import CountSeries, RequestTrace
from ebb.sources.traces import BUNDLED_TRACES, bundled_trace, counts, detect_format, load_trace

SHARED = Path(__file__).resolve().parents[3] / ".." / "shared"
TRACES = SHARED / "data" / "traces"
needs_shared = pytest.mark.skipif(not TRACES.is_dir(), reason=f"shared trace data not present at {TRACES}")

AZURE_HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens\n"


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    if name.endswith(".gz"):
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text, encoding="utf-8")
    return path


def request_trace(trace: RequestTrace | CountSeries) -> RequestTrace:
    assert isinstance(trace, RequestTrace)
    return trace


def count_series(trace: RequestTrace | CountSeries) -> CountSeries:
    assert isinstance(trace, CountSeries)
    return trace


# --- formats ------------------------------------------------------------------------------------


def test_azure_csv_loads_with_exact_seven_digit_timestamps_relative_to_the_first_row(tmp_path: Path) -> None:
    path = write(tmp_path, "code.csv", AZURE_HEADER
                 + "2023-11-16 18:17:03.9799600,4808,10\r\n"
                 + "2023-11-16 18:17:04.0319601,3180,8\r\n"
                 + "2023-11-16 18:18:03.9799600,1,0\r\n")
    trace = request_trace(load_trace(path, "azure"))
    assert trace.name == "code"
    assert trace.source == str(path)
    assert trace.requests == 3
    assert trace.arrival_s.tolist() == pytest.approx([0.0, 0.0520001, 60.0], abs=1e-12)
    assert trace.start_epoch_s == pytest.approx(1700158623.97996, abs=1e-6)  # 2023-11-16T18:17:03.97996Z
    assert trace.tokens_in.tolist() == [4808, 3180, 1]
    assert trace.tokens_out.tolist() == [10, 8, 0]
    assert trace.tokens_in.dtype == np.int64 and trace.arrival_s.dtype == np.float64
    assert trace.notes == ()


def test_mooncake_jsonl_loads_milliseconds_as_seconds_and_ignores_other_keys(tmp_path: Path) -> None:
    path = write(tmp_path, "mc.jsonl",
                 '{"timestamp": 0, "input_length": 6758, "output_length": 500, "hash_ids": [0, 1]}\n'
                 '\n'
                 '{"timestamp": 3000, "input_length": 7, "output_length": 3, "hash_ids": []}\n'
                 '{"timestamp": 4500.5, "input_length": 8, "output_length": 4, "extra": "x"}\n')
    trace = request_trace(load_trace(path, "mooncake"))
    assert trace.arrival_s.tolist() == [0.0, 3.0, 4.5005]
    assert trace.tokens_in.tolist() == [6758, 7, 8]
    assert trace.tokens_out.tolist() == [500, 3, 4]
    assert trace.start_epoch_s is None


def test_counts_file_loads_with_start_and_bin_headers_and_any_whitespace(tmp_path: Path) -> None:
    path = write(tmp_path, "rps.txt", "# start=2023-11-16T18:00:00Z\n# bin_s=0.5\n3\r\n0 4\t5\n\n  7\n")
    series = count_series(load_trace(path, "counts"))
    assert series.counts.tolist() == [3, 0, 4, 5, 7]
    assert series.bin_s == 0.5
    assert series.start_epoch_s == 1700157600.0
    assert series.name == "rps"


def test_counts_file_accepts_an_epoch_start_and_defaults_to_one_second_bins(tmp_path: Path) -> None:
    series = count_series(load_trace(write(tmp_path, "c.txt", "# start=1700157600.5\n1\n2\n"), "counts"))
    assert series.start_epoch_s == 1700157600.5
    assert series.bin_s == 1.0
    assert series.counts.tolist() == [1, 2]


def test_counts_header_bin_width_wins_over_the_requested_one_with_a_note(tmp_path: Path) -> None:
    series = count_series(load_trace(write(tmp_path, "c.txt", "# bin_s=60\n1\n"), "counts", bin_s=1.0))
    assert series.bin_s == 60.0
    assert any("bin_s=60" in n for n in series.notes)


def test_counts_file_without_header_uses_the_requested_bin_width(tmp_path: Path) -> None:
    series = count_series(load_trace(write(tmp_path, "c.txt", "1\n"), "counts", bin_s=10.0))
    assert series.bin_s == 10.0


def test_counts_parsing_is_identical_whatever_the_block_size(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    values = list(range(0, 2000, 7))
    text = "# bin_s=1\n" + "\n".join(f"{v}" if i % 3 else f"{v} {v}" for i, v in enumerate(values)) + "\n# done\n"
    path = write(tmp_path, "c.txt", text)
    expected = count_series(load_trace(path, "counts")).counts.tolist()
    for block in (1, 2, 3, 5, 64):
        for long_line in (4, 1 << 20):  # also force cutting inside lines (and inside the comment)
            monkeypatch.setattr(counts, "BLOCK_BYTES", block)
            monkeypatch.setattr(counts, "LONG_LINE_BYTES", long_line)
            assert count_series(load_trace(path, "counts")).counts.tolist() == expected


def test_counts_error_line_numbers_stay_right_across_blocks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(tmp_path, "c.txt", "# start=0\n" + "1\n" * 50 + "-2\n")
    monkeypatch.setattr(counts, "BLOCK_BYTES", 8)
    with pytest.raises(TraceFormatError) as exc:
        load_trace(path, "counts")
    assert exc.value.line == 52


@settings(max_examples=60, deadline=None)
@given(values=st.lists(st.integers(min_value=0, max_value=10**17), min_size=1, max_size=40),
       seps=st.lists(st.sampled_from([" ", "\n", "\t", "\r\n", "  \n\n"]), min_size=1, max_size=5),
       block=st.integers(min_value=1, max_value=40))
def test_counts_parser_reads_back_any_integers_with_any_separators(values: list[int], seps: list[str], block: int) -> None:
    text = "".join(f"{v}{seps[i % len(seps)]}" for i, v in enumerate(values))
    parsed = counts.parse_block(text.encode(), path=Path("x"), first_line=1)
    assert parsed.tolist() == values
    # And the streaming reader agrees at a tiny block size (the cut logic is the risky part).
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "c.txt"
        path.write_text(text)
        old = counts.BLOCK_BYTES, counts.LONG_LINE_BYTES
        counts.BLOCK_BYTES, counts.LONG_LINE_BYTES = block, block
        try:
            assert count_series(load_trace(path, "counts")).counts.tolist() == values
        finally:
            counts.BLOCK_BYTES, counts.LONG_LINE_BYTES = old


def test_generic_csv_with_epoch_times_and_token_columns_gives_a_request_trace(tmp_path: Path) -> None:
    path = write(tmp_path, "log.csv", "t,in,out,other\n1700000000.5,10,2,a\n1700000001.0,20,3,b\n")
    trace = request_trace(load_trace(path, "csv", time_col="t", tokens_in_col="in", tokens_out_col="out"))
    assert trace.arrival_s.tolist() == [0.0, 0.5]
    assert trace.start_epoch_s == 1700000000.5
    assert trace.tokens_in.tolist() == [10, 20]


def test_generic_csv_with_iso_times_is_read_as_utc(tmp_path: Path) -> None:
    path = write(tmp_path, "log.csv", "t,in,out\n2023-11-16T18:00:00Z,1,1\n2023-11-16 18:00:01.250,2,2\n")
    trace = request_trace(load_trace(path, time_col="t", tokens_in_col="in", tokens_out_col="out"))
    assert trace.start_epoch_s == 1700157600.0
    assert trace.arrival_s.tolist() == [0.0, 1.25]


def test_generic_csv_with_time_and_count_columns_is_binned_at_bin_s(tmp_path: Path) -> None:
    path = write(tmp_path, "c.csv", "ts,n\n100.0,3\n100.4,2\n102.9,5\n")
    series = count_series(load_trace(path, "csv", time_col="ts", count_col="n", bin_s=1.0))
    assert series.counts.tolist() == [5, 0, 5]
    assert series.start_epoch_s == 100.0
    halves = count_series(load_trace(path, "csv", time_col="ts", count_col="n", bin_s=0.5))
    assert halves.counts.tolist() == [5, 0, 0, 0, 0, 5]


def test_generic_csv_with_only_a_time_column_counts_one_request_per_row(tmp_path: Path) -> None:
    path = write(tmp_path, "c.csv", "ts\n0\n0.2\n1.5\n")
    assert count_series(load_trace(path, "csv", time_col="ts")).counts.tolist() == [2, 1]


def test_generic_csv_with_only_a_count_column_is_one_row_per_bin(tmp_path: Path) -> None:
    path = write(tmp_path, "c.csv", "rps\n4\n0\n9\n")
    series = count_series(load_trace(path, "csv", count_col="rps", bin_s=60.0))
    assert series.counts.tolist() == [4, 0, 9]
    assert series.bin_s == 60.0


def test_gzip_files_are_read_transparently_for_every_format(tmp_path: Path) -> None:
    az = write(tmp_path, "a.csv.gz", AZURE_HEADER + "2023-11-16 18:17:03.9799600,4808,10\n")
    mc = write(tmp_path, "m.jsonl.gz", '{"timestamp": 0, "input_length": 1, "output_length": 2}\n')
    ct = write(tmp_path, "c.txt.gz", "1 2 3\n")
    assert request_trace(load_trace(az)).name == "a"
    assert request_trace(load_trace(mc)).tokens_out.tolist() == [2]
    assert count_series(load_trace(ct)).counts.tolist() == [1, 2, 3]


# --- auto-detection -----------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "text", "expected"), [
    ("a.csv", AZURE_HEADER + "2023-11-16 18:17:03.9799600,1,1\n", "azure"),
    ("a.csv", "\ufeffTIMESTAMP, ContextTokens, GeneratedTokens\r\n", "azure"),
    ("m.jsonl", '\n{"timestamp": 0, "input_length": 1, "output_length": 1, "hash_ids": []}\n', "mooncake"),
    ("c.txt", "# start=0\n1\n2 3\n", "counts"),
    ("c.txt.gz", "5\n", "counts"),
])
def test_auto_detection_recognises_each_format(tmp_path: Path, name: str, text: str, expected: str) -> None:
    assert detect_format(write(tmp_path, name, text)) == expected


def test_auto_detection_of_an_unknown_csv_asks_for_format_csv_and_columns(tmp_path: Path) -> None:
    path = write(tmp_path, "x.csv", "when,size\n1,2\n")
    with pytest.raises(TraceFormatError) as exc:
        load_trace(path)
    assert "--format csv --time-col" in str(exc.value)
    assert str(path) in str(exc.value)


def test_column_options_with_auto_format_mean_generic_csv(tmp_path: Path) -> None:
    path = write(tmp_path, "x.csv", "when\n1\n")
    assert count_series(load_trace(path, time_col="when")).counts.tolist() == [1]


# --- malformed input ----------------------------------------------------------------------------

MALFORMED = [
    # (id, fmt, file name, content, line, words the message must contain)
    ("azure bad timestamp", "azure", "a.csv", AZURE_HEADER + "2023-11-16 18:17:03.1,1,1\nyesterday,1,1\n", 3,
     "bad timestamp"),
    ("azure out-of-range timestamp", "azure", "a.csv", AZURE_HEADER + "2023-13-16 18:17:03.1,1,1\n", 2,
     "out of range"),
    ("azure negative tokens", "azure", "a.csv", AZURE_HEADER + "2023-11-16 18:17:03.1,1,1\n2023-11-16 18:17:04.1,-5,1\n",
     3, "negative"),
    ("azure non-integer tokens", "azure", "a.csv", AZURE_HEADER + "2023-11-16 18:17:03.1,1,2.5\n", 2,
     "not an integer"),
    ("azure NaN tokens", "azure", "a.csv", AZURE_HEADER + "2023-11-16 18:17:03.1,nan,2\n", 2, "not finite"),
    ("azure header only", "azure", "a.csv", AZURE_HEADER, 2, "no data rows"),
    ("azure wrong columns", "azure", "a.csv", "time,ContextTokens\n1,2\n", 1,
     "found columns 'time', 'ContextTokens'; expected 'TIMESTAMP'"),
    ("azure short row", "azure", "a.csv", AZURE_HEADER + "2023-11-16 18:17:03.1,1\n", 2, "2 field(s)"),
    ("empty file", "auto", "e.txt", "\n  \n", 1, "empty"),
    ("mooncake bad JSON", "mooncake", "m.jsonl",
     '{"timestamp": 0, "input_length": 1, "output_length": 1}\n{"timestamp": 1,\n', 2, "bad JSON"),
    ("mooncake missing key", "mooncake", "m.jsonl", '{"timestamp": 0, "input_length": 1}\n', 1,
     "missing key(s) 'output_length'"),
    ("mooncake negative tokens", "mooncake", "m.jsonl", '{"timestamp": 0, "input_length": -1, "output_length": 1}\n',
     1, "negative"),
    ("mooncake float tokens", "mooncake", "m.jsonl", '{"timestamp": 0, "input_length": 1.5, "output_length": 1}\n',
     1, "not an integer"),
    ("mooncake NaN timestamp", "mooncake", "m.jsonl", '{"timestamp": NaN, "input_length": 1, "output_length": 1}\n',
     1, "not finite"),
    ("mooncake no rows", "mooncake", "m.jsonl", "\n\n", 1, "no data rows"),
    ("counts negative", "counts", "c.txt", "# bin_s=1\n1\n2 -3\n", 3, "negative"),
    ("counts non-integer", "counts", "c.txt", "1\n2.5\n", 2, "not an integer"),
    ("counts NaN", "counts", "c.txt", "1\nnan\n", 2, "not finite"),
    ("counts inf", "counts", "c.txt", "1\n2\ninf\n", 3, "not finite"),
    ("counts word", "counts", "c.txt", "1\nlots\n", 2, "not a number"),
    ("counts only header", "counts", "c.txt", "# start=0\n", 2, "no counts"),
    ("counts bad start", "counts", "c.txt", "# start=noon\n1\n", 1, "bad start time"),
    ("counts bad bin", "counts", "c.txt", "\n# bin_s=-1\n1\n", 2, "bad bin width"),
    ("counts inline comment", "counts", "c.txt", "1 # one\n", 1, "middle of a line"),
    ("csv NaN time", "csv", "g.csv", "t,in,out\n1,1,1\nnan,1,1\n", 3, "not finite"),
    ("csv inf time", "csv", "g.csv", "t,in,out\ninf,1,1\n", 2, "not finite"),
    ("csv bad ISO time", "csv", "g.csv", "t,in,out\n2023-11-16T18:00:00,1,1\n2023-11-16T99:00,1,1\n", 3,
     "bad timestamp"),
    ("csv missing column", "csv", "g.csv", "time,in,out\n1,1,1\n", 1, "found columns 'time', 'in', 'out'"),
    ("csv negative count", "csv-counts", "g.csv", "t,in,out\n1,-1,1\n", 2, "negative"),
]


@pytest.mark.parametrize(("fmt", "name", "content", "line", "words"),
                         [pytest.param(*case[1:], id=case[0]) for case in MALFORMED])
def test_malformed_input_raises_a_trace_format_error_naming_file_line_and_fix(
        tmp_path: Path, fmt: str, name: str, content: str, line: int, words: str) -> None:
    path = write(tmp_path, name, content)
    with pytest.raises(TraceFormatError) as exc:
        if fmt == "csv":
            load_trace(path, "csv", time_col="t", tokens_in_col="in", tokens_out_col="out")
        elif fmt == "csv-counts":
            load_trace(path, "csv", count_col="in")
        else:
            load_trace(path, fmt)
    err = exc.value
    assert err.path == str(path)
    assert err.line == line
    assert err.fix
    message = str(err)
    assert message.startswith(f"{path}:{line}: ")
    assert words in message
    assert "(fix: " in message


def test_unsorted_input_is_sorted_stably_with_a_note_and_a_logged_warning(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = write(tmp_path, "a.csv", AZURE_HEADER
                 + "2023-11-16 18:00:02.0,2,20\n2023-11-16 18:00:00.0,1,10\n2023-11-16 18:00:02.0,3,30\n")
    with caplog.at_level(logging.WARNING, logger="ebb.sources.traces"):
        trace = request_trace(load_trace(path))
    assert trace.arrival_s.tolist() == [0.0, 2.0, 2.0]
    assert trace.tokens_in.tolist() == [1, 2, 3]  # stable: equal times keep file order
    assert trace.notes == ("input was not sorted by time; sorted 3 rows",)
    assert any("not sorted" in r.getMessage() and r.name == "ebb.sources.traces" for r in caplog.records)


def test_unsorted_mooncake_input_is_sorted_too(tmp_path: Path) -> None:
    path = write(tmp_path, "m.jsonl", '{"timestamp": 9, "input_length": 1, "output_length": 1}\n'
                                      '{"timestamp": 0, "input_length": 2, "output_length": 2}\n')
    trace = request_trace(load_trace(path))
    assert trace.tokens_in.tolist() == [2, 1]
    assert trace.notes == ("input was not sorted by time; sorted 2 rows",)


def test_missing_file_is_an_input_error_naming_the_path(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="not found"):
        load_trace(tmp_path / "nope.csv")


def test_corrupt_gzip_is_a_trace_format_error(tmp_path: Path) -> None:
    path = tmp_path / "bad.csv.gz"
    path.write_bytes(b"\x1f\x8b" + b"garbage" * 10)
    with pytest.raises(TraceFormatError, match="gzip"):
        load_trace(path, "azure")


def test_unknown_format_or_bundled_name_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="unknown trace format"):
        load_trace(tmp_path / "x", "parquet")
    with pytest.raises(ConfigError, match="azure-code"):
        bundled_trace("burstgpt")


# --- bundled and real data ----------------------------------------------------------------------


@pytest.mark.parametrize(("name", "rows"), [("azure-code", 5740), ("azure-conv", 10108)])
def test_bundled_traces_load_the_first_thirty_minutes(name: str, rows: int) -> None:
    assert name in BUNDLED_TRACES
    trace = bundled_trace(name)
    assert trace.requests == rows
    assert trace.name == name
    assert trace.source == f"bundled:{name}"
    assert trace.arrival_s[0] == 0.0 and trace.duration_s < 1800.0
    assert trace.start_epoch_s is not None
    assert bool(np.all(np.diff(trace.arrival_s) > 0))  # upstream timestamps are distinct and sorted


@needs_shared
@pytest.mark.parametrize(("rel", "rows", "fmt"), [
    ("azure-llm-2023/AzureLLMInferenceTrace_code.csv", 8819, "azure"),
    ("azure-llm-2023/AzureLLMInferenceTrace_conv.csv", 19366, "azure"),
    ("mooncake-fast25/conversation_trace.jsonl", 12031, "mooncake"),
    ("mooncake-fast25/synthetic_trace.jsonl", 3993, "mooncake"),
])
def test_real_shared_traces_are_detected_and_load_with_their_documented_row_counts(rel: str, rows: int, fmt: str) -> None:
    path = TRACES / rel
    assert detect_format(path) == fmt
    trace = request_trace(load_trace(path))
    assert trace.requests == rows
    assert trace.notes == ()


@needs_shared
@pytest.mark.parametrize("kind", ["code", "conv"])
def test_bundled_slices_match_the_start_of_the_real_files(kind: str) -> None:
    full = request_trace(load_trace(TRACES / "azure-llm-2023" / f"AzureLLMInferenceTrace_{kind}.csv"))
    part = bundled_trace(f"azure-{kind}")
    n = part.requests
    assert np.array_equal(full.arrival_s[:n], part.arrival_s)
    assert np.array_equal(full.tokens_in[:n], part.tokens_in)
    assert full.start_epoch_s == part.start_epoch_s
    assert full.arrival_s[n] >= 1800.0 > full.arrival_s[n - 1]


@pytest.mark.slow
def test_a_five_million_line_counts_file_loads_every_value(tmp_path: Path) -> None:
    """How long it takes is ``bench/limits.py``'s (``trace-5m-line-counts``: under 5 s)."""
    values = np.random.default_rng(0).poisson(40, 5_000_000)
    path = tmp_path / "big.txt"
    path.write_text("# bin_s=1\n" + "\n".join(map(str, values.tolist())) + "\n")
    series = count_series(load_trace(path))
    assert np.array_equal(series.counts, values) and series.bin_s == 1.0
