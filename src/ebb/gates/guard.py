"""Gated scale-down: the Ebb policy's scale-downs go behind metrics gates, canaried or checked whole.

Wraps an :class:`~ebb.decide.policy.EbbPolicy` (the same reconcile seam, so the simulator and
the live loop run it unchanged). When the policy wants to remove replicas, the guard removes
``canary_replicas`` (default 1) first — or, with ``canary_replicas=None`` (the post-scale-down SLO
check of a gates file's ``after_scale_down:``), the whole step at once — and runs its metrics gates
(:mod:`ebb.gates.metrics_gate`, Argo AnalysisRun semantics): by default the TTFT P99 of the requests
completed since the step, measured every ``gate.interval_s``. The note's decision table
(:func:`ebb.gates.canary.decide`): step healthy and gates passed → proceed to the policy's target;
either failed → abort and compensate; inconclusive or running → wait, at most ``max_wait_s``, then
abort (fail safe).

Every reconcile returns one :class:`~ebb.model.decision.Decision` (the
:class:`~ebb.decide.base.Policy` seam); the gate steps carry a
:class:`~ebb.model.decision.GateStep`:

* ``canary`` — the inner policy's scale-down decision (its signals, weights, reasons and plan)
  retargeted to ``pre − canary_replicas``, its victims cut to the first ones; ``watch`` — the inner
  policy's whole scale-down, to be checked after the fact;
* ``proceed`` — gates passed and step healthy: ``scale_down`` (``hold`` when already there, always
  after a ``watch``) to the inner's target with the remaining victims;
* ``compensate`` — a gate failed, errored or timed out: a **request to the rollback channel** to
  undo the gated step (SPEC §3.5). The decision says where undoing that one step ends: ``scale_up``
  back to its pre-state ``pre`` (``hold`` when the fleet is already there or above) — what
  :func:`ebb.gates.rollback.plan_compensation` restores for the step alone. The simulator's engine
  applies it as it is; the live controller hands it to the rollback channel
  (:mod:`ebb.live.compensation`), which plans the real undo from the ledger's recorded scale-downs
  (the step and everything it caused) and executes, records, budgets and queues for review.

Cycles waiting on the gate are holds — unless the inner policy, which keeps deciding, asks for a
scale-up (a burst, a latency surge): that ends the step and goes through, since capacity comes back. :func:`canary_counts` counts passes and aborts over a
decision stream (the scorecard's ``canary_passes`` / ``canary_aborts``); :meth:`CanaryGuard.gate_queries`
names the PromQL queries the live controller must measure while a step is gated.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from ebb.decide.policy import EbbPolicy
from ebb.gates.canary import decide as canary_decide
from ebb.gates.metrics_gate import GateSpec, GateState, Measurement, Verdict, step, verdict
from ebb.model.decision import Decision, GateStep, GateStepName, action_between
from ebb.model.ids import ReplicaId
from ebb.model.observation import Observation, Pipeline
from ebb.model.spans import NO_SPANS, Spans

__all__ = ["CanaryGuard", "L1_TTFT_QUERY", "canary_counts", "combine", "ttft_gate"]


L1_TTFT_QUERY = "ttft_p99_ms since the canary step"
"""The built-in gate's query: an L1 signal (the policy's own completions), not PromQL."""


def combine(verdicts: list[Verdict]) -> Verdict:
    """Several gates as one: any fail → fail, any error → error, all pass → pass, any still
    running → running, else inconclusive (some passed, some saw no data)."""
    if "fail" in verdicts:
        return "fail"
    if "error" in verdicts:
        return "error"
    if all(v == "pass" for v in verdicts):
        return "pass"
    return "running" if "running" in verdicts else "inconclusive"


def ttft_gate(slo_ttft_ms: float, margin: float, *, interval_s: float = 10.0, count: int = 3) -> GateSpec:
    """The default gate: TTFT P99 below ``margin`` × SLO at each of ``count`` measurements."""
    limit = margin * slo_ttft_ms
    return GateSpec(query=L1_TTFT_QUERY, success_condition=f"result < {limit:g}",
                    failure_condition=f"result >= {limit:g}", interval_s=interval_s, count=count)


def canary_counts(decisions: Iterable[Decision]) -> tuple[int, int]:
    """(passes, aborts) over a decision stream: its ``proceed`` and ``compensate`` gate steps."""
    passes = aborts = 0
    for d in decisions:
        if d.gate is not None:
            passes += d.gate.step == "proceed"
            aborts += d.gate.step == "compensate"
    return passes, aborts


@dataclass
class _Run:
    """One gated canary step: the plan it came from and the gates' progress."""

    pre: int
    target: int
    victims: tuple[ReplicaId, ...]
    t0: float
    first: int
    states: list[GateState]
    next_s: list[float]
    last: float = math.nan
    """The first gate's latest measurement (NaN = none yet): quoted when the step is compensated."""


@dataclass
class CanaryGuard:
    """Scale-down in canary steps behind a metrics gate; scale-ups pass straight through."""

    inner: EbbPolicy
    gate: GateSpec
    extra_gates: tuple[GateSpec, ...] = ()
    """More gates that must all pass (each measured at its own interval); any failure aborts."""
    canary_replicas: int | None = 1
    """Replicas the first step removes (default 1, the note's canary); None: the whole scale-down,
    checked after the fact (a gates file's ``after_scale_down:``; its first step is a ``watch``)."""
    max_wait_s: float = 60.0
    _run: _Run | None = field(default=None, repr=False)

    @property
    def spec(self) -> str:
        return self.inner.spec

    @property
    def interval_s(self) -> float:
        return self.inner.interval_s

    @property
    def pipeline(self) -> Pipeline:
        return self.inner.pipeline

    def observe(self, obs: Observation) -> None:
        """Ingest ``obs`` without deciding: the inner policy's windows stay warm."""
        self.inner.observe(obs)

    @property
    def react_interval_s(self) -> float | None:
        """The inner policy's fast path period (:class:`~ebb.decide.base.Reactive`)."""
        return self.inner.react_interval_s

    def react(self, obs: Observation, *, spans: Spans = NO_SPANS) -> Decision | None:
        """The inner policy's fast path. A scale-up it asks for ends a canary step in progress: the
        capacity comes back, and the step's gate has nothing left to judge."""
        d = self.inner.react(obs, spans=spans)
        if d is not None and self._run is not None:
            self._run = None
        return d

    def gate_queries(self) -> tuple[str, ...]:
        """While a canary step is gated, the queries of its gates other than the built-in L1 TTFT
        query (which reads the inner policy's own completions); () otherwise."""
        if self._run is None:
            return ()
        return tuple(g.query for g in (self.gate, *self.extra_gates) if g.query != L1_TTFT_QUERY)

    def _value(self, g: GateSpec, obs: Observation, t0: float) -> float | None:
        """A gate's measurement: the live value of its query when the controller measured it; the
        L1 TTFT P99 since the canary step for the built-in TTFT gate; otherwise no data
        (inconclusive — a gate never passes on data it could not see)."""
        if obs.gate_values is not None and g.query in obs.gate_values:
            v = obs.gate_values[g.query]
        elif g.query == L1_TTFT_QUERY:
            v = self.inner.ttft_p99_since(t0)
        else:
            return None
        return None if math.isnan(v) else v

    def decide(self, obs: Observation, *, spans: Spans = NO_SPANS) -> Decision:
        """This reconcile's decision (see the module docstring)."""
        if self._run is None:
            ans = self.inner.decide(obs, spans=spans)
            if ans.action != "scale_down":
                return ans
            pre = obs.spec_replicas
            whole = pre - ans.to_replicas
            first = whole if self.canary_replicas is None else min(self.canary_replicas, whole)
            gates = (self.gate, *self.extra_gates)
            self._run = _Run(pre, ans.to_replicas, ans.victims, obs.t_s, first, [GateState() for _ in gates],
                             [obs.t_s + g.interval_s for g in gates])
            what: GateStepName = "canary" if self.canary_replicas is not None else "watch"
            with spans.layer("ebb.gate.canary") as s:
                s.set(**{"ebb.gate.result": what})
            why = ("canary: canary step before the plan" if what == "canary"
                   else "watch: the whole step, checked by the gates after it")
            # The inner's explanation stays (signals, weights, plan); retarget keeps its first victims.
            return replace(ans.retarget(pre - first, reason=why), gate=GateStep(what, self.gate.query))
        run = self._run
        # The inner policy keeps deciding while the step is gated: a scale-up it asks for (a burst,
        # a latency surge) ends the step and goes through — capacity comes back, the gate is moot.
        # Its scale-down wishes wait for the gate.
        wish = self.inner.decide(obs, spans=spans)
        if wish.action == "scale_up":
            self._run = None
            return wish
        spec = obs.spec_replicas
        due = [i for i, t in enumerate(run.next_s) if obs.t_s + 1e-9 >= t]
        if not due:
            return self._hold(obs.t_s, spec)
        gates = (self.gate, *self.extra_gates)
        for i in due:
            g = gates[i]
            value = self._value(g, obs, run.t0)
            run.states[i] = step(g, run.states[i], Measurement(obs.t_s, value))
            run.next_s[i] = obs.t_s + g.interval_s
            if i == 0:
                run.last = math.nan if value is None else value
        v = combine([verdict(st) for st in run.states])
        healthy = None if obs.queued is None else obs.queued == 0.0
        action = canary_decide(healthy, v, obs.t_s - run.t0, self.max_wait_s)
        if action == "wait":
            return self._hold(obs.t_s, spec)
        self._run = None
        if action == "proceed":
            remaining = run.victims[run.first:] if run.target < spec else ()
            return self._step(obs.t_s, "proceed", spec, run.target, f"gate {v}, canary healthy", v, spans,
                              remaining[:spec - run.target])
        self.inner.note_scale_up(obs.t_s)
        # Back to the gated step's pre-state; the live rollback channel plans the real undo from the ledger.
        return self._step(obs.t_s, "compensate", spec, max(spec, run.pre),
                          f"gate {v} ({self.gate.query} = {run.last:.4g}): abort and undo the gated step "
                          "(rollback channel)", v, spans)

    def _hold(self, t: float, spec: int) -> Decision:
        return Decision(t, "hold", spec, spec, policy=self.spec)

    def _step(self, t: float, what: GateStepName, frm: int, to: int, reason: str, v: Verdict, spans: Spans,
              victims: tuple[ReplicaId, ...] = ()) -> Decision:
        """A ``proceed`` or ``compensate`` step from ``frm`` to ``to``, with its span."""
        with spans.layer("ebb.gate.canary") as s:
            s.set(**{"ebb.gate.result": what, "ebb.gate.verdict": v})
        return Decision(t, action_between(frm, to), frm, to, policy=self.spec, victims=victims,
                        reasons=(f"{what}: {reason}",), gate=GateStep(what, self.gate.query, v))
