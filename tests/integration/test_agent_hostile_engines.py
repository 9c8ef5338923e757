"""One hostile engine pod among four never blinds the controller (issue #32's live acceptance).

Four vLLM-style pods behind one real :class:`~ebb.agent.server.Agent`: three healthy and saturated
(3 running of 4 slots, busy the whole time: the counter follows the wall clock), one serving a
hostile page — each mode of ``../shared/redteam/review2/evil_engine.py`` in turn (negative, NaN,
overflowing or absurd gauges, 2^64 histogram counts, 4 MiB of escaped quotes, a label bomb, binary,
redirects, a hang, a trickle, an endless chunked body, a lying length, HTTP 500 …). Two controllers
read the agent through the real :class:`~ebb.sources.agents.AgentSource`, in recommend mode on a
fleet of 4 ready replicas: one whose policy sizes the fleet to the demand it is shown (ceil of the
busy replicas / 0.9) and one that always wants 2. For every mode:

* every cycle decides (no cycle fails on a read error: the bad pod is dropped alone);
* the sizing controller asks to scale up on the three healthy pods' overload in every cycle but at
  most one (their demand, 3 busy replicas, is extrapolated to the 4 ready ones when the bad pod is
  missing; a page past the agent's 1 s wall limit delays one bucket's close, and a cycle that read
  no new sample then holds);
* the other controller's scale-down goes through only on cycles whose data covers all four pods,
  and is vetoed ("incomplete fleet") on every other; a page that cannot be read never covers them,
  and ``quadratic``'s valid but slow page does at most once (when its parse beats the wall limit,
  after which its pod rests).

Modes left out, with why: ``gzipbomb`` (the double compresses 200 MB per request, an attack on the
test machine rather than the agent; the agent never decompresses: ``auto_decompress`` off, covered
by the agent's size cap) and ``huge20``/``quadratic16`` (20 and 16 MiB bodies: the 4 MiB cap cuts
them as it cuts ``huge``, at 5x the test's time). About 2.5 s per mode. Skipped with a reason
without ``../shared``; failed under CI=true.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ebb.agent.server import Agent
from ebb.ledger.memory import MemoryLedger
from ebb.live.controller import Controller, ControllerSettings
from ebb.model.decision import Decision, action_between
from ebb.model.observation import Observation, Pipeline
from ebb.model.spans import NO_SPANS, Spans
from ebb.sources.agents import AgentSource
from ebb.sources.engines.profiles import PROFILES
from ebb.testing.fakes import FakeActuator

EVIL = Path(__file__).resolve().parents[2].parent / "shared" / "redteam" / "review2" / "evil_engine.py"
MODES = ("ok", "huge", "nan", "neg", "negonce", "negsmall", "overflow", "bigrun", "labelbomb", "reset", "noinf",
         "dup", "quadratic", "slowlines", "histbomb", "bigcount", "binary", "empty", "redirect_file",
         "redirect_host", "redirect_self", "hang", "trickle", "chunked_forever", "status500", "lie_length")
CYCLES = 4


def _evil() -> Path:
    if not EVIL.exists():
        msg = f"{EVIL} is absent (the shared folder is not beside the repository)"
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI must provide the shared red-team helpers: {msg}")
        pytest.skip(msg)
    return EVIL


def _start(mode: str, folder: str, life_s: int = 60) -> tuple[subprocess.Popen[bytes], str]:
    portfile = os.path.join(folder, f"{mode}-{time.monotonic_ns()}.port")
    proc = subprocess.Popen([sys.executable, str(_evil()), mode, portfile, str(life_s)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    for _ in range(200):
        if os.path.exists(portfile):
            return proc, f"http://127.0.0.1:{Path(portfile).read_text()}/metrics"
        time.sleep(0.02)
    proc.kill()
    raise AssertionError(f"evil_engine.py {mode} did not start")


_SATURATED = r"""
import http.server, os, socketserver, sys, time
T0 = time.monotonic()
class H(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a): pass
    def do_GET(self):
        busy = time.monotonic() - T0  # busy the whole time: a busy share of 1 however often it is read
        b = ('vllm:num_requests_running{model_name="m"} 3\nvllm:num_requests_waiting{model_name="m"} 1\n'
             'vllm:kv_cache_usage_perc{model_name="m"} 0.25\n'
             f'vllm:request_prefill_time_seconds_sum{{model_name="m"}} {busy}\n').encode()
        self.send_response(200); self.send_header("Content-Length", str(len(b))); self.end_headers(); self.wfile.write(b)
class S(socketserver.ThreadingMixIn, http.server.HTTPServer): daemon_threads = True
s = S(("127.0.0.1", 0), H)
open(sys.argv[1] + ".t", "w").write(str(s.server_address[1])); os.replace(sys.argv[1] + ".t", sys.argv[1])
s.serve_forever()
"""


def _saturated(folder: str) -> tuple[subprocess.Popen[bytes], str]:
    """A saturated vLLM-style pod whose busy counter follows the wall clock (``evil_engine.py ok``
    counts busy time per scrape, so an agent that scrapes it late reads a lull)."""
    portfile = os.path.join(folder, f"ok-{time.monotonic_ns()}.port")
    proc = subprocess.Popen([sys.executable, "-c", _SATURATED, portfile], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    for _ in range(200):
        if os.path.exists(portfile):
            return proc, f"http://127.0.0.1:{Path(portfile).read_text()}/metrics"
        time.sleep(0.02)
    proc.kill()
    raise AssertionError("the saturated pod did not start")


@pytest.fixture(scope="module")
def healthy() -> Iterator[list[str]]:
    """Three saturated, well-behaved pods for the whole module."""
    with tempfile.TemporaryDirectory() as folder:
        started = [_saturated(folder) for _ in range(3)]
        try:
            yield [url for _, url in started]
        finally:
            for proc, _ in started:
                proc.kill()
                proc.wait()


@dataclass
class Wants:
    """A policy asking ``size(obs)`` replicas (a stand-in for Ebb's: this test is about the data path)."""

    size: Any
    spec: str = "scripted"
    interval_s: float = 1.0
    pipeline: Pipeline = Pipeline(1, 1)

    def decide(self, obs: Observation, *, spans: Spans = NO_SPANS) -> Decision:
        have, n = obs.spec_replicas, self.size(obs)
        return Decision(obs.t_s, action_between(have, n), have, n, policy=self.spec,
                        reasons=("scripted",) if n != have else ())

    def observe(self, obs: Observation) -> None:
        pass

    def gate_queries(self) -> tuple[str, ...]:
        return ()


def sized(obs: Observation) -> int:
    """The busy replicas the newest sample shows, at 90 %: 3 saturated pods of 4 ready → 4 → 5."""
    if obs.fine is None or not len(obs.fine.prefill_replicas):
        return obs.spec_replicas
    return math.ceil(float(obs.fine.prefill_replicas[-1]) / 0.9 - 1e-9)


def controller(policy: Wants, agent_url: str) -> Controller:
    return Controller(policy, AgentSource([agent_url], timeout_s=2.0), FakeActuator(4), MemoryLedger(),
                      ControllerSettings(run_id="hostile", mode="recommend"))  # type: ignore[arg-type]


@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
def test_one_hostile_pod_never_stops_the_scale_up_for_the_others_nor_lets_a_scale_down_through(
        mode: str, healthy: list[str]) -> None:
    with tempfile.TemporaryDirectory() as folder:
        evil, evil_url = _start(mode, folder)
        try:
            with Agent(engine=PROFILES["vllm"], engine_endpoints=[*healthy, evil_url], max_concurrency=4) as agent:
                time.sleep(1.2)  # two scrapes: every healthy pod has a busy share
                up, down = controller(Wants(sized), agent.url), controller(Wants(lambda o: 2), agent.url)
                ups, downs = [], []
                for _ in range(CYCLES):
                    ups.append(up.cycle())
                    downs.append(down.cycle())
                    time.sleep(0.3)
        finally:
            evil.kill()
            evil.wait()
    # Every cycle decides; each asks for the healthy pods' overload, except at most one that read no
    # new sample: a page past the agent's 1 s wall limit delays its bucket's close once per cooldown
    # (nine times the page's CPU time), and a cycle in that second holds (never shrinks).
    assert all(o.action in ("scale_up", "hold") for o in ups), [(o.action, o.note) for o in ups]
    asked = [o for o in ups if o.action == "scale_up"]
    assert len(asked) >= CYCLES - 1 and all(o.to_replicas >= 5 for o in asked), [(o.action, o.note) for o in ups]
    for o in downs:
        if "incomplete fleet" in o.note:
            assert o.action == "veto", (o.action, o.note)
        else:
            assert o.action == "scale_down" and o.note == "", (o.action, o.note)
    if mode in ("ok", "neg", "negsmall", "dup", "reset", "noinf"):
        # a page with a bad series or a counter reset still reports its pod
        assert any(o.action == "scale_down" for o in downs), [(o.action, o.note) for o in downs]
    if mode in ("hang", "binary", "empty", "status500", "huge", "redirect_file"):
        assert all(o.action == "veto" for o in downs), [(o.action, o.note) for o in downs]
    if mode == "quadratic":
        # A valid 3.8 MiB page of escaped quotes: parsed within the 1 s wall limit on a quick moment
        # it is used (ebb.agent.parse_pool), and its pod then rests for 9x the CPU it took, longer than
        # this test; past the limit it is dropped. So at most one complete fleet, never two.
        assert sum(o.action == "scale_down" for o in downs) <= 1, [(o.action, o.note) for o in downs]
        assert sum(o.action == "veto" for o in downs) >= CYCLES - 1, [(o.action, o.note) for o in downs]
