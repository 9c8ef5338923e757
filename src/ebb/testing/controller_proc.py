"""Test harness (not a production entry point: that is ``ebb run``): one live controller in its own
process, for the crash-point matrix and fail-over tests (``python -m ebb.testing.controller_proc -h``).

* **Deterministic decisions**, ``mode=act``: plan k (k = 0, 1, ... in *this process*) wants, when
  ``k % --every == 0`` (2), 5 replicas if the Deployment has fewer, else 2; otherwise it holds: every
  decision changes replicas, up and down in turn. ``--script FILE`` (JSON list) wants item k instead.
  A scale-down names the *oldest* replicas as its victims (``--victims oldest``, the default: the
  opposite of every actuator's newest-first choice, so a resumed decision that lost its victims
  shows); ``--victims none`` names none. Each plan is a :class:`~ebb.model.decision.Decision`.
* **A failing gate** (``--gate-fail-at K``): plan K (a scale-down) is a gated step taken whole (gate
  step ``watch``, as a gates file's ``after_scale_down:`` check makes it) and plan K+1 is its gate
  failing: a ``compensate`` gate step back to plan K's ``from``, which the controller hands to the
  rollback channel (:mod:`ebb.live.compensation`).
* **Fresh data** (ten 100 ms samples ending now: nothing vetoed as stale); the real Kubernetes actuator
  on the fake API server ``--kube-url`` of the *test* process (it outlives this one); ``open_ledger``.
* **Crash points.** ``--crash-at POINT:N`` SIGKILLs, ``--stop-at POINT:N`` SIGSTOPs this process the
  N-th time (default 1st) the controller reaches ``POINT`` (``before_plan``, ``after_ledger``,
  ``after_actuation``; a rollback step's ``after_compensation_ledger``, ``after_compensation_actuation``;
  the harness's own ``before_ledger``: any ledger append, after its fence was taken and before the
  ledger checks it), first printing ``{"event": "crash"|"stop", "point", "nth", "t_s", "pid"}``.
* **Progress**: one flushed JSON line per cycle on stdout (``event=cycle``, ``candidate``, ``pid``,
  ``t_s`` = Unix time after the cycle, ``n``, ``action``, ``from``, ``to``, ``decision_id``, ``acted``,
  ``note``); logs on stderr.
* **Leadership**: ``--elect`` campaigns on ``--etcd`` (key ``ebb-harness/RUN_ID/leader``, lease
  ``--ttl-s``), or with ``--election kubernetes`` on the Lease ``lease_name(RUN_ID)`` in
  ``--lease-namespace`` of ``--kube-url`` (``--lease-duration-s``, ``--lease-renew-deadline-s``,
  ``--lease-retry-s``; a SQLite ledger is then opened without the one-writer lock, shared by the
  replicas as ``ebb run --election kubernetes`` does); every ledger write is fenced. SIGTERM ends
  the loop after the current cycle, the elector resigns, connections close, exit status 0.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from ebb.actuate.kubernetes import DECISION_ANNOTATION, KubernetesActuator
from ebb.errors import ConfigError, EbbError, require_extra
from ebb.ledger import open_ledger
from ebb.ledger.election import LeaderElector
from ebb.ledger.kube_lease import KubeLeaseElector
from ebb.ledger.kube_lease_store import lease_name
from ebb.live.controller import Controller, ControllerSettings
from ebb.model.decision import Decision, GateStep
from ebb.model.live import LiveSignals
from ebb.model.observation import FineSignals, Observation, Pipeline
from ebb.model.spans import NO_SPANS, Spans
from ebb.testing.fakes import FakeSignalSource
from ebb.testing.fake_kube import RequestRecord

__all__ = ["FAULT_POINTS", "HARNESS_POINTS", "HarnessPolicy", "ROLLBACK_FAULT_POINTS", "fault_at", "fresh_source", "main", "run_harness",
           "scale_writes"]

FAULT_POINTS = ("before_plan", "after_ledger", "after_actuation")
ROLLBACK_FAULT_POINTS = ("after_compensation_ledger", "after_compensation_actuation")
HARNESS_POINTS = ("before_ledger",)
"""Points the harness adds around the controller: ``before_ledger`` wraps the ledger's ``append_cycle``."""
LOW, HIGH = 2, 5  # replicas the default plan alternates between


def run_harness(kube_url: str, namespace: str, deployment: str, ledger: str, run_id: str, *extra: str,
                timeout_s: float = 60.0) -> tuple[int, list[dict[str, Any]], str]:
    """Run this harness in its own process to its end (or its crash point): (exit status, its JSON
    lines, the last 4,000 characters of its stderr). ``extra``: more of its flags."""
    args = [sys.executable, "-m", "ebb.testing.controller_proc", "--ledger", ledger, "--kube-url", kube_url,
            "--namespace", namespace, "--deployment", deployment, "--run-id", run_id, *extra]
    done = subprocess.run(args, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=timeout_s)
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return done.returncode, lines, done.stderr[-4000:]


def emit(record: dict[str, Any]) -> None:
    print(json.dumps(record), flush=True)  # at once: a SIGKILL may follow


@dataclass
class HarnessPolicy:
    """The deterministic scripted policy described in the module docstring (a
    :class:`~ebb.decide.base.Policy`)."""

    every: int = 2
    script: tuple[int, ...] = ()
    spec: str = "harness"
    oldest_victims: bool = True
    """Scale-downs name the oldest replicas (``obs.pods`` is oldest first) as their victims."""
    interval_s: float = 0.2
    pipeline: Pipeline = Pipeline(1, 1)
    plans: int = 0
    gate_fail_at: int | None = None
    """Plan K is a gated (``watch``) scale-down and plan K+1 its failed gate's ``compensate``."""
    gated_from: int | None = None

    def decide(self, obs: Observation, *, spans: Spans = NO_SPANS) -> Decision:
        k, self.plans, have = self.plans, self.plans + 1, obs.spec_replicas
        if self.gate_fail_at is not None and k == self.gate_fail_at + 1 and self.gated_from is not None:
            return Decision(obs.t_s, "scale_up" if self.gated_from > have else "hold", have,
                            max(have, self.gated_from), policy=self.spec, reasons=("compensate: harness gate fail",),
                            gate=GateStep("compensate", "harness gate", "fail"))
        n = (self.script[min(k, len(self.script) - 1)] if self.script
             else have if k % self.every else HIGH if have < HIGH else LOW)
        victims = tuple(p.replica for p in obs.pods[:max(0, have - n)]) if self.oldest_victims else ()
        d = Decision.change(obs.t_s, have, n, policy=self.spec, reasons=(f"harness plan {k}",) if n != have else (),
                            victims=victims if n < have else ())
        if k == self.gate_fail_at and d.action == "scale_down":
            self.gated_from = have
            return replace(d, gate=GateStep("watch", "harness gate"))
        return d

    def observe(self, obs: Observation) -> None:  # followers keep windows warm; there are none here
        pass

    def gate_queries(self) -> tuple[str, ...]:
        return ()


def fresh_source(clock: Callable[[], float] = time.time, *, slot_replicas: float = 0.2) -> FakeSignalSource:
    """Ten samples 100 ms apart ending now, newer than the cursor: never stale; 0.2 replicas of
    prefill and ``slot_replicas`` of slot occupancy (the fleet's served demand, replica units)."""
    def produce(since_s: float) -> LiveSignals:
        now = clock()
        t = np.asarray([x for x in now - 0.1 * np.arange(10)[::-1] if x > since_s], dtype=np.float64)
        z = np.zeros(len(t))
        return LiveSignals(FineSignals(t_s=t, prefill_replicas=z + 0.2, slot_replicas=z + slot_replicas, queued=z),
                           total_qps=1.0, queued=0.0, newest_sample_s=now)
    return FakeSignalSource(produce)


def scale_writes(requests: Iterable[RequestRecord], namespace: str, deployment: str,
                 start: int) -> list[tuple[str, int, int]]:
    """``(decision id, before, after)`` of every accepted ``/scale`` PATCH that changed replicas, in
    order, from the fake API server's request log; the id is the last ``ebb.dev/last-decision-id``
    the actuator wrote before it ("" when none). ``start``: the Deployment's replicas at first."""
    dep = f"/apis/apps/v1/namespaces/{namespace}/deployments/{deployment}"
    now, intent, out = start, "", []
    for r in requests:
        if r.method != "PATCH" or r.status != 200 or not isinstance(r.body, dict):
            continue
        if r.path == dep:
            intent = str(r.body.get("metadata", {}).get("annotations", {}).get(DECISION_ANNOTATION, intent))
        elif r.path == f"{dep}/scale" and (want := int(r.body["spec"]["replicas"])) != now:
            out.append((intent, now, want))
            now = want
    return out


def _point(text: str) -> tuple[str, int]:
    point, _, nth = text.partition(":")
    points = FAULT_POINTS + ROLLBACK_FAULT_POINTS + HARNESS_POINTS
    if point not in points or not (nth or "1").isdigit() or int(nth or 1) < 1:
        raise argparse.ArgumentTypeError(f"expected POINT[:N], POINT in {', '.join(points)}, N >= 1: {text!r}")
    return point, int(nth or 1)


def fault_at(crash: tuple[str, int] | None, stop: tuple[str, int] | None) -> Callable[[str], None]:
    """The controller's ``fault_point``: SIGKILL (``crash``) or SIGSTOP (``stop``) at the N-th visit."""
    seen: Counter[str] = Counter()

    def fault(where: str) -> None:
        seen[where] += 1
        for event, want, sig in (("stop", stop, signal.SIGSTOP), ("crash", crash, signal.SIGKILL)):
            if want == (where, seen[where]):
                emit({"event": event, "point": where, "nth": seen[where], "t_s": time.time(), "pid": os.getpid()})
                os.kill(os.getpid(), sig)
    return fault


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m ebb.testing.controller_proc")
    p.add_argument("--ledger", required=True, help="ledger location (path, sqlite:///PATH, etcd://HOST:PORT/PREFIX)")
    p.add_argument("--kube-url", required=True, help="the fake API server, http://127.0.0.1:PORT")
    for name in ("--namespace", "--deployment", "--run-id"):
        p.add_argument(name, required=True)
    p.add_argument("--elect", action="store_true", help="campaign (--election); fence every ledger write")
    p.add_argument("--election", choices=("etcd", "kubernetes"), default="etcd",
                   help="on --etcd's lease, or on a Lease of --kube-url")
    p.add_argument("--etcd", help="etcd client URL for the election, http://HOST:PORT")
    p.add_argument("--candidate", default=f"harness-{os.getpid()}", help="this controller's id in the election")
    p.add_argument("--ttl-s", type=int, default=3, help="etcd election lease TTL (whole s)")
    p.add_argument("--lease-namespace", default="ebb-system", help="namespace of the election Lease")
    p.add_argument("--lease-duration-s", type=int, default=15, help="Lease election: leaseDurationSeconds")
    p.add_argument("--lease-renew-deadline-s", type=float, default=10.0, help="Lease election: renew deadline (s)")
    p.add_argument("--lease-retry-s", type=float, default=2.0, help="Lease election: retry period (s)")
    for flag, kill in (("--crash-at", "SIGKILL"), ("--stop-at", "SIGSTOP")):
        p.add_argument(flag, type=_point, help=f"POINT[:N]: {kill} itself at the N-th visit of POINT")
    p.add_argument("--cycles", type=int, help="stop after this many cycles (default: until SIGTERM)")
    p.add_argument("--script", type=Path, help="JSON list: replicas wanted by the k-th plan")
    p.add_argument("--interval-s", type=float, default=0.2, help="cycle period (s)")
    p.add_argument("--slot-replicas", type=float, default=0.2,
                   help="slot occupancy the source reports (replica units): the fleet's demand")
    p.add_argument("--every", type=int, default=2, help="decide on every N-th plan")
    p.add_argument("--gate-fail-at", type=int, help="plan K is a gated scale-down whose gate fails at plan K+1")
    p.add_argument("--victims", choices=("oldest", "none"), default="oldest",
                   help="victims a scale-down names (oldest replicas, or none: the actuator chooses)")
    return p


def _policy(args: argparse.Namespace) -> HarnessPolicy:
    try:
        script = tuple(int(x) for x in json.loads(args.script.read_text())) if args.script else ()
        if args.every < 1 or any(x < 0 for x in script):
            raise ValueError(f"need --every >= 1 (got {args.every}) and replica counts >= 0")
    except (OSError, TypeError, ValueError) as exc:
        raise ConfigError(f"harness policy from --script {args.script} --every {args.every}: {exc} "
                          "(fix: a JSON list of replica counts, e.g. [5, 5, 2])") from exc
    return HarnessPolicy(every=args.every, script=script, spec=f"harness:every={args.every}",
                         oldest_victims=args.victims == "oldest", interval_s=args.interval_s,
                         gate_fail_at=args.gate_fail_at)


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.elect and args.election == "etcd" and not args.etcd:
        parser.error("--elect needs --etcd http://HOST:PORT (or --election kubernetes)")
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format=f"%(asctime)s {args.candidate} %(name)s %(levelname)s %(message)s")
    policy, k8s = _policy(args), require_extra("kubernetes.client", "k8s")
    cfg = k8s.Configuration(host=args.kube_url)
    cfg.retries = False
    with ExitStack() as closing:  # closed in reverse: the elector resigns first
        api = k8s.ApiClient(cfg)
        closing.callback(api.close)
        # A fake API server needs no client-side throttling; the default 5 qps would stretch cycles.
        actuator = KubernetesActuator(args.namespace, args.deployment, api_client=api, qps=1000.0, burst=1000)
        shared = args.elect and args.election == "kubernetes"  # replicas share the file, fenced
        ledger = open_ledger(args.ledger, writer=not shared)
        closing.callback(ledger.close)
        fault = fault_at(args.crash_at, args.stop_at)
        _before_each_append(ledger, lambda: fault("before_ledger"))
        elector: Any = None
        if args.elect and args.election == "etcd":
            elector = closing.enter_context(LeaderElector(args.etcd, f"ebb-harness/{args.run_id}/leader",
                                                          args.candidate, ttl_s=args.ttl_s))
        elif args.elect:
            lease_api = k8s.ApiClient(cfg)  # its own client: the elector's thread never waits on the loop's
            closing.callback(lease_api.close)
            elector = closing.enter_context(KubeLeaseElector(
                args.lease_namespace, lease_name(args.run_id), args.candidate, api_client=lease_api,
                lease_duration_s=args.lease_duration_s, renew_deadline_s=args.lease_renew_deadline_s,
                retry_period_s=args.lease_retry_s))
        if elector is not None:
            elector.start()
        ctl = Controller(policy, fresh_source(slot_replicas=args.slot_replicas), actuator, ledger,
                         ControllerSettings(run_id=args.run_id, target=actuator.target, mode="act",
                                            interval_s=args.interval_s),
                         elector=elector, fault_point=fault)
        closing.callback(ctl.close)  # the compensation log it opened next to the ledger
        stop = threading.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.set())
        ctl.run(stop, max_cycles=args.cycles, on_cycle=lambda out: emit(
            {"event": "cycle", "candidate": args.candidate, "pid": os.getpid(), "t_s": time.time(), "n": out.n,
             "action": out.action, "from": out.spec_replicas, "to": out.to_replicas,
             "decision_id": out.decision_id, "acted": out.acted, "note": out.note}))
    return 0


def _before_each_append(ledger: Any, hook: Callable[[], None]) -> None:
    """Run ``hook`` before every ``ledger.append_cycle`` (the ``before_ledger`` point); the object stays
    the same ledger (the compensation log is still opened next to its file)."""
    append = ledger.append_cycle

    def hooked(cycle: Any, fence: Any = None) -> bool:
        hook()
        return bool(append(cycle, fence))
    setattr(ledger, "append_cycle", hooked)  # noqa: B010 - an instance attribute over the method


def _main() -> int:
    """``main`` as a process: an error of the tree (a ledger another controller holds) is one line, exit 2."""
    try:
        return main()
    except EbbError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(_main())
