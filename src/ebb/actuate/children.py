"""Child processes that do not outlive the process that started them, and a stop that signals once.

:func:`spawn` is :class:`subprocess.Popen` with a tether, on Linux:

* **The child dies with its parent.** Between fork and exec the child asks the kernel for SIGKILL
  when its parent dies (``prctl(PR_SET_PDEATHSIG, SIGKILL)``), then checks ``getppid()``: a parent
  that died before the request was made is caught there, and the child exits at once (status 127)
  instead of running orphaned. So a controller killed with SIGKILL (which runs no cleanup) takes
  every server it started with it.
* **SIGKILL, not SIGTERM.** A dying multi-threaded parent hands its children from thread to thread
  as each thread exits, and the kernel sends the parent-death signal at every hand-over: children
  saw SIGTERM two or three times, and ``llama-server`` answers a second SIGTERM by calling
  ``exit()`` with its worker threads running, which deadlocked and left it orphaned (review finding
  T3-M7). SIGKILL cannot be caught, so any number of them is one clean death.
* **Any thread may call it.** Linux ties the signal to the *thread* that forked, not the process:
  a child started by a short-lived thread would be killed when that thread ends. Calls from the
  main thread (which lives as long as the process) fork there; calls from any other thread are
  handed to one spawner thread (a daemon, started on first use, again after ``fork()``) that lives
  as long as the process, and wait for it. The caller gets the :class:`~subprocess.Popen` or the
  exception ``Popen`` raised, as if it had called ``Popen`` itself.

Off Linux (no ``prctl``) :func:`spawn` is plain ``Popen``: children are stopped only by their owner
(``LocalActuator.close()``, ``LocalPrometheus.stop()``, the end of ``local_etcd``'s block), and a
parent killed with SIGKILL leaves them running.

:func:`stop` ends a child the way a supervisor should: SIGTERM once (a second SIGTERM is, for
``llama-server``, an order to exit without cleanup, see above), a bounded wait, then SIGKILL; the
child is reaped either way.
"""

from __future__ import annotations

import concurrent.futures as cf
import ctypes
import os
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any, Final

__all__ = ["TETHERED", "spawn", "stop"]

PR_SET_PDEATHSIG: Final = 1  # <linux/prctl.h>
ORPHAN_EXIT: Final = 127  # the child's status when its parent died before it could ask for the signal

Stream = int | IO[Any] | None
"""What ``Popen`` takes for stdin, stdout, stderr: a descriptor, a file, ``subprocess.PIPE``/``DEVNULL``/``STDOUT``."""


def _load_prctl() -> Callable[[int, int], int] | None:
    """libc's ``prctl``, resolved once in the parent (the pre-exec hook then only calls it: no dlopen
    and no lock taken between fork and exec); None where there is none (not Linux)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        fn = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    fn.argtypes = (ctypes.c_int, ctypes.c_ulong)
    fn.restype = ctypes.c_int
    prctl: Callable[[int, int], int] = fn
    return prctl


_PRCTL: Final = _load_prctl()
TETHERED: Final = _PRCTL is not None
"""True where :func:`spawn`'s children die with their parent (Linux)."""


def _tether_hook(parent: int, then: Callable[[], None] | None) -> Callable[[], None] | None:
    """The pre-exec hook: ask for SIGKILL at the parent's death, leave if ``parent`` is already gone,
    then run ``then`` (the caller's own hook)."""
    prctl = _PRCTL
    if prctl is None:
        return then

    def hook() -> None:
        prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL))  # only EINVAL for a bad signal: cannot fail here
        if os.getppid() != parent:
            os._exit(ORPHAN_EXIT)  # the parent died between fork and prctl: the kernel will not tell us
        if then is not None:
            then()

    return hook


class _Spawner:
    """One daemon thread that forks for the threads that may end before their children should."""

    _pid: int
    _lock: threading.Lock
    _jobs: queue.SimpleQueue[tuple[Callable[[], subprocess.Popen[bytes]], cf.Future[subprocess.Popen[bytes]]]]
    _thread: threading.Thread | None

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._jobs = queue.SimpleQueue()
        self._thread = None

    def run(self, start: Callable[[], subprocess.Popen[bytes]]) -> subprocess.Popen[bytes]:
        done: cf.Future[subprocess.Popen[bytes]] = cf.Future()
        if self._pid != os.getpid():
            # A forked copy of this process: the spawner thread did not come along, and the lock
            # may have been held at the fork.
            self._reset()
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._serve, name="ebb-spawner", daemon=True)
                self._thread.start()
            self._jobs.put((start, done))
        return done.result()

    def _serve(self) -> None:
        while True:
            start, done = self._jobs.get()
            if not done.set_running_or_notify_cancel():
                continue
            try:
                done.set_result(start())
            except BaseException as exc:  # handed to the caller, who raises it
                done.set_exception(exc)


_SPAWNER: Final = _Spawner()


def spawn(args: Sequence[str | Path], *, stdin: Stream = subprocess.DEVNULL, stdout: Stream = None,
          stderr: Stream = None, preexec: Callable[[], None] | None = None) -> subprocess.Popen[bytes]:
    """Start ``args`` as :class:`subprocess.Popen` does, tethered to this process (see the module
    docstring): on Linux it is SIGKILLed when this process dies, whichever thread called. ``preexec``
    runs in the child after the tether, before exec. Raises what ``Popen`` raises (OSError for a
    binary that cannot start)."""
    parent = os.getpid()

    def start() -> subprocess.Popen[bytes]:
        return subprocess.Popen(list(args), stdin=stdin, stdout=stdout, stderr=stderr,
                                preexec_fn=_tether_hook(parent, preexec))

    if _PRCTL is None or threading.current_thread() is threading.main_thread():
        return start()
    return _SPAWNER.run(start)


def stop(proc: subprocess.Popen[Any], grace_s: float, *, term_sent: bool = False) -> int:
    """End ``proc``: SIGTERM once (none if ``term_sent``: the caller already sent it, or if it has
    exited), wait up to ``grace_s`` seconds, then SIGKILL; returns its exit status once reaped."""
    if not term_sent and proc.poll() is None:
        proc.terminate()
    try:
        return proc.wait(timeout=max(0.0, grace_s))
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait()
