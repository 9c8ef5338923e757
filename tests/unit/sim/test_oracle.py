"""The oracle: sliding windows, the cold-start-ahead schedule, the verified search, the digest search."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ebb.errors import ConfigError
from ebb.model.ids import TraceName
from ebb.model.trace import CountSeries
from ebb.sim import compare
from ebb.sim.baselines.oracle import (
    OraclePolicy,
    forward_max,
    forward_mean,
    occupancy_rate,
    reactive_schedule_for,
    schedule_for,
    schedule_from_need,
    search_oracle,
    trailing_mean,
    work_per_request,
    work_rate,
)
from ebb.model.latency import H200_DEFAULT
from ebb.sim.policy import Observation
from ebb.sim.settings import ClusterSettings, SimSettings



def _ref_forward_mean(x: list[float], w: int) -> list[float]:
    w = max(w, 1)
    return [sum(x[t:t + w]) / len(x[t:t + w]) for t in range(len(x))]


def _ref_forward_max(x: list[int], w: int) -> list[int]:
    return [max(x[t:t + w + 1]) for t in range(len(x))]


@settings(max_examples=200, deadline=None)
@given(x=st.lists(st.floats(0.0, 1e4), min_size=1, max_size=80), w=st.integers(0, 100))
def test_forward_mean_equals_the_mean_of_the_next_window(x: list[float], w: int) -> None:
    got = forward_mean(np.array(x, dtype=np.float64), w)
    np.testing.assert_allclose(got, _ref_forward_mean(x, w), rtol=1e-9, atol=1e-6)


# The property tests keep the window within the series (see the explicit tests of longer windows
# below, which fail on a src bug: forward_max raises when the window far exceeds the series).
@settings(max_examples=200, deadline=None)
@given(x=st.lists(st.integers(0, 1000), min_size=1, max_size=80), data=st.data())
def test_forward_max_equals_the_max_of_the_next_window_plus_one(x: list[int], data: st.DataObject) -> None:
    w = data.draw(st.integers(0, len(x)))
    got = forward_max(np.array(x, dtype=np.int64), w)
    assert got.tolist() == _ref_forward_max(x, w)


@settings(max_examples=200, deadline=None)
@given(need=st.lists(st.integers(1, 50), min_size=1, max_size=80), data=st.data())
def test_schedule_from_need_holds_the_max_need_over_the_next_cold_start(need: list[int],
                                                                      data: st.DataObject) -> None:
    cold = data.draw(st.floats(0.0, float(len(need) - 1)))
    sched = schedule_from_need(np.array(need, dtype=np.int64), cold)
    assert sched.tolist() == _ref_forward_max(need, math.ceil(cold))


@pytest.mark.parametrize(("n", "window"), [(1, 2), (3, 8), (30, 62)])
def test_forward_max_handles_a_window_much_longer_than_the_series(n: int, window: int) -> None:
    x = np.arange(n, dtype=np.int64)
    assert forward_max(x, window).tolist() == [n - 1] * n


def test_a_schedule_shorter_than_the_cold_start_holds_the_peak_need_throughout() -> None:
    need = np.array([1, 4, 2], dtype=np.int64)
    assert schedule_from_need(need, 60.0).tolist() == [4, 4, 2]


@settings(max_examples=100, deadline=None)
@given(need=st.lists(st.integers(1, 50), min_size=1, max_size=80), data=st.data())
def test_a_replica_requested_a_cold_start_ahead_is_ready_when_needed(need: list[int], data: st.DataObject) -> None:
    cold = data.draw(st.integers(0, len(need) - 1))
    sched = schedule_from_need(np.array(need, dtype=np.int64), float(cold))
    assert np.all(sched >= np.array(need))
    # Replicas that serve at u were requested at u - cold: every count held since then covers need(u).
    for u in range(len(need)):
        assert sched[max(0, u - cold):u + 1].min() >= need[u]


def test_the_schedule_rises_a_cold_start_before_a_spike_and_falls_right_after() -> None:
    need = np.ones(100, dtype=np.int64)
    need[60:65] = 7
    sched = schedule_from_need(need, 20.0)
    assert sched[:40].tolist() == [1] * 40
    assert sched[40:65].tolist() == [7] * 25
    assert sched[65:].tolist() == [1] * 35


def test_schedule_for_needs_at_least_one_replica_and_scales_with_headroom() -> None:
    rate = np.array([0.0, 0.0, 2.5, 2.5, 0.0, 0.0])
    assert schedule_for(rate, 1.0, 1, 0.0).tolist() == [1, 1, 3, 3, 1, 1]
    assert schedule_for(rate, 2.0, 1, 0.0).tolist() == [1, 1, 5, 5, 1, 1]
    # Need over 2-s means: [1, 2, 3, 2, 1, 1]; then the max over [t, t + 1].
    assert schedule_for(rate, 1.0, 2, 1.0).tolist() == [2, 3, 3, 2, 1, 1]


def test_work_per_request_is_prefill_plus_a_full_batch_share_of_decode() -> None:
    w = work_per_request(np.array([100.0, 1000.0]), np.array([64.0, 0.0]), H200_DEFAULT)
    step_s = (H200_DEFAULT.decode_base_ms + 64 * H200_DEFAULT.decode_ms_per_seq) / 1000.0
    np.testing.assert_allclose(w, [0.004 + step_s, 0.0119])


def test_a_100_s_job_holds_one_replica_for_100_s_not_ten_for_ten() -> None:
    busy = occupancy_rate(np.array([0.0]), np.array([100.0]), 1.0)
    assert busy[:100].tolist() == [1.0] * 100 and busy[100:].sum() == 0.0


def test_occupancy_splits_a_second_by_the_share_of_it_each_request_holds() -> None:
    busy = occupancy_rate(np.array([0.5, 1.2]), np.array([1.75, 0.3]), 2.0, share=0.5)
    assert busy.tolist() == pytest.approx([0.25, 0.65, 0.125, 0.0])


def test_occupancy_runs_past_the_trace_to_the_last_service_end() -> None:
    assert len(occupancy_rate(np.array([1.0]), np.array([50.0]), 1.0)) == 52


def _brute_occupancy(start: list[float], hold: list[float], n: int, share: float) -> list[float]:
    return [share * sum(max(0.0, min(s + h, t + 1) - max(s, t)) for s, h in zip(start, hold)) for t in range(n)]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.floats(0.0, 30.0), st.floats(0.0, 20.0)), max_size=12),
       st.sampled_from([1.0, 0.5, 0.125]))
def test_occupancy_is_each_second_s_overlap_with_every_request_summed(
        jobs: list[tuple[float, float]], share: float) -> None:
    start, hold = [s for s, _ in jobs], [h for _, h in jobs]
    busy = occupancy_rate(np.array(start, dtype=np.float64), np.array(hold, dtype=np.float64), 10.0, share)
    assert busy.tolist() == pytest.approx(_brute_occupancy(start, hold, len(busy), share), abs=1e-9)
    assert float(busy.sum()) == pytest.approx(share * sum(hold), abs=1e-9)


def test_work_rate_bins_work_by_arrival_second() -> None:
    rate = work_rate(np.array([0.1, 0.9, 2.5, 4.99]), np.array([1.0, 2.0, 3.0, 4.0]), 4.99)
    assert rate.tolist() == [3.0, 0.0, 3.0, 0.0, 4.0, 0.0]


def test_oracle_policy_follows_its_schedule_and_holds_the_last_value() -> None:
    pol = OraclePolicy(np.array([2, 3, 5], dtype=np.int64))
    answers = [pol.decide(Observation(t, 0, 0, (), None, None, None)) for t in (0.0, 1.0, 1.9, 2.0, 50.0)]
    assert [a.to_replicas for a in answers] == [2, 3, 3, 5, 5]
    assert all(a.from_replicas == 0 and a.action == "scale_up" and a.policy == "oracle" for a in answers)


def test_the_oracle_holds_without_a_reason_when_its_schedule_matches_the_fleet() -> None:
    pol = OraclePolicy(np.array([2, 3, 5], dtype=np.int64))
    hold = pol.decide(Observation(1.0, 3, 3, (), None, None, None))
    assert hold.action == "hold" and hold.reasons == () and not hold.noteworthy
    down = pol.decide(Observation(1.0, 4, 4, (), None, None, None))
    assert (down.action, down.to_replicas, down.reasons) == ("scale_down", 3, ("oracle: schedule 3 at 1 s",))


class _FakeEval:
    """Violations fall to zero once the schedule covers a hidden true need; cost = replica-seconds."""

    def __init__(self, need: np.ndarray) -> None:
        self.need = need
        self.calls = 0

    def __call__(self, sched: np.ndarray) -> tuple[float, float]:
        self.calls += 1
        short = float(np.clip(self.need - sched, 0, None).sum())
        return float(sched.sum()), 100.0 * short / float(self.need.sum())


def _rate_and_need(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    t = np.arange(600)
    rate = 5.0 + 4.0 * np.sin(t / 60.0) + rng.uniform(0.0, 1.0, len(t))
    need = np.ceil(1.3 * rate).astype(np.int64)  # the true headroom is 1.3
    return rate, need


def test_search_oracle_returns_a_schedule_that_meets_the_target_and_beats_the_starting_bracket() -> None:
    rate, need = _rate_and_need()
    ev = _FakeEval(need)
    found = search_oracle(rate, 10.0, ev, target_violation_pct=0.1)
    cost, viol = ev(found.schedule)
    assert viol <= 0.1
    assert cost == found.replica_seconds
    assert found.violation_pct == viol
    start_cost, _ = ev(schedule_for(rate, 2.0, found.smoothing_s, 10.0))
    assert found.replica_seconds < start_cost
    assert 1.0 < found.headroom < 1.5
    assert found.tried == ev.calls - 2


def test_search_oracle_widens_the_bracket_when_the_top_fails() -> None:
    rate, _ = _rate_and_need()
    need = np.ceil(5.0 * rate).astype(np.int64)
    found = search_oracle(rate, 10.0, _FakeEval(need), target_violation_pct=0.1)
    assert found.headroom > 2.0
    assert _FakeEval(need)(found.schedule)[1] <= 0.1


def test_search_oracle_raises_a_config_error_with_a_fix_when_no_headroom_meets_the_target() -> None:
    rate, _ = _rate_and_need()
    with pytest.raises(ConfigError, match="256x headroom.*fix: relax --slo"):
        search_oracle(rate, 10.0, lambda s: (float(s.sum()), 50.0), target_violation_pct=0.1)


def test_search_oracle_near_a_previous_result_tries_only_its_smoothing_in_a_narrow_bracket() -> None:
    rate, need = _rate_and_need()
    ev = _FakeEval(need)
    found = search_oracle(rate, 10.0, ev, target_violation_pct=0.1, near=(1.35, 10))
    assert found.smoothing_s == 10
    assert 1.35 / 1.4 <= found.headroom <= 1.35 * 1.4
    assert found.tried == 5  # the bracket top, then 4 bisection steps
    assert ev(found.schedule)[1] <= 0.1


def test_the_digest_search_of_a_long_workload_is_verified_on_the_full_workload(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(compare, "_DIGEST_SECONDS", 600)
    monkeypatch.setattr(compare, "_SEGMENT_S", 120)
    rng = np.random.default_rng(4)
    counts = rng.poisson(40.0, 1800)
    for start in (200, 900, 1500):
        counts[start:start + 20] += 300  # bursts: where the digest should look
    series = CountSeries(TraceName("long"), counts.astype(np.int64))
    sim = SimSettings(cluster=ClusterSettings(cold_start_s=10.0))
    w = compare.prepare(series, "fluid", sim)

    searched_lengths: list[int] = []
    real_search = compare.search_oracle

    def spy(rate: np.ndarray, *args: object, **kwargs: object) -> object:
        searched_lengths.append(len(rate))
        return real_search(rate, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(compare, "search_oracle", spy)
    found = compare.search(w, sim)
    assert searched_lengths and max(searched_lengths) <= 4 * 120 + 1  # the digest, not the full run
    full_rate = compare._rate(w, sim)
    assert len(found.schedule) == len(full_rate)
    cost, viol = compare._evaluate(w, sim)(found.schedule)
    assert viol <= 0.1
    assert found.violation_pct == viol
    assert found.replica_seconds == cost
    # The bursts are in the schedule: more replicas a cold start ahead of each than in quiet times.
    for start in (200, 900, 1500):
        assert found.schedule[start - 5] > found.schedule[start - 100]


def test_a_short_workload_is_searched_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(2)
    series = CountSeries(TraceName("short"), rng.poisson(30.0, 300).astype(np.int64))
    sim = SimSettings(cluster=ClusterSettings(cold_start_s=10.0))
    w = compare.prepare(series, "fluid", sim)
    lengths: list[int] = []
    real_search = compare.search_oracle

    def spy(rate: np.ndarray, *args: object, **kwargs: object) -> object:
        lengths.append(len(rate))
        return real_search(rate, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(compare, "search_oracle", spy)
    found = compare.search(w, sim)
    assert lengths == [len(compare._rate(w, sim))]
    assert found.violation_pct <= 0.1


def _ref_trailing_mean(x: list[float], w: int) -> list[float]:
    w = max(w, 1)
    return [x[0]] + [sum(x[max(0, t - w):t]) / len(x[max(0, t - w):t]) for t in range(1, len(x))]


@settings(max_examples=200, deadline=None)
@given(x=st.lists(st.floats(0.0, 1e4), min_size=1, max_size=80), w=st.integers(0, 100))
def test_trailing_mean_is_the_mean_of_the_seconds_already_seen(x: list[float], w: int) -> None:
    got = trailing_mean(np.array(x, dtype=np.float64), w)
    np.testing.assert_allclose(got, _ref_trailing_mean(x, w), rtol=1e-9, atol=1e-6)


def test_the_perfect_reactor_sees_a_rise_only_the_second_after_it_arrives() -> None:
    rate = np.array([1.0, 1.0, 3.0, 3.0, 1.0, 1.0])
    assert reactive_schedule_for(rate, 1.0, 1).tolist() == [1, 1, 1, 3, 3, 1]
    # The oracle with foresight (no cold start) holds the rise in the second it arrives.
    assert schedule_for(rate, 1.0, 1, 0.0).tolist() == [1, 1, 3, 3, 1, 1]
    assert reactive_schedule_for(rate, 10.0, 1, max_replicas=4).max() == 4
    # Held 2 s: up at once, down only once the rise is 2 s old.
    assert reactive_schedule_for(rate, 1.0, 1, hold_s=2).tolist() == [1, 1, 1, 3, 3, 3]


def test_search_oracle_with_a_reactive_builder_verifies_the_reactor_it_returns() -> None:
    rate, need = _rate_and_need()
    ev = _FakeEval(need)
    found = search_oracle(rate, 10.0, ev, target_violation_pct=0.1,
                          build=lambda h, s: reactive_schedule_for(rate, h, s))
    cost, viol = ev(found.schedule)
    assert viol <= 0.1 and cost == found.replica_seconds
    assert found.schedule.tolist() == reactive_schedule_for(rate, found.headroom, found.smoothing_s).tolist()
