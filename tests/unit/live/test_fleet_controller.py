"""The fleet controller with in-memory fakes (ebb.testing): one L3 step across N single-workload
controllers — the cluster budget in L2 rank order, quota reclaimed first, scale-ups never budgeted,
writes batched, one workload's failure contained."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from ebb.actuate.batching import WriteBatcher
from ebb.config.fleet import FleetWorkload, NamespaceQuota
from ebb.config.workloads import default_workload_classes
from ebb.errors import TransientError
from ebb.ledger.base import MalformedRow
from ebb.ledger.memory import MemoryLedger
from ebb.live.controller import Controller, ControllerSettings, Proposal
from ebb.live.fleet_controller import (
    FleetController,
    FleetMember,
    FleetOutcome,
    FleetSettings,
    quota_of,
)
from ebb.model.decisions import CycleRecord, DecisionRecord
from ebb.model.ids import DecisionId, RunId
from ebb.model.live import LiveSignals
from ebb.model.observation import FineSignals, ScaleRequest
from ebb.telemetry.tracing import CycleTracer
from ebb.testing.fakes import FakeActuator, FakeSignalSource
from ebb.testing.policies import FixedPolicy
from ebb.testing.tracing import in_memory_provider

CLASSES = {c.name: c for c in default_workload_classes()}
ORDER, RECS, TRAIN = "order-fulfilment", "realtime-recommendation", "offline-training"


class Clock:
    def __init__(self, t: float = 1_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


class FakeTime:
    """The batcher's monotonic clock: sleeping advances it."""

    def __init__(self) -> None:
        self.t = 50.0

    def clock(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += s


def fresh(clock: Clock) -> FakeSignalSource:
    def produce(since_s: float) -> LiveSignals:
        t = clock.t - 0.1 * np.arange(10)[::-1]
        t = t[t > since_s]
        z = np.zeros(len(t))
        return LiveSignals(FineSignals(t_s=t, prefill_replicas=z + 0.2, slot_replicas=z + 0.2, queued=z),
                           total_qps=1.0, queued=0.0, newest_sample_s=clock.t)
    return FakeSignalSource(produce)


class Fleet:
    """N fake workloads (FixedPolicy wanting ``want`` replicas each) behind one fleet controller."""

    def __init__(self, specs: Sequence[tuple[str, str, str, int, int]], *, budget: int = 1, mode: str = "act",
                 quotas: Sequence[NamespaceQuota] = (), zones: dict[str, tuple[str, ...]] | None = None,
                 actuators: dict[str, Any] | None = None, tracer: CycleTracer | None = None,
                 elector: Any = None, ledger: MemoryLedger | None = None) -> None:
        self.clock = Clock()
        self.time = FakeTime()
        self.ledger = ledger or MemoryLedger()
        self.batcher = WriteBatcher(3, 0.1, clock=self.time.clock, sleep=self.time.sleep)
        self.acts: dict[str, Any] = {}
        self.policies: dict[str, FixedPolicy] = {}
        members = []
        for ns, dep, cls, have, want in specs:
            target = f"{ns}/{dep}"
            act = (actuators or {}).get(target) or FakeActuator(have, target=target, clock=self.clock)
            self.acts[target] = act
            pol = FixedPolicy(want, spec=f"fixed-{dep}")
            self.policies[target] = pol
            w = FleetWorkload(namespace=ns, deployment=dep, workload_class=CLASSES[cls], max_replicas=16,
                              zones=(zones or {}).get(target, ()))
            ctl = Controller(pol, fresh(self.clock), self.batcher.wrap(act, target), self.ledger,
                             ControllerSettings(run_id=f"fleet-{ns}-{dep}", target=target, mode=mode,  # type: ignore[arg-type]
                                                max_replicas=16, react_interval_s=0.0),
                             clock=self.clock, tracer=tracer, elector=elector)
            members.append(FleetMember(ctl, w, w.ttft_slo_ms(2000.0)))
        self.fleet = FleetController(members, self.ledger, FleetSettings(run_id="fleet", disruption_budget=budget),
                                     quotas=quotas, batcher=self.batcher, elector=elector, clock=self.clock)

    def cycle(self) -> FleetOutcome:
        self.clock.t += 1.0
        return self.fleet.cycle()

    def replicas(self) -> dict[str, int]:
        return {t: a.state().spec_replicas for t, a in self.acts.items()}

    def decisions(self, target: str) -> list[DecisionRecord]:
        return self.ledger.decisions(target=target)


def test_a_budget_of_one_removes_one_replica_per_cycle_across_the_fleet_in_l2_rank_order() -> None:
    f = Fleet([("shop", "checkout", ORDER, 3, 1), ("shop", "recs", RECS, 3, 1), ("lab", "train", TRAIN, 3, 1)])
    history = []
    for _ in range(6):
        out = f.cycle()
        assert out.removed == 1
        history.append(dict(f.replicas()))
    # lowest weight first: offline training (0.10), then recommendation (0.25), then order fulfilment (0.65)
    assert [h["lab/train"] for h in history] == [2, 1, 1, 1, 1, 1]
    assert [h["shop/recs"] for h in history] == [3, 3, 2, 1, 1, 1]
    assert [h["shop/checkout"] for h in history] == [3, 3, 3, 3, 2, 1]
    assert f.cycle().plan is None, "nothing left to remove: no plan"
    first = f.decisions("shop/checkout")[0]
    assert first.action == "veto" and any(v.startswith("L3: cluster budget: 0 of 2") for v in first.vetoes)
    granted = f.decisions("lab/train")[0]
    assert granted.action == "scale_down" and granted.to_replicas == 2 and len(granted.victims) == 1
    assert any(r.startswith("L3: cluster budget: 1 of 2") for r in granted.reasons)
    assert granted.plan["l3_granted"] == 1


def test_the_fleet_cycle_is_recorded_with_its_grants_and_batches() -> None:
    f = Fleet([("shop", "checkout", ORDER, 3, 1), ("lab", "train", TRAIN, 3, 1)])
    out = f.cycle()
    assert out.n == 1
    (rec,) = f.ledger.cycles(RunId("fleet"))
    snap = rec.snapshot
    assert rec.cycle_id == "fleet-c1" and rec.policy == "fleet-l3" and snap["budget"] == 1
    assert [(g["workload"], g["granted"]) for g in snap["grants"]] == [("lab/train", 1), ("shop/checkout", 0)]  # type: ignore[index,union-attr]
    (batch,) = snap["batches"]  # type: ignore[misc]
    assert [w["target"] for w in batch["writes"]] == ["lab/train"]  # type: ignore[index]
    assert {d["target"] for d in snap["decisions"]} == {"lab/train", "shop/checkout"}  # type: ignore[index,union-attr]


def test_scale_ups_are_never_budgeted_and_go_first() -> None:
    f = Fleet([("a", "up1", ORDER, 2, 5), ("a", "down", TRAIN, 4, 2), ("b", "up2", RECS, 1, 3)], budget=0)
    out = f.cycle()
    assert f.replicas() == {"a/up1": 5, "a/down": 4, "b/up2": 3}
    assert [w.target for b in out.batches for w in b.writes] == ["a/up1", "b/up2"]
    assert f.decisions("a/down")[0].action == "veto"


def test_ten_workloads_writes_are_batched_three_per_100_ms() -> None:
    f = Fleet([("ns", f"w{i}", ORDER, 1, 2) for i in range(10)])
    t0 = f.time.t
    out = f.cycle()
    assert all(v == 2 for v in f.replicas().values())
    assert [len(b.writes) for b in out.batches] == [3, 3, 3, 1]
    starts = [w.started_s for b in out.batches for w in b.writes]
    assert all(sum(1 for s in starts if t <= s < t + 0.1) <= 3 for t in starts)
    assert f.time.t - t0 >= 0.3 - 1e-9
    (rec,) = f.ledger.cycles(RunId("fleet"))
    assert [b["batch"] for b in rec.snapshot["batches"]] == [0, 1, 2, 3]  # type: ignore[index,union-attr]


def test_borrowed_quota_is_reclaimed_first_and_a_namespaces_min_is_kept() -> None:
    # shop's 3 GPUs are all within its min; every lab pod borrows (min 0): lab goes first even though
    # shop's offline training ranks first by weight.
    quotas = [NamespaceQuota("shop", 3000, None), NamespaceQuota("lab", 0, 8000)]
    f = Fleet([("shop", "train", TRAIN, 3, 1), ("lab", "checkout", ORDER, 3, 1)], quotas=quotas)
    f.cycle()
    assert f.replicas() == {"shop/train": 3, "lab/checkout": 2}
    f.cycle()
    assert f.replicas() == {"shop/train": 3, "lab/checkout": 1}
    reasons = [r for d in f.decisions("lab/checkout") for r in d.reasons]
    assert any("reclaim" in r for r in reasons)
    f.cycle()
    assert f.replicas() == {"shop/train": 2, "lab/checkout": 1}, "then rank order again"


def test_victims_within_a_workload_are_its_borrowers_first() -> None:
    # min 2 GPUs: the two oldest pods hold it, the newest borrows — the planner names it, not the
    # policy's choice, and the ledger records it by name.
    f = Fleet([("shop", "w", ORDER, 3, 2)], quotas=[NamespaceQuota("shop", 2000, None)])
    f.cycle()
    (d,) = f.decisions("shop/w")
    assert d.victims == ("replica-2",) and any("reclaims borrowed quota: shop/w/replica-2" in r for r in d.reasons)


def test_quota_max_caps_scale_ups_of_the_namespace() -> None:
    f = Fleet([("shop", "a", ORDER, 2, 6), ("shop", "b", RECS, 2, 4)], quotas=[NamespaceQuota("shop", 0, 7000)])
    out = f.cycle()
    assert f.replicas() == {"shop/a": 5, "shop/b": 2}
    assert any("max_gpus 7" in n for n in out.notes)
    assert f.decisions("shop/b")[0].action == "veto"


def test_a_failing_workload_does_not_stop_the_others() -> None:
    class Broken(FakeActuator):
        def apply(self, decision_id: DecisionId, request: ScaleRequest) -> Any:
            raise TransientError("API server: 503 after 6 tries; retry later")

    class Blind(FakeActuator):
        def state(self) -> Any:
            raise TransientError("cannot list pods")

    clock_free = Clock()
    f = Fleet([("a", "broken", TRAIN, 3, 1), ("a", "blind", TRAIN, 3, 1), ("b", "ok", ORDER, 2, 4),
               ("b", "down", RECS, 3, 2)], budget=3,
              actuators={"a/broken": Broken(3, target="a/broken", clock=clock_free),
                         "a/blind": Blind(3, target="a/blind", clock=clock_free)})
    out = f.cycle()
    by = {m.target: o for m, o in zip(f.fleet.members, out.outcomes)}
    assert by["a/broken"].action == "error" and "503" in by["a/broken"].note
    assert by["a/blind"].action == "error"
    assert by["b/ok"].acted and f.acts["b/ok"].state().spec_replicas == 4
    assert by["b/down"].acted and f.acts["b/down"].state().spec_replicas == 2
    (failed,) = [w for b in out.batches for w in b.writes if not w.ok]
    assert failed.target == "a/broken" and "TransientError" in failed.error
    assert f.cycle().outcomes, "the next cycle runs"


def test_recommend_mode_records_every_decision_and_writes_nothing() -> None:
    f = Fleet([("a", "x", TRAIN, 3, 1), ("a", "y", ORDER, 1, 3)], mode="recommend")
    out = f.cycle()
    assert f.replicas() == {"a/x": 3, "a/y": 1} and out.batches == ()
    assert all(a.applied_ids == [] for a in f.acts.values())
    assert f.decisions("a/x")[0].plan["mode"] == "recommend" and f.decisions("a/y")[0].action == "scale_up"


def test_a_follower_writes_nothing() -> None:
    class Follower:
        def is_leader(self) -> bool:
            return False

        def fence(self) -> None:
            return None

    f = Fleet([("a", "x", TRAIN, 3, 1), ("a", "y", ORDER, 1, 3)], elector=Follower())
    out = f.cycle()
    assert {o.action for o in out.outcomes} == {"follower"} and out.n == 0
    assert f.ledger.cycles() == [] and f.replicas() == {"a/x": 3, "a/y": 1}


def test_replicas_outside_the_listed_zones_veto_the_workloads_scale_down() -> None:
    f = Fleet([("a", "x", TRAIN, 3, 1), ("a", "y", ORDER, 3, 1)], zones={"a/x": ("a", "b")})
    f.cycle()  # a/x's fake pods are in zones a, b and c
    assert f.replicas() == {"a/x": 3, "a/y": 2}
    assert any("zones: replicas in c" in v for v in f.decisions("a/x")[0].vetoes)


def test_an_l3_failure_vetoes_every_scale_down_and_lets_scale_ups_through(monkeypatch: pytest.MonkeyPatch) -> None:
    import ebb.live.fleet_controller as fc

    def boom(*a: Any, **k: Any) -> Any:
        raise ValueError("planner bug")
    monkeypatch.setattr(fc, "fleet_step", boom)
    f = Fleet([("a", "x", TRAIN, 3, 1), ("a", "y", ORDER, 1, 3)])
    f.cycle()
    assert f.replicas() == {"a/x": 3, "a/y": 3}
    assert any("cluster plan failed: planner bug" in v for v in f.decisions("a/x")[0].vetoes)


def test_each_workload_cycle_is_its_own_trace() -> None:
    provider, exporter = in_memory_provider()
    f = Fleet([("a", "x", TRAIN, 3, 1), ("a", "y", ORDER, 1, 3)], tracer=CycleTracer(provider))
    f.cycle()
    spans = exporter.get_finished_spans()
    roots = [s for s in spans if s.name == "ebb.cycle"]
    assert len(roots) == 2 and len({s.context.trace_id for s in roots}) == 2
    for root in roots:
        mine = [s for s in spans if s.context.trace_id == root.context.trace_id]
        assert {"ebb.decide", "ebb.ledger", "ebb.actuate"} <= {s.name for s in mine}
        assert all(s.parent is not None for s in mine if s is not root)


def test_quota_of_is_milli_gpus() -> None:
    q = quota_of(NamespaceQuota("shop", 4000, 12000))
    assert q.min_of("nvidia.com/gpu") == 4000 and q.max_of("nvidia.com/gpu") == 12000
    assert quota_of(NamespaceQuota("x", 0, None)).max_of("nvidia.com/gpu") is None


def test_a_second_cycle_continues_the_fleet_numbering_from_the_ledger() -> None:
    f = Fleet([("a", "x", TRAIN, 3, 1)])
    f.cycle()
    again = FleetController(f.fleet.members, f.ledger, FleetSettings(run_id="fleet"), batcher=f.batcher,
                            clock=f.clock)
    f.clock.t += 1
    assert again.cycle().n == 2
    assert {c.cycle_id for c in f.ledger.cycles(RunId("fleet"))} == {"fleet-c1", "fleet-c2"}
    assert f.decisions("a/x")[-1].decision_id == DecisionId("fleet-a-x-2")


class SkipsFleetC7(MemoryLedger):
    """A ledger that skipped a malformed row of the fleet's run, key ``fleet-c7`` (as SQLite and etcd report one)."""

    run: RunId | None = None

    def cycles(self, run_id: RunId | None = None, limit: int | None = None) -> list[CycleRecord]:
        self.run = run_id
        return super().cycles(run_id, limit)

    @property
    def skipped(self) -> tuple[MalformedRow, ...]:
        return (MalformedRow("cycle", "/ebb/cycles/fleet-c7", "malformed cycle"),) if self.run == "fleet" else ()


def test_the_fleet_numbering_continues_past_a_malformed_rows_cycle_number() -> None:
    f = Fleet([("a", "x", TRAIN, 3, 1)], ledger=SkipsFleetC7())
    assert f.cycle().n == 8, "fleet-c7 is never reused"
    assert f.decisions("a/x")[-1].decision_id == DecisionId("fleet-a-x-1"), "a member's numbering is its own"


def test_a_workload_above_its_ceiling_waits_for_the_budget_like_any_other() -> None:
    # 20 replicas, max 16: the policy's wish is clamped to 16; with the budget spent elsewhere the
    # veto holds (re-applying the ceiling must not turn it back into an unbudgeted scale-down).
    f = Fleet([("a", "big", ORDER, 20, 20), ("a", "x", TRAIN, 3, 1)])
    f.cycle()
    assert f.replicas() == {"a/big": 20, "a/x": 2}
    assert f.decisions("a/big")[0].action == "veto"


def test_a_cluster_step_may_only_narrow_a_proposal() -> None:
    clock = Clock()
    act = FakeActuator(4, clock=clock)
    ctl = Controller(FixedPolicy(3), fresh(clock), act, MemoryLedger(), ControllerSettings(run_id="r", mode="act"),
                     clock=clock)
    step = ctl.propose()
    assert isinstance(step, Proposal) and step.decision.to_replicas == 3
    wider = step.decision.retarget(1)
    out = ctl.commit(step, wider)
    assert out.action == "veto" and act.state().spec_replicas == 4 and "beyond the proposal" in out.note
    assert ctl.commit(step) is out, "a proposal is committed once"
    clock.t += 1
    step = ctl.propose()
    assert isinstance(step, Proposal)
    out = ctl.commit(step, step.decision)
    assert out.acted and act.state().spec_replicas == 3
