"""Ebb's rules past L1 (ebb.decide.ebb_rules): each block twin answers as the one-tick rule beside it."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from ebb.decide.ebb_rules import (
    bounded,
    bounded_many,
    calm_window,
    cooldown_s,
    down_interval_s,
    down_vetoes,
    grows,
    grows_many,
    hold_floor,
    hold_floors,
    late,
    repeats_last_veto,
    veto_key,
)
from ebb.decide.policy import EbbPolicy
from ebb.decide.profiles import PROFILES
from ebb.decide.semantics import calm_weight, recalibrate_weight


def policy(**kw: object) -> EbbPolicy:
    return EbbPolicy(profile=PROFILES["balanced"], slo_ttft_ms=2000.0, slo_e2e_ms=20000.0, min_replicas=2,
                     max_replicas=40, cold_start_s=5.0, **kw)  # type: ignore[arg-type]


counts = st.lists(st.integers(-5, 60), min_size=1, max_size=30)


@settings(max_examples=200, deadline=None)
@given(counts, st.integers(0, 50), st.lists(st.booleans(), min_size=30, max_size=30))
def test_bounds_and_the_scale_up_test_of_many_ticks_are_those_of_each(n: list[int], spec: int,
                                                                      urgent: list[bool]) -> None:
    pol = policy()
    many = bounded_many(pol, np.array(n, dtype=np.float64))
    assert [float(bounded(pol, x)) for x in n] == many.tolist()
    up = grows_many(pol, many, spec, np.array(urgent[:len(n)]))
    assert [grows(pol, bounded(pol, x), spec, u) for x, u in zip(n, urgent, strict=False)] == up.tolist()


@settings(max_examples=200, deadline=None)
@given(counts, counts, counts)
def test_the_hold_floor_of_many_ticks_is_that_of_each(comeback: list[int], learned: list[int], sized: list[int]) -> None:
    m = min(len(comeback), len(learned), len(sized))
    pol = policy()
    c, le, s = (np.array(x[:m], dtype=np.float64) for x in (comeback, learned, sized))
    assert [float(hold_floor(pol, a, b, d)) for a, b, d in zip(comeback[:m], learned[:m], sized[:m], strict=True)] \
        == hold_floors(pol, c, le, s).tolist()


@settings(max_examples=100, deadline=None)
@given(st.floats(0.0, 5.0), st.integers(0, 40), st.floats(0.0, 1.5))
def test_a_run_of_calm_weights_is_recalibrate_weight_step_by_step(weight: float, steps: int, ratio: float) -> None:
    pol = policy()
    cls = pol.workload_class
    w = weight
    for _ in range(steps):
        w = recalibrate_weight(cls, w, ratio * 2000.0 if ratio <= 1.0 else 2000.0, 2000.0)
    assert calm_weight(cls, weight, steps) == w


def test_a_calm_window_is_never_late_and_a_completion_late_by_waiting_ends_the_calm() -> None:
    pol = policy()
    lat = pol.state.latency
    for k in range(20):
        lat.add(np.array([float(k)]), np.array([300.0]), np.array([4000.0]), np.array([1.0]), np.array([10.0]))
    assert calm_window(pol) and not late(pol)
    for k in range(20, 30):
        lat.add(np.array([float(k)]), np.array([4000.0]), np.array([9000.0]), np.array([1.0]), np.array([3900.0]))
    assert late(pol) and not calm_window(pol)


def _vetoed_at(pol: EbbPolicy, t: float, spec: int, burst: bool) -> tuple[str, ...] | None:
    v = down_vetoes(pol, t, spec, spec, 100.0, burst, 0.5)
    return None if v is None else veto_key(v)


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 40), st.sampled_from(["warm", "cool", "burst", "both"]))
def test_a_repeated_veto_over_a_block_is_the_last_veto_again_at_each_tick(seed: int, n: int, last: str) -> None:
    rng = np.random.default_rng(seed)
    pol = policy()
    s = pol.state
    s.first_t, s.last_signal_t = 0.0, 1e9
    s.last_up = float(rng.uniform(0.0, 60.0))
    keys = {"warm": ("warming up",), "cool": ("cooldown",), "burst": ("burst active (L1)",),
            "both": ("warming up", "cooldown")}
    s.last_veto = keys[last]
    ticks = np.sort(rng.uniform(1.0, 100.0, size=n))
    burst = rng.random(n) < 0.3
    ok = repeats_last_veto(pol, ticks, burst, 10, np.full(n, 100.0))
    for k, t in enumerate(ticks.tolist()):
        if ok[k]:
            assert _vetoed_at(pol, t, 10, bool(burst[k])) in (s.last_veto, None)


def test_no_last_veto_means_no_repeated_veto() -> None:
    pol = policy()
    pol.state.first_t = 0.0
    assert not repeats_last_veto(pol, np.array([1.0, 2.0]), np.array([False, True]), 5, np.zeros(2)).any()


def test_a_scale_down_within_the_down_interval_is_a_plain_hold_not_a_veto() -> None:
    pol = policy()
    s = pol.state
    s.first_t, s.last_signal_t, s.last_down = 0.0, 500.0, 499.0
    assert _vetoed_at(pol, 500.0, 10, False) is None
    s.last_signal_t = 500.0 + pol.horizon_s
    assert _vetoed_at(pol, 500.0 + pol.horizon_s, 10, False) == ()


def test_with_an_asleep_tier_scale_downs_whose_victims_sleep_are_paced_by_the_wake() -> None:
    # A victim the cold floor counts on sleeps and is back in a wake: pacing such scale-downs by the
    # cold start's horizon (61 s) kept the whole cold floor running for a minute after each wake
    # (Azure code: 0.61x static's running GPU-h; paced by the wake's, 0.58x at 0.074 % violations).
    # Above the cold floor victims are removed, and the cold start paces them (Mooncake: pacing
    # those by the wake too held 13.3 GPU-h against 12.2 without a tier).
    cold, tiered = policy(), policy(wake_s=2.0, sleep_max=4)
    prof = PROFILES["balanced"]
    assert tiered.state.wake_bound is not None
    tiered.state.cold_floor = 8
    for spec in (3, 8, 9, None):
        assert cooldown_s(cold, spec) == prof.cooldown_horizons * cold.state.bound.horizon_s
    for spec in (3, 8):
        assert cooldown_s(tiered, spec) == prof.cooldown_horizons * tiered.state.wake_bound.horizon_s
        assert down_interval_s(tiered, spec) == prof.down_interval_horizons * tiered.state.wake_bound.horizon_s
    assert cooldown_s(tiered, 9) == prof.cooldown_horizons * tiered.state.bound.horizon_s > cooldown_s(tiered, 8)
