"""A warm-up feeds the policies but is not judged or billed: hand-made runs scored both ways, and ``compare``."""

from __future__ import annotations

import numpy as np
import pytest

from ebb.config.policy_specs import parse_policies
from ebb.errors import ConfigError
from ebb.model.ids import ReplicaId, TraceName
from ebb.model.trace import CountSeries, RequestTrace
from ebb.sim.compare import compare, prepare
from ebb.sim.fleet import FleetLog, ReplicaLog
from ebb.sim.fluid_engine import FluidDemand, FluidOutcome
from ebb.sim.fluid_scoring import score_fluid
from ebb.sim.policies import KNOWN_POLICIES
from ebb.sim.request_engine import RequestOutcome
from ebb.sim.scoring import score_requests
from ebb.sim.settings import SimSettings
from ebb.sim.warmup import check_warmup, scored_arrivals, scored_bins

NAN = np.nan


def _fleet() -> FleetLog:
    """One replica all along [0, 40], a second from 5 to 25: up at 5, down at 25."""
    logs = (ReplicaLog(ReplicaId(0), 0.0, 0.0, NAN), ReplicaLog(ReplicaId(1), 5.0, 5.0, 25.0))
    return FleetLog(logs, scale_ups=1, scale_downs=1, end_s=40.0, decisions=((5.0, 1, 2), (25.0, 2, 1)))


def _requests() -> tuple[RequestTrace, RequestOutcome]:
    """Six requests: the three before 20 s all violate (one dropped), of the three after only the last."""
    arrival = np.array([1.0, 8.0, 15.0, 20.0, 28.0, 35.0])
    trace = RequestTrace(TraceName("hand"), arrival, np.full(6, 100, dtype=np.int64), np.full(6, 10, dtype=np.int64))
    ttft_s = np.array([9.0, 9.0, NAN, 0.5, 0.7, 0.6])
    e2e_s = np.array([10.0, 10.0, NAN, 1.0, 1.4, 90.0])  # the last one past the 60 s end-to-end limit
    return trace, RequestOutcome(arrival + ttft_s, arrival + e2e_s, np.zeros(6, dtype=np.int64))


def test_a_warm_up_judges_only_the_requests_arriving_after_it_and_bills_from_it_on() -> None:
    trace, outcome = _requests()
    whole = score_requests("p", trace, outcome, _fleet(), SimSettings(), wall_s=0.0).scorecard
    warm = score_requests("p", trace, outcome, _fleet(), SimSettings(warmup_s=20.0), wall_s=0.0).scorecard
    assert (whole.requests, whole.slo_violations, whole.dropped_requests) == (6, 4, 1)
    assert (warm.requests, warm.slo_violations, warm.dropped_requests) == (3, 1, 0)
    assert warm.slo_violation_pct == pytest.approx(100.0 / 3)
    assert whole.gpu_hours * 3600 == pytest.approx(40 + 20) and warm.gpu_hours * 3600 == pytest.approx(20 + 5)
    assert (whole.mean_replicas, warm.mean_replicas) == pytest.approx((60 / 40, 25 / 20))
    assert whole.peak_replicas == warm.peak_replicas == 2  # the second replica still runs at 20 s
    assert (whole.scale_ups, whole.scale_downs, warm.scale_ups, warm.scale_downs) == (1, 1, 0, 1)
    assert warm.ttft_p99_ms <= 700.0 < whole.ttft_p99_ms  # the warm-up's 9 s first tokens are not in it
    assert warm.warmup_s == 20.0 and warm.as_dict()["warmup_s"] == 20.0


def test_without_a_warm_up_the_scorecard_json_has_no_warmup_key() -> None:
    trace, outcome = _requests()
    card = score_requests("p", trace, outcome, _fleet(), SimSettings(), wall_s=0.0).scorecard
    assert card.warmup_s == 0.0 and "warmup_s" not in card.as_dict()


def test_a_fluid_warm_up_judges_only_the_bins_starting_after_it() -> None:
    counts = np.array([10.0, 10.0, 10.0, 10.0])  # four 10 s bins
    demand = FluidDemand("hand", 10.0, counts, np.full(8, 100.0), np.full(8, 10.0))
    out = FluidOutcome(violations=np.array([5.0, 4.0, 0.0, 1.0]), ttft_base_s=np.zeros(4), tau_s=np.full(4, 0.01),
                       dropped=0.0)
    whole = score_fluid("p", demand, out, _fleet(), SimSettings(), wall_s=0.0).scorecard
    warm = score_fluid("p", demand, out, _fleet(), SimSettings(warmup_s=15.0), wall_s=0.0).scorecard
    assert (whole.requests, whole.slo_violations) == (40, 10)
    # 15 s falls inside the second bin: it is left out whole, the last two bins are judged.
    assert (warm.requests, warm.slo_violations) == (20, 1) and warm.slo_violation_pct == pytest.approx(5.0)
    assert warm.gpu_hours * 3600 == pytest.approx(25 + 10) and warm.peak_replicas == 2


def test_scored_bins_and_arrivals_start_at_the_warm_up_with_edges_exact() -> None:
    assert scored_bins(6, 0.1, 0.3).tolist() == [False, False, False, True, True, True]
    assert scored_bins(3, 1.0, 0.0).all() and scored_arrivals(np.array([0.0, 0.5]), 0.0).all()
    assert scored_arrivals(np.array([1.0, 2.0, 3.0]), 2.0).tolist() == [False, True, True]


@pytest.mark.parametrize("warmup_s", [600.0, 900.0])
def test_a_warm_up_as_long_as_the_trace_is_one_line_naming_the_flag_and_the_fix(warmup_s: float) -> None:
    with pytest.raises(ConfigError, match=r"^--warmup-s .*the trace lasts 600 s.*\(fix: a --warmup-s below 600"):
        check_warmup(warmup_s, 600.0)
    check_warmup(599.0, 600.0)  # anything shorter is accepted


def test_a_negative_warm_up_is_refused_when_the_settings_are_built() -> None:
    with pytest.raises(ValueError, match="warmup_s"):
        SimSettings(warmup_s=-1.0)


def _series() -> CountSeries:
    """10 minutes at 1 s: a quiet 4 min, then 8–14 req/s."""
    counts = np.concatenate([np.full(240, 2), 11 + np.rint(3 * np.sin(np.arange(360) / 30.0))]).astype(np.int64)
    return CountSeries(TraceName("warm"), counts, 1.0)


def test_compare_judges_every_policy_and_the_oracle_after_the_warm_up_only() -> None:
    items = parse_policies("static,hpa,oracle", KNOWN_POLICIES)
    plain = compare(_series(), items, SimSettings(), fidelity="fluid", peak_replicas=6)
    warm = compare(_series(), items, SimSettings(warmup_s=240.0), fidelity="fluid", peak_replicas=6)
    assert warm.load_scale == plain.load_scale  # the calibration measures the whole trace either way
    by_policy = {r.scorecard.policy: r.scorecard for r in warm.runs}
    assert all(c.warmup_s == 240.0 for c in by_policy.values())
    served = prepare(_series(), "fluid", SimSettings(), load_scale=warm.load_scale)
    assert isinstance(served, FluidDemand) and served.bin_s == 1.0
    assert by_policy["static"].requests == round(float(served.counts[240:].sum()))
    assert by_policy["oracle"].slo_violation_pct <= 0.1  # its SLO is judged on what is scored
    for w, p in zip(warm.runs, plain.runs):  # the timeline still shows the whole run
        assert np.array_equal(w.timeline.t_s, p.timeline.t_s) and w.timeline.t_s[0] == 0.0


def test_compare_refuses_a_warm_up_that_leaves_nothing_to_score() -> None:
    items = parse_policies("static", KNOWN_POLICIES)
    with pytest.raises(ConfigError, match="--warmup-s 600: the trace lasts 600 s"):
        compare(_series(), items, SimSettings(warmup_s=600.0), fidelity="fluid", peak_replicas=6)
