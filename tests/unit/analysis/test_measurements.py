"""A measurements CSV is read row by row; every bad file, row or column choice is one error naming it."""

from __future__ import annotations

from pathlib import Path

import pytest

import ebb.analysis.measurements as measurements
from ebb.analysis.measurements import MeasurementCsv, Objective, parse_objectives
from ebb.errors import ConfigError, InputError


def _write(tmp_path: Path, text: str, name: str = "m.csv") -> Path:
    f = tmp_path / name
    f.write_text(text)
    return f


def _read(path: Path, spec: str = "a,b", **kw: object) -> list[measurements.Measurement]:
    with MeasurementCsv(path, parse_objectives(spec), **kw) as src:  # type: ignore[arg-type]
        return list(src)


def _fails(path: Path, spec: str = "a,b", **kw: object) -> BaseException:
    with pytest.raises((InputError, ConfigError)) as exc:
        _read(path, spec, **kw)
    return exc.value


def test_objectives_parse_with_a_minus_for_maximise_and_need_two_distinct_columns() -> None:
    assert parse_objectives("mem, lat,-tokens") == (Objective("mem"), Objective("lat"), Objective("tokens", -1.0))
    assert parse_objectives("mem,-tokens")[1].spec == "-tokens"
    for spec in ("mem", "mem,", "mem,mem", "mem,-"):
        with pytest.raises(ConfigError):
            parse_objectives(spec)


def test_rows_keep_their_line_config_cells_and_values_and_the_default_config_is_the_other_columns(
        tmp_path: Path) -> None:
    f = _write(tmp_path, "ts_s,gpu,a,b\n0,h200,1,2\n\n5, h100 ,3,4\n")
    with MeasurementCsv(f, parse_objectives("a,-b"), time_column="ts_s") as src:
        rows = list(src)
        assert src.config_columns == ("gpu",) and src.n_rows == 2
    assert [(r.line, r.config, r.values, r.ts_s) for r in rows] == [(2, ("h200",), (1.0, 2.0), 0.0),
                                                                    (4, ("h100",), (3.0, 4.0), 5.0)]


def test_a_missing_column_names_the_column_the_header_and_the_flag(tmp_path: Path) -> None:
    f = _write(tmp_path, "batch,mem,lat\n1,1,1\n")
    exc = _fails(f, "mem,latency")
    assert isinstance(exc, InputError) and exc.line == 1
    assert "'latency'" in str(exc) and "batch, mem, lat" in str(exc) and "--minimize" in str(exc)
    exc = _fails(f, "mem,lat", config=["gpu"])
    assert isinstance(exc, InputError) and "'gpu'" in str(exc) and "--config" in str(exc)


@pytest.mark.parametrize(("cell", "what"), [("fast", "not a number"), ("nan", "not finite"), ("inf", "not finite")])
def test_a_bad_objective_value_names_its_line_and_column(tmp_path: Path, cell: str, what: str) -> None:
    f = _write(tmp_path, f"batch,mem,lat\n1,1,1\n2,2,{cell}\n")
    exc = _fails(f, "mem,lat")
    assert isinstance(exc, InputError) and exc.line == 3
    assert what in str(exc) and "'lat' (column 3)" in str(exc) and str(f) in str(exc)


def test_an_empty_file_a_short_row_and_a_repeated_header_are_refused(tmp_path: Path) -> None:
    exc = _fails(_write(tmp_path, ""))
    assert isinstance(exc, InputError) and "empty" in str(exc)
    exc = _fails(_write(tmp_path, "c,a,b\nx,1,1\ny,2\n"))
    assert isinstance(exc, InputError) and exc.line == 3 and "2 fields" in str(exc)
    exc = _fails(_write(tmp_path, "a,a,b\n1,1,1\n"))
    assert isinstance(exc, InputError) and "appears twice" in str(exc)


def test_a_column_cannot_be_both_configuration_and_measured(tmp_path: Path) -> None:
    f = _write(tmp_path, "ts_s,c,a,b\n0,x,1,1\n")
    assert isinstance(_fails(f, config=["c", "a"]), ConfigError)
    assert isinstance(_fails(f, config=["c", "c"]), ConfigError)
    assert isinstance(_fails(f, "ts_s,b", time_column="ts_s"), ConfigError)


def test_rows_out_of_time_order_are_refused_with_their_line(tmp_path: Path) -> None:
    f = _write(tmp_path, "ts_s,c,a,b\n0,x,1,1\n5,y,2,2\n5,w,2,2\n3,z,0,0\n")
    exc = _fails(f, time_column="ts_s")
    assert isinstance(exc, InputError) and exc.line == 5 and "backwards" in str(exc) and "sort" in str(exc)


def test_the_size_and_row_caps_are_enforced_before_any_row_is_handed_on(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    f = _write(tmp_path, "a,b\n1,1\n2,2\n3,0\n")
    monkeypatch.setattr(measurements, "MAX_ROWS", 2)
    exc = _fails(f)
    assert isinstance(exc, InputError) and exc.line == 4 and "more than 2 data rows" in str(exc)
    monkeypatch.setattr(measurements, "MAX_BYTES", 8)
    exc = _fails(f)
    assert isinstance(exc, InputError) and "over the 8-byte limit" in str(exc)


def test_a_binary_file_is_not_utf8_text(tmp_path: Path) -> None:
    f = tmp_path / "m.csv"
    f.write_bytes(b"a,b\n\xff\xfe,1\n")
    exc = _fails(f)
    assert isinstance(exc, InputError) and "not UTF-8" in str(exc)
