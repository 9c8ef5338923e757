"""The exact L1 of ``ebb simulate --cluster``: one :class:`~ebb.decide.policy.EbbPolicy` per service.

Each service runs the policy object the live fleet controller's members run (``ebb run
--workloads``), fed each second what a live source and actuator would report for it, and its
decision is the service's proposal to the fleet step (:mod:`ebb.decide.fleet_step`), exactly as a
live member's is. Per service and second:

* **Signals** (:func:`service_signals`): one 1 s fine sample — prefill busy share = the requests
  served in the second / ``capacity_rps`` (replica units: a request holds a replica for
  ``1 / capacity_rps`` s; no decode slots in this model), the router queue at its end — and the
  second's completions as two weighted TTFT rows, the typical one (99 % of them) at the mean wait of
  the second's arrivals and the tail (1 %) at the longest (the fluid FIFO's ``wait_first_s`` ..
  ``wait_s``). TTFT is the wait: the model's requests start serving at once when a replica frees,
  and their service time is ``service_ms`` (the end-to-end row: wait + service time). Stamped at
  ``t + offset_s`` (a live source's Unix stamps, in the tests that bridge both loops).
* **Replicas** (:func:`service_replicas`): the engine's ready and starting replicas per zone, ready
  ones first; replicas the engine could not place yet (pending) are no pods (they hold no GPU).
  The engine keeps counts, not replica histories, so every replica's times are 0: the policy's cold
  start stays the configured one (the engine enforces it exactly).
* **The policy** (:func:`service_policy`): the service's TTFT SLO is ``slo_ms − service_ms`` (the
  wait a request may take and still meet ``slo_ms``), its end-to-end SLO ``slo_ms``; the class's
  weight, α, veto margin and floor, as :func:`ebb.live.policy_spec.build_live_policy` sets them; 1 s
  fine samples (so a comeback horizon is cold start + 2 s, as :class:`~ebb.decide.fleet_policy.FleetEbb`
  counts it). The fast path never runs: decisions are per second.

Cost: one ``decide`` per service per second in Python (~0.1 ms each): fine for tens of services
over hours, not for hundreds over a day — :class:`~ebb.decide.fleet_policy.FleetEbb` is the
vectorised L1 for those (``ebb:l1=fleet``; :mod:`ebb.sim.cluster.policies`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from ebb.config.workloads import WorkloadClass
from ebb.decide.policy import EbbPolicy
from ebb.decide.profiles import EbbProfile
from ebb.model.ids import ReplicaId
from ebb.model.live import LiveSignals
from ebb.model.observation import FineSignals, Observation, Pipeline, PodView
from ebb.sim.cluster.engine import ClusterInputs, PolicyStep

__all__ = ["FINE_MS", "ServiceReplica", "observation", "service_policy", "service_replicas", "service_signals"]

FINE_MS = 1000
"""The engine's sample period (ms): one fine sample per simulated second."""
TAIL_SHARE = 0.01
"""Share of a second's completions reported at its longest wait (the rest at the mean)."""


@dataclass(frozen=True)
class ServiceReplica:
    """One replica of a service as a controller reads it."""

    replica: ReplicaId
    """Its id within the service this second (ready ones first, in zone order)."""
    name: str
    zone: str
    ready: bool


def service_policy(profile: EbbProfile, inp: ClusterInputs, i: int, cls: WorkloadClass, spec: str) -> EbbPolicy:
    """Service ``i``'s policy (module docstring)."""
    slo_s, service_s = float(inp.slo_s[i]), float(inp.service_s[i])
    lo = max(1, int(inp.min_replicas[i]), cls.min_replicas)
    hi = max(lo, int(inp.max_replicas[i]))
    return EbbPolicy(replace(profile, veto_margin=cls.veto_margin), (slo_s - service_s) * 1000.0, slo_s * 1000.0,
                     min_replicas=lo, max_replicas=hi, initial=max(lo, min(hi, int(inp.initial[i]))), spec=spec,
                     interval_s=1.0, pipeline=Pipeline(1, 1, fine_ms=FINE_MS), base_weight=cls.base_weight,
                     alpha=cls.alpha, cold_start_s=float(inp.cold_start_s[i]), **_tier(inp, i))


def _tier(inp: ClusterInputs, i: int) -> dict[str, Any]:
    """Service ``i``'s asleep tier as EbbPolicy's ``wake_s`` and ``sleep_max`` (none: no keys)."""
    t = inp.tiers
    if t is None or not bool(t.tiered[i]):
        return {}
    reserve = None if t.reserve is None or np.isnan(t.reserve[i]) else float(t.reserve[i])
    return {"wake_s": float(comeback_s(inp)[i]), "sleep_max": int(t.max_replicas[i]), "reserve": reserve}


def comeback_s(inp: ClusterInputs) -> npt.NDArray[np.float64]:
    """Per service, how fast a sleeper is back for the policy's comeback bound: its tier's
    ``wake_s``, plus the lending ``checkpoint_s`` when best-effort services may borrow its GPU (a
    lent sleeper waits for the borrower's checkpoint first: :mod:`ebb.sim.cluster.lending`). NaN:
    no tier."""
    assert inp.tiers is not None
    lent = len(inp.batch_names) > 0 and bool(np.any(inp.batch_may_borrow))
    return np.asarray(inp.tiers.wake_s + (inp.checkpoint_s if lent else 0.0))


def service_signals(step: PolicyStep, i: int, inp: ClusterInputs, *, offset_s: float = 0.0) -> LiveSignals:
    """Service ``i``'s second as a live source reports it, samples stamped ``step.t_s + offset_s``."""
    t = step.t_s + offset_s
    served = float(step.served[i])
    busy = served / float(inp.capacity_rps[i])
    queue = float(step.queue[i])
    fine = FineSignals(t_s=np.array([t]), prefill_replicas=np.array([busy]), slot_replicas=np.zeros(1),
                       queued=np.array([queue]))
    first, last = float(step.wait_first_s[i]), float(step.wait_s[i])
    if served > 0 and np.isfinite(last):
        waits_ms = np.array([0.5 * (first + last), last]) * 1000.0
        fine = replace(fine, done_t_s=np.array([t, t]), done_ttft_ms=waits_ms,
                       done_e2e_ms=waits_ms + float(inp.service_s[i]) * 1000.0,
                       done_weight=np.array([served * (1.0 - TAIL_SHARE), served * TAIL_SHARE]),
                       done_wait_ms=waits_ms.copy())
    return LiveSignals(fine, total_qps=float(step.arrivals[i]), queued=queue, newest_sample_s=t)


def service_replicas(step: PolicyStep, i: int, zones: tuple[str, ...]) -> tuple[ServiceReplica, ...]:
    """Service ``i``'s placed replicas (module docstring): ready ones, then starting ones, zone by zone."""
    out: list[ServiceReplica] = []
    for ready, counts in ((True, step.ready_by_zone[i]), (False, step.starting_by_zone[i])):
        for z, c in enumerate(counts.tolist()):
            for _ in range(int(c)):
                k = len(out)
                out.append(ServiceReplica(ReplicaId(k), f"r{k:04d}", zones[z], ready))
    return tuple(out)


def observation(step: PolicyStep, i: int, inp: ClusterInputs, replicas: tuple[ServiceReplica, ...]) -> Observation:
    """What service ``i``'s policy sees this second: what the live controller builds from the same
    signals and replicas (:meth:`ebb.live.controller.Controller` ``_observation``)."""
    sig = service_signals(step, i, inp)
    pods = tuple(PodView(replica=r.replica, created_s=0.0, ready_s=0.0 if r.ready else None, util_ratio=None,
                         inflight=None, qps=None, zone=r.zone) for r in replicas)
    return Observation(t_s=step.t_s, spec_replicas=int(step.spec[i]), ready_replicas=int(step.ready[i]), pods=pods,
                       total_qps=sig.total_qps, total_inflight=None, queued=sig.queued, fine=sig.fine,
                       asleep_replicas=int(step.asleep[i]))
