"""Blocks of proven holds against one compiled kernel: what the comeback bound costs per reconcile.

Issue #30 asked whether Ebb's blocks of proven holds (the fluid simulator's speed-up, vectorised twins of
the one-tick rules) should be kept or replaced by one compiled kernel (numba) that runs the exact rules
every tick and so needs no proof. The comeback bound is the part of a reconcile such a kernel cannot
make cheap: every tick records a need (a sorted insertion into up to ``memory`` rises) and queries the
floor, whose Gumbel tail takes the mean and standard deviation of every rise in memory by numpy's
pairwise sums (bit for bit, or decisions drift). This script times, per simulated second, on the
default policy's bound (61 s horizon, 60 horizons of memory: 3,660 rises) fed a day of bursty needs:

* ``python``  — today's one-tick path: ``ComebackBound.record`` then ``floor``;
* ``block``   — today's block path: ``records_ahead`` + ``floor_below`` + ``commit`` over blocks of 256
  (what a block of proven holds spends on the bound), per tick;
* ``numba``   — the same record and floor compiled (ring, sorted insertion, numpy's pairwise sum
  reimplemented), per tick; checked equal to ``python`` floor by floor.

It prints medians of ``--repeats`` runs and the ratios, and what ``numba`` alone would cost over the
58-day run (5,011,200 reconciles). Needs numba (``pip install numba``); without it the numba row says so.

    python bench/hold_kernel.py [--seconds 86400] [--repeats 3]
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from ebb.decide.comeback import ComebackBound, floor_below  # noqa: E402

HORIZON_S = 61.1
MEMORY_S = 60 * HORIZON_S
LEVEL_S = HORIZON_S
BUDGET = 0.001
DAYS58 = 5_011_200


def needs(seconds: int, seed: int = 0) -> np.ndarray:
    """A day of bursty per-second needs (replica units): a diurnal level, Poisson noise, bursts."""
    rng = np.random.default_rng(seed)
    t = np.arange(seconds)
    level = 8.0 + 5.0 * np.sin(2 * np.pi * t / 86_400.0)
    burst = (rng.random(seconds) < 0.002).astype(float) * rng.gamma(2.0, 4.0, seconds)
    return np.maximum(level + rng.normal(0.0, 0.8, seconds) + np.convolve(burst, np.ones(30), "same"), 0.0)


def bound() -> ComebackBound:
    return ComebackBound(HORIZON_S, memory_s=MEMORY_S, level_s=LEVEL_S, periodic=False)


def run_python(v: np.ndarray) -> tuple[float, list[float]]:
    b, out = bound(), []
    t0 = time.perf_counter()
    for x in v.tolist():
        b.record(x)
        out.append(b.floor(BUDGET).floor_replicas)
    return time.perf_counter() - t0, out


def run_block(v: np.ndarray, size: int = 256) -> float:
    b = bound()
    t0 = time.perf_counter()
    for k in range(0, len(v), size):
        ahead = b.records_ahead(v[k:k + size])
        floor_below(b, ahead, BUDGET)
        b.commit(ahead, 0, len(ahead.values))
    return time.perf_counter() - t0


def numba_kernel():  # type: ignore[no-untyped-def]
    """The compiled record + floor (None without numba)."""
    try:
        import numba  # noqa: PLC0415
    except ImportError:
        return None

    @numba.njit(cache=False, inline="always")
    def term(a, i, mean, sq):  # a[i], or its squared deviation (numpy's ``d = r - mean; d * d``)
        if sq:
            d = a[i] - mean
            return d * d
        return a[i]

    @numba.njit(cache=False)
    def pairwise(a, lo, n, mean, sq):  # numpy's pairwise_sum for contiguous float64 (blocks of 128)
        if n < 8:
            s = -0.0
            for i in range(n):
                s += term(a, lo + i, mean, sq)
            return s
        if n <= 128:
            r0, r1, r2, r3 = term(a, lo, mean, sq), term(a, lo + 1, mean, sq), term(a, lo + 2, mean, sq), \
                term(a, lo + 3, mean, sq)
            r4, r5, r6, r7 = term(a, lo + 4, mean, sq), term(a, lo + 5, mean, sq), term(a, lo + 6, mean, sq), \
                term(a, lo + 7, mean, sq)
            i = 8
            top = n - (n % 8)
            while i < top:
                r0 += term(a, lo + i, mean, sq)
                r1 += term(a, lo + i + 1, mean, sq)
                r2 += term(a, lo + i + 2, mean, sq)
                r3 += term(a, lo + i + 3, mean, sq)
                r4 += term(a, lo + i + 4, mean, sq)
                r5 += term(a, lo + i + 5, mean, sq)
                r6 += term(a, lo + i + 6, mean, sq)
                r7 += term(a, lo + i + 7, mean, sq)
                i += 8
            s = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
            while i < n:
                s += term(a, lo + i, mean, sq)
                i += 1
            return s
        n2 = n // 2
        n2 -= n2 % 8
        return pairwise(a, lo, n2, mean, sq) + pairwise(a, lo + n2, n - n2, mean, sq)

    @numba.njit(cache=False)
    def kernel(v, h, lvl_n, cap, budget, gscale, z):
        m = len(v)
        out = np.empty(m)
        ring = np.zeros(cap)
        srt = np.empty(cap)
        n_rises = 0
        hist = np.zeros(m)  # every need (the windows read back into it)
        lvl_sum = 0.0
        pend_lvl = np.zeros(m)
        for i in range(m):
            x = v[i]
            x = x if (x > 0.0 and x < np.inf) else 0.0
            hist[i] = x
            lvl_sum += x
            if i >= lvl_n:
                lvl_sum -= hist[i - lvl_n]
            level = max(lvl_sum / min(i + 1, lvl_n), 0.0)
            pend_lvl[i] = level
            tau = i - h
            if tau >= 0 and tau >= lvl_n - 1:
                ahead = hist[i - h + 1]
                for j in range(i - h + 2, i + 1):
                    ahead = max(ahead, hist[j])
                rise = ahead - pend_lvl[tau]
                k = min(n_rises, cap)
                if n_rises >= cap:  # drop the overwritten rise from the sorted copy, in place
                    p = np.searchsorted(srt[:k], ring[n_rises % cap])
                    for j in range(p, k - 1):
                        srt[j] = srt[j + 1]
                    k -= 1
                p = np.searchsorted(srt[:k], rise, side="right")
                for j in range(k, p, -1):
                    srt[j] = srt[j - 1]
                srt[p] = rise
                ring[n_rises % cap] = rise
                n_rises += 1
            n = min(n_rises, cap)
            if n == 0:
                out[i] = np.nan
                continue
            q = min(n - 1, int(math.ceil((1.0 - budget) * n)) - 1)
            r = srt[max(q, 0)]
            mean = pairwise(ring, 0, n, 0.0, False) / n
            std = math.sqrt(pairwise(ring, 0, n, mean, True) / n)
            r = max(r, mean + gscale * z * std)
            out[i] = level + max(r, 0.0)
        return out

    return kernel


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=int, default=86_400)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    if args.seconds < 3 * int(MEMORY_S) or args.repeats < 1:
        ap.error(f"--seconds must be >= {3 * int(MEMORY_S)} and --repeats >= 1")
    v = needs(args.seconds)
    py_times, block_times, nb_times = [], [], []
    ref: list[float] = []
    for _ in range(args.repeats):
        dt, ref = run_python(v)
        py_times.append(dt)
        block_times.append(run_block(v))
    kernel = numba_kernel()
    exact = None
    if kernel is not None:
        from ebb.decide.comeback.streams import GUMBEL_SCALE, gumbel_z  # noqa: PLC0415

        b = bound()
        h, lvl_n, cap = int(math.ceil(HORIZON_S)), int(round(LEVEL_S)), int(math.ceil(MEMORY_S))
        t0 = time.perf_counter()
        got = kernel(v[:5000], h, lvl_n, cap, BUDGET, GUMBEL_SCALE, gumbel_z(BUDGET))
        compile_s = time.perf_counter() - t0
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            got = kernel(v, h, lvl_n, cap, BUDGET, GUMBEL_SCALE, gumbel_z(BUDGET))
            nb_times.append(time.perf_counter() - t0)
        want = np.array(ref)
        exact = bool(np.array_equal(got, want, equal_nan=True))
        diff = float(np.nanmax(np.abs(got - want))) if not exact else 0.0
        del b
    per = {name: statistics.median(ts) / args.seconds * 1e6 for name, ts in
           (("python", py_times), ("block", block_times), ("numba", nb_times)) if ts}
    print(f"comeback bound, {args.seconds:,} reconciles, memory {int(MEMORY_S):,} rises, median of {args.repeats}:")
    for name, us in per.items():
        print(f"  {name:7s} {us:8.2f} µs per reconcile   58 days: {us * DAYS58 / 1e6:7.1f} s")
    if kernel is None:
        print("  numba   not installed (pip install numba): no compiled row")
    else:
        print(f"  numba compile {compile_s:.1f} s; floors equal to python's bit for bit: {exact}"
              + ("" if exact else f" (max difference {diff:.3g})"))
        print(f"  numba / block: {per['numba'] / per['block']:.2f}x   python / block: {per['python'] / per['block']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
