"""Run a cluster scenario under one or more policies and score it (``ebb simulate --cluster``).

:func:`run_policy` simulates one policy; :func:`compare_cluster` runs several on the same inputs and
adds the **best per-service peer configuration**: for every service, the cheapest peer run (HPA,
KEDA, KPA at any target) that kept that service's violations within the budget (0.1 % of its
requests; the one with the fewest violations where none did), summed over services — what a
platform team tuning each Deployment's autoscaler by hand, in hindsight, would pay.

Scorecards are plain dicts (JSON), deterministic for a scenario, policy and seed: no wall-clock
fields. With a warm-up every figure counts from its end (:mod:`ebb.sim.cluster.engine`), the
scorecard's ``warmup_s`` says how long it was (absent without one), and ``writes_per_s`` is over the
scored seconds. ``ebb sweep`` reaches it through :func:`ebb.sim.cluster.sweep_job.cluster_job`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ebb.config.scenario import Scenario
from ebb.errors import ConfigError
from ebb.sim.cluster.engine import ClusterInputs, ClusterRun, simulate
from ebb.sim.cluster.policies import build_cluster_policy

__all__ = ["BUDGET", "ClusterResult", "JOB_KNOBS", "PEER_GRID", "best_per_service", "compare_cluster", "run_policy",
           "stacked_series"]

BUDGET = 0.001
"""Violations allowed per service (share of its requests) for a configuration to count as meeting it."""
PEER_GRID = tuple(f"{p}:target={t}" for p in ("hpa", "keda", "kpa") for t in ("0.3", "0.5", "0.7", "0.9"))
"""The peer configurations :func:`compare_cluster` runs by default."""
JOB_KNOBS = ("duration_s", "disruption_budget", "writes_per_100ms", "warmup_s")


@dataclass(frozen=True)
class ClusterResult:
    """One policy's run: the raw accounting plus its scorecard."""

    policy: str
    run: ClusterRun
    scorecard: dict[str, Any]


def run_policy(sc: Scenario, inp: ClusterInputs, policy: str, *, record_batches: bool = True) -> ClusterResult:
    """Simulate ``policy`` over the scenario's inputs."""
    pol = build_cluster_policy(policy, inp, sc.classes, budget=sc.cluster.disruption_budget,
                               write_limit=sc.cluster.writes_per_100ms)
    run = simulate(inp, pol, write_limit_per_100ms=pol.write_limit, record_batches=record_batches,
                   explain=pol.explain, keep_asleep=pol.keep_asleep)
    card = _scorecard(sc, inp, pol.spec, run)
    if pol.l1 is not None:
        card["l1"] = pol.l1  # which Ebb L1 ran (ebb:l1=auto picks by size)
    return ClusterResult(pol.spec, run, card)


def _scorecard(sc: Scenario, inp: ClusterInputs, policy: str, run: ClusterRun) -> dict[str, Any]:
    hours = run.gpu_s / 3600.0
    services = []
    for i, name in enumerate(inp.names):
        req = float(run.requests[i])
        services.append({"service": name, "namespace": inp.namespace_names[int(inp.namespaces[i])],
                         "class": inp.class_names[int(inp.class_index[i])], "gpu_hours": round(float(hours[i]), 6),
                         "requests": round(req, 3), "violations": round(float(run.violations[i]), 3),
                         "violation_pct": round(100.0 * float(run.violations[i]) / req, 6) if req else 0.0,
                         "max_zone_skew": int(run.max_skew[i])})
    per_class: dict[str, dict[str, float]] = {}
    for i in range(len(inp.names)):
        c = per_class.setdefault(inp.class_names[int(inp.class_index[i])], {"requests": 0.0, "violations": 0.0})
        c["requests"] += float(run.requests[i])
        c["violations"] += float(run.violations[i])
    classes: dict[str, dict[str, float]] = {
        k: {"requests": round(v["requests"], 3), "violations": round(v["violations"], 3),
            "violation_pct": round(100.0 * v["violations"] / v["requests"], 6) if v["requests"] else 0.0}
        for k, v in sorted(per_class.items())}
    # batch classes: the SLO is work done (epoch completion), so a violation is demanded GPU time not served
    for k in range(len(inp.batch_names)):
        c = classes.setdefault(inp.class_names[int(inp.batch_class_index[k])],
                               {"demand_gpu_s": 0.0, "unserved_gpu_s": 0.0, "violation_pct": 0.0})
        c["demand_gpu_s"] = round(c.get("demand_gpu_s", 0.0) + float(run.batch_demand_gpu_s[k]), 3)
        c["unserved_gpu_s"] = round(c.get("unserved_gpu_s", 0.0) + float(run.batch_unserved_gpu_s[k]), 3)
        c["violation_pct"] = round(100.0 * c["unserved_gpu_s"] / c["demand_gpu_s"], 6) if c["demand_gpu_s"] else 0.0
    demand = float(run.batch_demand_gpu_s.sum())
    seconds = max(inp.seconds - inp.warmup_s, 1)
    warmup = {"warmup_s": inp.warmup_s} if inp.warmup_s else {}
    return {
        "scenario": sc.name, "policy": policy, "seed": sc.seed, "duration_s": inp.seconds, **warmup,
        "services": len(inp.names), "batch_services": len(inp.batch_names), "zones": len(inp.zones),
        "gpu_hours_online": round(float(hours.sum()), 6),
        "gpu_hours_batch": round(float(run.batch_gpu_s.sum()) / 3600.0, 6),
        "gpu_hours": round(float(hours.sum() + run.batch_gpu_s.sum() / 3600.0), 6),
        "batch_unserved_pct": round(100.0 * float(run.batch_unserved_gpu_s.sum()) / demand, 6) if demand else 0.0,
        "violations_by_class": classes,
        "quota_breach_s": run.quota_breach_s, "skew_breach_s": run.skew_breach_s,
        "max_zone_skew": int(run.max_skew.max(initial=0)), "writes": run.writes,
        "writes_per_s": round(run.writes / seconds, 6), "max_writes_per_100ms": run.max_writes_per_100ms,
        "preemptions": run.preemptions, "pending_replica_s": round(run.pending_replica_s, 3),
        **_tier_card(inp, run),
        "per_service": services,
    }


def _tier_card(inp: ClusterInputs, run: ClusterRun) -> dict[str, Any]:
    """The tier and lending figures (:mod:`ebb.sim.cluster.lending`); none for a scenario without
    tiers or lending costs, so its scorecard is what it was before tiers existed."""
    if inp.tiers is None and not inp.checkpoint_s and not inp.restart_gpu_s:
        return {}
    asleep_h = float(run.asleep_gpu_s.sum()) / 3600.0
    done_h = float(run.batch_gpu_s.sum() - run.batch_lost_gpu_s.sum()) / 3600.0
    ok = [w.delay_s for w in run.wakes if w.delay_s == w.delay_s]
    reclaims = [w.delay_s for w in run.wakes if w.reclaimed_gpus and w.delay_s == w.delay_s]

    def spread(xs: list[float]) -> dict[str, float]:
        return {"count": len(xs), "median": float(np.median(xs)), "max": float(max(xs))} if xs else {"count": 0}

    return {
        # held = running + asleep; a sleeper's GPU stays allocated (billed) though its HBM is lent
        "gpu_hours_online_running": round(float(run.gpu_s.sum()) / 3600.0 - asleep_h, 6),
        "gpu_hours_online_asleep": round(asleep_h, 6),
        "gpu_hours_lent": round(float(run.lent_gpu_s.sum()) / 3600.0, 6),
        "best_effort_gpu_hours_done": round(done_h, 6),
        "best_effort_gpu_hours_lost": round(float(run.batch_lost_gpu_s.sum()) / 3600.0, 6),
        "wakes": len(run.wakes), "failed_wakes": len(run.wakes) - len(ok),
        "wake_delay_s": spread(ok), "reclaim_delay_s": spread(reclaims),
        "preemption_log": [{"t_s": p.t_s, "batch": inp.batch_names[p.batch], "zone": inp.zones[p.zone],
                            "gpus": p.gpus, "cause": p.cause, "service": inp.names[p.service] if p.service >= 0 else None}
                           for p in run.preemption_log],
    }


def best_per_service(peers: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The cheapest peer run per service within :data:`BUDGET` (fewest violations where none is), summed."""
    if not peers:
        raise ConfigError("best per-service peer: no peer runs (fix: include hpa, keda or kpa in --policies)")
    n = len(peers[0]["per_service"])
    total_h, chosen = 0.0, []
    viol: dict[str, list[float]] = {}
    for i in range(n):
        rows = [(p["per_service"][i], p["policy"]) for p in peers]
        ok = [r for r in rows if r[0]["violations"] <= BUDGET * r[0]["requests"]]
        row, pol = min(ok, key=lambda r: (r[0]["gpu_hours"], r[1])) if ok else \
            min(rows, key=lambda r: (r[0]["violations"], r[0]["gpu_hours"], r[1]))
        total_h += row["gpu_hours"]
        chosen.append({"service": row["service"], "policy": pol, "gpu_hours": row["gpu_hours"],
                       "violation_pct": row["violation_pct"]})
        v = viol.setdefault(row["class"], [0.0, 0.0])
        v[0] += row["requests"]
        v[1] += row["violations"]
    return {"policy": "best per-service peer", "gpu_hours_online": round(total_h, 6),
            "violations_by_class": {k: {"requests": round(r, 3), "violations": round(x, 3),
                                        "violation_pct": round(100.0 * x / r, 6) if r else 0.0}
                                    for k, (r, x) in sorted(viol.items())},
            "choices": chosen}


def compare_cluster(sc: Scenario, policies: Sequence[str], *, inp: ClusterInputs,
                    progress: Any = None) -> tuple[list[ClusterResult], dict[str, Any] | None]:
    """Run each policy on the same inputs; the best per-service peer when any peer ran."""
    out = []
    for p in policies:
        out.append(run_policy(sc, inp, p))
        if progress is not None:
            progress(out[-1])
    peers = [r.scorecard for r in out if r.policy.split(":")[0] in ("hpa", "keda", "kpa")]
    return out, (best_per_service(peers) if peers else None)


def stacked_series(inp: ClusterInputs, run: ClusterRun) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(times s, GPUs per service per sample [T × S], GPUs per zone per sample [T × Z]) incl. batch in zones."""
    t = np.asarray(run.series_t_s)
    if not run.series_gpus:
        return t, np.zeros((0, len(inp.names))), np.zeros((0, len(inp.zones)))
    g = np.stack(run.series_gpus)  # T × S × Z
    b = np.stack(run.series_batch_gpus) if inp.batch_names else np.zeros((len(t), 0, len(inp.zones)))
    return t, g.sum(axis=2), g.sum(axis=1) + b.sum(axis=1)
