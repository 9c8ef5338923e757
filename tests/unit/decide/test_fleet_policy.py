"""FleetEbb (the vectorised L1): its weight is the scalar rule's, it vetoes its own scale-downs on L2,
its down interval starts at the proposal, and no evidence means no scale-down."""

from __future__ import annotations

import math

import numpy as np

from ebb.config.workloads import WorkloadClass
from ebb.decide.fleet_policy import FleetEbb
from ebb.decide.fleet_rank import FleetClasses
from ebb.decide.profiles import EbbProfile
from ebb.decide.semantics import recalibrate_weight

SLO_MS = 800.0


def fleet(n: int = 2, **profile: float) -> FleetEbb:
    cols = FleetClasses.guarding(base_weight=0.65, alpha=1.2, veto_margin=0.8, slo_ms=np.full(n, SLO_MS),
                                 min_replicas=1)
    return FleetEbb(n, slo_ttft_ms=np.full(n, SLO_MS), cold_start_s=np.full(n, 8.0),
                    min_replicas=np.ones(n, dtype=np.int64), max_replicas=np.full(n, 20, dtype=np.int64),
                    capacity_rps=np.full(n, 10.0), classes=cols,
                    profile=EbbProfile(warmup_horizons=2.0, **profile))  # type: ignore[arg-type]


def second(l1: FleetEbb, t: int, arrivals: list[float], ttft_ms: list[float], ready: int = 8) -> None:
    n = len(arrivals)
    l1.observe(float(t), arrivals=np.array(arrivals), queue=np.zeros(n), ready=np.full(n, ready),
               starting=np.zeros(n, dtype=np.int64), ttft_ms=np.array(ttft_ms))


def test_the_weight_is_recalibrated_every_second_by_the_scalar_rule_on_the_windows_worst_ttft() -> None:
    l1 = fleet()
    cls = WorkloadClass(name="c", base_weight=0.65, alpha=1.2, p99_latency_ms=SLO_MS)
    w = 0.65
    for t, lat in enumerate([100.0, 1200.0, 300.0, 2000.0]):
        second(l1, t, [5.0, 5.0], [lat, lat])
        got = l1.decide(float(t))
        worst = max([100.0, 1200.0, 300.0, 2000.0][:t + 1])
        w = recalibrate_weight(cls, w, worst, SLO_MS)
        assert got.weight[0] == w and got.latency_ms[0] == worst


def test_an_idle_window_reads_latency_zero_and_nothing_measured_reads_unknown() -> None:
    l1 = fleet(1)
    assert math.isnan(l1.decide(0.0).latency_ms[0])
    for t in range(31):
        second(l1, t, [0.0], [math.nan])
    assert l1.decide(30.0).latency_ms[0] == 0.0


def test_no_comeback_evidence_no_scale_down_then_a_quiet_fleet_shrinks_one_step_per_interval() -> None:
    l1 = fleet(1)
    downs = []
    for t in range(200):
        second(l1, t, [2.0], [50.0])
        got = l1.decide(float(t))
        if t < 10:
            assert got.desired[0] == 8 and FleetEbb.REASONS[int(got.reason[0])] in ("no comeback evidence", "hold")
        if got.desired[0] < 8:
            downs.append(t)
            assert FleetEbb.REASONS[int(got.reason[0])] == "scale-down wanted"
    assert downs, "a quiet fleet of 8 asks to shrink"
    gaps = np.diff(downs)
    assert (gaps >= 0.5 * l1.horizon_s[0]).all(), "the down interval starts at each proposal"


def test_a_scale_down_is_vetoed_by_its_own_l2_while_latency_is_past_the_veto_margin() -> None:
    l1 = fleet(2)
    for t in range(200):
        second(l1, t, [2.0, 2.0], [50.0, 0.9 * SLO_MS])
        got = l1.decide(float(t))
        assert got.desired[1] == 8
    # never a proposal, so never a down interval: vetoed every second it wants to shrink
    assert FleetEbb.REASONS[int(got.reason[1])] == "vetoed (L2)"
