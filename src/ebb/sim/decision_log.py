"""A simulated run's decisions as ledger records (pure: records out, the CLI writes them).

One :class:`~ebb.model.decisions.CycleRecord` per noteworthy decision of the run
(:attr:`PolicyRun.noteworthy <ebb.score.results.PolicyRun.noteworthy>`: changes, recorded vetoes,
canary gate steps), built by :mod:`ebb.decide.records` exactly as the live controller builds its
own: Ebb's cycles carry its explanation (signals, weights, vetoes, victims, plan), a baseline's
its change and reason. Victims are named ``replica-<id>``; the snapshot is the target the
policy saw (``{"replicas": from}``); a scale-up is caused by the change recorded before it.

Decision ids are short and stable within a run: ``<run>-<policy#>-<n>`` (e.g. ``r7f3a-2-15``),
cycles ``<run>-<policy#>-c<n>``, ``n`` from 1 in time order. Timestamps are virtual seconds since
the trace start, as nanoseconds.
"""

from __future__ import annotations

from ebb.decide.records import caused_by, cycle_record, decision_record, sim_victim_name
from ebb.model.decisions import CycleRecord
from ebb.model.ids import CycleId, DecisionId, RunId
from ebb.score.results import PolicyRun

__all__ = ["run_cycles"]


def run_cycles(run_id: str, policy_index: int, run: PolicyRun, target: str = "serving", *,
               recorded_unix_ns: int | None = None) -> list[CycleRecord]:
    """Ledger cycles for one policy's run, in time order (see the module docstring). Stamps are the
    trace's clock; ``recorded_unix_ns`` (the wall time of the recording) goes in each cycle's snapshot
    so ``ebb explain --list`` can tell which run is the latest."""
    stamp = {} if recorded_unix_ns is None else {"recorded_unix_ns": recorded_unix_ns}
    pol = run.scorecard.policy
    out: list[CycleRecord] = []
    prev: DecisionId | None = None
    for n, d in enumerate(run.noteworthy, start=1):
        did = DecisionId(f"{run_id}-{policy_index}-{n}")
        rec = decision_record(d, decision_id=did, cycle_id=CycleId(f"{run_id}-{policy_index}-c{n}"),
                              run_id=RunId(run_id), ts_ns=int(round(d.t_s * 1e9)), target=target,
                              victim_name=sim_victim_name, caused=caused_by(d, prev))
        out.append(cycle_record(rec, policy=pol, snapshot={"replicas": d.from_replicas, **stamp}))
        if d.changes:
            prev = did
    return out
