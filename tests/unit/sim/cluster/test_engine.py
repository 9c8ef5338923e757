"""The cluster engine: fluid serving, zone spread, throttled writes, quota-safe preemption, ledger batches."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from ebb.config.workloads import default_workload_classes
from ebb.sim.cluster.engine import ClusterInputs, PolicyStep, simulate
from ebb.sim.cluster.ledger_rows import batch_cycles
from ebb.sim.cluster.policies import build_cluster_policy


def inputs(arrivals: np.ndarray, *, capacity: float = 10.0, zone_gpus: int = 100, initial: int = 3,
           batch: np.ndarray | None = None, quota_min: tuple[int, int] = (0, 0), max_r: int = 30,
           may_borrow: bool = True) -> ClusterInputs:
    s, t = arrivals.shape
    b = np.zeros((0, t)) if batch is None else batch
    return ClusterInputs(
        names=tuple(f"svc-{i}" for i in range(s)), namespaces=np.zeros(s, dtype=np.int64),
        class_index=np.zeros(s, dtype=np.int64), priority=np.full(s, 1000, dtype=np.int64),
        arrivals=arrivals.astype(np.int32), capacity_rps=np.full(s, capacity), service_s=np.full(s, 0.1),
        slo_s=np.full(s, 1.0), min_replicas=np.ones(s, dtype=np.int64), max_replicas=np.full(s, max_r, dtype=np.int64),
        zone_mask=np.ones((s, 3), dtype=bool), gpus=np.ones(s, dtype=np.int64), may_borrow=np.full(s, may_borrow), cold_start_s=np.full(s, 20, dtype=np.int64),
        batch_names=tuple(f"job-{k}" for k in range(len(b))), batch_namespaces=np.ones(len(b), dtype=np.int64),
        batch_priority=np.zeros(len(b), dtype=np.int64), batch_class_index=np.full(len(b), 2, dtype=np.int64),
        batch_may_borrow=np.ones(len(b), dtype=bool),
        batch_demand=b, zones=("a", "b", "c"),
        zone_gpus=np.full(3, zone_gpus, dtype=np.int64), namespace_names=("shop", "lab"),
        quota_min=np.array(quota_min, dtype=np.int64), quota_max=np.array([-1, -1], dtype=np.int64),
        class_names=tuple(c.name for c in default_workload_classes()), initial=np.full(s, initial, dtype=np.int64))


def hold(step: PolicyStep) -> tuple[np.ndarray, None]:
    return step.spec, None


def test_load_under_capacity_is_served_without_violations_and_billed_per_replica() -> None:
    inp = inputs(np.full((1, 100), 20))
    run = simulate(inp, hold, write_limit_per_100ms=None)
    assert run.violations.sum() == 0 and run.requests.sum() == 2000
    assert run.gpu_s[0] == 300  # 3 replicas x 100 s


def test_load_above_capacity_queues_and_the_late_requests_are_violations() -> None:
    inp = inputs(np.full((1, 100), 45))  # 30 req/s of capacity
    run = simulate(inp, hold, write_limit_per_100ms=None)
    assert 0.5 < run.violations.sum() / run.requests.sum() < 1.0


def test_replicas_spread_over_zones_with_skew_at_most_one() -> None:
    def grow(step: PolicyStep) -> tuple[np.ndarray, None]:
        return np.full(len(step.ready), 2 + int(step.t_s) // 5), None
    inp = inputs(np.full((4, 60), 5), initial=1)
    run = simulate(inp, grow, write_limit_per_100ms=None)
    assert run.max_skew.max() <= 1 and run.skew_breach_s == 0


def test_writes_never_exceed_the_limit_per_100_ms_and_every_batch_is_recorded() -> None:
    def flap(step: PolicyStep) -> tuple[np.ndarray, None]:
        return np.full(len(step.ready), 4 if int(step.t_s) % 2 else 2), None
    inp = inputs(np.full((50, 30), 5), initial=2)
    run = simulate(inp, flap, write_limit_per_100ms=3)
    assert run.max_writes_per_100ms == 3
    assert all(len(b.services) <= 3 for b in run.batches)
    per_second = np.bincount([int(b.t_s) for b in run.batches])
    assert per_second.max() <= 10  # 10 batches of 3 per second at most
    cycles = batch_cycles("r1", "ebb", inp, run)
    assert len(cycles) == len(run.batches) and sum(len(c.decisions) for c in cycles) == run.writes


def test_preemption_takes_only_borrowed_batch_gpus_and_never_a_guaranteed_minimum() -> None:
    t = 120
    batch = np.full((1, t), 10.0)  # the lab wants 10 GPUs, 4 of them guaranteed
    def surge(step: PolicyStep) -> tuple[np.ndarray, None]:
        return np.array([30 if step.t_s > 10 else 2]), None
    inp = inputs(np.full((1, t), 5), zone_gpus=10, initial=2, batch=batch, quota_min=(0, 4))
    run = simulate(inp, surge, write_limit_per_100ms=None)
    assert run.preemptions > 0
    assert run.quota_breach_s == 0
    held = np.stack(run.series_batch_gpus).sum(axis=(1, 2))
    assert held[-1] >= 4  # the guaranteed minimum stayed with the lab
    assert run.pending_replica_s > 0  # the rest of the surge waited for capacity


def test_a_policy_that_holds_keeps_its_pending_replicas_asked_for() -> None:
    t = 60
    asked = []

    def once(step: PolicyStep) -> tuple[np.ndarray, None]:
        asked.append(int(step.pending[0]))
        return (np.array([8]) if step.t_s == 5 else step.spec), None
    inp = inputs(np.full((1, t), 5), zone_gpus=1, initial=2)  # 3 GPUs in all: most of the 8 must wait
    run = simulate(inp, once, write_limit_per_100ms=None)
    assert asked[-1] == 5 and run.pending_replica_s >= 5 * 50


def test_a_profile_knob_the_chosen_l1_does_not_read_is_refused_not_ignored() -> None:
    from ebb.errors import ConfigError
    inp = inputs(np.full((2, 10), 5))
    with pytest.raises(ConfigError, match="unknown parameter 'forecast'"):
        build_cluster_policy("ebb:l1=fleet,forecast=off", inp, default_workload_classes(), budget=2, write_limit=3)
    with pytest.raises(ConfigError, match="unknown parameter 'fast_path'"):
        build_cluster_policy("ebb:l1=exact,fast_path=off", inp, default_workload_classes(), budget=2, write_limit=3)
    pol = build_cluster_policy("ebb:l1=exact,forecast=off", inp, default_workload_classes(), budget=2, write_limit=3)
    assert pol.spec == "ebb:l1=exact,forecast=off" and pol.l1 == "exact"


def test_auto_runs_the_exact_l1_on_small_scenarios_and_fleetebb_past_the_documented_size() -> None:
    from ebb.sim.cluster.policies import EXACT_MAX_SERVICE_SECONDS
    small = inputs(np.full((2, 10), 5))
    assert build_cluster_policy("ebb", small, default_workload_classes(), budget=2, write_limit=3).l1 == "exact"
    seconds = EXACT_MAX_SERVICE_SECONDS // 100 + 1
    big = inputs(np.zeros((100, seconds), dtype=np.int32))
    assert build_cluster_policy("ebb", big, default_workload_classes(), budget=2, write_limit=3).l1 == "fleet"
    assert build_cluster_policy("hpa", small, default_workload_classes(), budget=2, write_limit=3).l1 is None


@pytest.mark.parametrize("l1", ["exact", "fleet"])
def test_both_l1s_shrink_an_idle_cluster_within_the_disruption_budget(l1: str) -> None:
    a = np.zeros((6, 900), dtype=np.int32)
    a[:, :60] = 40
    inp = inputs(a, initial=8, capacity=10.0)
    pol = build_cluster_policy(f"ebb:l1={l1}", inp, default_workload_classes(), budget=2, write_limit=3)
    removed = []

    def watch(step: PolicyStep) -> tuple[np.ndarray, np.ndarray | None]:
        wanted, order = pol(step)
        removed.append(int(np.maximum(step.spec - wanted, 0).sum()))
        return wanted, order
    run = simulate(inp, watch, write_limit_per_100ms=3)
    assert max(removed) <= 2
    assert run.gpu_s.sum() < 6 * 8 * 900 * 0.8
    assert run.violations.sum() == 0


def test_a_service_whose_qos_class_may_not_borrow_grows_only_within_its_namespace_min() -> None:
    def grow(step: PolicyStep) -> tuple[np.ndarray, None]:
        return np.array([12]), None
    inp = inputs(np.full((1, 60), 5), initial=2, quota_min=(6, 0), may_borrow=False)
    run = simulate(inp, grow, write_limit_per_100ms=None, sample_s=1)
    assert int(np.stack(run.series_gpus).sum(axis=(1, 2)).max()) == 6  # a Burstable pod stays within min
    assert run.pending_replica_s > 0


def test_a_warm_up_is_served_but_the_accounting_starts_at_its_end() -> None:
    def blip(step: PolicyStep) -> tuple[np.ndarray, None]:  # asks for a 4th replica, cancels it at 10 s
        return np.full(len(step.ready), 4 if step.t_s < 10 else 3), None
    # 30 s at 45 req/s on 30 req/s of capacity (a queue, drained by 45 s), a lull, then 40 s at 20 req/s.
    arrivals = np.concatenate([np.full((1, 30), 45), np.zeros((1, 30)), np.full((1, 40), 20)], axis=1)
    whole = simulate(inputs(arrivals), blip, write_limit_per_100ms=None)
    warm = simulate(dataclasses.replace(inputs(arrivals), warmup_s=60), blip, write_limit_per_100ms=None)
    assert whole.violations.sum() > 0 and warm.violations.sum() == 0  # the overload was all in the warm-up
    assert warm.requests.sum() == arrivals[:, 60:].sum() == 800
    assert warm.gpu_s[0] == 3 * 40 < whole.gpu_s[0]  # 3 replicas over the scored 40 s
    assert whole.writes == 2 and warm.writes == 0  # both writes were in the warm-up
    assert len(warm.batches) == len(whole.batches) == 2  # the ledger's batches keep the whole run
    assert warm.series_t_s == whole.series_t_s
