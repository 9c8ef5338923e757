"""Real llama-server processes do not outlive a controller killed with SIGKILL (review finding T3-M7).

Each round runs a controller-like parent the way ``ebb demo --live --engine llamacpp`` starts its
fleet: a :class:`~ebb.demo.router.Router`, a :class:`~ebb.actuate.local.LocalActuator` with the
:class:`~ebb.demo.llamacpp.LlamaServerLauncher` starting one server from the main thread, then a
scale-up to two from a helper thread that has ended before the parent is killed (Linux ties the
parent-death signal to the thread that forked). On odd rounds a long generation is in flight on both
servers when the parent dies. The parent is SIGKILLed (no cleanup runs) once both servers answer
``/health``; every server must be gone within 10 s. Before the fix, 1 to 3 servers of 15 stayed:
the parent-death signal was SIGTERM, delivered once per parent thread that took the orphan over, and
llama-server's handler, on the second, called ``exit()`` with its threads running and deadlocked.
Also checked: no server's log says it received a second interrupt.
"""

from __future__ import annotations

import selectors
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from ebb.actuate.children import TETHERED

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not TETHERED, reason="PR_SET_PDEATHSIG is Linux-only: elsewhere a server is "
                                                      "stopped by LocalActuator.close(), not by its parent's death")]

ROUNDS = 20

PARENT = r"""
import json, os, sys, threading, time, urllib.request
from pathlib import Path
from ebb.actuate.local import LocalActuator
from ebb.demo.llamacpp import LlamaServerLauncher
from ebb.demo.router import Router
from ebb.model.ids import DecisionId
from ebb.model.observation import ScaleRequest

binary, model, log_dir, load = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]), sys.argv[4] == "1"
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
router = Router(); router.start()
act = LocalActuator(router, initial=1, max_batch=2, launcher=LlamaServerLauncher(binary, model, log_dir, slots=2,
                                                                              context_tokens=256))
t = threading.Thread(target=lambda: act.apply(DecisionId("up"), ScaleRequest(2)))
t.start(); t.join()
while os.path.exists(f"/proc/self/task/{t.native_id}"):
    time.sleep(0.01)
act.wait_ready(timeout_s=60)

def generate(url):
    body = json.dumps({"prompt": "hello " * 100, "n_predict": 100000, "ignore_eos": True}).encode()
    try:
        opener.open(urllib.request.Request(url + "/completion", data=body,
                                           headers={"Content-Type": "application/json"}), timeout=600).read()
    except OSError:
        pass

def busy(url):
    with opener.open(url + "/metrics", timeout=5) as r:
        return b"llamacpp:requests_processing 1" in r.read()

if load:
    urls = [r.endpoint for r in act.state().replicas]
    for url in urls:
        threading.Thread(target=generate, args=(url,), daemon=True).start()
    deadline = time.monotonic() + 20
    while not all(busy(u) for u in urls) and time.monotonic() < deadline:
        time.sleep(0.05)
print(*act.pids(), flush=True)
time.sleep(600)
"""


def _line(proc: subprocess.Popen[str], timeout_s: float) -> str:
    assert proc.stdout is not None and proc.stderr is not None
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        if not sel.select(timeout=timeout_s):
            proc.kill()
            pytest.fail(f"the parent printed no pids within {timeout_s} s: {proc.stderr.read()[-2000:]}")
    line = proc.stdout.readline()
    if not line:
        pytest.fail(f"the parent exited with {proc.wait()}: {proc.stderr.read()[-2000:]}")
    return line


def _alive(p: psutil.Process) -> bool:
    """Running and not a zombie (an orphan's zombie waits for PID 1 to reap it: it is dead)."""
    try:
        return bool(p.is_running() and p.status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False


def _survivors(procs: list[psutil.Process], within_s: float) -> list[psutil.Process]:
    deadline = time.monotonic() + within_s
    while (left := [p for p in procs if _alive(p)]) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def _describe(p: psutil.Process) -> str:
    try:
        return f"pid {p.pid} ppid {p.ppid()} status {p.status()} wchan {Path(f'/proc/{p.pid}/wchan').read_text()}"
    except (psutil.NoSuchProcess, OSError):
        return f"pid {p.pid} (gone while described)"


def test_a_server_whose_controller_is_killed_does_not_outlive_it(
        llama_server_binary: str, llama_model: Path, tmp_path: Path) -> None:
    survivors: list[str] = []
    started: list[psutil.Process] = []
    try:
        for i in range(ROUNDS):
            log_dir = tmp_path / f"round-{i}"
            log_dir.mkdir()
            with subprocess.Popen([sys.executable, "-c", PARENT, llama_server_binary, str(llama_model), str(log_dir),
                                   str(i % 2)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  stdin=subprocess.DEVNULL, text=True) as parent:
                try:
                    servers = [psutil.Process(int(pid)) for pid in _line(parent, 90.0).split()]
                    started += servers
                    assert len(servers) == 2 and all(_alive(s) for s in servers)
                finally:
                    parent.kill()
                assert parent.wait() == -signal.SIGKILL
            survivors += [f"round {i}: {_describe(p)}" for p in _survivors(servers, within_s=10.0)]
    finally:
        for p in started:  # whatever outlived its parent, stopped here so it cannot outlive the test
            if _alive(p):
                p.kill()
    logs = sorted(tmp_path.glob("round-*/*.log"))
    assert len(logs) == 2 * ROUNDS
    assert not survivors, f"{len(survivors)} of {2 * ROUNDS} servers outlived their SIGKILLed parent: {survivors}"
    assert not [p.name for p in logs if "second interrupt" in p.read_text(errors="replace")]
