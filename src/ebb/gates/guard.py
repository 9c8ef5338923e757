"""Canary scale-down guard: the Ebb policy's scale-downs go one replica first, then a gate.

Wraps an :class:`~ebb.decide.policy.EbbPolicy` (the same reconcile seam, so the simulator and
the live loop run it unchanged). When the policy wants to remove replicas, the guard removes
``canary_replicas`` (default 1) first and runs a metrics gate (:mod:`ebb.gates.metrics_gate`,
Argo AnalysisRun semantics) on the TTFT P99 of the requests completed since the canary step,
measured every ``gate.interval_s``. The note's decision table (:func:`ebb.gates.canary.decide`):
canary healthy and gate passed → proceed to the policy's target; either failed → abort and
compensate (restore the pre-state); inconclusive or running → wait, at most ``max_wait_s``,
then abort (fail safe). Counters ``passes`` / ``aborts`` feed the scorecard; every step is
appended to the policy's explanation log.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from ebb.decide.policy import EbbPolicy
from ebb.gates.canary import decide as canary_decide
from ebb.gates.metrics_gate import GateSpec, GateState, Measurement, Verdict, step, verdict
from ebb.model.observation import Observation, Pipeline, ScaleRequest


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


@dataclass
class CanaryGuard:
    """Scale-down in canary steps behind a metrics gate; scale-ups pass straight through."""

    inner: EbbPolicy
    gate: GateSpec
    extra_gates: tuple[GateSpec, ...] = ()
    """More gates that must all pass (each measured at its own interval); any failure aborts."""
    canary_replicas: int = 1
    max_wait_s: float = 60.0
    passes: int = 0
    aborts: int = 0
    _run: dict[str, Any] | None = field(default=None, repr=False)

    @property
    def spec(self) -> str:
        return self.inner.spec

    @property
    def interval_s(self) -> float:
        return self.inner.interval_s

    @property
    def pipeline(self) -> Pipeline:
        return self.inner.pipeline

    @property
    def log(self) -> list[dict[str, Any]]:
        return self.inner.log

    @property
    def gates(self) -> tuple[GateSpec, ...]:
        return (self.gate, *self.extra_gates)

    @property
    def active(self) -> bool:
        """True while a canary step is being gated (the live controller then measures the queries)."""
        return self._run is not None

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

    def decide(self, obs: Observation) -> int | ScaleRequest:
        if self._run is None:
            ans = self.inner.decide(obs)
            if isinstance(ans, ScaleRequest) and ans.replicas < obs.spec_replicas:
                pre = obs.spec_replicas
                first = min(self.canary_replicas, pre - ans.replicas)
                self._run = {"pre": pre, "target": ans.replicas, "victims": ans.victims, "t0": obs.t_s,
                             "first": first, "states": [GateState() for _ in self.gates],
                             "next": [obs.t_s + g.interval_s for g in self.gates]}
                self._note(obs.t_s, "canary", pre, pre - first, "canary step before the plan")
                return ScaleRequest(pre - first, ans.victims[:first])
            return ans
        run = self._run
        self.inner.observe(obs)
        due = [i for i, t in enumerate(run["next"]) if obs.t_s + 1e-9 >= t]
        if not due:
            return obs.spec_replicas
        for i in due:
            g = self.gates[i]
            value = self._value(g, obs, run["t0"])
            run["states"][i] = step(g, run["states"][i], Measurement(obs.t_s, value))
            run["next"][i] = obs.t_s + g.interval_s
            if i == 0:
                run["last"] = math.nan if value is None else value
        v = combine([verdict(st) for st in run["states"]])
        value = run.get("last", math.nan)
        healthy = None if obs.queued is None else obs.queued == 0.0
        action = canary_decide(healthy, v, obs.t_s - run["t0"], self.max_wait_s)
        if action == "wait":
            return obs.spec_replicas
        self._run = None
        if action == "proceed":
            self.passes += 1
            self._note(obs.t_s, "proceed", obs.spec_replicas, run["target"], f"gate {v}, canary healthy")
            return ScaleRequest(run["target"], tuple(run["victims"][run["first"]:]))
        self.aborts += 1
        self.inner.note_scale_up(obs.t_s)
        self._note(obs.t_s, "compensate", obs.spec_replicas, run["pre"],
                   f"gate {v} ({self.gate.query} = {value:.4g}): abort and restore the pre-state")
        return ScaleRequest(run["pre"])

    def _note(self, t: float, what: str, frm: int, to: int, reason: str) -> None:
        action = "scale_up" if to > frm else ("scale_down" if to < frm else "hold")
        self.inner.log.append({"t_s": t, "action": action, "from": frm, "to": to, "reasons": [f"{what}: {reason}"],
                               "signals": {}, "weights": {}, "vetoes": [], "victims": [],
                               "plan": {"gate": self.gate.query, "step": what}})
