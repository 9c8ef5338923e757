"""The :class:`Policy` seam: a reconcile function from an :class:`Observation` to a :class:`Decision`.

Every scaling policy — Ebb's (:mod:`ebb.decide.policy`), the canary guard around it
(:mod:`ebb.gates.guard`), and the simulator's baselines (HPA, KEDA, static, oracle) — implements it,
and the same object runs under the simulator's virtual clock and the live controller's monotonic one.

Guarantees every policy gives:

* **Pure and synchronous.** ``decide`` does no I/O and returns within the reconcile; it may keep
  state between calls (windows, stabilisation, cooldowns). Given the same observations in the same
  order it returns the same decisions.
* **One decision per reconcile**, every ``interval_s`` seconds: a :class:`Decision` whose
  ``from_replicas`` is the observation's ``spec_replicas`` (except at t = 0 with no pods, when it is 0
  and ``to_replicas`` is the initial fleet), ``to_replicas`` ≥ 0 what it wants, victims as replica ids.
  No explanation travels on the side: everything the ledger and ``ebb explain`` show is in it.
* **observe** ingests an observation without deciding (a follower keeps its windows warm, a guard
  holds the fleet); a later ``decide`` sees that history. Policies without history ignore it.
* **gate_queries** names the PromQL queries the policy wants measured (into
  ``Observation.gate_values``) before its next ``decide``: the canary guard's live gates while a
  step is gated; empty for every other policy and state.
* **spans** (keyword, default :data:`~ebb.model.spans.NO_SPANS`) receives one span per layer around
  its real work; it never changes the decision.
"""

from __future__ import annotations

from typing import Protocol

from ebb.model.decision import Decision
from ebb.model.observation import Observation, Pipeline
from ebb.model.spans import Spans

__all__ = ["Policy"]


class Policy(Protocol):
    """A scaling policy: ``decide`` every ``interval_s`` seconds; synchronous, no I/O."""

    @property
    def spec(self) -> str:
        """The full spec string it was built from (``hpa:target=0.5``); the scorecard's ``policy``."""
        ...

    @property
    def interval_s(self) -> float:
        """Reconcile period (s): HPA ``--horizontal-pod-autoscaler-sync-period`` is 15 s."""
        ...

    @property
    def pipeline(self) -> Pipeline:
        """The metric pipeline this policy reads through."""
        ...

    def decide(self, obs: Observation, *, spans: Spans = ...) -> Decision:
        """The decision for this reconcile (see the module docstring)."""
        ...

    def observe(self, obs: Observation) -> None:
        """Ingest ``obs`` without deciding."""
        ...

    def gate_queries(self) -> tuple[str, ...]:
        """PromQL queries to measure into ``obs.gate_values`` before the next ``decide``; () when none."""
        ...
