"""``compare``: one small synthetic workload through every policy, end to end."""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import pytest

from ebb.errors import ConfigError, InputError
from ebb.model.ids import TraceName
from ebb.model.trace import CountSeries, RequestTrace
from ebb.model.trace_ops import counts_to_requests
from ebb.sim.compare import Comparison, compare, prepare
from ebb.sim.fluid_engine import FluidDemand
from ebb.sim.policies import KNOWN_POLICIES
from ebb.score.results import Scorecard
from ebb.sim.service_time import ServiceTimeModel
from ebb.sim.settings import ClusterSettings, SimSettings, SloSettings
from ebb.config.policy_specs import parse_policies

POLICIES = parse_policies("hpa,keda,static,oracle", KNOWN_POLICIES)
SETTINGS = SimSettings(seed=3)


def _series() -> CountSeries:
    """15 minutes at 1 s: a slow wave of 5–35 req/s plus a 30 s burst."""
    rng = np.random.default_rng(1)
    t = np.arange(900)
    rate = 20.0 + 15.0 * np.sin(t / 120.0)
    rate[300:330] += 60.0
    return CountSeries(TraceName("synthetic"), rng.poisson(rate).astype(np.int64))


def _trace() -> RequestTrace:
    return counts_to_requests(_series(), seed=0)


@lru_cache(maxsize=None)
def _compared(fidelity: str = "request", peak: int | None = None) -> Comparison:
    work = _trace() if fidelity == "request" else _series()
    return compare(work, POLICIES, SETTINGS, fidelity=fidelity, peak_replicas=peak)


def _cards(c: Comparison) -> dict[str, Scorecard]:
    return {r.scorecard.policy: r.scorecard for r in c.runs}


def test_compare_runs_every_policy_in_order_on_the_same_workload() -> None:
    c = _compared()
    assert [r.scorecard.policy for r in c.runs] == ["hpa", "keda", "static", "oracle"]
    trace = _trace()
    assert c.requests == trace.requests
    assert c.fidelity == "request" and c.load_scale == 1.0
    for card in _cards(c).values():
        assert card.requests == trace.requests
        assert card.fidelity == "request"
        assert card.gpu_hours > 0
        assert card.dropped_requests == 0


def test_the_oracle_meets_the_violation_target_and_costs_no_more_than_static() -> None:
    cards = _cards(_compared())
    assert cards["oracle"].slo_violation_pct <= 0.1
    assert cards["oracle"].gpu_hours <= cards["static"].gpu_hours
    assert cards["oracle"].gpu_hours <= min(c.gpu_hours for c in cards.values()) + 1e-12


def test_the_oracle_search_result_is_the_oracle_run() -> None:
    c = _compared()
    card = _cards(c)["oracle"]
    assert c.oracle.violation_pct == pytest.approx(card.slo_violation_pct)
    assert c.oracle.replica_seconds / 3600.0 == pytest.approx(card.gpu_hours)
    assert card.peak_replicas == int(c.oracle.schedule.max())


def test_static_provisions_the_oracle_peak() -> None:
    c = _compared()
    assert _cards(c)["static"].peak_replicas == int(c.oracle.schedule.max())


@pytest.mark.parametrize("peak", [6, 10])
def test_peak_replicas_rescales_the_load_so_the_oracle_peak_is_near_the_request(peak: int) -> None:
    c = _compared(peak=peak)
    assert abs(int(c.oracle.schedule.max()) - peak) <= 2
    assert c.load_scale > 1.0
    assert c.requests > _trace().requests
    oracle = _cards(c)["oracle"]
    assert oracle.slo_violation_pct <= 0.1
    assert abs(oracle.peak_replicas - peak) <= 2


def test_a_comparison_is_deterministic_for_a_seed() -> None:
    a = compare(_trace(), POLICIES, SETTINGS, fidelity="request", load_scale=1.5)
    b = compare(_trace(), POLICIES, SETTINGS, fidelity="request", load_scale=1.5)
    assert a.requests == b.requests
    np.testing.assert_array_equal(a.oracle.schedule, b.oracle.schedule)
    for ra, rb in zip(a.runs, b.runs):
        ca, cb = ra.scorecard, rb.scorecard
        assert (ca.policy, ca.gpu_hours, ca.slo_violations, ca.ttft_p99_ms, ca.peak_replicas) == \
            (cb.policy, cb.gpu_hours, cb.slo_violations, cb.ttft_p99_ms, cb.peak_replicas)
        np.testing.assert_array_equal(ra.timeline.replicas, rb.timeline.replicas)


def test_fidelity_fluid_works_on_a_count_series() -> None:
    c = _compared("fluid")
    assert c.fidelity == "fluid"
    assert c.requests == _series().requests
    cards = _cards(c)
    assert all(card.fidelity == "fluid" for card in cards.values())
    assert cards["oracle"].slo_violation_pct <= 0.1
    assert cards["oracle"].gpu_hours <= cards["static"].gpu_hours


def test_fluid_and_request_fidelity_find_similar_oracle_costs() -> None:
    req = _cards(_compared())["oracle"].gpu_hours
    flu = _cards(_compared("fluid"))["oracle"].gpu_hours
    assert flu == pytest.approx(req, rel=0.25)


def test_prepare_turns_counts_into_requests_or_fluid_demand() -> None:
    series = _series()
    req = prepare(series, "request", SETTINGS)
    assert isinstance(req, RequestTrace) and req.requests == series.requests
    flu = prepare(series, "fluid", SETTINGS)
    assert isinstance(flu, FluidDemand) and flu.requests == series.requests
    flu5 = prepare(series, "fluid", SETTINGS, fluid_bin_s=5.0)
    assert isinstance(flu5, FluidDemand) and flu5.bin_s == 5.0 and flu5.requests == series.requests


def test_prepare_scales_the_load() -> None:
    series = _series()
    doubled = prepare(series, "request", SETTINGS, load_scale=2.0)
    assert abs(doubled.requests - 2 * series.requests) <= 0.01 * series.requests


def test_an_unknown_fidelity_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="--fidelity 'exact'"):
        compare(_series(), POLICIES, SETTINGS, fidelity="exact")


@pytest.mark.parametrize("scale", [0.0, -1.0, float("nan"), float("inf")])
def test_a_non_positive_or_non_finite_load_scale_is_a_config_error(scale: float) -> None:
    with pytest.raises(ConfigError, match="--load-scale"):
        compare(_series(), POLICIES, SETTINGS, fidelity="fluid", load_scale=scale)


def test_peak_replicas_below_one_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="--peak-replicas"):
        compare(_series(), POLICIES, SETTINGS, fidelity="fluid", peak_replicas=0)


def test_peak_replicas_on_an_empty_trace_is_an_input_error_naming_the_trace() -> None:
    empty = CountSeries(TraceName("empty"), np.zeros(60, dtype=np.int64))
    with pytest.raises(InputError, match="empty: --peak-replicas needs a trace with some requests"):
        compare(empty, POLICIES, SETTINGS, fidelity="fluid", peak_replicas=3)


def test_on_step_is_told_each_step() -> None:
    steps: list[str] = []
    compare(_series(), parse_policies("static,oracle", KNOWN_POLICIES), SETTINGS, fidelity="fluid",
            on_step=steps.append)
    assert steps[0].startswith("oracle: searching")
    assert steps[1:] == ["simulating static", "simulating oracle"]


def test_a_trace_shorter_than_the_cold_start_can_be_compared() -> None:
    short = CountSeries(TraceName("short"), np.full(30, 5, dtype=np.int64))
    settings = SimSettings(cluster=ClusterSettings(cold_start_s=120.0))
    c = compare(short, parse_policies("oracle", KNOWN_POLICIES), settings, fidelity="fluid")
    assert c.oracle.violation_pct <= 0.1


# -- a long-service trace: one request per replica, 5–600 s each -------------------------------------------

PEERS = "hpa,keda,static,kpa,ray,keda-vllm,wva,dynamo,aibrix,ebb"


def _long_service_trace() -> RequestTrace:
    """An hour at 2 requests a minute (seeded), each served 5–600 s (log-uniform): a diffusion service."""
    rng = np.random.default_rng(2)
    n = int(rng.poisson(120))
    t = np.sort(rng.uniform(0.0, 3600.0, n))
    service = np.exp(rng.uniform(np.log(5.0), np.log(600.0), n))
    one = np.ones(n, dtype=np.int64)
    return RequestTrace(TraceName("long-service"), t, one, one, service_s=service)


@lru_cache(maxsize=None)
def _long_service() -> Comparison:
    settings = SimSettings(slo=SloSettings(ttft_ms=30_000.0, e2e_ms=630_000.0), seed=2,
                           cluster=ClusterSettings(service=ServiceTimeModel(concurrency=1)))
    return compare(_long_service_trace(), parse_policies(PEERS + ",oracle", KNOWN_POLICIES), settings,
                   fidelity="request", peak_replicas=20)


def test_on_a_long_service_trace_no_peer_at_its_default_beats_the_oracle() -> None:
    cards = _cards(_long_service())
    oracle = cards["oracle"]
    assert oracle.slo_violation_pct <= 0.1
    beat = {p: (c.gpu_hours, c.slo_violation_pct) for p, c in cards.items()
            if p != "oracle" and c.gpu_hours < oracle.gpu_hours and c.slo_violation_pct <= oracle.slo_violation_pct}
    assert not beat, (oracle.gpu_hours, beat)


def test_the_calibration_sizes_a_long_service_trace_by_its_busy_slots_not_its_arrival_seconds() -> None:
    # Booking each job's service into its arrival second made one 600 s job look like 600 replicas
    # for a second, so the calibration thinned the trace to almost nothing; held for its service time,
    # an hour at 2 a minute keeps every request and is scaled up to a 20-replica peak.
    c = _long_service()
    assert c.load_scale >= 1.0 and c.requests >= _long_service_trace().requests
    assert _cards(c)["static"].peak_replicas <= 20
