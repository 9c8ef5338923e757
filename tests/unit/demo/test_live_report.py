"""A live run scored like a simulated one: GPU-hours from the fleet readings, violations from requests."""

from __future__ import annotations

import math

import numpy as np

from ebb.demo.report import FleetSample, LiveRun, live_policy_run


def run(ok: list[bool], ttft: list[float], fleet: list[FleetSample], duration_s: float = 20.0) -> LiveRun:
    n = len(ok)
    return LiveRun(policy="ebb", trace="t", sent_s=np.linspace(0.0, duration_s - 1.0, n), ok=np.array(ok),
                   ttft_ms=np.array(ttft), e2e_ms=np.array(ttft) + 100.0, fleet=fleet,
                   decisions=((10.0, 2, 1),), duration_s=duration_s)


def test_gpu_hours_bill_each_fleet_reading_until_the_next_one_draining_included() -> None:
    fleet = [FleetSample(0.0, 2, 2, 0), FleetSample(10.0, 1, 1, 1), FleetSample(15.0, 1, 1, 0)]
    card = live_policy_run(run([True] * 4, [50.0] * 4, fleet)).scorecard
    # 2 replicas for 10 s, 1 + 1 draining for 5 s, 1 for 5 s = 35 replica-seconds.
    assert math.isclose(card.gpu_hours, 35.0 / 3600.0)
    assert card.scale_downs == 1 and card.scale_ups == 0 and card.peak_replicas == 2


def test_failed_and_slow_requests_are_violations_and_failed_ones_have_no_latency() -> None:
    fleet = [FleetSample(0.0, 1, 1)]
    r = live_policy_run(run([True, True, False, True], [50.0, 2500.0, math.nan, 60.0], fleet))
    c = r.scorecard
    assert c.slo_violations == 2 and c.dropped_requests == 1 and math.isclose(c.slo_violation_pct, 50.0)
    assert c.ttft_p50_ms == 60.0
    assert np.isnan(r.timeline.ttft_p99_ms).any(), "bins without an answered request hold NaN, not 0"
