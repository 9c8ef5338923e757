"""One ``ebb sweep`` job over a cluster scenario: the scenario with the job's knobs, under one policy.

The sweep (:mod:`ebb.sim.sweep`) hands a cluster job its scenario path, policy, knobs and seed;
:func:`cluster_job` reads the scenario, applies the knobs (:data:`~ebb.sim.cluster.run.JOB_KNOBS`:
``duration_s``, ``disruption_budget``, ``writes_per_100ms``, ``warmup_s``: seconds, rounded up to whole
ones) and the seed, builds the inputs
through ``series`` (the simulator reads no trace itself) and returns the scorecard without its
``per_service`` part. Deterministic: the same job gives the same scorecard in any process.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from ebb.config.scenario import ClusterSettings, load_scenario
from ebb.errors import ConfigError
from ebb.sim.cluster.inputs import ScenarioSeries, build_inputs
from ebb.sim.cluster.run import JOB_KNOBS, run_policy

__all__ = ["cluster_job"]


def cluster_job(path: str, policy: str, knobs: Mapping[str, float], seed: int,
                series: ScenarioSeries) -> dict[str, Any]:
    """The scenario at ``path`` with ``knobs`` (:data:`JOB_KNOBS`) under ``policy``; an unknown knob is
    a :class:`~ebb.errors.ConfigError` naming it."""
    sc = load_scenario(Path(path))
    bad = sorted(set(knobs) - set(JOB_KNOBS))
    if bad:
        raise ConfigError(f"cluster sweep: unknown knob {bad[0]!r} (fix: use {', '.join(JOB_KNOBS)})")
    cluster = ClusterSettings(
        disruption_budget=int(knobs.get("disruption_budget", sc.cluster.disruption_budget)),
        writes_per_100ms=int(knobs.get("writes_per_100ms", sc.cluster.writes_per_100ms)))
    sc = replace(sc, seed=seed, cluster=cluster,
                 duration_s=int(knobs.get("duration_s", sc.duration_s)),
                 warmup_s=math.ceil(knobs.get("warmup_s", sc.warmup_s)))
    res = run_policy(sc, build_inputs(sc, series), policy, record_batches=False)
    card = dict(res.scorecard)
    card.pop("per_service")
    return card
