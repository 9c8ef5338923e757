"""``ebb sweep`` on Ray: 12 configurations give byte-identical scorecards on the process pool and on Ray.

3 policies × 4 cold starts on the first 5 minutes of the bundled Azure conversation trace (load
calibrated to a 6-replica peak), once on :class:`~ebb.sim.sweep_backends.LocalPool` (2 workers) and once as
Ray tasks on a local Ray started here with ``ray.init(num_cpus=2)`` and shut down afterwards.
Measured on a 2-CPU machine: 12 s on the pool, 26 s on Ray plus 8 s to start it (Ray's own
processes share the 2 CPUs); under a minute in all.

No warning filter: Ray 2.60 emits no Python warning at import or start-up here (its start-up
notices are log lines). Should a later Ray warn, filter that one warning here, with the reason.

Without ``ray`` the test skips, except under ``CI=true``, where it fails with the install hint.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ebb.cli.sweep import run_job
from ebb.sim.sweep import canonical_json, expand_jobs, load_sweep_spec, results_json
from ebb.sim.sweep_backends import LocalPool, RayBackend, run_sweep

pytestmark = pytest.mark.slow

RAY_INSTALL = "pip install 'ebb[ray]'"
SPEC = """\
scenarios: [azure-conv]
policies: ["hpa:target=0.7", "keda:threshold=40", static]
knobs:
  cold_start_s: [10, 30, 60, 120]
  minutes: 5
  peak_replicas: 6
seed: 0
"""


@pytest.fixture(scope="module")
def ray_module() -> Iterator[Any]:
    """The ``ray`` module (skip or, under CI=true, fail without it); any Ray started is shut down after."""
    if importlib.util.find_spec("ray") is None:
        msg = f"ray is not installed; install it with: {RAY_INSTALL}"
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI must provide ray: {msg}")
        pytest.skip(msg)
    import ray

    try:
        yield ray
    finally:
        ray.shutdown()


def test_pool_and_ray_give_identical_scorecards(ray_module: Any, tmp_path: Path) -> None:
    spec = tmp_path / "sweep.yaml"
    spec.write_text(SPEC)
    jobs = expand_jobs(load_sweep_spec(spec))
    assert len(jobs) == 12

    # The pool first: an idle local Ray keeps worker processes that would compete for the CPUs.
    t0 = time.perf_counter()
    pool = run_sweep(run_job, jobs, LocalPool(2))
    t_pool = time.perf_counter() - t0
    t0 = time.perf_counter()
    ray_module.init(num_cpus=2, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True)
    t_init = time.perf_counter() - t0
    on_ray = run_sweep(run_job, jobs, RayBackend("local", 2))  # uses the Ray started above
    t_ray = time.perf_counter() - t0 - t_init
    print(f"\n12 jobs: process pool (2 workers) {t_pool:.1f} s; Ray (num_cpus=2) {t_ray:.1f} s "
          f"+ {t_init:.1f} s to start it", file=sys.stderr)

    assert ray_module.is_initialized(), "RayBackend must leave a Ray it did not start running"
    assert all(o.error is None for o in pool + on_ray), [o.error for o in pool + on_ray if o.error]
    assert [o.job.id for o in pool] == [o.job.id for o in on_ray] == [j.id for j in jobs]
    assert [canonical_json(o.result) for o in pool] == [canonical_json(o.result) for o in on_ray]
    assert results_json(pool) == results_json(on_ray)
    # Not a degenerate sweep: the cold start changes what the reactive policies cost.
    hpa = {o.job.knob("cold_start_s"): o.result["gpu_hours"] for o in pool
           if o.result is not None and o.job.policy == "hpa:target=0.7"}
    assert len(set(hpa.values())) > 1
