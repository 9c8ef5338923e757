"""One full L1 → fleet step decision cycle for N workloads, vectorised, and how its cost grows with N.

Run: ``.venv/bin/python bench/cluster_cycle.py [--sizes 100,1000,10000] [--repeats 30]`` (about
a minute on 2 cores). Exit 1 when the 10,000-workload median is ≥ 50 ms (issue #17 item 4), or when
the scalar path grants differently.

Fleet: N random workloads of the note's three classes (ranked as both loops rank them,
:meth:`~ebb.decide.fleet_rank.FleetClasses.guarding`), 4 namespaces with a quota ``max``, 3 zones,
1–20 replicas each spread at random over the zones (about 1 in 10 still starting), random PDBs,
quota borrowers and signals (a few stale, unknown or breaching). One cycle, as the cluster simulator
runs it once per second with ``ebb:l1=fleet``:

* L1 :class:`~ebb.decide.fleet_policy.FleetEbb`: ``observe`` one second of Poisson arrivals, then
  ``decide`` (its weights recalibrated);
* the fleet step :func:`~ebb.decide.fleet_step.fleet_step` — the code the live fleet controller
  runs: quota on scale-ups, L2 vetoes and rank, L3 budget of N/10 removals, PDBs, zones. Proposals
  are L1's where it asks for a change, else a synthetic removal of 0–3 per workload (L1 asks for
  none until its comeback bound has closed rises, minutes into a run), so L3 does real work.

After ``--warmup`` cycles, ``--repeats`` cycles are timed one by one (inputs drawn outside the
timer); the table shows their median and P90 (P90 catches the 1-in-5 cycles where L1 closes a
comeback block). The scalar path — ``rank_candidates``, ``plan_cluster`` and ``plan_scale_down``
per workload over materialised :class:`~ebb.decide.coordinate.ReplicaView` lists (grouped by
workload beforehand; passing the whole fleet to every call is O(N²)), with a
:class:`~ebb.decide.coordinate.QuotaContext` — runs for N ≤ 1,000 on one snapshot, is checked to
grant the same counts, and is compared with the fleet step on that snapshot.
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
from ebb.decide.fleet_policy import FleetEbb  # noqa: E402
from ebb.decide.fleet_rank import FleetClasses  # noqa: E402
from ebb.decide.fleet_step import FleetProposals, FleetRules, FleetStep, fleet_step  # noqa: E402
from ebb.decide.quota import QoSClass, Quota, QuotaPod  # noqa: E402
from ebb.decide.semantics import WorkloadSignals, rank_candidates  # noqa: E402

ZONES = 3
NAMESPACES = 4
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
    weight: np.ndarray
    staleness: np.ndarray
    pdb: np.ndarray
    borrowed: np.ndarray
    synthetic_request: np.ndarray
    rules: FleetRules


def build(n: int, rng: np.random.Generator) -> Fleet:
    idx = rng.integers(0, len(CLASSES), n)
    of = FleetClasses.of(CLASSES, idx)
    slo_ms = np.where(np.isnan(of.p99_slo_ms), np.where(np.isnan(of.p95_slo_ms), 2000.0, of.p95_slo_ms),
                      of.p99_slo_ms)
    cols = FleetClasses.guarding(base_weight=of.base_weight, alpha=of.alpha, veto_margin=of.veto_margin,
                                 slo_ms=slo_ms, min_replicas=of.min_replicas)
    total = rng.integers(1, 21, n)
    per_zone = rng.multinomial(1, [1 / ZONES] * ZONES, size=(n, 20)).cumsum(axis=1)  # [n, 20, Z]
    held = per_zone[np.arange(n), total - 1]  # first `total` draws spread over zones
    starting = rng.binomial(held, 0.1)
    lat = slo_ms * rng.lognormal(np.log(0.4), 0.5, n)
    lat[rng.random(n) < 0.02] = np.nan
    staleness = np.where(rng.random(n) < 0.02, 30.0, rng.uniform(0.1, 1.0, n))
    borrowed = np.where(rng.random(n) < 0.3, rng.integers(0, 4, n), 0).clip(max=total)
    ns = rng.integers(0, NAMESPACES, n)
    rules = FleetRules(classes=cols, namespace=ns, namespace_names=tuple(f"ns{k}" for k in range(NAMESPACES)),
                       gpu_milli=np.full(n, 1000), quota_max_milli=np.full(NAMESPACES, 1000 * 12 * n // NAMESPACES),
                       cluster_budget=max(1, n // 10), max_staleness_s=2.0,
                       names=tuple(f"w{i:05d}" for i in range(n)))
    return Fleet(n=n, cls_idx=idx, cols=cols, ready=held - starting, starting=starting,
                 capacity_rps=rng.uniform(1.0, 10.0, n), slo_ms=slo_ms, p99=lat,
                 weight=of.base_weight * rng.uniform(1.0, 1.3, n), staleness=staleness,
                 pdb=np.where(rng.random(n) < 0.5, -1, rng.integers(0, 4, n)), borrowed=borrowed,
                 synthetic_request=rng.integers(0, 4, n), rules=rules)


def proposals(f: Fleet, target: np.ndarray, weight: np.ndarray, latency: np.ndarray,
              burst: np.ndarray) -> FleetProposals:
    return FleetProposals(spec=f.ready.sum(axis=1) + f.starting.sum(axis=1), target=target, weight=weight,
                          latency_ms=latency, staleness_s=f.staleness, burst=burst, ready=f.ready,
                          starting=f.starting, borrowed=f.borrowed, pdb_allowance=f.pdb)


class Cycle:
    """The vectorised cycle with its state (the L1 engine) carried between calls."""

    def __init__(self, f: Fleet, rng: np.random.Generator) -> None:
        self.f, self.rng, self.t = f, rng, 0.0
        self.spec = f.ready.sum(axis=1) + f.starting.sum(axis=1)
        self.ready_n, self.start_n = f.ready.sum(axis=1), f.starting.sum(axis=1)
        self.rate = f.capacity_rps * np.maximum(self.ready_n, 1) * rng.uniform(0.2, 0.7, f.n)
        self.l1 = FleetEbb(f.n, slo_ttft_ms=f.slo_ms, cold_start_s=np.full(f.n, 60.0),
                           min_replicas=f.cols.min_replicas, max_replicas=np.full(f.n, 40, dtype=np.int64),
                           capacity_rps=f.capacity_rps, classes=f.cols)
        self.step: FleetStep | None = None
        self.layer_ms: list[tuple[float, float]] = []

    def inputs(self) -> np.ndarray:
        return self.rng.poisson(self.rate).astype(float)

    def run(self, arrivals: np.ndarray) -> None:
        f = self.f
        self.t += 1.0
        t0 = time.perf_counter()
        self.l1.observe(self.t, arrivals=arrivals, queue=np.zeros(f.n), ready=self.ready_n, starting=self.start_n,
                        ttft_ms=f.p99)
        wants = self.l1.decide(self.t)
        target = np.where(wants.desired != self.spec, wants.desired, np.maximum(self.spec - f.synthetic_request, 0))
        t1 = time.perf_counter()
        self.step = fleet_step(proposals(f, target, wants.weight, wants.latency_ms, wants.burst), f.rules)
        t2 = time.perf_counter()
        self.layer_ms.append((1e3 * (t1 - t0), 1e3 * (t2 - t1)))


def timed(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1000.0


def scalar_cycle(f: Fleet) -> tuple[Callable[[], dict[str, int]], Callable[[], FleetStep]]:
    """The per-replica path and the fleet step on one snapshot (same proposals: synthetic removals)."""
    names = [f"w{i:05d}" for i in range(f.n)]
    classes, sigs, groups, pods, quotas = [], [], [], {}, {}
    for i, name in enumerate(names):
        classes.append(f.cols.workload_class(i, name))
        total = int(f.ready[i].sum() + f.starting[i].sum())
        sigs.append(WorkloadSignals(name, name, total, int(f.ready[i].sum()), float(f.p99[i]), float(f.p99[i]),
                                    float("nan"), False, float("nan"), float(f.staleness[i])))
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
    request = {names[i]: int(min(f.synthetic_request[i], f.ready[i].sum() + f.starting[i].sum())) for i in range(f.n)}
    weights = {names[i]: float(f.weight[i]) for i in range(f.n)}
    spec = f.ready.sum(axis=1) + f.starting.sum(axis=1)

    def scalar() -> dict[str, int]:
        cands = rank_candidates(classes, sigs, weights, max_staleness_s=2.0)
        cluster = plan_cluster(cands, request, f.rules.cluster_budget, quota=quota, replicas=every)
        out = {}
        for i, name in enumerate(names):
            pdb = int(f.pdb[i])
            out[name] = plan_scale_down(groups[i], name, request[name], pdb_max_unavailable=None if pdb < 0 else pdb,
                                        budget=cluster.granted(name), quota=quota).granted
        return out

    def vector() -> FleetStep:
        target = np.maximum(spec - f.synthetic_request, 0)
        return fleet_step(proposals(f, target, f.weight, f.p99, np.zeros(f.n, dtype=bool)), f.rules)

    return scalar, vector


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="100,1000,10000")
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--seed", type=int, default=17)
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    print(f"one cycle = L1 FleetEbb observe+decide, then fleet_step (quota, L2, L3); {ZONES} zones, "
          f"1-20 replicas/workload, {args.repeats} timed cycles after {args.warmup} warm-up")
    print(f"{'N':>7} {'median ms':>10} {'p90 ms':>8} {'us/workload':>12} {'growth':>7} {'granted':>8}   "
          "median L1 / step ms")
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
        granted = 0 if cyc.step is None else int(cyc.step.granted.sum())
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
        print(f"scalar L2+L3 N={n:,}: {ts:.1f} ms vs fleet step {tv:.2f} ms: {ts / tv:.0f}x "
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
