"""``ebb bursts``: find sub-second bursts in one column of a CSV with the L1 sliding-window engine.

The CSV is replayed in time order through a :class:`~ebb.window.sliding.SlidingWindow`
(``--window-ms`` split into ``--bucket-ms`` buckets); at every bucket boundary the windowed
``--quantile`` is compared with ``--threshold`` (less the sketch's 1 % relative error, so the
sketch never hides a true crossing); a burst is a stretch over threshold lasting at
least ``--min-duration-ms`` (see :mod:`ebb.decide.burst` for the exact definition).

Settings validated on real H200 telemetry (docs/l1.md): ``--threshold 55 --quantile 0.99
--window-ms 1000 --bucket-ms 100 --min-duration-ms 200`` on ``nvml_fast.csv``'s ``util_gpu``
finds 10 of 10 ground-truth bursts, no trickle or idle false positives, median delay 447.5 ms.

Reading the CSV is :mod:`ebb.analysis.csv_series`'s (once: the burst column and every trigger
column in one pass), the replay :mod:`ebb.analysis.bursts`'s (with its limits:
:data:`~ebb.analysis.bursts.MAX_WINDOW_BUCKETS` buckets per window,
:data:`~ebb.analysis.bursts.MAX_STEPS` steps per replay); this module checks the flags first
(:func:`~ebb.analysis.bursts.check_burst_settings`, and the triggers file), calls them and prints.

``--triggers FILE`` (:mod:`ebb.config.triggers`) also evaluates a multi-signal trigger on the same
CSV: each rule's signal is a column, replayed through the same window as its own ``quantile``;
:func:`~ebb.decide.triggers.evaluate_trigger` then says whether the trigger fires at the last
sample (each rule held for its ``sustain_s``). A rule naming a column the CSV lacks stops the
command (InputError naming the column), rather than silently never holding. With ``--triggers``,
``--threshold`` and ``--min-duration-ms`` may be left out to skip burst detection, and ``--json``
prints ``{"bursts": [...] or null, "trigger": {...}}``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import typer

from ebb.analysis.bursts import check_burst_settings, evaluate_trigger_series, find_bursts, trigger_columns
from ebb.analysis.csv_series import read_series
from ebb.cli.app import app
from ebb.cli.output_option import OutputOpt, wants_json
from ebb.config.triggers import default_triggers, load_triggers
from ebb.errors import ConfigError
from ebb.score.units import plural

__all__ = ["bursts_command"]


@app.command("bursts")
def bursts_command(
    input: Path = typer.Option(..., "--input", help="CSV file with a header row."),
    time_col: str = typer.Option("t", "--time-col", help="Column with time in seconds."),
    value_col: str = typer.Option("util_gpu", "--value-col", help="Column to watch."),
    threshold: float | None = typer.Option(None, "--threshold", help="Burst when windowed quantile >= this."),
    min_duration_ms: float | None = typer.Option(None, "--min-duration-ms", help="Minimum burst length (ms)."),
    quantile: float = typer.Option(0.99, "--quantile", help="Windowed quantile compared (0-1)."),
    window_ms: float = typer.Option(1000.0, "--window-ms", help="Sliding window length (ms)."),
    bucket_ms: float = typer.Option(100.0, "--bucket-ms", help="Bucket length = evaluation step (ms)."),
    triggers: Path | None = typer.Option(None, "--triggers", help="Also evaluate this trigger YAML "
                                         "(rules' signals are CSV columns) at the last sample; 'default' = "
                                         "the note's three chapter-1 triggers."),
    as_json: bool = typer.Option(False, "--json", help="Same as -o json (a JSON list)."),
    output: OutputOpt = "table",
) -> None:
    """Find bursts: the windowed quantile over a threshold for at least a minimum duration."""
    as_json = wants_json(output, as_json)
    if (threshold is None) != (min_duration_ms is None) or (threshold is None and triggers is None):
        raise ConfigError("ebb bursts needs --threshold and --min-duration-ms (bursts), --triggers FILE, "
                          "or both (fix: e.g. --threshold 55 --min-duration-ms 200)")
    # Validate first: every number and the triggers file before the CSV is read.
    check_burst_settings(window_ms=window_ms, bucket_ms=bucket_ms, quantile=quantile, threshold=threshold,
                         min_duration_ms=min_duration_ms)
    # "default": SM >= 75 % for 60 s, PCIe > 90 % for 30 s, AllReduce P99 > 12 ms (columns
    # gpm_sm_util_pct, pcie_bw_util_pct, nccl_allreduce_latency_ms).
    trigger = None if triggers is None else default_triggers() if str(triggers) == "default" else \
        load_triggers(triggers)
    columns = {} if threshold is None else {value_col: "pass --value-col with one of those names"}
    if trigger is not None:
        columns = {**trigger_columns(trigger), **columns}
    t_s, values = read_series(input, time_col, columns)  # one pass for the bursts and the trigger
    rows: list[dict[str, float]] | None = None
    if threshold is not None and min_duration_ms is not None:
        found = find_bursts(
            t_s, values[value_col], threshold=threshold, min_duration_ms=min_duration_ms,
            quantile=quantile, window_ms=window_ms, bucket_ms=bucket_ms,
        )
        rows = [
            {"start_s": b.start_s, "end_s": b.end_s, "peak": b.peak, "detect_delay_ms": b.detect_delay_ms}
            for b in found
        ]
    result = None if trigger is None else evaluate_trigger_series(t_s, values, trigger, window_ms=window_ms,
                                                                   bucket_ms=bucket_ms)
    if as_json:
        if result is None:
            typer.echo(json.dumps(rows))
            return
        typer.echo(json.dumps({"bursts": rows, "trigger": {
            "name": result.trigger.name, "combine": result.trigger.combine, "fired": result.fired,
            "rules": [{"signal": r.rule.signal, "op": r.rule.op, "threshold": r.rule.threshold,
                       "quantile": r.rule.quantile, "sustain_s": r.rule.sustain_s, "holds": r.holds,
                       "held_s": r.held_s, "last_value": None if math.isnan(r.last_value) else r.last_value}
                      for r in result.rules]}}))
        return
    from rich.console import Console
    from rich.table import Table

    if rows is not None and threshold is not None and min_duration_ms is not None:
        table = Table(title=f"{plural(len(rows), 'burst')} in {input.name}:{value_col} "
                            f"(p{quantile * 100:g} over {window_ms:g} ms >= {threshold:g} "
                            f"for >= {min_duration_ms:g} ms)")
        for col in ("start_s", "end_s", "peak", "detect_delay_ms"):
            table.add_column(col, justify="right")
        for r in rows:
            table.add_row(f"{r['start_s']:.3f}", f"{r['end_s']:.3f}", f"{r['peak']:.4g}",
                          f"{r['detect_delay_ms']:.0f}")
        Console().print(table)
    if result is not None:
        table = Table(title=f"trigger {result.trigger.name} ({result.trigger.combine}): "
                            f"{'FIRES' if result.fired else 'does not fire'} at the last sample")
        for col in ("signal", "rule", "last value", "held s", "holds"):
            table.add_column(col, justify="left" if col in ("signal", "rule") else "right")
        for rr in result.rules:
            table.add_row(rr.rule.signal, f"p{rr.rule.quantile * 100:g} {rr.rule.op} {rr.rule.threshold:g} "
                          f"for {rr.rule.sustain_s:g} s", f"{rr.last_value:.4g}", f"{rr.held_s:.1f}",
                          "yes" if rr.holds else "no")
        Console().print(table)
