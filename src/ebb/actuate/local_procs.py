"""Worker processes for :class:`~ebb.actuate.local.LocalActuator`: what a worker is (:class:`WorkerLauncher`,
the default :class:`EbbWorkerLauncher`), how it is started (:func:`popen`, tethered to this process by
:func:`ebb.actuate.children.spawn`), how its URL is read (:func:`read_listening`, a ``LISTENING
http://…`` line within ``START_TIMEOUT_S`` = 30 s), whether it answers (:func:`healthy`: 200 within 1 s)
and the atomic file write the actuator's state and targets files use (:func:`atomic_write`: write,
fsync, rename)."""

from __future__ import annotations

import os
import selectors
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Protocol

from ebb.actuate.children import spawn
from ebb.actuate.sleep_modes import VllmSleep
from ebb.errors import ConfigError, TransientError

__all__ = ["START_TIMEOUT_S", "EbbWorkerLauncher", "Launch", "WorkerLauncher", "atomic_write", "healthy", "popen",
           "read_listening"]

START_TIMEOUT_S: Final = 30.0
"""A started worker must print its ``LISTENING`` line within this long (s)."""
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


@dataclass(frozen=True)
class Launch:
    """How to start one worker process."""

    args: tuple[str, ...]
    """argv (``args[0]`` is the executable)."""
    url: str | None = None
    """``http://HOST:PORT`` when known before start; None = read it from the ``LISTENING`` stdout line."""
    log_path: Path | None = None
    """File (appended) for the process' stdout and stderr; None = stderr inherited, stdout read by us."""
    preexec: Callable[[], None] | None = None
    """Run in the child before exec, after the tether to the parent (:func:`ebb.actuate.children.spawn`)."""


class WorkerLauncher(Protocol):
    """What a worker is: the command, how its URL is known, its health path and router API."""

    @property
    def api(self) -> str: ...

    @property
    def health_path(self) -> str: ...

    def launch(self, name: str, max_batch: int) -> Launch:
        """The process for worker ``name`` with ``max_batch`` slots (ValueError if it cannot have that many)."""
        ...


@dataclass(frozen=True)
class EbbWorkerLauncher:
    """``python -m ebb.demo.worker`` (prints ``LISTENING``, health ``/healthz``, drains itself on SIGTERM,
    dies with ``--parent-pid``; speaks vLLM's sleep endpoints, waking in ``wake_s``)."""

    warmup_s: float = 5.0
    speed: float = 1.0
    python: str = sys.executable
    drain_timeout_s: float = 120.0
    api: str = "ebb"
    health_path: str = "/healthz"
    wake_s: float = 2.0
    """Seconds from ``POST /wake_up`` to awake (the worker's ``--wake-s``)."""
    wake_fails: str = "none"
    """Test fault (the worker's ``--wake-fails``): ``none``, ``error`` (wakes answer 500), ``hang``."""
    sleep_level: int = 1
    """The level victims are put to sleep at (vLLM: 1 offloads the weights to host memory, 2 discards them)."""

    @property
    def sleep_mode(self) -> VllmSleep:
        """How its workers sleep: vLLM's endpoints at :attr:`sleep_level` (an asleep tier's mechanism)."""
        return VllmSleep(self.sleep_level)

    def launch(self, name: str, max_batch: int) -> Launch:
        return Launch((self.python, "-m", "ebb.demo.worker", "--name", name, "--port", "0",
                       "--max-batch", str(max_batch), "--warmup-s", str(self.warmup_s), "--speed", str(self.speed),
                       "--drain-timeout-s", str(self.drain_timeout_s), "--parent-pid", str(os.getpid()),
                       "--wake-s", str(self.wake_s), "--wake-fails", self.wake_fails))


def atomic_write(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically (a temporary file beside it, fsync, rename); OSError as is."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def read_listening(name: str, proc: subprocess.Popen[bytes], deadline: float) -> str:
    """The URL a worker prints on its first stdout line (``LISTENING http://…``) by ``deadline``
    (monotonic); TransientError when it prints nothing in time, exits first or prints another line."""
    out = proc.stdout
    assert out is not None
    buf = b""
    with selectors.DefaultSelector() as sel:
        sel.register(out, selectors.EVENT_READ)
        while b"\n" not in buf:
            left = deadline - time.monotonic()
            if left <= 0 or not sel.select(timeout=left):
                raise TransientError(f"worker {name} printed no LISTENING line within {START_TIMEOUT_S} s; "
                                     "the machine may be overloaded, retry later", retry_after_s=5.0)
            chunk = os.read(out.fileno(), 4096)
            if not chunk:
                raise TransientError(f"worker {name} exited with {proc.wait()} before listening; "
                                     "see its stderr", retry_after_s=5.0)
            buf += chunk
    line = buf.split(b"\n", 1)[0].decode(errors="replace").strip()
    if not line.startswith("LISTENING http://"):
        raise TransientError(f"worker {name} printed {line!r} instead of 'LISTENING http://…'")
    return line.removeprefix("LISTENING ")


def popen(launch: Launch) -> subprocess.Popen[bytes]:
    """Start ``launch``, tethered to this process (stdin closed; stdout piped, or both streams appended
    to its log file)."""
    try:
        if launch.log_path is None:
            return spawn(launch.args, stdout=subprocess.PIPE, preexec=launch.preexec)
        with open(launch.log_path, "ab") as log_fh:  # the child keeps its own copy of the descriptor
            return spawn(launch.args, stdout=log_fh, stderr=subprocess.STDOUT, preexec=launch.preexec)
    except OSError as exc:
        raise ConfigError(f"cannot start worker {launch.args[0]!r}: {exc}; for the ebb worker pass python= an "
                          "interpreter that can import ebb, for llama-server check the binary") from exc


def healthy(url: str) -> bool:
    """``url`` answers 200 within 1 s."""
    try:
        with _NO_PROXY.open(url, timeout=1.0) as resp:
            return bool(resp.status == 200)
    except urllib.error.HTTPError as exc:
        exc.close()  # 503 while warming: the error owns the open response
        return False
    except (urllib.error.URLError, OSError, ValueError):
        return False
