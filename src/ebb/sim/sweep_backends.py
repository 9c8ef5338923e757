"""Where sweep jobs run: in this process, on a local process pool, or as Ray tasks.

Every backend runs the same picklable job function on each :class:`~ebb.sim.sweep.SweepJob` and
returns one :class:`~ebb.sim.sweep.JobOutcome` per job; :func:`run_sweep` sorts them by job id, so
results never depend on completion order or on the backend (a test compares the pool and Ray byte
for byte). A job that raises becomes an outcome with a one-line error; a worker that dies becomes
one too: the sweep always finishes and reports every job.

Guarantees of the local backends (``docs/sweep.md``):

* :class:`LocalPool`: a worker that dies (SIGKILL, the out-of-memory killer, a crash in native
  code) costs only the job it was running: that one worker is replaced, the job runs once more
  (:data:`WORKER_DEATH_RETRIES` = 1), and if its worker dies again it is reported failed with the
  reason; every other job completes untouched.
* :func:`cap_workers`: at most ``min(usable CPUs, floor(MEMORY_SHARE × available memory /
  WORKER_PEAK_MIB MiB))`` workers, at least 1 (0.8 and 256 MiB: a spawned worker peaked at 72 MiB
  RSS on 240-minute jobs and at 206 MiB on whole-trace jobs of the bundled traces).
* :class:`RayBackend` with ``local``: the private Ray listens on loopback only (127.0.0.1; checked
  after start, a Ray that is not is stopped and refused) and, where the installed Ray has token
  authentication (detected by feature: Ray 2.60 has it), requires a random 256-bit token made for
  this sweep and held only in the environment of this process and of Ray's processes. A task
  whose Ray worker dies runs once more (Ray's ``max_retries`` = :data:`WORKER_DEATH_RETRIES`); a
  job that raises is never rerun.
"""

from __future__ import annotations

import importlib
import ipaddress
import math
import multiprocessing
import os
import secrets
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from types import ModuleType
from typing import Any, Final, Literal, Protocol

from ebb.errors import ConfigError, EbbError, require_extra
from ebb.sim.sweep import JobFn, JobOutcome, SweepJob

__all__ = [
    "MEMORY_SHARE", "WORKER_DEATH_RETRIES", "WORKER_PEAK_MIB", "Backend", "LocalPool", "OnDone", "RayBackend",
    "Serial", "available_memory_bytes", "cap_workers", "ray_token_auth", "run_sweep", "usable_cpus",
]

WORKER_DEATH_RETRIES: Final = 1
"""Times a pool job runs again after its worker died under it; jobs are deterministic, so a rerun
gives the same scorecard, and a job that kills its worker every time (too big for the memory)
stops after 1 + this many tries instead of looping."""
WORKER_PEAK_MIB: Final = 256
"""Memory budgeted per worker (MiB) when capping ``--workers``. Measured peak RSS (VmHWM) of a
spawned worker, 2 workers, Python 3.11: 72 MiB running 240-minute jobs of ``azure-conv`` (HPA),
206 MiB running whole ``azure-conv`` and ``azure-code`` jobs (Ebb's policy and HPA, request
fidelity); 256 MiB covers the bundled traces with 24% to spare. Bigger traces need more: lower
``--workers`` for them."""
MEMORY_SHARE: Final = 0.8
"""Share of the available memory the workers may take; the rest stays for the system and the parent."""


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text if isinstance(exc, EbbError) and text else f"{type(exc).__name__}: {text}".rstrip(": ")


def _call(fn: JobFn, job: SweepJob) -> tuple[dict[str, Any] | None, str | None, float]:
    """Run ``fn(job)`` where the backend placed it: (result, None, s) or (None, one-line error, s)."""
    t0 = time.perf_counter()
    try:
        return fn(job), None, time.perf_counter() - t0
    except Exception as exc:  # noqa: BLE001 - one job's failure is reported by id; the sweep goes on
        return None, _one_line(exc), time.perf_counter() - t0


# --- backends ------------------------------------------------------------------------------------

OnDone = Callable[[JobOutcome], None]


class Backend(Protocol):
    """Runs jobs somewhere; calls ``on_done`` once per job as it finishes (any order)."""

    name: str

    def run(self, fn: JobFn, jobs: Sequence[SweepJob], on_done: OnDone) -> list[JobOutcome]: ...


class Serial:
    """Every job in this process, one after the other (debuggers, profilers, tests)."""

    name = "serial"

    def run(self, fn: JobFn, jobs: Sequence[SweepJob], on_done: OnDone) -> list[JobOutcome]:
        out = []
        for job in jobs:
            o = JobOutcome(job, *_call(fn, job))
            on_done(o)
            out.append(o)
        return out


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity mask where the OS has one, else the CPU count)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # macOS and Windows have no affinity call
        return max(1, os.cpu_count() or 1)


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return int(text) if text.isdigit() else None  # "max" (no limit) and garbage alike: unknown


def available_memory_bytes(proc: Path = Path("/proc"), cgroup_root: Path = Path("/sys/fs/cgroup")) -> int | None:
    """Memory a new worker can get without swapping: ``MemAvailable`` of ``/proc/meminfo``, and
    inside a cgroup v2 memory limit (a container) at most ``memory.max - memory.current``; None
    where neither is readable (not Linux)."""
    avail: int | None = None
    try:
        for line in (proc / "meminfo").read_text(encoding="ascii").splitlines():
            if line.startswith("MemAvailable:"):
                avail = int(line.split()[1]) * 1024  # the kernel writes kB (KiB)
                break
    except (OSError, UnicodeDecodeError, ValueError, IndexError):
        avail = None
    try:
        rel = next((ln[3:] for ln in (proc / "self" / "cgroup").read_text(encoding="ascii").splitlines()
                    if ln.startswith("0::")), None)
    except (OSError, UnicodeDecodeError):
        rel = None
    if rel is not None:
        group = cgroup_root / rel.strip().lstrip("/")
        limit, used = _read_int(group / "memory.max"), _read_int(group / "memory.current")
        if limit is not None and used is not None:
            room = max(0, limit - used)
            avail = room if avail is None else min(avail, room)
    return avail


def cap_workers(requested: int | None, *, cpus: int | None = None,
                available: int | None | Literal["measure"] = "measure") -> tuple[int, str | None]:
    """Workers to start for ``requested`` (None: as many as CPUs), and why it was lowered (None if not).

    ``cap = max(1, min(cpus, floor(MEMORY_SHARE × available / WORKER_PEAK_MIB MiB)))``; the
    result is ``min(requested, cap)``. ``cpus`` defaults to :func:`usable_cpus`, ``available``
    (bytes; None: unknown) to :func:`available_memory_bytes`; unknown memory caps by CPUs only. More workers
    than CPUs only queue for them (the jobs are CPU-bound), and each spawned worker holds its own
    interpreter, numpy and traces, so more than memory holds ends with the OOM killer.
    """
    n_cpu = usable_cpus() if cpus is None else max(1, cpus)
    mem = available_memory_bytes() if available == "measure" else available
    by_mem = None if mem is None else max(1, math.floor(MEMORY_SHARE * mem / (WORKER_PEAK_MIB * 2**20)))
    cap = n_cpu if by_mem is None else min(n_cpu, by_mem)
    want = n_cpu if requested is None else requested
    if want <= cap:
        return want, None
    limits = [f"{n_cpu} usable CPU{'s' if n_cpu != 1 else ''}"] if n_cpu == cap else []
    if mem is not None and by_mem == cap:
        limits.append(f"{mem / 2**30:.1f} GiB available memory holds {by_mem} at {WORKER_PEAK_MIB} MiB each "
                      f"({MEMORY_SHARE:.0%} of it)")
    what = f"--workers {requested}" if requested is not None else f"the default {want} workers (one per CPU)"
    return cap, f"{what} lowered to {cap}: {' and '.join(limits)} (formula: docs/sweep.md)"


_Result = tuple[dict[str, Any] | None, str | None, float]


class LocalPool:
    """Up to ``workers`` worker processes, started with *spawn*, one job at a time each.

    Why spawn: a forked child inherits the parent's threads' locks in whatever state they were
    (OpenBLAS/OpenMP pools behind numpy, a Ray driver's gRPC threads, logging handlers) and can
    deadlock; forkserver avoids that only if its server is forked before such threads exist,
    which a library cannot promise. A spawned worker is a fresh interpreter that imports what
    the job needs (about a second, once per worker) and behaves the same on Linux and macOS.

    Why one single-process :class:`~concurrent.futures.ProcessPoolExecutor` per worker: when a
    worker of a shared executor dies, the executor breaks and fails every job in it (one SIGKILL
    failed 6 of 6 jobs). Here a dead worker breaks only its own executor, so exactly the job it
    ran is affected: that executor is replaced, the job runs once more (:data:`WORKER_DEATH_RETRIES`),
    and a second death reports it failed (``attempts`` = 2). Other workers keep their processes
    (and their cached traces). ``workers`` is used as given; the CLI caps it (:func:`cap_workers`);
    None means :func:`cap_workers` (None).
    """

    name = "pool"

    def __init__(self, workers: int | None = None) -> None:
        self.workers = workers if workers is not None else cap_workers(None)[0]
        if self.workers < 1:
            raise ConfigError(f"--workers must be >= 1, got {self.workers}")

    def run(self, fn: JobFn, jobs: Sequence[SweepJob], on_done: OnDone) -> list[JobOutcome]:
        if not jobs:
            return []
        ctx = multiprocessing.get_context("spawn")
        slots: list[ProcessPoolExecutor | None] = [None] * min(self.workers, len(jobs))
        todo = deque(jobs)
        tries: dict[str, int] = {}
        running: dict[Future[_Result], tuple[int, SweepJob, float]] = {}
        out: list[JobOutcome] = []
        try:
            while todo or running:
                busy = {k for k, _, _ in running.values()}
                for k in range(len(slots)):
                    if not todo:
                        break
                    if k in busy:
                        continue
                    ex = slots[k]
                    if ex is None:
                        ex = slots[k] = ProcessPoolExecutor(max_workers=1, mp_context=ctx)
                    job = todo.popleft()
                    tries[job.id] = tries.get(job.id, 0) + 1
                    running[ex.submit(_call, fn, job)] = (k, job, time.perf_counter())
                done, _ = wait(running, return_when=FIRST_COMPLETED)
                for fut in sorted(done, key=lambda f: running[f][0]):
                    k, job, t0 = running.pop(fut)
                    n = tries[job.id]
                    try:
                        o = JobOutcome(job, *fut.result(), attempts=n)
                    except BrokenProcessPool:
                        # Its one worker died: replace it, and give the job one more run.
                        dead, slots[k] = slots[k], None
                        if dead is not None:
                            dead.shutdown(wait=True)
                        if n <= WORKER_DEATH_RETRIES:
                            todo.appendleft(job)
                            continue
                        o = JobOutcome(job, None, f"its worker process died on all {n} tries (killed, e.g. by the "
                                       "out-of-memory killer, or crashed); lower --workers if memory is short",
                                       time.perf_counter() - t0, attempts=n)
                    except Exception as exc:  # noqa: BLE001 - e.g. an unpicklable result; the worker lives on
                        o = JobOutcome(job, None, f"worker failed: {_one_line(exc)}", time.perf_counter() - t0,
                                       attempts=n)
                    on_done(o)
                    out.append(o)
        finally:
            for ex in slots:
                if ex is not None:
                    ex.shutdown(wait=True, cancel_futures=True)
        return out


_LOOPBACK: Final = "127.0.0.1"
_RAY_ENV: Final = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER")


def ray_token_auth(ray: ModuleType) -> ModuleType | None:
    """Ray's ``_raylet`` module where the installed Ray has token authentication (``RAY_AUTH_MODE=token``
    with ``RAY_AUTH_TOKEN``), else None. Detected by feature, not version."""
    try:
        raylet = importlib.import_module(f"{ray.__name__}._raylet")
    except ImportError:
        return None
    names = ("AuthenticationTokenLoader", "AuthenticationMode", "Config", "get_authentication_mode")
    return raylet if all(hasattr(raylet, n) for n in names) else None


def _refresh_ray_auth(raylet: ModuleType) -> None:
    # Ray reads RAY_AUTH_MODE and the token once and caches them: make this process re-read them.
    # Config first, then the token cache (Ray's own test helpers do it in this order).
    raylet.Config.initialize("")
    raylet.AuthenticationTokenLoader.instance().reset_cache()


def _start_private_ray(ray: ModuleType, cpus: int) -> Callable[[], None]:
    """Start a local Ray on loopback only, with token auth where supported; returns the undo (env)."""
    raylet = ray_token_auth(ray)
    saved = {k: os.environ.get(k) for k in _RAY_ENV}
    constants = importlib.import_module(f"{ray.__name__}._private.ray_constants")
    saved_cluster = getattr(constants, "ENABLE_RAY_CLUSTER", None)

    def restore() -> None:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        if saved_cluster is not None:
            setattr(constants, "ENABLE_RAY_CLUSTER", saved_cluster)
        if raylet is not None:
            _refresh_ray_auth(raylet)

    # Ray binds its servers (GCS, raylet, workers, agents) to the node IP, and turns 127.0.0.1 into
    # the machine's address unless "clusters" are off (its default on macOS and Windows): turn them
    # off here (a constant read at import) and for Ray's processes (the variable it is read from).
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    setattr(constants, "ENABLE_RAY_CLUSTER", False)
    if raylet is not None:
        os.environ["RAY_AUTH_MODE"] = "token"
        os.environ["RAY_AUTH_TOKEN"] = secrets.token_hex(32)  # never written to disk (no ~/.ray/auth_token)
        os.environ.pop("RAY_AUTH_TOKEN_PATH", None)
        _refresh_ray_auth(raylet)
    try:
        ray.init(address="local", num_cpus=cpus, _node_ip_address=_LOOPBACK, include_dashboard=False,
                 dashboard_host=_LOOPBACK, ignore_reinit_error=True, log_to_driver=False)
        node_ip = str(ray.util.get_node_ip_address())
        if not ipaddress.ip_address(node_ip.strip("[]")).is_loopback:
            raise ConfigError(f"--ray-address local: this Ray ({ray.__version__}) bound its servers to {node_ip}, "
                              "not loopback; refusing to run jobs on it (fix: run a Ray cluster you secure "
                              "yourself and pass --ray-address auto or ray://HOST:PORT)")
        if raylet is not None and raylet.get_authentication_mode() != raylet.AuthenticationMode.TOKEN:
            raise ConfigError(f"--ray-address local: this Ray ({ray.__version__}) did not turn token "
                              "authentication on; refusing to run jobs on it (fix: pass --ray-address auto or "
                              "ray://HOST:PORT to a Ray cluster you secure yourself)")
    except BaseException as exc:
        if ray.is_initialized():
            ray.shutdown()
        restore()
        if isinstance(exc, EbbError) or not isinstance(exc, Exception):
            raise
        raise ConfigError(f"--ray-address local: cannot start Ray: {_one_line(exc)} "
                          "(fix: auto inside a Ray cluster, ray://HOST:10001, or the process pool)") from exc
    return restore


class RayBackend:
    """Jobs as Ray tasks (one CPU each) on the cluster at ``address``.

    ``address``: ``auto`` (the running cluster this node belongs to), ``ray://host:port`` (Ray
    Client) or ``local`` (start a private local Ray with ``num_cpus=workers``, stopped after the
    sweep). The private Ray listens on 127.0.0.1 only, its dashboard is off, and where the
    installed Ray has token authentication every connection must carry a random token made
    for this sweep (:func:`_start_private_ray`); the environment is restored after. Ray is an
    optional extra, imported only here; without it :class:`~ebb.errors.MissingExtraError` says
    ``pip install 'ebb[ray]'``. If Ray was already initialised in this process it is used as is
    (its binding and authentication are the caller's) and left running. Workers must be able to
    import ``ebb`` and read the scenario paths.
    """

    name = "ray"

    def __init__(self, address: str, workers: int | None = None) -> None:
        if not address.strip():
            raise ConfigError("--ray-address is empty (fix: auto, ray://HOST:PORT or local)")
        self.address = address.strip()
        self.workers = workers if workers is not None else cap_workers(None)[0]

    def run(self, fn: JobFn, jobs: Sequence[SweepJob], on_done: OnDone) -> list[JobOutcome]:
        ray = require_extra("ray", "ray")
        started = not ray.is_initialized()
        restore: Callable[[], None] | None = None
        if started:
            if self.address == "local":
                restore = _start_private_ray(ray, self.workers)
            else:
                try:
                    ray.init(address=self.address, ignore_reinit_error=True, include_dashboard=False,
                             log_to_driver=False)
                except Exception as exc:  # noqa: BLE001 - Ray raises ConnectionError, RuntimeError, ValueError...
                    raise ConfigError(f"--ray-address {self.address}: cannot start or reach Ray: {_one_line(exc)} "
                                      "(fix: auto inside a Ray cluster, ray://HOST:10001, or local)") from exc
        try:
            # a task whose worker died runs once more, as in the pool (Ray never retries an exception)
            remote = ray.remote(num_cpus=1, max_retries=WORKER_DEATH_RETRIES)(_call)
            pending = {remote.remote(fn, job): job for job in jobs}
            out: list[JobOutcome] = []
            while pending:
                done, _ = ray.wait(list(pending), num_returns=1)
                for ref in done:
                    job = pending.pop(ref)
                    try:
                        o = JobOutcome(job, *ray.get(ref))
                    except Exception as exc:  # noqa: BLE001 - the worker died, or the task could not run
                        o = JobOutcome(job, None, f"ray task failed: {_one_line(exc)}", 0.0)
                    on_done(o)
                    out.append(o)
            return out
        finally:
            if started:
                ray.shutdown()
            if restore is not None:
                restore()


def run_sweep(fn: JobFn, jobs: Iterable[SweepJob], backend: Backend, *,
              on_done: OnDone | None = None) -> list[JobOutcome]:
    """Run ``jobs`` on ``backend``; the outcomes sorted by job id (never by completion order)."""
    todo = list(jobs)

    def done(o: JobOutcome) -> None:
        if on_done is not None:
            on_done(o)

    outcomes = backend.run(fn, todo, done)
    return sorted(outcomes, key=lambda o: o.job.id)
