"""One full L1 → L2 → L3 decision cycle for N workloads, vectorised, and how its cost grows with N.

Run: ``.venv/bin/python bench/cluster_cycle.py [--sizes 100,1000,10000] [--repeats 30]`` (about
a minute on 2 cores). Exit 1 when the 10,000-workload median is ≥ 50 ms (issue #17 item 4).

Fleet: N random workloads of the note's three classes, 3 zones, 1–20 replicas each spread at
random over the zones (about 1 in 10 still starting), random PDBs, quota borrowers and signals
(a few stale, unknown or breaching). One cycle, as a simulator runs it once per second:

* L1 :class:`~ebb.decide.fleet_policy.FleetEbb`: ``observe`` one second of Poisson arrivals, then
  ``decide``;
* L2 :func:`~ebb.decide.fleet_rank.rank_fleet`: recalibrate weights, veto (L1's burst included),
  rank;
* L3 :func:`~ebb.decide.fleet_plan.plan_fleet`: split a budget of N/10 removals, PDBs, zones.
  Requests are L1's removals where it asks for some, else a synthetic 0–3 per workload (L1 asks
  for none until its comeback bound has closed rises, minutes into a run), so L3 does real work.

After ``--warmup`` cycles, ``--repeats`` cycles are timed one by one (inputs drawn outside the
timer); the table shows their median and P90 (P90 catches the 1-in-5 cycles where L1 closes a
comeback block). The scalar path — ``recalibrate_weight`` per workload, ``rank_candidates``,
``plan_cluster`` and ``plan_scale_down`` per workload over materialised
:class:`~ebb.decide.coordinate.ReplicaView` lists (grouped by workload beforehand; passing the
whole fleet to every call is O(N²)), with a :class:`~ebb.decide.coordinate.QuotaContext` — runs
for N ≤ 1,000 on one snapshot, is checked to grant the same counts, and is compared with the
vectorised L2 + L3 on that snapshot.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from ebb.config.workloads import default_workload_classes  # noqa: E402
from ebb.decide.coordinate import QuotaContext, ReplicaView, plan_cluster, plan_scale_down  # noqa: E402
from ebb.decide.fleet_plan import FleetPlan, plan_fleet  # noqa: E402
from ebb.decide.fleet_rank import FleetClasses, FleetRank, rank_fleet  # noqa: E402
from ebb.decide.quota import QoSClass, Quota, QuotaPod  # noqa: E402
from ebb.decide.semantics import WorkloadSignals, rank_candidates, recalibrate_weight  # noqa: E402

try:
    from ebb.decide.fleet_policy import FleetEbb
except ImportError:  # L1 not written yet: time L2 + L3 only
    FleetEbb = None  # type: ignore[assignment,misc]

ZONES = 3
LIMIT_MS = 50.0
SCALAR_MAX_N = 1_000
CLASSES = default_workload_classes()
GPU = "nvidia.com/gpu"


@dataclass
class Fleet:
    n: int
    cls_idx: np.ndarray
    cols: FleetClasses
    ready: np.ndarray
    starting: np.ndarray
    capacity_rps: np.ndarray
    slo_ms: np.ndarray
    p99: np.ndarray
    p95: np.ndarray
    success: np.ndarray
    util: np.ndarray
    staleness: np.ndarray
    pdb: np.ndarray
    borrowed: np.ndarray
    synthetic_request: np.ndarray
    budget: int


def build(n: int, rng: np.random.Generator) -> Fleet:
    idx = rng.integers(0, len(CLASSES), n)
    cols = FleetClasses.of(CLASSES, idx)
    total = rng.integers(1, 21, n)
    per_zone = rng.multinomial(1, [1 / ZONES] * ZONES, size=(n, 20)).cumsum(axis=1)  # [n, 20, Z]
    held = per_zone[np.arange(n), total - 1]  # first `total` draws spread over zones
    starting = rng.binomial(held, 0.1)
    slo_ms = np.where(np.isnan(cols.p99_slo_ms), np.where(np.isnan(cols.p95_slo_ms), 2000.0, cols.p95_slo_ms),
                      cols.p99_slo_ms)
    lat = slo_ms * rng.lognormal(np.log(0.4), 0.5, n)
    lat[rng.random(n) < 0.02] = np.nan
    success = np.where(rng.random(n) < 0.02, 0.99, 0.99995)
    staleness = np.where(rng.random(n) < 0.02, 30.0, rng.uniform(0.1, 1.0, n))
    borrowed = np.where(rng.random(n) < 0.3, rng.integers(0, 4, n), 0).clip(max=total)
    return Fleet(n=n, cls_idx=idx, cols=cols, ready=held - starting, starting=starting,
                 capacity_rps=rng.uniform(1.0, 10.0, n), slo_ms=slo_ms, p99=lat, p95=lat * 0.8,
                 success=success, util=rng.uniform(0.2, 0.9, n), staleness=staleness,
                 pdb=np.where(rng.random(n) < 0.5, -1, rng.integers(0, 4, n)), borrowed=borrowed,
                 synthetic_request=rng.integers(0, 4, n), budget=max(1, n // 10))


def l2(f: Fleet, prev: np.ndarray, burst: np.ndarray) -> FleetRank:
    return rank_fleet(f.cols, prev_weight=prev, latency_ms=f.p99, latency_slo_ms=f.slo_ms,
                      latency_p99_ms=f.p99, latency_p95_ms=f.p95, utilisation_ratio=f.util,
                      staleness_s=f.staleness, success_ratio=f.success, burst_active=burst,
                      replicas=f.ready.sum(axis=1) + f.starting.sum(axis=1))


def l3(f: Fleet, rank: FleetRank, request: np.ndarray) -> FleetPlan:
    return plan_fleet(ready=f.ready, starting=f.starting, request=request, order=rank.order,
                      vetoed=rank.vetoed, cluster_budget=f.budget, pdb_allowance=f.pdb, borrowed=f.borrowed)


class Cycle:
    """The vectorised cycle with its state (L1 engine, weights) carried between calls."""

    def __init__(self, f: Fleet, rng: np.random.Generator) -> None:
        self.f, self.rng, self.t = f, rng, 0.0
        self.weight = f.cols.base_weight.copy()
        ready_n, start_n = f.ready.sum(axis=1), f.starting.sum(axis=1)
        self.ready_n, self.start_n = ready_n, start_n
        self.rate = f.capacity_rps * np.maximum(ready_n, 1) * rng.uniform(0.2, 0.7, f.n)
        self.l1 = None if FleetEbb is None else FleetEbb(
            f.n, slo_ttft_s=f.slo_ms / 1000.0, cold_start_s=np.full(f.n, 60.0),
            min_replicas=f.cols.min_replicas, max_replicas=np.full(f.n, 40, dtype=np.int64),
            capacity_rps=f.capacity_rps, base_weight=f.cols.base_weight)
        self.plan: FleetPlan | None = None
        self.layer_ms: list[tuple[float, float, float]] = []

    def inputs(self) -> np.ndarray:
        return self.rng.poisson(self.rate).astype(float)

    def run(self, arrivals: np.ndarray) -> None:
        f = self.f
        self.t += 1.0
        t0 = time.perf_counter()
        if self.l1 is not None:
            self.l1.observe(self.t, arrivals=arrivals, queue=np.zeros(f.n), ready=self.ready_n,
                            starting=self.start_n, latency_ratio=f.p99 / f.slo_ms)
            targets = self.l1.decide(self.t)
            burst, request = targets.burst, np.where(targets.remove > 0, targets.remove, f.synthetic_request)
        else:
            burst, request = np.zeros(f.n, dtype=bool), f.synthetic_request
        t1 = time.perf_counter()
        rank = l2(f, self.weight, burst)
        self.weight = rank.weight
        t2 = time.perf_counter()
        self.plan = l3(f, rank, request)
        t3 = time.perf_counter()
        self.layer_ms.append((1e3 * (t1 - t0), 1e3 * (t2 - t1), 1e3 * (t3 - t2)))
        if self.l1 is not None:
            self.l1.weight = rank.weight
            self.l1.granted(self.t, self.plan.granted)


def timed(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1000.0


def scalar_cycle(f: Fleet) -> tuple[Callable[[], dict[str, int]], Callable[[], FleetPlan]]:
    """The per-replica path and the vectorised L2 + L3 on one snapshot (same inputs)."""
    names = [f"w{i:05d}" for i in range(f.n)]
    sigs, groups, pods, quotas = [], [], {}, {}
    for i, name in enumerate(names):
        cls = CLASSES[f.cls_idx[i]]
        total = int(f.ready[i].sum() + f.starting[i].sum())
        sigs.append(WorkloadSignals(name, cls.name, total, int(f.ready[i].sum()), float(f.p99[i]),
                                    float(f.p95[i]), float(f.success[i]), False, float(f.util[i]),
                                    float(f.staleness[i])))
        ns, mine = f"ns{i}", []
        for z in range(ZONES):
            for k in range(int(f.starting[i, z] + f.ready[i, z])):
                rid = f"{name}-z{z}-{k:02d}"
                mine.append(ReplicaView(rid, name, ns, f"z{z}", 0.5, ready=k >= f.starting[i, z]))
                pods[rid] = QuotaPod(rid, ns, QoSClass.GUARANTEED, requests={GPU: 1000})
        quotas[ns] = Quota(ns, min={GPU: 1000 * (total - int(f.borrowed[i]))})
        groups.append(mine)
    quota = QuotaContext(quotas, pods)
    every = [r for g in groups for r in g]
    prev = f.cols.base_weight
    request = {names[i]: int(f.synthetic_request[i]) for i in range(f.n)}

    def scalar() -> dict[str, int]:
        weights = {names[i]: recalibrate_weight(CLASSES[f.cls_idx[i]], float(prev[i]), float(f.p99[i]),
                                                float(f.slo_ms[i])) for i in range(f.n)}
        cands = rank_candidates(CLASSES, sigs, weights)
        cluster = plan_cluster(cands, request, f.budget, quota=quota, replicas=every)
        out = {}
        for i, name in enumerate(names):
            pdb = int(f.pdb[i])
            out[name] = plan_scale_down(groups[i], name, request[name], pdb_max_unavailable=None if pdb < 0 else pdb,
                                        budget=cluster.granted(name), quota=quota).granted
        return out

    def vector() -> FleetPlan:
        return l3(f, l2(f, prev, np.zeros(f.n, dtype=bool)), f.synthetic_request)

    return scalar, vector


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="100,1000,10000")
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--seed", type=int, default=17)
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    if FleetEbb is None:
        print("note: ebb.decide.fleet_policy.FleetEbb not found: timing L2 + L3 only")
    print(f"one cycle = {'L1 observe+decide, ' if FleetEbb is not None else ''}L2 rank_fleet, L3 plan_fleet; "
          f"{ZONES} zones, 1-20 replicas/workload, {args.repeats} timed cycles after {args.warmup} warm-up")
    print(f"{'N':>7} {'median ms':>10} {'p90 ms':>8} {'us/workload':>12} {'growth':>7} {'granted':>8}   median L1 / L2 / L3 ms")
    base: float | None = None
    medians: dict[int, float] = {}
    for n in sizes:
        rng = np.random.default_rng(args.seed)
        f = build(n, rng)
        cyc = Cycle(f, rng)
        for _ in range(args.warmup):
            cyc.run(cyc.inputs())
        times = []
        cyc.layer_ms.clear()
        for _ in range(args.repeats):
            a = cyc.inputs()
            times.append(timed(lambda: cyc.run(a)))
        med = statistics.median(times)
        p90 = float(np.percentile(times, 90))
        medians[n] = med
        base = med if base is None else base
        granted = 0 if cyc.plan is None else cyc.plan.total_granted
        print(f"{n:>7,} {med:>10.2f} {p90:>8.2f} {1000 * med / n:>12.2f} {med / base:>6.1f}x {granted:>8,}   "
              + " / ".join(f"{statistics.median(x):.2f}" for x in zip(*cyc.layer_ms)))
    print()
    for n in [s for s in sizes if s <= SCALAR_MAX_N]:
        f = build(n, np.random.default_rng(args.seed))
        scalar, vector = scalar_cycle(f)
        want = scalar()
        got = vector()
        same = all(int(got.granted[i]) == want[f"w{i:05d}"] for i in range(n))
        ts = statistics.median(timed(scalar) for _ in range(max(3, args.repeats // 6)))
        tv = statistics.median(timed(vector) for _ in range(args.repeats))
        print(f"scalar L2+L3 N={n:,}: {ts:.1f} ms vs vectorised {tv:.2f} ms: {ts / tv:.0f}x "
              f"(same grants: {'yes' if same else 'NO'})")
        if not same:
            return 1
    if 10_000 in medians:
        ok = medians[10_000] < LIMIT_MS
        print(f"\nN=10,000 median {medians[10_000]:.2f} ms {'<' if ok else '>='} {LIMIT_MS:.0f} ms: "
              f"{'PASS' if ok else 'FAIL'}")
        return 0 if ok else 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
