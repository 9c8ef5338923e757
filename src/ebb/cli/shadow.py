"""``ebb shadow report``: should we switch? A recommend-mode run's record against the fleet as it ran.

``ebb run --mode recommend`` beside a team's own autoscaler runs Ebb on a fleet of its own and writes
one shadow row a minute to the ledger (:mod:`ebb.live.shadow`). This command reads those rows and
the run's decisions and prints, verdict first (:mod:`ebb.score.shadow` defines every figure):

* GPU-hours as run and as Ebb would have run (``--gpus-per-replica``, default 1);
* risk minutes: Ebb below the fleet while the observed TTFT p99 was at least ``--near`` (0.8) × the
  SLO (``--slo-ttft-ms``, default the one the run recorded);
* the agreement rate, and the :data:`~ebb.score.shadow.TOP` (5) largest disagreements with the
  decisions that explain them;
* ``--html FILE``: the same as a self-contained page with the two replica curves and the risk
  minutes shaded (:mod:`ebb.score.shadow_html`).

``--run-id`` picks the run (default: the one whose shadow row is newest); ``--since 7d`` keeps the rows
of the last 7 days (``s``, ``m``, ``h``, ``d``, ``w``; ``all`` keeps every row). ``-o json`` prints the
figures as one JSON object. The ledger is only read (opened read-only; a missing file is an error,
never created); etcd ledgers take the ``--etcd-*`` flags. Malformed shadow rows are skipped with one
``warning:`` line on stderr. Exit codes: 0 a report (whatever its verdict), 2 bad input — an unreadable
ledger, no shadow row, a bad ``--since`` — in one ``error:`` line naming it and the fix.
"""

from __future__ import annotations

import json
import math
import re
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from ebb.cli.app import app
from ebb.cli.help_format import EbbTyper
from ebb.cli.ledger_options import (EtcdCaOpt, EtcdCertOpt, EtcdKeyOpt, EtcdPasswordFileOpt, EtcdUserOpt, etcd_auth,
                                    quiet_row_warnings)
from ebb.cli.output_option import OutputOpt, wants_json
from ebb.errors import EbbError, InputError
from ebb.ledger import DEFAULT_PATH, Ledger, open_ledger
from ebb.model.decisions import CycleRecord
from ebb.model.ids import RunId
from ebb.model.shadow import SLOTS, ShadowMinute, shadow_of
from ebb.score.shadow import ShadowReport, saving_text, shadow_report, utc_stamp
from ebb.score.units import plural

__all__ = ["parse_since", "report_json", "report_text", "shadow_app"]

shadow_app = EbbTyper(help="Shadow mode: what Ebb would have done beside your own autoscaler "
                              "(recorded by ebb run --mode recommend).", no_args_is_help=True)
app.add_typer(shadow_app, name="shadow")

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 604_800}
_SINCE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")


def parse_since(text: str) -> float | None:
    """``7d`` → seconds (``s``, ``m``, ``h``, ``d``, ``w``); ``all`` → None; InputError otherwise."""
    if text.strip().lower() == "all":
        return None
    m = _SINCE.match(text)
    if m is None or not 0 < float(m.group(1)) < 1e9:
        raise InputError(f"--since {text!r}: not a duration (fix: a number and a unit s, m, h, d or w, such as "
                         "--since 7d or --since 90m, or --since all)")
    return float(m.group(1)) * _UNITS[m.group(2)]


def _rows(ledger: Ledger, run_id: str | None, skipped: list[str]) -> tuple[str, list[ShadowMinute]]:
    """(run id, its shadow minutes): ``run_id``'s, or the run whose shadow row is newest."""
    cycles = ledger.cycles(RunId(run_id)) if run_id else ledger.cycles()
    mine: list[tuple[CycleRecord, ShadowMinute]] = []
    for c in cycles:
        try:
            m = shadow_of(c)
        except InputError as exc:
            skipped.append(str(exc))
            continue
        if m is not None:
            mine.append((c, m))
    if not mine:
        runs = sorted({c.run_id for c in cycles})
        scope = f"run {run_id!r}" if run_id else "any run"
        hint = f"; runs in it: {', '.join(runs[:5])}" if runs and not run_id else ""
        raise InputError(f"no shadow rows for {scope} in this ledger{hint}",
                         fix="record some with ebb run --mode recommend (one row a minute), or pick the run "
                             "with --run-id")
    chosen = run_id or max(mine, key=lambda cm: (cm[1].start_s, cm[0].cycle_id))[0].run_id
    return chosen, [m for c, m in mine if c.run_id == chosen]


def report_text(r: ShadowReport, run_id: str) -> list[str]:
    """What ``ebb shadow report`` prints, verdict first."""
    lines = [r.verdict,
             f"  GPU-hours     as run {r.as_run_gpu_h:,.3f}, as Ebb would have run {r.ebb_gpu_h:,.3f} "
             f"({saving_text(r.saving)})",
             f"  risk minutes  {r.risk_minutes:,} of {r.compared_minutes:,} ({r.risk_seconds:,} risk seconds): Ebb "
             f"below your fleet while the observed TTFT p99 was >= {r.near:g} x the {r.slo_ttft_ms:g} ms SLO",
             f"  agreement     {r.agreement:.1%} of {r.compared_s:,} compared seconds (Ebb lower "
             f"{r.lower_share:.1%}, higher {r.higher_share:.1%})",
             f"  compared      {r.compared_s:,} s of {r.span_s:,} s from {utc_stamp(r.series.start_s)}; run "
             f"{run_id}, target {r.target}, policy {r.policy}"]
    if r.disagreements:
        lines.append("  largest disagreements")
    for i, d in enumerate(r.disagreements, 1):
        fleet = "–".join(dict.fromkeys(str(v) for v in d.as_run))
        ebb = "–".join(dict.fromkeys(str(v) for v in d.ebb))
        lines.append(f"    {i}. {utc_stamp(d.start_s)} for {d.seconds:,} s: your fleet {fleet}, Ebb {ebb} "
                     f"({'lower' if d.lower else 'higher'}), {d.replica_s:,.0f} replica-s, {d.risk_seconds:,} risk s")
        lines += [f"       {w}" for w in d.why]
    return lines


def report_json(r: ShadowReport, run_id: str) -> dict[str, Any]:
    """The figures as one JSON object (``-o json``; the per-second series are not included)."""
    return {"run_id": run_id, "verdict": r.kind, "verdict_text": r.verdict, "target": r.target, "policy": r.policy,
            "as_run_gpu_h": r.as_run_gpu_h, "ebb_gpu_h": r.ebb_gpu_h,
            "saving": None if math.isnan(r.saving) else r.saving, "agreement": r.agreement,
            "ebb_lower_share": r.lower_share, "ebb_higher_share": r.higher_share, "risk_minutes": r.risk_minutes,
            "compared_minutes": r.compared_minutes, "risk_seconds": r.risk_seconds,
            "risk_minute_starts_s": list(r.risk_minute_starts), "compared_s": r.compared_s, "span_s": r.span_s,
            "start_s": r.series.start_s, "slo_ttft_ms": r.slo_ttft_ms, "near": r.near,
            "gpus_per_replica": r.gpus_per_replica,
            "disagreements": [{"start_s": d.start_s, "seconds": d.seconds, "as_run": list(d.as_run),
                               "ebb": list(d.ebb), "replica_s": d.replica_s, "ebb_lower": d.lower,
                               "risk_seconds": d.risk_seconds, "why": list(d.why)} for d in r.disagreements]}


@shadow_app.command("report")
def report_cmd(
    ledger: Annotated[str, typer.Option(help="Ledger file or URL (sqlite path, etcd://HOST:PORT/PREFIX).")]
    = DEFAULT_PATH,
    run_id: Annotated[str | None, typer.Option("--run-id", help="The recommend-mode run (default: the one "
                                               "with the newest shadow row).")] = None,
    since: Annotated[str, typer.Option(help="Keep the rows of this last stretch: 90m, 24h, 7d, 2w, or all.")]
    = "7d",
    slo_ttft_ms: Annotated[float | None, typer.Option(help="TTFT SLO (ms) the risk is measured against "
                                                      "(default: the one the run recorded).")] = None,
    near: Annotated[float, typer.Option(help="A minute is near the SLO when its observed TTFT p99 is at least "
                                        "this share of it.")] = 0.8,
    gpus_per_replica: Annotated[float, typer.Option(help="GPUs one replica holds (GPU-hours = replica-hours × "
                                                    "this).")] = 1.0,
    html: Annotated[Path | None, typer.Option("--html", help="Also write the report as a self-contained HTML "
                                              "page with the two replica curves.")] = None,
    output: OutputOpt = "table",
    etcd_ca: EtcdCaOpt = None, etcd_cert: EtcdCertOpt = None, etcd_key: EtcdKeyOpt = None,
    etcd_user: EtcdUserOpt = None, etcd_password_file: EtcdPasswordFileOpt = None,
) -> None:
    """Verdict first: GPU-hours as run and as Ebb would have run, risk minutes, agreement, largest disagreements."""
    skipped: list[str] = []
    try:
        as_json = wants_json(output, False)
        window_s = parse_since(since)
        auth = etcd_auth(etcd_ca, etcd_cert, etcd_key, etcd_user, etcd_password_file)
        with quiet_row_warnings():
            led = open_ledger(ledger, create=False, read_only=True, etcd_auth=auth)
            try:
                chosen, minutes = _rows(led, run_id, skipped)
                decisions = led.decisions(RunId(chosen))
            finally:
                led.close()
        if window_s is not None:
            cut = time.time() - window_s
            kept = [m for m in minutes if m.start_s + SLOTS > cut]
            if not kept:
                newest = max(m.start_s for m in minutes) + SLOTS
                raise InputError(f"no shadow row of run {chosen} in the last {since} (the newest ends "
                                 f"{utc_stamp(newest)})", fix="widen --since, e.g. --since all")
            minutes = kept
        rep = shadow_report(minutes, decisions, slo_ttft_ms=slo_ttft_ms, near=near, gpus_per_replica=gpus_per_replica)
        if html is not None:
            from ebb.score.shadow_html import write_shadow
            write_shadow(html, rep, run_id=chosen, ledger=ledger)
    except EbbError as exc:
        typer.echo(f"error: {' '.join(str(exc).split())}", err=True)
        raise typer.Exit(2) from exc
    if skipped:
        typer.echo(f"warning: skipped {plural(len(skipped), 'malformed shadow row')} (everything else is counted); "
                   f"first: {' '.join(skipped[0].split())}", err=True)
    if as_json:
        typer.echo(json.dumps(report_json(rep, chosen), ensure_ascii=False))
        return
    for line in report_text(rep, chosen):
        typer.echo(line)
    if html is not None:
        typer.echo(f"  html          {html}")
