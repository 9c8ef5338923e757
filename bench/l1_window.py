"""L1 engine benchmark: ingest throughput, accuracy and query latency vs ddsketch, fastdigest, hdrh.

Run: ``.venv/bin/python bench/l1_window.py [--json]`` (about 30 s on 2 cores).

* Ingest: 10,000 series × 200 samples (2 M, lognormal). Ebb ingests the 2 M samples in one
  vectorised call into one :class:`ColumnarSketch` (``ebb_samples_per_s``) and, streamed one 100 ms
  bucket at a time, into a 10 × 100 ms :class:`SlidingWindow` including bucket expiry
  (``ebb_window_samples_per_s``). Peers keep one sketch per series, as they must: ddsketch
  (``DDSketch.add`` loop) and hdrh (``record_value`` loop) on a 200-series subset, extrapolated
  (rate = samples / time, labelled ``subset``); fastdigest ``TDigest.from_values`` per series on all
  10,000 series.
* Accuracy: 200,000 samples per named distribution; max relative error |est − exact| / |exact| at
  P50/P90/P99/P99.9, exact = numpy ``method="lower"`` (the rank Ebb targets).
* Query: P99 of all 10,000 series from the filled sketch and from the window.
Every timing is the median of ``--repeats`` runs (default 5).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from ebb.window.sketch import ColumnarSketch  # noqa: E402
from ebb.window.sliding import SlidingWindow  # noqa: E402

QS = (0.5, 0.9, 0.99, 0.999)
S = 10_000
PER_SERIES = 200
SUBSET = 200  # series for the pure-Python peers


def _median_time(fn: Callable[[], object], repeats: int) -> float:
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return statistics.median(out)


def distributions(rng: np.random.Generator, n: int) -> dict[str, np.ndarray]:
    half = n // 2
    return {
        "uniform": rng.uniform(0.0, 100.0, n),
        "normal": np.abs(rng.normal(100.0, 15.0, n)),  # shifted positive (≥ 6 sd from 0)
        "lognormal": rng.lognormal(0.0, 1.0, n),
        "pareto": rng.pareto(1.5, n) + 1.0,
        "bimodal": np.concatenate([rng.normal(20.0, 2.0, half), rng.normal(80.0, 5.0, n - half)]),
    }


def ingest_rates(rng: np.random.Generator, repeats: int) -> dict[str, Any]:
    from ddsketch import DDSketch
    from fastdigest import TDigest
    from hdrh.histogram import HdrHistogram

    n = S * PER_SERIES
    sid = np.repeat(np.arange(S, dtype=np.int64), PER_SERIES)
    rng.shuffle(sid)
    val = rng.lognormal(3.0, 1.0, n)
    res: dict[str, Any] = {"series": S, "samples": n}

    sk = ColumnarSketch(S)
    sk.counts.fill(0)  # touch the pages once so the timing is the steady state, not page faults
    sk.ingest(sid, val)
    res["ebb_samples_per_s"] = n / _median_time(lambda: sk.ingest(sid, val), repeats)

    # streamed through the sliding window: 20 buckets of 100 ms, the last 10 force expiries
    ts = np.sort(rng.integers(0, 2_000_000_000, n)).astype(np.int64)
    edges = np.searchsorted(ts, np.arange(0, 2_100_000_000, 100_000_000))

    def window_run() -> None:
        win = SlidingWindow(S)
        for a, b in zip(edges[:-1], edges[1:], strict=True):
            win.ingest(sid[a:b], val[a:b], ts[a:b])

    win0 = SlidingWindow(S)
    win0.total.counts.fill(0)
    window_run()
    res["ebb_window_samples_per_s"] = n / _median_time(window_run, max(1, repeats - 2))

    per = [val[sid == s] for s in range(SUBSET)]
    sub_n = sum(len(p) for p in per)

    def dd() -> None:
        for p in per:
            d = DDSketch(relative_accuracy=0.01)
            for x in p.tolist():
                d.add(x)

    def hdr() -> None:
        for p in per:
            h = HdrHistogram(1, 10**13, 3)
            for x in (p * 1000.0).astype(np.int64).tolist():
                h.record_value(x)

    res["ddsketch_samples_per_s"] = sub_n / _median_time(dd, 3)
    res["hdrhistogram_samples_per_s"] = sub_n / _median_time(hdr, 3)
    res["peer_subset_series"] = SUBSET
    order = np.argsort(sid, kind="stable")
    all_per = np.split(val[order], np.cumsum(np.bincount(sid, minlength=S))[:-1])
    lists = [p.tolist() for p in all_per]  # conversion excluded: from_values takes a sequence

    def fd() -> None:
        for p in lists:
            TDigest.from_values(p)

    res["fastdigest_samples_per_s"] = n / _median_time(fd, 3)
    peers = ("ddsketch", "fastdigest", "hdrhistogram")
    best = max(res[f"{p}_samples_per_s"] for p in peers)
    res["ebb_vs_fastest_peer"] = res["ebb_samples_per_s"] / best
    for p in peers:
        res[f"ebb_vs_{p}"] = res["ebb_samples_per_s"] / res[f"{p}_samples_per_s"]

    def q_sketch() -> None:
        sk.quantile(0.99)

    win = SlidingWindow(S)
    win.ingest(sid, val, ts[:n] % 1_000_000_000)  # everything inside one 1 s window
    res["ebb_query_ms_10k_series"] = 1e3 * _median_time(q_sketch, 21)
    res["ebb_window_query_ms_10k_series"] = 1e3 * _median_time(lambda: win.quantile(0.99), 21)
    return res


def accuracy(rng: np.random.Generator) -> dict[str, Any]:
    from ddsketch import DDSketch
    from fastdigest import TDigest
    from hdrh.histogram import HdrHistogram

    out: dict[str, Any] = {}
    worst: dict[str, dict[float, float]] = {e: {q: 0.0 for q in QS} for e in ("ebb", "ddsketch", "fastdigest", "hdrhistogram")}
    for name, x in distributions(rng, 200_000).items():
        exact = {q: float(np.quantile(x, q, method="lower")) for q in QS}
        sk = ColumnarSketch(1)
        sk.ingest(np.zeros(x.size, dtype=np.int64), x)
        dd = DDSketch(relative_accuracy=0.01)
        for v in x.tolist():
            dd.add(v)
        td = TDigest.from_values(x.tolist())
        hd = HdrHistogram(1, 10**13, 3)
        for v in (x * 1000.0).astype(np.int64).tolist():
            hd.record_value(max(v, 1))
        est = {
            "ebb": {q: float(sk.quantile(q)[0]) for q in QS},
            "ddsketch": {q: float(dd.get_quantile_value(q) or 0.0) for q in QS},
            "fastdigest": {q: float(td.quantile(q)) for q in QS},
            "hdrhistogram": {q: hd.get_value_at_percentile(q * 100.0) / 1000.0 for q in QS},
        }
        out[name] = {}
        for eng, e in est.items():
            errs = {q: abs(e[q] - exact[q]) / abs(exact[q]) for q in QS}
            out[name][eng] = {f"p{q * 100:g}": round(errs[q], 6) for q in QS}
            for q in QS:
                worst[eng][q] = max(worst[eng][q], errs[q])
    res: dict[str, Any] = {"accuracy": out}
    for eng, w in worst.items():
        res[f"{eng}_p99_rel_err_max"] = w[0.99]
        res[f"{eng}_rel_err_max_all_q"] = max(w.values())
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    rng = np.random.default_rng(20191)
    t0 = time.perf_counter()
    res = ingest_rates(rng, args.repeats)
    res.update(accuracy(rng))
    res["targets_met"] = {
        "ebb_ge_20M_per_s": res["ebb_samples_per_s"] >= 20e6,
        "ebb_ge_2x_fastest_peer": res["ebb_vs_fastest_peer"] >= 2.0,
        "ebb_p99_rel_err_le_1pct": res["ebb_p99_rel_err_max"] <= 0.01,
        "query_le_20ms": res["ebb_query_ms_10k_series"] <= 20.0,
    }
    res["wall_s"] = time.perf_counter() - t0
    if args.json:
        print(json.dumps(res, indent=2))
        return
    print(f"ingest, {S:,} series x {PER_SERIES} samples (median of repeats):")
    for k in ("ebb", "ebb_window", "ddsketch", "fastdigest", "hdrhistogram"):
        note = f" (subset of {SUBSET} series, extrapolated)" if k in ("ddsketch", "hdrhistogram") else ""
        print(f"  {k:14s} {res[f'{k}_samples_per_s'] / 1e6:10.2f} M samples/s{note}")
    print(f"  ebb / fastest peer: {res['ebb_vs_fastest_peer']:.1f}x")
    print(f"P99 query, {S:,} series: sketch {res['ebb_query_ms_10k_series']:.2f} ms, "
          f"window {res['ebb_window_query_ms_10k_series']:.2f} ms")
    print("max relative error at P50/P90/P99/P99.9 per distribution:")
    for name, per in res["accuracy"].items():
        print(f"  {name:10s} " + "  ".join(f"{e}={max(v.values()):.4f}" for e, v in per.items()))
    print(f"ebb P99 max rel err: {res['ebb_p99_rel_err_max']:.5f}; targets: {res['targets_met']}")
    print(f"wall {res['wall_s']:.1f} s")


if __name__ == "__main__":
    main()
