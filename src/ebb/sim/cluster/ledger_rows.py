"""A cluster run's write batches as ledger cycles (pure: records out, the CLI writes them).

One :class:`~ebb.model.decisions.CycleRecord` per write batch (≤ ``writes_per_100ms`` scale writes
issued together), one :class:`~ebb.model.decisions.DecisionRecord` per write in it, targeted at
``namespace/service``. Ids: ``<run>-b<n>`` for the batch, ``<run>-b<n>-<k>`` for its writes; times
are virtual seconds since the scenario start, as nanoseconds.
"""

from __future__ import annotations

from ebb.model.decisions import CycleRecord, DecisionRecord
from ebb.model.ids import CycleId, DecisionId, RunId
from ebb.sim.cluster.engine import ClusterInputs, ClusterRun

__all__ = ["batch_cycles"]


def batch_cycles(run_id: str, policy: str, inp: ClusterInputs, run: ClusterRun, *,
                 recorded_unix_ns: int | None = None) -> list[CycleRecord]:
    """Ledger cycles for every write batch of ``run``, in time order; ``recorded_unix_ns`` (the wall
    time of the recording) goes in each snapshot so ``ebb explain --list`` finds the latest run."""
    stamp = {} if recorded_unix_ns is None else {"recorded_unix_ns": recorded_unix_ns}
    out: list[CycleRecord] = []
    for n, b in enumerate(run.batches, start=1):
        cid = CycleId(f"{run_id}-b{n}")
        ts = int(round(b.t_s * 1e9))
        decisions = []
        for k, (i, frm, to) in enumerate(zip(b.services, b.from_replicas, b.to_replicas), start=1):
            ns = inp.namespace_names[int(inp.namespaces[i])]
            decisions.append(DecisionRecord(
                decision_id=DecisionId(f"{run_id}-b{n}-{k}"), cycle_id=cid, run_id=RunId(run_id), ts_ns=ts,
                target=f"{ns}/{inp.names[i]}", action="scale_up" if to > frm else "scale_down",
                from_replicas=frm, to_replicas=to,
                reasons=(*(b.reasons[k - 1:k]),
                         f"cluster write batch {n}: {len(b.services)} write(s) at t={b.t_s:.1f} s"),
                signals=b.signals[k - 1] if b.signals else {}))
        out.append(CycleRecord(cycle_id=cid, run_id=RunId(run_id), ts_ns=ts, policy=policy,
                               decisions=tuple(decisions), snapshot={"batch": n, "writes": len(decisions), **stamp}))
    return out
