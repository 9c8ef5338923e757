"""The frontier of measured configurations, batch and windowed, equals brute force; expired dominators free."""

from __future__ import annotations

import csv
import tempfile
from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ebb.analysis.measurements import Measurement, parse_objectives
from ebb.analysis.pareto import ParetoReport, batch_frontier, pareto_report, windowed_frontier
from ebb.errors import ConfigError, InputError

H200_PARETO = Path(__file__).resolve().parents[2] / "data" / "h200" / "pareto.csv"


def brute_force(points: Sequence[tuple[float, ...]]) -> list[bool]:
    """On the frontier iff no other point is <= in every objective and < in one (O(n^2), no numpy)."""
    def dom(a: tuple[float, ...], b: tuple[float, ...]) -> bool:
        return all(x <= y for x, y in zip(a, b)) and any(x < y for x, y in zip(a, b))
    return [not any(dom(q, p) for j, q in enumerate(points) if j != i) for i, p in enumerate(points)]


def _check_against_brute_force(report: ParetoReport, lines: list[int], points: Sequence[tuple[float, ...]]) -> None:
    """Frontier lines equal brute force; each dominated row's dominator is on the frontier and dominates it."""
    on = brute_force(points)
    assert [m.line for m in report.frontier] == [ln for ln, f in zip(lines, on) if f]
    assert [m.line for m, _ in report.dominated] == [ln for ln, f in zip(lines, on) if not f]
    by_line = dict(zip(lines, points))
    front = {m.line for m in report.frontier}
    for m, by in report.dominated:
        a, b = by_line[by.line], by_line[m.line]
        assert by.line in front
        assert all(x <= y for x, y in zip(a, b)) and any(x < y for x, y in zip(a, b))


def test_h200_frontier_with_a_maximised_column_equals_brute_force() -> None:
    report = pareto_report(H200_PARETO, parse_objectives("peak_mem_mib,latency_ms_p90,-tokens_per_s"),
                           config=["kind", "batch", "seq"])
    with H200_PARETO.open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    points = [(float(r["peak_mem_mib"]), float(r["latency_ms_p90"]), -float(r["tokens_per_s"])) for r in rows]
    _check_against_brute_force(report, list(range(2, len(rows) + 2)), points)
    assert report.frontier[0].values[2] == 41677.0  # as written in the file, not negated
    # Maximising tokens/s ranks like minimising cost per token (1 / tokens_per_s), so the frontier is
    # the union of docs/pareto.md's per-kind frontiers: no prefill and decode point dominate each other.
    assert [m.config for m in report.frontier] == [
        ("prefill", "1", "128"), ("prefill", "1", "512"), ("prefill", "2", "128"), ("prefill", "4", "128"),
        ("decode", "4", "128"), ("decode", "8", "128"), ("decode", "8", "896"), ("decode", "16", "512"),
        ("decode", "32", "128"), ("decode", "64", "128")]
    assert report.n_rows == 42 and report.window_s is None


WINDOWED = """\
ts_s,gpu,batch,mem,lat
0,h200,8,1,1
5,h200,16,2,2
12,h100,8,0.5,5
"""


def test_a_dominated_configuration_returns_when_its_dominator_expires(tmp_path: Path) -> None:
    f = tmp_path / "m.csv"
    f.write_text(WINDOWED)
    objs = parse_objectives("mem,lat")
    wide = pareto_report(f, objs, time_column="ts_s", window_s=20.0)
    assert [m.config for m in wide.frontier] == [("h200", "8"), ("h100", "8")]
    assert [(m.config, by.line) for m, by in wide.dominated] == [(("h200", "16"), 2)]
    assert (wide.now_s, wide.expired) == (12.0, 0)
    # A 10 s window at t = 12 keeps t > 2: the dominator (t = 0) expired, so (h200, 16) is re-examined.
    narrow = pareto_report(f, objs, time_column="ts_s", window_s=10.0)
    assert [m.line for m in narrow.frontier] == [3, 4] and narrow.dominated == () and narrow.expired == 1
    assert narrow.frontier[0].ts_s == 5.0
    batch = pareto_report(f, objs, config=["gpu", "batch"])
    assert [m.line for m in batch.frontier] == [m.line for m in wide.frontier]


def test_the_window_needs_a_time_column_and_a_positive_length_and_a_file_needs_rows(tmp_path: Path) -> None:
    f = tmp_path / "m.csv"
    f.write_text("ts_s,a,b\n0,1,1\n")
    objs = parse_objectives("a,b")
    for kw in ({"time_column": "ts_s"}, {"window_s": 5.0}, {"time_column": "ts_s", "window_s": 0.0}):
        with pytest.raises(ConfigError):
            pareto_report(f, objs, **kw)  # type: ignore[arg-type]
    f.write_text("a,b\n")
    with pytest.raises(InputError, match="no data rows") as exc:
        pareto_report(f, objs)
    assert exc.value.line == 2


def test_a_windowed_frontier_needs_a_time_on_every_row() -> None:
    with pytest.raises(ValueError, match="line 2"):
        windowed_frontier([Measurement(2, (), (1.0, 1.0))], parse_objectives("a,b"), 5.0)
    assert batch_frontier([], parse_objectives("a,b")) == ([], [])


_rows = st.lists(st.tuples(st.integers(0, 4), st.integers(0, 4), st.integers(0, 4)), min_size=1, max_size=25)


@settings(max_examples=60, deadline=None)
@given(rows=_rows, k=st.sampled_from([2, 3]), negate=st.booleans())
def test_the_frontier_equals_brute_force_in_both_modes_on_random_csvs(rows: list[tuple[int, int, int]], k: int,
                                                                      negate: bool) -> None:
    cols = ["o0", "o1", "o2"][:k]
    objs = parse_objectives(",".join(f"-{c}" if negate and i == 0 else c for i, c in enumerate(cols)))
    text = "cfg,ts_s," + ",".join(cols) + "\n" + "".join(
        f"c{i},{i},{','.join(str(v) for v in r[:k])}\n" for i, r in enumerate(rows))
    points = [tuple(-float(v) if negate and j == 0 else float(v) for j, v in enumerate(r[:k])) for r in rows]
    lines = list(range(2, len(rows) + 2))
    with tempfile.TemporaryDirectory() as d:
        f = Path(d) / "m.csv"
        f.write_text(text)
        batch = pareto_report(f, objs, config=["cfg"])
        _check_against_brute_force(batch, lines, points)
        # A window longer than the file: the online monitor ends where the batch mask does,
        # dominators included (both report the earliest dominating frontier row).
        wide = pareto_report(f, objs, config=["cfg"], time_column="ts_s", window_s=1000.0)
        assert [m.line for m in wide.frontier] == [m.line for m in batch.frontier]
        assert [(m.line, by.line) for m, by in wide.dominated] == [(m.line, by.line) for m, by in batch.dominated]
        # A 5 s window at the last row (t = n - 1) keeps rows with t > n - 6: brute force on those.
        recent = pareto_report(f, objs, config=["cfg"], time_column="ts_s", window_s=5.0)
        keep = [i for i in range(len(rows)) if i > len(rows) - 6]
        _check_against_brute_force(recent, [lines[i] for i in keep], [points[i] for i in keep])


@pytest.mark.parametrize("window_s", [0.0, -5.0, float("nan"), float("inf")])
def test_a_bad_window_names_the_flag_the_value_and_the_fix(tmp_path: Path, window_s: float) -> None:
    """Before: "--window-s must be a positive number of seconds, got 0", no fix, another format."""
    f = tmp_path / "m.csv"
    f.write_text("ts_s,a,b\n0,1,1\n")
    with pytest.raises(ConfigError) as exc:
        pareto_report(f, parse_objectives("a,b"), time_column="ts_s", window_s=window_s)
    assert f"--window-s {window_s!r}: must be a finite number > 0 (fix: " in str(exc.value)
