"""A long per-second count series end to end in ``fluid`` fidelity: wall time per policy.

Workload: the ServeGen ``language/m-large`` trace (Alibaba Bailian, Apache-2.0; 162 clients'
request rates per 600 s window over 14 days) summed over clients, tiled to ``--days`` days and
turned into a per-second count series with Poisson counts (seeded). Without ``../shared`` a
diurnal synthetic rate is used instead (said in the output). Then ``compare`` runs the
policies (default ``hpa,keda,static,oracle``; ``--policy ebb,...`` adds Ebb's) with
``--peak-replicas 20`` and the wall time of each policy — the oracle's includes its schedule
search — is printed with µs of wall time per simulated second, its GPU-hours, violations and
scale-down judgement, then each policy's wall time as a ratio to HPA's (same process, same workload).

    python bench/fluid_long.py [--days 58] [--policy hpa,keda,static,ebb,oracle]
    python bench/fluid_long.py --days 58 --calibrate-days 1 --policy hpa,ebb

``--calibrate-days D`` measures the policies alone: the load multiple is calibrated on the first
``D`` days (the same ``calibrate`` as ``--peak-replicas 20``), the oracle is neither searched nor run
(over 58 days its search alone would take most of an hour), and every policy starts from the 20
replicas the calibration aims the oracle's peak at.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from ebb.model.ids import TraceName
from ebb.model.trace import CountSeries
from ebb.sim.compare import calibrate, compare, prepare, simulate_one
from ebb.sim.policy_context import PolicyContext
from ebb.sim.policies import KNOWN_POLICIES, build_policy
from ebb.sim.settings import SimSettings
from ebb.config.policy_specs import parse_policies

SERVEGEN = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "traces" / "servegen" / "language" / "m-large"


def _rate_per_window() -> tuple[np.ndarray, str]:
    files = sorted(SERVEGEN.glob("chunk-*-trace.csv")) if SERVEGEN.exists() else []
    if not files:
        t = np.arange(14 * 144)
        return 200 + 150 * np.sin(2 * np.pi * t / 144), "synthetic diurnal rate (../shared absent)"
    total: np.ndarray | None = None
    for f in files:
        rows = np.genfromtxt(f, delimiter=",", usecols=(0, 1))
        idx = (rows[:, 0] // 600).astype(np.int64)
        r = np.zeros(idx.max() + 1)
        np.add.at(r, idx, rows[:, 1])
        if total is None:
            total = r
        else:
            n = max(len(total), len(r))
            total = np.pad(total, (0, n - len(total))) + np.pad(r, (0, n - len(r)))
    assert total is not None
    return total, f"ServeGen language/m-large, {len(files)} clients summed"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--days", type=int, default=58)
    ap.add_argument("--policy", default="hpa,keda,static,oracle")
    ap.add_argument("--calibrate-days", type=float, default=0.0,
                    help="calibrate the load on this many first days and run the policies without the oracle")
    args = ap.parse_args()
    if args.days < 1:
        ap.error(f"--days must be at least 1, got {args.days}")
    if not 0 <= args.calibrate_days <= args.days:
        ap.error(f"--calibrate-days must be within 0..--days ({args.days}), got {args.calibrate_days:g}")
    win, desc = _rate_per_window()
    seconds = args.days * 86400
    per_s = np.repeat(np.resize(win, int(np.ceil(seconds / 600))), 600)[:seconds]
    counts = np.random.default_rng(0).poisson(per_s).astype(np.int64)
    series = CountSeries(TraceName(f"servegen-m-large-{args.days}d"), counts)
    print(f"workload: {desc}; {seconds:,} one-second bins, {int(counts.sum()):,} requests")
    if args.calibrate_days:
        return _policies_alone(series, counts, args)
    t0 = time.perf_counter()
    marks: list[tuple[str, float]] = []
    cmp = compare(series, parse_policies(args.policy, KNOWN_POLICIES), SimSettings(),
                  fidelity="fluid", peak_replicas=20,
                  on_step=lambda m: marks.append((m, time.perf_counter() - t0)))
    search_s = next((t for m, t in marks if m.startswith("simulating")), 0.0)
    walls: dict[str, float] = {}
    for run in cmp.runs:
        c = run.scorecard
        extra = search_s if c.policy == "oracle" else 0.0
        walls[c.policy] = c.wall_s + extra
        print(f"  {c.policy:8s} {c.wall_s + extra:6.1f} s  {1e6 * (c.wall_s + extra) / seconds:7.1f} µs/simulated s  "
              f"GPU-h {c.gpu_hours:9.1f}  "
              f"violations {c.slo_violation_pct:6.3f} %  peak {c.peak_replicas}  misjudged "
              f"{c.misjudged_scale_downs}/{c.scale_downs}  delay {c.sla_violation_delay_ms:.0f} ms", flush=True)
    _print_ratios(walls)
    print(f"oracle search: {search_s:.1f} s (included in the oracle's figure); total {time.perf_counter() - t0:.1f} s")
    return 0


def _policies_alone(series: CountSeries, counts: np.ndarray, args: argparse.Namespace) -> int:
    """Each policy's own run on the whole series at the load calibrated on its first days."""
    settings = SimSettings()
    head = CountSeries(TraceName("calibration"), counts[:int(args.calibrate_days * 86400)])
    t0 = time.perf_counter()
    k, _ = calibrate(head, 20, settings)
    print(f"load x{k:.4g} (calibrated on the first {args.calibrate_days:g} days in {time.perf_counter() - t0:.1f} s)")
    w = prepare(series, "fluid", settings, load_scale=k)
    ctx = PolicyContext(settings=settings, oracle_schedule=np.array([20], dtype=np.int64))
    walls: dict[str, float] = {}
    for item in parse_policies(args.policy, KNOWN_POLICIES):
        if item.name == "oracle":
            print("  oracle   skipped (its search is not run with --calibrate-days)")
            continue
        run = simulate_one(w, build_policy(item, ctx), settings)
        c = run.scorecard
        walls[c.policy] = c.wall_s
        print(f"  {c.policy:8s} {c.wall_s:6.1f} s  {1e6 * c.wall_s / len(counts):7.1f} µs/simulated s  "
              f"GPU-h {c.gpu_hours:9.1f}  violations {c.slo_violation_pct:6.3f} %  peak {c.peak_replicas}  "
              f"decisions {c.scale_ups + c.scale_downs}", flush=True)
    _print_ratios(walls)
    return 0


def _print_ratios(walls: dict[str, float]) -> None:
    """Each policy's wall time as a ratio to HPA's (same process, same workload), when HPA ran."""
    if "hpa" in walls:
        for name, wall in walls.items():
            if name != "hpa":
                print(f"  {name} / hpa wall time: {wall / max(walls['hpa'], 1e-9):.2f}x")


if __name__ == "__main__":
    sys.exit(main())
