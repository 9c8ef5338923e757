"""kill -9 a ledger writer at random moments; the ledger must reopen cleanly with only whole cycles.

A child Python process appends cycles in a tight loop (each with 2-9 decisions; the cycle's snapshot
records how many) and is sent SIGKILL at a random moment: half the rounds after it has reported its
first write, half at a random time after spawn (so some kills land during start-up or schema checks).
After all rounds the ledger is opened with a fresh handle and every visible cycle must hold exactly the
decisions it was written with, and no decision may exist without its cycle. Runs against SQLite
always and against a real etcd when the binary is available (see ``tests/conftest.py``).
"""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from ebb.ledger import EtcdLedger, Ledger, SqliteLedger

ROUNDS = 6

CHILD = r"""
import random, sys
from ebb.ledger import open_ledger, EtcdLedger
from ebb.model.decisions import CycleRecord, DecisionRecord

where, round_no, prefix = sys.argv[1], int(sys.argv[2]), sys.argv[3]
led = EtcdLedger(where, prefix=prefix) if where.startswith("http") else open_ledger(where)
rng = random.Random(round_no)
i = 0
while True:
    cid, run = f"r{round_no}-c{i:05d}", f"run-{round_no}"
    n = rng.randint(2, 9)
    ds = tuple(DecisionRecord(f"{cid}-d{k}", cid, run, i, f"w{k}", "scale_down", 4, 3, reasons=("idle",),
                              signals={"util": rng.random()}, plan={"pad": "x" * rng.randint(0, 4000)})
               for k in range(n))
    led.append_cycle(CycleRecord(cid, run, i, "kill9", ds, {"n_decisions": n}))
    if i == 0:
        print("ready", flush=True)
    i += 1
"""


def _kill_rounds(where: str, prefix: str, seed: int) -> None:
    rng = random.Random(seed)
    for r in range(ROUNDS):
        with subprocess.Popen([sys.executable, "-c", CHILD, where, str(r), prefix], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, stdin=subprocess.DEVNULL) as proc:
            assert proc.stdout is not None and proc.stderr is not None
            if r % 2 == 0:
                line = proc.stdout.readline()
                assert line == b"ready\n", proc.stderr.read().decode(errors="replace")
                delay = rng.uniform(0.0, 0.3)
            else:
                delay = rng.uniform(0.0, 1.0)
            try:
                proc.wait(timeout=delay)
            except subprocess.TimeoutExpired:
                pass
            if proc.poll() is not None:  # it must not have stopped on its own
                pytest.fail(f"writer exited early ({proc.returncode}): {proc.stderr.read().decode(errors='replace')}")
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
            assert proc.returncode == -signal.SIGKILL


def _assert_only_whole_cycles(led: Ledger) -> int:
    # The killed writer's last request can still be applied by the server after the kill (etcd
    # applies a Txn whose client is gone), between two reads. Each cycle lands whole or not at all,
    # so decisions read before the cycles all belong to them, and theirs are all read after.
    before = {d.decision_id for d in led.decisions()}
    cycles = led.cycles()
    after = {d.decision_id for d in led.decisions()}
    for c in cycles:
        assert len(c.decisions) == c.snapshot["n_decisions"], c.cycle_id
        assert [d.decision_id for d in c.decisions] == [f"{c.cycle_id}-d{k}" for k in range(len(c.decisions))]
    in_cycles = {d.decision_id for c in cycles for d in c.decisions}
    assert before <= in_cycles, f"orphaned decisions: {sorted(before - in_cycles)[:5]}"
    assert in_cycles <= after, f"cycles missing decisions: {sorted(in_cycles - after)[:5]}"
    return len(cycles)


def _check_reopen(open_: Callable[[], Ledger]) -> int:
    led = open_()
    try:
        return _assert_only_whole_cycles(led)
    finally:
        led.close()


@pytest.mark.slow
def test_a_sqlite_ledger_killed_mid_write_reopens_with_only_whole_cycles(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite"
    seed = random.randrange(2**32)
    _kill_rounds(str(path), "-", seed)
    n = _check_reopen(lambda: SqliteLedger(path))
    assert n > 0, f"no cycle was ever committed (seed {seed})"
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        orphans = conn.execute("SELECT count(*) FROM decisions WHERE cycle_id NOT IN (SELECT cycle_id FROM cycles)")
        assert orphans.fetchone() == (0,)
        short = conn.execute("SELECT count(*) FROM cycles c WHERE n_decisions != "
                             "(SELECT count(*) FROM decisions d WHERE d.cycle_id = c.cycle_id)")
        assert short.fetchone() == (0,)
    finally:
        conn.close()


@pytest.mark.slow
def test_an_etcd_ledger_whose_writer_is_killed_mid_write_holds_only_whole_cycles(etcd_endpoint: str) -> None:
    pytest.importorskip("etcd3gw")
    prefix = f"kill9/{uuid.uuid4().hex}"
    seed = random.randrange(2**32)
    _kill_rounds(etcd_endpoint, prefix, seed)
    n = _check_reopen(lambda: EtcdLedger(etcd_endpoint, prefix=prefix))
    assert n > 0, f"no cycle was ever committed (seed {seed})"
