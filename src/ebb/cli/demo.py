"""``ebb demo``: the live loop on this machine (``--live``) — workers, router, agent, Prometheus, the
controller and a replayed trace (:mod:`ebb.demo.stack`) — with a live terminal view and the report.

Validate first: every flag is checked before a worker, Prometheus or the workdir exists; a bad one
stops the command with one line naming the flag and the fix (``--source`` not one of
:data:`SOURCES`; ``--start-s`` at or past the trace's end, with the trace's length)."""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.live import Live
from rich.table import Table

from ebb.cli.app import app
from ebb.errors import ConfigError
from ebb.score.units import plural

_console = Console()

SOURCES = ("auto", "prometheus", "agents")
"""``--source`` values: ``auto`` reads Prometheus when its binary is installed, else the agents."""


def _check_start(trace: str, start_s: float) -> None:
    """Refuse a ``--start-s`` at or past the end of ``trace`` (the replay would send nothing)."""
    from ebb.sources.traces import open_trace

    length_s = open_trace(trace).duration_s
    if start_s >= length_s:
        raise ConfigError(f"--start-s {start_s:g}: past the end of trace {trace!r}, which is {length_s:,.0f} s long "
                          f"(fix: --start-s below {length_s:,.0f}, e.g. 1320 for the bundled azure-code)")


@app.command("demo")
def demo_cmd(
    live: Annotated[bool, typer.Option("--live", help="Run the live loop on this machine (else: the simulator demo).")]
    = False,
    minutes: Annotated[float, typer.Option(help="Wall minutes to run.")] = 3.0,
    trace: Annotated[str, typer.Option(help="Bundled trace name or a request-log file.")] = "azure-code",
    start_s: Annotated[float, typer.Option(help="Trace second where the replayed window starts.")] = 1320.0,
    time_scale: Annotated[float, typer.Option(help="Replay this many times faster than recorded.")] = 2.0,
    source: Annotated[str, typer.Option(help="auto, prometheus or agents.")] = "auto",
    report: Annotated[Path, typer.Option(help="HTML report of what happened.")] = Path("ebb-live-report.html"),
    workdir: Annotated[Path, typer.Option(help="Ledger, Prometheus data and logs go here.")] = Path("ebb-live"),
    engine: Annotated[str, typer.Option(
        help="ebb (emulated workers, the default) or llamacpp (real llama-server processes; build them once "
             "with scripts/build-llama-server.sh).")] = "ebb",
    warmup_s: Annotated[float, typer.Option(
        help="Emulated workers' warm-up (s) before they take traffic; the cold start is this plus about 1 s of "
             "process start. An asleep tier pays off when a cold start is several wakes long.")] = 3.0,
    tier: Annotated[str, typer.Option(
        help="An asleep tier, e.g. asleep:wake_s=2,max=4,ttl_s=1800: drained workers sleep (the ebb worker: "
             "vLLM's /sleep; llama-server: --sleep-idle-seconds) and scale-ups wake them first; empty: none.")] = "",
    mode: Annotated[str, typer.Option(
        help="act (the controller scales the workers) or recommend (it scales nothing: Ebb's own fleet runs "
             "beside them and one shadow row a minute goes to the ledger, for ebb shadow report).")] = "act",
) -> None:
    """Scale real worker processes under a real trace with the live controller, and report what happened."""
    if not live:
        _console.print("ebb demo replays on the simulator's virtual clock with `ebb simulate` (what `make demo` "
                       "runs); add --live to run the live loop on this machine.")
        raise typer.Exit(0)
    import time

    from ebb.live.controller import CycleOutcome
    from ebb.demo.stack import ENGINES, DemoSettings, LiveDemo, llamacpp_settings, recent_load

    from ebb.telemetry.logs import configure_logging
    from ebb.telemetry.tracing import CycleTracer, local_provider

    from ebb.config.tiers import parse_tier

    sleep_tier = parse_tier(tier) if tier else None
    if sleep_tier is not None and not sleep_tier.holds_gpu:
        raise ConfigError(f"--tier {tier!r}: the live demo's workers sleep through their engine; a snapshot tier is "
                          "simulator-only (fix: --tier asleep:wake_s=2,max=4)")
    if engine not in ENGINES:
        raise ConfigError(f"--engine must be one of {', '.join(ENGINES)}, got {engine!r}")
    if source not in SOURCES:
        raise ConfigError(f"--source {source!r}: must be one of {', '.join(SOURCES)} (fix: --source auto reads "
                          "Prometheus when it is installed, else the agents)")
    if engine == "llamacpp":
        settings = llamacpp_settings(minutes=minutes, trace=trace, start_s=start_s, time_scale=time_scale,
                                     source="agents" if source == "auto" else source, report=report,
                                     workdir=workdir, tier=sleep_tier, mode=mode)
    else:
        settings = DemoSettings(minutes=minutes, trace=trace, start_s=start_s, time_scale=time_scale, source=source,
                                report=report, workdir=workdir, tier=sleep_tier, warmup_s=warmup_s,
                                mode=mode)  # type: ignore[arg-type]
    _check_start(trace, start_s)  # reads the trace once more in LiveDemo.run: 0.2 s for the bundled one
    if engine == "llamacpp":
        from ebb.demo.llamacpp import llama_server_binary, tiny_model
        llama_server_binary()  # MissingExtraError with the fix before anything starts
        tiny_model()
    workdir.mkdir(parents=True, exist_ok=True)
    # The terminal shows the live view; structured logs (with trace ids) go to a file beside the ledger.
    log_file = (workdir / "controller.log").open("a", encoding="utf-8")
    handler = configure_logging(json=True, stream=log_file)
    rows: list[tuple[str, ...]] = []
    start = time.time()

    def view(demo: LiveDemo) -> Table:
        t = Table(title=f"ebb demo --live  ({time.time() - start:.0f} s of {minutes * 60:.0f} s)")
        for col in ("t", "replicas", "ready", "load req/s", "TTFT p99 ms", "action", "note"):
            t.add_column(col)
        for r in rows[-14:]:
            t.add_row(*r)
        return t

    live_view = Live(console=_console, refresh_per_second=2) if _console.is_terminal else None

    def on_cycle(out: CycleOutcome, demo: LiveDemo) -> None:
        rps, p99 = (recent_load(demo.loadgen.results(), time.time()) if demo.loadgen is not None
                    else (0.0, math.nan))
        row = (f"{out.t_s:.0f}s", f"{out.spec_replicas}→{out.to_replicas}", str(out.ready_replicas), f"{rps:.1f}",
               "-" if math.isnan(p99) else f"{p99:.0f}", out.action, out.note[:60])
        if out.action != "hold" or int(out.t_s) % 10 == 0:
            rows.append(row)
            if live_view is None and out.action != "hold":
                _console.print("  ".join(row))
        if live_view is not None:
            live_view.update(view(demo))

    if live_view is not None:
        live_view.start()
    try:
        result = LiveDemo(settings, on_cycle=on_cycle, tracer=CycleTracer(local_provider())).run()
    finally:
        if live_view is not None:
            live_view.stop()
        logging.getLogger().removeHandler(handler)
        log_file.close()
    for note in result.notes:
        _console.print(f"[yellow]note:[/] {note}")
    c = result.policy_run.scorecard
    _console.print(f"source {result.source}; {plural(c.requests, 'request')}, {result.load.failed} failed; "
                   f"replicas mean {c.mean_replicas:.2f} peak {c.peak_replicas}; "
                   f"{plural(c.scale_downs, 'scale-down')}, {plural(c.scale_ups, 'scale-up')}; SLO violations {c.slo_violation_pct:.2f} %; "
                   f"ledger {result.ledger_path} (ebb explain --ledger {result.ledger_path} --list); "
                   f"logs {workdir / 'controller.log'}")
    if result.sleep is not None:
        z = result.sleep
        _console.print(f"asleep tier {sleep_tier.describe() if sleep_tier else ''} ({result.sleep_mechanism}): "
                       f"{plural(z.sleeps, 'sleep')}, {plural(z.wakes, 'wake')}, "
                       f"{plural(z.failed_wakes, 'failed wake')} (cold starts instead), "
                       f"{plural(z.failed_sleeps, 'failed sleep')}, {z.released} released; "
                       f"slowest wake {z.slowest_wake_s:.2f} s")
    if result.report is not None:
        _console.print(f"report: {result.report}")
    if settings.mode == "recommend":
        _console.print(f"shadow: ebb shadow report --ledger {result.ledger_path} --run-id {settings.run_id}")
