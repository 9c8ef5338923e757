"""``ebb demo --live``: the whole live loop on one machine, driven by a real trace.

What runs (all on 127.0.0.1, free ports, a temporary work dir):

* a router and ``initial`` worker processes (:mod:`ebb.demo.worker`: continuous batching with the
  calibrated H200 service times, divided by ``speed``), scaled by :class:`~ebb.actuate.local.LocalActuator`;
* an Ebb agent polling router and workers into 100 ms buckets;
* the real Prometheus server (Debian's ``prometheus``), scraping router, agent and workers every
  second (workers through a file-SD targets file the actuator rewrites) — skipped with a message
  when the binary is absent, the controller then reads the agent directly;
* the controller (:class:`~ebb.live.controller.Controller`) in ``act`` mode with a SQLite ledger — or,
  with ``mode="recommend"`` (``ebb demo --live --mode recommend``), beside the workers it does not
  scale, running Ebb's own fleet and recording one shadow row a minute for ``ebb shadow report``
  (:mod:`ebb.live.shadow`; the workers stay as started unless a hook scales them, as a team's own
  autoscaler would);
* a load generator replaying ``trace`` from ``start_s`` for ``minutes`` of wall time, ``time_scale``
  times faster than recorded.

With ``engine="llamacpp"`` (``ebb demo --live --engine llamacpp``, settings from
:func:`llamacpp_settings`) the workers are real ``llama-server`` processes (:mod:`ebb.demo.llamacpp`:
the binary built by ``scripts/build-llama-server.sh``, a tiny random-weight model with a real
vocabulary, ``--metrics``, ``max_batch`` parallel slots, one CPU thread each), the router speaks
llama.cpp's ``/completion``, the agent reads the router's ``/stats`` and every server's ``/metrics``
through the ``llamacpp`` engine profile, and the trace's token counts are scaled to what CPU
inference serves (``tokens_in_scale`` … ``max_tokens_out``). The source is the agent (Prometheus'
``ebb_worker_*`` queries do not apply to llama.cpp's names).

With ``tier`` (``ebb demo --live --tier asleep:wake_s=2,max=4``) the workers speak vLLM's sleep
endpoints (:mod:`ebb.demo.worker`, waking in ``wake_s``) — or, with ``engine="llamacpp"``, every
``llama-server`` starts with ``--sleep-idle-seconds`` :attr:`DemoSettings.sleep_idle_s` and a drained
one falls asleep by itself (:class:`~ebb.actuate.sleep_modes.LlamaIdleSleep`) — the actuator puts drained victims to sleep
and wakes them first (:class:`~ebb.actuate.local.LocalActuator` with the tier), the policy counts on
them as ``ebb simulate --tier`` does, and the result says how many sleeps, wakes and failed wakes
happened (:attr:`DemoResult.sleep`).

The default window of the bundled Azure code trace (minutes 22–28 of the slice) opens on the slice's
busiest stretch after its first quarter hour and calms down with smaller bursts, so a 3-minute run at
``time_scale=2`` shows the fleet shrinking as the comeback bound allows while every burst is served
within the SLO. (Minutes 9–15 hold the trace's largest burst, 1.75× any before it, after a lull: a
fleet sized on what it had seen meets it short by more than a cold start can repair — ``docs/live.md``
shows that run.) The report is :mod:`ebb.score.report`'s, filled from what really happened
(:mod:`ebb.demo.report`).
"""

from __future__ import annotations

import logging
import math
import tempfile
import threading
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ebb.actuate.base import Actuator
from ebb.actuate.local import LocalActuator
from ebb.actuate.local_sleep import SleepCounts
from ebb.agent.server import Agent
from ebb.config.tiers import SleepTier
from ebb.decide.base import Sleeps
from ebb.errors import ConfigError, InputError, MissingExtraError
from ebb.ledger import open_ledger
from ebb.live.controller import Controller, ControllerSettings, CycleOutcome
from ebb.live.settings import Mode
from ebb.demo.loadgen import LoadGenerator, LoadResults
from ebb.live.policy_spec import build_live_policy, replica_bounds
from ebb.live.shadow import ShadowRecorder, shadowed
from ebb.demo.report import FleetSample, LiveRun, live_policy_run
from ebb.demo.router import Router
from ebb.model.trace import RequestTrace
from ebb.model.trace_ops import window
from ebb.score.report import write_report
from ebb.score.results import PolicyRun
from ebb.sources.agents import AgentSource
from ebb.sources.live import SignalSource
from ebb.sources.prometheus import PrometheusClient, PrometheusSource
from ebb.sources.traces import open_trace
from ebb.telemetry.metrics import EbbMetrics
from ebb.telemetry.tracing import CycleTracer
from ebb.demo.local_prometheus import PROMETHEUS_INSTALL, LocalPrometheus, prometheus_binary, write_config

__all__ = ["DEMO_POLICY", "ENGINES", "DemoResult", "DemoSettings", "LiveDemo", "llamacpp_settings", "load_window"]

ENGINES = ("ebb", "llamacpp")

_SPAWN_S = 1.0
"""A worker process's start before its warm-up (interpreter or llama-server and model load): the
demo's cold start is ``warmup_s`` plus this, and the policy raises it to what it measures."""

log = logging.getLogger(__name__)

DEMO_POLICY = "ebb:profile=balanced"
"""The balanced profile as ``ebb simulate`` runs it. Its memories are counted in comeback horizons
(cold start + a cycle), so with the demo's workers ready in seconds it remembers minutes without a
knob: the fleet is described by its cold start (:attr:`DemoSettings.warmup_s`), not the policy tuned."""


@dataclass(frozen=True)
class DemoSettings:
    """One live demo run. Every field: unit, default, why."""

    minutes: float = 3.0
    """Wall minutes to run (the trace window is ``minutes × time_scale`` long)."""
    trace: str = "azure-code"
    """Bundled trace name or a trace file (any format ``ebb simulate`` reads)."""
    start_s: float = 1320.0
    """Trace second where the window starts (default: minute 22 of the Azure code slice, a busy
    stretch calming down; see the module docstring)."""
    time_scale: float = 2.0
    """Replay speed-up: 2 plays two trace minutes per wall minute."""
    rate_scale: float = 1.0
    """Share of the trace's requests sent (Bernoulli thinning), ≤ 1."""
    speed: float = 0.5
    """Worker speed-up over the H200 model; 0.5 = twice as slow, so the trace's real request rate
    (×2) needs a handful of worker processes (one real H200 would absorb the whole slice)."""
    max_batch: int = 8
    """Batch slots per worker."""
    warmup_s: float = 3.0
    """Worker cold start (s) before it takes traffic."""
    initial: int = 6
    """Workers at start (sized for the window's opening busy phase)."""
    max_replicas: int = 12
    """Upper bound for the policy."""
    policy: str = DEMO_POLICY
    """The controller's policy spec (``ebb:...``, see :mod:`ebb.live.policy_spec`)."""
    source: str = "auto"
    """``prometheus``, ``agents`` or ``auto`` (Prometheus when installed, else the agent)."""
    slo_ttft_ms: float = 2000.0
    slo_e2e_ms: float = 60000.0
    workdir: Path | None = None
    """Where the ledger, Prometheus TSDB and logs go; None = a fresh temporary directory."""
    report: Path | None = Path("ebb-live-report.html")
    """HTML report path; None = no report."""
    run_id: str = "live-demo"
    engine: str = "ebb"
    """``ebb`` (emulated workers, :mod:`ebb.demo.worker`) or ``llamacpp`` (real ``llama-server``)."""
    tokens_in_scale: float = 1.0
    """Prompt tokens sent = ceil(trace's × this), then capped by ``max_tokens_in``."""
    tokens_out_scale: float = 1.0
    """Output tokens sent = ceil(trace's × this), then capped by ``max_tokens_out``."""
    max_tokens_in: int | None = None
    max_tokens_out: int | None = None
    context_tokens: int = 512
    """llamacpp: KV context per slot (tokens); ``max_tokens_in + max_tokens_out`` must fit."""
    tier: SleepTier | None = None
    """An asleep tier (``--tier asleep:wake_s=2,max=4``): victims sleep, scale-ups wake them; None: none."""
    sleep_idle_s: int = 2
    """llamacpp with a tier: the servers' ``--sleep-idle-seconds`` (a drained server reads asleep 2-3 s
    after its drain; a routed one idle that long unloads too and reloads on its next request)."""
    mode: Mode = "act"
    """``act``: the controller scales the workers. ``recommend``: it scales nothing and runs Ebb's own
    fleet beside them, one shadow row a minute in the ledger (``ebb shadow report``)."""

    def __post_init__(self) -> None:
        # Validate first (``ebb demo --live`` flags): before a worker, Prometheus or the load starts.
        for flag, value, example in (("--minutes", self.minutes, "3"), ("--time-scale", self.time_scale, "2")):
            if not (math.isfinite(value) and value > 0):
                raise ConfigError(f"{flag} {value!r}: must be a finite number > 0 (fix: e.g. {flag} {example})")
        if not (math.isfinite(self.warmup_s) and 0 <= self.warmup_s <= 3600):
            raise ConfigError(f"--warmup-s {self.warmup_s!r}: must be in [0, 3600] s (fix: e.g. --warmup-s 3)")
        if not (math.isfinite(self.start_s) and self.start_s >= 0):
            raise ConfigError(f"--start-s {self.start_s!r}: must be a finite number >= 0 (fix: e.g. --start-s 1320)")
        if self.engine not in ENGINES:
            raise ConfigError(f"engine must be one of {', '.join(ENGINES)}, got {self.engine!r}")
        if self.mode not in ("act", "recommend"):
            raise ConfigError(f"--mode {self.mode!r}: must be act or recommend (fix: --mode recommend to run Ebb "
                              "beside the workers without scaling them)")
        if self.mode == "recommend" and self.tier is not None:
            raise ConfigError("--tier: only act mode puts workers to sleep (fix: --mode act, or leave --tier out)")
        if self.engine == "llamacpp":
            if self.source == "prometheus":
                raise ConfigError("the llamacpp demo reads the agent (source agents or auto): the Prometheus "
                                  "source's ebb_worker_* queries do not match llama.cpp's metric names")
            if self.max_tokens_in is None or self.max_tokens_out is None or \
                    self.max_tokens_in + self.max_tokens_out > self.context_tokens:
                raise ConfigError(f"the llamacpp demo needs max_tokens_in + max_tokens_out ≤ context_tokens="
                                  f"{self.context_tokens} (a longer request would be refused by llama-server); "
                                  f"got {self.max_tokens_in} + {self.max_tokens_out}")


LLAMACPP_DEFAULTS: dict[str, Any] = {
    "engine": "llamacpp", "source": "agents", "max_batch": 2, "initial": 4, "max_replicas": 6,
    "time_scale": 2.0, "rate_scale": 1.0, "tokens_in_scale": 1 / 16, "tokens_out_scale": 2.0,
    "max_tokens_in": 256, "max_tokens_out": 192, "context_tokens": 512, "run_id": "live-demo-llamacpp",
}
"""Measured on this project's 2-core machine (docs/live.md, "Real llama.cpp servers"). Four servers at
start, not three: the comeback floor on this window is 1.3–1.8 servers, so from 3 the first scale-down
(to 2) had a margin of under 0.4 of a server and one noisy run in CI saw none; from 4 it has 1.2."""


def llamacpp_settings(**overrides: Any) -> DemoSettings:
    """The llama.cpp demo's settings (:data:`LLAMACPP_DEFAULTS`) with ``overrides`` (DemoSettings fields)."""
    return DemoSettings(**{**LLAMACPP_DEFAULTS, **overrides})


@dataclass
class DemoResult:
    """What a demo run produced (also what the integration test checks)."""

    outcomes: list[CycleOutcome]
    load: LoadResults
    policy_run: PolicyRun
    ledger_path: Path
    source: str
    prometheus_url: str | None
    report: Path | None
    notes: list[str] = field(default_factory=list)
    sleep: SleepCounts | None = None
    """With a tier: the sleeps, wakes, failed wakes and releases the actuator made; None without."""
    sleep_mechanism: str = ""
    """With a tier: how the workers slept and woke (:attr:`~ebb.actuate.sleep_modes.SleepMode.describe`)."""


def load_window(name: str, start_s: float, length_s: float) -> RequestTrace:
    """``length_s`` seconds of a request trace from ``start_s``, re-based to start at 0."""
    tr = open_trace(name)
    if not isinstance(tr, RequestTrace):
        raise InputError("the live demo replays request logs (one row per request), not count series",
                         path=name, fix="pass a request trace such as azure-code or azure-conv")
    return window(tr, start_s, start_s + length_s)


class LiveDemo:
    """Starts every component, runs the controller for ``minutes``, stops everything, reports."""

    def __init__(self, settings: DemoSettings, *, tracer: CycleTracer | None = None,
                 on_cycle: Callable[[CycleOutcome, LiveDemo], None] | None = None,
                 hooks: dict[float, Callable[[LiveDemo], None]] | None = None) -> None:
        self.s = settings
        self.tracer = tracer
        self.on_cycle = on_cycle
        self.hooks = dict(hooks or {})
        """Callbacks at wall seconds since start (tests kill and restart Prometheus this way)."""
        self.prometheus: LocalPrometheus | None = None
        self.actuator: LocalActuator | None = None
        self.router: Router | None = None
        self.loadgen: LoadGenerator | None = None
        self.controller: Controller | None = None
        self.shadow: ShadowRecorder | None = None
        """The shadow recorder in recommend mode (:mod:`ebb.live.shadow`); None in act mode."""
        self.fleet: list[FleetSample] = []
        self.notes: list[str] = []

    def _source(self, stack: ExitStack, work: Path, agent_url: str, router_url: str) -> tuple[SignalSource, str]:
        want = self.s.source
        binary = prometheus_binary() if want in ("auto", "prometheus") and self.s.engine == "ebb" else None
        if binary is None:
            if want == "prometheus":
                raise MissingExtraError(f"the prometheus binary is not installed ({PROMETHEUS_INSTALL})")
            if want == "auto" and self.s.engine == "ebb":
                self.notes.append(f"Prometheus not found — skipping it (install: {PROMETHEUS_INSTALL}); "
                                  "the controller reads the agent directly")
            return AgentSource([agent_url]), "agents"
        targets = work / "workers.json"
        cfg = write_config(work / "prometheus.yml", [
            {"job_name": "ebb-router", "static_configs": [{"targets": [router_url.removeprefix("http://")]}]},
            {"job_name": "ebb-agent", "static_configs": [{"targets": [agent_url.removeprefix("http://")]}]},
            {"job_name": "ebb-worker", "file_sd_configs": [{"files": [str(targets.resolve())],
                                                            "refresh_interval": "1s"}]},
        ], scrape_interval_s=1.0)
        self.prometheus = LocalPrometheus(binary, work / "tsdb", cfg, log_path=work / "prometheus.log")
        self.prometheus.start()
        stack.callback(self.prometheus.stop)
        return PrometheusSource(PrometheusClient(self.prometheus.url)), "prometheus"

    def run(self) -> DemoResult:
        s = self.s
        length_s = s.minutes * 60.0
        trace = load_window(s.trace, s.start_s, length_s * s.time_scale)
        with ExitStack() as stack:
            work = s.workdir or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="ebb-live-")))
            work.mkdir(parents=True, exist_ok=True)
            self.router = Router()
            router_url = self.router.start()
            stack.callback(self.router.stop)
            policy = build_live_policy(s.policy, slo_ttft_ms=s.slo_ttft_ms, slo_e2e_ms=s.slo_e2e_ms,
                                       initial=s.initial, max_replicas=s.max_replicas,
                                       cold_start_s=s.warmup_s + _SPAWN_S, tier=s.tier)
            tier = s.tier if isinstance(policy, Sleeps) and policy.sleeps else None
            if s.tier is not None and tier is None:
                self.notes.append(f"policy {policy.spec} does not sleep (as in ebb simulate): --tier ignored")
            launcher, engine = None, None
            if s.engine == "llamacpp":
                from ebb.demo.llamacpp import LlamaServerLauncher, llama_server_binary, tiny_model
                from ebb.sources.engines.profiles import engine_profile
                (work / "llama-logs").mkdir(exist_ok=True)
                launcher = LlamaServerLauncher(llama_server_binary(), tiny_model(), work / "llama-logs",
                                               slots=s.max_batch, context_tokens=s.context_tokens,
                                               sleep_idle_s=None if tier is None else s.sleep_idle_s)
                engine = engine_profile("llamacpp")
            self.actuator = LocalActuator(self.router, name="local/serving", initial=s.initial,
                                          max_batch=s.max_batch, warmup_s=s.warmup_s, speed=s.speed,
                                          targets_file=work / "workers.json", state_file=work / "actuator.json",
                                          launcher=launcher, tier=tier)
            stack.callback(self.actuator.close)
            self.actuator.wait_ready(timeout_s=60.0 + s.warmup_s)
            # llamacpp: the router's /stats (client view, queue) plus every server's /metrics it lists
            agent = Agent(endpoints_from=router_url, name="demo-agent", engine=engine,
                          max_concurrency=s.max_batch if engine is not None else None)
            agent_url = agent.start()
            stack.callback(agent.stop)
            source, kind = self._source(stack, work, agent_url, router_url)
            ledger_path = work / "ledger.sqlite"
            ledger = open_ledger(str(ledger_path), writer=True)
            stack.callback(ledger.close)
            lo, hi = replica_bounds(policy)
            settings = ControllerSettings(run_id=s.run_id, target="local/serving", mode=s.mode, keep_outcomes=None,
                                          min_replicas=lo, max_replicas=hi,
                                          react_interval_s=0.1 if kind == "agents" else 0.0)
            acting: Actuator = self.actuator
            watchers: list[Callable[[CycleOutcome], None]] = []
            if s.mode == "recommend":  # Ebb's own fleet beside the workers, a ledger row a minute
                acting, self.shadow = shadowed(self.actuator, ledger, settings, policy)
                watchers += [acting.follow, self.shadow]
                stack.callback(self.shadow.close)  # the minute under way, before the ledger closes
            self.controller = Controller(policy, source, acting, ledger, settings, tracer=self.tracer,
                                         metrics=EbbMetrics(), watchers=watchers)
            stack.callback(self.controller.close)  # its compensation log, before the ledger it sits beside
            self.loadgen = LoadGenerator(router_url, trace, time_scale=s.time_scale, rate_scale=s.rate_scale,
                                         tokens_in_scale=s.tokens_in_scale, tokens_out_scale=s.tokens_out_scale,
                                         max_tokens_in=s.max_tokens_in, max_tokens_out=s.max_tokens_out)
            t0 = time.time()
            self.loadgen.start(duration_s=length_s)
            stop = threading.Event()
            # Hooks run on timers, not in the controller's thread: restarting a server blocks.
            timers = [threading.Timer(at, hook, args=(self,)) for at, hook in sorted(self.hooks.items())]
            for tm in timers:
                tm.daemon = True
                tm.start()
                stack.callback(tm.cancel)

            def each(out: CycleOutcome) -> None:
                st = self.actuator.state() if self.actuator is not None else None
                if st is not None:
                    self.fleet.append(FleetSample(time.time() - t0, st.spec_replicas, st.ready_replicas, st.draining))
                if self.on_cycle is not None:
                    self.on_cycle(out, self)
                if time.time() - t0 >= length_s:
                    stop.set()

            self.controller.run(stop, on_cycle=each)
            load = self.loadgen.stop(wait_s=60.0)
            end = time.time()
            sleep = None if tier is None else self.actuator.sleep_counts()
            mode = self.actuator.sleep_mode
        decisions = tuple((o.t_s - (t0 - self.controller.t0), o.spec_replicas, o.to_replicas)
                          for o in self.controller.outcomes if o.acted)
        live = LiveRun(policy=policy.spec, trace=f"{trace.name} [{s.start_s:g} s +{length_s * s.time_scale:g} s, "
                                                 f"x{s.time_scale:g}]",
                       sent_s=load.sent_s - t0, ok=load.ok, ttft_ms=load.ttft_ms, e2e_ms=load.e2e_ms,
                       fleet=self.fleet, decisions=decisions, duration_s=end - t0, slo_ttft_ms=s.slo_ttft_ms,
                       slo_e2e_ms=s.slo_e2e_ms)
        prun = live_policy_run(live)
        sleep_mechanism = "" if mode is None else mode.describe
        if s.report is not None:
            write_report(s.report, [prun], title="Ebb live demo — what really happened",
                         trace_desc=live.trace,
                         settings={"source": kind, "workers": _workers_desc(s),
                                   "policy": policy.spec, "requests sent": f"{len(load.sent_s):,}",
                                   "failed requests": str(load.failed),
                                   **({} if sleep is None or tier is None else {
                                       "asleep tier": tier.describe(), "sleep mechanism": sleep_mechanism,
                                       "sleeps / wakes / failed wakes":
                                       f"{sleep.sleeps} / {sleep.wakes} / {sleep.failed_wakes}",
                                       "slowest wake": f"{sleep.slowest_wake_s:.2f} s (wake_s {tier.wake_s:g})"})})
        return DemoResult(list(self.controller.outcomes), load, prun, ledger_path, kind,
                          None if self.prometheus is None else self.prometheus.url, s.report, self.notes, sleep,
                          sleep_mechanism)


def _workers_desc(s: DemoSettings) -> str:
    if s.engine == "llamacpp":
        return (f"llama-server, {s.max_batch} slots × {s.context_tokens} tokens, 1 thread; tokens in ×{s.tokens_in_scale:g} "
                f"≤ {s.max_tokens_in}, out ×{s.tokens_out_scale:g} ≤ {s.max_tokens_out}")
    return f"max batch {s.max_batch}, speed x{s.speed:g}, warm-up {s.warmup_s:g} s"


def recent_load(load: LoadResults, now_s: float, window_s: float = 10.0) -> tuple[float, float]:
    """(requests/s sent, TTFT P99 ms of the answered ones) over the last ``window_s`` seconds."""
    m = load.sent_s > now_s - window_s
    ttft = load.ttft_ms[m & load.ok]
    return float(m.sum()) / window_s, float(np.percentile(ttft, 99)) if len(ttft) else float("nan")


def describe(out: CycleOutcome) -> dict[str, Any]:
    """One cycle as a row of the live terminal view."""
    return {"t": f"{out.t_s:6.0f}s", "replicas": f"{out.spec_replicas}→{out.to_replicas}",
            "ready": out.ready_replicas, "action": out.action,
            "stale": "-" if out.staleness_s is None else f"{out.staleness_s:.1f}s", "note": out.note}
