"""``ebb simulate``: replay a real trace through several policies and compare cost and SLO.

The flags are read into :class:`~ebb.config.simulate_settings.SimulateSettings` (one group per
``-h`` panel, merged with ``--config FILE``: :mod:`ebb.cli.config_option`); then the trace flags,
output paths and ledger are checked, all before the trace is read.
"""

from __future__ import annotations

import hashlib
import io
import math
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.measure import Measurement
from rich.table import Table

from ebb.cli import checks
from ebb.cli.app import app
from ebb.cli.checks import write_scorecards
from ebb.cli.config_option import ConfigOpt, PrintConfigOpt, panel, print_settings, read_settings, settings_option
from ebb.cli.ledger_options import etcd_auth, etcd_option
from ebb.cli.output_option import wants_json
from ebb.cli.simulate_history import as_run_row, check_history, history_scaling, load_history, saved_measured
from ebb.cli.progress import StepProgress, run_estimate
from ebb.cli.trace_options import TraceFlags, check_trace_flags
from ebb.config.policy_specs import parse_policies
from ebb.config.history_settings import HistorySettings
from ebb.config.simulate_settings import (
    DEFAULT_POLICIES,
    SIMULATE_GROUPS,
    FaultInjectionSettings,
    OutputSettings,
    PolicyListSettings,
    SimLedgerSettings,
    SimModelSettings,
    SimulateSettings,
    TraceInputSettings,
    simulate_settings,
)
from ebb.errors import ConfigError, InputError, MissingExtraError, TransientError
from ebb.ledger.location import EtcdAuth, check_auth_fits, parse_location
from ebb.model.trace import CountSeries, RequestTrace
from ebb.score.frontier import frontier_ratios
from ebb.score.names import abbreviate, legend
from ebb.score.report import write_report
from ebb.score.results import Scorecard
from ebb.score.units import human_count, human_span, plural
from ebb.score.as_run import AS_RUN_LEGEND, as_run_lines, is_as_run
from ebb.score.verdict import meets_slo, verdict
from ebb.sim.compare import FIDELITIES, Comparison, compare
from ebb.sim.policies import KNOWN_POLICIES, POLICY_HELP
from ebb.sim.service_time import ServiceTimeModel
from ebb.config.tiers import parse_tier
from ebb.sim.settings import (
    ClusterSettings,
    FaultSettings,
    MetricPipelineSettings,
    SimSettings,
    SloSettings,
)
from ebb.sources.traces import BUNDLED_TRACES, FORMATS, open_trace

_NARROWEST = ("canary ok/abort", "dropped", "misjudged", "cost $", "failed wakes", "wakeups", "TTFT p50/p99 ms", "E2E p50/p99 ms",
             "peak", "ups/downs")
"""Columns given up, first to last, until the table fits the terminal; every number stays in --json."""
POLICY_LABEL_CHARS = 16
"""Longer policy specs appear as P1, P2, ... in the table, spelled out in a legend below it."""


def _table(cmp: Comparison, width: int = 80, *, service_model: bool = False) -> tuple[Table, list[str]]:
    """The scorecard table at most ``width`` columns wide (no cell cut or wrapped), plus its legend lines.

    Columns are dropped in :data:`_NARROWEST` order (the p50/p99 pairs become p99 alone) until the
    table's natural width fits; at 80 columns policy, GPU-h, violations, both p99s and the HPA-frontier
    ratio remain. Under the service-time model (``service_model``) the first latency is the queue
    wait, not a first token, and its headers say ``wait``.
    """
    cards = [r.scorecard for r in cmp.runs]
    # GPU-hours over the HPA frontier (the hull of the HPA and static points) at the same violation rate.
    ratios = frontier_ratios([c.as_dict() for c in cards])
    labels = abbreviate((c.policy for c in cards), POLICY_LABEL_CHARS)
    columns: dict[str, Callable[[Scorecard], str]] = {
        "policy": lambda c: escape(labels[c.policy]),
        "GPU-h": lambda c: f"{c.gpu_hours:,.2f}",
        "cost $": lambda c: f"{c.cost_usd:,.2f}",
        "SLO viol %": lambda c: f"{c.slo_violation_pct:.3f}" + ("" if meets_slo(c) else " [red]✗[/]"),
        "TTFT p50/p99 ms": lambda c: f"{c.ttft_p50_ms:.0f} / {c.ttft_p99_ms:.0f}",
        "TTFT p99 ms": lambda c: f"{c.ttft_p99_ms:.0f}",
        "E2E p50/p99 ms": lambda c: f"{c.e2e_p50_ms:.0f} / {c.e2e_p99_ms:.0f}",
        "E2E p99 ms": lambda c: f"{c.e2e_p99_ms:.0f}",
        "peak": lambda c: str(c.peak_replicas),
        "ups/downs": lambda c: f"{c.scale_ups}/{c.scale_downs}",
        "misjudged": lambda c: str(c.misjudged_scale_downs),
        "canary ok/abort": lambda c: f"{c.canary_passes}/{c.canary_aborts}",
        "dropped": lambda c: str(c.dropped_requests),
    }
    if any(c.asleep_gpu_hours or c.wakeups or c.released_replica_hours for c in cards):  # a tier
        columns = {k: v for k, v in columns.items() if k != "policy"}
        released = {"released h": lambda c: f"{c.released_replica_hours:,.2f}"} \
            if any(c.released_replica_hours for c in cards) else {}
        columns = {"policy": lambda c: escape(labels[c.policy]), "GPU-h": columns.pop("GPU-h"),
                   "asleep GPU-h": lambda c: f"{c.asleep_gpu_hours:,.2f}", **released,
                   "wakeups": lambda c: str(c.wakeups), "failed wakes": lambda c: str(c.failed_wakes),
                   **columns}
    if ratios:
        columns["vs HPA frontier"] = lambda c: _ratio(ratios.get(c.policy))
    title = (f"{cmp.workload_name}: {human_count(cmp.requests)} requests over {human_span(cmp.duration_s)} "
             f"(load x{cmp.load_scale:.3g}, {cmp.fidelity}{_warmup_note(cards)})")
    shown = [k for k in columns if k not in ("TTFT p99 ms", "E2E p99 ms")]
    console = Console(width=10_000, file=io.StringIO())  # measures natural widths, prints nothing
    short = {"SLO viol %": "viol %", "TTFT p99 ms": "TTFT p99", "E2E p99 ms": "E2E p99", "vs HPA frontier": "vs HPA",
             "asleep GPU-h": "asleep", "released h": "released"}
    for drop in (None, *_NARROWEST, "short headers"):
        if drop in _NARROWEST:
            pair = {"TTFT p50/p99 ms": "TTFT p99 ms", "E2E p50/p99 ms": "E2E p99 ms"}.get(drop)
            shown = [pair if k == drop and pair else k for k in shown if k != drop or pair]
        t = Table(title=title)
        for col in shown:
            header = short.get(col, col) if drop == "short headers" else col
            t.add_column(header.replace("TTFT", "wait") if service_model else header,
                         justify="left" if col == "policy" else "right")
        for c in cards:
            t.add_row(*(columns[col](c) for col in shown))
        if Measurement.get(console, console.options.update_width(10_000), t).maximum <= width:
            break
    legend_lines = [f"{short} = {spec}" for short, spec in legend(labels)]
    if "released h" in columns:
        legend_lines.append("GPU-h are billed: a snapshotted replica is billed while its snapshot saves (asleep "
                            "GPU-h), then releases its GPU (released h: not billed, back in the restore time)")
    elif "asleep GPU-h" in columns:
        legend_lines.append("GPU-h are billed, asleep ones included: a sleeping replica holds its GPU; its HBM is "
                            "freed and lendable, the GPU itself only where the cluster shares or lends devices")
    if drop is not None:
        legend_lines.append(f"{width}-column terminal: some columns left out; every number is in --json")
    if drop == "short headers":
        legend_lines.append("latencies in ms; vs HPA: GPU-h over the HPA frontier's at the same violation rate")
    return t, legend_lines


def _warmup_note(cards: list[Scorecard]) -> str:
    """``, first 10 min warm-up, not scored`` when the run had a warm-up; empty otherwise."""
    warm = max((c.warmup_s for c in cards), default=0.0)
    return f", first {human_span(warm)} warm-up, not scored" if warm > 0 else ""


def _ratio(vs: float | None) -> str:
    return "" if vs is None else "n/a" if math.isnan(vs) else f"{vs:.2f}x"


def _record(where: str, cmp: Comparison, console: Console, etcd: EtcdAuth | None = None) -> None:
    """Append every policy's decisions to the ledger, one transaction per cycle."""
    from ebb.ledger import DEFAULT_PATH, open_ledger
    from ebb.ratelimit import TokenBucket
    from ebb.sim.decision_log import run_cycles

    now_ns = time.time_ns()
    run_id = "r" + hashlib.sha1(f"{now_ns}{cmp.workload_name}".encode()).hexdigest()[:5]
    book = open_ledger(where, etcd_auth=etcd)
    try:
        n = 0
        first: dict[str, str] = {}
        # Each cycle is one transaction; against a shared store (etcd) writes go through the
        # L3 rate limiter (3 per 100 ms) so a replay cannot flood the cluster's state store.
        bucket = TokenBucket() if where.startswith("etcd") else None
        for i, run in enumerate(cmp.runs, start=1):
            for cyc in run_cycles(run_id, i, run, recorded_unix_ns=now_ns):
                while bucket is not None:
                    took = bucket.take(time.monotonic())
                    bucket = took.bucket
                    if took.granted:
                        break
                    time.sleep(max(0.0, took.next_ok_s - time.monotonic()))
                book.append_cycle(cyc)
                n += len(cyc.decisions)
                if run.scorecard.policy not in first and cyc.decisions[0].action in ("scale_down", "veto"):
                    first[run.scorecard.policy] = cyc.decisions[0].decision_id
    finally:
        book.close()
    example = next(iter(first.values()), f"{run_id}-1-1")
    console.print(f"{plural(n, 'decision')} recorded in {where} (run {run_id}); explain one with: ebb explain {example}"
                  + (f" --ledger {where}" if where != DEFAULT_PATH else ""))


def _check_ledger(where: str, auth: EtcdAuth | None) -> None:
    """The ledger is usable before the simulation runs: a writable SQLite path, or an etcd that
    answers (its client installed: the error names ``pip install 'ebb[etcd]'``)."""
    loc = parse_location(where)
    check_auth_fits(loc, auth)
    if loc.kind == "sqlite":
        checks.sqlite_ledger_path("--ledger", loc.target)
    elif loc.kind == "etcd":
        from ebb.ledger import EtcdLedger, open_ledger

        try:
            book = open_ledger(where, etcd_auth=auth)
        except MissingExtraError as exc:
            raise MissingExtraError(f"--ledger {where}: {exc}") from exc
        try:
            if isinstance(book, EtcdLedger):
                book.check()  # one keys-only read: TLS, authentication and reachability, nothing written
        except TransientError as exc:
            raise ConfigError(f"--ledger {where}: {exc} (fix: start etcd or correct the URL, or pass "
                              "--ledger '' to record nothing)") from exc
        finally:
            book.close()


# Typer keeps single newlines only inside a "\b" paragraph (click's no-rewrap marker).
POLICIES_EPILOG = "Policies (--policy NAME:key=value,...):\n\n\b\n" + "\n".join(
    f"{name:<10} {line}" for name, line in POLICY_HELP.items())


@app.command("simulate", epilog=POLICIES_EPILOG)
def simulate(
    ctx: typer.Context,
    config: ConfigOpt = None,
    print_config: PrintConfigOpt = False,
    trace: Annotated[str, settings_option(TraceInputSettings, "trace", help_suffix=": " + ", ".join(BUNDLED_TRACES))]
    = TraceInputSettings.trace,
    fmt: Annotated[str, settings_option(TraceInputSettings, "format", "--format", help_suffix=": " + "|".join(FORMATS))]
    = TraceInputSettings.format,
    time_col: Annotated[str | None, settings_option(TraceInputSettings, "time_col", "--time-col", "--time-column")]
    = None,
    count_col: Annotated[str | None, settings_option(TraceInputSettings, "count_col", "--count-col",
                                                     "--count-column")] = None,
    tokens_in_col: Annotated[str | None, settings_option(TraceInputSettings, "tokens_in_col")] = None,
    tokens_out_col: Annotated[str | None, settings_option(TraceInputSettings, "tokens_out_col")] = None,
    no_header: Annotated[bool, settings_option(TraceInputSettings, "no_header")] = TraceInputSettings.no_header,
    service_time_column: Annotated[str | None, settings_option(TraceInputSettings, "service_time_column")] = None,
    service_median_s: Annotated[float | None, settings_option(TraceInputSettings, "service_median_s")] = None,
    service_p99_s: Annotated[float | None, settings_option(TraceInputSettings, "service_p99_s")] = None,
    concurrency: Annotated[int | None, settings_option(TraceInputSettings, "concurrency")] = None,
    servegen_client: Annotated[str | None, settings_option(TraceInputSettings, "servegen_client")] = None,
    window_s: Annotated[str | None, settings_option(TraceInputSettings, "window_s")] = None,
    load_scale: Annotated[float | None, settings_option(TraceInputSettings, "load_scale")] = None,
    peak_replicas: Annotated[str | None, settings_option(TraceInputSettings, "peak_replicas")] = None,
    cluster: Annotated[Path | None, settings_option(TraceInputSettings, "cluster")] = None,
    from_prometheus: Annotated[str | None, settings_option(HistorySettings, "from_prometheus")] = None,
    engine: Annotated[str, settings_option(HistorySettings, "engine")] = HistorySettings.engine,
    selector: Annotated[str | None, settings_option(HistorySettings, "selector", "--selector",
                                                    "--prometheus-selector")] = None,
    deployment: Annotated[str | None, settings_option(HistorySettings, "deployment")] = None,
    since: Annotated[str | None, settings_option(HistorySettings, "since")] = None,
    start: Annotated[str | None, settings_option(HistorySettings, "start")] = None,
    end: Annotated[str | None, settings_option(HistorySettings, "end")] = None,
    step_s: Annotated[float | None, settings_option(HistorySettings, "step_s")] = None,
    save_trace: Annotated[Path | None, settings_option(HistorySettings, "save_trace")] = None,
    prometheus_token_file: Annotated[Path | None, settings_option(HistorySettings, "prometheus_token_file")] = None,
    prometheus_ca: Annotated[Path | None, settings_option(HistorySettings, "prometheus_ca")] = None,
    prometheus_cert: Annotated[Path | None, settings_option(HistorySettings, "prometheus_cert")] = None,
    prometheus_key: Annotated[Path | None, settings_option(HistorySettings, "prometheus_key")] = None,
    policy: Annotated[str, settings_option(PolicyListSettings, "policy", help_suffix=" Known: " + ", ".join(
        KNOWN_POLICIES) + " (each listed below)")] = PolicyListSettings.policy,
    fidelity: Annotated[str | None, settings_option(SimModelSettings, "fidelity")] = None,
    fluid_bin_ms: Annotated[float | None, settings_option(SimModelSettings, "fluid_bin_ms")] = None,
    slo_ttft_ms: Annotated[float, settings_option(SimModelSettings, "slo_ttft_ms")] = SimModelSettings.slo_ttft_ms,
    slo_e2e_ms: Annotated[float, settings_option(SimModelSettings, "slo_e2e_ms")] = SimModelSettings.slo_e2e_ms,
    cold_start_s: Annotated[float, settings_option(SimModelSettings, "cold_start_s")] = SimModelSettings.cold_start_s,
    gpu_hour_usd: Annotated[float, settings_option(SimModelSettings, "gpu_hour_usd")] = SimModelSettings.gpu_hour_usd,
    metric_resolution_s: Annotated[int, settings_option(SimModelSettings, "metric_resolution_s")]
    = SimModelSettings.metric_resolution_s,
    scrape_interval_s: Annotated[int, settings_option(SimModelSettings, "scrape_interval_s")]
    = SimModelSettings.scrape_interval_s,
    hpa_sync_s: Annotated[int, settings_option(SimModelSettings, "hpa_sync_s")] = SimModelSettings.hpa_sync_s,
    kubelet_resolution_s: Annotated[int, settings_option(SimModelSettings, "kubelet_resolution_s")]
    = SimModelSettings.kubelet_resolution_s,
    seed: Annotated[int, settings_option(SimModelSettings, "seed")] = SimModelSettings.seed,
    warmup_s: Annotated[float | None, settings_option(SimModelSettings, "warmup_s")] = None,
    tier: Annotated[str | None, settings_option(SimModelSettings, "tier")] = None,
    fault_slowdown: Annotated[float | None, settings_option(FaultInjectionSettings, "fault_slowdown")] = None,
    fault_after_s: Annotated[float, settings_option(FaultInjectionSettings, "fault_after_s")]
    = FaultInjectionSettings.fault_after_s,
    json_out: Annotated[Path | None, settings_option(OutputSettings, "json", "--json")] = None,
    output: Annotated[str, settings_option(OutputSettings, "output", "--output", "-o")] = OutputSettings.output,
    report: Annotated[Path | None, settings_option(OutputSettings, "report")] = None,
    quiet: Annotated[bool, settings_option(OutputSettings, "quiet")] = OutputSettings.quiet,
    max_run_min: Annotated[float, settings_option(OutputSettings, "max_run_min")] = OutputSettings.max_run_min,
    ledger: Annotated[str, settings_option(SimLedgerSettings, "ledger")] = SimLedgerSettings.ledger,
    etcd_ca: Annotated[str | None, etcd_option("etcd_ca", panel(SimLedgerSettings))] = None,
    etcd_cert: Annotated[str | None, etcd_option("etcd_cert", panel(SimLedgerSettings))] = None,
    etcd_key: Annotated[str | None, etcd_option("etcd_key", panel(SimLedgerSettings))] = None,
    etcd_user: Annotated[str | None, etcd_option("etcd_user", panel(SimLedgerSettings))] = None,
    etcd_password_file: Annotated[str | None, etcd_option("etcd_password_file", panel(SimLedgerSettings))] = None,
) -> None:
    """Replay a trace through the autoscalers (HPA, KEDA, KPA, Ray Serve, production-stack KEDA, llm-d WVA,
    Dynamo planner, AIBrix), Ebb, static and the oracle; print cost and SLO side by side."""
    # The flags are read through ctx, which also knows which ones were given (they win over --config).
    settings = read_settings(ctx, SIMULATE_GROUPS, simulate_settings)
    if print_config:
        print_settings(settings.groups)
        return
    _simulate(settings)


def _json_target(out: OutputSettings) -> Path | None:
    """Where the JSON scorecards go: ``--json FILE``, standard output (``-o json`` or ``--json -``) or nowhere."""
    if wants_json(out.output, False):
        if out.json is not None and out.json != checks.STDOUT:
            raise ConfigError(f"-o json prints the scorecards on stdout; --json {out.json} writes them to a file "
                              "(fix: give one of the two)")
        return checks.STDOUT
    return out.json


def _checked_trace_flags(s: SimulateSettings) -> TraceFlags:
    """The trace flags checked against the simulator (fidelity, service model) and the trace's header."""
    fidelity = s.model.fidelity
    if fidelity is not None and fidelity not in FIDELITIES:
        raise typer.BadParameter(f"--fidelity {fidelity!r}: choose one of {', '.join(FIDELITIES)}")
    tflags = check_trace_flags(s.input)
    if tflags.model is not None and fidelity == "fluid":
        raise ConfigError("--fidelity fluid: the service-time model runs at request fidelity only (fix: drop "
                          "--fidelity fluid, or the service-time flags for the LLM model)")
    return tflags


def _sim_settings(s: SimulateSettings, service: ServiceTimeModel | None) -> SimSettings:
    """The simulator's own settings from the ``model`` and ``fault`` sections."""
    m, f = s.model, s.fault
    return SimSettings(
        slo=SloSettings(m.slo_ttft_ms, m.slo_e2e_ms),
        cluster=ClusterSettings(cold_start_s=m.cold_start_s, gpu_hour_usd=m.gpu_hour_usd, service=service,
                                sleep=None if m.tier is None else parse_tier(m.tier)),
        pipeline=MetricPipelineSettings(kubelet_resolution_s=m.kubelet_resolution_s,
                                        metrics_server_resolution_s=m.metric_resolution_s,
                                        scrape_interval_s=m.scrape_interval_s, hpa_sync_s=m.hpa_sync_s),
        seed=m.seed,
        fault=None if f.fault_slowdown is None else FaultSettings(f.fault_slowdown, f.fault_after_s),
        warmup_s=m.warmup_s or 0.0,
    )


def _simulate(s: SimulateSettings) -> None:
    """Check the outputs, the trace flags and the ledger, then replay, print and write what was asked."""
    # Validate first: every number (the settings did), every output path, before the trace is even read.
    json_out = _json_target(s.output)
    hist = check_history(s)  # --from-prometheus: its flags, range and files, before anything is read
    measured = saved_measured(s.input.trace) if hist is None and s.input.cluster is None else None
    load_scale, peak = history_scaling(s, hist is not None or measured is not None)
    tflags = _checked_trace_flags(s)
    for flag, out in (("--json", json_out), ("--report", s.output.report)):
        if out is not None:
            checks.writable_file(flag, out)
    led, inp, quiet = s.ledger, s.input, s.output.quiet
    if inp.cluster is not None:
        if led.ledger:
            _check_ledger(led.ledger, None)
        from ebb.cli.simulate_cluster import DEFAULT_CLUSTER_POLICIES, simulate_cluster

        simulate_cluster(inp.cluster, DEFAULT_CLUSTER_POLICIES if s.policy.policy == DEFAULT_POLICIES else s.policy.policy,
                         json_out=json_out, report=s.output.report, ledger=led.ledger, quiet=quiet,
                         warmup_s=s.model.warmup_s, max_run_min=s.output.max_run_min)
        return
    # Piped output (CI logs, files) gets a wide table instead of rich's 80-column default.
    console = checks.human_console(json_out)
    ledger_auth = etcd_auth(led.etcd_ca, led.etcd_cert, led.etcd_key, led.etcd_user, led.etcd_password_file)
    if led.ledger:
        _check_ledger(led.ledger, ledger_auth)
    items = parse_policies(s.policy.policy, KNOWN_POLICIES)
    if s.model.tier is not None:
        parse_tier(s.model.tier)  # a bad --tier is refused before the trace is read
    loaded = load_history(hist, s.model.seed, console) if hist is not None else None
    measured = loaded.measured if loaded is not None else measured
    tr = tflags.after_load(loaded.trace if loaded is not None else open_trace(
        inp.trace, inp.format, time_col=inp.time_col, count_col=inp.count_col, tokens_in_col=inp.tokens_in_col,
        tokens_out_col=inp.tokens_out_col, service_col=inp.service_time_column, no_header=inp.no_header,
        clients=tflags.clients, seed=s.model.seed))
    for note in tr.notes:
        console.print(f"[yellow]note:[/] {note}")
    fid = s.model.fidelity or ("fluid" if isinstance(tr, CountSeries) and tflags.model is None else "request")
    fluid_bin_ms = s.model.fluid_bin_ms
    fluid_bin_s, sim = None if fluid_bin_ms is None else fluid_bin_ms / 1000.0, _sim_settings(s, tflags.model)
    # Measured before it starts, refused past --max-run-min with the flags that shrink it (ebb.sim.estimate).
    try:
        est = run_estimate(tr, items, sim, fid, load_scale, peak, fluid_bin_s, s.output, console)
        with StepProgress(console, est, enabled=not quiet) as progress:
            def calibrated(requests: int, _span_s: float, k: float) -> None:
                if peak is not None:  # the first estimate could not know the load multiple
                    progress.revise(est.rescaled(requests, k))
            cmp = compare(tr, items, sim, fidelity=fid, load_scale=load_scale, peak_replicas=peak,
                          fluid_bin_s=fluid_bin_s, on_step=progress, on_progress=progress.within,
                          on_workload=calibrated)
    except MemoryError as exc:
        # The request cap (ebb.model.trace_ops.MAX_REQUESTS) refuses oversized expansions before
        # allocating; this is the backstop for what it cannot foresee (a trace spanning years,
        # a machine with little memory), in the estimate's slice or the run. numpy raises it before
        # the allocation, so we can report.
        raise InputError(f"not enough memory to simulate this trace ({human_count(tr.requests)} requests over "
                         f"{human_span(tr.duration_s)}): {' '.join(str(exc).split())}",
                         path=str(tr.source or inp.trace),
                         fix="use --fidelity fluid, a smaller --load-scale, or a shorter trace") from exc
    measured_run = as_run_row(measured, tr, s, load_scale, console)  # the fleet as it ran, beside the rest
    recorded, cmp = cmp, cmp if measured_run is None else replace(cmp, runs=(*cmp.runs, measured_run))
    _print_results(cmp, console, service_model=tflags.model is not None)
    if led.ledger:
        _record(led.ledger, recorded, console, ledger_auth)
    elif not quiet:
        console.print("decisions not recorded (add --ledger ebb-ledger.sqlite to explain them with ebb explain)")
    if json_out is not None:
        # Each card also says the load multiple and fidelity it was run at (one run, one multiple).
        write_scorecards(json_out, [{**{k: (None if isinstance(v, float) and math.isnan(v) else v)
                                        for k, v in r.scorecard.as_dict().items()},
                                     "load_scale": cmp.load_scale,
                                     "fidelity": r.scorecard.fidelity if is_as_run(r.scorecard) else cmp.fidelity}
                                    for r in cmp.runs])
        if json_out != checks.STDOUT:
            console.print(f"scorecards written to {json_out}")
    if s.output.report is not None:
        _write_report(s.output.report, s, cmp, tr, fid, console)


def _print_results(cmp: Comparison, console: Console, *, service_model: bool) -> None:
    """The verdict first (what to deploy, how Ebb did against the best peer), then the table and the oracle."""
    cards = [r.scorecard for r in cmp.runs]
    for line in verdict([c for c in cards if not is_as_run(c)]).lines():
        console.print(escape(line))
    for line in next((as_run_lines(c, cards) for c in cards if is_as_run(c)), []):
        console.print(escape(line))
    table, legend_lines = _table(cmp, console.width, service_model=service_model)
    console.print(table)
    for line in legend_lines + ([AS_RUN_LEGEND] if any(is_as_run(c) for c in cards) else []):
        console.print(escape(line))
    o = cmp.oracle
    console.print(f"oracle: headroom x{o.headroom:.3f}, smoothing {o.smoothing_s} s, "
                  f"{o.tried} candidate schedules simulated in the final search")


def _write_report(report: Path, s: SimulateSettings, cmp: Comparison, tr: RequestTrace | CountSeries, fid: str,
                  console: Console) -> None:
    """The HTML report at ``report``, with the settings it was run with."""
    m, o = s.model, cmp.oracle
    settings_txt = {
        "trace": str(tr.source or tr.name), "fidelity": fid, "load scale": f"{cmp.load_scale:.4g}",
        "SLO": f"TTFT ≤ {m.slo_ttft_ms:g} ms, end-to-end ≤ {m.slo_e2e_ms:g} ms",
        "cold start": f"{m.cold_start_s:g} s", "GPU-hour": f"${m.gpu_hour_usd:g}",
        "pipeline": f"scrape {m.scrape_interval_s} s, metrics-server {m.metric_resolution_s} s, "
                    f"HPA sync {m.hpa_sync_s} s",
        "oracle": f"headroom x{o.headroom:.3f}, smoothing {o.smoothing_s} s",
        "seed": str(m.seed),
    }
    if m.tier is not None:
        tier = parse_tier(m.tier)
        settings_txt[f"{tier.kind} tier"] = f"{tier.describe()} for ebb and static-sleep " + (
            "(a sleeping replica holds its GPU: billed, its HBM lendable)" if tier.holds_gpu else
            "(a snapshotted replica is billed while it saves, then releases its GPU)")
    if m.warmup_s:
        settings_txt["warm-up"] = (f"first {m.warmup_s:g} s fed every policy but are not scored (figures count "
                                   "from then on)")
    write_report(report, cmp.runs, title=f"ebb simulate — {cmp.workload_name}",
                 trace_desc=f"{human_count(cmp.requests)} requests over {human_span(cmp.duration_s)}",
                 settings=settings_txt)
    console.print(f"report written to {report}")
