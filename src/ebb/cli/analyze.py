"""``ebb analyze FILE...``: distributions with modes, per-node heat and resource correlation.

Inputs: metric CSVs (wide with a time column of seconds or ISO-8601 datetimes, read by the same
function as ``ebb simulate --format csv``; wide without time given ``--step-s``; or the long
``ts_ns,series,value`` files ``python -m ebb.sources.nvml`` writes) and DeepSpeed comms logs
(``*.log``). With several files each one becomes a node: its series are named ``<file stem>/...``
so the heat map compares files. Malformed inputs stop the command with the file, line and fix.
Reading is :mod:`ebb.analysis.inputs`'s and the computations :mod:`ebb.analysis`'s; this module
reads the flags, calls them, prints and writes.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated

import numpy as np
import typer
from rich.console import Console
from rich.table import Table

from ebb.analysis import AnalysisReport, analyze
from ebb.analysis.inputs import load_samples
from ebb.analysis.report_html import render_html
from ebb.cli.app import app
from ebb.errors import ConfigError
from ebb.score.units import plural

_BLOCKS = " ▁▂▃▄▅▆▇█"


def _fmt(x: float) -> str:
    if not math.isfinite(x):
        return "–"
    return f"{x:.3g}" if abs(x) < 1000 else f"{x:,.0f}"


def _spark(row: np.ndarray, lo: float, hi: float) -> str:
    out = []
    for v in row:
        if not math.isfinite(float(v)):
            out.append("·")
        else:
            f = 0.0 if hi <= lo else (float(v) - lo) / (hi - lo)
            out.append(_BLOCKS[min(len(_BLOCKS) - 1, max(1, int(round(f * (len(_BLOCKS) - 1)))))])
    return "".join(out)


def _print(console: Console, report: AnalysisReport, coupled_abs_r: float) -> None:
    span = (report.t1_ns - report.t0_ns) / 1e9
    console.print(f"[bold]{report.n_samples:,}[/] {'sample' if report.n_samples == 1 else 'samples'}, "
                  f"{report.n_series} series, span {span:,.1f} s")
    t = Table(title="Distribution per resource (atoms: exact values holding >= 5 % of samples; "
                    "modes of the rest: range, share of samples)")
    for head in ("resource", "n", "mean", "p50", "p95", "p99", "atoms", "modes"):
        t.add_column(head, justify="left" if head in ("resource", "atoms", "modes") else "right")
    for d in report.distributions:
        atoms = "; ".join(f"{_fmt(a.value)}: {a.share:.1%}" for a in d.atoms) or "–"
        modes = "; ".join(f"{_fmt(m.lo)}–{_fmt(m.hi)} ({m.share:.1%})" for m in d.modes) or "–"
        if d.log_scale and d.modes:
            modes += " (log bins)"
        t.add_row(d.name, f"{d.n:,}", _fmt(d.mean), _fmt(d.p50), _fmt(d.p95), _fmt(d.p99), atoms, modes)
    console.print(t)
    for hm in report.heatmaps:
        finite = hm.cells[np.isfinite(hm.cells)]
        lo, hi = (float(finite.min()), float(finite.max())) if len(finite) else (0.0, 1.0)
        console.print(f"[bold]heat {hm.metric}[/] (per node, {hm.bin_ns / 1e9:.3g} s bins, {_fmt(lo)}–{_fmt(hi)})")
        shown = 24  # keep the terminal readable; the HTML page has every node
        for node, row in zip(hm.nodes[:shown], hm.cells[:shown]):
            console.print(f"  {node:>12} {_spark(row, lo, hi)}", highlight=False)
        if len(hm.nodes) > shown:
            console.print(f"  ... {plural(len(hm.nodes) - shown, 'more node')} (see --html)")
    if len(report.resources) > 1:
        ct = Table(title=f"Pearson correlation (|r| > {coupled_abs_r} = coupled load)")
        ct.add_column("")
        for n in report.resources:
            ct.add_column(n, justify="right")
        for i, a in enumerate(report.resources):
            cells = []
            for j in range(len(report.resources)):
                v = float(report.correlation[i, j])
                s = f"{v:.3f}" if math.isfinite(v) else "–"
                cells.append(f"[bold red]{s}[/]" if i != j and math.isfinite(v) and abs(v) > coupled_abs_r else s)
            ct.add_row(a, *cells)
        console.print(ct)
        if report.coupled:
            for c in report.coupled:
                console.print(f"coupled load: {c.a} ~ {c.b}  r = {c.r:.3f}")
        else:
            console.print(f"no resource pair has |r| > {coupled_abs_r}")


@app.command("analyze")
def analyze_cmd(
    files: Annotated[list[Path], typer.Argument(help="metric CSVs or DeepSpeed comms logs (*.log)")],
    time_col: Annotated[str | None, typer.Option(
        "--time-col", help="time column: seconds or ISO-8601 datetimes, parsed as `ebb simulate` parses them "
                           "(default: auto)")] = None,
    step_s: Annotated[float | None, typer.Option("--step-s", help="files without time: row i is at i x STEP seconds")] = None,
    columns: Annotated[str | None, typer.Option("--columns", help="comma-separated value columns to analyze")] = None,
    html_out: Annotated[Path | None, typer.Option("--html", help="also write a self-contained HTML report here")] = None,
    bins: Annotated[int, typer.Option("--bins", min=3, help="histogram bins per resource")] = 100,
    coupled_abs_r: Annotated[float, typer.Option("--coupled-r", min=0.0, max=1.0, help="|r| above which load is coupled")] = 0.7,
) -> None:
    """Distribution (with modes), per-node heat and Pearson correlation of collected samples."""
    if step_s is not None and not (math.isfinite(step_s) and step_s > 0):
        raise ConfigError(f"--step-s must be a positive number of seconds, got {step_s}")
    cols = [c.strip() for c in columns.split(",") if c.strip()] if columns else None
    batch = load_samples(files, time_col, step_s, cols)
    if len(batch) == 0:
        raise ConfigError("the inputs hold no samples")
    report = analyze(batch, bins=bins, coupled_abs_r=coupled_abs_r)
    console = Console()
    _print(console, report, coupled_abs_r)
    if html_out is not None:
        page = render_html(report, title=f"ebb analyze: {', '.join(f.name for f in files)}",
                           sources=[str(f) for f in files], coupled_abs_r=coupled_abs_r)
        html_out.write_text(page, encoding="utf-8")
        console.print(f"wrote {html_out}")
