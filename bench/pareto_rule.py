"""``ebb pareto``'s batch frontier vs the simple scalar rule it replaces, in one process, on the same rows.

The simple rule is the definition applied one pair at a time in Python: a row is on the frontier when
no row costs no more in every objective and differs from it; a dominated row's dominator is the
earliest frontier row that dominates it. The new code is :func:`ebb.analysis.pareto.batch_frontier`
(:func:`ebb.gates.pareto.pareto_mask` — O(n log n) for 2 objectives, a blocked skyline for 3+ — then
the vectorised dominator search), with its work bound checked first. Cases: k = 2 and k = 3, uniform
random rows and rows on the simplex (every row non-dominated: the skyline's worst case). Each case
checks both results equal before timing, then prints the median of ``--repeats`` runs of each and the
ratio old / new. The simple rule is O(n^2) in Python, so ``--n`` stays small (default 1,500).

    python bench/pareto_rule.py [--n 1500] [--repeats 5] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ebb.analysis.measurements import Measurement, Objective, parse_objectives
from ebb.analysis.pareto import batch_frontier


def simple_rule(points: list[tuple[float, ...]]) -> tuple[list[int], dict[int, int]]:
    """Frontier indexes and each dominated row's earliest frontier dominator, one pair at a time."""
    def dominates(a: tuple[float, ...], b: tuple[float, ...]) -> bool:
        return all(x <= y for x, y in zip(a, b, strict=True)) and a != b
    front = [i for i, p in enumerate(points) if not any(dominates(q, p) for q in points)]
    by = {i: next(j for j in front if dominates(points[j], p)) for i, p in enumerate(points) if i not in front}
    return front, by


def _rows(kind: str, n: int, k: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    pts = rng.random((n, k))
    if kind == "simplex":
        pts = pts / pts.sum(axis=1, keepdims=True)  # on the plane sum = 1: nothing dominates anything
    return np.round(pts, 6)


def _new(ms: list[Measurement], objectives: Sequence[Objective]) -> tuple[list[int], dict[int, int]]:
    frontier, dominated = batch_frontier(ms, objectives)
    return [m.line for m in frontier], {m.line: b.line for m, b in dominated}


def _median_s(fn: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1500)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    results: list[dict[str, Any]] = []
    for kind in ("uniform", "simplex"):
        for k in (2, 3):
            pts = _rows(kind, args.n, k)
            tuples = [tuple(float(v) for v in row) for row in pts]
            ms = [Measurement(line=i, config=(f"c{i}",), values=t) for i, t in enumerate(tuples)]
            objectives = parse_objectives(",".join(f"o{j}" for j in range(k)))
            if _new(ms, objectives) != simple_rule(tuples):
                raise SystemExit(f"{kind} k={k}: the batch frontier differs from the simple rule")
            old_s = _median_s(lambda: simple_rule(tuples), args.repeats)
            new_s = _median_s(lambda: _new(ms, objectives), args.repeats)
            results.append({"case": f"{kind} k={k}", "n": args.n, "old_s": old_s, "new_s": new_s,
                            "ratio": old_s / new_s})
    if args.json:
        print(json.dumps(results))
        return
    for r in results:
        print(f"{r['case']:<12} n={r['n']:,}  simple rule {r['old_s'] * 1e3:9.1f} ms  batch {r['new_s'] * 1e3:7.2f} ms  "
              f"ratio {r['ratio']:8.1f}x (median of {args.repeats})")


if __name__ == "__main__":
    main()
