"""Any service's trace: column indexes, header-less files, integral floats, service-time columns, ServeGen files."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ebb.errors import ConfigError, TraceFormatError
from ebb.model.trace import CountSeries, RequestTrace
from ebb.sources.traces import check_columns, detect_format, load_trace

# A diffusion-serving request log as the issue describes it: float-typed counts, per-request exec time.
DIFFUSION = """ts,model,steps,images,exec_time_seconds
1700000000.0,sdxl,30.0,1.0,2.5
1700000000.4,sdxl,63.0,4.0,6.25
1700000001.1,sdxl,20.0,2.0,1.75
1700000000.2,sdxl,50.0,1.0,3.0
"""
SERVEGEN_ROWS = """0,0.5,1.1,Gamma,1.2,1.6
600,0,0,,0,0
1200,0.25,2.0,Weibull,0.6,1.4
"""


def _write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_a_diffusion_log_loads_with_its_service_time_column_sorted_with_its_request(tmp_path: Path) -> None:
    p = _write(tmp_path, "diffusion.csv", DIFFUSION)
    tr = load_trace(p, time_col="ts", service_col="exec_time_seconds", tokens_in_col="steps", tokens_out_col="images")
    assert isinstance(tr, RequestTrace) and tr.service_s is not None
    np.testing.assert_allclose(tr.arrival_s, [0.0, 0.2, 0.4, 1.1], atol=1e-6)
    np.testing.assert_array_equal(tr.service_s, [2.5, 3.0, 6.25, 1.75])  # travelled with the sort
    np.testing.assert_array_equal(tr.tokens_in, [30, 50, 63, 20])  # 63.0 is the integer 63
    assert any("not sorted" in n for n in tr.notes)


def test_a_service_log_without_token_columns_has_zero_tokens(tmp_path: Path) -> None:
    tr = load_trace(_write(tmp_path, "d.csv", DIFFUSION), time_col="ts", service_col="exec_time_seconds")
    assert isinstance(tr, RequestTrace) and tr.requests == 4
    assert not tr.tokens_in.any() and not tr.tokens_out.any()


def test_a_half_token_count_is_refused_naming_file_line_and_column(tmp_path: Path) -> None:
    p = _write(tmp_path, "d.csv", DIFFUSION.replace("63.0", "63.5"))
    with pytest.raises(TraceFormatError) as err:
        load_trace(p, time_col="ts", service_col="exec_time_seconds", tokens_in_col="steps", tokens_out_col="images")
    assert "d.csv:3:" in str(err.value) and "steps" in str(err.value) and "'63.5' is not an integer" in str(err.value)


def test_integral_float_counts_are_accepted_and_fractional_ones_refused(tmp_path: Path) -> None:
    ok = load_trace(_write(tmp_path, "c.csv", "t,n\n0,3.0\n1,1e1\n"), time_col="t", count_col="n")
    assert isinstance(ok, CountSeries) and ok.counts.tolist() == [3, 10]
    with pytest.raises(TraceFormatError, match=r"c2.csv:3: count 'n' '2.5' is not an integer"):
        load_trace(_write(tmp_path, "c2.csv", "t,n\n0,3.0\n1,2.5\n"), time_col="t", count_col="n")


def test_an_end_minus_start_expression_is_the_service_time(tmp_path: Path) -> None:
    p = _write(tmp_path, "r.csv", "rid,arrival,admitted,finished\na,0.0,0.1,0.6\nb,0.5,0.5,2.5\n")
    tr = load_trace(p, time_col="arrival", service_col="finished-admitted")
    assert isinstance(tr, RequestTrace) and tr.service_s is not None
    np.testing.assert_allclose(tr.service_s, [0.5, 2.0])


def test_a_column_whose_name_holds_a_dash_wins_over_the_expression(tmp_path: Path) -> None:
    p = _write(tmp_path, "r.csv", "t,exec-time,exec,time\n0,1.5,9,1\n")
    tr = load_trace(p, time_col="t", service_col="exec-time")
    assert isinstance(tr, RequestTrace) and tr.service_s is not None and tr.service_s.tolist() == [1.5]


def test_a_negative_service_time_is_refused_with_its_line(tmp_path: Path) -> None:
    p = _write(tmp_path, "r.csv", "arrival,admitted,finished\n0,0.1,0.6\n1,2.0,1.0\n")
    with pytest.raises(TraceFormatError, match=r"r.csv:3: service time 'finished-admitted' is -1 s"):
        load_trace(p, time_col="arrival", service_col="finished-admitted")


def test_header_less_files_take_column_indexes(tmp_path: Path) -> None:
    p = _write(tmp_path, "h.csv", "0.0,3,2.0\n0.5,4,1.0\n")
    tr = load_trace(p, "csv", time_col="0", service_col="2", no_header=True)
    assert isinstance(tr, RequestTrace) and tr.requests == 2  # the first row is data
    assert tr.service_s is not None and tr.service_s.tolist() == [2.0, 1.0]


def test_an_index_past_the_last_column_is_a_missing_column(tmp_path: Path) -> None:
    p = _write(tmp_path, "h.csv", "0.0,3\n")
    with pytest.raises(TraceFormatError, match=r"missing column\(s\) '5'; found 2 columns"):
        load_trace(p, "csv", time_col="5", count_col="1", no_header=True)


def test_a_headed_csv_takes_an_index_too(tmp_path: Path) -> None:
    tr = load_trace(_write(tmp_path, "d.csv", DIFFUSION), time_col="0", service_col="4")
    assert isinstance(tr, RequestTrace) and tr.service_s is not None and tr.service_s.max() == 6.25


def test_check_columns_names_the_flag_and_the_fix(tmp_path: Path) -> None:
    p = _write(tmp_path, "d.csv", DIFFUSION)
    check_columns(p, {"--time-col": "ts", "--service-time-column": "exec_time_seconds"}, no_header=False)
    with pytest.raises(ConfigError, match=r"--service-time-column 'exec_s': no such column .*fix: give a header"):
        check_columns(p, {"--service-time-column": "exec_s"}, no_header=False)
    with pytest.raises(ConfigError, match=r"--time-col 'ts': .*0-based index"):
        check_columns(p, {"--time-col": "ts"}, no_header=True)


def test_a_servegen_chunk_file_is_detected_and_replayed_as_counts_per_second(tmp_path: Path) -> None:
    p = _write(tmp_path, "chunk-7-trace.csv", SERVEGEN_ROWS)
    assert detect_format(p) == "servegen"
    a, b = load_trace(p), load_trace(p, "servegen")
    assert isinstance(a, CountSeries) and isinstance(b, CountSeries)
    assert a.counts.tolist() == b.counts.tolist() and len(a.counts) == 1800
    # Window 1 is idle; windows 0 and 2 ask for ceil(rate x 600) arrivals (minus the few past the window end).
    assert a.counts[600:1200].sum() == 0 and 250 <= a.counts[:600].sum() <= 300
    c = load_trace(p, seed=1)
    assert isinstance(c, CountSeries) and c.counts.tolist() != a.counts.tolist()  # the seed matters


def test_servegen_clients_select_files_of_a_folder(tmp_path: Path) -> None:
    _write(tmp_path, "chunk-1-trace.csv", SERVEGEN_ROWS)
    _write(tmp_path, "chunk-2-trace.csv", SERVEGEN_ROWS.replace("0,0.5,", "0,5.0,"))
    one = load_trace(tmp_path, clients=[1])
    both = load_trace(tmp_path)
    assert isinstance(one, CountSeries) and isinstance(both, CountSeries)
    assert one.requests < both.requests
    with pytest.raises(Exception, match=r"unknown ServeGen client\(s\) \[9\]"):
        load_trace(tmp_path, clients=[9])
    with pytest.raises(ConfigError, match="--servegen-client"):
        load_trace(tmp_path / "chunk-1-trace.csv", "csv", time_col="0", clients=[1])


def test_no_header_is_refused_outside_csv(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="--no-header"):
        load_trace(_write(tmp_path, "chunk-1-trace.csv", SERVEGEN_ROWS), "servegen", no_header=True)


SHARED = Path(__file__).resolve().parents[3].parent / "shared" / "data"


def test_the_real_h200_request_log_loads_with_finished_minus_admitted() -> None:
    path = SHARED / "gpu" / "h200-serving" / "requests.csv"
    if not path.exists():
        pytest.skip(f"{path} is absent (the shared data folder is not beside the repository)")
    tr = load_trace(path, time_col="arrival", service_col="finished-admitted", tokens_in_col="prompt_tokens",
                    tokens_out_col="gen_tokens")
    assert isinstance(tr, RequestTrace) and tr.requests == 9108 and tr.service_s is not None
    assert 0.0 <= float(tr.service_s.min()) and float(np.median(tr.service_s)) < 10.0


def test_a_real_servegen_chunk_file_is_detected() -> None:
    path = SHARED / "traces" / "servegen" / "reason" / "deepseek-r1" / "chunk-35-trace.csv"
    if not path.exists():
        pytest.skip(f"{path} is absent (the shared data folder is not beside the repository)")
    assert detect_format(path) == "servegen"
    tr = load_trace(path)
    assert isinstance(tr, CountSeries) and len(tr.counts) == 86_400 and tr.requests > 100_000
