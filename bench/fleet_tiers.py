"""The fleet L1's decision cost per cycle with asleep tiers on and off, and the tier rule against its scalar twin.

Run: ``.venv/bin/python bench/fleet_tiers.py [--n 10000] [--repeats 40] [--rule-repeats 7]`` (about a
minute on 2 cores). Exit 1 when the N-workload median cycle with tiers is ≥ 50 ms (issue #33, the
limit issue #17 set for the fleet cycle), or when the fleet twins and the scalar rules disagree.

Fleet: :func:`cluster_cycle.build`'s N workloads (the note's three classes, 1-20 replicas, random
capacities and SLOs). With tiers, each workload has its own tier: ``wake_s`` drawn from 0.3-6 s (vLLM
sleep levels 1 and 2, docs/tiers.md), ``sleep_max`` from 1-8, and 0 to ``sleep_max`` replicas asleep
each cycle. One cycle is :meth:`~ebb.decide.fleet_policy.FleetEbb.observe` of one second of Poisson
arrivals, then :meth:`~ebb.decide.fleet_policy.FleetEbb.decide`. The run is past its warm-up (two
cold horizons), so the comeback bounds have closed rises, the floors are known and the tier rules
act. After ``--warmup`` cycles, ``--repeats`` cycles are timed one by one (inputs drawn outside the
timer), tiers off and tiers on alternately in the same process. The table prints their median, P90
and mean (one cycle in five closes a comeback block, two bounds with tiers: the P90 and the mean
carry that cost, the median does not).

The tier rule alone: each cycle's inputs to the three tier rules (the cold floor, the wake floor, the
need, the fleet, the sleepers, ``sleep_max``, the bounds) through the fleet twins of
:mod:`ebb.decide.tier_rules` (``tier_floors``, ``awoken_many``, ``asleep_kept_many``), against the
scalar rules EbbPolicy runs (``tier_floor``, ``awoken``, ``asleep_kept``), called once per workload
in a Python loop. Both get the same inputs, their answers are checked equal, and the ratio is printed.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from cluster_cycle import Fleet, build  # noqa: E402  (the same fleet as the cluster-cycle bench)
from ebb.decide.fleet_policy import FleetEbb, FleetTargets  # noqa: E402
from ebb.decide.tier_rules import (NO_FLOOR, asleep_kept, asleep_kept_many, awoken, awoken_many,  # noqa: E402
                                   tier_floor, tier_floors)

LIMIT_MS = 50.0
COLD_S = 60.0


class Cycle:
    """FleetEbb over the fleet, its state carried between calls; ``tiers``: each workload its own tier."""

    def __init__(self, f: Fleet, rng: np.random.Generator, *, tiers: bool) -> None:
        self.f, self.rng, self.t = f, rng, 0.0
        self.ready, self.starting = f.ready.sum(axis=1), f.starting.sum(axis=1)
        self.rate = f.capacity_rps * np.maximum(self.ready, 1) * rng.uniform(0.2, 0.7, f.n)
        self.tier_rng = np.random.default_rng(rng.integers(2**63) + 1)  # tiers draw apart: equal arrivals on and off
        self.sleep_max = self.tier_rng.integers(1, 9, f.n) if tiers else None
        self.l1 = FleetEbb(f.n, slo_ttft_ms=f.slo_ms, cold_start_s=np.full(f.n, COLD_S),
                           min_replicas=f.cols.min_replicas, max_replicas=np.full(f.n, 40, dtype=np.int64),
                           capacity_rps=f.capacity_rps, classes=f.cols,
                           wake_s=self.tier_rng.uniform(0.3, 6.0, f.n) if tiers else None, sleep_max=self.sleep_max)
        self.last: FleetTargets | None = None
        self.desired: list[np.ndarray] = []

    def inputs(self) -> tuple[np.ndarray, np.ndarray | None]:
        # bursts now and then (the wake's rule acts on scale-ups), asleep counts within each tier's max
        burst = np.where(self.rng.random(self.f.n) < 0.02, 4.0, 1.0)
        asleep = None if self.sleep_max is None else self.tier_rng.integers(0, self.sleep_max + 1)
        return self.rng.poisson(self.rate * burst).astype(float), asleep

    def run(self, arrivals: np.ndarray, asleep: np.ndarray | None) -> None:
        self.t += 1.0
        self.l1.observe(self.t, arrivals=arrivals, queue=np.zeros(self.f.n), ready=self.ready,
                        starting=self.starting, ttft_ms=self.f.p99)
        self.last = self.l1.decide(self.t, asleep=asleep)
        self.desired.append(self.last.desired)


def timed_cycles(cycles: dict[str, Cycle], warmup: int, repeats: int) -> dict[str, list[float]]:
    """Warm both up, then time them alternately, one cycle at a time (inputs drawn outside the timer)."""
    for _ in range(warmup):
        for c in cycles.values():
            c.run(*c.inputs())
    out: dict[str, list[float]] = {k: [] for k in cycles}
    for _ in range(repeats):
        for k, c in cycles.items():
            a = c.inputs()
            t0 = time.perf_counter()
            c.run(*a)
            out[k].append(1e3 * (time.perf_counter() - t0))
    return out


def rule_inputs(n: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    lo = rng.integers(0, 3, n)
    return {"floor": rng.integers(0, 40, n), "wake_at": rng.integers(0, 30, n), "sized": rng.integers(0, 30, n),
            "reachable": rng.integers(0, 48, n), "sleep_max": rng.integers(1, 9, n), "min_replicas": lo,
            "max_replicas": lo + 40, "on": rng.random(n) < 0.9, "want": rng.integers(0, 48, n),
            "spec": rng.integers(0, 40, n), "asleep": rng.integers(0, 9, n),
            "cold_floor": np.where(rng.random(n) < 0.1, NO_FLOOR, rng.integers(0, 48, n))}


def fleet_rule(c: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return (tier_floors(c["floor"], c["wake_at"], c["sized"], c["reachable"], c["sleep_max"], c["min_replicas"],
                        c["max_replicas"], c["on"]),
            awoken_many(c["want"], c["spec"], c["asleep"], c["cold_floor"], c["max_replicas"]),
            asleep_kept_many(c["cold_floor"], c["spec"]))


def scalar_rule(c: dict[str, list[int]]) -> tuple[list[int], list[int], list[int]]:
    """The scalar rules per workload, as N EbbPolicy objects would run them (inputs as Python ints)."""
    floors, woken, kept = [], [], []
    for i in range(len(c["floor"])):
        cold = None if c["cold_floor"][i] < 0 else c["cold_floor"][i]
        floors.append(tier_floor(c["floor"][i], c["wake_at"][i], c["sized"][i], c["reachable"][i], c["sleep_max"][i],
                                 c["min_replicas"][i], c["max_replicas"][i]) if c["on"][i] else c["floor"][i])
        woken.append(awoken(c["want"][i], c["spec"][i], c["asleep"][i], cold, c["max_replicas"][i]))
        k = asleep_kept(cold, c["spec"][i])
        kept.append(NO_FLOOR if k is None else k)
    return floors, woken, kept


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--n", type=int, default=10_000)
    ap.add_argument("--repeats", type=int, default=40)
    ap.add_argument("--rule-repeats", type=int, default=7)
    ap.add_argument("--seed", type=int, default=33)
    args = ap.parse_args()
    n = args.n
    f = build(n, np.random.default_rng(args.seed))
    cycles = {"off": Cycle(f, np.random.default_rng(args.seed + 1), tiers=False),
              "on": Cycle(f, np.random.default_rng(args.seed + 1), tiers=True)}
    warmup = int(2 * (COLD_S + 2.0)) + 10  # two cold horizons (warmup_horizons): the floors are known
    ms = timed_cycles(cycles, warmup, args.repeats)
    med = {k: statistics.median(v) for k, v in ms.items()}
    print(f"FleetEbb observe+decide, N={n:,} workloads, {args.repeats} timed cycles each after {warmup} warm-up, "
          "tiers off and on alternately")
    print(f"{'tiers':>6} {'median ms':>10} {'p90 ms':>8} {'mean ms':>8} {'us/workload':>12}")
    for k in ("off", "on"):
        print(f"{k:>6} {med[k]:>10.2f} {float(np.percentile(ms[k], 90)):>8.2f} {statistics.fmean(ms[k]):>8.2f} "
              f"{1000 * med[k] / n:>12.2f}")
    last_on = cycles["on"].last
    assert last_on is not None
    d_on, d_off = np.array(cycles["on"].desired), np.array(cycles["off"].desired)
    print(f"tiers on / off: {med['on'] / med['off']:.2f}x. In the last cycle "
          f"{int((last_on.asleep_wanted >= 0).sum()):,} workloads had a cold floor to keep sleepers by; over all "
          f"{len(d_on):,} cycles, {int((d_on < d_off).sum()):,} decisions asked for fewer replicas than without "
          f"tiers and {int((d_on > d_off).sum()):,} for more (wakes), same arrivals")

    rng = np.random.default_rng(args.seed + 2)
    c = rule_inputs(n, rng)
    lists = {k: v.tolist() for k, v in c.items()}
    vec = fleet_rule(c)
    ref = scalar_rule(lists)
    same = all(np.array_equal(v, np.asarray(r)) for v, r in zip(vec, ref))
    t_vec = statistics.median(_ms(lambda: fleet_rule(c)) for _ in range(max(args.rule_repeats, 25)))
    t_ref = statistics.median(_ms(lambda: scalar_rule(lists)) for _ in range(args.rule_repeats))
    print(f"\nthe tier rule alone, N={n:,}: scalar rules per workload {t_ref:.2f} ms vs fleet twins {t_vec:.3f} ms: "
          f"{t_ref / t_vec:.0f}x (same answers: {'yes' if same else 'NO'}); the whole fleet cycle with tiers "
          f"(median) costs {med['on'] / t_ref:.2f}x the scalar tier rule's loop alone")
    ok = med["on"] < LIMIT_MS
    print(f"\nN={n:,} median with tiers {med['on']:.2f} ms {'<' if ok else '>='} {LIMIT_MS:.0f} ms: "
          f"{'PASS' if ok else 'FAIL'}")
    return 0 if ok and same else 1


def _ms(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return 1e3 * (time.perf_counter() - t0)


if __name__ == "__main__":
    raise SystemExit(main())
