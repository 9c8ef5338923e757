"""``ebb pareto``: the frontier of a measurements CSV, batch and windowed, against brute force."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from ebb.cli.main import app
from ebb.errors import ConfigError, InputError

H200_PARETO = Path(__file__).resolve().parents[2] / "data" / "h200" / "pareto.csv"


def _run(path: Path, *args: str) -> dict[str, Any]:
    res = CliRunner().invoke(app, ["pareto", str(path), "--json", *args])
    assert res.exit_code == 0, res.output
    out: dict[str, Any] = json.loads(res.output)
    return out


def _fails(path: Path, *args: str) -> BaseException:
    res = CliRunner().invoke(app, ["pareto", str(path), *args])
    assert res.exit_code != 0 and res.exception is not None, res.output
    return res.exception


def _write(tmp_path: Path, text: str, name: str = "m.csv") -> Path:
    f = tmp_path / name
    f.write_text(text)
    return f


def brute_force(points: Sequence[tuple[float, ...]]) -> list[bool]:
    """On the frontier iff no other point is <= in every objective and < in one (O(n^2), no numpy)."""
    def dom(a: tuple[float, ...], b: tuple[float, ...]) -> bool:
        return all(x <= y for x, y in zip(a, b)) and any(x < y for x, y in zip(a, b))
    return [not any(dom(q, p) for j, q in enumerate(points) if j != i) for i, p in enumerate(points)]


def _check_against_brute_force(out: dict[str, Any], lines: list[int], points: Sequence[tuple[float, ...]]) -> None:
    """Frontier lines equal brute force; each dominated row's dominator is on the frontier and dominates it."""
    on = brute_force(points)
    assert [p["line"] for p in out["frontier"]] == [ln for ln, f in zip(lines, on) if f]
    assert [p["line"] for p in out["dominated"]] == [ln for ln, f in zip(lines, on) if not f]
    by_line = dict(zip(lines, points))
    front = {p["line"] for p in out["frontier"]}
    for d in out["dominated"]:
        a, b = by_line[d["dominated_by"]["line"]], by_line[d["line"]]
        assert d["dominated_by"]["line"] in front
        assert all(x <= y for x, y in zip(a, b)) and any(x < y for x, y in zip(a, b))


# -- the real H200 sweep ------------------------------------------------------------------------

def test_h200_frontier_equals_an_independent_brute_force() -> None:
    out = _run(H200_PARETO, "--config", "kind,batch,seq", "--minimize", "peak_mem_mib,latency_ms_p90")
    with H200_PARETO.open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    points = [(float(r["peak_mem_mib"]), float(r["latency_ms_p90"])) for r in rows]
    _check_against_brute_force(out, list(range(2, len(rows) + 2)), points)
    assert out["objectives"] == ["peak_mem_mib", "latency_ms_p90"] and out["measurements"] == 42
    assert out["window"] is None and out["config_columns"] == ["kind", "batch", "seq"]
    # Two objectives across both kinds: the fastest prefill (3.1 ms at 22,575 MiB) and the
    # fastest decode at the smallest memory (4.124 ms at 22,560 MiB); the other 40 are dominated.
    assert [p["config"] for p in out["frontier"]] == [{"kind": "prefill", "batch": "1", "seq": "128"},
                                                      {"kind": "decode", "batch": "4", "seq": "128"}]
    assert out["frontier"][1]["values"] == {"peak_mem_mib": 22560.0, "latency_ms_p90": 4.124}
    assert len(out["dominated"]) == 40


def test_a_minus_prefix_maximises_the_column() -> None:
    out = _run(H200_PARETO, "--config", "kind,batch,seq", "--minimize",
               "peak_mem_mib,latency_ms_p90,-tokens_per_s")
    with H200_PARETO.open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    points = [(float(r["peak_mem_mib"]), float(r["latency_ms_p90"]), -float(r["tokens_per_s"])) for r in rows]
    _check_against_brute_force(out, list(range(2, len(rows) + 2)), points)
    assert out["objectives"][2] == "-tokens_per_s"
    # Values are reported as written in the file, not negated.
    assert out["frontier"][0]["values"]["tokens_per_s"] == 41677.0
    # Maximising tokens/s ranks like minimising cost per token (1 / tokens_per_s), so the frontier is
    # the union of docs/pareto.md's per-kind frontiers: no prefill and decode point dominate each other.
    assert [tuple(p["config"].values()) for p in out["frontier"]] == [
        ("prefill", "1", "128"), ("prefill", "1", "512"), ("prefill", "2", "128"), ("prefill", "4", "128"),
        ("decode", "4", "128"), ("decode", "8", "128"), ("decode", "8", "896"), ("decode", "16", "512"),
        ("decode", "32", "128"), ("decode", "64", "128")]


def test_the_default_config_is_every_other_column_and_the_table_names_the_dominator() -> None:
    out = _run(H200_PARETO)  # default objectives: peak_mem_mib, latency_ms_p90
    assert out["config_columns"] == ["kind", "batch", "seq", "latency_ms_median", "tokens_per_s"]
    res = CliRunner().invoke(app, ["pareto", str(H200_PARETO), "--config", "kind,batch,seq"])
    assert res.exit_code == 0, res.output
    assert "frontier: 2 of 42" in res.output and "dominated: 40" in res.output
    assert "decode/4/128" in res.output


# -- windowed mode: the online monitor ------------------------------------------------------------

WINDOWED = """\
ts_s,gpu,batch,mem,lat
0,h200,8,1,1
5,h200,16,2,2
12,h100,8,0.5,5
"""


def test_a_dominated_configuration_returns_when_its_dominator_expires(tmp_path: Path) -> None:
    f = _write(tmp_path, WINDOWED)
    args = ("--minimize", "mem,lat", "--time-column", "ts_s")
    # A 20 s window holds all three: (h200, 8) at t=0 dominates (h200, 16).
    wide = _run(f, *args, "--window-s", "20")
    assert [p["config"] for p in wide["frontier"]] == [{"gpu": "h200", "batch": "8"}, {"gpu": "h100", "batch": "8"}]
    assert [(d["config"]["batch"], d["dominated_by"]["line"]) for d in wide["dominated"]] == [("16", 2)]
    assert wide["window"] == {"time_column": "ts_s", "window_s": 20.0, "now_s": 12.0, "live": 3, "expired": 0}
    # A 10 s window at t = 12 keeps t > 2: the dominator (t = 0) expired, so (h200, 16) is re-examined
    # and nothing left dominates it.
    narrow = _run(f, *args, "--window-s", "10")
    assert [p["line"] for p in narrow["frontier"]] == [3, 4] and narrow["dominated"] == []
    assert narrow["frontier"][0]["ts_s"] == 5.0
    assert narrow["window"]["live"] == 2 and narrow["window"]["expired"] == 1
    # Without a window the whole file is one batch: the same as the 20 s window.
    batch = _run(f, "--minimize", "mem,lat", "--config", "gpu,batch")
    assert [p["line"] for p in batch["frontier"]] == [p["line"] for p in wide["frontier"]]
    table = CliRunner().invoke(app, ["pareto", str(f), *args, "--window-s", "10"])
    assert table.exit_code == 0 and "2 of 3 measurement(s) live, 1 expired" in table.output


def test_rows_out_of_time_order_are_refused_with_their_line(tmp_path: Path) -> None:
    f = _write(tmp_path, "ts_s,c,a,b\n0,x,1,1\n5,y,2,2\n3,z,0,0\n")
    exc = _fails(f, "--minimize", "a,b", "--time-column", "ts_s", "--window-s", "10")
    assert isinstance(exc, InputError) and exc.line == 4 and "backwards" in str(exc) and "sort" in str(exc)


def test_the_window_needs_both_flags_and_a_positive_length(tmp_path: Path) -> None:
    f = _write(tmp_path, "ts_s,a,b\n0,1,1\n")
    assert isinstance(_fails(f, "--minimize", "a,b", "--time-column", "ts_s"), ConfigError)
    assert isinstance(_fails(f, "--minimize", "a,b", "--window-s", "5"), ConfigError)
    assert isinstance(_fails(f, "--minimize", "a,b", "--time-column", "ts_s", "--window-s", "0"), ConfigError)


# -- errors -----------------------------------------------------------------------------------------

def test_a_missing_column_names_the_column_the_header_and_the_flag(tmp_path: Path) -> None:
    f = _write(tmp_path, "batch,mem,lat\n1,1,1\n")
    exc = _fails(f, "--minimize", "mem,latency")
    assert isinstance(exc, InputError) and exc.line == 1
    assert "'latency'" in str(exc) and "batch, mem, lat" in str(exc) and "--minimize" in str(exc)
    exc = _fails(f, "--minimize", "mem,lat", "--config", "gpu")
    assert isinstance(exc, InputError) and "'gpu'" in str(exc) and "--config" in str(exc)


@pytest.mark.parametrize(("cell", "what"), [("fast", "not a number"), ("nan", "not finite"), ("inf", "not finite")])
def test_a_bad_objective_value_names_its_line_and_column(tmp_path: Path, cell: str, what: str) -> None:
    f = _write(tmp_path, f"batch,mem,lat\n1,1,1\n2,2,{cell}\n")
    exc = _fails(f, "--minimize", "mem,lat")
    assert isinstance(exc, InputError) and exc.line == 3
    assert what in str(exc) and "'lat' (column 3)" in str(exc) and str(f) in str(exc)


def test_fewer_than_two_objectives_is_a_usage_error(tmp_path: Path) -> None:
    f = _write(tmp_path, "batch,mem,lat\n1,1,1\n")
    for spec in ("mem", "mem,", "mem,mem", "mem,-"):
        assert isinstance(_fails(f, "--minimize", spec), ConfigError), spec


def test_an_empty_file_and_a_header_only_file_are_refused(tmp_path: Path) -> None:
    exc = _fails(_write(tmp_path, ""), "--minimize", "a,b")
    assert isinstance(exc, InputError) and "empty" in str(exc)
    exc = _fails(_write(tmp_path, "a,b\n", "h.csv"), "--minimize", "a,b")
    assert isinstance(exc, InputError) and "no data rows" in str(exc) and exc.line == 2


def test_a_short_row_and_a_config_that_is_also_an_objective_are_refused(tmp_path: Path) -> None:
    f = _write(tmp_path, "c,a,b\nx,1,1\ny,2\n")
    exc = _fails(f, "--minimize", "a,b")
    assert isinstance(exc, InputError) and exc.line == 3 and "2 fields" in str(exc)
    assert isinstance(_fails(f, "--minimize", "a,b", "--config", "c,a"), ConfigError)


def test_the_size_and_row_caps_are_enforced_before_any_output(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    import ebb.cli.pareto as pareto_cli

    f = _write(tmp_path, "a,b\n1,1\n2,2\n3,0\n")
    monkeypatch.setattr(pareto_cli, "MAX_ROWS", 2)
    exc = _fails(f, "--minimize", "a,b")
    assert isinstance(exc, InputError) and exc.line == 4 and "more than 2 data rows" in str(exc)
    monkeypatch.setattr(pareto_cli, "MAX_BYTES", 8)
    exc = _fails(f, "--minimize", "a,b")
    assert isinstance(exc, InputError) and "over the 8-byte limit" in str(exc)


def test_a_bad_file_exits_2_with_one_line_naming_the_line_and_the_fix(tmp_path: Path) -> None:
    f = _write(tmp_path, "batch,mem,lat\n1,1,oops\n")
    res = subprocess.run([sys.executable, "-c", "from ebb.cli.main import main; main()", "pareto", str(f),
                          "--minimize", "mem,lat"], capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and res.stderr.count("\n") == 1, res.stderr
    assert f"{f}:2:" in res.stderr and "'oops'" in res.stderr and "fix:" in res.stderr


def test_markup_in_a_configuration_cell_is_printed_verbatim(tmp_path: Path) -> None:
    f = _write(tmp_path, "c,a,b\n[bold]x[/],1,1\n[/y],2,2\n")
    res = CliRunner().invoke(app, ["pareto", str(f), "--minimize", "a,b"])
    assert res.exit_code == 0, res.output
    assert "[bold]x[/]" in res.output and "[/y]" in res.output


# -- property: the command equals brute force on random small CSVs ---------------------------------

_rows = st.lists(st.tuples(st.integers(0, 4), st.integers(0, 4), st.integers(0, 4)), min_size=1, max_size=25)


@settings(max_examples=30, deadline=None)  # 3 CLI runs each, ~70 ms apiece (typer builds the app)
@given(rows=_rows, k=st.sampled_from([2, 3]), negate=st.booleans())
def test_the_command_frontier_equals_brute_force_on_random_csvs(rows: list[tuple[int, int, int]], k: int,
                                                                 negate: bool) -> None:
    cols = ["o0", "o1", "o2"][:k]
    specs = [f"-{c}" if negate and i == 0 else c for i, c in enumerate(cols)]
    text = "cfg,ts_s," + ",".join(cols) + "\n" + "".join(
        f"c{i},{i},{','.join(str(v) for v in r[:k])}\n" for i, r in enumerate(rows))
    points = [tuple(-float(v) if negate and j == 0 else float(v) for j, v in enumerate(r[:k])) for r in rows]
    lines = list(range(2, len(rows) + 2))
    with tempfile.TemporaryDirectory() as d:
        f = _write(Path(d), text)
        batch = _run(f, "--config", "cfg", "--minimize", ",".join(specs))
        _check_against_brute_force(batch, lines, points)
        # A window longer than the file: the online monitor ends where the batch mask does,
        # dominators included (both report the earliest dominating frontier row).
        wide = _run(f, "--config", "cfg", "--minimize", ",".join(specs), "--time-column", "ts_s",
                    "--window-s", "1000")
        strip = [{k2: v for k2, v in p.items() if k2 != "ts_s"} for p in wide["frontier"]]
        assert strip == batch["frontier"]
        assert [(d2["line"], d2["dominated_by"]["line"]) for d2 in wide["dominated"]] == \
               [(d2["line"], d2["dominated_by"]["line"]) for d2 in batch["dominated"]]
        # A 5 s window at the last row (t = n - 1) keeps rows with t > n - 6: brute force on those.
        recent = _run(f, "--config", "cfg", "--minimize", ",".join(specs), "--time-column", "ts_s",
                      "--window-s", "5")
        keep = [i for i in range(len(rows)) if i > len(rows) - 6]
        _check_against_brute_force(recent, [lines[i] for i in keep], [points[i] for i in keep])
