"""Ebb's ``pareto_mask`` vs ``paretoset`` on the same 100,000 random points, same process.

Cases: k = 2 and k = 3, uniform on [0, 1)^k and correlated (a shared normal factor plus 0.3x
independent noise per objective). paretoset is run with ``distinct=False`` (duplicates kept, as
Ebb does) both in its default mode (numba BNL, JIT warmed up beforehand, compile time excluded)
and with ``use_numba=False`` (its numpy algorithm). Every mask is checked equal. Times are the
median of ``--repeats`` runs; a paretoset case slower than 0.2 s per call is timed only
``--slow-repeats`` times. paretoset's *first* numba call in a process (JIT compile, or a
recompile for a new array layout) costs ~0.7–2.5 s and is excluded here.

    python bench/pareto.py [--json] [--n 100000] [--repeats 15] [--slow-repeats 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable

import numpy as np

from ebb.gates.pareto import pareto_mask


def _median_s(fn: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--slow-repeats", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    try:
        import pandas as pd  # type: ignore[import-untyped]
        from paretoset import paretoset  # type: ignore[import-untyped]
    except ImportError:
        print("paretoset is not installed: pip install paretoset", file=sys.stderr)
        return 2

    rng = np.random.default_rng(args.seed)
    for k in (2, 3):  # JIT warm-up, excluded from the timings
        paretoset(rng.random((200, k)), sense=["min"] * k, distinct=False)
    results = []
    for k in (2, 3):
        shared = rng.standard_normal((args.n, 1))
        cases = {"uniform": rng.random((args.n, k)),
                 "correlated": shared + 0.3 * rng.standard_normal((args.n, k))}
        for dist, pts in cases.items():
            df = pd.DataFrame(pts)
            ours = pareto_mask(pts)
            ref = np.asarray(paretoset(df, sense=["min"] * k, distinct=False))
            ref_np = np.asarray(paretoset(df, sense=["min"] * k, distinct=False, use_numba=False))
            if not (np.array_equal(ours, ref) and np.array_equal(ours, ref_np)):
                print(f"MISMATCH k={k} {dist}", file=sys.stderr)
                return 1
            t_ebb = _median_s(lambda: pareto_mask(pts), args.repeats)
            t0 = time.perf_counter()
            paretoset(df, sense=["min"] * k, distinct=False)
            slow = time.perf_counter() - t0 > 0.2
            t_ps = _median_s(lambda: paretoset(df, sense=["min"] * k, distinct=False),
                             args.slow_repeats if slow else args.repeats)
            t_np = _median_s(lambda: paretoset(df, sense=["min"] * k, distinct=False, use_numba=False),
                             args.repeats)
            results.append({"k": k, "dist": dist, "n": args.n, "frontier": int(ours.sum()),
                            "ebb_ms": t_ebb * 1e3, "paretoset_numba_ms": t_ps * 1e3,
                            "paretoset_numpy_ms": t_np * 1e3,
                            "ratio_vs_numba": t_ps / t_ebb, "ratio_vs_numpy": t_np / t_ebb,
                            "paretoset_numba_repeats": args.slow_repeats if slow else args.repeats})
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        print(f"n = {args.n:,}, median of {args.repeats} (numba k=2 uniform: fewer when > 0.2 s)\n")
        print("| k | distribution | frontier | Ebb ms | paretoset (numba) ms | ratio | paretoset (numpy) ms | ratio |")
        print("|---|---|---|---|---|---|---|---|")
        for r in results:
            print(f"| {r['k']} | {r['dist']} | {r['frontier']} | {r['ebb_ms']:.2f} | {r['paretoset_numba_ms']:.1f} | "
                  f"{r['ratio_vs_numba']:.0f}x | {r['paretoset_numpy_ms']:.1f} | {r['ratio_vs_numpy']:.0f}x |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
