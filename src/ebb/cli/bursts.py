"""``ebb bursts``: find sub-second bursts in one column of a CSV with the L1 sliding-window engine.

The CSV is replayed in time order through a :class:`~ebb.window.sliding.SlidingWindow`
(``--window-ms`` split into ``--bucket-ms`` buckets); at every bucket boundary the windowed
``--quantile`` is compared with ``--threshold`` (less the sketch's 1 % relative error, so the
sketch never hides a true crossing); a burst is a stretch over threshold lasting at
least ``--min-duration-ms`` (see :mod:`ebb.decide.burst` for the exact definition).

Settings validated on real H200 telemetry (docs/l1.md): ``--threshold 55 --quantile 0.99
--window-ms 1000 --bucket-ms 100 --min-duration-ms 200`` on ``nvml_fast.csv``'s ``util_gpu``
finds 10 of 10 ground-truth bursts, no trickle or idle false positives, median delay 447.5 ms.

``--triggers FILE`` (:mod:`ebb.config.triggers`) also evaluates a multi-signal trigger on the same
CSV: each rule's signal is a column, replayed through the same window as its own ``quantile``;
:func:`~ebb.decide.triggers.evaluate_trigger` then says whether the trigger fires at the last
sample (each rule held for its ``sustain_s``). A rule naming a column the CSV lacks stops the
command (InputError naming the column), rather than silently never holding. With ``--triggers``,
``--threshold`` and ``--min-duration-ms`` may be left out to skip burst detection, and ``--json``
prints ``{"bursts": [...] or null, "trigger": {...}}``.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Iterator, Mapping
from pathlib import Path

import numpy as np
import typer

from ebb.cli import checks
from ebb.cli.app import app
from ebb.cli.output_option import OutputOpt, wants_json
from ebb.config.triggers import Trigger, default_triggers, load_triggers
from ebb.decide.burst import Burst, detect_bursts
from ebb.decide.triggers import TriggerResult, evaluate_trigger
from ebb.errors import ConfigError, InputError
from ebb.window.sliding import SlidingWindow
from ebb.window.stream import windowed_quantiles

__all__ = ["read_columns", "read_series", "find_bursts", "evaluate_trigger_csv", "MAX_WINDOW_BUCKETS", "MAX_STEPS"]

MAX_WINDOW_BUCKETS = 10_000
"""Most buckets one window may hold (``--window-ms / --bucket-ms``). The sliding window keeps one ring
slot per bucket; 10,000 is 100 times the validated 1000/100 ms setting and already a 10 µs bucket
in a 100 ms window, finer than any sampler this reads (NVML's fastest is about 1 ms)."""

MAX_STEPS = 1_000_000
"""Most evaluation steps (bucket boundaries from the first sample to the last) one replay may take.
The replay loops once per bucket at about 100 µs a step, so the cap is about 2 minutes: one day of
data at 100 ms buckets (864,000 steps) fits; 30 days of 300 s samples at 100 ms (26 million steps,
most of them empty) is refused with the --bucket-ms that fits instead of running for an hour."""


def read_columns(path: Path, time_col: str, value_col: str) -> tuple[np.ndarray, np.ndarray]:
    """(t seconds, value) as float64 arrays; InputError names the file, line and fix."""
    t_s, values = read_series(path, time_col, {value_col: "pass --value-col with one of those names"})
    return t_s, values[value_col]


def read_series(path: Path, time_col: str, value_cols: Mapping[str, str]) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """The time column and every column of ``value_cols`` (name → the fix when it is missing) as
    float64 arrays, in one pass over the file; InputError names the file, line and fix."""
    p = str(path)
    try:
        fh = path.open(newline="", encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot open: {exc.strerror}", path=p, fix="check the --input path") from exc
    wanted = {time_col: "pass --time-col with one of those names", **{c: src for c, src in value_cols.items() if c != time_col}}
    with fh:
        try:
            return _parse_series(csv.reader(fh), p, time_col, value_cols, wanted)
        except (UnicodeDecodeError, csv.Error) as exc:
            # A binary file (an image, a gzip) or one with NUL bytes: not a CSV, whatever its name.
            why = "not UTF-8 text" if isinstance(exc, UnicodeDecodeError) else f"not a CSV ({exc})"
            raise InputError(f"cannot read as CSV: {why}", path=p,
                             fix="pass a UTF-8 CSV file with a header row (decompress it first if it is gzipped)") from None


def _parse_series(reader: Iterator[list[str]], p: str, time_col: str, value_cols: Mapping[str, str],
                  wanted: Mapping[str, str]) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    header = next(reader, None)
    if header is None:
        raise InputError("empty file, expected a header row", path=p, line=1)
    cols = [h.strip() for h in header]
    for name, fix in wanted.items():
        if name not in cols:
            raise InputError(f"no column {name!r}; columns are: {', '.join(cols)}", path=p, line=1, fix=fix)
    idx = [(cols.index(name), name) for name in wanted]
    out: dict[str, list[float]] = {name: [] for name in wanted}
    for line_no, row in enumerate(reader, start=2):
        if not row:
            continue
        for col_i, name in idx:
            cell = row[col_i].strip() if col_i < len(row) else ""
            try:
                x = float(cell)
            except ValueError:
                raise InputError(
                    f"column {name!r} is not numeric: {cell!r}", path=p, line=line_no,
                    fix="remove or repair the row",
                ) from None
            if not math.isfinite(x):
                raise InputError(
                    f"column {name!r} is not finite: {cell!r}", path=p, line=line_no,
                    fix="drop rows with NaN/inf before running ebb bursts",
                )
            out[name].append(x)
    if not out[time_col]:
        raise InputError("no data rows after the header", path=p, line=2)
    arrays = {name: np.asarray(v, dtype=np.float64) for name, v in out.items()}
    return arrays[time_col], {c: arrays[c] for c in value_cols}


def find_bursts(
    t_s: np.ndarray, value: np.ndarray, *, threshold: float, min_duration_ms: float,
    quantile: float = 0.99, window_ms: float = 1000.0, bucket_ms: float = 100.0,
) -> list[Burst]:
    """Replay one series through the sliding window and detect bursts (pure apart from numpy)."""
    window = _window(window_ms, bucket_ms)
    if not 0.0 <= quantile <= 1.0:
        raise ConfigError(f"--quantile {quantile:g} must be in [0, 1] (fix: e.g. --quantile 0.99)")
    if not (min_duration_ms >= 0 and math.isfinite(min_duration_ms)):
        raise ConfigError(f"--min-duration-ms {min_duration_ms:g} must be a finite number >= 0 "
                          "(fix: e.g. --min-duration-ms 200)")
    checks.finite("--threshold", threshold, fix="e.g. --threshold 55")
    _check_steps(t_s, bucket_ms, window_ms)
    ts_ns = np.round(t_s * 1e9).astype(np.int64)
    times, qs = windowed_quantiles(window, np.zeros(len(ts_ns), dtype=np.int64), value, ts_ns, quantile)
    return detect_bursts(times / 1e9, qs, threshold, min_duration_ms, rel_tolerance=window.mapping.alpha)


def _window(window_ms: float, bucket_ms: float) -> SlidingWindow:
    checks.positive("--bucket-ms", bucket_ms, fix="e.g. --window-ms 1000 --bucket-ms 100")
    checks.positive("--window-ms", window_ms, fix="e.g. --window-ms 1000 --bucket-ms 100")
    n_buckets = window_ms / bucket_ms
    if n_buckets > MAX_WINDOW_BUCKETS:
        raise ConfigError(
            f"--window-ms {window_ms:g} / --bucket-ms {bucket_ms:g} is {n_buckets:,.0f} buckets, more than the "
            f"{MAX_WINDOW_BUCKETS:,} a window holds (fix: a --bucket-ms of at least "
            f"{window_ms / MAX_WINDOW_BUCKETS:g}, e.g. --window-ms 1000 --bucket-ms 100)")
    if n_buckets < 1 or abs(n_buckets - round(n_buckets)) > 1e-9 or round(bucket_ms * 1e6) < 1:
        raise ConfigError(
            f"--window-ms {window_ms:g} must be a positive multiple of --bucket-ms {bucket_ms:g} "
            "(fix: e.g. --window-ms 1000 --bucket-ms 100)"
        )
    return SlidingWindow(1, buckets=int(round(n_buckets)), bucket_ms=bucket_ms)


def _check_steps(t_s: np.ndarray, bucket_ms: float, window_ms: float) -> None:
    """Refuse a replay of more than :data:`MAX_STEPS` buckets before starting it (it loops per bucket)."""
    if not len(t_s):
        return
    span_ms = (float(np.max(t_s)) - float(np.min(t_s))) * 1000.0
    steps = span_ms / bucket_ms + 1
    if steps > MAX_STEPS:
        need = span_ms / (MAX_STEPS - 1)
        raise ConfigError(
            f"--bucket-ms {bucket_ms:g} over {span_ms / 1000:,.0f} s of data is {steps:,.0f} evaluation steps, "
            f"more than the {MAX_STEPS:,} one replay takes (about 100 µs each) (fix: a --bucket-ms of at least "
            f"{math.ceil(need) if need >= 1 else need:,.3g} with a --window-ms that is a multiple of it (now {window_ms:g}), or a shorter stretch "
            "of the CSV)")


def evaluate_trigger_csv(path: Path, trigger: Trigger, *, time_col: str = "t", window_ms: float = 1000.0,
                         bucket_ms: float = 100.0) -> TriggerResult:
    """Each rule's windowed quantile over its column of ``path``, then the trigger at the last sample.

    A signal missing from the CSV raises InputError naming it (the user asked for it).
    """
    quantiles = {(r.signal, r.quantile) for r in trigger.rules}
    if len(quantiles) != len({s for s, _ in quantiles}):
        # evaluate_trigger takes one stream per signal: two quantiles of one signal would need two.
        raise ConfigError(f"trigger {trigger.name!r}: rules on one signal use different quantiles "
                          "(fix: give every rule on a signal the same quantile)")
    quantile_of = dict(quantiles)
    # One pass over the file for every signal the rules name.
    t_s, values = read_series(path, time_col, {
        s: f"make each rule's signal in trigger {trigger.name!r} one of those names" for s in quantile_of})
    _check_steps(t_s, bucket_ms, window_ms)
    ts_ns = np.round(t_s * 1e9).astype(np.int64)
    bins = np.zeros(len(ts_ns), dtype=np.int64)
    streams: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for signal, q in quantile_of.items():
        times, qs = windowed_quantiles(_window(window_ms, bucket_ms), bins, values[signal], ts_ns, q)
        streams[signal] = (times / 1e9, qs[:, 0])  # one series: column 0 of (T, 1)
    return evaluate_trigger(trigger, streams)


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
    # Validate first: every number before the CSV is read.
    _window(window_ms, bucket_ms)
    checks.in_range("--quantile", quantile, 0.0, 1.0, fix="e.g. --quantile 0.99")
    if threshold is not None:
        checks.finite("--threshold", threshold, fix="e.g. --threshold 55")
    if min_duration_ms is not None:
        checks.non_negative("--min-duration-ms", min_duration_ms, fix="e.g. --min-duration-ms 200")
    rows: list[dict[str, float]] | None = None
    if threshold is not None and min_duration_ms is not None:
        t_s, value = read_columns(input, time_col, value_col)
        found = find_bursts(
            t_s, value, threshold=threshold, min_duration_ms=min_duration_ms,
            quantile=quantile, window_ms=window_ms, bucket_ms=bucket_ms,
        )
        rows = [
            {"start_s": b.start_s, "end_s": b.end_s, "peak": b.peak, "detect_delay_ms": b.detect_delay_ms}
            for b in found
        ]
    result = None
    if triggers is not None:
        # "default": SM >= 75 % for 60 s, PCIe > 90 % for 30 s, AllReduce P99 > 12 ms (columns
        # gpm_sm_util_pct, pcie_bw_util_pct, nccl_allreduce_latency_ms).
        trigger = default_triggers() if str(triggers) == "default" else load_triggers(triggers)
        result = evaluate_trigger_csv(input, trigger, time_col=time_col,
                                      window_ms=window_ms, bucket_ms=bucket_ms)
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
        table = Table(title=f"{len(rows)} burst(s) in {input.name}:{value_col} "
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
