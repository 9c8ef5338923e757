"""The rollback channel in the live loop with a real Prometheus gate (issue #30 acceptance).

A gates file's ``after_scale_down:`` check — a PromQL gate on a latency series a test endpoint
exports, scraped by a real Prometheus every second — watches every scale-down of a running
controller (``Controller.run`` on the wall clock, SQLite ledger). Three acts:

1. The controller scales 4 → 2; the latency rises (the test sets the series); the gate fails and the
   controller compensates through the rollback channel: the ledger shows the request, the
   compensating step (``<root>-undo``, caused by the scale-down) and the done record with the step's result;
   the fleet is back at 4; ``ebb_compensation_seconds`` counted it.
2. Again, with the actuator refusing scale-ups (an exhausted ResourceQuota): the step cannot be
   compensated, and ``ebb review list`` shows the item with the reason.
3. The quota freed, an operator runs ``ebb review retry ID``: the running controller picks it up and
   compensates it; ``ebb review list`` is empty again.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from ebb.cli.main import app
from ebb.errors import PermanentError
from ebb.gates.guard import CanaryGuard
from ebb.gates.metrics_gate import load_gates
from ebb.ledger import open_ledger
from ebb.live.controller import Controller, ControllerSettings
from ebb.live.gate_probe import prometheus_gate_probe
from ebb.live.policy_spec import build_live_policy
from ebb.model.decision import Decision, action_between
from ebb.model.ids import CycleId, DecisionId, RunId
from ebb.model.observation import Observation, Pipeline, ScaleRequest
from ebb.model.spans import NO_SPANS, Spans
from ebb.sources.prometheus_api import PrometheusClient
from ebb.telemetry.metrics import EbbMetrics
from ebb.testing.controller_proc import fresh_source
from ebb.testing.fakes import FakeActuator
from ebb.testing.prometheus import local_prometheus

pytestmark = pytest.mark.slow

SERIES = "ebb_test_ttft_p99_seconds"
GATES = f"""after_scale_down:
  - query: max({SERIES})
    success_condition: result < 1.6
    failure_condition: result >= 2.0
    interval_s: 1
    count: 20
"""
WAIT_S = 45.0
runner = CliRunner()


class LatencyEndpoint:
    """Serves ``ebb_test_ttft_p99_seconds <value>`` at ``/metrics``; the test sets the value."""

    def __init__(self) -> None:
        self.value = 0.4
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = f"# TYPE {SERIES} gauge\n{SERIES} {owner.value}\n".encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.target = f"127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@dataclass
class Scripted:
    """The inner policy: holds, except that it wants ``to`` replicas while ``to`` is set."""

    to: int | None = None
    spec: str = "scripted"
    interval_s: float = 0.5
    pipeline: Pipeline = Pipeline(1, 1)
    react_interval_s: float | None = None

    def decide(self, obs: Observation, *, spans: Spans = NO_SPANS) -> Decision:
        have = obs.spec_replicas
        n = have if self.to is None else self.to
        return Decision(obs.t_s, action_between(have, n), have, n, policy=self.spec,
                        reasons=("scripted",) if n != have else ())

    def observe(self, obs: Observation) -> None:
        pass

    def gate_queries(self) -> tuple[str, ...]:
        return ()

    def ttft_p99_since(self, t0_s: float) -> float:
        return float("nan")

    def note_scale_up(self, t_s: float) -> None:
        pass


class QuotaActuator(FakeActuator):
    """Refuses scale-ups while ``exhausted`` (the namespace's ResourceQuota is used up)."""

    exhausted = False

    def apply(self, decision_id: DecisionId, request: ScaleRequest) -> Any:
        if self.exhausted and request.replicas > self.state().spec_replicas:
            raise PermanentError("forbidden: exceeded quota: gpu-quota, requested: nvidia.com/gpu=2")
        return super().apply(decision_id, request)


def wait_for(what: str, cond: Callable[[], bool]) -> None:
    deadline = time.monotonic() + WAIT_S
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


@pytest.fixture
def endpoint() -> Iterator[LatencyEndpoint]:
    ep = LatencyEndpoint()
    try:
        yield ep
    finally:
        ep.close()


def test_a_gate_failing_after_a_scale_down_is_compensated_queued_and_retried_in_the_live_loop(
        prometheus_binary_path: str, endpoint: LatencyEndpoint, tmp_path: Path) -> None:
    ledger_path = tmp_path / "ledger.sqlite"
    gates = load_gates(GATES, "gates.yaml")
    guard = build_live_policy("ebb", slo_ttft_ms=2000.0, slo_e2e_ms=60000.0, initial=4, gates=gates)
    assert isinstance(guard, CanaryGuard) and guard.canary_replicas is None, "after_scale_down: checks whole steps"
    inner = Scripted()
    policy = replace(guard, inner=inner)  # type: ignore[arg-type]
    act = QuotaActuator(4)
    metrics = EbbMetrics()
    scrape = [{"job_name": "latency", "static_configs": [{"targets": [endpoint.target]}]}]
    (tmp_path / "prom").mkdir()
    with local_prometheus(prometheus_binary_path, tmp_path / "prom", scrape_configs=scrape) as prom:
        client = PrometheusClient(prom.url)
        wait_for("the first scrape", lambda: len(client.instant(f"max({SERIES})")) == 1)
        store = open_ledger(ledger_path, writer=True)
        ctl = Controller(policy, fresh_source(), act, store,
                         ControllerSettings(run_id="live-rb", target="serving/llm", mode="act", interval_s=0.5,
                                            react_interval_s=0.0, review_poll_s=0.5),
                         metrics=metrics, gate_probe=prometheus_gate_probe(client))
        stop = threading.Event()
        loop = threading.Thread(target=ctl.run, args=(stop,), daemon=True)
        loop.start()
        try:
            # 1. Scale down, the latency rises, the gate fails: compensated.
            first = scale_down_and_break(inner, act, endpoint)
            wait_for("the compensation", lambda: act.state().spec_replicas == 4)
            done = cycle_of(ledger_path, f"{first}-rollback-done")
            assert done["applied"] == [first] and done["enqueued"] == []
            step = decision_of(ledger_path, f"{first}-undo")
            assert step["action"] == "scale_up" and step["caused_by"] == [first] and step["to"] == 4
            assert done["steps"] == [{"decision_id": f"{first}-undo", "target": "serving/llm", "applied": True,
                                      "replicas_after": 4}]
            assert "ebb_compensation_seconds_count 1.0" in metrics.exposition().decode()

            # 2. Again, the quota exhausted: the step cannot be compensated and goes to review.
            endpoint.value = 0.4
            act.exhausted = True
            second = scale_down_and_break(inner, act, endpoint)
            wait_for("the review item", lambda: second in review_list(ledger_path))
            listed = review_list(ledger_path)
            assert "exceeded quota" in listed and act.state().spec_replicas == 2

            # 3. The quota freed, an operator retries: the running controller compensates it.
            act.exhausted = False
            res = runner.invoke(app, ["review", "retry", second, "--ledger", str(ledger_path)])
            assert res.exit_code == 0 and "pending again (retries=1)" in res.output, res.output
            wait_for("the retried compensation", lambda: act.state().spec_replicas == 4)
            wait_for("the item resolved", lambda: "no pending review items" in review_list(ledger_path))
            assert decision_of(ledger_path, f"{second}-undo-r1")["action"] == "scale_up"
        finally:
            stop.set()
            loop.join(timeout=10.0)
            ctl.close()
            store.close()


def scale_down_and_break(inner: Scripted, act: FakeActuator, endpoint: LatencyEndpoint) -> str:
    """Have the policy scale 4 → 2, then make the gate's latency fail; the scale-down's decision id."""
    before = set(act.applied_ids)
    inner.to = 2
    wait_for("the scale-down", lambda: act.state().spec_replicas == 2)
    inner.to = None
    endpoint.value = 3.0
    [did] = [d for d in act.applied_ids if d not in before]
    return str(did)


def cycle_of(path: Path, cycle_id: str) -> dict[str, Any]:
    store = open_ledger(path, read_only=True)
    try:
        deadline = time.monotonic() + WAIT_S
        while (c := store.get_cycle(CycleId(cycle_id))) is None:
            assert time.monotonic() < deadline, f"no cycle {cycle_id}: {[c.cycle_id for c in store.cycles()]}"
            time.sleep(0.1)
        return dict(c.snapshot)
    finally:
        store.close()


def decision_of(path: Path, decision_id: str) -> dict[str, Any]:
    store = open_ledger(path, read_only=True)
    try:
        d = store.get_decision(DecisionId(decision_id))
        assert d is not None, f"no decision {decision_id}: {[x.decision_id for x in store.decisions(RunId('live-rb'))]}"
        return {"action": d.action, "caused_by": list(d.caused_by), "to": d.to_replicas}
    finally:
        store.close()


def review_list(path: Path) -> str:
    res = runner.invoke(app, ["review", "list", "--ledger", str(path)])
    assert res.exit_code == 0, res.output
    return res.output
