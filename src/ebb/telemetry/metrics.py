"""Ebb's own Prometheus metrics: cycles, decisions, vetoes, gate results, latency, staleness.

===================================  =========  ==========================================================
metric                               type       labels / unit
===================================  =========  ==========================================================
``ebb_cycles_total``                 counter    ``result`` = ok | error | skipped
``ebb_decisions_total``              counter    ``action`` = scale_up | scale_down | hold | veto
``ebb_vetoes_total``                 counter    ``reason`` = key before ':' of a veto string
``ebb_gate_results_total``           counter    ``gate``, ``result``
``ebb_compensation_seconds``         histogram  rollback requested (a gate failed, an operator's retry picked
                                               up) → its last compensating scale-up applied
``ebb_compensations_total``          counter    ``result`` = compensated | review (enqueued for manual review)
``ebb_data_staleness_seconds``       gauge      age of the newest sample at the last cycle (NaN: none yet)
``ebb_cycle_duration_seconds``       histogram  wall time of one cycle
``ebb_leader``                       gauge      1 while this replica holds the leader lease
``ebb_agent_clock_offset_seconds``   gauge      ``agent``: its clock minus the controller's (agents that stamp
                                               their pages; corrected past half a bucket)
``ebb_desired_replicas``             gauge      ``namespace``, ``deployment``, ``mode`` = act | recommend | handoff:
                                               the replicas Ebb decided for the target at its last cycle
``ebb_current_replicas``             gauge      same labels: the target's ``spec.replicas`` as last read
``ebb_ledger_write_errors_total``    counter
``ebb_telemetry_errors_total``       counter    ``where`` = the method that swallowed an error
===================================  =========  ==========================================================

Guarantees:

* **Bounded label sets.** Free-form labels (veto reasons, gate names and results) keep their first
  20 distinct values per label; later ones are counted as ``other``. Unknown cycle results and
  decision actions are counted as ``other`` (and as a telemetry error). So one process exposes at
  most ~500 series whatever it is fed, plus two replica gauges per scale target (at most
  10,000 targets).
* **Never raises.** Every method catches its own errors and counts them in
  ``ebb_telemetry_errors_total{where}``; the decision loop cannot be broken by its metrics.
* **Private registry.** Each :class:`EbbMetrics` has its own registry unless given one; the global
  ``prometheus_client.REGISTRY`` is never touched, so instances (and tests) do not collide.
"""

from __future__ import annotations

import functools
import logging
import math
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Concatenate, Final, ParamSpec, TypeVar
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import start_http_server

__all__ = ["EbbMetrics", "MAX_LABEL_VALUES", "veto_key"]

MAX_LABEL_VALUES: Final = 20
"""Distinct values a free-form label keeps before mapping new ones to ``other``."""
MAX_TARGETS: Final = 10_000
"""Scale targets the replica gauges keep (a fleet of 10,000 workloads: two series each)."""
CYCLE_RESULTS: Final = ("ok", "error", "skipped")
COMPENSATION_RESULTS: Final = ("compensated", "review")
ACTIONS: Final = ("scale_up", "scale_down", "hold", "veto")
COMPENSATION_BUCKETS_S: Final = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
CYCLE_BUCKETS_S: Final = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0)

_log = logging.getLogger(__name__)
_P = ParamSpec("_P")
_R = TypeVar("_R")


def veto_key(reason: str) -> str:
    """The short, bounded key of a veto string: ``"warming up: 3 s of history < 30 s"`` → ``"warming up"``."""
    key = reason.split(":", 1)[0].strip()
    return key or "other"


def _swallow(method: Callable[Concatenate[EbbMetrics, _P], None]
             ) -> Callable[Concatenate[EbbMetrics, _P], None]:
    """Make ``method`` count its failures in ``ebb_telemetry_errors_total`` instead of raising."""

    @functools.wraps(method)
    def wrapper(self: EbbMetrics, /, *args: _P.args, **kwargs: _P.kwargs) -> None:
        try:
            method(self, *args, **kwargs)
        except Exception:
            self.telemetry_error(method.__name__)

    return wrapper


class _Bounded:
    """First ``limit`` distinct values pass; later ones become ``other`` (thread-safe)."""

    def __init__(self, limit: int = MAX_LABEL_VALUES, initial: Iterable[str] = ()) -> None:
        self._limit = limit
        self._seen: set[str] = set(initial)
        self._lock = threading.Lock()

    def __call__(self, value: str) -> str:
        with self._lock:
            if value in self._seen:
                return value
            if len(self._seen) < self._limit:
                self._seen.add(value)
                return value
        return "other"


class EbbMetrics:
    """The controller's metrics on ``registry`` (a private one by default)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        r = self.registry
        self._cycles = Counter("ebb_cycles", "Decision cycles by result.", ["result"], registry=r)
        self._decisions = Counter("ebb_decisions", "Decisions by action.", ["action"], registry=r)
        self._vetoes = Counter("ebb_vetoes", "Scale-down vetoes by reason key.", ["reason"], registry=r)
        self._gates = Counter("ebb_gate_results", "Gate verdicts.", ["gate", "result"], registry=r)
        self._compensation = Histogram(
            "ebb_compensation_seconds", "Seconds from a rollback requested (a gate failed after a "
            "scale-down, an operator's retry picked up) to its last compensating scale-up applied.",
            buckets=COMPENSATION_BUCKETS_S, registry=r)
        self._compensations = Counter("ebb_compensations", "Rollback-channel compensations by result.",
                                      ["result"], registry=r)
        self._staleness = Gauge("ebb_data_staleness_seconds",
                                "Age of the newest sample at the last cycle (s).", registry=r)
        self._duration = Histogram("ebb_cycle_duration_seconds", "Wall time of one decision cycle.",
                                   buckets=CYCLE_BUCKETS_S, registry=r)
        self._leader = Gauge("ebb_leader", "1 while this replica holds the leader lease.", registry=r)
        self._clock_offset = Gauge("ebb_agent_clock_offset_seconds",
                                   "Each agent's clock minus the controller's (s; median of its last 5 pages).",
                                   ["agent"], registry=r)
        self._agent = _Bounded()
        self._desired = Gauge("ebb_desired_replicas", "Replicas Ebb decided for the target at its last cycle "
                              "(handoff: what an HPA/KEDA should apply).", ["namespace", "deployment", "mode"],
                              registry=r)
        self._current = Gauge("ebb_current_replicas", "The target's spec.replicas as Ebb last read it.",
                              ["namespace", "deployment", "mode"], registry=r)
        self._target = _Bounded(MAX_TARGETS)
        self._ledger_errors = Counter("ebb_ledger_write_errors",
                                      "Failed writes to the decision ledger.", registry=r)
        self._errors = Counter("ebb_telemetry_errors", "Errors swallowed by Ebb's telemetry.",
                               ["where"], registry=r)
        self._reason = _Bounded()
        self._gate_name = _Bounded()
        self._gate_result = _Bounded()
        # Zero series for the fixed label values, so rate() works from the first scrape.
        for result in CYCLE_RESULTS:
            self._cycles.labels(result=result)
        for action in ACTIONS:
            self._decisions.labels(action=action)
        for result in COMPENSATION_RESULTS:
            self._compensations.labels(result=result)
        # NaN = unknown: a 0 before the first cycle would read as "perfectly fresh".
        self._staleness.set(math.nan)
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None
        self._serve_lock = threading.Lock()

    def telemetry_error(self, where: str) -> None:
        """Count an error swallowed by telemetry (``where``: a short, fixed name such as ``tracing``)."""
        try:
            self._errors.labels(where=where).inc()
        except Exception:
            pass  # the error counter is the last resort; nothing left to report to

    @_swallow
    def cycle(self, result: str, duration_s: float | None = None) -> None:
        """One cycle ended with ``result`` (ok | error | skipped), taking ``duration_s`` seconds."""
        if result not in CYCLE_RESULTS:
            self.telemetry_error("cycle")
            result = "other"
        self._cycles.labels(result=result).inc()
        if duration_s is not None:
            self._duration.observe(duration_s)

    @_swallow
    def observe_cycle(self, action: str, duration_s: float, staleness_s: float | None) -> None:
        """A cycle as the controller reports it: ``action`` from its outcome (``error`` → result
        error, ``follower`` → skipped, any decision → ok), its wall time and data staleness
        (None: no data yet, exposed as NaN)."""
        result = {"error": "error", "follower": "skipped", "skipped": "skipped"}.get(action, "ok")
        self._cycles.labels(result=result).inc()
        self._duration.observe(duration_s)
        self._staleness.set(math.nan if staleness_s is None else staleness_s)

    @_swallow
    def replicas(self, target: str, mode: str, *, current: int, desired: int) -> None:
        """Set ``ebb_current_replicas`` / ``ebb_desired_replicas`` for ``target`` (``namespace/deployment``;
        a name without ``/`` is namespace ``""``); at most :data:`MAX_TARGETS` targets, then ``other``."""
        namespace, _, deployment = self._target(target).rpartition("/")
        labels = {"namespace": namespace, "deployment": deployment, "mode": mode}
        self._current.labels(**labels).set(current)
        self._desired.labels(**labels).set(desired)

    @_swallow
    def agent_clock_offsets(self, offsets_s: Mapping[str, float]) -> None:
        """Set ``ebb_agent_clock_offset_seconds{agent}`` for each measured agent (label set bounded)."""
        for agent, offset in offsets_s.items():
            self._clock_offset.labels(agent=self._agent(agent)).set(offset)

    @_swallow
    def decision(self, action: str, veto_reasons: Iterable[str] = ()) -> None:
        """One decision; ``veto_reasons`` (the full veto strings) also count in ``ebb_vetoes_total``."""
        if action not in ACTIONS:
            self.telemetry_error("decision")
            action = "other"
        self._decisions.labels(action=action).inc()
        self.vetoes(veto_reasons)

    @_swallow
    def vetoes(self, reasons: Iterable[str]) -> None:
        """Count each veto string under its short key (``veto_key``), label set bounded."""
        for reason in reasons:
            self._vetoes.labels(reason=self._reason(veto_key(reason))).inc()

    @_swallow
    def gate_result(self, gate: str, result: str) -> None:
        """A gate's verdict (e.g. ``qos``, ``pass``); both labels bounded."""
        self._gates.labels(gate=self._gate_name(gate), result=self._gate_result(result)).inc()

    @_swallow
    def compensation(self, seconds: float) -> None:
        """Latency from a rollback requested to its last compensating scale-up applied (a completed
        compensation; one that went to review is counted by :meth:`compensation_result` only)."""
        self._compensation.observe(seconds)

    @_swallow
    def compensation_result(self, result: str) -> None:
        """A compensation ended: ``compensated`` or ``review``; anything else counts as ``other`` (and a
        telemetry error)."""
        if result not in COMPENSATION_RESULTS:
            self.telemetry_error("compensation_result")
            result = "other"
        self._compensations.labels(result=result).inc()

    @_swallow
    def staleness(self, seconds: float) -> None:
        """Age of the newest sample seen by the last cycle."""
        self._staleness.set(seconds)

    @_swallow
    def set_leader(self, is_leader: bool) -> None:
        """1 while this replica holds the leader lease, else 0."""
        self._leader.set(1 if is_leader else 0)

    @_swallow
    def ledger_write_error(self) -> None:
        """A write to the decision ledger failed."""
        self._ledger_errors.inc()

    def exposition(self) -> bytes:
        """The registry in the Prometheus text format (b"" if rendering failed, counted)."""
        try:
            return generate_latest(self.registry)
        except Exception:
            self.telemetry_error("exposition")
            return b""

    def serve(self, port: int = 0, bind: str = "127.0.0.1") -> str:
        """Serve ``/metrics`` on ``bind``:``port`` (0 = any free) from a daemon thread; returns the URL.

        ``bind`` defaults to loopback (a developer's machine); in a pod pass ``0.0.0.0`` (or the pod
        IP) so the kubelet's probes and Prometheus' scrapes, which target the pod IP, reach it.
        Calling again returns the running server's URL. Like every method here it never raises: a
        port that cannot be bound is logged at ERROR, counted, and answered with ``""``.
        """
        with self._serve_lock:
            try:
                if self._server is None:
                    self._server, self._thread = start_http_server(port, addr=bind, registry=self.registry)
                host = "127.0.0.1" if bind in ("0.0.0.0", "::", "") else bind
                host = f"[{host}]" if ":" in host else host
                return f"http://{host}:{self._server.server_port}/metrics"
            except Exception as exc:
                self.telemetry_error("serve")
                _log.error("cannot serve metrics on %s:%s (%s); pick a free port or 0", bind, port, exc)
                return ""

    def stop(self) -> None:
        """Stop the server started by :meth:`serve` and close its socket (no-op if none)."""
        with self._serve_lock:
            server, thread = self._server, self._thread
            self._server = self._thread = None
        if server is None:
            return
        try:
            server.shutdown()
            server.server_close()
            if thread is not None:
                thread.join(timeout=5.0)
        except Exception:
            self.telemetry_error("stop")
