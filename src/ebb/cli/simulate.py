"""``ebb simulate``: replay a real trace through several policies and compare cost and SLO."""

from __future__ import annotations

import hashlib
import io
import math
import time
from collections.abc import Callable
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
from ebb.cli.ledger_options import (
    EtcdCaOpt,
    EtcdCertOpt,
    EtcdKeyOpt,
    EtcdPasswordFileOpt,
    EtcdUserOpt,
    etcd_auth,
)
from ebb.cli.output_option import wants_json
from ebb.cli.progress import StepProgress, estimate_run
from ebb.cli.trace_options import check_trace_flags
from ebb.config.policy_specs import parse_policies
from ebb.errors import ConfigError, InputError, MissingExtraError, TransientError
from ebb.ledger.location import EtcdAuth, check_auth_fits, parse_location
from ebb.model.trace import CountSeries
from ebb.score.frontier import frontier_ratios
from ebb.score.names import abbreviate, legend
from ebb.score.report import write_report
from ebb.score.results import Scorecard
from ebb.score.units import human_count, human_span
from ebb.score.verdict import meets_slo, verdict
from ebb.sim.compare import FIDELITIES, Comparison, compare
from ebb.sim.policies import KNOWN_POLICIES, POLICY_HELP
from ebb.sim.settings import (
    ClusterSettings,
    FaultSettings,
    MetricPipelineSettings,
    SimSettings,
    SloSettings,
)
from ebb.sources.traces import BUNDLED_TRACES, FORMATS, open_trace

DEFAULT_POLICIES = "hpa,keda,static,ebb,oracle"


_NARROWEST = ("canary ok/abort", "dropped", "misjudged", "cost $", "TTFT p50/p99 ms", "E2E p50/p99 ms", "peak",
             "ups/downs")
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
    if ratios:
        columns["vs HPA frontier"] = lambda c: _ratio(ratios.get(c.policy))
    title = (f"{cmp.workload_name}: {human_count(cmp.requests)} requests over {human_span(cmp.duration_s)} "
             f"(load x{cmp.load_scale:.3g}, {cmp.fidelity})")
    shown = [k for k in columns if k not in ("TTFT p99 ms", "E2E p99 ms")]
    console = Console(width=10_000, file=io.StringIO())  # measures natural widths, prints nothing
    short = {"SLO viol %": "viol %", "TTFT p99 ms": "TTFT p99", "E2E p99 ms": "E2E p99", "vs HPA frontier": "vs HPA"}
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
    if drop is not None:
        legend_lines.append(f"{width}-column terminal: some columns left out; every number is in --json")
    if drop == "short headers":
        legend_lines.append("latencies in ms; vs HPA: GPU-h over the HPA frontier's at the same violation rate")
    return t, legend_lines


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
    console.print(f"{n} decisions recorded in {where} (run {run_id}); explain one with: ebb explain {example}"
                  + (f" --ledger {where}" if where != DEFAULT_PATH else ""))


MAX_PIPELINE_PERIOD_S = 86_400
"""Longest metric-pipeline period accepted (s): one day; a longer scrape, resolution or sync period
is not a Kubernetes setting, and the simulator steps through a run in these periods."""


def _check_numbers(*, slo_ttft_ms: float, slo_e2e_ms: float, cold_start_s: float, gpu_hour_usd: float,
                   load_scale: float, peak_replicas: int | None, fluid_bin_ms: float | None,
                   metric_resolution_s: int, scrape_interval_s: int, hpa_sync_s: int, kubelet_resolution_s: int,
                   seed: int, fault_slowdown: float | None, fault_after_s: float) -> None:
    """Every numeric flag of ``ebb simulate`` (ConfigError naming the flag, the value and the fix)."""
    checks.positive("--slo-ttft-ms", slo_ttft_ms, fix="e.g. --slo-ttft-ms 2000")
    checks.positive("--slo-e2e-ms", slo_e2e_ms, fix="e.g. --slo-e2e-ms 60000")
    checks.non_negative("--cold-start-s", cold_start_s, fix="e.g. --cold-start-s 60")
    checks.non_negative("--gpu-hour-usd", gpu_hour_usd, fix="e.g. --gpu-hour-usd 4")
    # An implausible scale (1e9) is refused by the request cap (ebb.model.trace_ops.MAX_REQUESTS)
    # once the trace's size is known, before anything is allocated.
    checks.positive("--load-scale", load_scale, fix="e.g. --load-scale 2")
    if peak_replicas is not None:
        checks.int_in_range("--peak-replicas", peak_replicas, 1, 100_000, fix="e.g. --peak-replicas 20")
    if fluid_bin_ms is not None:
        checks.in_range("--fluid-bin-ms", fluid_bin_ms, 100.0, 1000.0, fix="e.g. --fluid-bin-ms 100")
    for flag, period in (("--metric-resolution-s", metric_resolution_s), ("--scrape-interval-s", scrape_interval_s),
                         ("--hpa-sync-s", hpa_sync_s), ("--kubelet-resolution-s", kubelet_resolution_s)):
        checks.int_in_range(flag, period, 1, MAX_PIPELINE_PERIOD_S, fix=f"e.g. {flag} 15 (whole seconds)")
    checks.int_in_range("--seed", seed, 0, 2**63 - 1, fix="e.g. --seed 0")
    if fault_slowdown is not None:
        checks.at_least("--fault-slowdown", fault_slowdown, 1.0, fix="a service-time multiplier, e.g. --fault-slowdown 4")
    checks.non_negative("--fault-after-s", fault_after_s, fix="e.g. --fault-after-s 400")


DEFAULT_PEAK_REPLICAS = 20
"""The peak calibration when neither ``--load-scale`` nor ``--peak-replicas`` is given."""


def _scaling(load_scale: float | None, peak_replicas: str | None) -> tuple[float, int | None]:
    """(load multiple, peak calibration or None): the two flags are exclusive, and each is honoured.

    Neither → calibrate to a peak of :data:`DEFAULT_PEAK_REPLICAS`; ``--load-scale K`` → K, no
    calibration; ``--peak-replicas N`` → calibrate to N; ``--peak-replicas off`` → the trace as it is
    (or times ``--load-scale``). Both with a number → ConfigError naming both.
    """
    if peak_replicas is None:
        return (1.0, DEFAULT_PEAK_REPLICAS) if load_scale is None else (load_scale, None)
    if peak_replicas.strip().lower() == "off":
        return (1.0 if load_scale is None else load_scale), None
    try:
        n = int(peak_replicas)
    except ValueError:
        raise ConfigError(f"--peak-replicas {peak_replicas!r}: expected a whole number of replicas or 'off' "
                          "(fix: e.g. --peak-replicas 20)") from None
    if load_scale is not None:
        raise ConfigError(f"--load-scale {load_scale:g} and --peak-replicas {n} both set the load: the "
                          "calibration would overrule the scale (fix: give one of them, or --peak-replicas off "
                          "with --load-scale)")
    return 1.0, n


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
    trace: Annotated[str, typer.Option(help="Trace file, or a bundled trace: " + ", ".join(BUNDLED_TRACES))] = "azure-conv",
    policy: Annotated[str, typer.Option(help="Comma-separated policies with inline parameters, e.g. "
                                        "'hpa:target=0.5,kpa:target=8,ray,oracle'. "
                                        "Known: " + ", ".join(KNOWN_POLICIES) + " (each listed below)")] = DEFAULT_POLICIES,
    fmt: Annotated[str, typer.Option("--format", help="Trace format: " + "|".join(FORMATS))] = "auto",
    time_col: Annotated[str | None, typer.Option("--time-col", "--time-column",
                                                 help="Generic CSV: time column (name or 0-based index)")] = None,
    count_col: Annotated[str | None, typer.Option("--count-col", "--count-column",
                                                  help="Generic CSV: count column (name or index)")] = None,
    tokens_in_col: Annotated[str | None, typer.Option(help="Generic CSV: prompt tokens column")] = None,
    tokens_out_col: Annotated[str | None, typer.Option(help="Generic CSV: output tokens column")] = None,
    no_header: Annotated[bool, typer.Option(help="Generic CSV: the first row is data; name columns by "
                                            "0-based index")] = False,
    service_time_column: Annotated[str | None, typer.Option(help="Service-time model: per-request service "
                                                            "seconds, a column (name or index) or END-START, "
                                                            "e.g. finished-admitted")] = None,
    service_median_s: Annotated[float | None, typer.Option(help="Service-time model without a column: "
                                                           "median service time (s) of a fitted lognormal")] = None,
    service_p99_s: Annotated[float | None, typer.Option(help="... and its p99 (s); default = the median "
                                                        "(constant)")] = None,
    concurrency: Annotated[int | None, typer.Option(help="Service-time model: requests one replica serves at "
                                                    "once (slots; default 1)")] = None,
    servegen_client: Annotated[str | None, typer.Option(help="ServeGen folder: replay only these client ids "
                                                        "(comma-separated; default: all, summed)")] = None,
    window_s: Annotated[str | None, typer.Option(help="Replay only START:END seconds of the trace")] = None,
    fidelity: Annotated[str | None, typer.Option(help="request | fluid (default: request for request logs, "
                                                 "fluid for count series)")] = None,
    fluid_bin_ms: Annotated[float | None, typer.Option(help="Fluid bin width (ms), 100–1000; default 100 for "
                                                       "request logs, the series' own bin for count series")] = None,
    load_scale: Annotated[float | None, typer.Option(help="Multiply load by K (turns the peak calibration "
                                                     "off; not with --peak-replicas)")] = None,
    peak_replicas: Annotated[str | None, typer.Option(help="Scale load so the oracle's peak is N replicas, or "
                                                      "'off' (default: 20 unless --load-scale is given)")] = None,
    slo_ttft_ms: Annotated[float, typer.Option(help="TTFT SLO (ms)")] = SloSettings.ttft_ms,
    slo_e2e_ms: Annotated[float, typer.Option(help="End-to-end SLO (ms)")] = SloSettings.e2e_ms,
    cold_start_s: Annotated[float, typer.Option(help="Replica cold start (s)")] = ClusterSettings.cold_start_s,
    gpu_hour_usd: Annotated[float, typer.Option(help="Price per replica (GPU) hour, USD")] = ClusterSettings.gpu_hour_usd,
    metric_resolution_s: Annotated[int, typer.Option(help="metrics-server --metric-resolution (s)")] = 60,
    scrape_interval_s: Annotated[int, typer.Option(help="Prometheus scrape_interval (s)")] = 30,
    hpa_sync_s: Annotated[int, typer.Option(help="HPA sync period (s)")] = 15,
    kubelet_resolution_s: Annotated[int, typer.Option(help="kubelet/cAdvisor resolution (s)")] = 10,
    seed: Annotated[int, typer.Option(help="Seed for every random choice")] = 0,
    fault_slowdown: Annotated[float | None, typer.Option(help="Inject a fault: after the first scale-down, "
                                                         "requests are served this many times slower until "
                                                         "the fleet is restored (tests canary gates)")] = None,
    fault_after_s: Annotated[float, typer.Option(help="The injected fault arms at this time (s)")] = 0.0,
    json_out: Annotated[Path | None, typer.Option("--json", help="Write the scorecards as JSON here ('-': stdout)")] = None,
    output: Annotated[str, typer.Option("--output", "-o", help="table, or json: the scorecards on stdout "
                                        "(as --json -), the human output on stderr.")] = "table",
    ledger: Annotated[str, typer.Option(help="Record every decision here (SQLite path or etcd://HOST:PORT), "
                                        "e.g. ebb-ledger.sqlite; off by default. Explain one with: "
                                        "ebb explain ID --ledger PATH")] = "",
    etcd_ca: EtcdCaOpt = None,
    etcd_cert: EtcdCertOpt = None,
    etcd_key: EtcdKeyOpt = None,
    etcd_user: EtcdUserOpt = None,
    etcd_password_file: EtcdPasswordFileOpt = None,
    report: Annotated[Path | None, typer.Option(help="Write the self-contained HTML report here")] = None,
    quiet: Annotated[bool, typer.Option(help="No progress output")] = False,
    cluster: Annotated[Path | None, typer.Option(help="A cluster scenario (YAML: services, zones, quotas; see "
                                                 "docs/cluster.md): every service on one GPU pool, Ebb's "
                                                 "L1-L3 against per-Deployment peers")] = None,
) -> None:
    """Replay a trace through the autoscalers (HPA, KEDA, KPA, Ray Serve, production-stack KEDA, llm-d WVA,
    Dynamo planner, AIBrix), Ebb, static and the oracle; print cost and SLO side by side."""
    # Validate first: every number and every output path, before the trace is even read.
    if wants_json(output, False):
        if json_out is not None and json_out != checks.STDOUT:
            raise ConfigError(f"-o json prints the scorecards on stdout; --json {json_out} writes them to a file "
                              "(fix: give one of the two)")
        json_out = checks.STDOUT
    load_scale, peak = _scaling(load_scale, peak_replicas)
    _check_numbers(slo_ttft_ms=slo_ttft_ms, slo_e2e_ms=slo_e2e_ms, cold_start_s=cold_start_s,
                   gpu_hour_usd=gpu_hour_usd, load_scale=load_scale, peak_replicas=peak,
                   fluid_bin_ms=fluid_bin_ms, metric_resolution_s=metric_resolution_s,
                   scrape_interval_s=scrape_interval_s, hpa_sync_s=hpa_sync_s,
                   kubelet_resolution_s=kubelet_resolution_s, seed=seed, fault_slowdown=fault_slowdown,
                   fault_after_s=fault_after_s)
    if fidelity is not None and fidelity not in FIDELITIES:
        raise typer.BadParameter(f"--fidelity {fidelity!r}: choose one of {', '.join(FIDELITIES)}")
    tflags = check_trace_flags(
        trace=trace, fmt=fmt, columns={"--time-col": time_col, "--count-col": count_col,
                                       "--tokens-in-col": tokens_in_col, "--tokens-out-col": tokens_out_col},
        no_header=no_header, service_col=service_time_column, median_s=service_median_s, p99_s=service_p99_s,
        concurrency=concurrency, servegen_client=servegen_client, window_s=window_s)
    if tflags.model is not None and fidelity == "fluid":
        raise ConfigError("--fidelity fluid: the service-time model runs at request fidelity only (fix: drop "
                          "--fidelity fluid, or the service-time flags for the LLM model)")
    for flag, out in (("--json", json_out), ("--report", report)):
        if out is not None:
            checks.writable_file(flag, out)
    if cluster is not None:
        if ledger:
            _check_ledger(ledger, None)
        from ebb.cli.simulate_cluster import DEFAULT_CLUSTER_POLICIES, simulate_cluster

        simulate_cluster(cluster, DEFAULT_CLUSTER_POLICIES if policy == DEFAULT_POLICIES else policy,
                         json_out=json_out, report=report, ledger=ledger, quiet=quiet)
        return
    # Piped output (CI logs, files) gets a wide table instead of rich's 80-column default.
    console = checks.human_console(json_out)
    ledger_auth = etcd_auth(etcd_ca, etcd_cert, etcd_key, etcd_user, etcd_password_file)
    if ledger:
        _check_ledger(ledger, ledger_auth)
    items = parse_policies(policy, KNOWN_POLICIES)
    tr = tflags.after_load(open_trace(
        trace, fmt, time_col=time_col, count_col=count_col, tokens_in_col=tokens_in_col,
        tokens_out_col=tokens_out_col, service_col=service_time_column, no_header=no_header,
        clients=tflags.clients, seed=seed))
    for note in tr.notes:
        console.print(f"[yellow]note:[/] {note}")
    fid = fidelity or ("fluid" if isinstance(tr, CountSeries) and tflags.model is None else "request")
    settings = SimSettings(
        slo=SloSettings(slo_ttft_ms, slo_e2e_ms),
        cluster=ClusterSettings(cold_start_s=cold_start_s, gpu_hour_usd=gpu_hour_usd, service=tflags.model),
        pipeline=MetricPipelineSettings(kubelet_resolution_s=kubelet_resolution_s,
                                        metrics_server_resolution_s=metric_resolution_s,
                                        scrape_interval_s=scrape_interval_s, hpa_sync_s=hpa_sync_s),
        seed=seed,
        fault=None if fault_slowdown is None else FaultSettings(fault_slowdown, fault_after_s),
    )
    names, bin_s = [i.text for i in items], (fluid_bin_ms / 1000.0) if fluid_bin_ms is not None else 1.0
    est = estimate_run(tr.requests, tr.duration_s, fid, names, load_scale=load_scale,
                       calibrated_later=peak is not None, bin_s=bin_s)
    if not quiet:
        console.print(escape(est.line()))
    with StepProgress(console, 1 + len(items), est.expected_s, enabled=not quiet) as progress:
        def calibrated(requests: int, span_s: float, _k: float) -> None:
            if peak is not None:  # the first estimate could not know the load multiple
                progress.revise(estimate_run(requests, span_s, fid, names, bin_s=bin_s))
        try:
            cmp = compare(tr, items, settings, fidelity=fid, load_scale=load_scale, peak_replicas=peak,
                          fluid_bin_s=None if fluid_bin_ms is None else fluid_bin_ms / 1000.0,
                          on_step=progress, on_workload=calibrated)
        except MemoryError as exc:
            # The request cap (ebb.model.trace_ops.MAX_REQUESTS) refuses oversized expansions before
            # allocating; this is the backstop for what it cannot foresee (a trace spanning years,
            # a machine with little memory). numpy raises it before the allocation, so we can report.
            raise InputError(f"not enough memory to simulate this trace ({human_count(tr.requests)} requests over "
                             f"{human_span(tr.duration_s)}): {' '.join(str(exc).split())}", path=str(tr.source or trace),
                             fix="use --fidelity fluid, a smaller --load-scale, or a shorter trace") from exc
    # The verdict leads: what to deploy and how Ebb did against the best peer, before any table.
    for line in verdict([r.scorecard for r in cmp.runs]).lines():
        console.print(escape(line))
    table, legend_lines = _table(cmp, console.width, service_model=tflags.model is not None)
    console.print(table)
    for line in legend_lines:
        console.print(escape(line))
    o = cmp.oracle
    console.print(f"oracle: headroom x{o.headroom:.3f}, smoothing {o.smoothing_s} s, "
                  f"{o.tried} candidate schedules simulated in the final search")
    if ledger:
        _record(ledger, cmp, console, ledger_auth)
    elif not quiet:
        console.print("decisions not recorded (add --ledger ebb-ledger.sqlite to explain them with ebb explain)")
    if json_out is not None:
        # Each card also says the load multiple and fidelity it was run at (one run, one multiple).
        write_scorecards(json_out, [{**{k: (None if isinstance(v, float) and math.isnan(v) else v)
                                        for k, v in r.scorecard.as_dict().items()},
                                     "load_scale": cmp.load_scale, "fidelity": cmp.fidelity} for r in cmp.runs])
        if json_out != checks.STDOUT:
            console.print(f"scorecards written to {json_out}")
    if report is not None:
        settings_txt = {
            "trace": str(tr.source or tr.name), "fidelity": fid, "load scale": f"{cmp.load_scale:.4g}",
            "SLO": f"TTFT ≤ {slo_ttft_ms:g} ms, end-to-end ≤ {slo_e2e_ms:g} ms",
            "cold start": f"{cold_start_s:g} s", "GPU-hour": f"${gpu_hour_usd:g}",
            "pipeline": f"scrape {scrape_interval_s} s, metrics-server {metric_resolution_s} s, HPA sync {hpa_sync_s} s",
            "oracle": f"headroom x{o.headroom:.3f}, smoothing {o.smoothing_s} s",
            "seed": str(seed),
        }
        write_report(report, cmp.runs, title=f"ebb simulate — {cmp.workload_name}",
                     trace_desc=f"{human_count(cmp.requests)} requests over {human_span(cmp.duration_s)}",
                     settings=settings_txt)
        console.print(f"report written to {report}")
