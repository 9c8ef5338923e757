"""Rollback channel benchmark: the wired compensation path, through the ledger (Ebb's own overhead).

Run: ``.venv/bin/python bench/rollback.py [--json] [--reps 200]`` (about half a minute; etcd is
skipped with a message when the ``etcd`` binary is absent).

What is timed is what the live controller runs when a gate fails after a scale-down: one
:meth:`ebb.live.compensation.Compensator.run` — the request written to the ledger, the event graph
read back from the run's ledger records (:func:`ebb.gates.rollback.scale_events`), the plan, and
for each step: its decision written ahead (deterministic id), the fleet read and the scale-up
applied through the actuator, the outcome written, the step recorded done in the compensation log;
then the done record. The actuators are in-process fakes (:class:`ebb.testing.fakes.FakeActuator`),
so the figure is Ebb's overhead, not the Kubernetes API's. Two scenarios, each ``--reps`` times
with a fresh run (so every step really runs and is recorded; the scale-downs it undoes are written
beforehand, untimed):

* ``single``  — one scale-down event (one pod, 4 → 3), undone by one step;
* ``cascade`` — 50 services, 50 scale-downs in a causal tree (decision *i* is ``caused_by`` decision
  ``(i-1)//2``), all undone from the root, children first: 50 steps, 50 actuators.

Backends: an SQLite ledger with its compensation log in a temp file (WAL, ``synchronous=FULL``: one
fsync per write) and an etcd ledger with its log on a single-node etcd this script starts on
loopback. Compared with the note's P99 targets: 320 ms (single pod) and 680 ms (cascade); the note's
figures include a real cluster's actuation.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from ebb.actuate.base import Actuator  # noqa: E402
from ebb.ledger import EtcdLedger, SqliteLedger  # noqa: E402
from ebb.ledger.base import Ledger  # noqa: E402
from ebb.ledger.review import CompensationLog, EtcdCompensationLog, SqliteCompensationLog  # noqa: E402
from ebb.live.compensation import CompensationRequest, Compensator  # noqa: E402
from ebb.model.decisions import CycleRecord, DecisionRecord  # noqa: E402
from ebb.model.ids import CycleId, DecisionId, RunId  # noqa: E402
from ebb.testing.etcd import etcd_binary, local_etcd  # noqa: E402
from ebb.testing.fakes import FakeActuator  # noqa: E402

TARGET_P99_MS = {"single": 320.0, "cascade": 680.0}
N_CASCADE = 50
BUDGET_S = 60.0
"""The channel's 0.8 s budget would send a slow repetition to review; here every run must finish."""


def scale_downs(ledger: Ledger, run: str, n: int) -> None:
    """Record ``n`` acted scale-downs (4 → 3) of services ``svc0..`` in run ``run``, each with its
    outcome; decision *i* is caused by decision ``(i-1)//2``."""
    for i in range(n):
        did, cid = DecisionId(f"{run}-{i}"), CycleId(f"{run}-c{i}")
        caused = (DecisionId(f"{run}-{(i - 1) // 2}"),) if i else ()
        d = DecisionRecord(did, cid, RunId(run), 1_000 + i, f"svc{i}", "scale_down", 4, 3, reasons=("low util",),
                           plan={"mode": "act"}, caused_by=caused)
        ledger.append_cycle(CycleRecord(cid, RunId(run), 1_000 + i, "bench", (d,), {"replicas": 4}))
        ledger.append_cycle(CycleRecord(CycleId(f"{cid}-outcome"), RunId(run), 1_000 + i, "actuator", (),
                                        {"outcome_of": did, "note": "applied", "applied": True, "replicas_before": 4,
                                         "replicas_after": 3, "removed": [], "added": []}))


def measure(ledger: Ledger, log: CompensationLog, scenario: str, reps: int, tag: str) -> dict[str, Any]:
    n = 1 if scenario == "single" else N_CASCADE
    times = []
    for rep in range(reps):
        run = f"bench-{tag}-{scenario}-{rep}"
        scale_downs(ledger, run, n)
        actuators: dict[str, Actuator] = {f"svc{i}": FakeActuator(3, target=f"svc{i}") for i in range(n)}
        comp = Compensator(ledger, _fixed(log), actuators, run, budget_s=BUDGET_S)
        t0 = time.perf_counter()
        report = comp.run(CompensationRequest(DecisionId(f"{run}-0"), reason="bench", requested_unix_s=time.time()))
        times.append((time.perf_counter() - t0) * 1000)
        assert report.result is not None and report.result.completed and len(report.result.applied) == n, report
        assert all(a.state().spec_replicas == 4 for a in actuators.values())
    arr = np.array(times)
    p50, p99 = float(np.percentile(arr, 50)), float(np.percentile(arr, 99))
    return {"backend": tag, "scenario": scenario, "events": n, "reps": reps, "p50_ms": round(p50, 3),
            "p99_ms": round(p99, 3), "max_ms": round(float(arr.max()), 3),
            "target_p99_ms": TARGET_P99_MS[scenario], "within_target": p99 <= TARGET_P99_MS[scenario]}


def _fixed(log: CompensationLog) -> Callable[[], CompensationLog]:
    return lambda: log


@contextmanager
def etcd_server(tmp: Path) -> Iterator[str | None]:
    binary = etcd_binary()
    if binary is None:
        yield None
        return
    with local_etcd(binary, tmp / "etcd", name="ebb-bench") as url:
        yield url


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    ap.add_argument("--reps", type=int, default=200)
    args = ap.parse_args()
    rows: list[dict[str, Any]] = []
    notes: list[str] = []
    with tempfile.TemporaryDirectory(prefix="ebb-bench-rollback-") as d:
        tmp = Path(d)
        for scenario in ("single", "cascade"):
            path = tmp / f"{scenario}.sqlite"
            with SqliteLedger(path) as ledger, SqliteCompensationLog(path) as log:
                rows.append(measure(ledger, log, scenario, args.reps, "sqlite"))
        with etcd_server(tmp) as endpoint:
            if endpoint is None:
                notes.append("etcd skipped: no etcd binary (install with: apt-get install -y etcd-server)")
            else:
                for scenario in ("single", "cascade"):
                    prefix = f"bench/{scenario}"
                    eledger = EtcdLedger(endpoint, prefix=prefix)
                    try:
                        with EtcdCompensationLog(endpoint, prefix=prefix) as elog:
                            rows.append(measure(eledger, elog, scenario, args.reps, "etcd"))
                    finally:
                        eledger.close()
    if args.json:
        print(json.dumps({"path": "wired: Compensator.run (ledger + compensation log + fake actuators)",
                          "results": rows, "notes": notes}, indent=2))
        return
    print("wired path: the controller's Compensator.run through the ledger and the compensation log, fake actuators")
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
