"""Named numeric columns of a recorded CSV, in one pass; a bad file names its line and column."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ebb.analysis.csv_series import read_series
from ebb.errors import InputError


def read_columns(path: Path, time_col: str, value_col: str) -> tuple[np.ndarray, np.ndarray]:
    """(t, value): one value column, as ``ebb bursts --value-col`` reads it."""
    t_s, values = read_series(path, time_col, {value_col: "pass --value-col with one of those names"})
    return t_s, values[value_col]


def _csv(tmp_path: Path, rows: list[str], header: str = "t,util_gpu") -> Path:
    p = tmp_path / "u.csv"
    p.write_text("\n".join([header, *rows]) + "\n")
    return p


def test_the_time_and_value_columns_come_back_as_float_arrays_skipping_blank_lines(tmp_path: Path) -> None:
    t, v = read_columns(_csv(tmp_path, ["0, 1", "", "0.5,2.5"], "t, util_gpu,other"), "t", "util_gpu")
    assert t.tolist() == [0.0, 0.5] and v.tolist() == [1.0, 2.5] and v.dtype.name == "float64"


def test_every_asked_column_is_read_and_the_time_column_may_also_be_a_value(tmp_path: Path) -> None:
    t, values = read_series(_csv(tmp_path, ["0,1,2", "1,3,4"], "t,a,b"), "t", {"a": "fix a", "t": "fix t"})
    assert t.tolist() == [0.0, 1.0] and values["a"].tolist() == [1.0, 3.0] and values["t"].tolist() == [0.0, 1.0]


@pytest.mark.parametrize(
    ("rows", "header", "match"),
    [
        (["0,1"], "t,util", r"u\.csv:1: no column 'util_gpu'"),
        (["0,1", "0.1,abc"], "t,util_gpu", r"u\.csv:3: column 'util_gpu' is not numeric"),
        (["0,1", "0.1,nan"], "t,util_gpu", r"u\.csv:3: column 'util_gpu' is not finite"),
        ([], "t,util_gpu", r"u\.csv:2: no data rows after the header"),
    ],
)
def test_bad_input_is_an_input_error_naming_file_and_line(
    tmp_path: Path, rows: list[str], header: str, match: str
) -> None:
    with pytest.raises(InputError, match=match):
        read_columns(_csv(tmp_path, rows, header), "t", "util_gpu")


def test_a_binary_or_missing_file_is_one_input_error(tmp_path: Path) -> None:
    binary = tmp_path / "image.csv"
    binary.write_bytes(bytes(range(256)) * 4)
    with pytest.raises(InputError, match="cannot read as CSV"):
        read_columns(binary, "t", "util_gpu")
    with pytest.raises(InputError, match="cannot open"):
        read_columns(tmp_path / "absent.csv", "t", "util_gpu")


def test_a_byte_order_mark_is_no_part_of_the_first_column_name(tmp_path: Path) -> None:
    """Before, the series reader decoded as utf-8 and named the first column '\\ufefft': "no column 't'"."""
    p = tmp_path / "bom.csv"
    p.write_bytes(b"\xef\xbb\xbft,util_gpu\n0,1\n1,100\n")
    t, v = read_columns(p, "t", "util_gpu")
    assert t.tolist() == [0.0, 1.0] and v.tolist() == [1.0, 100.0]
