"""Ebb's mechanisms on synthetic traffic where the right answer is known (request-level simulator).

* A burst every 5 minutes on a quiet base: without a forecast no scale-down could be undone before
  the next burst, so none happens; with the period detected the fleet shrinks in between and is
  back at the burst's size when each burst starts — and no request breaks the SLO either way.
* A burst after a long lull: the fast path asks for capacity within one 100 ms sample of the
  burst's first request, not at the next 1 s reconcile.
* Bursts of one size every few minutes: the comeback bound keeps the capacity they need.

Cold start 20 s (a comeback horizon of 21.1 s), so the policy's memories — counted in horizons —
fit scenarios of tens of minutes.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from ebb.decide.policy import EbbPolicy
from ebb.decide.profiles import PROFILES
from ebb.model.trace import RequestTrace
from ebb.sim.fleet import FleetLog
from ebb.sim.request_engine import RequestOutcome, simulate_requests
from ebb.sim.scoring import score_requests
from ebb.sim.settings import ClusterSettings, SimSettings

COLD_S = 20.0
SETTINGS = SimSettings(cluster=ClusterSettings(cold_start_s=COLD_S))
PERIOD_S, BURST_S, SPAN_S = 300.0, 15.0, 3300.0


def arrivals(rate: float, t0: float, t1: float, rng: np.random.Generator) -> np.ndarray:
    n = int((t1 - t0) * rate * 1.5) + 10
    t = t0 + np.cumsum(rng.exponential(1.0 / rate, n))
    return t[t < t1]


def trace(base_rate: float, bursts: list[tuple[float, float, float]], span_s: float, seed: int = 7) -> RequestTrace:
    """Poisson ``base_rate`` plus (start, length, rate) bursts; prompts of ~2,000 tokens (40 ms of
    prefill each on the calibrated H200), short answers: prefill-bound, like the Azure code trace."""
    rng = np.random.default_rng(seed)
    parts = [arrivals(base_rate, 0.0, span_s, rng)] + [arrivals(r, s, s + length, rng) for s, length, r in bursts]
    t = np.sort(np.concatenate(parts))
    return RequestTrace("synthetic", t, rng.integers(1800, 2200, len(t)), rng.integers(10, 40, len(t)))


def policy(**profile: object) -> EbbPolicy:
    return EbbPolicy(replace(PROFILES["balanced"], **profile), SETTINGS.slo.ttft_ms, SETTINGS.slo.e2e_ms,
                     max_replicas=60, initial=12, cold_start_s=COLD_S)


def run(tr: RequestTrace, pol: EbbPolicy) -> tuple[RequestOutcome, FleetLog]:
    return simulate_requests(tr, pol, SETTINGS)


def violations(tr: RequestTrace, out: RequestOutcome, among: np.ndarray | None = None) -> int:
    ttft = (out.first_token_s - tr.arrival_s) * 1000.0
    e2e = (out.finish_s - tr.arrival_s) * 1000.0
    bad = np.isnan(out.finish_s) | (ttft > SETTINGS.slo.ttft_ms) | (e2e > SETTINGS.slo.e2e_ms)
    return int(np.sum(bad if among is None else bad & among))


def spec_at(fleet: FleetLog, t: float, initial: int = 12) -> int:
    """The replica target in force at ``t`` (the last change at or before it)."""
    spec = initial
    for when, _, to in fleet.decisions:
        if when > t:
            break
        spec = to
    return spec


PERIODIC = [(PERIOD_S * k + 150.0, BURST_S, 150.0) for k in range(int(SPAN_S // PERIOD_S))]


@pytest.fixture(scope="module")
def periodic() -> RequestTrace:
    return trace(2.0, PERIODIC, SPAN_S)


def test_without_a_forecast_no_scale_down_between_periodic_bursts_that_could_not_be_undone(
        periodic: RequestTrace) -> None:
    out, fleet = run(periodic, policy(forecast=False))
    # A burst every 5 minutes, capacity back in 21 s, no knowledge of when the next comes: each
    # scale-down after the bursts are known must be undone before the next burst starts (the fleet
    # there at least what served the one before), and no request breaks the SLO.
    assert violations(periodic, out) == 0
    for k in range(2, len(PERIODIC) - 1):
        start, nxt = PERIODIC[k][0], PERIODIC[k + 1][0]
        for t, a, b in fleet.decisions:
            if start < t < nxt and b < a:
                assert spec_at(fleet, nxt) >= spec_at(fleet, start + 1.0), (t, a, b)


def test_with_the_period_detected_the_fleet_shrinks_between_bursts_and_is_back_for_each(
        periodic: RequestTrace) -> None:
    out, fleet = run(periodic, policy())
    assert violations(periodic, out) == 0
    shrunk = 0
    for k, (start, _, _) in enumerate(PERIODIC):
        if k < 6:  # three periods and 30 horizons of history before the period is trusted
            continue
        lull, at_burst = spec_at(fleet, start - 100.0), spec_at(fleet, start - COLD_S)
        shrunk += at_burst > lull  # shrunk in between, asked back a cold start before the burst
    assert shrunk >= 3, shrunk
    unforecast = run(periodic, policy(forecast=False))[1]
    assert fleet.replica_seconds() < 0.85 * unforecast.replica_seconds()


def test_the_fast_path_asks_for_capacity_between_reconciles_once_the_queue_outgrows_the_slack() -> None:
    burst_at = 1300.0
    tr = trace(1.0, [(burst_at, 30.0, 400.0)], 1500.0)
    out, fleet = run(tr, policy(forecast=False))
    first = float(tr.arrival_s[tr.arrival_s >= burst_at][0])
    ups = [t for t, a, b in fleet.decisions if b > a and t >= first]
    # The queue of the first few hundred milliseconds is absorbed within the slack (1 s); the 100 ms
    # sample at which it no longer is asks for capacity — not the next whole-second reconcile.
    assert ups and ups[0] - first < 0.5, (first, ups[:3])
    assert abs(ups[0] - round(ups[0])) > 1e-6, "asked between reconciles"
    slow = run(tr, policy(forecast=False, fast_path=False))[1]
    slow_ups = [t for t, a, b in slow.decisions if b > a and t >= first]
    assert slow_ups and slow_ups[0] >= math.ceil(first) > ups[0]
    card = score_requests("ebb", tr, out, fleet, SETTINGS, wall_s=0.0).scorecard
    assert card.breach_episodes >= 1 and card.sla_violation_delay_ms <= 100.0


def test_a_burst_size_seen_every_few_minutes_keeps_the_capacity_it_needs() -> None:
    bursts = [(200.0 + 240.0 * k + 37.0 * (k % 3), 10.0, 200.0) for k in range(12)]
    tr = trace(1.0, bursts, 3200.0)
    out, fleet = run(tr, policy(forecast=False))
    # The first burst comes unannounced after a calm in which the fleet shrank: it teaches the bound,
    # which from then on keeps the capacity the bursts need at any moment, in calm too.
    later = tr.arrival_s >= bursts[1][0] - 1.0
    assert violations(tr, out, ~later) > 0
    assert violations(tr, out, later) == 0
    assert min(spec_at(fleet, t) for t in range(int(bursts[1][0]), 3200, 5)) >= 4
