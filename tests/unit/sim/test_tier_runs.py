"""Runs with an asleep tier (``--tier``): Ebb sleeps what it removes and counts on it, peers do not."""

from __future__ import annotations

from dataclasses import replace
from functools import cache

import numpy as np
import pytest

from ebb.config.policy_specs import parse_policies
from ebb.model.ids import TraceName
from ebb.model.trace import CountSeries
from ebb.score.results import Scorecard
from ebb.sim.compare import compare
from ebb.sim.policies import KNOWN_POLICIES
from ebb.sim.settings import ClusterSettings, SimSettings
from ebb.config.tiers import SleepTier

TIER = SleepTier(wake_s=2.0, max_replicas=8, ttl_s=1800.0)


def waves() -> CountSeries:
    """30 minutes of 4-minute waves: 40 req/s, then 4 req/s (lulls Ebb scales down in)."""
    t = np.arange(1800)
    rate = np.where((t // 240) % 2 == 0, 40.0, 4.0)
    return CountSeries(TraceName("waves"), np.random.default_rng(4).poisson(rate).astype(np.int64), bin_s=1.0)


@cache
def cards(fidelity: str, tier: bool, fail: float = 0.0, seed: int = 3) -> dict[str, Scorecard]:
    s = SimSettings(seed=seed, cluster=ClusterSettings(cold_start_s=20.0,
                                                       sleep=replace(TIER, fail=fail) if tier else None))
    c = compare(waves(), parse_policies("ebb,static,hpa", KNOWN_POLICIES), s, fidelity=fidelity, peak_replicas=8)
    return {r.scorecard.policy: r.scorecard for r in c.runs}


@pytest.mark.parametrize("fidelity", ["fluid", "request"])
def test_ebb_sleeps_what_it_removes_wakes_it_for_the_waves_and_runs_fewer_gpu_hours(fidelity: str) -> None:
    with_tier, without = cards(fidelity, True)["ebb"], cards(fidelity, False)["ebb"]
    assert with_tier.asleep_gpu_hours > 0 and with_tier.wakeups > 0
    assert with_tier.running_gpu_hours < without.running_gpu_hours
    assert with_tier.slo_violation_pct <= 0.1
    assert without.asleep_gpu_hours == 0 and without.wakeups == 0


@pytest.mark.parametrize("fidelity", ["fluid", "request"])
def test_peers_keep_their_upstream_behaviour_whatever_the_tier(fidelity: str) -> None:
    for name in ("static", "hpa"):
        a, b = cards(fidelity, True)[name], cards(fidelity, False)[name]
        assert repr(replace(a, wall_s=0.0)) == repr(replace(b, wall_s=0.0))  # NaN-aware


def test_a_run_without_a_tier_writes_no_tier_fields() -> None:
    card = cards("fluid", False)["ebb"].as_dict()
    assert "asleep_gpu_hours" not in card and "wakeups" not in card and "failed_wakes" not in card
    assert cards("fluid", True)["ebb"].as_dict()["failed_wakes"] == 0
    assert "asleep_gpu_hours" in cards("fluid", True)["ebb"].as_dict()


@pytest.mark.parametrize("fidelity", ["fluid", "request"])
def test_when_every_wake_fails_each_is_a_cold_start_and_the_waves_are_late(fidelity: str) -> None:
    ok, failing = cards(fidelity, True)["ebb"], cards(fidelity, True, fail=1.0)["ebb"]
    assert ok.failed_wakes == 0 and ok.wakeups > 0
    assert failing.failed_wakes == failing.wakeups > 0  # every wake asked fell back to a cold start
    # a 20 s cold start where a 2 s wake was counted on: the waves' rises queue
    assert failing.slo_violation_pct > ok.slo_violation_pct + 1.0


@pytest.mark.parametrize("fidelity", ["fluid", "request"])
def test_which_wakes_fail_is_the_runs_seed(fidelity: str) -> None:
    a = cards(fidelity, True, fail=0.3)["ebb"]
    b = cards.__wrapped__(fidelity, True, 0.3)["ebb"]  # a second run, not the cached one
    assert repr(replace(a, wall_s=0.0)) == repr(replace(b, wall_s=0.0))
    assert 0 < a.failed_wakes < a.wakeups
    for name in ("static", "hpa"):  # peers never sleep: no wake to fail
        assert repr(replace(cards(fidelity, True, fail=1.0)[name], wall_s=0.0)) == \
            repr(replace(cards(fidelity, False)[name], wall_s=0.0))


def test_a_snapshot_tier_bills_only_the_saves_and_reports_the_released_hours() -> None:
    snap = SleepTier(wake_s=10.0, max_replicas=8, ttl_s=86400.0, kind="snapshot", save_s=5.0)
    s = SimSettings(seed=3, cluster=ClusterSettings(cold_start_s=60.0, sleep=snap))
    c = compare(waves(), parse_policies("ebb,static", KNOWN_POLICIES), s, fidelity="fluid", peak_replicas=8)
    ebb = next(r.scorecard for r in c.runs if r.scorecard.policy == "ebb")
    assert ebb.released_replica_hours > 0 and ebb.wakeups > 0
    assert ebb.asleep_gpu_hours <= ebb.wakeups * 5.0 / 3600.0 + 8 * 5.0 / 3600.0  # a save per sleep at most
    assert ebb.as_dict()["released_replica_hours"] == ebb.released_replica_hours
    assert "released_replica_hours" not in cards("fluid", False)["ebb"].as_dict()
