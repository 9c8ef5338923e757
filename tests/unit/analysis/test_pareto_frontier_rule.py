"""The batch frontier equals the simple scalar rule, and a report too costly to compute is refused fast."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ebb.analysis.pareto as analysis_pareto
from ebb.analysis.measurements import Measurement, parse_objectives
from ebb.analysis.pareto import MAX_COMPARISONS, batch_frontier, pareto_report
from ebb.errors import InputError
from ebb.gates import pareto


def scalar_rule(points: list[tuple[float, ...]]) -> tuple[list[int], dict[int, int]]:
    """The definition, one pair at a time: frontier indexes, and each dominated row's earliest frontier dominator."""
    def dominates(a: tuple[float, ...], b: tuple[float, ...]) -> bool:
        return all(x <= y for x, y in zip(a, b, strict=True)) and a != b
    front = [i for i, p in enumerate(points) if not any(dominates(q, p) for q in points)]
    by = {i: next(j for j in front if dominates(points[j], p)) for i, p in enumerate(points) if i not in front}
    return front, by


@settings(max_examples=200, deadline=None, derandomize=True, database=None)
@given(k=st.integers(2, 4), rows=st.integers(1, 40), data=st.data())
def test_the_batch_frontier_is_the_scalar_rule(k: int, rows: int, data: st.DataObject) -> None:
    # Few distinct values, so ties and duplicates (the rule's edge cases) are common.
    pts = [tuple(float(v) for v in data.draw(st.lists(st.integers(0, 4), min_size=k, max_size=k)))
           for _ in range(rows)]
    objectives = parse_objectives(",".join(f"o{j}" for j in range(k)))
    ms = [Measurement(line=i + 2, config=(f"c{i}",), values=p, ts_s=None) for i, p in enumerate(pts)]
    frontier, dominated = batch_frontier(ms, objectives)
    front, by = scalar_rule(pts)
    assert [m.line - 2 for m in frontier] == front
    assert {m.line - 2: b.line - 2 for m, b in dominated} == by


def _simplex(path: Path, n: int) -> Path:
    rng = np.random.default_rng(1)
    u, v = rng.random(n), rng.random(n)
    flip = u + v > 1
    u[flip], v[flip] = 1 - u[flip], 1 - v[flip]
    rows = "".join(f"c{i},{a:.9f},{b:.9f},{1 - a - b:.9f}\n" for i, (a, b) in enumerate(zip(u, v, strict=True)))
    path.write_text("cfg,a,b,c\n" + rows)
    return path


def test_a_three_objective_simplex_past_the_work_bound_is_refused_before_the_full_filter_runs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # 60,000 x 60,000 x 3 = 1.1e10 comparisons; the timing (130 s for 100,000 rows before) is bench/pareto_rule.py's.
    csv = _simplex(tmp_path / "simplex.csv", 60_000)
    filtered: list[int] = []

    def spy(points: np.ndarray) -> np.ndarray:
        filtered.append(len(points))
        return pareto.pareto_mask(points)

    monkeypatch.setattr(analysis_pareto, "pareto_mask", spy)
    with pytest.raises(InputError) as err:
        pareto_report(csv, parse_objectives("a,b,c"))
    assert filtered == [10_000]  # only the sample was filtered
    msg = str(err.value)
    assert str(csv) in msg and f"{MAX_COMPARISONS:.0e}" in msg and "60,000 rows" in msg and "fix:" in msg


def test_a_simplex_under_the_bound_is_reported_whole(tmp_path: Path) -> None:
    report = pareto_report(_simplex(tmp_path / "simplex.csv", 3_000), parse_objectives("a,b,c"))
    assert len(report.frontier) == 3_000 and not report.dominated
