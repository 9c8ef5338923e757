"""``ebb run``'s settings, one frozen dataclass per concern, each a section of ``--config FILE``.

``loop`` (mode, cycle, telemetry), ``source`` (where the signals come from), ``actuator`` (what is
scaled), ``policy`` (how it decides), ``ledger`` (where decisions are recorded, election, etcd
access) and ``security`` (tokens and TLS files for the agents and Prometheus, the /metrics bind).
A key is its flag's long name with underscores (``--prometheus-url`` is ``source.prometheus_url``);
:func:`run_settings` merges flags, environment, file and defaults (:mod:`ebb.config.settings_file`).

Each group checks its own values when built (its numbers with :mod:`ebb.config.settings_checks`; the
flags of a group that do not go together, such as ``--engine`` without ``--source prometheus``),
and :class:`RunSettings` the ones that span groups (``--react-ms`` within the cycle): one-line
ConfigError naming the flag and the fix, so ``--print-config`` refuses what ``ebb run`` would. What needs a
file, the network or the ledger layer (a fleet file, TLS files, a token, a ledger URL, an engine
profile) is checked by ``ebb run`` next, still before anything starts.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from ebb.config import settings_checks as checks
from ebb.config.ledger_settings import EtcdAuthSettings
from ebb.config.settings_file import SettingsFile, group_values, merge_settings, settings_groups
from ebb.errors import ConfigError

__all__ = ["RUN_GROUPS", "ActuatorSettings", "LedgerSettings", "LoopSettings", "PolicySettings", "RunSettings",
           "SecuritySettings", "SourceSettings", "run_settings"]

MODES = ("recommend", "act")
SOURCES = ("agents", "prometheus")
ACTUATORS = ("local", "kubernetes")
MAX_COLD_START_S = 86_400
"""Longest replica cold start accepted (s): a day; longer is a typo (ms for s), and the policy's
memories are counted in comeback horizons of this length."""
AGENTS_REACT_MS = 100
"""The fast path's default period with ``--source agents`` (ms): the agents' 100 ms buckets."""
ELECTIONS = ("auto", "etcd", "kubernetes")
LEASE_DEFAULTS = (15, 10.0, 2.0)
"""client-go's lease duration, renew deadline and retry period (s): the Lease election's defaults."""
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
MAX_CYCLES = 1_000_000_000
"""Most ``--cycles`` accepted: 31 years of 1 s cycles; more is a typo (leave it out to run until stopped)."""
MAX_WORKERS = 1_000
"""Most local ``--workers``: each is a process on this machine; more is a typo (a fleet that size is a
Kubernetes Deployment)."""
MAX_BATCH = 4_096
"""Most batch slots per local worker: vLLM's ``--max-num-seqs`` defaults to 256 and the largest
deployments run about 1,024; 4,096 leaves room and refuses a typo."""


@dataclass(frozen=True)
class LoopSettings:
    """How the loop runs: act or only recommend, its cycle, and what it reports about itself."""

    SECTION: ClassVar[str] = "loop"

    mode: str = "recommend"
    """recommend (record only, the default) or act.

    ``recommend`` decides every cycle and records each decision in the ledger, but changes
    nothing (and starts no local worker); ``act`` also applies them. Default recommend: a new
    deployment is watched, and its decisions reviewed (``ebb review``), before it may act."""
    interval_s: float = 1.0
    """Cycle period (s).

    Seconds between decisions (the policy's reconcile interval), > 0; the policy sizes on the 100 ms
    samples in between, and a fast path (``policy.react_ms``) can add capacity within a cycle.
    Default 1 s."""
    max_staleness_s: float = 5.0
    """Older data counts as missing (s).

    Seconds, > 0. When the freshest sample is older, the cycle holds (fail static: no scale-down on
    data it cannot trust). Default 5 s: five cycles of the default interval."""
    run_id: str | None = None
    """Ledger run id (default live-<target>).

    Decisions are recorded as ``<run_id>-<n>``; keep it stable across restarts and replicas of one
    controller so a successor continues the sequence. Unset: ``live-<namespace>-<deployment>``
    (``fleet-<file stem>`` with a fleet file)."""
    cycles: int | None = None
    """Stop after this many cycles (default: run until SIGTERM).

    A count of cycles, 1 to 1,000,000,000, for tests and one-off checks; unset, the loop runs until
    SIGINT or SIGTERM and stops at the end of the cycle it is in."""
    metrics_port: int | None = None
    """Serve Ebb's own /metrics on this port.

    A TCP port, 0-65535. Unset: no /metrics server (a pod sets it for its
    probes and Prometheus scrapes; ``security.metrics_bind`` says on which address)."""
    otlp: str | None = None
    """Send traces to this OTLP/HTTP endpoint (extra otel).

    A URL such as ``http://otel-collector:4318``; needs ``pip install 'ebb[otel]'``. Unset: one trace
    per cycle is still made (log lines carry its ids) but exported nowhere."""
    log_json: bool | None = None
    """JSON log lines (with trace ids); default: human lines on a terminal, JSON otherwise.

    Unset: a person at a terminal reads human lines, and a pod, whose stderr is a pipe to the log
    collector, writes JSON. ``true`` or ``false`` forces one."""

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ConfigError(f"--mode must be recommend or act, got {self.mode!r} (fix: --mode recommend to "
                              "record only, --mode act to scale)")
        if self.metrics_port is not None and not 0 <= self.metrics_port <= 65535:
            raise ConfigError(f"--metrics-port must be in 0-65535, got {self.metrics_port} (fix: e.g. "
                              "--metrics-port 9400)")
        checks.positive("--interval-s", self.interval_s, fix="the seconds between decisions, e.g. --interval-s 1")
        checks.positive("--max-staleness-s", self.max_staleness_s,
                        fix="the age past which data counts as missing, e.g. --max-staleness-s 5")
        if self.cycles is not None:
            checks.int_in_range("--cycles", self.cycles, 1, MAX_CYCLES,
                                fix="e.g. --cycles 10, or leave it out to run until SIGTERM")


@dataclass(frozen=True)
class SourceSettings:
    """Where the controller reads its signals: Ebb's agents, or Prometheus (Ebb's series or an engine's)."""

    SECTION: ClassVar[str] = "source"

    source: str = "agents"
    """agents or prometheus.

    ``agents``: each ``ebb agent``'s 100 ms buckets over HTTP (the finest signal, and the fast
    path). ``prometheus``: the same series as Prometheus scrapes them (one place to query, coarser
    samples), or an engine's own series with ``engine``. Default agents."""
    agent: tuple[str, ...] = ()
    """Agent URL (repeatable).

    Each ``ebb agent`` endpoint (``http://10.0.0.7:9401``), a list in the file; needed with
    ``source: agents`` unless a fleet file gives each workload its agents."""
    prometheus_url: str | None = None
    """Prometheus base URL (source and PromQL gates).

    A URL such as ``http://prometheus.monitoring:9090``, read by ``source: prometheus`` and by the
    PromQL metrics gates; unset by default."""
    prometheus_selector: str | None = None
    """Label matchers added to every source query, e.g. job="ebb",namespace="serving" (default job=~"ebb|ebb-.+"; "" = unscoped, logged as a warning).

    One Prometheus often scrapes several fleets: the selector keeps the controller's queries to
    its own. Required with ``engine`` (an engine's series carry no Ebb job)."""
    prometheus_replica_label: str | None = None
    """Label naming a replica in Prometheus (default worker; with --engine, pod).

    The label whose values are the replicas (series with the same value are one replica)."""
    engine: str | None = None
    """Read an engine fleet's own series through Prometheus: vllm, sglang, tgi, llamacpp, triton or a name in --engines-file (needs --source prometheus and --prometheus-selector).

    For fleets without Ebb's agents: the signals come from the serving engine's own metrics
    (docs/engines.md). Unset: Ebb's own series."""
    engines_file: Path | None = None
    """YAML file of custom engine profiles.

    Profiles for engines Ebb does not know (their metric names and meanings; docs/engines.md);
    unset by default. Needs ``engine``."""
    max_concurrency: int | None = None
    """With --engine: concurrent requests per pod (vLLM --max-num-seqs, llama-server -np).

    Requests one pod serves at once (slots); turns the engine's running-request count into a
    slot share. Unset: the profile's own default. Needs ``engine``."""

    def __post_init__(self) -> None:
        if self.source not in SOURCES:
            raise ConfigError(f"--source must be agents or prometheus, got {self.source!r} (fix: --source agents "
                              "with --agent URL, or --source prometheus with --prometheus-url URL)")
        if self.engine is None and (self.engines_file is not None or self.max_concurrency is not None):
            raise ConfigError("--engines-file and --max-concurrency need --engine NAME (fix: add --engine, e.g. "
                              "--engine vllm, or drop them)")
        if self.engine is not None and self.source != "prometheus":
            raise ConfigError("--engine is for --source prometheus (the engines' own series) (fix: add --source "
                              "prometheus, or with --source agents give --engine to each `ebb agent` instead)")
        if self.source == "prometheus" and not self.prometheus_url:
            raise ConfigError("--source prometheus needs --prometheus-url URL (fix: e.g. --prometheus-url "
                              "http://127.0.0.1:9090)")


@dataclass(frozen=True)
class ActuatorSettings:
    """What the controller scales: worker processes on this machine, or a Kubernetes Deployment."""

    SECTION: ClassVar[str] = "actuator"

    actuator: str | None = None
    """local (the default: in act mode, worker processes started on this machine; in recommend mode, the --workers workers, else as many as the source reads, observed, nothing started) or kubernetes (always, with a fleet file).

    Unset means local, or kubernetes with a fleet file (the only actuator a fleet has)."""
    namespace: str = "default"
    """Kubernetes namespace of the scaled Deployment.

    Default ``default``, Kubernetes' own default namespace."""
    deployment: str | None = None
    """Kubernetes Deployment to scale.

    Its name; required with ``actuator: kubernetes`` (a fleet file names its own Deployments)."""
    kubeconfig: str | None = None
    """kubeconfig path (default: in-cluster or ~/.kube).

    A file path; unset: the pod's service account inside a cluster, else ``~/.kube/config``."""
    in_cluster: bool = False
    """Use the pod's service account.

    Default false (the kubeconfig is read); a controller deployed as a pod sets it."""
    workers: int | None = None
    """local: workers at start (recommend mode: the workers observed).

    A count of worker processes, 0 to 1,000. Unset: act mode starts 2, the smallest fleet that can
    scale down; recommend mode observes as many workers as the source reads (never a guessed count)."""
    max_batch: int = 8
    """local: batch slots per worker.

    Requests one local worker serves at once, 1 to 4,096; default 8, a small continuous batch."""
    speed: float = 1.0
    """local: worker speed-up over the H200 model.

    A ratio > 0: the emulated workers serve ``speed`` times faster than the calibrated H200 latency
    model (tests run at 20 to finish quickly). Default 1: real time."""
    tier: str | None = None
    """An asleep tier: asleep:wake_s=S,max=N,ttl_s=S,reserve=H (each key optional).

    Scale-downs put drained replicas to sleep through their engine (vLLM POST /sleep; local workers
    speak the same endpoints) while fewer than max (8) sleep, scale-ups wake them first, a wake that
    fails or takes past max(10 s, 5 x wake_s) falls back to a cold start, and one asleep ttl_s (1800 s)
    is released; Ebb counts on the sleepers (docs/tiers.md); reserve=H (off) keeps every sleeper to
    max until ttl_s, wakes them all at a scale-up and keeps H x the sized need running. Kubernetes: the Service must select
    ebb.io/routable=true (docs/tiers.md, Live (Kubernetes)). Act mode, single workload (a fleet
    file names each workload's own tier: key); the simulator's snapshot tier has no live actuator.
    Unset: no tier."""
    serve_keda: str | None = None
    """Serve KEDA's external scaler on HOST:PORT (:9090): a ScaledObject applies Ebb's replicas (docs/keda.md).

    Hand-off mode: act mode on a Kubernetes Deployment, but Ebb writes no /scale; it sets the victims'
    deletion cost, drains as in act mode and answers KEDA's GetMetrics with the replicas it decided
    (metric ebb-desired-replicas, target 1: the HPA applies the number). Needs --mode act and
    --actuator kubernetes; implies --hand-off. Unset: no scaler served."""
    hand_off: bool = False
    """Decide, but let an HPA or KEDA ScaledObject write /scale (the number on ebb_desired_replicas{mode="handoff"}).

    Default false: in act mode Ebb writes /scale itself. With it, Ebb publishes its decided replicas on
    its /metrics (and over gRPC with --serve-keda) for the HPA to apply, and never writes /scale: one
    writer. Needs --mode act and --actuator kubernetes."""

    def __post_init__(self) -> None:
        if self.tier is not None:
            from ebb.config.tiers import parse_tier
            if not parse_tier(self.tier).holds_gpu:
                raise ConfigError(f"--tier {self.tier!r}: the live actuators sleep engines; a snapshot tier is "
                                  "simulator-only (fix: --tier asleep:wake_s=2,max=8)")
        if self.actuator is not None and self.actuator not in ACTUATORS:
            raise ConfigError(f"--actuator must be local or kubernetes, got {self.actuator!r} (fix: --actuator "
                              "kubernetes --deployment NAME, or leave it out for local)")
        if self.workers is not None:
            checks.int_in_range("--workers", self.workers, 0, MAX_WORKERS, fix="e.g. --workers 2")
        checks.int_in_range("--max-batch", self.max_batch, 1, MAX_BATCH, fix="e.g. --max-batch 8")
        checks.positive("--speed", self.speed, fix="a speed-up over the H200 model, e.g. --speed 1 (real time)")

    @property
    def workers_at_start(self) -> int:
        """``--workers``, or 2 when unset (act mode's local fleet, and the policy's initial size)."""
        return 2 if self.workers is None else self.workers


@dataclass(frozen=True)
class PolicySettings:
    """How the controller decides: the policy, the workload classes and gates, the SLO and timing."""

    SECTION: ClassVar[str] = "policy"

    policy: str = "ebb"
    """Policy spec, e.g. ebb:profile=cautious.

    The simulator's spec, knobs inline (``ebb simulate -h`` lists them): the live loop runs the
    same decision code. Default ``ebb`` with its default profile."""
    workloads: Path | None = None
    """L2 workload classes YAML (weights, α, SLO, floor), or a fleet file (workloads: [...]): one controller for every Deployment it lists, across namespaces, with quotas (docs/live.md).

    Unset: the built-in classes, and one scaled workload."""
    workload_class: str | None = None
    """Class of the scaled workload (default: the first).

    A class name of the ``workloads`` file; not with a fleet file (each workload names its own)."""
    gates: Path | None = None
    """Metrics gates YAML: canary scale-down behind these gates.

    Each scale-down first removes one replica and keeps it off only while the gates' PromQL
    stays within bounds (docs/gates.md). Unset: no canary."""
    slo_ttft_ms: float = 2000.0
    """TTFT SLO (ms).

    Time to first token limit, in milliseconds, > 0; default 2 s, MLPerf Inference's server-scenario
    TTFT bound for Llama-2-70B (the simulator's default too)."""
    slo_e2e_ms: float = 60000.0
    """End-to-end SLO (ms).

    Milliseconds, > 0; default 60 s, the common gateway timeout past which a client sees a failure."""
    cold_start_s: float = 60.0
    """Seconds from a replica's request to serving (scheduling, image pull, weights): with the cycle, the comeback horizon the policy's memories are counted in; raised to the slowest it sees.

    Seconds, within 0-86400; default 60 s, the simulator's default too (``ebb simulate
    --cold-start-s``), so a live run and its replay count the same horizon."""
    react_ms: int | None = None
    """Fast-path period (ms) between cycles: a scale-up within it when the need outgrows the fleet (default 100 with --source agents, 0 = off with --source prometheus, whose samples are scrape-spaced).

    Milliseconds, at least 0 and below the cycle (``loop.interval_s``)."""

    def __post_init__(self) -> None:
        checks.positive("--slo-ttft-ms", self.slo_ttft_ms, fix="e.g. --slo-ttft-ms 2000")
        checks.positive("--slo-e2e-ms", self.slo_e2e_ms, fix="e.g. --slo-e2e-ms 60000")
        if not (math.isfinite(self.cold_start_s) and 0 <= self.cold_start_s <= MAX_COLD_START_S):
            raise ConfigError(f"--cold-start-s must be within 0–86400 s, got {self.cold_start_s!r} (fix: the "
                              "seconds a new replica takes to serve, e.g. --cold-start-s 60)")


@dataclass(frozen=True)
class LedgerSettings(EtcdAuthSettings):
    """Where decisions are recorded, and leader election among controllers (etcd or a Kubernetes Lease)."""

    SECTION: ClassVar[str] = "ledger"

    ledger: str = "ebb-ledger.sqlite"
    """Ledger: a SQLite path, sqlite:///PATH or etcd://HOST:PORT/PREFIX.

    Every decision is written here before it is applied (write-ahead), and a restarted controller
    resumes from it. Default ``ebb-ledger.sqlite`` in the working directory (one controller per
    file); etcd for replicated controllers."""
    elect: bool = False
    """Leader election among replicated controllers: on etcd with an etcd ledger, else on a Kubernetes Lease (--election).

    Default false (one controller). With it, only the leader acts, and every ledger write carries
    its fencing token: the etcd ledger compares it in its own transaction; a SQLite ledger shared by
    the replicas (one node: SQLite's WAL needs every writer on one host) refuses a token older than
    one it holds and a write whose Lease ran out (docs/live.md, "Leader election")."""
    candidate_id: str | None = None
    """This controller's id in the election.

    Unset: ``$EBB_INSTANCE``, else ``<hostname>-<pid>`` (a pod's name is its hostname)."""
    election: str = "auto"
    """With --elect: auto (etcd for an etcd ledger, else kubernetes), etcd, or kubernetes (a coordination.k8s.io Lease).

    ``kubernetes`` campaigns on the Lease ``ebb-<target>-<hash>`` in ``lease_namespace`` with the
    actuator's credentials (``--kubeconfig`` / ``--in-cluster``), as client-go's leader election
    does; it needs a SQLite ledger (the etcd ledger checks tokens against its own etcd election).
    Default auto."""
    lease_namespace: str | None = None
    """Namespace of the election Lease (default: $POD_NAMESPACE, else ebb-system).

    A namespace name; the controller's service account needs get, create and update on
    ``coordination.k8s.io`` ``leases`` there. Only with ``election: kubernetes``."""
    lease_duration_s: int = 15
    """Lease election: seconds a follower waits without seeing a renewal before taking the Lease.

    Whole seconds (the Lease's ``leaseDurationSeconds``), above the renew deadline; default 15, as
    client-go. Only with ``election: kubernetes``."""
    lease_renew_deadline_s: float = 10.0
    """Lease election: the leader stops leading this long after its last renewal was sent.

    Seconds, above 1.2 x ``lease_retry_s`` and below ``lease_duration_s``; default 10, as client-go.
    A leader stops >= lease_duration_s / 1.01 - 1.01 x this (4.75 s by default) before any successor
    can hold the Lease. Only with ``election: kubernetes``."""
    lease_retry_s: float = 2.0
    """Lease election: seconds between renewals, and between a follower's tries (jittered).

    Seconds, > 0; default 2, as client-go. Only with ``election: kubernetes``."""

    def __post_init__(self) -> None:
        if self.election not in ELECTIONS:
            raise ConfigError(f"--election must be auto, etcd or kubernetes, got {self.election!r} (fix: "
                              "--election kubernetes for a Lease, or leave it out)")
        lease_given = self.lease_namespace is not None or (
            self.lease_duration_s, self.lease_renew_deadline_s, self.lease_retry_s) != LEASE_DEFAULTS
        if not self.elect and (self.election != "auto" or lease_given):
            raise ConfigError("--election and --lease-* choose how --elect elects, and --elect is not given "
                              "(fix: add --elect, or drop them)")
        if self.lease_namespace is not None and not DNS_LABEL.fullmatch(self.lease_namespace):
            raise ConfigError(f"--lease-namespace {self.lease_namespace!r}: must be a namespace name (lower-case "
                              "letters, digits and '-', at most 63) (fix: e.g. --lease-namespace ebb-system)")
        checks.int_in_range("--lease-duration-s", self.lease_duration_s, 1, 2**31 - 1,
                            fix="whole seconds, e.g. --lease-duration-s 15")
        checks.positive("--lease-retry-s", self.lease_retry_s, fix="e.g. --lease-retry-s 2")
        if not 1.2 * self.lease_retry_s < self.lease_renew_deadline_s < self.lease_duration_s:
            raise ConfigError(f"--lease-renew-deadline-s {self.lease_renew_deadline_s!r}: must be above 1.2 x "
                              f"--lease-retry-s ({self.lease_retry_s:g}) and below --lease-duration-s "
                              f"({self.lease_duration_s}) (fix: keep client-go's ratios, e.g. 15, 10 and 2)")


@dataclass(frozen=True)
class SecuritySettings:
    """Credentials and TLS files for the agents and Prometheus, and where /metrics listens."""

    SECTION: ClassVar[str] = "security"

    agent_token_file: Path | None = None
    """File holding the agents' bearer token (a mounted Secret; default: $EBB_AGENT_TOKEN).

    One token, no spaces; unset: ``$EBB_AGENT_TOKEN``, else no token (agents without auth). A file
    rather than a value: neither ``ps`` nor this file ever shows the token."""
    agent_ca: Path | None = None
    """CA bundle that signs the agents' TLS certificates.

    A PEM file; unset: the system's trust store (for ``https://`` agents)."""
    agent_cert: Path | None = None
    """Client certificate for agents that require mTLS.

    A PEM file, with ``agent_key``; unset by default."""
    agent_key: Path | None = None
    """Key of --agent-cert.

    A PEM file, with ``agent_cert``; unset by default."""
    prometheus_token_file: Path | None = None
    """File holding Prometheus' bearer token, re-read when it changes (default: $EBB_PROMETHEUS_TOKEN).

    Re-read when it changes, so a rotated Kubernetes service-account token keeps working. Unset:
    ``$EBB_PROMETHEUS_TOKEN``, else no token. Needs ``source.prometheus_url``."""
    prometheus_ca: Path | None = None
    """CA bundle that signs Prometheus' TLS certificate.

    A PEM file; unset: the system's trust store. Needs ``source.prometheus_url``."""
    prometheus_cert: Path | None = None
    """Client certificate for a Prometheus with mTLS.

    A PEM file, with ``prometheus_key``; unset by default."""
    prometheus_key: Path | None = None
    """Key of --prometheus-cert.

    A PEM file, with ``prometheus_cert``; unset by default."""
    keda_token_file: Path | None = None
    """File holding the token KEDA's trigger must send (metadata tokenFromEnv) (default: $EBB_KEDA_TOKEN).

    One token, no spaces; unset: ``$EBB_KEDA_TOKEN``, else no token (then use mTLS, or a NetworkPolicy
    that admits only KEDA). KEDA sends no call headers: the ScaledObject's trigger passes it as
    ``tokenFromEnv``, resolved from a Secret in the scale target's environment."""
    keda_cert: Path | None = None
    """TLS certificate of the KEDA scaler's port.

    A PEM file, with ``keda_key``; unset: plaintext gRPC (inside the cluster, behind a NetworkPolicy)."""
    keda_key: Path | None = None
    """Key of --keda-cert.

    A PEM file, with ``keda_cert``; unset by default."""
    keda_client_ca: Path | None = None
    """CA that signs KEDA's client certificate: mTLS on the scaler's port (TriggerAuthentication tlsClientCert).

    A PEM file; needs ``keda_cert``. Unset: no client certificate asked for."""
    metrics_bind: str = "127.0.0.1"
    """Address /metrics listens on: 127.0.0.1 here, 0.0.0.0 in a pod (probes and scrapes use the pod IP).

    Default loopback: on a workstation nothing outside it reads Ebb's metrics."""


@dataclass(frozen=True)
class RunSettings:
    """Everything ``ebb run`` is told, one group per section; built once, by :func:`run_settings`."""

    loop: LoopSettings
    source: SourceSettings
    actuator: ActuatorSettings
    policy: PolicySettings
    ledger: LedgerSettings
    security: SecuritySettings

    def __post_init__(self) -> None:
        self._check_hand_off()
        react_s = self.react_s
        if not 0 <= react_s < self.loop.interval_s:
            ms = self.policy.react_ms
            got = f"{ms!r}" if ms is not None else f"the agents' default {react_s * 1000:g} ms"
            raise ConfigError(f"--react-ms must be within 0 and the cycle ({self.loop.interval_s * 1000:g} ms), "
                              f"got {got} (fix: a longer --interval-s, or --react-ms 0 to turn the fast path off)")

    def _check_hand_off(self) -> None:
        """--serve-keda / --hand-off: act mode on a Kubernetes Deployment, no tier (module docstring)."""
        a = self.actuator
        flag = "--serve-keda" if a.serve_keda else "--hand-off" if a.hand_off else None
        if flag is None:
            sec = self.security
            if sec.keda_cert or sec.keda_key or sec.keda_client_ca or sec.keda_token_file:
                raise ConfigError("--keda-token-file/-cert/-key/-client-ca need --serve-keda HOST:PORT (fix: add it)")
            return
        if self.loop.mode != "act":
            raise ConfigError(f"{flag} hands Ebb's decisions to an HPA to apply: it needs --mode act (fix: --mode act; "
                              "to only watch, leave it out and read ebb_desired_replicas{mode=\"recommend\"})")
        if a.actuator == "local":
            raise ConfigError(f"{flag} needs --actuator kubernetes --deployment NAME (the HPA applies the number "
                              "to a Deployment) (fix: add them)")
        if a.tier is not None:
            raise ConfigError(f"{flag} does not go with --tier: the tier's /scale counts sleeping pods, which an "
                              "HPA would take for running ones (fix: drop one)")

    @property
    def react_s(self) -> float:
        """The fast path's period (s): ``--react-ms``, else 0.1 with agents and 0 (off) with Prometheus."""
        ms = self.policy.react_ms
        if ms is None:
            ms = AGENTS_REACT_MS if self.source.source == "agents" else 0
        return ms / 1000.0

    @property
    def groups(self) -> tuple[Any, ...]:
        """The groups in :data:`RUN_GROUPS` order (what ``--print-config`` prints)."""
        return group_values(self)


RUN_GROUPS = settings_groups(RunSettings)
"""``ebb run``'s sections, in the order they are built and checked (and listed in ``-h``): :class:`RunSettings`' fields."""


def run_settings(given: Mapping[str, Any], file: SettingsFile | None = None) -> RunSettings:
    """``ebb run``'s settings: the ``given`` flags over ``file``'s values over the defaults, checked."""
    return RunSettings(**merge_settings(RUN_GROUPS, given, file))
