"""Write ``ebb_fluid_reference.json``: Ebb's fluid-mode decisions on two short inputs, the reference
the optimised policy must reproduce exactly (``tests/unit/sim/test_ebb_fluid_reference.py``).

Cases (each builds its :class:`~ebb.sim.fluid_engine.FluidDemand` here, not through ``compare``, so
the fixture does not move with the load scaling or the oracle search):

* ``synthetic-3h``: 3 hours of per-second Poisson counts (seed 7) on a slow wave with six bursts of
  60–300 s at 2–4× the level; the count series' own 1 s bins (the 58-day case's shape).
* ``azure-code``: the bundled 30-minute Azure code slice at 6× load from 2 replicas, in 0.1 s bins (the
  fast path acts between reconciles).

Each case records every change of the replica target ``(t_s, from, to)``, every noteworthy decision
``(t_s, action, from, to, victims)`` and the scorecard's numbers.

    .venv/bin/python tests/data/sim/make_ebb_fluid_reference.py   # from the repository root
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from ebb.config.policy_specs import parse_policies
from ebb.model.trace_ops import DEFAULT_TOKENS, scale_requests
from ebb.sim.fluid_engine import FluidDemand, simulate_fluid
from ebb.sim.fluid_scoring import score_fluid
from ebb.sim.policies import KNOWN_POLICIES, build_policy
from ebb.sim.policy_context import PolicyContext
from ebb.sim.settings import SimSettings
from ebb.sources.traces import bundled_trace

OUT = Path(__file__).with_name("ebb_fluid_reference.json")
POLICIES = ("ebb", "ebb:canary=on")
_SCORE_KEYS = ("requests", "gpu_hours", "cost_usd", "slo_violations", "slo_violation_pct", "ttft_p50_ms",
               "ttft_p99_ms", "e2e_p50_ms", "e2e_p99_ms", "scale_ups", "scale_downs", "dropped_requests",
               "peak_replicas", "mean_replicas", "misjudged_scale_downs", "sla_violation_delay_ms",
               "breach_episodes")


def _tokens(seed: int) -> tuple[np.ndarray, np.ndarray]:
    tin, tout = DEFAULT_TOKENS.sample(8192, np.random.default_rng(seed))
    return np.sort(tin.astype(np.float64)), np.sort(tout.astype(np.float64))


def synthetic_demand() -> FluidDemand:
    """3 h of per-second counts: a wave from 60 to 240 requests/s plus six bursts."""
    rng = np.random.default_rng(7)
    n = 3 * 3600
    t = np.arange(n)
    rate = 150.0 + 90.0 * np.sin(2 * np.pi * t / 5400.0)
    for start, length, mult in ((900, 60, 3.0), (2500, 300, 2.0), (4100, 120, 4.0), (6000, 90, 2.5),
                                (7800, 240, 3.0), (9900, 60, 4.0)):
        rate[start:start + length] *= mult
    counts = rng.poisson(rate).astype(np.float64)
    tin, tout = _tokens(7)
    return FluidDemand("synthetic-3h", 1.0, counts, tin, tout)


def azure_demand() -> FluidDemand:
    """The bundled ``azure-code`` slice at 6× load, binned at 0.1 s (the request-log default)."""
    req = scale_requests(bundled_trace("azure-code"), 6.0, seed=0)
    bin_s = 0.1
    nb = int(np.ceil(max(req.duration_s, bin_s) / bin_s)) + 1
    counts = np.bincount((req.arrival_s / bin_s).astype(np.int64), minlength=nb).astype(np.float64)
    return FluidDemand("azure-code-x6", bin_s, counts, np.sort(req.tokens_in.astype(np.float64)),
                       np.sort(req.tokens_out.astype(np.float64)))


CASES = {"synthetic-3h": (synthetic_demand, 20), "azure-code": (azure_demand, 2)}
"""Case name → (demand builder, the oracle peak the policy's context reports: its initial fleet)."""


def run_case(name: str, spec: str) -> dict[str, Any]:
    """One policy on one case: its decisions and scorecard, JSON-ready."""
    build, peak = CASES[name]
    demand = build()
    settings = SimSettings()
    ctx = PolicyContext(settings=settings, oracle_schedule=np.array([peak], dtype=np.int64))
    policy = build_policy(parse_policies(spec, KNOWN_POLICIES)[0], ctx)
    out, fleet = simulate_fluid(demand, policy, settings)
    card = score_fluid(policy.spec, demand, out, fleet, settings, wall_s=0.0).scorecard.as_dict()
    return {
        "case": name, "policy": spec,
        "decisions": [[t, a, b] for t, a, b in fleet.decisions],
        "noteworthy": [[d.t_s, d.action, d.from_replicas, d.to_replicas, [int(v) for v in d.victims]]
                       for d in fleet.noteworthy],
        "scorecard": {k: card[k] for k in _SCORE_KEYS},
    }


def main() -> int:
    runs = [run_case(name, spec) for name in CASES for spec in POLICIES]
    OUT.write_text(json.dumps({"generated_by": "tests/data/sim/make_ebb_fluid_reference.py",
                               "commit": "8dec1e7", "runs": runs}, indent=1) + "\n")
    for r in runs:
        print(f"{r['case']:14s} {r['policy']:14s} {len(r['decisions'])} changes, "
              f"{len(r['noteworthy'])} noteworthy, GPU-h {r['scorecard']['gpu_hours']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
