"""L2 workload semantics (ebb.decide.semantics): weights, vetoes, ranking."""

from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ebb.config.workloads import WorkloadClass, default_workload_classes
from ebb.decide.semantics import (
    DEFAULT_MAX_STALENESS_S,
    WorkloadSignals,
    rank_candidates,
    recalibrate_weight,
    target_weight,
    veto,
)

ORDER, RECO, TRAIN = default_workload_classes()


def signals(workload: str = "orders", cls: WorkloadClass = ORDER, /,
            **kw: object) -> WorkloadSignals:
    base = WorkloadSignals(workload=workload, class_name=cls.name, replicas=4, ready_replicas=4,
                           latency_p99_ms=200.0, latency_p95_ms=100.0, success_ratio=0.9999,
                           burst_active=False, utilisation_ratio=0.3, staleness_s=0.5)
    return dataclasses.replace(base, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("rt99_ms", "expected"),
    [
        (1000.0, 0.65 * 1.25),   # the note's example: 0.8125
        (1600.0, 0.65 * 1.4),    # twice the SLO
        (800.0, 0.65),           # at the SLO: not past it, base weight
        (799.0, 0.65),
        (100.0, 0.65),
        (math.nan, 0.65),        # unknown latency: no evidence of a breach
    ],
    ids=["rt99-1000ms", "rt99-1600ms", "rt99-at-slo", "just-under", "quiet", "unknown"],
)
def test_the_target_weight_follows_the_notes_linear_rule(rt99_ms: float, expected: float) -> None:
    assert target_weight(ORDER, rt99_ms, 800.0) == pytest.approx(expected)


def test_with_alpha_zero_the_weight_jumps_to_its_target() -> None:
    cls = dataclasses.replace(ORDER, alpha=0.0)
    assert recalibrate_weight(cls, 0.65, 1000.0, 800.0) == pytest.approx(0.8125)


def test_one_damped_step_moves_one_over_one_plus_alpha_of_the_gap() -> None:
    # order fulfilment α = 1.2: 0.65 + (0.8125 − 0.65) / 2.2
    assert recalibrate_weight(ORDER, 0.65, 1000.0, 800.0) == pytest.approx(0.65 + 0.1625 / 2.2)


def test_unknown_latency_keeps_the_previous_weight() -> None:
    assert recalibrate_weight(ORDER, 0.7, math.nan, 800.0) == 0.7


@pytest.mark.parametrize(("prev", "p99", "slo"), [(-0.1, 1.0, 1.0), (math.inf, 1.0, 1.0),
                                                   (0.5, 1.0, 0.0), (0.5, -1.0, 1.0)],
                         ids=["negative-weight", "infinite-weight", "zero-slo", "negative-latency"])
def test_bad_arguments_raise_value_error_quoting_the_value(prev: float, p99: float,
                                                           slo: float) -> None:
    with pytest.raises(ValueError):
        recalibrate_weight(ORDER, prev, p99, slo)


@given(alpha=st.floats(0.0, 20.0), base=st.floats(0.01, 1.0), prev=st.floats(0.0, 3.0),
       p99=st.floats(0.0, 5000.0))
def test_weight_damping_converges_monotonically_without_overshoot(alpha: float, base: float,
                                                                   prev: float, p99: float) -> None:
    cls = dataclasses.replace(ORDER, alpha=alpha, base_weight=base)
    target = target_weight(cls, p99, 800.0)
    w = prev
    for _ in range(60):
        nxt = recalibrate_weight(cls, w, p99, 800.0)
        # every step lies between the previous weight and the target, and the gap shrinks
        assert min(w, target) - 1e-12 <= nxt <= max(w, target) + 1e-12
        assert abs(nxt - target) <= abs(w - target) + 1e-12
        w = nxt
    if alpha <= 5.0:  # ratio ≤ 5/6 per step: 60 steps shrink any gap below 1.8e-5 of itself
        assert w == pytest.approx(target, abs=1e-4 * max(1.0, abs(prev - target)))


def test_a_quiet_workload_with_fresh_data_is_not_vetoed() -> None:
    assert veto(ORDER, signals()) == ()


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"latency_p99_ms": 640.0}, "p99 latency 640 ms >= 80% of SLO 800 ms"),
        ({"latency_p99_ms": math.nan}, "p99 latency unknown"),
        ({"success_ratio": 0.999}, "success rate 99.9000% < floor 99.9500%"),
        ({"success_ratio": math.nan}, "success rate unknown"),
        ({"burst_active": True}, "burst active"),
        ({"staleness_s": 30.0}, "stale data: 30 s old > 2 s allowed"),
        ({"staleness_s": math.nan}, "stale data"),
        ({"replicas": 1}, "replicas 1 <= min_replicas 1"),
    ],
    ids=["p99-at-margin", "p99-unknown", "success-low", "success-unknown", "burst", "stale",
         "staleness-unknown", "at-min-replicas"],
)
def test_each_unsafe_signal_vetoes_scale_down_with_a_reason(change: dict[str, object],
                                                            reason: str) -> None:
    got = veto(ORDER, signals(**change))
    assert len(got) == 1 and got[0].startswith(reason)


def test_the_recommendation_class_is_vetoed_on_p95_not_p99() -> None:
    s = signals("reco", RECO, latency_p99_ms=math.nan, latency_p95_ms=250.0)
    assert veto(RECO, s) == ("p95 latency 250 ms >= 80% of SLO 300 ms",)


def test_training_has_no_latency_slo_so_unknown_latency_does_not_veto_it() -> None:
    s = signals("train", TRAIN, latency_p99_ms=math.nan, latency_p95_ms=math.nan,
                success_ratio=math.nan, utilisation_ratio=0.2)
    assert veto(TRAIN, s) == ()


def test_signals_for_another_class_are_refused() -> None:
    with pytest.raises(ValueError, match="not 'offline-training'"):
        veto(TRAIN, signals())


latency = st.one_of(st.floats(0.0, 5000.0), st.just(math.inf))


@given(a=latency, b=latency, stale_a=st.floats(0.0, 10.0), stale_b=st.floats(0.0, 10.0),
       margin=st.floats(0.05, 1.0))
def test_veto_is_monotone_higher_latency_or_staleness_never_unvetoes(
        a: float, b: float, stale_a: float, stale_b: float, margin: float) -> None:
    cls = dataclasses.replace(ORDER, veto_margin=margin)
    lo, hi = sorted((a, b))
    s_lo, s_hi = sorted((stale_a, stale_b))
    low = veto(cls, signals(latency_p99_ms=lo, staleness_s=s_lo), DEFAULT_MAX_STALENESS_S)
    high = veto(cls, signals(latency_p99_ms=hi, staleness_s=s_hi), DEFAULT_MAX_STALENESS_S)
    assert len(high) >= len(low)
    if low:
        assert high


def test_candidates_rank_by_lowest_weight_then_most_headroom() -> None:
    sigs = [
        signals("orders", ORDER, latency_p99_ms=200.0),
        signals("reco-a", RECO, latency_p95_ms=150.0),   # headroom 50 %
        signals("reco-b", RECO, latency_p95_ms=60.0),    # headroom 80 %
        signals("train", TRAIN, utilisation_ratio=0.4),  # headroom 1 − 0.4
    ]
    ranked = rank_candidates(default_workload_classes(), sigs, {})
    assert [c.workload for c in ranked] == ["train", "reco-b", "reco-a", "orders"]
    assert ranked[1].headroom == pytest.approx(0.8)
    assert not any(c.vetoed for c in ranked)
    assert ranked[0].reason.startswith("eligible: weight 0.1 (offline-training)")


def test_recalibrated_weights_override_the_base_and_vetoed_ones_stay_marked() -> None:
    sigs = [signals("orders", ORDER), signals("train", TRAIN, burst_active=True)]
    ranked = rank_candidates(default_workload_classes(), sigs, {"orders": 0.05})
    assert [c.workload for c in ranked] == ["orders", "train"]
    assert ranked[1].vetoed and ranked[1].reason == "vetoed: burst active (L1)"


def test_unknown_headroom_ranks_after_known_headroom_of_equal_weight() -> None:
    sigs = [signals("a", TRAIN, utilisation_ratio=math.nan), signals("b", TRAIN)]
    assert [c.workload for c in rank_candidates([TRAIN], sigs, {})] == ["b", "a"]


def test_a_workload_of_an_unknown_class_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown class 'order-fulfilment'"):
        rank_candidates([TRAIN], [signals()], {})


def test_an_infinite_p99_counts_as_ten_times_the_slo_in_the_weight() -> None:
    capped = recalibrate_weight(ORDER, 0.65, 10 * 800.0, 800.0)
    assert recalibrate_weight(ORDER, 0.65, math.inf, 800.0) == capped
    assert recalibrate_weight(ORDER, 0.65, 1e300, 800.0) == capped
    assert math.isfinite(capped) and capped > 0.65
