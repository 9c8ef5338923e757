"""``ebb simulate --from-prometheus``: the trace rebuilt from a fleet's history, and the "as run" row beside the simulated ones.

Order, all before any simulation: :func:`check_history` checks the history flags against the rest
(no ``--trace``, ``--cluster`` or column flags with ``--from-prometheus``), the selector, the
Deployment, the range, the TLS and token files and ``--save-trace``'s path; :func:`load_history`
then reads the range (:mod:`ebb.sources.prometheus_history`), rebuilds the trace
(:mod:`ebb.sources.history_rebuild`) and writes ``--save-trace``. A saved trace replayed with
``--trace FILE`` carries its as-run record (:func:`saved_measured`), so the offline run shows the
same rows. :func:`history_scaling`: a history is replayed at its own load (``--load-scale 1``)
unless told otherwise, since the as-run row is the fleet at that load; :func:`as_run_row` leaves
the row out, with a note, when the load or the window differs from what the fleet served.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from ebb.cli import checks
from ebb.config.simulate_settings import SimulateSettings, TraceInputSettings
from ebb.errors import ConfigError
from ebb.model.measured import MeasuredFleet
from ebb.model.trace import CountSeries, RequestTrace
from ebb.score.as_run import as_run
from ebb.score.results import PolicyRun
from ebb.sources.history_rebuild import measured_fleet, rebuild_trace
from ebb.sources.http_get import TlsOptions
from ebb.sources.prometheus_api import PrometheusClient
from ebb.sources.prometheus_history import (
    HISTORY_METRICS,
    MAX_ANSWER_BYTES,
    MAX_RANGE_S,
    QUERY_TIMEOUT_S,
    HistoryMetrics,
    HistoryRange,
    deployment_selector,
    read_history,
    scrape_interval_s,
)
from ebb.sources.promql import Selector
from ebb.sources.traces.history_file import is_history_file, read_history_measured, write_history_trace

__all__ = ["DEFAULT_STEP_S", "HistoryLoad", "HistoryPlan", "as_run_row", "check_history", "history_scaling",
           "load_history", "saved_measured"]

DEFAULT_STEP_S = 30.0
"""Step used when the scrape interval cannot be told from the series (a common ``scrape_interval``)."""
_INPUT_FLAGS = ("format", "time_col", "count_col", "tokens_in_col", "tokens_out_col", "service_time_column",
                "servegen_client")


@dataclass(frozen=True)
class HistoryPlan:
    """The checked history flags: what to read, from where, and where to save it."""

    client: PrometheusClient
    metrics: HistoryMetrics
    selector: Selector
    deployment: Selector | None
    start_s: float
    end_s: float
    step_s: float | None
    save_trace: Path | None


@dataclass(frozen=True)
class HistoryLoad:
    """The rebuilt trace and the as-run record (None without a replica series or a TTFT histogram)."""

    trace: RequestTrace
    measured: MeasuredFleet | None


def _client(url: str, token_file: Path | None, ca: Path | None, cert: Path | None, key: Path | None) -> PrometheusClient:
    """The client ``ebb run``'s ``--prometheus-*`` flags would build, with the history's larger bounds."""
    tls = None
    if ca is not None or cert is not None:
        tls = TlsOptions(ca_file=str(ca) if ca else None, cert_file=str(cert) if cert else None,
                         key_file=str(key) if key else None)
    token = None if token_file is not None else (os.environ.get("EBB_PROMETHEUS_TOKEN") or None)
    return PrometheusClient(url, timeout_s=QUERY_TIMEOUT_S, token=token, token_file=token_file, tls=tls,
                            max_bytes=MAX_ANSWER_BYTES)


def check_history(s: SimulateSettings) -> HistoryPlan | None:
    """The history plan of ``--from-prometheus`` (None without it); ConfigError for flags that do not
    go with it, an unknown engine, a bad selector, Deployment or range, an unwritable ``--save-trace``."""
    h, inp = s.history, s.input
    if h.from_prometheus is None:
        return None
    clash = [f"--{k.replace('_', '-')}" for k in _INPUT_FLAGS
             if getattr(inp, k) not in (None, getattr(TraceInputSettings, k, None))]
    if inp.trace != TraceInputSettings.trace:
        clash.insert(0, "--trace")
    if inp.cluster is not None:
        clash.insert(0, "--cluster")
    if clash:
        raise ConfigError(f"--from-prometheus gives the trace; {', '.join(clash)} read(s) a file (fix: drop "
                          f"{clash[0]}, or --from-prometheus to replay a file)")
    metrics = HISTORY_METRICS.get(h.engine)
    if metrics is None:
        raise ConfigError(f"--engine {h.engine!r}: Ebb reads the history of {', '.join(HISTORY_METRICS)} (fix: "
                          "--engine vllm, or replay a request log with --trace)")
    selector = Selector.parse(h.selector or "")
    deployment = deployment_selector(h.deployment) if h.deployment is not None else None
    start, end = h.range_s(time.time())
    if end - start > MAX_RANGE_S:
        HistoryRange(start, end, h.step_s or DEFAULT_STEP_S)  # raises the range's ConfigError
    if h.step_s is not None:
        HistoryRange(start, end, h.step_s)
    if h.save_trace is not None:
        checks.writable_file("--save-trace", h.save_trace)
    client = _client(h.from_prometheus.strip(), h.prometheus_token_file, h.prometheus_ca, h.prometheus_cert,
                     h.prometheus_key)
    return HistoryPlan(client, metrics, selector, deployment, start, end, h.step_s, h.save_trace)


def load_history(plan: HistoryPlan, seed: int, console: Console) -> HistoryLoad:
    """Read, rebuild and (``--save-trace``) save the history of ``plan``."""
    step = plan.step_s
    if step is None:
        probe = HistoryRange(plan.start_s, plan.end_s, max(DEFAULT_STEP_S, (plan.end_s - plan.start_s) / 1000.0))
        found = scrape_interval_s(plan.client, plan.metrics.requests[0], plan.selector, probe)
        step = float(max(1, round(found))) if found is not None else DEFAULT_STEP_S
        how = "the scrape interval detected" if found is not None else "too few samples to detect the interval"
        console.print(f"[yellow]note:[/] step {step:g} s ({how}; --step-s sets it)")
    rng = HistoryRange(plan.start_s, plan.end_s, step)
    steps = read_history(plan.client, plan.metrics, plan.selector, rng, deployment=plan.deployment)
    trace = rebuild_trace(steps, name=f"{plan.metrics.engine} fleet",
                          source=f"{plan.client.base_url} ({plan.metrics.engine}, {plan.selector.render()})", seed=seed)
    measured = measured_fleet(steps) if steps.ttft_s is not None else None
    if measured is None and steps.replicas is not None:
        console.print("[yellow]note:[/] the engine exports no TTFT histogram: no as-run row")
    if plan.save_trace is not None:
        write_history_trace(plan.save_trace, trace, provenance=steps.provenance, measured=measured)
        console.print(f"rebuilt trace written to {escape(str(plan.save_trace))} (replay it with --trace "
                      f"{escape(str(plan.save_trace))})")
    return HistoryLoad(trace, measured)


def saved_measured(name: str) -> MeasuredFleet | None:
    """The as-run record of a saved history trace, None for any other trace."""
    return read_history_measured(Path(name)) if is_history_file(Path(name)) else None


def history_scaling(s: SimulateSettings, history: bool) -> tuple[float, int | None]:
    """(load multiple, peak calibration): a history at its own load (x1) unless a flag sets one."""
    if history and s.input.load_scale is None and s.input.peak_replicas is None:
        return 1.0, None
    return s.input.scaling


def as_run_row(measured: MeasuredFleet | None, trace: RequestTrace | CountSeries, s: SimulateSettings,
               load_scale: float, console: Console) -> PolicyRun | None:
    """The as-run row of ``measured`` for this run, or None (with a note when it had to be left out)."""
    if measured is None:
        return None
    why = ("the load is scaled" if load_scale != 1.0 else
           "--window-s cuts the trace" if s.input.window_s is not None else None)
    if why is not None or not isinstance(trace, RequestTrace):
        console.print(f"[yellow]note:[/] no as-run row: {why}, and the fleet ran the history's own load over "
                      "the whole range (fix: --peak-replicas off without --load-scale, or --start/--end)")
        return None
    m = s.model
    return as_run(measured, trace.arrival_s, trace=str(trace.name), slo_ttft_ms=m.slo_ttft_ms,
                  slo_e2e_ms=m.slo_e2e_ms, gpu_hour_usd=m.gpu_hour_usd, warmup_s=m.warmup_s or 0.0)
