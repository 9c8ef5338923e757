"""``ebb run`` (the live controller) and ``ebb demo`` (``--live``: the whole loop on this machine)."""

from __future__ import annotations

import logging
import math
import os
import signal
import socket
import sys
import threading
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.live import Live
from rich.table import Table

from ebb.cli.app import app
from ebb.cli.ledger_options import EtcdCaOpt, EtcdCertOpt, EtcdKeyOpt, EtcdPasswordFileOpt, EtcdUserOpt, etcd_auth
from ebb.errors import ConfigError

_console = Console()


def _secret(path: Path | None, env: str, flag: str) -> str | None:
    """A token from a file (a mounted Secret; surrounding whitespace dropped) or ``$env``; None without."""
    if path is None:
        return os.environ.get(env) or None
    try:
        token = path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{flag} {path}: cannot read the token: {exc} (fix: point it at the mounted "
                          "Secret's file)") from exc
    if not token or any(c.isspace() for c in token):
        raise ConfigError(f"{flag} {path}: the file must hold one token with no spaces (fix: write only the token)")
    return token


def _tls(ca: Path | None, cert: Path | None, key: Path | None, prefix: str) -> Any:
    """TLS files for a client, checked now; None when none is given."""
    if ca is None and cert is None and key is None:
        return None
    if (cert is None) != (key is None):
        raise ConfigError(f"--{prefix}-cert and --{prefix}-key go together (fix: give both, or neither)")
    for p in (ca, cert, key):
        if p is not None and not p.is_file():
            raise ConfigError(f"--{prefix}-*: {p} is not a readable file (fix: check the path)")
    from ebb.sources.http_get import TlsOptions
    opts = TlsOptions(ca_file=str(ca) if ca else None, cert_file=str(cert) if cert else None,
                      key_file=str(key) if key else None)
    opts.context()  # InputError naming the file now, not at the first cycle
    return opts


def _prometheus_client(url: str | None, token_file: Path | None, ca: Path | None, cert: Path | None,
                       key: Path | None) -> Any:
    """The client the --prometheus-* flags describe (None without a URL); ConfigError for unusable ones."""
    if not url:
        if token_file or ca or cert or key:
            raise ConfigError("--prometheus-token-file/-ca/-cert/-key need --prometheus-url (fix: add it)")
        return None
    from ebb.sources.prometheus_api import PrometheusClient
    tls = _tls(ca, cert, key, "prometheus")
    token = None if token_file else _secret(None, "EBB_PROMETHEUS_TOKEN", "--prometheus-token-file")
    # A token file is re-read when it changes (a rotated Kubernetes token), not only now.
    return PrometheusClient(url, token=token, token_file=token_file, tls=tls)


def _source(kind: str, agents: list[str], prometheus: str | None, *, agent_token: str | None = None,
            agent_tls: Any = None, prometheus_client: Any = None, prometheus_selector: str | None = None,
            replica_label: str | None = None, engine: str | None = None, engines_file: Path | None = None,
            max_concurrency: int | None = None) -> Any:
    if engine is None and (engines_file is not None or max_concurrency is not None):
        raise ConfigError("--engines-file and --max-concurrency need --engine NAME")
    if engine is not None and kind != "prometheus":
        raise ConfigError("--engine is for --source prometheus (the engines' own series); with --source agents "
                          "give --engine to each `ebb agent` instead")
    if kind == "agents":
        if not agents:
            raise ConfigError("--source agents needs at least one --agent URL (an `ebb agent` endpoint)")
        from ebb.sources.agents import AgentSource
        return AgentSource(agents, token=agent_token, tls=agent_tls)
    if kind == "prometheus":
        if not prometheus:
            raise ConfigError("--source prometheus needs --prometheus URL (e.g. http://127.0.0.1:9090)")
        from ebb.sources.engines import engine_profile
        from ebb.sources.prometheus import PrometheusClient, PrometheusSource
        # No selector: Ebb's own jobs in Ebb mode; engine mode refuses to guess (one Prometheus often
        # scrapes several fleets). No replica label: worker in Ebb mode, pod in engine mode.
        return PrometheusSource(prometheus_client or PrometheusClient(prometheus), replica_label=replica_label,
                                selector=prometheus_selector,
                                engine=None if engine is None else engine_profile(engine, engines_file),
                                max_concurrency=max_concurrency)
    raise ConfigError(f"--source must be agents or prometheus, got {kind!r}")


def _json_logs(asked: bool | None) -> bool:
    """JSON log lines unless asked otherwise or stderr is a terminal (a person reading, kubectl-style);
    a pod's stderr is a pipe to the log collector, so a controller in a cluster logs JSON by default."""
    return asked if asked is not None else not sys.stderr.isatty()


@app.command("run")
def run_cmd(
    mode: Annotated[str, typer.Option(help="recommend (record only, the default) or act.")] = "recommend",
    source: Annotated[str, typer.Option(help="agents or prometheus.")] = "agents",
    agent: Annotated[list[str], typer.Option("--agent", help="Agent URL (repeatable).")] = [],  # noqa: B006
    prometheus: Annotated[str | None, typer.Option("--prometheus-url", "--prometheus",
                                                   help="Prometheus base URL (source and PromQL gates).")] = None,
    prometheus_selector: Annotated[str | None, typer.Option(
        help='Label matchers added to every source query, e.g. job="ebb",namespace="serving" '
             '(default job=~"ebb|ebb-.+"; "" = unscoped, logged as a warning).')] = None,
    prometheus_replica_label: Annotated[str | None, typer.Option(
        help="Label naming a replica in Prometheus (default worker; with --engine, pod).")] = None,
    engine: Annotated[str | None, typer.Option(
        help="Read an engine fleet's own series through Prometheus: vllm, sglang, tgi, llamacpp, triton or a "
             "name in --engines-file (needs --source prometheus and --prometheus-selector).")] = None,
    engines_file: Annotated[Path | None, typer.Option(help="YAML file of custom engine profiles.")] = None,
    max_concurrency: Annotated[int | None, typer.Option(
        help="With --engine: concurrent requests per pod (vLLM --max-num-seqs, llama-server -np).")] = None,
    prometheus_token_file: Annotated[Path | None, typer.Option(
        help="File holding Prometheus' bearer token, re-read when it changes (default: $EBB_PROMETHEUS_TOKEN).")]
    = None,
    prometheus_ca: Annotated[Path | None, typer.Option(help="CA bundle that signs Prometheus' TLS certificate.")]
    = None,
    prometheus_cert: Annotated[Path | None, typer.Option(help="Client certificate for a Prometheus with mTLS.")]
    = None,
    prometheus_key: Annotated[Path | None, typer.Option(help="Key of --prometheus-cert.")] = None,
    actuator: Annotated[str | None, typer.Option(
        help="local (the default: in act mode, worker processes started on this machine; in recommend mode, "
             "--workers workers observed, nothing started) or kubernetes (always, with a fleet file).")]
    = None,
    namespace: Annotated[str, typer.Option(help="Kubernetes namespace of the scaled Deployment.")] = "default",
    deployment: Annotated[str | None, typer.Option(help="Kubernetes Deployment to scale.")] = None,
    kubeconfig: Annotated[str | None, typer.Option(help="kubeconfig path (default: in-cluster or ~/.kube).")] = None,
    in_cluster: Annotated[bool, typer.Option(help="Use the pod's service account.")] = False,
    workers: Annotated[int, typer.Option(help="local: workers at start (recommend mode: the workers observed).")] = 2,
    max_batch: Annotated[int, typer.Option(help="local: batch slots per worker.")] = 8,
    speed: Annotated[float, typer.Option(help="local: worker speed-up over the H200 model.")] = 1.0,
    ledger: Annotated[str, typer.Option(help="Ledger: a SQLite path, sqlite:///PATH or etcd://HOST:PORT/PREFIX.")]
    = "ebb-ledger.sqlite",
    elect: Annotated[bool, typer.Option(help="Leader election on the etcd ledger's server (HA controllers).")]
    = False,
    candidate_id: Annotated[str | None, typer.Option(envvar="EBB_INSTANCE",
                                                     help="This controller's id in the election.")] = None,
    etcd_ca: EtcdCaOpt = None,
    etcd_cert: EtcdCertOpt = None,
    etcd_key: EtcdKeyOpt = None,
    etcd_user: EtcdUserOpt = None,
    etcd_password_file: EtcdPasswordFileOpt = None,
    workloads: Annotated[Path | None, typer.Option(
        help="L2 workload classes YAML (weights, α, SLO, floor), or a fleet file (workloads: [...]): one "
             "controller for every Deployment it lists, across namespaces, with quotas (docs/live.md).")]
    = None,
    workload_class: Annotated[str | None, typer.Option(help="Class of the scaled workload (default: the first).")]
    = None,
    gates: Annotated[Path | None, typer.Option(help="Metrics gates YAML: canary scale-down behind these gates.")]
    = None,
    policy: Annotated[str, typer.Option(help="Policy spec, e.g. ebb:profile=cautious.")] = "ebb",
    slo_ttft_ms: Annotated[float, typer.Option(help="TTFT SLO (ms).")] = 2000.0,
    slo_e2e_ms: Annotated[float, typer.Option(help="End-to-end SLO (ms).")] = 60000.0,
    interval_s: Annotated[float, typer.Option(help="Cycle period (s).")] = 1.0,
    cold_start_s: Annotated[float, typer.Option(
        help="Seconds from a replica's request to serving (scheduling, image pull, weights): with the cycle, "
             "the comeback horizon the policy's memories are counted in; raised to the slowest it sees.")]
    = 60.0,
    react_ms: Annotated[int | None, typer.Option(
        help="Fast-path period (ms) between cycles: a scale-up within it when the need outgrows the fleet "
             "(default 100 with --source agents, 0 = off with --source prometheus, whose samples are "
             "scrape-spaced).")] = None,
    max_staleness_s: Annotated[float, typer.Option(help="Older data counts as missing (s).")] = 5.0,
    run_id: Annotated[str | None, typer.Option(help="Ledger run id (default live-<target>).")] = None,
    agent_token_file: Annotated[Path | None, typer.Option(
        help="File holding the agents' bearer token (a mounted Secret; default: $EBB_AGENT_TOKEN).")] = None,
    agent_ca: Annotated[Path | None, typer.Option(help="CA bundle that signs the agents' TLS certificates.")] = None,
    agent_cert: Annotated[Path | None, typer.Option(help="Client certificate for agents that require mTLS.")] = None,
    agent_key: Annotated[Path | None, typer.Option(help="Key of --agent-cert.")] = None,
    metrics_port: Annotated[int | None, typer.Option(help="Serve Ebb's own /metrics on this port.")] = None,
    metrics_bind: Annotated[str, typer.Option(
        help="Address /metrics listens on: 127.0.0.1 here, 0.0.0.0 in a pod (probes and scrapes use the pod IP).")]
    = "127.0.0.1",
    otlp: Annotated[str | None, typer.Option(help="Send traces to this OTLP/HTTP endpoint (extra otel).")] = None,
    cycles: Annotated[int | None, typer.Option(help="Stop after this many cycles (default: run until SIGTERM).")]
    = None,
    log_json: Annotated[bool | None, typer.Option(
        "--log-json/--no-log-json",
        help="JSON log lines (with trace ids); default: human lines on a terminal, JSON otherwise.")] = None,
) -> None:
    """Run the controller on the wall clock: the simulator's decision code against live signals."""
    from ebb.ledger.location import check_auth_fits, parse_location
    from ebb.live.controller import Controller, ControllerSettings
    from ebb.live.policy_spec import build_live_policy, replica_bounds
    from ebb.telemetry.logs import configure_logging

    # Everything that can be wrong with the arguments is checked before anything starts.
    if mode not in ("recommend", "act"):
        raise ConfigError(f"--mode must be recommend or act, got {mode!r}")
    if source not in ("agents", "prometheus"):  # first: every later check (and --react-ms's default) reads it
        raise ConfigError(f"--source must be agents or prometheus, got {source!r}")
    fleet_cfg = _fleet_file(workloads)
    if fleet_cfg is not None:
        _check_fleet_flags(actuator, deployment, workload_class, gates, agent, prometheus_selector)
        actuator = "kubernetes"
    actuator = actuator or "local"
    if actuator not in ("local", "kubernetes"):
        raise ConfigError(f"--actuator must be local or kubernetes, got {actuator!r}")
    if actuator == "kubernetes" and not deployment and fleet_cfg is None:
        raise ConfigError("--actuator kubernetes needs --deployment NAME (and --namespace)")
    target = (f"fleet-{workloads.stem}" if fleet_cfg is not None and workloads is not None
              else f"{namespace}/{deployment}" if actuator == "kubernetes" else "local/serving")
    loc = parse_location(ledger)
    if elect and loc.kind != "etcd":
        raise ConfigError("--elect needs an etcd ledger (--ledger etcd://HOST:PORT/PREFIX): the fencing "
                          "token is checked by the ledger's own transactions")
    ledger_auth = etcd_auth(etcd_ca, etcd_cert, etcd_key, etcd_user, etcd_password_file)
    check_auth_fits(loc, ledger_auth)
    if metrics_port is not None and not 0 <= metrics_port <= 65535:
        raise ConfigError(f"--metrics-port must be in 0-65535, got {metrics_port}")
    if not (math.isfinite(cold_start_s) and 0 <= cold_start_s <= 86_400):
        raise ConfigError(f"--cold-start-s must be within 0–86400 s, got {cold_start_s!r}")
    react_s = (100 if source == "agents" else 0) / 1000.0 if react_ms is None else react_ms / 1000.0
    if not 0 <= react_s < interval_s:
        got = f"{react_ms!r}" if react_ms is not None else f"the agents' default {react_s * 1000:g} ms"
        raise ConfigError(f"--react-ms must be within 0 and the cycle ({interval_s * 1000:g} ms), got {got} "
                          "(fix: a longer --interval-s, or --react-ms 0 to turn the fast path off)")
    prom_client = _prometheus_client(prometheus, prometheus_token_file, prometheus_ca, prometheus_cert,
                                     prometheus_key)
    if fleet_cfg is not None:
        from ebb.cli.run_fleet import plan_fleet
        agent_token = _secret(agent_token_file, "EBB_AGENT_TOKEN", "--agent-token-file")
        agent_tls = _tls(agent_ca, agent_cert, agent_key, "agent")
        fleet = plan_fleet(fleet_cfg, source=source, policy=policy, slo_ttft_ms=slo_ttft_ms, slo_e2e_ms=slo_e2e_ms,
                           interval_s=interval_s, max_staleness_s=max_staleness_s, cold_start_s=cold_start_s,
                           make_source=lambda w: _source(
                               source, list(w.agents), prometheus, agent_token=agent_token, agent_tls=agent_tls,
                               prometheus_client=prom_client, prometheus_selector=w.prometheus_selector,
                               replica_label=prometheus_replica_label, engine=engine, engines_file=engines_file,
                               max_concurrency=max_concurrency))
        _run_fleet_cmd(fleet, mode=mode, run_id=run_id or target, interval_s=interval_s,
                       max_staleness_s=max_staleness_s, react_s=react_s, kubeconfig=kubeconfig, in_cluster=in_cluster,
                       ledger=ledger, loc=loc, ledger_auth=ledger_auth, elect=elect, candidate_id=candidate_id,
                       metrics_port=metrics_port, metrics_bind=metrics_bind, otlp=otlp, cycles=cycles,
                       log_json=log_json)
        return
    src = _source(source, agent, prometheus, agent_token=_secret(agent_token_file, "EBB_AGENT_TOKEN",
                                                                  "--agent-token-file"),
                  agent_tls=_tls(agent_ca, agent_cert, agent_key, "agent"), prometheus_client=prom_client,
                  prometheus_selector=prometheus_selector, replica_label=prometheus_replica_label,
                  engine=engine, engines_file=engines_file, max_concurrency=max_concurrency)
    gate_specs = _gates(gates)
    pol = build_live_policy(policy, slo_ttft_ms=slo_ttft_ms, slo_e2e_ms=slo_e2e_ms, initial=workers,
                            interval_s=interval_s, max_staleness_s=max_staleness_s,
                            workload=_workload(workloads, workload_class), gates=gate_specs,
                            cold_start_s=cold_start_s)
    pol_min, pol_max = replica_bounds(pol)
    probe = None
    if gate_specs and prometheus:  # PromQL gates are measured through Prometheus; the built-in one reads L1
        from ebb.live.gate_probe import prometheus_gate_probe
        probe = prometheus_gate_probe(prom_client)
    settings = ControllerSettings(run_id=run_id or f"live-{target.replace('/', '-')}", target=target,
                                  mode=mode, interval_s=interval_s,  # type: ignore[arg-type]
                                  max_staleness_s=max_staleness_s, min_replicas=pol_min, max_replicas=pol_max,
                                  react_interval_s=react_s)

    handler = configure_logging(json=_json_logs(log_json), stream=sys.stderr)
    closers: list[Any] = [lambda: logging.getLogger().removeHandler(handler)]
    try:
        if actuator == "kubernetes":
            from ebb.actuate.kubernetes import KubernetesActuator
            act: Any = KubernetesActuator(namespace, str(deployment), kubeconfig=kubeconfig, in_cluster=in_cluster)
        elif mode == "recommend":
            # Recommend mode changes nothing, so it starts nothing either: the local fleet is observed.
            from ebb.actuate.observed import ObservedFleet
            act = ObservedFleet(workers)
        else:
            from ebb.actuate.local import LocalActuator
            from ebb.live.router import Router
            router = Router()
            _console.print(f"router: {router.start()}")
            closers.append(router.stop)
            act = LocalActuator(router, initial=workers, max_batch=max_batch, speed=speed)
            closers.append(act.close)
        elector, store, metrics, tracer = _services(closers, ledger=ledger, loc=loc, ledger_auth=ledger_auth,
                                                    election_key=target if elect else None,
                                                    candidate_id=candidate_id, metrics_port=metrics_port,
                                                    metrics_bind=metrics_bind, otlp=otlp)
        ctl = Controller(pol, src, act, store, settings, tracer=tracer, metrics=metrics, elector=elector,
                         gate_probe=probe)
        stop = _stop_on_signals()
        _console.print(f"ebb run: {mode} mode, {source} → {pol.spec} → {actuator} ({target}), ledger {ledger}")
        ctl.run(stop, max_cycles=cycles)
    finally:
        for close in reversed(closers):
            close()


def _fleet_file(path: Path | None) -> Any:
    """The fleet of a ``--workloads`` file that lists ``workloads:``; None for a classes file (or none)."""
    if path is None:
        return None
    from ebb.config.fleet import is_fleet_document, parse_fleet_document
    from ebb.config.yamlio import load_mapping, read_config_text
    doc = load_mapping(read_config_text(path, "workloads file"), str(path),
                       "write classes: [...] (L2 classes) or workloads: [...] (a fleet)")
    return parse_fleet_document(doc, str(path)) if is_fleet_document(doc) else None


def _check_fleet_flags(actuator: str | None, deployment: str | None, workload_class: str | None,
                       gates: Path | None, agents: list[str], selector: str | None) -> None:
    """The single-workload flags a fleet file replaces: refused, so none is silently ignored."""
    if actuator not in (None, "kubernetes"):
        raise ConfigError("a fleet file (workloads: [...]) scales Kubernetes Deployments: drop --actuator "
                          f"{actuator} (or give --actuator kubernetes)")
    for flag, given, fix in (
            ("--deployment", deployment, "the fleet file names its Deployments"),
            ("--workload-class", workload_class, "each workload names its class: in the fleet file"),
            ("--gates", gates, "PromQL gates are per workload; use policy: ebb:canary=on in the fleet file"),
            ("--agent", agents, "give each workload its agents: in the fleet file"),
            ("--prometheus-selector", selector, "give each workload its prometheus_selector: in the fleet file")):
        if given:
            raise ConfigError(f"{flag} does not go with a fleet file (fix: {fix})")


def _run_fleet_cmd(fleet: Any, *, mode: str, run_id: str, interval_s: float, max_staleness_s: float,
                   react_s: float, kubeconfig: str | None, in_cluster: bool, ledger: str, loc: Any,
                   ledger_auth: Any, elect: bool, candidate_id: str | None, metrics_port: int | None,
                   metrics_bind: str, otlp: str | None, cycles: int | None, log_json: bool | None) -> None:
    """Start the ledger, election, metrics and tracing as a single-workload ``ebb run`` does, then the fleet."""
    from ebb.cli.run_fleet import run_fleet
    from ebb.telemetry.logs import configure_logging

    handler = configure_logging(json=_json_logs(log_json), stream=sys.stderr)
    closers: list[Any] = [lambda: logging.getLogger().removeHandler(handler)]
    try:
        elector, store, metrics, tracer = _services(closers, ledger=ledger, loc=loc, ledger_auth=ledger_auth,
                                                    election_key=run_id if elect else None,  # one lease for all
                                                    candidate_id=candidate_id, metrics_port=metrics_port,
                                                    metrics_bind=metrics_bind, otlp=otlp)
        stop = _stop_on_signals()
        run_fleet(fleet, mode=mode, run_id=run_id, interval_s=interval_s, max_staleness_s=max_staleness_s,
                  react_s=react_s, kubeconfig=kubeconfig, in_cluster=in_cluster, store=store, elector=elector,
                  tracer=tracer, metrics=metrics, stop=stop, cycles=cycles, closers=closers,
                  say=lambda text: _console.print(text, soft_wrap=True))
    finally:
        for close in reversed(closers):
            close()


def _services(closers: list[Any], *, ledger: str, loc: Any, ledger_auth: Any, election_key: str | None,
              candidate_id: str | None, metrics_port: int | None, metrics_bind: str,
              otlp: str | None) -> tuple[Any, Any, Any, Any]:
    """(elector or None, ledger, metrics, tracer), started in that order; each one's close joins ``closers``."""
    from ebb.ledger import open_ledger
    from ebb.telemetry.metrics import EbbMetrics
    from ebb.telemetry.tracing import CycleTracer, configure_otlp, local_provider

    elector = None
    if election_key is not None:
        from ebb.ledger.election import LeaderElector
        elector = LeaderElector(loc.target, f"{loc.prefix or 'ebb'}/leader/{election_key}",
                                candidate_id or f"{socket.gethostname()}-{os.getpid()}", auth=ledger_auth)
        elector.start()
        closers.append(elector.close)
    store = open_ledger(ledger, writer=True, etcd_auth=ledger_auth)  # SQLite: one controller per file
    closers.append(store.close)
    metrics = EbbMetrics()
    if metrics_port is not None:
        _console.print(f"metrics: {metrics.serve(metrics_port, bind=metrics_bind)}")
        closers.append(metrics.stop)
    tracer = CycleTracer(configure_otlp(otlp) if otlp else local_provider())
    return elector, store, metrics, tracer


def _stop_on_signals() -> threading.Event:
    """An event SIGINT and SIGTERM set (the loop stops at the end of its cycle)."""
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    return stop


def _workload(path: Path | None, name: str | None) -> Any:
    """The named class (default: the first) from a workload classes file; None without a file."""
    if path is None:
        return None
    from ebb.config.workloads import load_workload_classes
    classes = load_workload_classes(path)
    named = [c for c in classes if name in (None, c.name)]
    if not named:
        raise ConfigError(f"{path}: no workload class named {name!r} (fix: one of {', '.join(c.name for c in classes)})")
    return named[0]


def _gates(path: Path | None) -> tuple[Any, ...]:
    """Metrics gates from a gates file; () without one."""
    if path is None:
        return ()
    from ebb.config.yamlio import read_config_text
    from ebb.gates.metrics_gate import load_gates
    return load_gates(read_config_text(path, "gates file"), str(path))


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
) -> None:
    """Scale real worker processes under a real trace with the live controller, and report what happened."""
    if not live:
        _console.print("ebb demo replays on the simulator's virtual clock with `ebb simulate` (what `make demo` "
                       "runs); add --live to run the live loop on this machine.")
        raise typer.Exit(0)
    import time

    from ebb.live.controller import CycleOutcome
    from ebb.live.demo import ENGINES, DemoSettings, LiveDemo, llamacpp_settings, recent_load

    from ebb.telemetry.logs import configure_logging
    from ebb.telemetry.tracing import CycleTracer, local_provider

    if engine not in ENGINES:
        raise ConfigError(f"--engine must be one of {', '.join(ENGINES)}, got {engine!r}")
    if engine == "llamacpp":
        from ebb.live.llamacpp import llama_server_binary, tiny_model
        llama_server_binary()  # MissingExtraError with the fix before anything starts
        tiny_model()
        settings = llamacpp_settings(minutes=minutes, trace=trace, start_s=start_s, time_scale=time_scale,
                                     source="agents" if source == "auto" else source, report=report,
                                     workdir=workdir)
    else:
        settings = DemoSettings(minutes=minutes, trace=trace, start_s=start_s, time_scale=time_scale, source=source,
                                report=report, workdir=workdir)
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
    _console.print(f"source {result.source}; {c.requests:,} requests, {result.load.failed} failed; "
                   f"replicas mean {c.mean_replicas:.2f} peak {c.peak_replicas}; {c.scale_downs} scale-downs, "
                   f"{c.scale_ups} scale-ups; SLO violations {c.slo_violation_pct:.2f} %; "
                   f"ledger {result.ledger_path} (ebb explain --ledger {result.ledger_path} --list); "
                   f"logs {workdir / 'controller.log'}")
    if result.report is not None:
        _console.print(f"report: {result.report}")
