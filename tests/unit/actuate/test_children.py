"""ebb.actuate.children: children tethered to their parent (Linux ``PR_SET_PDEATHSIG`` = SIGKILL) from any
thread, and a stop that sends SIGTERM once; the local actuator starts and stops its workers that way
(review finding T3-M7: a llama-server that got SIGTERM twice deadlocked and outlived its SIGKILLed parent)."""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from ebb.actuate.children import TETHERED, spawn, stop
from ebb.actuate.local import Launch, LocalActuator
from ebb.demo.local_prometheus import free_port
from ebb.model.ids import DecisionId
from ebb.model.observation import ScaleRequest

tethered = pytest.mark.skipif(not TETHERED, reason="PR_SET_PDEATHSIG is Linux-only: elsewhere a child is "
                                                   "stopped by its owner, not by its parent's death")

# A server stuck in its SIGTERM handler, as far as signals go: SIGTERM is ignored (and stays so across exec).
DEAF = ("sh", "-c", 'trap "" TERM; exec sleep 600')

# The controller's side: a LocalActuator starting DEAF workers, one from the main thread, one from a helper
# thread that has ended (its OS thread gone, not only the Python one) before the pids are printed.
PARENT = r"""
import concurrent.futures as cf, os, sys, threading, time
from pathlib import Path
from ebb.actuate.local import Launch, LocalActuator
from ebb.model.ids import DecisionId
from ebb.model.observation import ScaleRequest

class Registry:
    def add_worker(self, name, url, max_batch, api="ebb"): pass
    def drain(self, name):
        done = cf.Future(); done.set_result(None); return done

class Deaf:
    api, health_path = "ebb", "/health"
    def launch(self, name, max_batch):
        return Launch(tuple(sys.argv[2:]), url=f"http://127.0.0.1:{sys.argv[1]}", log_path=None)

act = LocalActuator(Registry(), initial=1, launcher=Deaf())
t = threading.Thread(target=lambda: act.apply(DecisionId("up"), ScaleRequest(2)))
t.start(); t.join()
while os.path.exists(f"/proc/self/task/{t.native_id}"):
    time.sleep(0.01)
print(*act.pids(), flush=True)
time.sleep(600)
"""


def _line(proc: subprocess.Popen[str], timeout_s: float) -> str:
    """The first stdout line of ``proc``, waiting at most ``timeout_s``."""
    assert proc.stdout is not None
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        assert sel.select(timeout=timeout_s), f"no line from the parent within {timeout_s} s"
    return proc.stdout.readline()


def _alive(p: psutil.Process) -> bool:
    """Running and not a zombie (an orphan's zombie waits for PID 1 to reap it: it is dead)."""
    try:
        return bool(p.is_running() and p.status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False


def _survivors(procs: list[psutil.Process], within_s: float) -> list[psutil.Process]:
    """The processes still alive after waiting up to ``within_s`` for all of them to die."""
    deadline = time.monotonic() + within_s
    while (left := [p for p in procs if _alive(p)]) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def _thread_gone(t: threading.Thread) -> None:
    """Wait until ``t``'s OS thread has exited (the parent-death signal is sent as it exits)."""
    t.join()
    deadline = time.monotonic() + 10.0
    while os.path.exists(f"/proc/self/task/{t.native_id}") and time.monotonic() < deadline:
        time.sleep(0.01)


@tethered
def test_workers_that_ignore_sigterm_do_not_outlive_a_controller_killed_with_sigkill() -> None:
    port = free_port()  # nobody listens there: the workers stay "starting", which is all this needs
    for _ in range(3):
        with subprocess.Popen([sys.executable, "-c", PARENT, str(port), *DEAF], stdout=subprocess.PIPE,
                              stdin=subprocess.DEVNULL, text=True) as parent:
            kids: list[psutil.Process] = []
            try:
                kids = [psutil.Process(int(pid)) for pid in _line(parent, 60.0).split()]
                assert len(kids) == 2
                # both alive, the one whose starting thread has ended included
                assert all(_alive(k) for k in kids)
                parent.kill()
                assert parent.wait() == -signal.SIGKILL
                left = _survivors(kids, within_s=10.0)
                assert not left, f"{len(left)} of 2 workers outlived their SIGKILLed parent: {left}"
            finally:
                parent.kill()
                for k in kids:
                    if _alive(k):
                        k.kill()


@tethered
def test_a_child_started_from_a_thread_outlives_that_thread() -> None:
    procs: list[subprocess.Popen[bytes]] = []
    t = threading.Thread(target=lambda: procs.append(spawn(DEAF)))
    t.start()
    _thread_gone(t)
    try:
        # the kernel signals at the thread's exit, which has happened: a tethered child would be dying now
        with pytest.raises(subprocess.TimeoutExpired):
            procs[0].wait(timeout=0.5)
    finally:
        assert stop(procs[0], grace_s=0.0) == -signal.SIGKILL


def test_a_child_that_cannot_start_from_a_thread_raises_in_the_caller(tmp_path: Path) -> None:
    errors: list[BaseException] = []

    def start() -> None:
        try:
            spawn([str(tmp_path / "no-such-binary")])
        except OSError as exc:
            errors.append(exc)

    t = threading.Thread(target=start)
    t.start()
    t.join(timeout=30.0)
    assert len(errors) == 1 and isinstance(errors[0], FileNotFoundError)


# A child that notes every SIGTERM in its log and exits 1 s after the first one.
COUNTS_TERM = r"""
import signal, sys, time
first = []
def note(*_):
    print("TERM", flush=True)
    first.append(time.monotonic())
signal.signal(signal.SIGTERM, note)
print("ready", flush=True)
while not first or time.monotonic() - first[0] < float(sys.argv[1]):
    time.sleep(0.02)
"""


def _wait_for(path: Path, text: str, within_s: float = 30.0) -> None:
    deadline = time.monotonic() + within_s
    while not (path.exists() and text in path.read_text()):
        assert time.monotonic() < deadline, f"{path} never said {text!r}: {path.read_text() if path.exists() else ''}"
        time.sleep(0.02)


def test_stop_sends_sigterm_once_then_sigkill_after_the_grace(tmp_path: Path) -> None:
    log = tmp_path / "child.log"
    with open(log, "wb") as out:
        proc = spawn([sys.executable, "-c", COUNTS_TERM, "600"], stdout=out)
    _wait_for(log, "ready")
    assert stop(proc, grace_s=2.0) == -signal.SIGKILL
    assert log.read_text().split() == ["ready", "TERM"]


class Registry:
    def add_worker(self, name: str, url: str, max_batch: int, api: str = "ebb") -> None:
        pass

    def drain(self, name: str) -> Any:
        raise AssertionError("a worker that never became ready is not drained")


def test_a_worker_stopped_while_it_exits_is_sent_sigterm_once(tmp_path: Path) -> None:
    class CountsTerm:
        api, health_path = "ebb", "/health"

        def launch(self, name: str, max_batch: int) -> Launch:
            return Launch((sys.executable, "-c", COUNTS_TERM, "1.0"), url=f"http://127.0.0.1:{free_port()}",
                          log_path=tmp_path / f"{name}.log")

    log = tmp_path / "worker-0.log"
    act = LocalActuator(Registry(), initial=1, launcher=CountsTerm())
    try:
        _wait_for(log, "ready")
        act.apply(DecisionId("down"), ScaleRequest(0))  # a starting worker is terminated at once
        _wait_for(log, "TERM")
    finally:
        act.close()  # the worker is still exiting: close waits for it, and does not SIGTERM it again
    assert log.read_text().split() == ["ready", "TERM"]
