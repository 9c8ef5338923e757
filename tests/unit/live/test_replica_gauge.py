"""The desired/current replica gauges follow each cycle's outcome (ebb.live.replica_gauge)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from ebb.decide.handoff import HandoffBoard
from ebb.live.replica_gauge import ReplicaGauge
from ebb.live.settings import CycleOutcome
from ebb.telemetry.metrics import EbbMetrics


def value(reg: CollectorRegistry, name: str, mode: str) -> float | None:
    return reg.get_sample_value(name, {"namespace": "serving", "deployment": "llm", "mode": mode})


def outcome(action: str, spec: int, to: int) -> CycleOutcome:
    return CycleOutcome(1, 0.0, action, spec, to, spec, 0.1)


def test_a_decision_sets_current_to_the_spec_and_desired_to_its_target() -> None:
    m = EbbMetrics()
    g = ReplicaGauge(m, "serving/llm", "recommend")
    g(outcome("scale_down", 6, 4))
    assert (value(m.registry, "ebb_current_replicas", "recommend"),
            value(m.registry, "ebb_desired_replicas", "recommend")) == (6.0, 4.0)


def test_an_error_keeps_the_last_numbers_and_a_follower_asks_for_no_change() -> None:
    m = EbbMetrics()
    g = ReplicaGauge(m, "serving/llm", "act")
    g(outcome("scale_up", 3, 5))
    g(CycleOutcome(0, 1.0, "error", 0, 0, 0, None))
    assert value(m.registry, "ebb_desired_replicas", "act") == 5.0
    g(outcome("follower", 5, 0))
    assert value(m.registry, "ebb_desired_replicas", "act") == value(m.registry, "ebb_current_replicas", "act") == 5.0


def test_recommend_mode_with_ebbs_own_fleet_reports_the_real_fleet_as_current() -> None:
    m = EbbMetrics()
    g = ReplicaGauge(m, "serving/llm", "recommend")
    g.as_run = lambda: 8
    g(outcome("hold", 3, 3))
    assert (value(m.registry, "ebb_current_replicas", "recommend"),
            value(m.registry, "ebb_desired_replicas", "recommend")) == (8.0, 3.0)


def test_in_hand_off_mode_the_gauges_show_the_board_not_the_pending_spec() -> None:
    m = EbbMetrics()
    board = HandoffBoard()
    board.spec_seen("serving/llm", 6)
    board.hand_off("serving/llm", 4)
    g = ReplicaGauge(m, "serving/llm", "act", board)
    g(outcome("scale_down", 6, 4))
    assert (value(m.registry, "ebb_current_replicas", "handoff"),
            value(m.registry, "ebb_desired_replicas", "handoff")) == (6.0, 4.0)
    assert value(m.registry, "ebb_desired_replicas", "act") is None
