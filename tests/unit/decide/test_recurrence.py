"""Bursts that come back are remembered past the comeback memory, and held for ahead of time."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ebb.config.policy_specs import parse_policies
from ebb.decide.policy import EbbPolicy
from ebb.decide.recurrence import BurstMemory
from ebb.model.trace_ops import DEFAULT_TOKENS
from ebb.sim.fluid_engine import FluidDemand, simulate_fluid
from ebb.sim.policies import KNOWN_POLICIES, build_policy
from ebb.sim.policy_context import PolicyContext
from ebb.sim.settings import SimSettings

H = 61.1
MEMORY = 60 * H


def burst(memory: BurstMemory, t0: float, length_s: int, need: float, base: float = 1.0) -> None:
    for k in range(length_s):
        memory.observe(t0 + k, need + (k == length_s // 2), base)


def test_one_burst_is_no_recurrence() -> None:
    memory = BurstMemory(H, MEMORY)
    burst(memory, 1000.0, 60, 10.0)
    assert len(memory) == 1 and memory.expect(2000.0) is None and memory.hold_from(2000.0) == math.inf


def test_a_run_with_short_gaps_is_one_burst_and_its_peak_is_kept() -> None:
    memory = BurstMemory(H, MEMORY)
    burst(memory, 1000.0, 30, 10.0)
    burst(memory, 1000.0 + 30 + 2 * H - 2, 30, 6.0)  # back within two horizons: the same burst
    assert len(memory) == 1


def test_two_bursts_hold_capacity_from_the_shortest_gap_less_a_lead_and_through_the_next() -> None:
    memory = BurstMemory(H, MEMORY)
    burst(memory, 1000.0, 60, 10.0)
    burst(memory, 1000.0 + 5400.0, 90, 14.0)
    rec = memory.expect(7000.0)
    assert rec is not None
    assert rec.bursts == 2 and rec.shortest_gap_s == rec.longest_gap_s == 5400.0
    assert rec.peak_need_replicas == 15.0
    assert rec.hold_from_s == pytest.approx(6400.0 + 5400.0 - 1.5 * H)
    assert rec.holding(6400.0 + 100.0)  # through the newest burst (90 s + a horizon)
    assert not rec.holding(6400.0 + 90.0 + H + 1.0)
    assert rec.holding(rec.hold_from_s) and memory.hold_from(7000.0) == rec.hold_from_s
    assert "2 bursts to 15.0 replicas, 90–90 min apart" in rec.describe(7000.0)


def test_within_the_comeback_memory_the_bound_holds_the_last_burst_not_the_recurrence() -> None:
    memory = BurstMemory(H, MEMORY)
    burst(memory, 0.0, 30, 8.0)
    burst(memory, 1800.0, 30, 8.0)
    rec = memory.expect(1900.0)
    assert rec is not None and rec.hold_from_s == pytest.approx(1800.0 + MEMORY - 1.5 * H)


def test_bursts_that_stopped_are_forgotten() -> None:
    memory = BurstMemory(H, MEMORY)
    burst(memory, 1000.0, 60, 10.0)
    burst(memory, 6000.0, 60, 10.0)
    assert memory.expect(6000.0 + 2 * 5000.0 - 1.0) is not None
    assert memory.expect(6000.0 + 2 * 5000.0 + 1.0) is None


def test_irregular_gaps_hold_from_the_shortest_and_too_irregular_ones_are_no_recurrence() -> None:
    memory = BurstMemory(H, MEMORY)
    for t in (0.0, 5000.0, 9000.0, 22000.0):  # gaps 5,000, 4,000 and 13,000 s: within 4x
        burst(memory, t, 30, 8.0)
    rec = memory.expect(22100.0)
    assert rec is not None and rec.shortest_gap_s == 4000.0 and rec.longest_gap_s == 13000.0
    assert rec.hold_from_s == pytest.approx(22000.0 + 4000.0 - 1.5 * H)
    burst(memory, 40000.0, 30, 8.0)  # 18,000 s: 4.5x the shortest, ServeGen-like scatter
    assert memory.expect(40100.0) is None


@settings(max_examples=100, deadline=None)
@given(st.floats(0.0, 50.0), st.floats(0.0, 50.0))
def test_the_threshold_a_block_checks_is_the_one_a_burst_starts_at(need: float, base: float) -> None:
    memory = BurstMemory(H, MEMORY)
    memory.observe(10.0, need, base)
    assert bool(memory.over(np.array([need]), np.array([base]))[0]) == (len(memory) == 1)


def test_a_policy_holds_capacity_ahead_of_a_burst_that_recurs_past_its_memory() -> None:
    period, length, n = 5700, 90, 4 * 5700 + 600  # 95 minutes: past the comeback bound's hour
    t = np.arange(n)
    rate = np.where((t % period >= 3000) & (t % period < 3000 + length), 240.0, 20.0)
    rng = np.random.default_rng(11)
    tin, tout = DEFAULT_TOKENS.sample(8192, rng)
    demand = FluidDemand("recurring", 1.0, rng.poisson(rate).astype(np.float64), np.sort(tin.astype(np.float64)),
                         np.sort(tout.astype(np.float64)))
    sim = SimSettings()
    pol = build_policy(parse_policies("ebb:forecast=off", KNOWN_POLICIES)[0],
                       PolicyContext(settings=sim, oracle_schedule=np.array([20], dtype=np.int64)))
    assert isinstance(pol, EbbPolicy)
    _, fleet = simulate_fluid(demand, pol, sim)
    ups = [d for d in fleet.noteworthy if d.action == "scale_up" and d.reasons[0].startswith("recurrence:")]
    third = 2 * period + 3000
    ahead = [d for d in ups if third - 2 * pol.horizon_s <= d.t_s < third]  # in time to land before it
    assert ahead and ahead[0].to_replicas >= 10, [(d.t_s, d.to_replicas) for d in ups]
