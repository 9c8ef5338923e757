"""Cluster policies: Ebb's L1 → fleet step over every service, and per-Deployment peers.

``ebb`` (profile knobs as in ``ebb simulate``: ``ebb:budget=0.002``): each second every service's
L1 proposes, and :func:`~ebb.decide.fleet_step.fleet_step` — the same code the live fleet controller
(``ebb run --workloads``) runs — applies the cluster's rules: scale-ups within their namespace's
quota ``max``, L2 vetoes and rank at the weights the L1 recalibrated, and L3 (the cluster disruption
budget in rank order, borrowed quota reclaimed first, zone skew). Scale-ups are never budgeted.
Writes go out throttled (the scenario's ``writes_per_100ms``), scale-downs in L2 rank order.

The L1 (``ebb:l1=``):

* ``exact``: one :class:`~ebb.decide.policy.EbbPolicy` per service, the object the live fleet
  controller's members run, fed each second what a live source would report
  (:mod:`ebb.sim.cluster.exact`); its decision is the proposal, narrowed by the step as live.
  The same scenario through the live controller on the virtual clock gives the same decisions
  (``tests/unit/sim/cluster/test_live_agreement.py``). A Python ``decide`` per service per second.
* ``fleet``: :class:`~ebb.decide.fleet_policy.FleetEbb`, Ebb's need and comeback bound as numpy over
  all services (what it omits against ``EbbPolicy``: its module docstring), for hundreds of services
  over a day.
* ``auto`` (default): ``exact`` when services × simulated seconds ≤ :data:`EXACT_MAX_SERVICE_SECONDS`,
  else ``fleet``. The scorecard says which ran (``l1``).

L2's inputs per service: its latency = the TTFT P99 of its policy's latency window (``exact``) or
the worst wait of the last 30 s (``fleet``; 0 when idle), against the service's TTFT SLO
``slo_ms − service_ms``, at its class's weight, α, veto margin and floor
(:meth:`~ebb.decide.fleet_rank.FleetClasses.guarding`: as the live controller ranks; no success floor).

Peers (``hpa``, ``keda``, ``kpa``, with ``:target=0.7``; ``static``) run one autoscaler per service
(:mod:`ebb.sim.cluster.peers`), unthrottled and unbudgeted, as they would in a real cluster.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from ebb.config.policy_specs import (
    PolicySpecItem,
    check_keys,
    param_choice,
    param_float,
    parse_policies,
)
from ebb.config.workloads import WorkloadClass
from ebb.decide.fleet_policy import FleetEbb, FleetTargets
from ebb.decide.fleet_rank import FleetClasses
from ebb.decide.fleet_step import FleetProposals, FleetRules, FleetStep, decision_proposals, fleet_step
from ebb.decide.profiles import PROFILE_FLAGS, PROFILE_KNOBS, PROFILES, profile_with_knobs
from ebb.errors import ConfigError
from ebb.model.decision import Decision
from ebb.sim.cluster.engine import ClusterInputs, IntArray, PolicyStep
from ebb.sim.cluster.exact import comeback_s, observation, service_policy, service_replicas
from ebb.sim.cluster.peers import FleetHpa, FleetKeda, FleetKpa, FleetStatic

__all__ = ["CLUSTER_POLICIES", "EXACT_MAX_SERVICE_SECONDS", "ClusterPolicy", "DecisionRow", "EbbCluster",
           "build_cluster_policy"]

CLUSTER_POLICIES = ("ebb", "hpa", "keda", "kpa", "static")
L1_CHOICES = ("auto", "exact", "fleet")
EXACT_MAX_SERVICE_SECONDS = 400_000
"""``ebb:l1=auto`` runs the exact L1 up to this many service-seconds (services × simulated seconds):
about a minute on this project's 2-core machine — ``examples/cluster/three-classes.yaml`` (20
services × 3,600 s) took 11 s with the exact L1 against 2 s with FleetEbb, 0.15 ms per
service-second, engine included. ``servegen-422.yaml`` (422 services × a day, 36 M) runs FleetEbb."""
FLEET_KNOBS = ("profile", "target_util", "budget", "down_util", "slack_fraction", "memory_horizons",
               "warmup_horizons", "cooldown_horizons", "down_interval_horizons", "down_fraction", "queue_surge_s",
               "up_hysteresis", "surge_fraction", "burst_fraction", "tail")
"""The profile knobs :class:`~ebb.decide.fleet_policy.FleetEbb` reads; the others (fast path, forecast,
latency-window ones) have no meaning for it and are refused rather than silently ignored."""
EXACT_KNOBS = ("profile", *(k for k in PROFILE_KNOBS if k != "veto_margin"),
               *(f for f in PROFILE_FLAGS if f != "fast_path"))
"""The knobs :class:`~ebb.decide.policy.EbbPolicy` reads here: not the fast path (decisions are per
second) nor the veto margin (each service's class sets it, as in ``ebb run --workloads``)."""


class ClusterPolicy(Protocol):
    """A callable policy for :func:`ebb.sim.cluster.engine.simulate`, with its write limit."""

    spec: str
    write_limit: int | None
    """State writes allowed per 100 ms; None = unthrottled (each Deployment's own autoscaler)."""
    l1: str | None
    """Which Ebb L1 ran (``exact`` or ``fleet``); None for a peer."""

    def __call__(self, step: PolicyStep) -> tuple[IntArray, IntArray | None]:
        """Wanted replicas per service, and the order scale-downs are written in (None = index order)."""
        ...

    def explain(self, i: int) -> tuple[str, dict[str, float]]:
        """Why service ``i`` is written now (one line) and the numbers behind it."""
        ...

    def keep_asleep(self) -> IntArray | None:
        """After a decision: sleepers to keep per service (−1: no opinion, the tier's TTL decides);
        None: this policy decides no tiers, so the replicas it removes go (peers: upstream behaviour)."""
        ...


@dataclass(frozen=True)
class DecisionRow:
    """One recorded decision of the exact L1 after the fleet step (holds are not recorded)."""

    t_s: float
    service: int
    action: str
    from_replicas: int
    to_replicas: int


class EbbCluster:
    """Ebb over the whole cluster (module docstring)."""

    def __init__(self, item: PolicySpecItem, inp: ClusterInputs, classes: Sequence[WorkloadClass],
                 budget: int, write_limit: int) -> None:
        self.l1: str | None = _l1_of(item, inp)
        check_keys(item, ("l1", *(EXACT_KNOBS if self.l1 == "exact" else FLEET_KNOBS)))
        self.spec = item.text
        self.write_limit: int | None = write_limit
        self.inp = inp
        self.budget = budget
        profile = profile_with_knobs(item, PROFILES[param_choice(item, "profile", "balanced", tuple(PROFILES))])
        cls = [classes[int(k)] for k in inp.class_index]
        self.slo_ms = (inp.slo_s - inp.service_s) * 1000.0
        """Each service's TTFT SLO (ms): the wait a request may take and still meet ``slo_ms``."""
        self.rules = FleetRules(
            classes=FleetClasses.guarding(base_weight=[c.base_weight for c in cls], alpha=[c.alpha for c in cls],
                                          veto_margin=[c.veto_margin for c in cls], slo_ms=self.slo_ms,
                                          min_replicas=np.maximum(inp.min_replicas, [c.min_replicas for c in cls])),
            namespace=inp.namespaces, namespace_names=inp.namespace_names, gpu_milli=inp.gpus * 1000,
            quota_max_milli=np.where(inp.quota_max >= 0, inp.quota_max * 1000, -1), cluster_budget=budget,
            names=tuple(f"{inp.namespace_names[int(k)]}/{n}" for k, n in zip(inp.namespaces, inp.names)))
        self.policies = [service_policy(profile, inp, i, cls[i], item.text) for i in range(len(inp.names))] \
            if self.l1 == "exact" else []
        tiers = inp.tiers
        self.fleet = None if self.l1 == "exact" else FleetEbb(
            len(inp.names), slo_ttft_ms=self.slo_ms, cold_start_s=inp.cold_start_s.astype(float),
            min_replicas=self.rules.classes.min_replicas, max_replicas=inp.max_replicas,
            capacity_rps=inp.capacity_rps, classes=self.rules.classes, profile=profile,
            wake_s=None if tiers is None else comeback_s(inp),
            sleep_max=None if tiers is None else tiers.max_replicas, reserve=None if tiers is None else tiers.reserve)
        self.vetoes = 0
        self.granted = 0
        self.log: list[DecisionRow] = []
        """The exact L1's recorded decisions after the fleet step (its ``fleet`` counterpart records none)."""
        self._last: tuple[FleetStep, FleetTargets | None, list[Decision]] | None = None

    def __call__(self, step: PolicyStep) -> tuple[IntArray, IntArray | None]:
        props: FleetProposals
        wants: FleetTargets | None = None
        if self.l1 == "exact":
            decisions = self._exact(step)
            props = decision_proposals(decisions, base_weight=self.rules.classes.base_weight, staleness_s=0.0,
                                       ready=step.ready_by_zone, starting=step.starting_by_zone,
                                       borrowed=step.borrowed)
        else:
            wants = self._fleet_l1(step)
            decisions = []
            props = FleetProposals(spec=step.spec, target=wants.desired, weight=wants.weight,
                                   latency_ms=wants.latency_ms, staleness_s=np.zeros(len(wants.desired)),
                                   burst=wants.burst, ready=step.ready_by_zone, starting=step.starting_by_zone,
                                   borrowed=step.borrowed)
        st = fleet_step(props, self.rules)
        if decisions:
            decisions = [st.decided(i, d) for i, d in enumerate(decisions)]
            self.log.extend(DecisionRow(step.t_s, i, d.action, d.from_replicas, d.to_replicas)
                            for i, d in enumerate(decisions) if d.noteworthy)
        self.vetoes += int(np.count_nonzero((st.request > 0) & (st.granted == 0)))
        self.granted += int(st.granted.sum())
        self._last = (st, wants, decisions)
        return st.target, st.rank.order

    def keep_asleep(self) -> IntArray | None:
        """Each tiered service's sleepers its comeback bound counts on beside the replicas it keeps
        running (:func:`~ebb.decide.tier_rules.asleep_kept`, through EbbPolicy or FleetEbb); −1 for
        the rest; None without tiers."""
        if self.inp.tiers is None or self._last is None:
            return None
        st, wants, _ = self._last
        if wants is not None:
            return np.asarray(wants.asleep_wanted, dtype=np.int64)
        tiered = self.inp.tiers.tiered
        keep = [pol.asleep_wanted(int(st.target[i])) if tiered[i] else None for i, pol in enumerate(self.policies)]
        return np.array([-1 if k is None else k for k in keep], dtype=np.int64)

    def _exact(self, step: PolicyStep) -> list[Decision]:
        zones = self.inp.zones
        return [pol.decide(observation(step, i, self.inp, service_replicas(step, i, zones)))
                for i, pol in enumerate(self.policies)]

    def _fleet_l1(self, step: PolicyStep) -> FleetTargets:
        assert self.fleet is not None
        wait_ms = np.minimum(step.wait_s, 10.0 * self.slo_ms / 1000.0) * 1000.0
        self.fleet.observe(step.t_s, arrivals=step.arrivals, queue=step.queue, ready=step.ready,
                           starting=step.starting + step.pending, ttft_ms=np.where(step.arrivals > 0, wait_ms, np.nan))
        return self.fleet.decide(step.t_s, asleep=step.asleep if self.inp.tiers is not None else None)

    def explain(self, i: int) -> tuple[str, dict[str, float]]:
        """Why service ``i`` is being written now: L1's reason and numbers, the step's words."""
        if self._last is None:
            return "no decision yet", {}
        st, wants, decisions = self._last
        if decisions:
            d = decisions[i]
            words = "; ".join((*d.reasons, *d.vetoes)) or d.action
            return words, {k: float(v) for k, v in d.signals.items() if math.isfinite(v)}
        assert wants is not None
        floor = float(wants.floor_replicas[i])
        words = (f"{FleetEbb.REASONS[int(wants.reason[i])]}: need {wants.need_replicas[i]:.2f} replicas, "
                 f"comeback floor {'unknown' if floor != floor else f'{floor:.2f}'}, weight {wants.weight[i]:.3f}")
        if said := st.words(i):
            words += f"; L3: {said}"
        signals = {"need_replicas": float(wants.need_replicas[i]), "comeback_floor_replicas": floor,
                   "weight": float(wants.weight[i]), "latency_p_ms": float(wants.latency_ms[i]),
                   "headroom": float(st.rank.headroom[i]), "granted": float(st.granted[i])}
        return words, {k: v for k, v in signals.items() if math.isfinite(v)}  # unknown = not recorded


def _l1_of(item: PolicySpecItem, inp: ClusterInputs) -> str:
    """``exact`` or ``fleet``: the spec's ``l1=``, or by size for ``auto`` (module docstring)."""
    choice = param_choice(item, "l1", "auto", L1_CHOICES)
    if choice != "auto":
        return choice
    return "exact" if len(inp.names) * inp.seconds <= EXACT_MAX_SERVICE_SECONDS else "fleet"


class PeerCluster:
    """One peer autoscaler per service, deciding at its own interval."""

    def __init__(self, spec: str, peer: FleetHpa | FleetKpa | FleetStatic) -> None:
        self.spec = spec
        self.write_limit: int | None = None
        self.l1: str | None = None
        self.peer = peer
        self._every = peer.interval_s
        self._next = 0.0
        self._desired = np.zeros(0, dtype=np.int64)

    def __call__(self, step: PolicyStep) -> tuple[IntArray, IntArray | None]:
        self.peer.observe(step.served, step.ready, step.arrivals, step.queue)
        spec = step.spec
        if step.t_s + 1e-9 < self._next:
            return spec, None
        self._next = step.t_s + self._every
        self._desired = self.peer.decide(spec, step.ready)
        return self._desired, None

    def keep_asleep(self) -> IntArray | None:
        """None: peers keep their upstream behaviour, no tiers (what they remove goes)."""
        return None

    def explain(self, i: int) -> tuple[str, dict[str, float]]:
        """The peer's own desired count for service ``i`` at its last sync."""
        return f"{self.spec} sync: desired {int(self._desired[i])}", {"desired_replicas": float(self._desired[i])}


def build_cluster_policy(text: str, inp: ClusterInputs, classes: Sequence[WorkloadClass], *, budget: int,
                         write_limit: int) -> ClusterPolicy:
    """One policy from its spec (``ebb``, ``hpa:target=0.7``, ``kpa``, ``static``...)."""
    items = parse_policies(text, CLUSTER_POLICIES)
    if len(items) != 1:
        raise ConfigError(f"one cluster policy at a time, got {text!r} (fix: run them one by one or use ebb sweep)")
    item = items[0]
    n = len(inp.names)
    if item.name == "ebb":
        return EbbCluster(item, inp, classes, budget, write_limit)
    if item.name == "static":
        check_keys(item, ())
        return PeerCluster(item.text, FleetStatic(inp.initial.copy()))
    check_keys(item, ("target",))
    target = param_float(item, "target", 0.7, lo=0.05, hi=1.0)
    common = dict(target=target, min_replicas=inp.min_replicas, max_replicas=inp.max_replicas,
                  capacity_rps=inp.capacity_rps, service_s=inp.service_s)
    peer: FleetHpa | FleetKpa
    if item.name == "hpa":
        peer = FleetHpa(n, **common)  # type: ignore[arg-type]
    elif item.name == "keda":
        peer = FleetKeda(n, **common)  # type: ignore[arg-type]
    else:
        peer = FleetKpa(n, **common)  # type: ignore[arg-type]
    return PeerCluster(item.text, peer)
