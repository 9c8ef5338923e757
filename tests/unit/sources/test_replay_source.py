"""CSV replay: good files become batches; malformed metrics are rejected naming file, line and column."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ebb.errors import InputError
from ebb.sources.base import MetricSource, batch_from_columns
from ebb.sources.replay import CsvReplaySource, read_table
from ebb.testing.fakes import StaticSource

DATA = Path(__file__).resolve().parents[2] / "data"


def write(tmp_path: Path, text: str, name: str = "m.csv") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_a_wide_csv_with_a_time_column_becomes_one_series_per_column(tmp_path: Path) -> None:
    p = write(tmp_path, "t,cpu_pct,power_w\n0.0,10,100\n0.5,20,110\n1.0,30,120\n")
    src = CsvReplaySource(p)
    assert isinstance(src, MetricSource)
    batch = src.read()
    assert batch.series == ("cpu_pct", "power_w")
    ts, v = batch.of("power_w")
    assert ts.tolist() == [0, 500_000_000, 1_000_000_000]
    assert v.tolist() == [100.0, 110.0, 120.0]
    assert src.read() is batch  # idempotent


def test_files_without_time_are_stamped_at_row_index_times_step(tmp_path: Path) -> None:
    p = write(tmp_path, "cpu_util_percent,mem_util_percent\n1,2\n3,4\n5,6\n")
    ts, v = CsvReplaySource(p, step_s=10).read().of("mem_util_percent")
    assert ts.tolist() == [0, 10 * 10**9, 20 * 10**9]
    assert v.tolist() == [2.0, 4.0, 6.0]


def test_a_file_without_time_and_without_step_is_rejected_with_the_fix(tmp_path: Path) -> None:
    p = write(tmp_path, "a,b\n1,2\n")
    with pytest.raises(InputError, match="--step-s"):
        read_table(p)


def test_non_numeric_label_columns_are_skipped_and_reported() -> None:
    table = read_table(DATA / "h200-gpm" / "gpm.csv")
    assert table.skipped == ("phase",)
    assert "sm_util" in table.columns and len(table.t_s) == 239


@pytest.mark.parametrize(
    ("body", "line", "column", "what"),
    [
        ("t,util_pct\n0,1\n1,nan\n", 3, "util_pct", "non-finite"),
        ("t,util_pct\n0,1\n1,2\n2,inf\n", 4, "util_pct", "non-finite"),
        ("t,power_w\n0,1\n1,-5\n", 3, "power_w", "negative"),
        ("t,mem_used_mib\n0,1\n1,2\n2,3\n3,-0.5\n", 5, "mem_used_mib", "negative"),
        ("t,util_pct\n0,1\n1,\n", 3, "util_pct", "empty cell"),
        ("t,util_pct\n0,1\n1,abc\n", 3, "util_pct", "non-numeric"),
        ("t,util_pct\n0,1\nnan,2\n", 3, "t", "non-finite"),
        ("t,util_pct\n1,1\n0,2\n", 3, "t", "backwards"),
    ],
)
def test_malformed_values_are_rejected_naming_file_line_and_column(
        tmp_path: Path, body: str, line: int, column: str, what: str) -> None:
    p = write(tmp_path, body)
    with pytest.raises(InputError) as info:
        CsvReplaySource(p).read()
    err = info.value
    assert err.path == str(p) and err.line == line and err.fix
    assert f"{p}:{line}:" in str(err) and repr(column) in str(err) and what in str(err)


def test_negative_values_are_allowed_where_the_unit_permits_a_sign(tmp_path: Path) -> None:
    p = write(tmp_path, "t,temp_c,delta\n0,-5,-1\n")
    assert CsvReplaySource(p).read().value.tolist() == [-5.0, -1.0]


def test_a_ragged_row_is_rejected_with_its_line(tmp_path: Path) -> None:
    p = write(tmp_path, "t,a_pct\n0,1\n1,2,3\n")
    with pytest.raises(InputError, match=r":3: row has 3 fields"):
        read_table(p)


def test_requested_columns_must_exist_and_be_numeric(tmp_path: Path) -> None:
    p = write(tmp_path, "t,phase,a_pct\n0,idle,1\n")
    with pytest.raises(InputError, match="'phase' has non-numeric"):
        read_table(p, columns=["phase"])
    with pytest.raises(InputError, match="not in header"):
        read_table(p, columns=["nope"])


def test_long_format_files_keep_integer_nanoseconds_exactly(tmp_path: Path) -> None:
    p = write(tmp_path, "ts_ns,series,value\n1764454800123456789,gpu0/power_w,300.5\n"
                        "1764454800223456789,gpu0/util_gpu_pct,64\n")
    batch = CsvReplaySource(p).read()
    assert batch.of("gpu0/power_w")[0].tolist() == [1764454800123456789]
    bad = write(tmp_path, "ts_ns,series,value\n1,gpu0/power_w,-3\n", "bad.csv")
    with pytest.raises(InputError, match=r"bad.csv:2:.*negative"):
        CsvReplaySource(bad).read()


def test_a_missing_file_is_an_input_error_not_an_os_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="cannot read"):
        CsvReplaySource(tmp_path / "absent.csv").read()


def test_the_static_fake_serves_its_batches_in_order_then_repeats_the_last() -> None:
    a = batch_from_columns([0], {"x_pct": [1.0]})
    b = batch_from_columns([1], {"x_pct": [2.0]})
    src = StaticSource([a, b])
    assert [src.read(), src.read(), src.read()] == [a, b, b]
    assert np.array_equal(src.read().value, [2.0]) and src.reads == 4
