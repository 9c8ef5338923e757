"""``ebb plan FLEET.yaml``: what one L2 → L3 cycle would remove from a cluster snapshot.

The snapshot format and every check of it are :mod:`ebb.sim.snapshot`'s; the cycle (L2 rank, L3
budget split, victims under PDB and zone skew, pending pods' quota verdicts) is
:mod:`ebb.sim.snapshot_plan`'s, the code a cluster cycle runs. This module reads the flags, calls
them and prints a table or ``--json``. Nothing is written anywhere; a bad snapshot stops the command
with the file, the key path (``workloads[0].replicas[2].zone``) and the fix, exit 2.

The table's title counts the removals planned against those requested (``3 of 5 requested removals
planned``); when fewer are planned, one line under it says which workloads got fewer and why: vetoed,
the cluster budget, or their own limits (PDB, budget, zone skew).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from ebb.cli.app import app
from ebb.cli.output_option import OutputOpt, wants_json
from ebb.config.workloads import default_workload_classes, load_workload_classes
from ebb.score.units import plural
from ebb.sim.snapshot import load_snapshot
from ebb.sim.snapshot_plan import plan_snapshot

__all__ = ["plan_cmd"]


@app.command("plan")
def plan_cmd(
    snapshot: Annotated[Path, typer.Argument(help="cluster snapshot YAML: budget, workloads (replicas, PDB, "
                                                  "signals), optional quotas, pods and pending pods")],
    workloads: Annotated[Path | None, typer.Option("--workloads", help="workload class YAML "
                                                   "(default: the note's three classes)")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="same as -o json (the plan)")] = False,
    output: OutputOpt = "table",
) -> None:
    """Plan one scale-down cycle over a cluster snapshot: rank, split the budget, pick victims."""
    as_json = wants_json(output, as_json)
    classes = load_workload_classes(workloads) if workloads is not None else default_workload_classes()
    cycle = plan_snapshot(load_snapshot(snapshot, classes), classes)
    plan, ranks = cycle.cluster, cycle.ranks
    rows: list[dict[str, Any]] = []
    for g in plan.grants:
        v = cycle.victims[g.workload]
        rows.append({"workload": g.workload, "namespace": v.namespace, "requested": g.requested,
                     "granted": v.granted, "cluster_grant": g.granted, "victims": list(v.victim_ids),
                     "reclaimed": list(v.reclaimed), "rank": ranks.get(g.workload, ""), "reason": g.reason,
                     "limits": list(v.limits), "skew_before": v.skew_before, "skew_after": v.skew_after,
                     "allowed_disruptions": v.allowed_disruptions})
    total = sum(r["granted"] for r in rows)
    requested = sum(r["requested"] for r in rows)
    admissions = [{"pod": a.pod, "namespace": a.namespace, "qos": a.qos, "verdict": a.verdict, "reason": a.reason}
                  for a in cycle.pending]
    if as_json:
        typer.echo(json.dumps({"budget": plan.budget, "requested": requested, "granted": total, "workloads": rows,
                               "pending": admissions}))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{total} of {plural(requested, 'requested removal')} planned in {snapshot.name} "
                        f"(cluster budget {plan.budget} per cycle; rank order)")
    for col in ("workload", "requested", "granted", "victims", "why"):
        table.add_column(col, justify="right" if col in ("requested", "granted") else "left")
    for r in rows:
        # A vetoed workload's rank line carries the veto reasons; an eligible one's limits say why fewer.
        why = str(r["rank"]) if str(r["rank"]).startswith("vetoed") else "; ".join([r["reason"], *r["limits"]])
        table.add_row(str(r["workload"]), str(r["requested"]), str(r["granted"]),
                      ", ".join(r["victims"]) or "–", why)
    console = Console(soft_wrap=True)
    console.print(table)
    if total < requested:
        console.print(f"Fewer than requested: {_shortfall(rows, plan.budget)}.", highlight=False)
    if admissions:
        pending = Table(title=f"{plural(len(admissions), 'pending pod')} after this cycle (quota admission, in order)")
        for col in ("pod", "namespace", "qos", "verdict", "reason"):
            pending.add_column(col)
        for a in admissions:
            pending.add_row(a["pod"], a["namespace"], a["qos"], a["verdict"], a["reason"])
        console.print(pending)


def _shortfall(rows: list[dict[str, Any]], budget: int) -> str:
    """Each workload granted fewer removals than it requested, and why: ``recs 0 of 1 (vetoed)``,
    ``chat 1 of 2 (cluster budget 3 per cycle)``, ``db 0 of 1 (its own limits: pdb, skew)``."""
    parts = []
    for r in rows:
        if r["granted"] >= r["requested"]:
            continue
        if str(r["rank"]).startswith("vetoed"):
            why = "vetoed"
        elif r["cluster_grant"] < r["requested"]:
            why = f"cluster budget {budget} per cycle"
        else:
            kinds = list(dict.fromkeys(str(limit).split(":")[0] for limit in r["limits"]))
            why = "its own limits" + (f": {', '.join(kinds)}" if kinds else "")
        parts.append(f"{r['workload']} {r['granted']} of {r['requested']} ({why})")
    return "; ".join(parts)
