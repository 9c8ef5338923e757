"""The fleet controller with a tiered workload: its writes stay batched, its victims sleep within the L3
budget, its policy sees its sleepers and the sleepers it stops counting on are released; a workload
without a tier beside it behaves as before."""

from __future__ import annotations

import pytest

from ebb.actuate.base import ReportsDrains, SleepingActuator
from ebb.actuate.batching import BatchedActuator, BatchedSleepingActuator, WriteBatcher
from ebb.config.fleet import FleetWorkload, parse_fleet
from ebb.config.tiers import SleepTier
from ebb.errors import ConfigError
from ebb.ledger.memory import MemoryLedger
from ebb.live.controller import Controller, ControllerSettings
from ebb.live.fleet_controller import FleetController, FleetMember, FleetSettings
from ebb.testing.fakes import FakeActuator

from tests.unit.live.test_controller_tier import SleepingPolicy, SleepyActuator
from tests.unit.live.test_fleet_controller import CLASSES, ORDER, TRAIN, Clock, FakeTime, fresh

TIER = SleepTier(wake_s=2, max_replicas=4)


def test_the_batcher_passes_a_tier_through_and_leaves_a_plain_actuator_plain() -> None:
    batcher = WriteBatcher(3, 0.1)
    tiered = batcher.wrap(SleepyActuator(3, TIER), "shop/a")
    plain = batcher.wrap(FakeActuator(3), "shop/b")
    assert isinstance(tiered, BatchedSleepingActuator) and isinstance(tiered, SleepingActuator)
    assert tiered.tier == TIER and isinstance(tiered, ReportsDrains)
    assert type(plain) is BatchedActuator and not isinstance(plain, SleepingActuator)
    assert type(batcher.wrap(SleepyActuator(3, None), "shop/c")) is BatchedActuator


def test_a_tiered_workloads_victims_sleep_within_the_budget_and_the_rest_scale_as_before() -> None:
    clock, t = Clock(), FakeTime()
    ledger, batcher = MemoryLedger(), WriteBatcher(3, 0.1, clock=t.clock, sleep=t.sleep)
    sleepy = SleepyActuator(4, TIER, target="shop/chat", clock=clock)
    plain = FakeActuator(3, target="lab/train", clock=clock)
    policies = {"shop/chat": SleepingPolicy(lambda o: 1, cold=3), "lab/train": SleepingPolicy(lambda o: 1, cold=3)}
    members = []
    for (ns, dep, cls), act in ((("shop", "chat", ORDER), sleepy), (("lab", "train", TRAIN), plain)):
        w = FleetWorkload(namespace=ns, deployment=dep, workload_class=CLASSES[cls], max_replicas=8,
                          tier=TIER if act is sleepy else None)
        ctl = Controller(policies[w.target], fresh(clock), batcher.wrap(act, w.target), ledger,
                         ControllerSettings(run_id=f"fleet-{ns}-{dep}", target=w.target, mode="act", max_replicas=8,
                                            react_interval_s=0.0), clock=clock)
        members.append(FleetMember(ctl, w, 2000.0))
    fleet = FleetController(members, ledger, FleetSettings(run_id="fleet", disruption_budget=2), batcher=batcher,
                            clock=clock)
    removed = []
    for _ in range(4):
        clock.t += 1.0
        removed.append(fleet.cycle().removed)
    assert max(removed) <= 2  # the L3 budget counts the sleepers' removals like any other
    assert sleepy.state().spec_replicas == 1 and plain.state().spec_replicas == 1
    # the chat workload's three victims slept; its policy counts on 3 - 1 = 2 and the oldest was released
    assert len(sleepy.sleepers) == 2 and sleepy.kept[-1] == 2
    assert policies["shop/chat"].seen_asleep[-1] == 2 and set(policies["lab/train"].seen_asleep) == {0}


def test_a_fleet_file_gives_each_workload_its_own_tier_and_refuses_a_snapshot() -> None:
    text = ("workloads:\n"
            "  - {namespace: shop, deployment: chat, class: order-fulfilment, tier: 'asleep:wake_s=2,max=4'}\n"
            "  - {namespace: lab, deployment: train, class: offline-training}\n")
    cfg = parse_fleet(text, source="f.yaml")
    assert cfg.workloads[0].tier == TIER and cfg.workloads[1].tier is None
    with pytest.raises(ConfigError, match=r"f.yaml: workloads\[0\].tier: the live actuators sleep engines"):
        parse_fleet(text.replace("asleep:wake_s=2,max=4", "snapshot:restore_s=15"), source="f.yaml")
