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

A policy may also be :class:`Reactive`: between two reconciles its engine calls ``react`` every
``react_interval_s`` (the fine-sample period, 100 ms) with the samples since the previous call. It
answers a scale-up :class:`Decision` to apply at once, or None — never a scale-down, which stays on
the reconcile's slow, careful path. Samples ``react`` consumed are not handed to ``decide`` again:
the policy's windows have them.

A reactive policy may also plan :class:`QuietStretches`: a request simulator with a stretch of fine
samples and no event in it (no arrival, finish, first token or cold-start end) hands the policy
every sample at once; the policy answers how many leading ones ``react`` answers None to, and the
engine runs the reconciles among them with ``decide`` as always, after :meth:`Stretch.take` has
ingested the samples before each — the same state and decisions as one call per sample.

A policy may also :class:`HoldsInBlocks`: a simulator whose fleet is steady (nothing cold-starting
or draining) may serve a block of reconciles ahead and hand the policy all their fine samples at
once; the policy answers how many of those reconciles, from the first, it can prove it would have
answered with a plain hold (no change, nothing recorded), and its state is then exactly what that
many ``decide`` calls would have left. The engine discards what it served past them and resumes
with ``decide`` at the first unproven one, so decisions are the same as reconciling every tick.

A policy may also :class:`Sleeps`: with an asleep tier (the simulator's ``--tier``, a
:class:`~ebb.actuate.base.SleepingActuator` live) its scale-downs put replicas to sleep, and after
each decision the engine or controller asks it how many sleepers it still counts on and releases the
oldest past that (:mod:`ebb.sim.sleepers`).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from ebb.model.decision import Decision
from ebb.model.observation import FineSignals, Observation, Pipeline
from ebb.model.spans import Spans

__all__ = ["HoldsInBlocks", "Policy", "QuietStretches", "Reactive", "Sleeps", "Stretch", "holds_in_blocks",
           "quiet_stretches_of", "react_of"]


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


@runtime_checkable
class Reactive(Protocol):
    """A policy with an event-driven fast path for scale-up (see the module docstring)."""

    @property
    def react_interval_s(self) -> float | None:
        """Period (s) of the fast path (the fine-sample period); None = no fast path."""
        ...

    def react(self, obs: Observation, *, spans: Spans = ...) -> Decision | None:
        """A scale-up to apply now, or None. Pure and synchronous, like ``decide``."""
        ...


@runtime_checkable
class HoldsInBlocks(Protocol):
    """A policy that can prove a run of reconciles are holds (see the module docstring)."""

    def hold_through(self, ticks_s: npt.NDArray[np.float64], fine: FineSignals, spec_replicas: int,
                     ready_replicas: int) -> int:
        """Given the reconcile times ``ticks_s`` (one fine sample each, at that time, in ``fine``;
        completions timed at their reconcile) of a fleet that stays at ``spec_replicas`` with
        ``ready_replicas`` ready throughout, the number ``j`` of leading reconciles proven holds;
        the policy's state afterwards is what ``j`` ``decide`` calls would have left."""
        ...

    def hold_limit(self) -> int:
        """The most reconciles from the next one that an engine should serve ahead for
        :meth:`hold_through`: 0 where it could prove none; fewer where the policy expects an early
        stop (an engine serves the bins after a block's last proven hold again)."""
        ...


class Stretch(Protocol):
    """A planned quiet stretch (:class:`QuietStretches`): how far ``react`` stays quiet, taken in order."""

    quiet: int
    """Leading samples ``react`` answers None to."""

    def take(self, stop: int) -> bool:
        """Ingest the samples before ``stop`` (≤ :attr:`quiet`) not taken yet, as ``react`` — and
        ``decide``, for a reconcile's own sample — would; False, nothing taken, when the plan is void."""
        ...

    def hold(self, ticks_s: list[float], cuts: list[int]) -> int:
        """How many leading reconciles at ``ticks_s`` are provably holds — each deciding after the
        samples before ``cuts[k]`` (increasing), the first one the next after the last reconcile
        served — with their samples taken and the state as those ``decide`` calls leave it, so the
        engine skips them (no observation built); 0, nothing taken, when none is proven."""
        ...


@runtime_checkable
class QuietStretches(Protocol):
    """A fast path that can plan a stretch of samples with no event in it at once (see the module docstring)."""

    def quiet_stretch(self, t_s: list[float], reacts: list[bool], prefill: list[float], slots: list[float],
                      queued: list[float], ready_replicas: int, spec_replicas: int) -> Stretch | None:
        """Plan the fine samples at ``t_s`` (increasing, no completion rows; ``reacts[k]``: ``react``'s,
        else the next reconcile's own) of a fleet at ``spec_replicas`` with ``ready_replicas`` ready
        throughout; None when the policy cannot (then the engine serves them one by one)."""
        ...


@runtime_checkable
class Sleeps(Protocol):
    """A policy that puts replicas to sleep when the cluster has an asleep tier (Ebb, static + sleep).
    Peers do not: they keep their upstream behaviour, removing replicas."""

    sleeps: bool

    def asleep_wanted(self, running: int) -> int | None:
        """How many sleepers to keep beside ``running`` replicas after a decision (the engine
        releases the oldest past it); None: no opinion, the tier's TTL decides."""
        ...


def holds_in_blocks(policy: Policy) -> HoldsInBlocks | None:
    """``policy`` as a :class:`HoldsInBlocks` when it is one; None otherwise."""
    return policy if isinstance(policy, HoldsInBlocks) else None


def quiet_stretches_of(policy: Policy) -> QuietStretches | None:
    """``policy``'s fast path as a :class:`QuietStretches` when its fast path is on and it is one."""
    if react_of(policy) is not None and isinstance(policy, QuietStretches):
        return policy
    return None


def react_of(policy: Policy) -> Reactive | None:
    """``policy`` as a :class:`Reactive` when its fast path is on; None otherwise."""
    if isinstance(policy, Reactive) and policy.react_interval_s is not None and policy.react_interval_s > 0:
        return policy
    return None
