"""Test harness: one live :class:`~ebb.live.controller.Controller` in its own process, to be killed.

Not a production entry point (that is ``ebb run``). The crash-point matrix and fail-over tests run
``python -m ebb.testing.controller_proc --ledger LOC --kube-url URL --namespace NS --deployment D
--run-id R [--elect --etcd URL --candidate ID --ttl-s 3] [--crash-at|--stop-at POINT[:N]] [--cycles N]
[--script FILE]``. Guarantees, so a test can reason about every run:

* **Deterministic decisions**, ``mode=act``. The k-th plan of *this process* (k = 0, 1, ...) wants,
  when ``k % --every == 0`` (2), ``--high`` (5) replicas if the Deployment has fewer, else ``--low``
  (2); otherwise it holds. Every decision changes replicas, up and down in turn. ``--script FILE``
  (a JSON list of replica counts) replaces that: plan k wants item k (the last once used up).
* **Fresh data**: ten 100 ms samples ending now, so nothing is vetoed as stale. The actuator is the
  real Kubernetes one, pointed at the fake API server in the *test* process (its state outlives
  this one); the ledger is ``open_ledger(--ledger)``.
* **Crash points.** ``--crash-at POINT:N`` SIGKILLs this process the N-th time (default 1st) the
  controller reaches ``POINT`` (``before_plan``, ``after_ledger``, ``after_actuation``); ``--stop-at``
  SIGSTOPs it there (a paused process; the test sends SIGCONT). Both first print
  ``{"event": "crash"|"stop", "point", "nth", "t_s", "pid"}``.
* **Progress**: one flushed JSON line per cycle on stdout (``event=cycle``, ``candidate``, ``pid``,
  ``t_s`` = Unix time after the cycle, ``n``, ``action``, ``from``, ``to``, ``decision_id``, ``acted``,
  ``note``); logs on stderr.
* **Leadership.** ``--elect`` campaigns on ``--etcd`` (key ``ebb-harness/RUN_ID/leader``, lease
  ``--ttl-s``) and the controller fences every ledger write. SIGTERM ends the loop after the current
  cycle; the elector resigns, connections close, exit status 0.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import numpy as np

from ebb.actuate.kubernetes import DECISION_ANNOTATION, KubernetesActuator
from ebb.errors import require_extra
from ebb.ledger import open_ledger
from ebb.ledger.election import LeaderElector
from ebb.live.controller import Controller, ControllerSettings, CycleOutcome
from ebb.live.policy_spec import LivePolicy
from ebb.model.live import LiveSignals
from ebb.model.observation import FineSignals, Observation, ScaleRequest
from ebb.sources.live import FakeSignalSource
from ebb.testing.fake_kube import RequestRecord

__all__ = ["FAULT_POINTS", "HarnessPolicy", "fault_at", "fresh_source", "main", "scale_writes"]

FAULT_POINTS = ("before_plan", "after_ledger", "after_actuation")


def emit(record: dict[str, Any]) -> None:
    """One JSON line on stdout, flushed at once: the test may be reading it just before a SIGKILL."""
    sys.stdout.write(json.dumps(record) + "\n")
    sys.stdout.flush()


@dataclass
class HarnessPolicy:
    """The deterministic scripted policy described in the module docstring."""

    low: int = 2
    high: int = 5
    every: int = 2
    script: tuple[int, ...] = ()
    spec: str = "harness"
    log: list[dict[str, Any]] = field(default_factory=list)
    plans: int = 0

    def want(self, spec_replicas: int) -> int:
        k, self.plans = self.plans, self.plans + 1
        if self.script:
            return self.script[min(k, len(self.script) - 1)]
        if k % self.every:
            return spec_replicas
        return self.high if spec_replicas < self.high else self.low

    def decide(self, obs: Observation) -> ScaleRequest:
        n = self.want(obs.spec_replicas)
        if n != obs.spec_replicas:
            self.log.append({"t_s": obs.t_s, "action": "scale_up" if n > obs.spec_replicas else "scale_down",
                             "from": obs.spec_replicas, "to": n, "reasons": [f"harness plan {self.plans}"],
                             "signals": {}, "weights": {}, "vetoes": [], "victims": [], "plan": {}})
        return ScaleRequest(n)

    def observe(self, obs: Observation) -> None:
        """Followers keep windows warm; this policy has none."""


def fresh_source(clock: Callable[[], float] = time.time) -> FakeSignalSource:
    """Ten samples 100 ms apart ending now, newer than the cursor: never stale."""
    def produce(since_s: float) -> LiveSignals:
        now = clock()
        t = np.asarray(now - 0.1 * np.arange(10)[::-1], dtype=np.float64)
        t = t[t > since_s]
        z = np.zeros(len(t))
        return LiveSignals(FineSignals(t_s=t, prefill_replicas=z + 0.2, slot_replicas=z + 0.2, queued=z),
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
        elif r.path == f"{dep}/scale" and int(r.body["spec"]["replicas"]) != now:
            out.append((intent, now, int(r.body["spec"]["replicas"])))
            now = out[-1][2]
    return out


def _point(text: str) -> tuple[str, int]:
    point, _, nth = text.partition(":")
    if point not in FAULT_POINTS or not (nth == "" or (nth.isdigit() and int(nth) >= 1)):
        raise argparse.ArgumentTypeError(f"expected POINT[:N] with POINT in {', '.join(FAULT_POINTS)} and "
                                         f"N >= 1, got {text!r}")
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
    p = argparse.ArgumentParser(prog="python -m ebb.testing.controller_proc", description=__doc__.split("\n")[0])
    p.add_argument("--ledger", required=True, help="ledger location (path, sqlite:///PATH, etcd://HOST:PORT/PREFIX)")
    p.add_argument("--kube-url", required=True, help="the fake API server, http://127.0.0.1:PORT")
    for name in ("--namespace", "--deployment", "--run-id"):
        p.add_argument(name, required=True)
    p.add_argument("--elect", action="store_true", help="campaign on --etcd; fence every ledger write")
    p.add_argument("--etcd", help="etcd client URL for the election, http://HOST:PORT")
    p.add_argument("--candidate", default=f"harness-{os.getpid()}")
    p.add_argument("--ttl-s", type=int, default=3, help="election lease TTL (whole s)")
    p.add_argument("--crash-at", type=_point, help="POINT[:N]: SIGKILL at the N-th visit of POINT")
    p.add_argument("--stop-at", type=_point, help="POINT[:N]: SIGSTOP at the N-th visit of POINT")
    p.add_argument("--cycles", type=int, help="stop after this many cycles (default: until SIGTERM)")
    p.add_argument("--script", type=Path, help="JSON list: replicas wanted by the k-th plan")
    p.add_argument("--interval-s", type=float, default=0.2, help="cycle period (s)")
    p.add_argument("--every", type=int, default=2, help="decide on every N-th plan")
    p.add_argument("--low", type=int, default=2, help="replicas wanted at or above --high")
    p.add_argument("--high", type=int, default=5, help="replicas wanted below it")
    return p


def _policy(args: argparse.Namespace) -> HarnessPolicy:
    script: tuple[int, ...] = ()
    if args.script is not None:
        raw = json.loads(args.script.read_text())
        if not isinstance(raw, list) or not raw or not all(isinstance(x, int) and x >= 0 for x in raw):
            raise SystemExit(f"{args.script}: expected a non-empty JSON list of replica counts >= 0, got {raw!r}")
        script = tuple(raw)
    if args.every < 1 or not 0 <= args.low < args.high:
        raise SystemExit(f"need --every >= 1 and 0 <= --low < --high, got {args.every}, {args.low}, {args.high}")
    return HarnessPolicy(args.low, args.high, args.every, script,
                         spec=f"harness:low={args.low},high={args.high},every={args.every}")


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.elect and not args.etcd:
        _parser().error("--elect needs --etcd http://HOST:PORT")
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format=f"%(asctime)s {args.candidate} %(name)s %(levelname)s %(message)s")
    policy = _policy(args)
    k8s = require_extra("kubernetes.client", "k8s")
    cfg = k8s.Configuration(host=args.kube_url)
    cfg.retries = False
    api = k8s.ApiClient(cfg)
    elector: LeaderElector | None = None
    ledger = None
    try:
        # A fake API server needs no client-side throttling; the default 5 qps would stretch cycles.
        actuator = KubernetesActuator(args.namespace, args.deployment, api_client=api, qps=1000.0, burst=1000)
        ledger = open_ledger(args.ledger)
        if args.elect:
            elector = LeaderElector(args.etcd, f"ebb-harness/{args.run_id}/leader", args.candidate, ttl_s=args.ttl_s)
            elector.start()
        settings = ControllerSettings(run_id=args.run_id, target=actuator.target, mode="act",
                                      interval_s=args.interval_s)
        ctl = Controller(cast(LivePolicy, policy), fresh_source(), actuator, ledger, settings, elector=elector,
                         fault_point=fault_at(args.crash_at, args.stop_at))
        stop = threading.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.set())

        def report(out: CycleOutcome) -> None:
            emit({"event": "cycle", "candidate": args.candidate, "pid": os.getpid(), "t_s": time.time(),
                  "n": out.n, "action": out.action, "from": out.spec_replicas, "to": out.to_replicas,
                  "decision_id": out.decision_id, "acted": out.acted, "note": out.note})

        ctl.run(stop, max_cycles=args.cycles, on_cycle=report)
    finally:
        if elector is not None:
            elector.close()
        if ledger is not None:
            ledger.close()
        api.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
