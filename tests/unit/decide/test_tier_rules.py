"""The asleep tier's rules: each fleet twin equals its one-workload rule, the one-workload rules are
EbbPolicy's, and FleetEbb applies them per workload (a workload without a tier decides as before)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from ebb.decide.fleet_policy import FleetEbb, FleetTargets
from ebb.decide.fleet_rank import FleetClasses
from ebb.decide.policy import EbbPolicy
from ebb.decide.profiles import EbbProfile
from ebb.decide.tier_rules import (NO_FLOOR, asleep_kept, asleep_kept_many, awoken, awoken_many, reserve_awake,
                                   reserve_awake_many, tier_floor, tier_floors)

counts = st.integers(0, 60)
SLO_MS = 800.0


def column(draw: st.DrawFn, n: int, lo: int, hi: int) -> np.ndarray:
    return np.array(draw(st.lists(st.integers(lo, hi), min_size=n, max_size=n)), dtype=np.int64)


@st.composite
def floors(draw: st.DrawFn) -> dict[str, np.ndarray]:
    n = draw(st.integers(1, 30))
    lo = column(draw, n, 0, 5)
    return {"floor": column(draw, n, 0, 60), "wake_at": column(draw, n, 0, 60), "sized": column(draw, n, 0, 60),
            "reachable": column(draw, n, 0, 80), "sleep_max": column(draw, n, 1, 30), "min_replicas": lo,
            "max_replicas": lo + column(draw, n, 0, 60), "on": np.array(draw(st.lists(
                st.booleans(), min_size=n, max_size=n)), dtype=bool)}


@settings(max_examples=300, deadline=None)
@given(floors())
def test_the_fleet_tier_floor_is_the_scalar_rule_per_workload(c: dict[str, np.ndarray]) -> None:
    got = tier_floors(**c)
    for i in range(len(got)):
        want = tier_floor(*(int(c[k][i]) for k in ("floor", "wake_at", "sized", "reachable", "sleep_max",
                                                   "min_replicas", "max_replicas"))) if c["on"][i] else int(c["floor"][i])
        assert got[i] == want
        assert got[i] <= c["floor"][i]


@st.composite
def wakes(draw: st.DrawFn) -> dict[str, np.ndarray]:
    n = draw(st.integers(1, 30))
    return {"want": column(draw, n, 0, 60), "spec": column(draw, n, 0, 60), "asleep": column(draw, n, 0, 20),
            "cold_floor": column(draw, n, NO_FLOOR, 80), "max_replicas": column(draw, n, 1, 100)}


@settings(max_examples=300, deadline=None)
@given(wakes())
def test_the_fleet_wake_count_and_sleepers_kept_are_the_scalar_rules_per_workload(c: dict[str, np.ndarray]) -> None:
    got, kept = awoken_many(**c), asleep_kept_many(c["cold_floor"], c["spec"])
    for i in range(len(got)):
        cold = None if c["cold_floor"][i] < 0 else int(c["cold_floor"][i])
        assert got[i] == awoken(int(c["want"][i]), int(c["spec"][i]), int(c["asleep"][i]), cold,
                                int(c["max_replicas"][i]))
        want_kept = asleep_kept(cold, int(c["spec"][i]))
        assert kept[i] == (NO_FLOOR if want_kept is None else want_kept)


@settings(max_examples=300, deadline=None)
@given(wakes(), st.data())
def test_with_a_reserve_the_fleet_twins_are_the_scalar_rules_and_every_sleeper_wakes(
        c: dict[str, np.ndarray], data: st.DataObject) -> None:
    n = len(c["want"])
    res = np.array(data.draw(st.lists(st.booleans(), min_size=n, max_size=n)), dtype=bool)
    sleep_max = column(data.draw, n, 1, 30)
    got = awoken_many(**c, reserve=res)
    kept = asleep_kept_many(c["cold_floor"], c["spec"], np.where(res, sleep_max, NO_FLOOR))
    for i in range(n):
        cold = None if c["cold_floor"][i] < 0 else int(c["cold_floor"][i])
        args = (int(c["want"][i]), int(c["spec"][i]), int(c["asleep"][i]), cold, int(c["max_replicas"][i]))
        assert got[i] == awoken(*args, reserve=bool(res[i]))
        want_kept = asleep_kept(cold, int(c["spec"][i]), int(sleep_max[i]) if res[i] else None)
        assert kept[i] == (NO_FLOOR if want_kept is None else want_kept)
        if res[i] and c["asleep"][i]:  # a reserve wakes every sleeper (up to the max), whatever the cold floor
            assert got[i] == min(int(c["max_replicas"][i]), max(int(c["want"][i]), int(c["spec"][i] + c["asleep"][i])))
            assert kept[i] == sleep_max[i]


@settings(max_examples=300, deadline=None)
@given(sized=st.lists(counts, min_size=1, max_size=30), data=st.data())
def test_the_fleet_reserve_keeps_running_what_the_scalar_rule_keeps(sized: list[int], data: st.DataObject) -> None:
    n = len(sized)
    h = np.array(data.draw(st.lists(st.none() | st.floats(1.0, 100.0), min_size=n, max_size=n)), dtype=float)
    mx = column(data.draw, n, 1, 100)
    got = reserve_awake_many(np.array(sized, dtype=np.int64), h, mx)
    for i in range(n):
        want = 0 if np.isnan(h[i]) else reserve_awake(sized[i], float(h[i]), int(mx[i]))
        assert got[i] == want
        if not np.isnan(h[i]):
            assert min(int(mx[i]), sized[i]) <= got[i] <= int(mx[i])


@settings(max_examples=100, deadline=None)
@given(cold=st.none() | counts, running=counts)
def test_ebb_policy_keeps_the_sleepers_the_scalar_rule_keeps(cold: int | None, running: int) -> None:
    pol = EbbPolicy(EbbProfile(), slo_ttft_ms=SLO_MS, slo_e2e_ms=60_000.0, max_replicas=50, wake_s=2.0, sleep_max=8)
    pol.state.cold_floor = cold
    assert pol.asleep_wanted(running) == asleep_kept(cold, running)
    got = asleep_kept_many(np.array([NO_FLOOR if cold is None else cold]), np.array([running]))[0]
    assert got == (NO_FLOOR if cold is None else pol.asleep_wanted(running))


# -- FleetEbb with tiers ---------------------------------------------------------------------------------
def fleet(n: int, wake_s: np.ndarray | float | None, sleep_max: np.ndarray | int = 4,
          reserve: np.ndarray | float | None = None) -> FleetEbb:
    cols = FleetClasses.guarding(base_weight=0.65, alpha=1.2, veto_margin=0.8, slo_ms=np.full(n, SLO_MS),
                                 min_replicas=1)
    return FleetEbb(n, slo_ttft_ms=np.full(n, SLO_MS), cold_start_s=np.full(n, 28.0),
                    min_replicas=np.ones(n, dtype=np.int64), max_replicas=np.full(n, 40, dtype=np.int64),
                    capacity_rps=np.full(n, 10.0), classes=cols, profile=EbbProfile(warmup_horizons=2.0),
                    wake_s=wake_s, sleep_max=sleep_max, reserve=reserve)


def arrivals(t: int, n: int) -> np.ndarray:
    """20 req/s, and 60 req/s for 4 s every 90 s: rises a cold start's horizon sees, a wake's hardly."""
    return np.full(n, 60.0 if t % 90 < 4 else 20.0)


def run(l1: FleetEbb, seconds: int = 1200) -> list[tuple[FleetTargets, np.ndarray, np.ndarray]]:
    """Closed loop: each workload's fleet is what it asked for, ready at once; the sleepers are those
    the last decision wanted kept (up to what was released, as an engine keeps them)."""
    n = l1.n
    spec, asleep, out = np.full(n, 8, dtype=np.int64), np.zeros(n, dtype=np.int64), []
    for t in range(seconds):
        l1.observe(float(t), arrivals=arrivals(t, n), queue=np.zeros(n), ready=spec,
                   starting=np.zeros(n, dtype=np.int64), ttft_ms=np.full(n, 100.0))
        got = l1.decide(float(t), asleep=asleep)
        out.append((got, spec.copy(), asleep.copy()))
        woken = np.minimum(asleep, np.maximum(got.desired - spec, 0))
        removed = np.maximum(spec - got.desired, 0)
        asleep = np.minimum(np.where(got.asleep_wanted < 0, asleep - woken + removed,
                                     np.minimum(asleep - woken + removed, got.asleep_wanted)), l1.sleep_max)
        spec = got.desired.copy()
    return out


def test_a_workload_without_a_tier_decides_as_a_fleet_without_tiers() -> None:
    mixed = run(fleet(2, np.array([np.nan, 2.0])))
    plain = run(fleet(2, None))
    assert all(np.array_equal(m.desired[:1], p.desired[:1]) and m.asleep_wanted[0] == NO_FLOOR and
               p.asleep_wanted[0] == NO_FLOOR for (m, _, _), (p, _, _) in zip(mixed, plain))
    assert any(m.desired[1] != p.desired[1] for (m, _, _), (p, _, _) in zip(mixed, plain)), "the tier changes workload 1"


def test_a_tier_lets_part_of_the_cold_floor_sleep_and_a_scale_up_wakes_what_it_counted_on() -> None:
    tiered, plain = run(fleet(1, 2.0, sleep_max=4)), run(fleet(1, None))
    running = [g.desired[0] for g, _, _ in tiered]
    assert sum(running) < sum(g.desired[0] for g, _, _ in plain), "fewer replicas run with a tier"
    slept = woke = 0
    for (prev, _, _), (got, spec, asleep) in zip(tiered, tiered[1:]):
        kept = int(prev.asleep_wanted[0])
        assert 0 <= int(asleep[0]) <= 4
        if kept > 0:
            slept += 1
            cold = int(prev.desired[0]) + kept  # the cold floor the last decision counted on
            if got.desired[0] > spec[0] and asleep[0]:  # a scale-up with sleepers at hand wakes them all
                woke += 1
                assert got.desired[0] >= min(spec[0] + asleep[0], cold)
    assert slept and woke


@settings(max_examples=15, deadline=None)
@given(n=st.integers(2, 4), data=st.data())
def test_fleet_ebb_decides_each_workload_as_a_fleet_of_that_workload_alone(n: int, data: st.DataObject) -> None:
    """Per-workload tiers, sleepers and loads in one FleetEbb: each workload's answers are those a
    FleetEbb of it alone gives (no rule reads another workload's row)."""
    wake = np.array(data.draw(st.lists(st.none() | st.floats(0.3, 6.0), min_size=n, max_size=n)), dtype=float)
    sleep_max = np.array(data.draw(st.lists(st.integers(1, 6), min_size=n, max_size=n)), dtype=np.int64)
    base = np.array(data.draw(st.lists(st.floats(2.0, 40.0), min_size=n, max_size=n)))
    seed = data.draw(st.integers(0, 2**32))
    rng = np.random.default_rng(seed)
    t_n = 400
    load = rng.poisson(base[None, :] * np.where(rng.random((t_n, n)) < 0.05, 3.0, 1.0)).astype(float)
    asleep = rng.integers(0, sleep_max + 1, size=(t_n, n))

    def answers(cols: list[int]) -> list[tuple[np.ndarray, np.ndarray]]:
        k = len(cols)
        l1 = fleet(k, wake[cols], sleep_max=sleep_max[cols])
        spec, out = np.full(k, 8, dtype=np.int64), []
        for t in range(t_n):
            l1.observe(float(t), arrivals=load[t, cols], queue=np.zeros(k), ready=spec,
                       starting=np.zeros(k, dtype=np.int64), ttft_ms=np.full(k, 100.0))
            got = l1.decide(float(t), asleep=asleep[t, cols])
            out.append((got.desired.copy(), got.asleep_wanted.copy()))
            spec = np.maximum(got.desired, 1)
        return out

    together = answers(list(range(n)))
    for i in range(n):
        alone = answers([i])
        assert all(d[i] == a[0] and w[i] == b[0] for (d, w), (a, b) in zip(together, alone))
    assert all((w[np.isnan(wake)] == NO_FLOOR).all() for _, w in together)


def test_ebb_policy_with_a_reserve_keeps_every_sleeper_to_the_max() -> None:
    pol = EbbPolicy(EbbProfile(), slo_ttft_ms=SLO_MS, slo_e2e_ms=60_000.0, max_replicas=50, wake_s=2.0, sleep_max=8,
                    reserve=2.0)
    for cold in (None, 3, 40):
        pol.state.cold_floor = cold
        assert pol.asleep_wanted(5) == 8


def test_a_reserve_keeps_sleepers_the_cold_floor_releases_and_more_replicas_running() -> None:
    tiered = run(fleet(1, 2.0, sleep_max=4))
    # Headroom 1: the running fleet as without a reserve at most, and every sleeper kept to the max.
    kept = run(fleet(1, 2.0, sleep_max=4, reserve=1.0))
    assert all(g.asleep_wanted[0] == 4 for g, _, _ in kept)
    assert sum(int(a[0]) for _, _, a in kept) > sum(int(a[0]) for _, _, a in tiered)
    # Headroom 4 (4 x a need of 2 replicas): 8 keep running, more than the tier alone runs.
    wide = run(fleet(1, 2.0, sleep_max=4, reserve=4.0))
    assert sum(g.desired[0] for g, _, _ in wide) > sum(g.desired[0] for g, _, _ in tiered)


def test_a_reserve_needs_a_tier_and_a_headroom_of_at_least_one() -> None:
    import pytest
    with pytest.raises(ValueError, match="reserve"):
        fleet(1, None, reserve=2.0)
    with pytest.raises(ValueError, match="reserve"):
        fleet(1, 2.0, reserve=0.5)
    with pytest.raises(ValueError, match="reserve"):
        EbbPolicy(EbbProfile(), slo_ttft_ms=SLO_MS, slo_e2e_ms=60_000.0, reserve=2.0)
