"""What a sweep costs at least, counted before any job runs (``ebb sweep --max-run-min``).

Each trace job is priced as ``ebb simulate`` prices its floor (:meth:`ebb.sim.estimate.RunPlan.floor`:
the workload's requests or fluid bins at its load, the oracle's searches, the fleet it starts, at the
fastest rates measured here), nothing simulated; the sweep's floor shares them perfectly among the
workers and is at least the longest job. A lower bound: a sweep refused on it would take longer.
Pure but for the trace loader the CLI passes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from ebb.errors import EbbError
from ebb.sim.estimate import plan_run
from ebb.sim.sweep import SweepJob, TraceLoader, sim_settings, trace_job

__all__ = ["job_floor_s", "sweep_floor_s"]


def job_floor_s(job: SweepJob, load_trace: TraceLoader) -> float | None:
    """The fewest wall seconds :func:`run_job` can take on ``job``: its run counted, nothing simulated
    (:meth:`ebb.sim.estimate.RunPlan.floor`, the bound ``ebb simulate`` refuses on first); None for a
    cluster job, which is not counted. Raises what :func:`run_job` would for a trace it cannot read."""
    if job.kind == "cluster":
        return None
    trace, items, kw = trace_job(job, load_trace)
    return plan_run(trace, items, sim_settings(job), **kw).floor().expected_s


def sweep_floor_s(jobs: Sequence[SweepJob], load_trace: TraceLoader, workers: int) -> tuple[float, int]:
    """The fewest wall seconds the sweep can take on ``workers`` (the counted jobs' floors shared
    perfectly among them, and at least the longest one), and how many jobs were not counted:
    cluster jobs, and jobs whose trace cannot be read or sized (their run reports why)."""
    floors: list[float] = []
    seen: dict[SweepJob, float | None] = {}
    for job in jobs:
        # A floor prices the workload, not the policy: jobs differing only in policy are counted once.
        key = dataclasses.replace(job, policy="")
        if key not in seen:
            try:
                seen[key] = job_floor_s(job, load_trace)
            except EbbError:
                seen[key] = None
        f = seen[key]
        if f is not None:
            floors.append(f)
    if not floors:
        return 0.0, len(jobs)
    return max(sum(floors) / max(workers, 1), max(floors)), len(jobs) - len(floors)
