"""``ebb pareto``: the frontier of a measurements CSV as JSON or a table; a bad file exits 2 on one line.

Reading is tested in tests/unit/analysis/test_measurements.py, both modes against brute force in
tests/unit/analysis/test_pareto.py."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from ebb.cli.main import app
from ebb.errors import ConfigError

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
    assert table.exit_code == 0 and "2 of 3 measurements live, 1 expired" in table.output


def test_the_window_needs_both_flags_and_a_positive_length(tmp_path: Path) -> None:
    f = _write(tmp_path, "ts_s,a,b\n0,1,1\n")
    assert isinstance(_fails(f, "--minimize", "a,b", "--time-column", "ts_s"), ConfigError)
    assert isinstance(_fails(f, "--minimize", "a,b", "--window-s", "5"), ConfigError)
    assert isinstance(_fails(f, "--minimize", "a,b", "--time-column", "ts_s", "--window-s", "0"), ConfigError)


# -- errors -----------------------------------------------------------------------------------------

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


def test_the_table_prints_at_most_500_frontier_rows_and_json_has_them_all(tmp_path: Path) -> None:
    # 600 rows on the line a + b = 600: none dominates another.
    f = _write(tmp_path, "cfg,a,b\n" + "".join(f"c{i},{i},{600 - i}\n" for i in range(600)))
    res = CliRunner().invoke(app, ["pareto", str(f), "--minimize", "a,b"])
    assert res.exit_code == 0, res.output
    assert "c499" in res.output and "c500 " not in res.output and "... 100 more on the frontier (see --json)" in res.output
    assert len(_run(f, "--minimize", "a,b")["frontier"]) == 600
