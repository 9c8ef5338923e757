"""``ebb.sim.sweep_backends`` on this machine: a killed pool worker costs only its own job, and the
worker count is capped by CPUs and memory.

The pool test kills real spawned workers with SIGKILL (as the out-of-memory killer does). The
job function below runs in those workers: it records its pid in a folder the test names through
``EBB_TEST_SWEEP_MARKS`` (set by this test only, inherited by the spawned workers), and a
``victim`` job then waits until the test kills it or lets it finish. The test kills only pids
whose parent is this process, so it never touches another process on the machine.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from ebb.sim.sweep import JobOutcome, SweepJob
from ebb.sim.sweep_backends import (
    MEMORY_SHARE,
    WORKER_DEATH_RETRIES,
    WORKER_PEAK_MIB,
    LocalPool,
    available_memory_bytes,
    cap_workers,
    run_sweep,
)

MARKS_ENV = "EBB_TEST_SWEEP_MARKS"
MiB = 2**20


def _marked_job(job: SweepJob) -> dict[str, Any]:
    """Runs in a pool worker: writes ``ID.TRY.pid``; a victim then waits (60 s at most) to be killed,
    or for ``ID.TRY.spare`` that lets it finish."""
    marks = Path(os.environ[MARKS_ENV])
    attempt = len(list(marks.glob(f"{job.id}.*.pid"))) + 1
    tmp = marks / f".{job.id}.{attempt}.tmp"
    tmp.write_text(str(os.getpid()))
    tmp.replace(marks / f"{job.id}.{attempt}.pid")  # atomic: the killer never reads half a pid
    if job.policy.startswith("victim"):
        deadline = time.monotonic() + 60.0
        while time.monotonic() < deadline and not (marks / f"{job.id}.{attempt}.spare").exists():
            time.sleep(0.02)
    return {"policy": job.policy, "attempt": attempt}


def _job(policy: str) -> SweepJob:
    return SweepJob("marks", "trace", policy, (), 0, "auto", "marks")


def _parent_pid(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat[stat.rindex(")") + 2:].split()[1])


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="finds the workers' parent pid in /proc (Linux)")
def test_a_killed_worker_fails_only_its_job_after_one_rerun(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(MARKS_ENV, str(tmp_path))
    once, always = _job("victim-once"), _job("victim-always")
    others = [_job(f"ok-{i}") for i in range(4)]
    jobs = sorted([once, always, *others], key=lambda j: j.id)
    # victim-once: killed on its 1st try, spared on its 2nd; victim-always: killed on every try.
    plan = {(once.id, 1): "kill", (once.id, 2): "spare", (always.id, 1): "kill", (always.id, 2): "kill"}
    killed: list[tuple[str, int, int]] = []
    stop = threading.Event()

    def killer() -> None:
        seen: set[str] = set()
        while not stop.is_set():
            for mark in sorted(tmp_path.glob("*.pid")):
                if mark.name in seen:
                    continue
                seen.add(mark.name)
                job_id, attempt = mark.name.split(".")[:2]
                action, pid = plan.get((job_id, int(attempt))), int(mark.read_text())
                if action == "kill" and _parent_pid(pid) == os.getpid():  # only our own pool's workers
                    os.kill(pid, signal.SIGKILL)
                    killed.append((job_id, int(attempt), pid))
                elif action == "spare":
                    (tmp_path / f"{job_id}.{attempt}.spare").write_text("")
            time.sleep(0.02)

    thread = threading.Thread(target=killer, daemon=True)
    thread.start()
    reported: list[JobOutcome] = []
    t0 = time.perf_counter()
    try:
        out = run_sweep(_marked_job, jobs, LocalPool(2), on_done=reported.append)
    finally:
        stop.set()
        thread.join(5.0)
    elapsed = time.perf_counter() - t0

    assert [o.job.id for o in out] == [j.id for j in jobs]
    assert sorted(o.job.id for o in reported) == [j.id for j in jobs], "one report per job, none for a rerun"
    by_policy = {o.job.policy: o for o in out}
    assert sorted((j, a) for j, a, _ in killed) == sorted([(once.id, 1), (always.id, 1), (always.id, 2)])
    # The other jobs complete, on their first try.
    for job in others:
        o = by_policy[job.policy]
        assert o.error is None and o.attempts == 1 and o.result == {"policy": job.policy, "attempt": 1}
    # Killed once: rebuilt worker, rerun once, succeeded.
    o = by_policy["victim-once"]
    assert o.error is None and o.attempts == 2 and o.result == {"policy": "victim-once", "attempt": 2}
    # Killed on every try: run 1 + WORKER_DEATH_RETRIES times, then failed with the reason, no third try.
    o = by_policy["victim-always"]
    assert WORKER_DEATH_RETRIES == 1 and o.attempts == 2 and o.result is None
    assert o.error is not None and "worker process died on all 2 tries" in o.error and "\n" not in o.error
    assert sorted(p.name for p in tmp_path.glob(f"{always.id}.*.pid")) == [f"{always.id}.1.pid", f"{always.id}.2.pid"]
    assert elapsed < 120.0, f"took {elapsed:.0f} s"


def test_the_worker_cap_is_cpus_and_memory_over_the_per_worker_budget() -> None:
    gib = 2**30
    # Plenty of memory: the CPUs bind.
    n, why = cap_workers(64, cpus=2, available=64 * gib)
    assert n == 2 and why is not None and "--workers 64 lowered to 2: 2 usable CPUs" in why
    assert cap_workers(2, cpus=8, available=64 * gib) == (2, None)  # within the cap: as asked, no message
    assert cap_workers(None, cpus=8, available=64 * gib) == (8, None)  # the default: one per CPU
    # Little memory: floor(0.8 × available / 256 MiB) binds; the numbers are in the message.
    avail = 1000 * MiB
    expect = int(MEMORY_SHARE * avail // (WORKER_PEAK_MIB * MiB))
    assert expect == 3
    n, why = cap_workers(16, cpus=32, available=avail)
    assert n == expect and why is not None and f"holds {expect} at {WORKER_PEAK_MIB} MiB each" in why
    n, why = cap_workers(None, cpus=32, available=avail)
    assert n == expect and why is not None and "the default 32 workers (one per CPU) lowered to 3" in why
    # Never below one worker, and unknown memory caps by CPUs only.
    assert cap_workers(4, cpus=4, available=10 * MiB)[0] == 1
    n, why = cap_workers(4, cpus=3, available=None)
    assert n == 3 and why is not None and "memory" not in why


def test_available_memory_is_memavailable_bounded_by_the_cgroup_limit(tmp_path: Path) -> None:
    proc, cg = tmp_path / "proc", tmp_path / "cg"
    (proc / "self").mkdir(parents=True)
    (proc / "meminfo").write_text("MemTotal:       24683792 kB\nMemAvailable:    2048000 kB\n")
    (proc / "self" / "cgroup").write_text("0::/job\n")
    assert available_memory_bytes(proc, cg) == 2048000 * 1024  # no cgroup files: MemAvailable
    (cg / "job").mkdir(parents=True)
    (cg / "job" / "memory.max").write_text("max\n")
    (cg / "job" / "memory.current").write_text(f"{100 * MiB}\n")
    assert available_memory_bytes(proc, cg) == 2048000 * 1024  # unlimited cgroup
    (cg / "job" / "memory.max").write_text(f"{612 * MiB}\n")
    assert available_memory_bytes(proc, cg) == 512 * MiB  # the container's room is smaller
    (proc / "meminfo").write_text("garbage\n")
    assert available_memory_bytes(proc, cg) == 512 * MiB
    (proc / "self" / "cgroup").unlink()
    assert available_memory_bytes(proc, cg) is None
    real = available_memory_bytes()
    if Path("/proc/meminfo").exists():
        assert real is not None and real > 0
