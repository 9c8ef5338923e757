"""The asleep tier: its flag, the pool of sleeping replicas, and the lifecycle that fills and drains it."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ebb.errors import ConfigError
from ebb.sim.lifecycle import DRAINING, READY, STOPPED, Lifecycles
from ebb.config.tiers import DEFAULT_RESTORE_S, DEFAULT_SAVE_S, DEFAULT_TTL_S, DEFAULT_WAKE_S, SleepTier, parse_tier
from ebb.sim.fleet import FleetLog, billed_sleep
from ebb.sim.sleepers import SleepPool

TIER = SleepTier(wake_s=2.0, max_replicas=2, ttl_s=100.0)


def test_the_flag_reads_every_key_and_defaults_the_rest() -> None:
    assert parse_tier("asleep") == SleepTier(DEFAULT_WAKE_S, 8, DEFAULT_TTL_S)
    assert parse_tier("asleep:wake_s=0.5,max=3,ttl_s=60") == SleepTier(0.5, 3, 60.0)
    assert parse_tier(parse_tier("asleep:max=4").describe()) == parse_tier("asleep:max=4")
    assert parse_tier("asleep:fail=0.05") == SleepTier(DEFAULT_WAKE_S, 8, DEFAULT_TTL_S, fail=0.05)
    assert parse_tier("asleep").fail == 0.0 and "fail" not in parse_tier("asleep").describe()
    assert parse_tier(parse_tier("asleep:fail=0.1,max=3").describe()) == SleepTier(DEFAULT_WAKE_S, 3, DEFAULT_TTL_S, 0.1)
    assert parse_tier("asleep:reserve=2").reserve == 2.0 and parse_tier("asleep").reserve is None
    assert parse_tier(parse_tier("asleep:reserve=1.5,max=3").describe()) == parse_tier("asleep:max=3,reserve=1.5")


def test_a_snapshot_tier_restores_in_its_restore_time_and_bills_only_its_save() -> None:
    snap = parse_tier("snapshot")
    assert (snap.kind, snap.wake_s, snap.save_s, snap.ttl_s) == ("snapshot", DEFAULT_RESTORE_S, DEFAULT_SAVE_S, 86400.0)
    assert not snap.holds_gpu and parse_tier("asleep").holds_gpu
    assert parse_tier(parse_tier("snapshot:restore_s=5,save_s=3,max=2").describe()) == parse_tier(
        "snapshot:restore_s=5,save_s=3,max=2")
    def one(held_s: float) -> FleetLog:
        return FleetLog((), 0, 0, end_s=10_000.0, asleep=((0.0, held_s),))

    assert billed_sleep(one(600.0), snap)[0] == DEFAULT_SAVE_S and billed_sleep(one(4.0), snap)[0] == 4.0
    assert billed_sleep(one(600.0), parse_tier("asleep"))[0] == 600.0
    log = FleetLog((), 0, 0, end_s=1000.0, asleep=((100.0, 400.0), (900.0, 1200.0), (50.0, 55.0)))
    assert billed_sleep(log, None) == (405.0, 0.0)
    assert billed_sleep(log, parse_tier("asleep")) == (405.0, 0.0)
    assert billed_sleep(log, snap) == (25.0, 380.0)  # 10 + 10 + 5 saving; the rest released
    assert billed_sleep(log, snap, from_s=200.0) == (10.0, 290.0)  # 200 + 100 s put away after 200 s; one save


@pytest.mark.parametrize("text, needle", [
    ("frozen:restore_s=10", "unknown tier 'frozen'; known: asleep, snapshot"),
    ("snapshot:wake_s=2", "'wake_s=2' is not one of restore_s"),
    ("asleep:save_s=2", "'save_s=2' is not one of wake_s"),
    ("snapshot:restore_s=-1", "restore_s must be in"),
    ("snapshot:save_s=inf", "save_s must be in"),
    ("asleep:wake=2", "'wake=2' is not one of"),
    ("asleep:wake_s=fast", "is not a number"),
    ("asleep:max=2,max=3", "given twice"),
    ("asleep:wake_s=-1", "wake_s must be in"),
    ("asleep:wake_s=nan", "wake_s must be in"),
    ("asleep:max=0", "max must be in"),
    ("asleep:ttl_s=0", "ttl_s must be in"),
    ("asleep:fail=1.5", "fail must be in"),
    ("asleep:fail=-0.1", "fail must be in"),
    ("asleep:fail=nan", "fail must be in"),
    ("asleep:fail=often", "is not a number"),
    ("asleep:reserve=0.5", "reserve must be in"),
    ("asleep:reserve=nan", "reserve must be in"),
    ("asleep:reserve=1e9", "reserve must be in"),
    ("snapshot:reserve=2", "'reserve=2' is not one of restore_s"),
])
def test_a_bad_flag_is_one_line_naming_the_part_and_the_fix(text: str, needle: str) -> None:
    with pytest.raises(ConfigError, match=needle) as err:
        parse_tier(text)
    assert "\n" not in str(err.value)


def test_a_drained_replica_sleeps_while_there_is_room_and_the_rest_are_removed() -> None:
    pool = SleepPool(TIER)
    assert [pool.put(t) for t in (10.0, 11.0, 12.0)] == [True, True, False]
    assert pool.asleep(12.0) == 2


def test_a_wake_takes_the_latest_sleeper_and_returns_the_wake_time() -> None:
    pool = SleepPool(TIER)
    pool.put(10.0)
    pool.put(20.0)
    assert pool.wake(30.0) == 2.0 and pool.wakeups == 1
    assert pool.intervals == [(20.0, 30.0)]  # the one that slept last, whose TTL ends last


def test_a_sleeper_past_its_ttl_is_released_at_its_own_instant() -> None:
    pool = SleepPool(TIER)
    pool.put(10.0)
    assert pool.asleep(109.9) == 1 and pool.asleep(110.0) == 0
    assert pool.wake(150.0) is None
    assert pool.close(200.0) == ((10.0, 110.0),)


def test_release_frees_the_oldest_sleepers_past_what_is_wanted() -> None:
    pool = SleepPool(TIER)
    pool.put(10.0)
    pool.put(20.0)
    assert pool.release(30.0, keep=1) == 1
    assert pool.close(40.0) == ((10.0, 30.0), (20.0, 40.0))


def test_without_a_tier_nothing_ever_sleeps() -> None:
    pool = SleepPool(None)
    assert not pool.put(1.0) and pool.wake(2.0) is None and pool.close(3.0) == ()


def test_a_failed_wake_releases_its_sleeper_at_once_and_asks_for_a_cold_start() -> None:
    pool = SleepPool(replace(TIER, fail=1.0))
    pool.put(10.0)
    pool.put(20.0)
    assert pool.wake(30.0) is None  # failed: the caller cold-starts
    assert pool.wakeups == 1 and pool.failed_wakes == 1 and pool.asleep(30.0) == 1
    assert pool.intervals == [(20.0, 30.0)]  # the sleeper asked is released at the wake's instant


def _fails(fail: float, seed: int, wakes: int = 64) -> list[bool]:
    pool = SleepPool(replace(TIER, max_replicas=wakes, ttl_s=1e6, fail=fail), seed)
    for k in range(wakes):
        pool.put(float(k))
    return [pool.wake(100.0 + k) is None for k in range(wakes)]


def test_which_wakes_fail_is_decided_by_the_seed() -> None:
    assert _fails(0.5, seed=3) == _fails(0.5, seed=3)
    assert _fails(0.5, seed=3) != _fails(0.5, seed=4)
    assert 8 < sum(_fails(0.5, seed=3)) < 56  # about half of 64
    assert not any(_fails(0.0, seed=3)) and all(_fails(1.0, seed=3))


@settings(max_examples=200, deadline=None)
@given(ops=st.lists(st.tuples(st.sampled_from(["put", "wake", "release"]), st.floats(0.0, 30.0),
                              st.integers(0, 3)), max_size=40),
       fail=st.sampled_from([0.0, 0.3, 1.0]), seed=st.integers(0, 2**32))
def test_sleep_intervals_are_ordered_within_the_run_and_never_more_than_max_at_once(
        ops: list[tuple[str, float, int]], fail: float, seed: int) -> None:
    tier = replace(TIER, fail=fail)
    pool, t, woken, slept = SleepPool(tier, seed), 0.0, 0, 0
    for op, dt, keep in ops:
        t += dt
        if op == "put":
            slept += pool.put(t)
        elif op == "wake":
            before = pool.asleep(t)
            got = pool.wake(t)
            assert pool.asleep(t) == max(0, before - 1)  # a failed wake releases its sleeper too
            woken += got is not None
            assert got in (None, tier.wake_s)
        else:
            pool.release(t, keep)
        assert pool.asleep(t) <= TIER.max_replicas
        assert woken + pool.failed_wakes == pool.wakeups and pool.wakeups <= slept
    assert pool.failed_wakes == (0 if fail == 0 else pool.wakeups if fail == 1 else pool.failed_wakes)
    end = t + 1.0
    spans = pool.close(end)
    assert all(0.0 <= s <= e <= end and e - s <= TIER.ttl_s + 1e-9 for s, e in spans)
    edges = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans], key=lambda x: (x[0], x[1]))
    live = 0
    for _, d in edges:
        live += d
        assert live <= TIER.max_replicas


def test_the_lifecycle_sleeps_a_drained_replica_and_wakes_it_for_the_next_request() -> None:
    fleet = Lifecycles(TIER)
    rid = fleet.add(0.0, warm=True)
    fleet.move(rid, DRAINING, 10.0)
    fleet.move(rid, STOPPED, 12.0)  # its drain ended: asleep from 12 s
    new, delay = fleet.request(20.0, cold_s=60.0)
    assert delay == TIER.wake_s and new != rid
    fleet.move(new, READY, 22.0)
    cold, delay2 = fleet.request(30.0, cold_s=60.0)
    assert delay2 == 60.0  # nobody left asleep: a cold start
    log = fleet.fleet_log(scale_ups=2, scale_downs=1, end_s=100.0, decisions=[], noteworthy=[])
    assert log.asleep == ((12.0, 20.0),) and log.wakeups == 1 and log.asleep_seconds() == 8.0


def test_the_runs_end_stops_every_replica_without_putting_any_to_sleep() -> None:
    fleet = Lifecycles(TIER)
    rid = fleet.add(0.0, warm=True)
    fleet.move(rid, DRAINING, 5.0)
    fleet.stop_all(6.0)
    assert fleet.fleet_log(scale_ups=0, scale_downs=1, end_s=6.0, decisions=[], noteworthy=[]).asleep == ()


def test_a_failed_wake_is_a_cold_replica_and_is_not_put_back_to_sleep_when_cancelled() -> None:
    fleet = Lifecycles(replace(TIER, fail=1.0))
    rid = fleet.add(0.0, warm=True)
    fleet.move(rid, DRAINING, 1.0)
    fleet.move(rid, STOPPED, 2.0)
    new, delay = fleet.request(3.0, cold_s=60.0)
    assert delay == 60.0 and fleet.sleep.asleep(3.0) == 0
    fleet.move(new, STOPPED, 4.0)  # a cancelled cold start: removed, as without a tier
    log = fleet.fleet_log(scale_ups=1, scale_downs=1, end_s=10.0, decisions=[], noteworthy=[])
    assert log.asleep == ((2.0, 3.0),) and log.wakeups == 1 and log.failed_wakes == 1


@settings(max_examples=150, deadline=None)
@given(ops=st.lists(st.tuples(st.sampled_from(["drain", "request", "ready", "cancel"]), st.floats(0.0, 5.0)),
                    max_size=50), seed=st.integers(0, 2**32))
def test_with_every_wake_failing_every_scale_up_is_a_cold_start(ops: list[tuple[str, float]], seed: int) -> None:
    fleet, t = Lifecycles(replace(TIER, fail=1.0), seed), 0.0
    for _ in range(3):
        fleet.add(0.0, warm=True)
    for op, dt in ops:
        t += dt
        if op == "drain" and fleet.ready:
            rid = fleet.ready[0]
            fleet.move(rid, DRAINING, t)
            fleet.move(rid, STOPPED, t)
        elif op == "request":
            assert fleet.request(t, cold_s=60.0)[1] == 60.0
        elif op in ("ready", "cancel") and fleet.starting():
            fleet.move(fleet.starting()[0], READY if op == "ready" else STOPPED, t)
        assert fleet.sleep.asleep(t) <= TIER.max_replicas
    log = fleet.fleet_log(scale_ups=0, scale_downs=0, end_s=t + 1.0, decisions=[], noteworthy=[])
    assert log.failed_wakes == log.wakeups == len(log.asleep) - sum(e == t + 1.0 for _, e in log.asleep)


def test_a_woken_replica_cancelled_before_it_served_goes_back_to_sleep() -> None:
    fleet = Lifecycles(TIER)
    rid = fleet.add(0.0, warm=True)
    fleet.move(rid, DRAINING, 1.0)
    fleet.move(rid, STOPPED, 2.0)
    woken, _ = fleet.request(3.0, cold_s=60.0)
    fleet.move(woken, STOPPED, 4.0)  # a scale-down cancelled its wake
    assert fleet.sleep.asleep(4.0) == 1
