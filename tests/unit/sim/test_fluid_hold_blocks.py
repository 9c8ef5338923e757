"""Blocks of proven holds (ebb.decide.hold_block through the fluid engine) change no decision.

Each case runs one Ebb policy twice on one fluid workload of per-second bins: reconciling every
simulated second (blocks off), and with the engine serving blocks ahead for the policy to prove holds
over. Every change of the replica target, every noteworthy decision (with its signals and reasons)
and every scorecard number must be the same, bit for bit. The workloads cover what stops a block —
bursts and scale-ups, scale-downs, a period the forecast detects, idle stretches without completions,
queues past a shrunken fleet — and the profiles the code paths that size the hold floor.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np
import pytest

from ebb.config.policy_specs import parse_policies
from ebb.decide.policy import EbbPolicy
from ebb.model.trace_ops import DEFAULT_TOKENS
from ebb.sim import fluid_engine
from ebb.sim.fluid_engine import FluidDemand, simulate_fluid
from ebb.sim.fluid_scoring import score_fluid
from ebb.sim.policies import KNOWN_POLICIES, build_policy
from ebb.sim.policy_context import PolicyContext
from ebb.sim.settings import SimSettings

def _demand(name: str, rate: np.ndarray, seed: int) -> FluidDemand:
    rng = np.random.default_rng(seed)
    tin, tout = DEFAULT_TOKENS.sample(8192, rng)
    return FluidDemand(name, 1.0, rng.poisson(rate).astype(np.float64), np.sort(tin.astype(np.float64)),
                       np.sort(tout.astype(np.float64)))


def diurnal() -> FluidDemand:
    """3 h of a slow wave: long steady stretches, a few scale-downs and ups."""
    t = np.arange(3 * 3600)
    return _demand("diurnal", 120.0 + 80.0 * np.sin(2 * np.pi * t / 7200.0), 3)


def periodic() -> FluidDemand:
    """3 h with a 90 s burst every 10 minutes: the forecast finds the period and takes the floor."""
    t = np.arange(3 * 3600)
    return _demand("periodic", np.where(t % 600 < 90, 260.0, 60.0), 4)


def idle_gaps() -> FluidDemand:
    """2 h alternating 20 minutes of traffic and 10 of none (no completions: latency unknown)."""
    t = np.arange(2 * 3600)
    return _demand("idle-gaps", np.where(t % 1800 < 1200, 90.0, 0.0), 5)


CASES: dict[str, tuple[Callable[[], FluidDemand] | None, int]] = {
    "synthetic-3h": (None, 20),  # the fixture's own workload (make_ebb_fluid_reference.synthetic_demand)
    "diurnal": (diurnal, 12),
    "periodic": (periodic, 24),
    "idle-gaps": (idle_gaps, 6),
}
"""Case → (workload, the initial fleet and the oracle peak the policy's context reports)."""
_DEMANDS: dict[str, FluidDemand] = {}


def _run(case: str, spec: str, blocks: bool, monkeypatch: pytest.MonkeyPatch, maker: ModuleType) -> dict[str, Any]:
    build, peak = CASES[case]
    if case not in _DEMANDS:
        _DEMANDS[case] = build() if build is not None else maker.synthetic_demand()
    demand = _DEMANDS[case]
    settings = SimSettings()
    ctx = PolicyContext(settings=settings, oracle_schedule=np.array([peak], dtype=np.int64))
    policy = build_policy(parse_policies(spec, KNOWN_POLICIES)[0], ctx)
    assert isinstance(policy, EbbPolicy)
    held = [0]
    if blocks:
        real = policy.hold_through

        def counting(*args: Any) -> int:
            held[0] += (n := real(*args))
            return n

        monkeypatch.setattr(policy, "hold_through", counting)
    else:
        monkeypatch.setattr(fluid_engine, "holds_in_blocks", lambda _policy: None)
    out, fleet = simulate_fluid(demand, policy, settings)
    monkeypatch.undo()
    card = score_fluid(policy.spec, demand, out, fleet, settings, wall_s=0.0).scorecard.as_dict()
    card.pop("wall_s", None)
    return {"decisions": fleet.decisions,
            "noteworthy": [repr(d) for d in fleet.noteworthy],
            "scorecard": repr(sorted(card.items())),
            "held": held[0], "seconds": len(demand.counts)}


@pytest.mark.parametrize(("case", "spec"), [
    ("synthetic-3h", "ebb"), ("synthetic-3h", "ebb:profile=lean"), ("diurnal", "ebb"),
    ("diurnal", "ebb:profile=cautious"), ("diurnal", "ebb:tail=off,level_peak=off"),
    ("periodic", "ebb"), ("periodic", "ebb:forecast=off"), ("idle-gaps", "ebb"),
])
def test_blocks_of_proven_holds_decide_exactly_as_reconciling_every_second(
        case: str, spec: str, monkeypatch: pytest.MonkeyPatch, reference_maker: ModuleType) -> None:
    every = _run(case, spec, False, monkeypatch, reference_maker)
    blocks = _run(case, spec, True, monkeypatch, reference_maker)
    assert len(every["decisions"]) >= 2, "a case without scaling would prove nothing"
    assert blocks["decisions"] == every["decisions"]
    assert blocks["noteworthy"] == every["noteworthy"]
    assert blocks["scorecard"] == every["scorecard"]
    # And the blocks did the work: most seconds were proven holds — but where the forecast has found
    # the period, whose phase rise sets the floor and is not bounded, only the seconds before it.
    # Since #31 a reconcile at the burst threshold and one where a recurrence holds capacity are
    # decide's (the burst memory learns from it), and late completions whose queue the fleet drains
    # first keep the latency window from calm without surging: 43 % on synthetic-3h (42 % lean),
    # 49 % idle-gaps.
    share = 0.1 if spec == "ebb" and case == "periodic" else 0.4
    assert blocks["held"] >= share * blocks["seconds"], (blocks["held"], blocks["seconds"])
