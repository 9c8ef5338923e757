"""``ebb pareto MEASUREMENTS.csv``: which serving configurations are on the Pareto frontier.

SPEC §3.5 / note §4.3. Each data row of the CSV is one *measurement* of one configuration: the
``--config`` columns say which configuration (default: every column that is neither an objective
nor the time column), the ``--minimize`` columns are its objectives (at least 2, all minimised;
``-tokens_per_s`` means "maximise ``tokens_per_s``"). Without ``--time-column`` the frontier is
over every row (batch); with ``--time-column T --window-s W`` rows feed the online monitor in file
order and the result is the frontier at the last timestamp over the rows newer than ``last - W``.
Reading and its checks are :mod:`ebb.analysis.measurements`'s (64 MiB and 1,000,000 rows at most,
every named column present, finite numbers, rows as wide as the header, time never backwards), the
two modes :mod:`ebb.analysis.pareto`'s; this module reads the flags, calls them and prints.

Anything wrong stops the command with one line naming the file, the line, the column and the fix
(exit 2), before any output; so does a batch report whose comparisons would pass
:data:`ebb.analysis.pareto.MAX_COMPARISONS` (2·10**9: 100,000 rows on a 3-objective simplex are
refused in about 3 s instead of running 130 s). The table prints at most 500 frontier and 50
dominated rows (laying out 20,000 rows took rich about 10 s); ``--json`` has every row. Exit 0 otherwise, dominated configurations or not: this is a report,
not a gate.

``--json`` prints ``{"path", "objectives", "config_columns", "measurements", "window",
"frontier": [point], "dominated": [point + {"dominated_by": point}]}`` where a point is
``{"line", "config": {column: cell as written}, "values": {column: value as written}}`` (plus
``"ts_s"`` when windowed) and ``window`` is ``null`` (batch) or ``{"time_column", "window_s",
"now_s", "live", "expired"}``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Final

import typer

from ebb.analysis.measurements import Measurement, parse_objectives
from ebb.analysis.pareto import ParetoReport, pareto_report
from ebb.cli.app import app
from ebb.cli.output_option import OutputOpt, wants_json
from ebb.score.units import plural

__all__ = ["pareto_cmd", "report_json"]

_SHOWN: Final = 50  # dominated rows printed in the table; --json has all of them
_SHOWN_FRONTIER: Final = 500
"""Frontier rows printed in the table (--json has all): rich lays a 20,000-row table out in about 10 s."""


def _columns(spec: str | None) -> list[str] | None:
    return None if spec is None else [c.strip() for c in spec.split(",") if c.strip()]


def _point(report: ParetoReport, m: Measurement) -> dict[str, Any]:
    out: dict[str, Any] = {
        "line": m.line,
        "config": dict(zip(report.config_columns, m.config, strict=True)),
        "values": {o.column: v for o, v in zip(report.objectives, m.values, strict=True)},
    }
    if m.ts_s is not None:
        out["ts_s"] = m.ts_s
    return out


def report_json(report: ParetoReport) -> dict[str, Any]:
    """The ``--json`` object (see the module docstring)."""
    window = None
    if report.window_s is not None:
        window = {"time_column": report.time_column, "window_s": report.window_s, "now_s": report.now_s,
                  "live": len(report.frontier) + len(report.dominated), "expired": report.expired}
    return {
        "path": report.path,
        "objectives": [o.spec for o in report.objectives],
        "config_columns": list(report.config_columns),
        "measurements": report.n_rows,
        "window": window,
        "frontier": [_point(report, m) for m in report.frontier],
        "dominated": [{**_point(report, m), "dominated_by": _point(report, by)} for m, by in report.dominated],
    }


def _num(x: float) -> str:
    return f"{int(x):,}" if x.is_integer() and abs(x) < 1e15 else f"{x:.6g}"


def _label(m: Measurement) -> str:
    # Compact (the column header names the parts) so it stays on one line in an 80-column log.
    return f"{'/'.join(m.config)} (line {m.line})" if m.config else f"line {m.line}"


def _print(report: ParetoReport) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = Console(soft_wrap=True)
    objs = ", ".join(o.column if o.sign > 0 else f"{o.column} (max)" for o in report.objectives)
    if report.window_s is not None:
        live = len(report.frontier) + len(report.dominated)
        console.print(f"window {report.window_s:g} s on {escape(str(report.time_column))} at t = "
                      f"{report.now_s:g}: {live:,} of {plural(report.n_rows, 'measurement')} live, "
                      f"{report.expired:,} expired", highlight=False)
    front = Table(title=escape(f"frontier: {len(report.frontier)} of "
                               f"{plural(len(report.frontier) + len(report.dominated), 'measurement')} "
                               f"non-dominated (minimising {objs})"))
    heads = ["line", *report.config_columns, *(o.column for o in report.objectives)]
    for i, h in enumerate(heads):
        front.add_column(escape(h), justify="left" if 0 < i <= len(report.config_columns) else "right")
    for m in report.frontier[:_SHOWN_FRONTIER]:
        front.add_row(str(m.line), *(escape(c) for c in m.config), *(_num(v) for v in m.values))
    console.print(front)
    if len(report.frontier) > _SHOWN_FRONTIER:
        console.print(f"... {len(report.frontier) - _SHOWN_FRONTIER:,} more on the frontier (see --json)")
    if not report.dominated:
        console.print("no dominated configuration")
        return
    dom = Table(title=escape(f"dominated: {plural(len(report.dominated), 'measurement')}; the dominator costs no more "
                             "in every objective and less in one"))
    for i, h in enumerate(heads):
        dom.add_column(escape(h), justify="left" if 0 < i <= len(report.config_columns) else "right")
    dom.add_column("dominated by", justify="left")
    for m, by in report.dominated[:_SHOWN]:
        dom.add_row(str(m.line), *(escape(c) for c in m.config), *(_num(v) for v in m.values),
                    escape(_label(by)))
    console.print(dom)
    if len(report.dominated) > _SHOWN:
        console.print(f"... {len(report.dominated) - _SHOWN:,} more dominated (see --json)")


@app.command("pareto")
def pareto_cmd(
    measurements: Annotated[Path, typer.Argument(help="CSV, one row per measurement of a serving configuration")],
    config: Annotated[str | None, typer.Option("--config", help="comma-separated columns naming a configuration "
                                               "(default: every column not an objective or the time)")] = None,
    minimize: Annotated[str, typer.Option("--minimize", help="comma-separated objective columns, >= 2, all "
                                          "minimised; -COL maximises COL (e.g. -tokens_per_s)")]
        = "peak_mem_mib,latency_ms_p90",
    time_column: Annotated[str | None, typer.Option("--time-column", help="time in seconds; with --window-s "
                                                    "rows feed the online monitor in this order")] = None,
    window_s: Annotated[float | None, typer.Option("--window-s", help="sliding window (s): the frontier at the "
                                                   "last timestamp over the rows newer than last - W")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="same as -o json (the frontier and the dominated)")] = False,
    output: OutputOpt = "table",
) -> None:
    """Pareto frontier of serving configurations; flag the dominated ones and what dominates each."""
    as_json = wants_json(output, as_json)
    report = pareto_report(measurements, parse_objectives(minimize), config=_columns(config),
                           time_column=time_column, window_s=window_s)
    if as_json:
        typer.echo(json.dumps(report_json(report)))
        return
    _print(report)
