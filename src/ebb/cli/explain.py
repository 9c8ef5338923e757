"""``ebb explain DECISION_ID``: why the controller did what it did, read back from the decision ledger.

Prints the cycle time and policy, the target, action and replicas from → to, the reasons, the signals
the policy saw (a table), the weights, the vetoes, the chosen victims, the plan, and the causal
parents (``caused_by``) and children (later decisions of the same run caused by this one).
``--json`` prints the same as one JSON object. ``ebb explain --list`` lists the latest run's recent
decisions with their policy (``--run RUN`` another run, ``--run all`` every run). A decision's victims'
drains (start, in-flight steps, end: :mod:`ebb.model.drains`) follow its explanation; ``--list
--drains`` lists the run's drains instead of its decisions (:mod:`ebb.cli.explain_drains`).

Times: a live controller stamps decisions with the wall clock (shown as UTC); the simulator stamps
them with the trace's own clock, seconds from the trace's start (shown as ``trace +H:MM:SS.mmm``,
never as a 1970 date). A stamp before 2000-01-01 UTC (:data:`TRACE_CLOCK_BEFORE_NS`) is a trace time:
no wall clock Ebb runs on reads earlier, and no simulated trace is 30 years long.

The ledger is only read, and opened read-only (an SQLite ledger on a read-only mount or in a
directory this user cannot write opens too); a missing ledger file is an error, never silently
created. Malformed rows are never fatal to a listing: the good rows are shown and one
``warning: skipped N malformed rows ...`` line (naming the first) goes to stderr. The decision asked
for being malformed is an error. etcd ledgers take ``--etcd-ca/--etcd-cert/--etcd-key/--etcd-user/
--etcd-password-file`` (see ``ebb.cli.ledger_options``).
Exit codes: 0 found, 2 unknown or malformed decision id (the message lists the nearest ids) or
unusable ledger — one line, never a traceback.
"""

from __future__ import annotations

import difflib
import json
from datetime import UTC, datetime
from typing import Annotated, Any

import typer

from ebb.cli.app import app
from ebb.cli.explain_drains import drain_blocks, read_drains
from ebb.cli.ledger_options import (
    EtcdCaOpt,
    EtcdCertOpt,
    EtcdKeyOpt,
    EtcdPasswordFileOpt,
    EtcdUserOpt,
    etcd_auth,
    quiet_row_warnings,
    skipped_warning,
)
from ebb.cli.output_option import OutputOpt, wants_json
from ebb.errors import EbbError, InputError
from ebb.ledger import DEFAULT_PATH, Ledger, MalformedRow, open_ledger
from ebb.model.decisions import CycleRecord, DecisionRecord
from ebb.model.drains import DrainEvent
from ebb.model.ids import CycleId, DecisionId, RunId
from ebb.score.units import plural

__all__ = ["explain_json", "explain_text", "format_time", "format_ts", "latest_run", "nearest_ids"]

TRACE_CLOCK_BEFORE_NS = 946_684_800 * 1_000_000_000
"""2000-01-01T00:00:00Z: stamps before it are a simulated trace's clock (seconds from its start)."""


def format_ts(ts_ns: int) -> str:
    """UTC ISO-8601 with nanoseconds: ``2024-05-01T12:00:00.000000001Z``."""
    secs, ns = divmod(ts_ns, 1_000_000_000)
    try:
        stamp = datetime.fromtimestamp(secs, UTC).strftime("%Y-%m-%dT%H:%M:%S")
    except (OverflowError, OSError, ValueError):
        return f"ts_ns={ts_ns}"
    return f"{stamp}.{ns:09d}Z"


def format_time(ts_ns: int) -> str:
    """A wall-clock stamp as :func:`format_ts`; a trace-clock stamp (before
    :data:`TRACE_CLOCK_BEFORE_NS`) as ``trace +H:MM:SS.mmm`` from the trace's start, with a day count
    past 24 h (``trace +2 d 03:04:05.000``)."""
    if not 0 <= ts_ns < TRACE_CLOCK_BEFORE_NS:
        return format_ts(ts_ns)
    ms = ts_ns // 1_000_000
    days, ms = divmod(ms, 86_400_000)
    h, ms = divmod(ms, 3_600_000)
    m, ms = divmod(ms, 60_000)
    sec, ms = divmod(ms, 1000)
    return f"trace +{f'{days} d ' if days else ''}{h}:{m:02d}:{sec:02d}.{ms:03d}"


def latest_run(cycles: list[CycleRecord]) -> RunId | None:
    """The run recorded most recently: by wall-clock stamp, or for a simulated run (trace clock) by
    the ``recorded_unix_ns`` its cycles carry in their snapshot (``ebb simulate --ledger`` writes
    it). A run with neither (an old ledger) counts as recorded at 0; ties go to the run listed last."""
    best: tuple[int, int] | None = None
    run: RunId | None = None
    for i, c in enumerate(cycles):
        stamp = c.snapshot.get("recorded_unix_ns") if c.ts_ns < TRACE_CLOCK_BEFORE_NS else c.ts_ns
        key = (stamp if isinstance(stamp, int) else 0, i)
        if best is None or key > best:
            best, run = key, c.run_id
    return run


def nearest_ids(wanted: str, known: list[str], n: int = 5) -> list[str]:
    """Ids starting with ``wanted``; else those sharing its longest prefix; else close spellings."""
    starts = sorted(k for k in known if k.startswith(wanted))
    if starts:
        return starts[:n]
    best, hits = 0, []
    for k in known:
        common = 0
        for a, b in zip(k, wanted):
            if a != b:
                break
            common += 1
        if common > best:
            best, hits = common, [k]
        elif common == best and common > 0:
            hits.append(k)
    if hits:
        return sorted(hits)[:n]
    return difflib.get_close_matches(wanted, known, n=n, cutoff=0.5)


def _summary(d: DecisionRecord) -> str:
    return f"{d.decision_id}  {d.action} {d.target} {d.from_replicas}→{d.to_replicas}  (cycle {d.cycle_id})"


def _num(x: float) -> str:
    return f"{x:.6g}"


def _table(rows: list[tuple[str, str]], header: tuple[str, str]) -> list[str]:
    width = max(len(header[0]), *(len(r[0]) for r in rows))
    out = [f"    {header[0]:<{width}}  {header[1]}", f"    {'-' * width}  {'-' * len(header[1])}"]
    out += [f"    {k:<{width}}  {v}" for k, v in rows]
    return out


def _parent(ledger: Ledger, pid: DecisionId, skipped: list[MalformedRow]) -> DecisionRecord | None:
    """A parent decision; None when it is not in the ledger, or is malformed there (then it is also
    added to ``skipped``, so the warning line names it: a parent is context, not the answer)."""
    try:
        return ledger.get_decision(pid)
    except InputError as exc:
        skipped.append(MalformedRow("decision", pid, str(exc)))
        return None


def _causal(ledger: Ledger, d: DecisionRecord, skipped: list[MalformedRow]
            ) -> tuple[list[tuple[DecisionId, DecisionRecord | None]], list[DecisionRecord]]:
    parents = [(p, _parent(ledger, p, skipped)) for p in d.caused_by]
    children = [c for c in ledger.decisions(run_id=d.run_id) if d.decision_id in c.caused_by]
    skipped += ledger.skipped
    return parents, children


def explain_text(d: DecisionRecord, cycle: CycleRecord | None, parents: list[tuple[DecisionId, DecisionRecord | None]],
                 children: list[DecisionRecord], drains: list[DrainEvent] | None = None) -> str:
    """The human explanation of one decision."""
    lines = [f"decision {d.decision_id}  (cycle {d.cycle_id}, run {d.run_id})"]
    if cycle is not None:
        lines.append(f"  cycle time  {format_time(cycle.ts_ns)}  policy {cycle.policy or '-'}"
                     f"  fencing token {cycle.fencing_token}")
    if cycle is None or cycle.ts_ns != d.ts_ns:
        lines.append(f"  decided at  {format_time(d.ts_ns)}")
    lines.append(f"  target      {d.target}")
    lines.append(f"  action      {d.action}  {d.from_replicas} → {d.to_replicas} replicas")
    lines.append("  reasons")
    lines += [f"    - {r}" for r in d.reasons] or ["    (none recorded)"]
    lines.append("  signals")
    lines += _table([(k, _num(v)) for k, v in sorted(d.signals.items())], ("signal", "value")) \
        if d.signals else ["    (none recorded)"]
    lines.append("  weights")
    lines += [f"    {k} = {_num(v)}" for k, v in sorted(d.weights.items())] or ["    (none recorded)"]
    lines.append(f"  vetoes      {', '.join(d.vetoes) if d.vetoes else '(none)'}")
    lines.append(f"  victims     {', '.join(d.victims) if d.victims else '(none)'}")
    lines.append("  plan")
    plan = json.dumps(dict(d.plan), indent=2, sort_keys=True, ensure_ascii=False) if d.plan else "(none)"
    lines += [f"    {ln}" for ln in plan.splitlines()]
    if cycle is not None and cycle.snapshot:
        lines.append(f"  state       {json.dumps(dict(cycle.snapshot), sort_keys=True, ensure_ascii=False)}")
    lines.append("  caused by")
    lines += [f"    {_summary(p) if p is not None else f'{pid}  (not in this ledger)'}" for pid, p in parents] \
        or ["    (nothing: a root decision)"]
    lines.append("  led to")
    lines += [f"    {_summary(c)}" for c in children] or ["    (nothing yet)"]
    lines.append("  drains")
    lines += [f"    {ln}" for ln in drain_blocks(drains or (), format_time)] or ["    (none recorded)"]
    return "\n".join(lines)


def explain_json(d: DecisionRecord, cycle: CycleRecord | None, parents: list[tuple[DecisionId, DecisionRecord | None]],
                 children: list[DecisionRecord], drains: list[DrainEvent] | None = None) -> dict[str, Any]:
    """The machine-readable explanation (``--json``)."""
    def brief(x: DecisionRecord) -> dict[str, Any]:
        return {"decision_id": x.decision_id, "cycle_id": x.cycle_id, "ts_ns": x.ts_ns, "target": x.target,
                "action": x.action, "from_replicas": x.from_replicas, "to_replicas": x.to_replicas}

    return {
        "decision": d.to_dict(),
        "cycle": None if cycle is None else {
            "cycle_id": cycle.cycle_id, "run_id": cycle.run_id, "ts_ns": cycle.ts_ns,
            "time": format_time(cycle.ts_ns), "policy": cycle.policy, "fencing_token": cycle.fencing_token,
            "snapshot": cycle.to_dict()["snapshot"],
        },
        "parents": [{"decision_id": pid, "found": p is not None, **(brief(p) if p is not None else {})}
                    for pid, p in parents],
        "children": [brief(c) for c in children],
        "drains": [e.to_dict() for e in drains or ()],
    }


def _fail(message: str) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(2)


def _list_drains(ledger: Ledger, where: str, run: str | None, limit: int, as_json: bool,
                 skipped: list[MalformedRow]) -> None:
    """``--list --drains``: the ``limit`` most recent drains of the latest run (or ``run``, or all)."""
    chosen = latest_run(ledger.cycles()) if run is None else None if run == "all" else RunId(run)
    events = read_drains(ledger, chosen, skipped)
    ids = list(dict.fromkeys(e.drain_id for e in events))[-limit:]
    recent = [e for e in events if e.drain_id in set(ids)]
    if as_json:
        typer.echo(json.dumps([e.to_dict() for e in recent], ensure_ascii=False))
        return
    scope = f" (run {chosen})" if chosen is not None else " (every run)"
    if not recent:
        typer.echo(f"no drains{scope} in {where}")
        return
    total = len({e.drain_id for e in events})
    typer.echo(f"{len(ids)} most recent of {plural(total, 'drain')} in {where}{scope}")
    for ln in drain_blocks(recent, format_time):
        typer.echo(f"  {ln}")


def _list(ledger: Ledger, where: str, run: str | None, limit: int, as_json: bool,
          skipped: list[MalformedRow]) -> None:
    # Cycles are context here (the latest run, the policy column): a malformed row is warned about
    # once, from the decisions read below (a cycle is skipped whole for a malformed decision row).
    # One run asked for: its cycles only (a shared ledger holds many runs).
    cycles = ledger.cycles() if run in (None, "all") else ledger.cycles(RunId(run))
    every = ledger.decisions()
    skipped += ledger.skipped
    chosen = latest_run(cycles) if run is None else None if run == "all" else RunId(run)
    found = every if chosen is None else [d for d in every if d.run_id == chosen]
    recent = found[max(0, len(found) - limit):]
    if as_json:
        typer.echo(json.dumps([d.to_dict() for d in recent], ensure_ascii=False))
        return
    if not recent:
        scope = f" for run {run!r}" if run not in (None, "all") else ""
        typer.echo(f"no decisions{scope} in {where}")
        return
    runs = len({d.run_id for d in every})
    others = f"; {plural(runs - 1, 'other run')}: --run RUN or --run all" if runs > 1 else ""
    scope = f" (run {chosen}{others})" if chosen is not None else f" ({plural(runs, 'run')})"
    typer.echo(f"{len(recent)} most recent of {plural(len(found), 'decision')} in {where}{scope}")
    policy = {c.cycle_id: c.policy or "-" for c in cycles}
    rows = [(format_time(d.ts_ns), d.decision_id, policy.get(d.cycle_id, "-"), d.target,
             f"{d.action} {d.from_replicas}→{d.to_replicas}", d.reasons[0] if d.reasons else "") for d in recent]
    header = ("time", "decision", "policy", "target", "action", "first reason")
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    for r in (header, *rows):
        typer.echo("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())


@app.command("explain")
def explain_command(
    decision_id: Annotated[str | None, typer.Argument(help="Decision to explain (see --list).")] = None,
    ledger: Annotated[str, typer.Option("--ledger", help="Ledger file, or etcd://HOST:PORT/PREFIX.")] = DEFAULT_PATH,
    as_json: Annotated[bool, typer.Option("--json", help="Same as -o json.")] = False,
    output: OutputOpt = "table",
    list_: Annotated[bool, typer.Option("--list", help="List recent decisions instead (the latest run's).")] = False,
    run: Annotated[str | None, typer.Option("--run", help="With --list: this run instead of the latest; "
                                                        "'all' for every run.")] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, help="With --list: how many recent decisions.")] = 20,
    drains: Annotated[bool, typer.Option("--drains", help="List the run's drains (start, in flight, end) "
                                                          "instead of its decisions (implies --list).")] = False,
    etcd_ca: EtcdCaOpt = None,
    etcd_cert: EtcdCertOpt = None,
    etcd_key: EtcdKeyOpt = None,
    etcd_user: EtcdUserOpt = None,
    etcd_password_file: EtcdPasswordFileOpt = None,
) -> None:
    """Explain one decision from the ledger: when, what, why (signals, weights, vetoes) and what it caused."""
    as_json = wants_json(output, as_json)
    list_ = list_ or drains
    if not list_ and decision_id is None:
        raise _fail("give a DECISION_ID, or --list to see recent decisions")
    skipped: list[MalformedRow] = []
    with quiet_row_warnings():
        try:
            auth = etcd_auth(etcd_ca, etcd_cert, etcd_key, etcd_user, etcd_password_file)
            led = open_ledger(ledger, create=False, read_only=True, etcd_auth=auth)
        except EbbError as exc:
            raise _fail(str(exc)) from exc
        try:
            if list_:
                (_list_drains if drains else _list)(led, ledger, run, limit, as_json, skipped)
                _warn(ledger, skipped)
                return
            assert decision_id is not None
            d = led.get_decision(DecisionId(decision_id))
            if d is None:
                near = nearest_ids(decision_id, [x.decision_id for x in led.decisions()])
                hint = f" Nearest ids: {', '.join(near)}." if near else ""
                raise _fail(f"no decision {decision_id!r} in ledger {ledger}.{hint} "
                            f"List decisions with: ebb explain --list --ledger {ledger}")
            try:
                cycle = led.get_cycle(CycleId(d.cycle_id))
            except InputError as exc:  # the cycle row is context: explain the decision, name the bad row
                skipped.append(MalformedRow("cycle", d.cycle_id, str(exc)))
                cycle = None
            parents, children = _causal(led, d, skipped)
            mine = [e for e in read_drains(led, d.run_id, skipped) if e.decision_id == d.decision_id]
            if as_json:
                typer.echo(json.dumps(explain_json(d, cycle, parents, children, mine), ensure_ascii=False, indent=2))
            else:
                typer.echo(explain_text(d, cycle, parents, children, mine))
            _warn(ledger, skipped)
        except EbbError as exc:
            raise _fail(str(exc)) from exc
        finally:
            led.close()


def _warn(where: str, skipped: list[MalformedRow]) -> None:
    warning = skipped_warning(where, skipped)
    if warning is not None:
        typer.echo(warning, err=True)
