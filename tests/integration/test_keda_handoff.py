"""Ebb behind KEDA, end to end: the external scaler, a client generated from the upstream proto, the HPA emulator.

Two controllers run the same policy on the same input, each against its own fake API server:

* **act** — Ebb writes ``/scale`` itself (``ebb run --mode act``);
* **keda** — hand-off mode (``ebb run --serve-keda``): the Kubernetes actuator marks victims and hands
  the number to the board, the real gRPC scaler serves it, and :class:`~ebb.testing.keda_client.KedaEmulator`
  plays KEDA and its HPA — ``GetMetricSpec``, ``GetMetrics`` through stubs that ``grpc_tools`` generates
  from the vendored upstream proto, the conformance-tested HPA emulator (External metric, AverageValue
  target, tolerance 0.1, the documented behavior) — and writes ``/scale`` on the fake API server.

KEDA syncs after every controller cycle (within one reconcile), so the two runs must make the same
decisions step for step, remove the same pods (the victims' deletion costs), and end on the same
fleet. Then the scaler is killed: KEDA's fallback (``currentReplicasIfHigher``) never lets the
replicas drop. The controllers run on an injected clock, one virtual second per cycle.

A second test starts a real ``ebb run --serve-keda`` process against the fake API server and calls it
as KEDA does; killed with SIGKILL, its fleet keeps its replicas.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("kubernetes")
grpc = pytest.importorskip("grpc", reason="the keda extra (grpcio) is a dev dependency; CI installs it")
pytest.importorskip("grpc_tools", reason="grpcio-tools generates KEDA's client; a dev dependency CI installs")

from kubernetes import client  # noqa: E402

from ebb.decide.handoff import HandoffBoard, handed_off_cold_start_s  # noqa: E402
from ebb.actuate.keda_scaler import KedaScalerServer  # noqa: E402
from ebb.actuate.kubernetes import KubernetesActuator  # noqa: E402
from ebb.decide.base import Policy  # noqa: E402
from ebb.ledger import open_ledger  # noqa: E402
from ebb.live.controller import Controller, ControllerSettings  # noqa: E402
from ebb.live.policy_spec import build_live_policy  # noqa: E402
from ebb.model.live import LiveSignals  # noqa: E402
from ebb.model.observation import FineSignals  # noqa: E402
from ebb.testing.controller_proc import HarnessPolicy  # noqa: E402
from ebb.testing.fake_kube import FakeKubeApiServer  # noqa: E402
from ebb.testing.fakes import FakeSignalSource  # noqa: E402
from ebb.testing.keda_client import KedaEmulator  # noqa: E402

NS, NAME = "serving", "llm"


class VirtualClock:
    def __init__(self) -> None:
        self.t = time.time()

    def __call__(self) -> float:
        return self.t


def scripted_source(clock: VirtualClock, demand: Callable[[float], float]) -> FakeSignalSource:
    """Ten 100 ms samples up to now: ``demand(t)`` replicas of slot occupancy, 150 ms TTFTs."""
    t0 = clock.t

    def produce(since_s: float) -> LiveSignals:
        now = clock()
        t = np.asarray([x for x in now - 0.1 * np.arange(10)[::-1] if x > since_s], dtype=np.float64)
        z, d = np.zeros(len(t)), demand(now - t0)
        return LiveSignals(FineSignals(t_s=t, prefill_replicas=z + 0.3 * d, slot_replicas=z + d, queued=z,
                                       done_t_s=t, done_ttft_ms=z + 150.0, done_e2e_ms=z + 2500.0,
                                       done_weight=z + 1.0, done_wait_ms=z),
                           total_qps=5.0 * d, queued=0.0, newest_sample_s=now)
    return FakeSignalSource(produce)


@dataclass
class Run:
    """What one controller did: per cycle (action, from, to); pods after each cycle; the fleet at the end."""

    steps: list[tuple[str, int, int]]
    pods: list[frozenset[str]]
    fake: FakeKubeApiServer
    scaler: KedaScalerServer | None = None
    keda: KedaEmulator | None = None
    clock: VirtualClock | None = None
    controller: Controller | None = None


def spec_of(fake: FakeKubeApiServer) -> int:
    return int(fake.deployments[(NS, NAME)]["spec"]["replicas"])


@pytest.fixture
def runs() -> Iterator[list[Run]]:
    made: list[Run] = []
    yield made
    for r in made:
        if r.scaler is not None:
            r.scaler.stop(0)
        r.fake.stop()


def run(made: list[Run], policy: Policy, demand: Callable[[float], float], *, cycles: int, initial: int,
        keda: bool) -> Run:
    clock = VirtualClock()
    fake = FakeKubeApiServer().start()
    fake.add_node("node-a", "zone-a")
    fake.add_deployment(NAME, initial, namespace=NS)
    r = Run([], [], fake, clock=clock)
    made.append(r)
    board = HandoffBoard(clock=clock) if keda else None
    act = KubernetesActuator(NS, NAME, api_client=client.ApiClient(fake.configuration()), handoff=board, qps=10_000.0, burst=10_000)
    ledger = open_ledger(f"sqlite:///{tempfile.mkdtemp()}/ledger.db", writer=True)
    r.controller = Controller(policy, scripted_source(clock, demand), act, ledger,
                              ControllerSettings(run_id="keda" if keda else "act", target=f"{NS}/{NAME}", mode="act",
                                                 interval_s=1.0, react_interval_s=0.0),
                              clock=clock, monotonic=clock)
    if board is not None:
        r.scaler = KedaScalerServer(board)
        address = r.scaler.start("127.0.0.1:0")
        r.keda = KedaEmulator(grpc.insecure_channel(address), name=NAME, namespace=NS,
                              metadata={"namespace": NS, "deployment": NAME}, min_replicas=1, max_replicas=64,
                              fallback_replicas=1)
    for _ in range(cycles):
        out = r.controller.cycle()
        r.steps.append((out.action, out.spec_replicas, out.to_replicas))
        if r.keda is not None:
            sync(r)
        r.pods.append(frozenset(fake.pod_names(NS, terminating=False)))
        clock.t += 1.0
    return r


def sync(r: Run) -> int:
    """One KEDA/HPA sync: write what the HPA decided; return the spec after it."""
    assert r.keda is not None and r.clock is not None
    res = r.keda.sync(r.clock.t, spec_of(r.fake))
    if res.replicas is not None:
        r.fake.set_replicas(NAME, res.replicas, namespace=NS)
    return spec_of(r.fake)


def test_a_scripted_policy_behind_keda_makes_the_same_decisions_and_removes_the_same_pods(runs: list[Run]) -> None:
    script = (4, 4, 6, 6, 6, 3, 3, 5, 2, 2, 2, 7, 7, 4, 1, 1, 3)

    def policy() -> HarnessPolicy:
        return HarnessPolicy(script=script, interval_s=1.0)

    act = run(runs, policy(), lambda t: 1.0, cycles=len(script), initial=4, keda=False)
    keda = run(runs, policy(), lambda t: 1.0, cycles=len(script), initial=4, keda=True)
    assert [s for s in act.steps if s[0] != "hold"] == [s for s in keda.steps if s[0] != "hold"]
    assert act.steps == keda.steps
    assert act.pods == keda.pods  # the HPA's ReplicaSet removed exactly the victims Ebb named
    assert spec_of(act.fake) == spec_of(keda.fake) == 3


def test_ebb_behind_keda_makes_the_same_decisions_as_ebb_acting_directly(runs: list[Run]) -> None:
    def demand(t: float) -> float:
        return 3.5 if t < 300 else 1.0 if t < 600 else 4.5

    def policy() -> Policy:
        # Both size for the hand-off's comeback (cold start + one HPA sync): only who writes /scale differs.
        return build_live_policy("ebb:profile=lean", slo_ttft_ms=2000.0, slo_e2e_ms=60_000.0, initial=2,
                                 cold_start_s=handed_off_cold_start_s(60.0))

    act = run(runs, policy(), demand, cycles=700, initial=2, keda=False)
    keda = run(runs, policy(), demand, cycles=700, initial=2, keda=True)
    changes = [s for s in act.steps if s[0] in ("scale_up", "scale_down")]
    assert len(changes) >= 2
    assert act.steps == keda.steps
    assert spec_of(act.fake) == spec_of(keda.fake)


def test_with_the_scaler_killed_kedas_fallback_never_lets_the_replicas_drop(runs: list[Run]) -> None:
    keda = run(runs, HarnessPolicy(script=(5, 5), interval_s=1.0), lambda t: 1.0, cycles=2, initial=3, keda=True)
    assert spec_of(keda.fake) == 5
    assert keda.scaler is not None and keda.controller is not None
    keda.scaler.stop(0)  # Ebb is gone; its last word was 5, the harness would now ask for fewer
    seen = []
    for _ in range(8):
        assert keda.clock is not None
        keda.clock.t += 15.0
        seen.append(sync(keda))
    assert min(seen) == 5
    assert keda.keda is not None and keda.keda.failures >= keda.keda.failure_threshold


def test_a_real_ebb_run_serves_keda_and_its_death_leaves_the_replicas_where_they_are(tmp_path: Path) -> None:
    with FakeKubeApiServer() as fake:
        fake.add_node("node-a", "zone-a")
        fake.add_deployment(NAME, 4, namespace=NS)
        kubeconfig = fake.write_kubeconfig(tmp_path / "kubeconfig")
        port = _free_port()
        token = tmp_path / "keda-token"
        token.write_text("t0ken\n")
        proc = subprocess.Popen(
            [sys.executable, "-m", "ebb.cli.main", "run", "--mode", "act", "--actuator", "kubernetes", "--namespace", NS,
             "--deployment", NAME, "--kubeconfig", str(kubeconfig), "--source", "prometheus", "--prometheus-url",
             f"http://127.0.0.1:{_free_port()}", "--ledger", f"sqlite:///{tmp_path}/ledger.db",
             "--serve-keda", f"127.0.0.1:{port}", "--keda-token-file", str(token), "--no-log-json"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        try:
            channel = grpc.insecure_channel(f"127.0.0.1:{port}")
            keda = KedaEmulator(channel, name=NAME, namespace=NS, metadata={"tokenFromEnv": "t0ken"},
                                min_replicas=1, max_replicas=10, fallback_replicas=2)
            _wait_serving(keda, proc)
            res = keda.sync(0.0, spec_of(fake))
            # The Prometheus source is unreachable: no data, no scale-down; Ebb asks for the fleet as it is.
            assert res.replicas is None and keda.metric_name == "ebb-desired-replicas"
            assert fake.calls("PATCH", f"/deployments/{NAME}/scale") == []
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)
            if proc.stdout is not None:
                proc.stdout.close()
        for k in range(5):
            res = keda.sync(15.0 * (k + 1), spec_of(fake))
            if res.replicas is not None:
                fake.set_replicas(NAME, res.replicas, namespace=NS)
        assert spec_of(fake) == 4 and keda.failures >= 3
        channel.close()


def _wait_serving(keda: KedaEmulator, proc: subprocess.Popen[bytes], timeout_s: float = 60.0) -> None:
    """Until the process answers GetMetrics (it listens and has read the Deployment once)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            keda.stub.GetMetrics(keda._pb2.GetMetricsRequest(scaledObjectRef=keda.ref, metricName="ebb-desired-replicas"),
                                 timeout=2)
            return
        except grpc.RpcError:
            if proc.poll() is not None or time.monotonic() > deadline:
                out = proc.stdout.read().decode(errors="replace") if proc.stdout and proc.poll() is not None else ""
                raise AssertionError(f"ebb run --serve-keda never answered (exit {proc.poll()}): {out[-2000:]}")
            time.sleep(0.5)


def _free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
