"""Ebb's ``pareto_mask`` vs ``paretoset``, cold and warm, on the same 100,000 random points.

Cases: k = 2 and k = 3, uniform on [0, 1)^k and correlated (a shared normal factor plus 0.3x
independent noise per objective). paretoset runs with ``distinct=False`` (duplicates kept, as
Ebb does) on a pandas DataFrame, in three ways:

* **cold** — its first call in a fresh subprocess: numba JIT-compiles its BNL kernels then
  (paretoset does not cache them on disk). Only the call is timed, not the imports or the data
  loading. Median of ``--cold-repeats`` subprocesses.
* **warm** — the numba path after one untimed call on the same DataFrame (so no compile, nor a
  recompile for a new array layout, is in the timing). Median of ``--repeats``.
* **numpy** — ``use_numba=False``. Median of ``--repeats``.

Ebb is timed the same way (median of ``--repeats``, after one untimed call). Every mask is
checked equal to Ebb's before anything is timed. The last lines say which of the issue's targets
(≥ 100× for k = 2, ≥ 10× for k = 3) hold against which baseline, judged on the smaller ratio of
the two distributions.

    python bench/pareto.py [--json] [--n 100000] [--repeats 15] [--cold-repeats 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from ebb.gates.pareto import pareto_mask

TARGETS = {2: 100.0, 3: 10.0}  # issue: Ebb at least this many times faster than paretoset
BASELINES = ("cold", "warm", "numpy")

# Runs in a fresh interpreter: load the points, import, then time the first paretoset call only.
_COLD_CHILD = """
import sys, time
import numpy as np
pts = np.load(sys.argv[1])
import pandas as pd
from paretoset import paretoset
df = pd.DataFrame(pts)
t0 = time.perf_counter()
mask = paretoset(df, sense=["min"] * pts.shape[1], distinct=False)
dt = time.perf_counter() - t0
np.save(sys.argv[2], np.asarray(mask, dtype=bool))
print(dt)
"""


def _median_s(fn: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _cold_s(pts: npt.NDArray[np.float64], expected: npt.NDArray[np.bool_], repeats: int,
            tmp: Path) -> float:
    """Median first-call time of paretoset over ``repeats`` fresh subprocesses."""
    src, out = tmp / "points.npy", tmp / "mask.npy"
    np.save(src, pts)
    times = []
    for _ in range(repeats):
        done = subprocess.run([sys.executable, "-c", _COLD_CHILD, str(src), str(out)],
                              capture_output=True, text=True, check=False, timeout=600)
        if done.returncode != 0:
            raise RuntimeError(f"cold paretoset subprocess failed: {done.stderr.strip()}")
        if not np.array_equal(np.load(out), expected):
            raise RuntimeError("cold paretoset mask differs from Ebb's")
        times.append(float(done.stdout.strip().splitlines()[-1]))
    return statistics.median(times)


def _cases(n: int, seed: int) -> list[tuple[int, str, npt.NDArray[np.float64]]]:
    rng = np.random.default_rng(seed)
    out = []
    for k in (2, 3):
        shared = rng.standard_normal((n, 1))
        out.append((k, "uniform", rng.random((n, k))))
        out.append((k, "correlated", shared + 0.3 * rng.standard_normal((n, k))))
    return out


def _verdicts(results: list[dict[str, Any]]) -> list[str]:
    lines = []
    for k, target in TARGETS.items():
        rows = [r for r in results if r["k"] == k]
        parts = []
        for b in BASELINES:
            worst = min(r[f"ratio_vs_{b}"] for r in rows)
            parts.append(f"vs {b} {'HOLDS' if worst >= target else 'fails'} ({worst:,.0f}x)")
        lines.append(f"target k={k} >= {target:.0f}x: " + "; ".join(parts))
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--cold-repeats", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    try:
        import pandas as pd  # type: ignore[import-untyped]
        from paretoset import paretoset  # type: ignore[import-untyped]
    except ImportError:
        print("paretoset is not installed: pip install paretoset", file=sys.stderr)
        return 2

    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="ebb-pareto-") as tmp:
        for k, dist, pts in _cases(args.n, args.seed):
            df = pd.DataFrame(pts)
            sense = ["min"] * k
            ours = pareto_mask(pts)
            warm = np.asarray(paretoset(df, sense=sense, distinct=False))  # also the JIT warm-up
            numpy_mode = np.asarray(paretoset(df, sense=sense, distinct=False, use_numba=False))
            if not (np.array_equal(ours, warm) and np.array_equal(ours, numpy_mode)):
                print(f"MISMATCH k={k} {dist}", file=sys.stderr)
                return 1
            t = {"ebb": _median_s(lambda: pareto_mask(pts), args.repeats),
                 "cold": _cold_s(pts, ours, args.cold_repeats, Path(tmp)),
                 "warm": _median_s(lambda: paretoset(df, sense=sense, distinct=False),
                                   args.repeats),
                 "numpy": _median_s(lambda: paretoset(df, sense=sense, distinct=False,
                                                      use_numba=False), args.repeats)}
            row: dict[str, Any] = {"k": k, "dist": dist, "n": args.n, "frontier": int(ours.sum())}
            row.update({f"{name}_ms": s * 1e3 for name, s in t.items()})
            row.update({f"ratio_vs_{b}": t[b] / t["ebb"] for b in BASELINES})
            results.append(row)
    verdicts = _verdicts(results)
    if args.json:
        print(json.dumps({"results": results, "verdicts": verdicts}, indent=2))
        return 0
    print(f"n = {args.n:,}; median of {args.repeats} (cold: of {args.cold_repeats} fresh "
          "subprocesses, first call only)\n")
    print("| k | distribution | frontier | Ebb ms | paretoset cold ms | ratio | "
          "warm (numba) ms | ratio | numpy ms | ratio |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['k']} | {r['dist']} | {r['frontier']} | {r['ebb_ms']:.2f} | "
              f"{r['cold_ms']:,.0f} | {r['ratio_vs_cold']:,.0f}x | {r['warm_ms']:.2f} | "
              f"{r['ratio_vs_warm']:.1f}x | {r['numpy_ms']:.1f} | {r['ratio_vs_numpy']:.0f}x |")
    print()
    print("\n".join(verdicts))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
