"""The vectorised per-Deployment HPA decides exactly as the scalar port of upstream's rules, service by service."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from ebb.sim.baselines.hpa_behavior import Recommendation, stabilize_recommendation_with_behaviors
from ebb.sim.baselines.hpa_records import Tolerances
from ebb.sim.cluster.peers import FleetHpa


def scalar_hpa(spec: int, ready: int, ratio: float, recs: list[Recommendation], now: float, lo: int, hi: int) -> int:
    if spec == 0:
        desired = math.ceil(ratio)
    elif Tolerances().is_within(ratio):
        desired = spec
    else:
        desired = math.ceil(ratio * ready)
    out, _ = stabilize_recommendation_with_behaviors(recs, spec, desired, now, 0.0, 300.0)
    return min(max(min(out, max(2 * spec, spec + 4)), lo), hi)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.lists(st.tuples(st.integers(1, 30), st.floats(0.0, 1.0)), min_size=6, max_size=6),
                min_size=1, max_size=30))
def test_fleet_hpa_equals_the_scalar_rules_at_every_sync(syncs: list[list[tuple[int, float]]]) -> None:
    n = 6
    lo, hi = np.ones(n, dtype=np.int64), np.full(n, 40, dtype=np.int64)
    hpa = FleetHpa(n, target=0.6, min_replicas=lo, max_replicas=hi, capacity_rps=np.ones(n),
                   service_s=np.ones(n), metric_window_s=1)
    recs: list[list[Recommendation]] = [[] for _ in range(n)]
    for k, row in enumerate(syncs):
        spec = np.array([r for r, _ in row], dtype=np.int64)
        util = np.array([u for _, u in row])
        hpa.observe(util * spec, spec, np.zeros(n), np.zeros(n))  # served = util × ready × capacity
        got = hpa.decide(spec, spec)
        for i in range(n):
            busy = min(1.0, float(util[i] * spec[i]) / float(spec[i]))
            want = scalar_hpa(int(spec[i]), int(spec[i]), busy / 0.6, recs[i], 15.0 * k, 1, 40)
            assert got[i] == want, (k, i, row[i])
