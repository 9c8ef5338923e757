"""``ebb sweep SPEC.yaml``: policies × knobs × scenarios on a local process pool or a Ray cluster.

The spec format, the job ids and the determinism guarantees are :mod:`ebb.sim.sweep`'s (and
``docs/sweep.md``). This module adds the trace loader (the simulator may not import
:mod:`ebb.sources`), the backend choice and the output:

* stderr: one plain line per finished job (``[i/n] ID ok|FAILED in S s``), failures with their
  one-line error, a job rerun after its pool worker died says so; never a traceback. A
  ``--workers`` lowered by :func:`~ebb.sim.sweep_backends.cap_workers` (CPUs, memory) says so first.
* ``--out`` (default ``sweep-results.json``): a JSON list sorted by job id, each entry the job
  (id, scenario, kind, policy, knobs, seed, fidelity), its ``scorecard`` (null when it failed) and
  ``error`` when it failed. No timing in it: the file is byte-identical whichever backend ran it.
* stdout: ``-o table`` (default) a table of every job and the Pareto sets, at most 80 columns;
  ``-o json`` the results file's content. Rows go by comparable group (scenario, then the workload
  and environment knobs such as ``cold_start_s``, as numbers), then policy, then the other knobs; a
  Pareto set is computed within each group (:func:`~ebb.sim.sweep.pareto_groups`), never across two
  cold starts.

Exit codes: 0 every job ran; 2 a bad spec or option (nothing runs), or at least one job failed
(reported by id; the others are still written).
"""

from __future__ import annotations

import functools
import math
import os
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any

import typer

from ebb.cli.app import app
from ebb.errors import ConfigError, InputError
from ebb.model.trace import CountSeries, RequestTrace
from ebb.score.units import human_span, plural
from ebb.sim.sweep import (
    JobOutcome,
    KNOBS,
    SweepJob,
    comparable_group,
    expand_jobs,
    load_sweep_spec,
    pareto_groups,
    results_json,
    violation_pct,
)
from ebb.sim.sweep_backends import (
    MEMORY_SHARE,
    WORKER_PEAK_MIB,
    Backend,
    LocalPool,
    RayBackend,
    Serial,
    cap_workers,
    run_sweep,
)
from ebb.sim.sweep import run_job as _sim_run_job
from ebb.sim.sweep_floor import sweep_floor_s
from ebb.sources.traces import open_trace

WIDTH = 80
_COLS = (("job", 12), ("scenario", 12), ("policy", 16), ("knobs", 19), ("GPU-h", 8), ("viol %", 8))
_KNOB_ABBREV = {name: "".join(part[0] for part in name.split("_")) for name in KNOBS}


@functools.lru_cache(maxsize=4)
def _load_trace(path: str) -> RequestTrace | CountSeries:
    """A scenario's trace, read once per worker process (traces are immutable: read-only arrays)."""
    return open_trace(path, "auto")


def _run_cluster(path: str, policy: str, knobs: Mapping[str, float], seed: int) -> dict[str, Any]:
    """A cluster scenario job (:func:`ebb.sim.cluster.sweep_job.cluster_job` reading the traces through
    :class:`~ebb.sources.traces.scenario_series.TraceSeries`), imported only when a sweep has one."""
    from ebb.sim.cluster.sweep_job import cluster_job
    from ebb.sources.traces.scenario_series import TraceSeries

    return cluster_job(path, policy, knobs, seed, TraceSeries())


def run_job(job: SweepJob) -> dict[str, Any]:
    """:func:`ebb.sim.sweep.run_job` with the ``ebb simulate`` trace loader and the cluster job runner;
    module-level, so the process pool and Ray pickle it by reference."""
    return _sim_run_job(job, _load_trace, _run_cluster)


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[:width - 1] + "…"


def _num(v: Any, fmt: str) -> str:
    return "n/a" if v is None else format(v, fmt)


def _row(o: JobOutcome, varying: Sequence[str]) -> str:
    kn = dict(o.job.knobs)
    knobs = " ".join(f"{_KNOB_ABBREV.get(k, k)}={kn[k]:g}" for k in varying if k in kn)
    scen = Path(o.job.scenario).name or o.job.scenario
    if o.result is None:
        cost, viol = "failed", "-"
    else:
        cost, viol = _num(o.result.get("gpu_hours"), ".2f"), _num(violation_pct(o.result), ".3f")
    cells = (o.job.id, scen, o.job.policy, knobs, cost, viol)
    parts = [(_cut(c, w).rjust(w) if i >= 4 else _cut(c, w).ljust(w)) for i, (c, (_, w)) in enumerate(zip(cells, _COLS))]
    return " ".join(parts).rstrip()


def _header() -> str:
    return " ".join((name.rjust(w) if i >= 4 else name.ljust(w)) for i, (name, w) in enumerate(_COLS)).rstrip()


def _natural(text: str) -> list[str | float]:
    """``hpa:target=5`` before ``hpa:target=10``: the numbers in a policy spec compare as numbers."""
    return [float(part) if i % 2 else part for i, part in enumerate(re.split(r"(\d+(?:\.\d+)?)", text))]


def _order(o: JobOutcome) -> tuple[Any, ...]:
    """Row order: comparable group (scenario, then workload/environment knob values as numbers), policy
    (its numbers as numbers), then the remaining knobs; the id (a hash) only breaks what is left."""
    return comparable_group(o.job), _natural(o.job.policy), o.job.knobs, o.job.id


def _table(outcomes: Sequence[JobOutcome]) -> list[str]:
    """The table and the Pareto sets, every line at most :data:`WIDTH` characters."""
    values: dict[str, set[float]] = {}
    for o in outcomes:
        for k, v in o.job.knobs:
            values.setdefault(k, set()).add(float(v))
    varying = sorted(k for k, vs in values.items() if len(vs) > 1)
    fixed = sorted(k for k, vs in values.items() if len(vs) == 1)
    lines = [_header()]
    lines += [_row(o, varying) for o in sorted(outcomes, key=_order)]
    legend = [f"{_KNOB_ABBREV[k]}={k}" for k in varying]
    if fixed:
        kn = dict(outcomes[0].job.knobs)
        legend.append("fixed: " + " ".join(f"{k}={kn[k]:g}" for k in fixed))
    if legend:
        lines.append(_cut("knobs: " + ", ".join(legend), WIDTH))
    by_id = {o.job.id: o for o in outcomes}
    groups = pareto_groups(outcomes)
    lines.append("")
    lines.append("Pareto sets (cheapest per violation level), one per scenario and environment:")
    lines.append(_header())
    grouped = len({comparable_group(o.job) for o in outcomes}) > 1
    for (scenario, knobs), ids in groups:
        if grouped:  # name the group by what differs between groups: scenario and varying knobs
            shown = " ".join(f"{_KNOB_ABBREV.get(k, k)}={v:g}" for k, v in knobs if k in varying)
            lines.append(f"-- {Path(scenario).name or scenario}" + (f", {shown}" if shown else "") + ":")
        lines += [_row(by_id[i], varying) for i in ids]  # along the front: fewest violations first
    if not groups:
        lines.append("(none: no job produced a finite score)")
    return [_cut(line, WIDTH) for line in lines]


def _progress(total: int) -> Any:
    count = [0]

    def on_done(o: JobOutcome) -> None:
        count[0] += 1
        head = f"[{count[0]}/{total}] {o.job.id}"
        if o.error is None:
            line = f"{head} ok in {o.seconds:.1f} s ({o.job.policy})"
        else:
            line = f"{head} FAILED in {o.seconds:.1f} s: {o.error}"
        if o.attempts > 1 and o.error is None:
            line += f"; run {o.attempts} times: its worker process died"
        print(" ".join(line.splitlines()), file=sys.stderr, flush=True)

    return on_done


def _expected(floor_s: float, uncounted: int) -> str:
    """``expected ≥ 4 min 10 s (counted, not measured[; N jobs not counted])``."""
    text = f"expected ≥ {human_span(floor_s)} (counted, not measured"
    return text + (f"; {plural(uncounted, 'job')} not counted: cluster scenarios or unreadable traces)"
                   if uncounted else ")")


@app.command("sweep")
def sweep(
    spec: Annotated[Path, typer.Argument(help="Sweep spec YAML: scenarios, policies, knobs, seed (docs/sweep.md)")],
    workers: Annotated[int | None, typer.Option(help="Worker processes (default: the CPU count); with "
                                                "--ray-address local, the CPUs of the local Ray. Capped at "
                                                "min(usable CPUs, floor({share} x MemAvailable / {peak} MiB)), "
                                                "at least 1; a lowered value is reported".format(
                                                    share=MEMORY_SHARE, peak=WORKER_PEAK_MIB))] = None,
    ray_address: Annotated[str | None, typer.Option(help="Run on Ray: auto | ray://HOST:PORT | local "
                                                    "(needs pip install 'ebb\\[ray]')")] = None,
    serial: Annotated[bool, typer.Option(help="Run every job in this process, one by one (debugging)")] = False,
    out: Annotated[Path, typer.Option(help="Write every job and scorecard here (JSON, sorted by job id)")]
    = Path("sweep-results.json"),
    output: Annotated[str, typer.Option("--output", "-o", help="stdout: table | json")] = "table",
    max_run_min: Annotated[float, typer.Option(help="Refuse, before any job runs, a sweep counted to take "
                                               "longer than this many minutes on its workers (0: no limit)")] = 30.0,
) -> None:
    """Run policies × knobs × scenarios (one simulation per job), on a process pool or Ray; results are
    identical on either."""
    if output not in ("table", "json"):
        raise typer.BadParameter(f"-o {output!r}: choose table or json")
    if workers is not None and workers < 1:
        raise typer.BadParameter(f"--workers {workers}: must be >= 1")
    if not (max_run_min >= 0 and math.isfinite(max_run_min)):
        raise typer.BadParameter(f"--max-run-min {max_run_min:g}: minutes, e.g. --max-run-min 60, or 0 for no limit")
    if serial and ray_address is not None:
        raise typer.BadParameter("--serial and --ray-address exclude each other")
    parsed = load_sweep_spec(spec)
    jobs = expand_jobs(parsed)
    if not serial and (ray_address is None or ray_address.strip() == "local"):
        # Processes on this machine: more than its CPUs only queue, more than its memory holds get killed.
        workers, lowered = cap_workers(workers)
        if lowered is not None:
            print(f"sweep: {lowered}", file=sys.stderr, flush=True)
    backend: Backend
    if serial:
        backend = Serial()
    elif ray_address is not None:
        backend = RayBackend(ray_address, workers)
    else:
        backend = LocalPool(workers)
    n_workers = getattr(backend, "workers", os.cpu_count())
    local_ray = ray_address is not None and ray_address.strip() == "local"
    cpus = f"{n_workers} CPU{'s' if n_workers != 1 else ''}"
    where = {"serial": "in this process", "pool": f"on {n_workers} worker processes",
             "ray": f"on a private local Ray ({cpus}, 127.0.0.1 only)" if local_ray
             else f"on Ray ({ray_address})"}[backend.name]
    floor_s, uncounted = sweep_floor_s(jobs, _load_trace, 1 if serial else int(n_workers or 1))
    print(f"sweep {spec}: {plural(len(jobs), 'job')} {where}; {_expected(floor_s, uncounted)}",
          file=sys.stderr, flush=True)
    if max_run_min > 0 and floor_s > max_run_min * 60.0:
        raise ConfigError(f"{spec}: this sweep would take too long: {plural(len(jobs), 'job')} {where}, "
                          f"{_expected(floor_s, uncounted)}, past --max-run-min {max_run_min:g} (fix: fewer "
                          "policies, scenarios or knob values, a minutes knob, fluid fidelity, more --workers or a "
                          "Ray cluster; or raise --max-run-min, 0 for no limit)")
    outcomes = run_sweep(run_job, jobs, backend, on_done=_progress(len(jobs)))
    text = results_json(outcomes)
    try:
        out.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot write the sweep results: {exc.strerror}", path=str(out)) from exc
    if output == "json":
        sys.stdout.write(text)
    else:
        print("\n".join(_table(outcomes)))
    failed = [o for o in outcomes if o.error is not None]
    print(f"results written to {out}" + (f"; {len(failed)} of {plural(len(outcomes), 'job')} failed" if failed else ""),
          file=sys.stderr, flush=True)
    for o in failed:
        print(f"job {o.job.id} ({o.job.scenario}, {o.job.policy}) failed: {o.error}", file=sys.stderr, flush=True)
    if failed:
        raise typer.Exit(2)
