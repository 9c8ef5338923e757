"""Policies whose answers are known ahead (ebb.sim.policy.Scheduled): their next change is the first
reconcile whose ``decide`` is not a hold, so the reconciles an engine skips were all plain holds."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from ebb.config.policy_specs import parse_policies
from ebb.sim.baselines.oracle import OraclePolicy
from ebb.sim.baselines.static import StaticPolicy
from ebb.sim.policies import KNOWN_POLICIES, build_policy
from ebb.sim.policy import Observation, Scheduled, scheduled
from ebb.sim.policy_context import PolicyContext
from ebb.sim.settings import SimSettings


def _first_change_by_decide(policy: Scheduled, t0: float, spec: int, interval: float, until: float) -> float:
    """The first reconcile t0, t0 + interval, ... before ``until`` whose decide is not a hold; inf if none."""
    t = t0
    while t < until:
        if policy.decide(Observation(t, spec, spec, (), None, None, None)).action != "hold":  # type: ignore[attr-defined]
            return t
        t += interval
    return math.inf


@settings(max_examples=200, deadline=None)
@given(runs=st.lists(st.tuples(st.integers(0, 4), st.integers(1, 40)), min_size=1, max_size=8),
       spec=st.integers(0, 4), start=st.integers(1, 200), interval=st.sampled_from([1.0, 2.0, 7.0, 15.0]))
def test_the_oracle_s_next_change_is_the_first_reconcile_its_decide_does_not_hold(
        runs: list[tuple[int, int]], spec: int, start: int, interval: float) -> None:
    schedule = np.repeat([v for v, _ in runs], [n for _, n in runs]).astype(np.int64)
    oracle = OraclePolicy(schedule, interval_s=interval)
    t0 = float(start)
    # Past the schedule's end it holds its last value: a change found by then is the last one.
    want = _first_change_by_decide(oracle, t0, spec, interval, t0 + len(schedule) + 2 * interval)
    assert oracle.next_change(t0, spec) == want


def test_a_static_fleet_changes_once_to_its_size_and_never_again() -> None:
    static = StaticPolicy(3)
    assert static.next_change(15.0, 2) == 15.0 and static.next_change(15.0, 3) == math.inf


def test_only_policies_on_whole_seconds_without_fine_samples_are_skipped() -> None:
    assert scheduled(StaticPolicy(3)) is not None
    assert scheduled(OraclePolicy(np.ones(10, dtype=np.int64))) is not None
    assert scheduled(OraclePolicy(np.ones(10, dtype=np.int64), interval_s=0.5)) is None  # off the whole seconds
    ctx = PolicyContext(SimSettings(), np.full(100, 3, dtype=np.int64))
    for spec in ("ebb", "hpa"):  # read signals, keep state
        assert scheduled(build_policy(parse_policies(spec, KNOWN_POLICIES)[0], ctx)) is None
