"""``ebb run --workloads FLEET.yaml``: the fleet controller assembled from a fleet file.

Everything that can be wrong is checked before anything starts (:func:`plan_fleet`: the file, each
workload's source and policy); :func:`run_fleet` then builds one namespaced Kubernetes actuator per
Deployment on one shared API client, behind one :class:`~ebb.actuate.batching.WriteBatcher`, one
controller per workload, and runs :class:`~ebb.live.fleet_controller.FleetController` until
stopped. A workload with ``tier:`` gets a sleeping actuator and a policy that counts on its sleepers
(act mode only: the command refuses a tier in recommend mode), as ``ebb run --tier`` does for one. In ``recommend`` mode nothing is written to the cluster: the member controllers never call
``apply`` (their actuators only read ``/scale``, pods and nodes).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from ebb.config.fleet import FleetConfig, FleetWorkload
from ebb.errors import ConfigError
from ebb.score.units import plural

__all__ = ["FleetPlan", "MemberPlan", "plan_fleet", "run_fleet"]


@dataclass(frozen=True)
class MemberPlan:
    """One workload, checked: its policy, its source and its replica bounds."""

    workload: FleetWorkload
    policy: Any
    source: Any
    slo_ttft_ms: float
    min_replicas: int
    max_replicas: int


@dataclass(frozen=True)
class FleetPlan:
    """A fleet file checked against the command line, ready to start."""

    config: FleetConfig
    members: tuple[MemberPlan, ...]


def plan_fleet(cfg: FleetConfig, *, source: str, make_source: Callable[[FleetWorkload], Any], policy: str,
               slo_ttft_ms: float, slo_e2e_ms: float, interval_s: float, max_staleness_s: float,
               cold_start_s: float) -> FleetPlan:
    """Each workload's policy and source, or a one-line :class:`ConfigError` naming the file and key."""
    from ebb.live.policy_spec import build_live_policy, replica_bounds

    members = []
    for i, w in enumerate(cfg.workloads):
        where = f"{cfg.source}: workloads[{i}]"
        if source == "agents" and not w.agents:
            raise ConfigError(f"{where}.agents: missing (fix: with --source agents give each workload the "
                              "`ebb agent` URLs that read its pods, agents: [http://...:9401])")
        if source == "prometheus" and not w.prometheus_selector:
            raise ConfigError(f"{where}.prometheus_selector: missing (fix: with --source prometheus give each "
                              "workload the label matchers of its own series, e.g. "
                              "'namespace=\"serving\",job=\"serving/vllm\"')")
        ttft = w.ttft_slo_ms(slo_ttft_ms)
        # The class as the policy sees it: the workload's TTFT SLO as its P99 bound, its floor.
        cls = replace(w.workload_class, p99_latency_ms=ttft, min_replicas=w.min_replicas)
        try:
            pol = build_live_policy(w.policy or policy, slo_ttft_ms=ttft, slo_e2e_ms=w.slo_e2e_ms or slo_e2e_ms,
                                    initial=w.min_replicas, interval_s=interval_s, max_staleness_s=max_staleness_s,
                                    workload=cls, max_replicas=w.max_replicas, cold_start_s=cold_start_s,
                                    tier=w.tier)
            src = make_source(w)
        except (ConfigError, ValueError) as exc:
            raise ConfigError(f"{where} ({w.target}): {exc}") from exc
        lo, hi = replica_bounds(pol)
        lo, hi = max(lo, w.min_replicas), min(hi, w.max_replicas)
        if lo > hi:
            raise ConfigError(f"{where}.policy: its min= {lo} is above max_replicas {hi} (fix: lower min= or "
                              "raise max_replicas)")
        members.append(MemberPlan(w, pol, src, ttft, lo, hi))
    return FleetPlan(cfg, tuple(members))


def run_fleet(plan: FleetPlan, *, mode: str, run_id: str, interval_s: float, max_staleness_s: float,
              react_s: float, kubeconfig: str | None, in_cluster: bool, store: Any, elector: Any, tracer: Any,
              metrics: Any, stop: threading.Event, cycles: int | None, closers: list[Callable[[], None]],
              say: Callable[[str], None]) -> None:
    """Build the actuators and controllers of ``plan`` and run the fleet controller until ``stop``."""
    from ebb.actuate.batching import WriteBatcher
    from ebb.actuate.kubernetes import KubernetesActuator, load_api_client
    from ebb.ledger.review import compensation_log_for
    from ebb.live.controller import Controller, ControllerSettings
    from ebb.live.fleet_controller import FleetController, FleetMember, FleetSettings

    cfg = plan.config
    api = load_api_client(kubeconfig, in_cluster)
    closers.append(api.close)
    # One compensation log beside the ledger, shared by every member (in act mode: only a rollback uses it).
    review = compensation_log_for(store) if mode == "act" else None
    if review is not None:
        closers.append(review.close)
    batcher = WriteBatcher(cfg.cluster.writes_per_100ms, 0.1)
    members = []
    for m in plan.members:
        w = m.workload
        act = KubernetesActuator(w.namespace, w.deployment, api_client=api, tier=w.tier)
        settings = ControllerSettings(run_id=f"{run_id}-{w.namespace}-{w.deployment}", target=w.target,
                                      mode=mode,  # type: ignore[arg-type]  # checked by the caller
                                      interval_s=interval_s, max_staleness_s=max_staleness_s,
                                      min_replicas=m.min_replicas, max_replicas=m.max_replicas,
                                      react_interval_s=react_s)
        ctl = Controller(m.policy, m.source, batcher.wrap(act, w.target), store, settings, tracer=tracer,
                         metrics=metrics, elector=elector, compensation_log=review)
        closers.append(ctl.close)  # what it opened itself (the shared log is closed after it)
        members.append(FleetMember(ctl, w, m.slo_ttft_ms))
    fleet = FleetController(members, store, FleetSettings(run_id=run_id,
                                                          disruption_budget=cfg.cluster.disruption_budget,
                                                          interval_s=interval_s, react_interval_s=react_s),
                            quotas=cfg.quotas, batcher=batcher, elector=elector)
    namespaces = sorted({w.namespace for w in cfg.workloads})
    say(f"ebb run: {mode} mode, {plural(len(members), 'Deployment')} in {plural(len(namespaces), 'namespace')} "
        f"({', '.join(namespaces)}) from {cfg.source}; L3 budget {plural(cfg.cluster.disruption_budget, 'replica')} "
        f"per cycle, at most {plural(cfg.cluster.writes_per_100ms, 'write')} per 100 ms")
    fleet.run(stop, max_cycles=cycles)
