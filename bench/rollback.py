"""Rollback channel benchmark: compensation latency through the ledger (Ebb's own overhead).

Run: ``.venv/bin/python bench/rollback.py [--json] [--reps 200]`` (about 10 s; etcd is skipped with a
message when the ``etcd`` binary is absent).

Two scenarios, each ``--reps`` times with fresh event ids (so every step really runs and is recorded):

* ``single``  — one scale-down event (one pod), undone by one step;
* ``cascade`` — 50 services, 50 events in a causal tree (event *i* is caused by event ``(i-1)//2``),
  all undone from the root, children first: 50 actuator calls and 50 done-records.

Timed: one :func:`ebb.ledger.review.compensate` call (plan, read done set, actuate, record each step)
with an in-process fake actuator that sets a dict entry, as the simulator's actuator does — so the
figure is Ebb's overhead, not the Kubernetes API's. Backends: :class:`SqliteCompensationLog` in a temp
file (WAL, ``synchronous=FULL``: one fsync per recorded step) and :class:`EtcdCompensationLog` against
a single-node etcd this script starts on loopback. Compared with the note's P99 targets: 320 ms
(single pod) and 680 ms (cascade); the note's figures include a real cluster's actuation.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from ebb.gates.rollback import EventGraph, ScaleEvent  # noqa: E402
from ebb.ledger.review import CompensationLog, EtcdCompensationLog, SqliteCompensationLog, compensate  # noqa: E402
from ebb.testing.etcd import etcd_binary, local_etcd  # noqa: E402

TARGET_P99_MS = {"single": 320.0, "cascade": 680.0}
N_CASCADE = 50


def graph(scenario: str, rep: int) -> tuple[EventGraph, list[str]]:
    n = 1 if scenario == "single" else N_CASCADE
    ev = [ScaleEvent(f"r{rep}-e{i}", f"svc{i}", 4, 3, 0.25, "low util", f"snap/{rep}/{i}",
                     (f"r{rep}-e{(i - 1) // 2}",) if i else ()) for i in range(n)]
    return EventGraph(ev), [f"r{rep}-e0"]


def measure(log: CompensationLog, scenario: str, reps: int, tag: str) -> dict[str, Any]:
    state: dict[str, int] = {}

    def actuator(target: str, replicas: int) -> None:
        state[target] = replicas

    times = []
    for rep in range(reps):
        g, roots = graph(scenario, rep)
        t0 = time.perf_counter()
        res = compensate(g, roots, actuator, log, budget_s=60.0)
        times.append((time.perf_counter() - t0) * 1000)
        assert res.completed and len(res.applied) == len(g), res
    arr = np.array(times)
    p50, p99 = float(np.percentile(arr, 50)), float(np.percentile(arr, 99))
    return {"backend": tag, "scenario": scenario, "events": 1 if scenario == "single" else N_CASCADE,
            "reps": reps, "p50_ms": round(p50, 3), "p99_ms": round(p99, 3), "max_ms": round(float(arr.max()), 3),
            "target_p99_ms": TARGET_P99_MS[scenario], "within_target": p99 <= TARGET_P99_MS[scenario]}


@contextmanager
def etcd_server(tmp: Path) -> Iterator[str | None]:
    binary = etcd_binary()
    if binary is None:
        yield None
        return
    with local_etcd(binary, tmp / "etcd", name="ebb-bench") as url:
        yield url


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    ap.add_argument("--reps", type=int, default=200)
    args = ap.parse_args()
    rows: list[dict[str, Any]] = []
    notes: list[str] = []
    with tempfile.TemporaryDirectory(prefix="ebb-bench-rollback-") as d:
        tmp = Path(d)
        for scenario in ("single", "cascade"):
            with SqliteCompensationLog(tmp / f"{scenario}.sqlite") as log:
                rows.append(measure(log, scenario, args.reps, "sqlite"))
        with etcd_server(tmp) as endpoint:
            if endpoint is None:
                notes.append("etcd skipped: no etcd binary (install with: apt-get install -y etcd-server)")
            else:
                for scenario in ("single", "cascade"):
                    with EtcdCompensationLog(endpoint, prefix=f"bench/{scenario}") as elog:
                        rows.append(measure(elog, scenario, args.reps, "etcd"))
    if args.json:
        print(json.dumps({"results": rows, "notes": notes}, indent=2))
        return
    print(f"{'backend':8} {'scenario':8} {'events':>6} {'reps':>5} {'P50 ms':>9} {'P99 ms':>9} "
          f"{'target P99':>10}  verdict")
    for r in rows:
        verdict = "within" if r["within_target"] else "OVER"
        print(f"{r['backend']:8} {r['scenario']:8} {r['events']:>6} {r['reps']:>5} {r['p50_ms']:>9.2f} "
              f"{r['p99_ms']:>9.2f} {r['target_p99_ms']:>10.0f}  {verdict}")
    for n in notes:
        print(n)


if __name__ == "__main__":
    main()
