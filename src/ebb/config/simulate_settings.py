"""``ebb simulate``'s settings, one frozen dataclass per concern, each a section of ``--config FILE``.

``input`` (the trace, how to read it, which part, how much load; or a cluster scenario),
``history`` (or a fleet's Prometheus history instead: :mod:`ebb.config.history_settings`), ``policy`` (the policies compared), ``model`` (the SLO, cost, cold start, metric pipeline, fidelity
and seed the run is judged and simulated with), ``fault`` (an injected latency regression),
``output`` (JSON, the HTML report, progress) and ``ledger`` (where decisions are recorded). A key is
its flag's long name with underscores (``--time-col`` is ``input.time_col``, ``--json`` is
``output.json``); :func:`simulate_settings` merges flags, environment, file and defaults
(:mod:`ebb.config.settings_file`).

Each group checks its numbers when built (one-line ConfigError naming the flag, the value and the
fix; :mod:`ebb.config.settings_checks`). What needs the trace file, the simulator's own tables
(formats, fidelities, policies, service-model limits) or an output path is checked by
``ebb simulate`` next, still before the trace is read.

The defaults are the simulator's (:mod:`ebb.sim.settings`: ``SloSettings``, ``ClusterSettings``,
``MetricPipelineSettings``); this layer sits below it, so a unit test keeps the two equal.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from ebb.config import settings_checks as checks
from ebb.config.history_settings import HistorySettings
from ebb.config.ledger_settings import EtcdAuthSettings
from ebb.config.settings_file import SettingsFile, group_values, merge_settings, settings_groups
from ebb.errors import ConfigError

__all__ = ["DEFAULT_PEAK_REPLICAS", "DEFAULT_POLICIES", "MAX_PIPELINE_PERIOD_S", "SIMULATE_GROUPS",
           "FaultInjectionSettings", "OutputSettings", "PolicyListSettings", "SimLedgerSettings",
           "SimModelSettings", "SimulateSettings", "TraceInputSettings", "load_scaling", "simulate_settings"]

DEFAULT_POLICIES = "hpa,keda,static,ebb,oracle"
"""The policies compared when none are named: the two common Kubernetes autoscalers, the static
fleet, Ebb and the oracle (the cheapest schedule that meets the SLO)."""
DEFAULT_PEAK_REPLICAS = 20
"""The peak calibration when neither ``--load-scale`` nor ``--peak-replicas`` is given."""
MAX_PEAK_REPLICAS = 100_000
"""Largest ``--peak-replicas`` accepted: far past any one Deployment, below what exhausts memory."""
MAX_PIPELINE_PERIOD_S = 86_400
"""Longest metric-pipeline period accepted (s): one day; a longer scrape, resolution or sync period
is not a Kubernetes setting, and the simulator steps through a run in these periods."""


def load_scaling(load_scale: float | None, peak_replicas: str | None) -> tuple[float, int | None]:
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


@dataclass(frozen=True)
class TraceInputSettings:
    """What is replayed: a trace (file or bundled), how to read it, which part, and how much load."""

    SECTION: ClassVar[str] = "input"
    INTEGER_TEXT: ClassVar[frozenset[str]] = frozenset({
        "time_col", "count_col", "tokens_in_col", "tokens_out_col", "service_time_column", "peak_replicas",
        "servegen_client"})
    """The string keys that also take an unquoted integer in a ``--config`` file: a column's 0-based
    index, the peak replica count, one ServeGen client id (:mod:`ebb.config.settings_file`)."""

    trace: str = "azure-conv"
    """Trace file, or a bundled trace

    A request log, a count series or a ServeGen folder (docs/simulator.md), or the name of a trace
    shipped with Ebb (``ebb simulate -h`` lists them). Default ``azure-conv``: the Azure LLM
    inference trace (2023, conversation), real and bundled, so a first run needs no file."""
    format: str = "auto"
    """Trace format

    ``auto`` (the default) recognises Azure, Mooncake, count series and ServeGen from the file;
    name one when it cannot (``ebb simulate -h`` lists them)."""
    time_col: str | None = None
    """Generic CSV: time column (name or 0-based index)

    Unset: the format's own column. Needs a CSV file; with ``no_header``, an index."""
    count_col: str | None = None
    """Generic CSV: count column (name or index)

    A column of request counts per row (a count series); unset: one request per row."""
    tokens_in_col: str | None = None
    """Generic CSV: prompt tokens column

    Unset: the format's own column, when it has one."""
    tokens_out_col: str | None = None
    """Generic CSV: output tokens column

    Unset: the format's own column, when it has one."""
    no_header: bool = False
    """Generic CSV: the first row is data; name columns by 0-based index

    Default false: the first row names the columns."""
    service_time_column: str | None = None
    """Service-time model: per-request service seconds, a column (name or index) or END-START, e.g. finished-admitted

    Switches from the LLM prefill/decode model to the any-service model (slots × service time)."""
    service_median_s: float | None = None
    """Service-time model without a column: median service time (s) of a fitted lognormal

    Seconds; for a log without service times. Not with ``service_time_column``."""
    service_p99_s: float | None = None
    """... and its p99 (s); default = the median (constant)

    Seconds, at least the median; needs ``service_median_s``."""
    concurrency: int | None = None
    """Service-time model: requests one replica serves at once (slots; default 1)

    A count of slots; giving it selects the service-time model."""
    servegen_client: str | None = None
    """ServeGen folder: replay only these client ids (comma-separated; default: all, summed)

    The ``<client>`` of the folder's ``chunk-<client>-trace.csv`` names, e.g. ``3,17``."""
    window_s: str | None = None
    """Replay only START:END seconds of the trace

    Seconds from the trace's start, ``0 <= START < END`` (quote it in YAML: ``window_s: "0:600"``).
    Unset: the whole trace."""
    load_scale: float | None = None
    """Multiply load by K (turns the peak calibration off; not with --peak-replicas)

    A ratio > 0: ⌊K⌋ copies of every request plus one copy thinned to the fraction
    (docs/simulator.md). Unset: the calibration (``peak_replicas``) sets the load."""
    peak_replicas: str | None = None
    """Scale load so the oracle's peak is N replicas, or 'off' (default: 20 unless --load-scale is given)

    A whole number from 1 to 100,000, or ``off``: a trace recorded on any fleet is replayed at a
    known size, so GPU-hours compare across traces. Default 20."""
    cluster: Path | None = None
    """A cluster scenario (YAML: services, zones, quotas; see docs/cluster.md): every service on one GPU pool, Ebb's L1-L3 against per-Deployment peers

    Replaces the trace: each service of the scenario names its own. Unset: one workload."""

    def __post_init__(self) -> None:
        load_scale, peak = self.scaling
        # An implausible scale (1e9) is refused by the request cap (ebb.model.trace_ops.MAX_REQUESTS)
        # once the trace's size is known, before anything is allocated.
        checks.positive("--load-scale", load_scale, fix="e.g. --load-scale 2")
        if peak is not None:
            checks.int_in_range("--peak-replicas", peak, 1, MAX_PEAK_REPLICAS, fix="e.g. --peak-replicas 20")

    @property
    def scaling(self) -> tuple[float, int | None]:
        """(load multiple, peak calibration or None): :func:`load_scaling` of the two flags."""
        return load_scaling(self.load_scale, self.peak_replicas)


@dataclass(frozen=True)
class PolicyListSettings:
    """The policies compared on the same trace."""

    SECTION: ClassVar[str] = "policy"

    policy: str = DEFAULT_POLICIES
    """Comma-separated policies with inline parameters, e.g. 'hpa:target=0.5,kpa:target=8,ray,oracle'.

    Each ``NAME:key=value,...`` (``ebb simulate -h`` lists every policy and its knobs). Default
    HPA, KEDA, static, Ebb and the oracle; with a cluster scenario, the cluster's default set."""


@dataclass(frozen=True)
class SimModelSettings:
    """How requests are judged and the fleet simulated: SLO, cost, cold start, metric pipeline, fidelity."""

    SECTION: ClassVar[str] = "model"

    fidelity: str | None = None
    """request | fluid (default: request for request logs, fluid for count series)

    ``request`` simulates every request; ``fluid`` the demand per bin (fast on month-long
    series; agreement between the two is tested, docs/simulator.md)."""
    fluid_bin_ms: float | None = None
    """Fluid bin width (ms), 100–1000; default 100 for request logs, the series' own bin for count series

    Milliseconds; finer bins follow bursts, coarser ones run faster."""
    slo_ttft_ms: float = 2000.0
    """TTFT SLO (ms)

    Time to first token limit, > 0 ms. Default 2 s: MLPerf Inference's server-scenario TTFT bound
    for Llama-2-70B, a widely used interactive-serving target."""
    slo_e2e_ms: float = 60000.0
    """End-to-end SLO (ms)

    > 0 ms. Default 60 s: the common gateway timeout (nginx ``proxy_read_timeout``, AWS ALB idle
    timeout) past which a client sees a failure."""
    cold_start_s: float = 60.0
    """Replica cold start (s)

    Seconds from a replica's request to serving (node/pod scheduling, image pull, weight load), >= 0.
    Default 60 s."""
    gpu_hour_usd: float = 4.0
    """Price per replica (GPU) hour, USD

    >= 0. Default 4: a round figure inside 2025 on-demand H200 cloud prices (about 3-10 USD per
    GPU-hour); set your own."""
    metric_resolution_s: int = 60
    """metrics-server --metric-resolution (s)

    Whole seconds, 1-86400; default 60 s, the upstream chart's."""
    scrape_interval_s: int = 30
    """Prometheus scrape_interval (s)

    Whole seconds, 1-86400; default 30 s, a common ``scrape_interval``."""
    hpa_sync_s: int = 15
    """HPA sync period (s)

    Whole seconds, 1-86400; default 15 s, kube-controller-manager's
    ``--horizontal-pod-autoscaler-sync-period``."""
    kubelet_resolution_s: int = 10
    """kubelet/cAdvisor resolution (s)

    Whole seconds, 1-86400; default 10 s, cAdvisor's housekeeping interval."""
    seed: int = 0
    """Seed for every random choice

    0 to 2**63-1; default 0. The same files and seed give the same run (count-series arrivals,
    load-scaling thinning, scrape phase)."""
    warmup_s: float | None = None
    """Warm-up (s): the first S seconds feed every policy's memory but are not judged or billed (--peak-replicas still calibrates on the whole trace)

    Seconds from the trace's start, >= 0 and shorter than the trace. Violations, latency
    percentiles, GPU-hours, cost, scale-ups/downs, misjudged scale-downs and breach episodes count
    only from S on, for every policy and the oracle (whose SLO is judged on the same span). The
    scorecard (table title, JSON ``warmup_s``, report) says when one was used. Unset: none (0 s);
    with ``--cluster``, the scenario's own ``warmup_s`` (whole seconds, rounded up)."""

    tier: str | None = None
    """An asleep tier: asleep:wake_s=S,max=N,ttl_s=S,fail=F,reserve=H (each key optional)

    Replicas that policies which sleep (``ebb``, ``static-sleep``) remove go to sleep instead, while
    fewer than ``max`` (8) sleep, and scale-ups wake them first, each ready ``wake_s`` (2 s) later;
    one asleep ``ttl_s`` (1800 s) is released. ``fail`` (0) of the wakes fail, drawn from the run's
    seed: the sleeper is released and a cold replica starts instead (the scorecard's
    ``failed_wakes``). ``reserve`` (off): Ebb keeps every sleeper to ``max`` until ``ttl_s``, wakes
    them all at a scale-up and keeps ``H`` x the sized need running (docs/tiers.md, The reserve). A sleeping replica holds its GPU: it is billed, and the scorecard says which
    GPU-hours slept. Peers keep their upstream behaviour (they remove
    replicas). Default wake time: vLLM sleep mode level 1 wakes in 0.26-0.82 s, level 2 in
    0.85-2.58 s (A100, vLLM blog 2025-10-26); docs/tiers.md. Or a GPU-snapshot tier,
    snapshot:restore_s=S,save_s=S,max=N,ttl_s=S,fail=F: a snapshotted replica is billed while it
    saves (save_s, 10 s), then releases its GPU (the scorecard's released_replica_hours) and comes
    back in restore_s (15 s: gpt-oss-120b, NVIDIA blog 2026-05-27); ttl_s 86400. Unset: no tier."""

    def __post_init__(self) -> None:
        checks.positive("--slo-ttft-ms", self.slo_ttft_ms, fix="e.g. --slo-ttft-ms 2000")
        checks.positive("--slo-e2e-ms", self.slo_e2e_ms, fix="e.g. --slo-e2e-ms 60000")
        checks.non_negative("--cold-start-s", self.cold_start_s, fix="e.g. --cold-start-s 60")
        checks.non_negative("--gpu-hour-usd", self.gpu_hour_usd, fix="e.g. --gpu-hour-usd 4")
        if self.fluid_bin_ms is not None:
            checks.in_range("--fluid-bin-ms", self.fluid_bin_ms, 100.0, 1000.0, fix="e.g. --fluid-bin-ms 100")
        for flag, period in (("--metric-resolution-s", self.metric_resolution_s),
                             ("--scrape-interval-s", self.scrape_interval_s), ("--hpa-sync-s", self.hpa_sync_s),
                             ("--kubelet-resolution-s", self.kubelet_resolution_s)):
            checks.int_in_range(flag, period, 1, MAX_PIPELINE_PERIOD_S, fix=f"e.g. {flag} 15 (whole seconds)")
        checks.int_in_range("--seed", self.seed, 0, 2**63 - 1, fix="e.g. --seed 0")
        if self.warmup_s is not None:
            checks.non_negative("--warmup-s", self.warmup_s, fix="a number of seconds, e.g. --warmup-s 600, or 0 "
                                "for none")


@dataclass(frozen=True)
class FaultInjectionSettings:
    """An injected latency regression, to test canary gates (request fidelity only)."""

    SECTION: ClassVar[str] = "fault"

    fault_slowdown: float | None = None
    """Inject a fault: after the first scale-down, requests are served this many times slower until the fleet is restored (tests canary gates)

    A service-time multiplier >= 1 (the removed replica held a hot cache, say). Unset: no fault."""
    fault_after_s: float = 0.0
    """The injected fault arms at this time (s)

    Virtual seconds from the trace's start, >= 0; default 0: the first scale-down of the run."""

    def __post_init__(self) -> None:
        if self.fault_slowdown is not None:
            checks.at_least("--fault-slowdown", self.fault_slowdown, 1.0,
                            fix="a service-time multiplier, e.g. --fault-slowdown 4")
        checks.non_negative("--fault-after-s", self.fault_after_s, fix="e.g. --fault-after-s 400")


@dataclass(frozen=True)
class OutputSettings:
    """What the run writes besides the table: JSON scorecards, the HTML report, progress."""

    SECTION: ClassVar[str] = "output"

    json: Path | None = None
    """Write the scorecards as JSON here ('-': stdout)

    A file path, checked writable before the run; unset: no JSON file."""
    output: str = "table"
    """table, or json: the scorecards on stdout (as --json -), the human output on stderr.

    Default table, for people; json for a script reading stdout."""
    report: Path | None = None
    """Write the self-contained HTML report here

    One HTML file with every chart inline (no network to view it); unset: no report."""
    quiet: bool = False
    """No progress output

    Default false: the run estimate and a progress bar while policies run."""
    max_run_min: float = 30.0
    """Refuse a run estimated to take longer than this many minutes (0: no limit)

    The estimate is measured on a slice of the trace with the actual policies before the run starts
    (counted without simulating when even its floor is over); with --cluster, on the scenario's first
    5 % of seconds. Default 30: past it the refusal names the flags that shrink the run (--window-s,
    --fidelity fluid, a smaller --load-scale; with --cluster fewer policies or a shorter duration_s)."""

    def __post_init__(self) -> None:
        checks.non_negative("--max-run-min", self.max_run_min, fix="minutes, e.g. --max-run-min 60, or 0 for no limit")


@dataclass(frozen=True)
class SimLedgerSettings(EtcdAuthSettings):
    """Where the simulated decisions are recorded, to explain them later with ``ebb explain``."""

    SECTION: ClassVar[str] = "ledger"

    ledger: str = ""
    """Record every decision here (SQLite path or etcd://HOST:PORT), e.g. ebb-ledger.sqlite; off by default. Explain one with: ebb explain ID --ledger PATH

    Empty (the default): nothing recorded; a replay is usually run for its table, and a ledger of
    every cycle of every policy is large."""


@dataclass(frozen=True)
class SimulateSettings:
    """Everything ``ebb simulate`` is told, one group per section; built once, by :func:`simulate_settings`."""

    input: TraceInputSettings
    history: HistorySettings
    policy: PolicyListSettings
    model: SimModelSettings
    fault: FaultInjectionSettings
    output: OutputSettings
    ledger: SimLedgerSettings

    @property
    def groups(self) -> tuple[Any, ...]:
        """The groups in :data:`SIMULATE_GROUPS` order (what ``--print-config`` prints)."""
        return group_values(self)


SIMULATE_GROUPS = settings_groups(SimulateSettings)
"""``ebb simulate``'s sections, in the order they are built and checked (and listed in ``-h``):
:class:`SimulateSettings`' fields."""


def simulate_settings(given: Mapping[str, Any], file: SettingsFile | None = None) -> SimulateSettings:
    """``ebb simulate``'s settings: the ``given`` flags over ``file``'s values over the defaults, checked."""
    return SimulateSettings(**merge_settings(SIMULATE_GROUPS, given, file))
