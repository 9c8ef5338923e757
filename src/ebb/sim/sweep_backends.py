"""Where sweep jobs run: in this process, on a local process pool, or as Ray tasks.

Every backend runs the same picklable job function on each :class:`~ebb.sim.sweep.SweepJob` and
returns one :class:`~ebb.sim.sweep.JobOutcome` per job; :func:`run_sweep` sorts them by job id, so
results never depend on completion order or on the backend (a test compares the pool and Ray byte
for byte). A job that raises becomes an outcome with a one-line error; a worker that dies becomes
one too: the sweep always finishes and reports every job.
"""

from __future__ import annotations

import multiprocessing
import os
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from typing import Any, Protocol

from ebb.errors import ConfigError, EbbError, require_extra
from ebb.sim.sweep import JobFn, JobOutcome, SweepJob

__all__ = ["Backend", "LocalPool", "OnDone", "RayBackend", "Serial", "run_sweep"]


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


class LocalPool:
    """A :class:`~concurrent.futures.ProcessPoolExecutor` of ``workers`` processes, started with *spawn*.

    Why spawn: a forked child inherits the parent's threads' locks in whatever state they were
    (OpenBLAS/OpenMP pools behind numpy, a Ray driver's gRPC threads, logging handlers) and can
    deadlock; forkserver avoids that only if its server is forked before such threads exist,
    which a library cannot promise. A spawned worker is a fresh interpreter that imports what
    the job needs (about a second, once per worker) and behaves the same on Linux and macOS.
    """

    name = "pool"

    def __init__(self, workers: int | None = None) -> None:
        self.workers = workers if workers is not None else (os.cpu_count() or 1)
        if self.workers < 1:
            raise ConfigError(f"--workers must be >= 1, got {self.workers}")

    def run(self, fn: JobFn, jobs: Sequence[SweepJob], on_done: OnDone) -> list[JobOutcome]:
        if not jobs:
            return []
        out: list[JobOutcome] = []
        ctx = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=min(self.workers, len(jobs)), mp_context=ctx) as pool:
            futures: dict[Future[tuple[dict[str, Any] | None, str | None, float]], SweepJob] = {
                pool.submit(_call, fn, job): job for job in jobs}
            for fut in as_completed(futures):
                job = futures[fut]
                try:
                    o = JobOutcome(job, *fut.result())
                except Exception as exc:  # noqa: BLE001 - a worker died (killed, out of memory) or unpicklable result
                    o = JobOutcome(job, None, f"worker failed: {_one_line(exc)}", 0.0)
                on_done(o)
                out.append(o)
        return out


class RayBackend:
    """Jobs as Ray tasks (one CPU each) on the cluster at ``address``.

    ``address``: ``auto`` (the running cluster this node belongs to), ``ray://host:port`` (Ray
    Client) or ``local`` (start a private local Ray with ``num_cpus=workers``, stopped after the
    sweep). Ray is an optional extra, imported only here; without it :class:`~ebb.errors.MissingExtraError`
    says ``pip install 'ebb[ray]'``. If Ray was already initialised in this process it is used as
    is and left running. Workers must be able to import ``ebb`` and read the scenario paths.
    """

    name = "ray"

    def __init__(self, address: str, workers: int | None = None) -> None:
        if not address.strip():
            raise ConfigError("--ray-address is empty (fix: auto, ray://HOST:PORT or local)")
        self.address = address.strip()
        self.workers = workers if workers is not None else (os.cpu_count() or 1)

    def run(self, fn: JobFn, jobs: Sequence[SweepJob], on_done: OnDone) -> list[JobOutcome]:
        ray = require_extra("ray", "ray")
        started = not ray.is_initialized()
        if started:
            common: dict[str, Any] = {"ignore_reinit_error": True, "include_dashboard": False, "log_to_driver": False}
            try:
                if self.address == "local":
                    ray.init(num_cpus=self.workers, **common)
                else:
                    ray.init(address=self.address, **common)
            except Exception as exc:  # noqa: BLE001 - Ray raises ConnectionError, RuntimeError, ValueError...
                raise ConfigError(f"--ray-address {self.address}: cannot start or reach Ray: {_one_line(exc)} "
                                  "(fix: auto inside a Ray cluster, ray://HOST:10001, or local)") from exc
        try:
            remote = ray.remote(num_cpus=1, max_retries=0)(_call)
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


def run_sweep(fn: JobFn, jobs: Iterable[SweepJob], backend: Backend, *,
              on_done: OnDone | None = None) -> list[JobOutcome]:
    """Run ``jobs`` on ``backend``; the outcomes sorted by job id (never by completion order)."""
    todo = list(jobs)

    def done(o: JobOutcome) -> None:
        if on_done is not None:
            on_done(o)

    outcomes = backend.run(fn, todo, done)
    return sorted(outcomes, key=lambda o: o.job.id)
