"""``ebb run``: the live controller, the simulator's decision code on the wall clock.

It reads its flags into :class:`~ebb.config.run_settings.RunSettings` (one group per ``-h`` panel,
merged with ``--config FILE``: :mod:`ebb.cli.config_option`; the settings check their own values
and the flags that do not go together), then checks what needs files (the ``--workloads`` file,
read once, TLS, tokens, the ledger URL) and runs one workload or a fleet (:mod:`ebb.cli.run_fleet`).
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from ebb.cli.app import app
from ebb.cli.config_option import ConfigOpt, PrintConfigOpt, panel, print_settings, read_settings, settings_option
from ebb.cli.ledger_options import etcd_auth, etcd_option
from ebb.cli.run_election import plan_election, start_elector
from ebb.config.run_settings import (
    RUN_GROUPS,
    ActuatorSettings,
    LedgerSettings,
    LoopSettings,
    PolicySettings,
    RunSettings,
    SecuritySettings,
    SourceSettings,
    run_settings,
)
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
    """The signal source of checked settings (:class:`SourceSettings` refuses the flags that do not go
    together); a workload's agents come from ``--agent`` or, with a fleet file, from its entry."""
    if kind == "agents":
        if not agents:
            raise ConfigError("--source agents needs at least one --agent URL (an `ebb agent` endpoint) (fix: "
                              "e.g. --agent http://10.0.0.7:9401, or agents: [...] per workload in a fleet file)")
        from ebb.sources.agents import AgentSource
        return AgentSource(agents, token=agent_token, tls=agent_tls)
    from ebb.sources.engines import engine_profile
    from ebb.sources.prometheus import PrometheusClient, PrometheusSource
    # No selector: Ebb's own jobs in Ebb mode; engine mode refuses to guess (one Prometheus often
    # scrapes several fleets). No replica label: worker in Ebb mode, pod in engine mode.
    return PrometheusSource(prometheus_client or PrometheusClient(str(prometheus)), replica_label=replica_label,
                            selector=prometheus_selector,
                            engine=None if engine is None else engine_profile(engine, engines_file),
                            max_concurrency=max_concurrency)


def _json_logs(asked: bool | None) -> bool:
    """JSON log lines unless asked otherwise or stderr is a terminal (a person reading, kubectl-style);
    a pod's stderr is a pipe to the log collector, so a controller in a cluster logs JSON by default."""
    return asked if asked is not None else not sys.stderr.isatty()


@app.command("run")
def run_cmd(
    ctx: typer.Context,
    config: ConfigOpt = None,
    print_config: PrintConfigOpt = False,
    mode: Annotated[str, settings_option(LoopSettings, "mode")] = LoopSettings.mode,
    interval_s: Annotated[float, settings_option(LoopSettings, "interval_s")] = LoopSettings.interval_s,
    max_staleness_s: Annotated[float, settings_option(LoopSettings, "max_staleness_s")] = LoopSettings.max_staleness_s,
    run_id: Annotated[str | None, settings_option(LoopSettings, "run_id")] = None,
    cycles: Annotated[int | None, settings_option(LoopSettings, "cycles")] = None,
    metrics_port: Annotated[int | None, settings_option(LoopSettings, "metrics_port")] = None,
    otlp: Annotated[str | None, settings_option(LoopSettings, "otlp")] = None,
    log_json: Annotated[bool | None, settings_option(LoopSettings, "log_json", "--log-json/--no-log-json")] = None,
    source: Annotated[str, settings_option(SourceSettings, "source")] = SourceSettings.source,
    agent: Annotated[list[str], settings_option(SourceSettings, "agent", "--agent")] = [],  # noqa: B006
    prometheus: Annotated[str | None, settings_option(SourceSettings, "prometheus_url", "--prometheus-url",
                                                      "--prometheus")] = None,
    prometheus_selector: Annotated[str | None, settings_option(SourceSettings, "prometheus_selector")] = None,
    prometheus_replica_label: Annotated[str | None, settings_option(SourceSettings, "prometheus_replica_label")]
    = None,
    engine: Annotated[str | None, settings_option(SourceSettings, "engine")] = None,
    engines_file: Annotated[Path | None, settings_option(SourceSettings, "engines_file")] = None,
    max_concurrency: Annotated[int | None, settings_option(SourceSettings, "max_concurrency")] = None,
    actuator: Annotated[str | None, settings_option(ActuatorSettings, "actuator")] = None,
    namespace: Annotated[str, settings_option(ActuatorSettings, "namespace")] = ActuatorSettings.namespace,
    deployment: Annotated[str | None, settings_option(ActuatorSettings, "deployment")] = None,
    kubeconfig: Annotated[str | None, settings_option(ActuatorSettings, "kubeconfig")] = None,
    in_cluster: Annotated[bool, settings_option(ActuatorSettings, "in_cluster")] = ActuatorSettings.in_cluster,
    workers: Annotated[int | None, settings_option(ActuatorSettings, "workers")] = None,
    max_batch: Annotated[int, settings_option(ActuatorSettings, "max_batch")] = ActuatorSettings.max_batch,
    speed: Annotated[float, settings_option(ActuatorSettings, "speed")] = ActuatorSettings.speed,
    tier: Annotated[str | None, settings_option(ActuatorSettings, "tier")] = None,
    serve_keda: Annotated[str | None, settings_option(ActuatorSettings, "serve_keda")] = None,
    hand_off: Annotated[bool, settings_option(ActuatorSettings, "hand_off")] = ActuatorSettings.hand_off,
    policy: Annotated[str, settings_option(PolicySettings, "policy")] = PolicySettings.policy,
    workloads: Annotated[Path | None, settings_option(PolicySettings, "workloads")] = None,
    workload_class: Annotated[str | None, settings_option(PolicySettings, "workload_class")] = None,
    gates: Annotated[Path | None, settings_option(PolicySettings, "gates")] = None,
    slo_ttft_ms: Annotated[float, settings_option(PolicySettings, "slo_ttft_ms")] = PolicySettings.slo_ttft_ms,
    slo_e2e_ms: Annotated[float, settings_option(PolicySettings, "slo_e2e_ms")] = PolicySettings.slo_e2e_ms,
    cold_start_s: Annotated[float, settings_option(PolicySettings, "cold_start_s")] = PolicySettings.cold_start_s,
    react_ms: Annotated[int | None, settings_option(PolicySettings, "react_ms")] = None,
    ledger: Annotated[str, settings_option(LedgerSettings, "ledger")] = LedgerSettings.ledger,
    elect: Annotated[bool, settings_option(LedgerSettings, "elect")] = LedgerSettings.elect,
    candidate_id: Annotated[str | None, settings_option(LedgerSettings, "candidate_id", envvar="EBB_INSTANCE")]
    = None,
    election: Annotated[str, settings_option(LedgerSettings, "election")] = LedgerSettings.election,
    lease_namespace: Annotated[str | None, settings_option(LedgerSettings, "lease_namespace")] = None,
    lease_duration_s: Annotated[int, settings_option(LedgerSettings, "lease_duration_s")] = \
    LedgerSettings.lease_duration_s,
    lease_renew_deadline_s: Annotated[float, settings_option(LedgerSettings, "lease_renew_deadline_s")] = \
    LedgerSettings.lease_renew_deadline_s,
    lease_retry_s: Annotated[float, settings_option(LedgerSettings, "lease_retry_s")] = LedgerSettings.lease_retry_s,
    etcd_ca: Annotated[str | None, etcd_option("etcd_ca", panel(LedgerSettings))] = None,
    etcd_cert: Annotated[str | None, etcd_option("etcd_cert", panel(LedgerSettings))] = None,
    etcd_key: Annotated[str | None, etcd_option("etcd_key", panel(LedgerSettings))] = None,
    etcd_user: Annotated[str | None, etcd_option("etcd_user", panel(LedgerSettings))] = None,
    etcd_password_file: Annotated[str | None, etcd_option("etcd_password_file", panel(LedgerSettings))] = None,
    agent_token_file: Annotated[Path | None, settings_option(SecuritySettings, "agent_token_file")] = None,
    agent_ca: Annotated[Path | None, settings_option(SecuritySettings, "agent_ca")] = None,
    agent_cert: Annotated[Path | None, settings_option(SecuritySettings, "agent_cert")] = None,
    agent_key: Annotated[Path | None, settings_option(SecuritySettings, "agent_key")] = None,
    prometheus_token_file: Annotated[Path | None, settings_option(SecuritySettings, "prometheus_token_file")] = None,
    prometheus_ca: Annotated[Path | None, settings_option(SecuritySettings, "prometheus_ca")] = None,
    prometheus_cert: Annotated[Path | None, settings_option(SecuritySettings, "prometheus_cert")] = None,
    prometheus_key: Annotated[Path | None, settings_option(SecuritySettings, "prometheus_key")] = None,
    keda_token_file: Annotated[Path | None, settings_option(SecuritySettings, "keda_token_file")] = None,
    keda_cert: Annotated[Path | None, settings_option(SecuritySettings, "keda_cert")] = None,
    keda_key: Annotated[Path | None, settings_option(SecuritySettings, "keda_key")] = None,
    keda_client_ca: Annotated[Path | None, settings_option(SecuritySettings, "keda_client_ca")] = None,
    metrics_bind: Annotated[str, settings_option(SecuritySettings, "metrics_bind")] = SecuritySettings.metrics_bind,
) -> None:
    """Run the controller on the wall clock: the simulator's decision code against live signals."""
    # The flags are read through ctx, which also knows which ones were given (they win over --config).
    settings = read_settings(ctx, RUN_GROUPS, run_settings)
    if print_config:
        print_settings(settings.groups)
        return
    _run(settings)


def _run(s: RunSettings) -> None:
    """Check what the settings cannot check alone (files, TLS, tokens, the ledger URL), then run the loop.

    Everything that can be wrong with the arguments is refused before anything starts: no worker,
    no ledger file, no listening port.
    """
    fleet_cfg, classes = _workloads_file(s.policy.workloads)
    workload = _workload(classes, s.policy.workloads, s.policy.workload_class)
    tier = _tier(s)
    if tier is not None and fleet_cfg is not None:
        raise ConfigError(f"--tier {s.actuator.tier!r}: a fleet file gives each workload its own tier "
                          f"(fix: write tier: {s.actuator.tier} under the workloads of {fleet_cfg.source} that sleep)")
    if fleet_cfg is not None and s.loop.mode != "act":
        tiered = [w.target for w in fleet_cfg.workloads if w.tier is not None]
        if tiered:
            raise ConfigError(f"{fleet_cfg.source}: {tiered[0]} has a tier: only act mode puts replicas to sleep "
                              "(fix: --mode act, or drop tier: from the fleet file)")
    actuator, target = _target(s, fleet_cfg)
    if (s.actuator.hand_off or s.actuator.serve_keda) and actuator != "kubernetes":
        raise ConfigError(f"{'--serve-keda' if s.actuator.serve_keda else '--hand-off'} needs --actuator kubernetes "
                          "--deployment NAME: the HPA applies Ebb's number to a Deployment (fix: add them)")
    loc, ledger_auth = _ledger_access(s.ledger)
    plan_election(s, loc, key=(s.loop.run_id or target) if fleet_cfg is not None else target)  # refused now
    src, sec = s.source, s.security
    prom_client = _prometheus_client(src.prometheus_url, sec.prometheus_token_file, sec.prometheus_ca,
                                     sec.prometheus_cert, sec.prometheus_key)
    agent_token = _secret(sec.agent_token_file, "EBB_AGENT_TOKEN", "--agent-token-file")
    agent_tls = _tls(sec.agent_ca, sec.agent_cert, sec.agent_key, "agent")

    def make_source(agents: list[str], selector: str | None) -> Any:
        return _source(src.source, agents, src.prometheus_url, agent_token=agent_token, agent_tls=agent_tls,
                       prometheus_client=prom_client, prometheus_selector=selector,
                       replica_label=src.prometheus_replica_label, engine=src.engine, engines_file=src.engines_file,
                       max_concurrency=src.max_concurrency)

    if fleet_cfg is not None:
        from ebb.cli.run_fleet import plan_fleet
        p, loop = s.policy, s.loop
        fleet = plan_fleet(fleet_cfg, source=src.source, policy=p.policy, slo_ttft_ms=p.slo_ttft_ms,
                           slo_e2e_ms=p.slo_e2e_ms, interval_s=loop.interval_s, max_staleness_s=loop.max_staleness_s,
                           cold_start_s=p.cold_start_s,
                           make_source=lambda w: make_source(list(w.agents), w.prometheus_selector))
        _run_fleet_cmd(fleet, s, run_id=loop.run_id or target, loc=loc, ledger_auth=ledger_auth)
        return
    _run_single(s, make_source(list(src.agent), src.prometheus_selector), workload=workload, actuator=actuator,
                target=target, loc=loc, ledger_auth=ledger_auth, prom_client=prom_client, tier=tier)


def _target(s: RunSettings, fleet_cfg: Any) -> tuple[str, str]:
    """(actuator, target): a fleet file scales Kubernetes Deployments and refuses the flags it replaces."""
    a, p = s.actuator, s.policy
    actuator = a.actuator
    if fleet_cfg is not None:
        _check_fleet_flags(actuator, a.deployment, p.workload_class, p.gates, list(s.source.agent),
                           s.source.prometheus_selector)
        actuator = "kubernetes"
    actuator = actuator or "local"
    if actuator == "kubernetes" and not a.deployment and fleet_cfg is None:
        raise ConfigError("--actuator kubernetes needs --deployment NAME (and --namespace)")
    target = (f"fleet-{p.workloads.stem}" if fleet_cfg is not None and p.workloads is not None
              else f"{a.namespace}/{a.deployment}" if actuator == "kubernetes" else "local/serving")
    return actuator, target


def _ledger_access(led: LedgerSettings) -> tuple[Any, Any]:
    """(ledger location, etcd auth or None), checked: etcd options need etcd (``--elect``'s combinations:
    :func:`~ebb.cli.run_election.plan_election`)."""
    from ebb.ledger.location import check_auth_fits, parse_location

    loc = parse_location(led.ledger)
    auth = etcd_auth(led.etcd_ca, led.etcd_cert, led.etcd_key, led.etcd_user, led.etcd_password_file)
    check_auth_fits(loc, auth)
    return loc, auth


def _run_single(s: RunSettings, src: Any, *, workload: Any, actuator: str, target: str, loc: Any,
                ledger_auth: Any, prom_client: Any, tier: Any = None) -> None:
    """Build the policy (and its gates), then start the actuator, the ledger and telemetry, and loop."""
    from ebb.live.controller import Controller, ControllerSettings
    from ebb.live.policy_spec import build_live_policy, replica_bounds
    from ebb.telemetry.logs import configure_logging

    p, loop = s.policy, s.loop
    gate_specs = _gates(p.gates)
    from ebb.decide.handoff import handed_off_cold_start_s
    handed_off = s.actuator.hand_off or bool(s.actuator.serve_keda)  # capacity comes back one HPA sync later
    pol = build_live_policy(p.policy, slo_ttft_ms=p.slo_ttft_ms, slo_e2e_ms=p.slo_e2e_ms,
                            initial=s.actuator.workers_at_start, interval_s=loop.interval_s, max_staleness_s=loop.max_staleness_s,
                            workload=workload, gates=gate_specs,
                            cold_start_s=handed_off_cold_start_s(p.cold_start_s) if handed_off else p.cold_start_s,
                            tier=tier)
    pol_min, pol_max = replica_bounds(pol)
    probe = None
    # PromQL gates are measured through Prometheus; the built-in one reads L1.
    if gate_specs and s.source.prometheus_url:
        from ebb.live.gate_probe import prometheus_gate_probe
        probe = prometheus_gate_probe(prom_client)
    settings = ControllerSettings(run_id=loop.run_id or f"live-{target.replace('/', '-')}", target=target,
                                  mode=loop.mode, interval_s=loop.interval_s,  # type: ignore[arg-type]
                                  max_staleness_s=loop.max_staleness_s, min_replicas=pol_min, max_replicas=pol_max,
                                  react_interval_s=s.react_s)

    board, scaler = _hand_off(s, target, workload)
    handler = configure_logging(json=_json_logs(loop.log_json), stream=sys.stderr)
    closers: list[Any] = [lambda: logging.getLogger().removeHandler(handler)]
    try:
        act = _actuator(actuator, s, closers, tier, board)
        elector, store, metrics, tracer = _services(closers, s, loc=loc, ledger_auth=ledger_auth,
                                                    election_key=target if s.ledger.elect else None)
        from ebb.live.replica_gauge import ReplicaGauge
        gauge = ReplicaGauge(metrics, target, loop.mode, board)
        watchers: list[Any] = [gauge]
        if loop.mode == "recommend":  # Ebb's own fleet beside the real one, a ledger row a minute (ebb shadow)
            from ebb.live.shadow import shadowed
            act, recorder = shadowed(act, store, settings, pol, elector=elector)
            watchers += [act.follow, recorder]
            gauge.as_run = lambda: act.as_run  # current = the fleet that really runs, not Ebb's own
            closers.append(recorder.close)  # the minute under way, before the ledger closes
        ctl = Controller(pol, src, act, store, settings, tracer=tracer, metrics=metrics, elector=elector,
                         gate_probe=probe, watchers=watchers)
        if scaler is not None:
            if elector is not None:
                scaler.is_leader = elector.is_leader
            _console.print(f"KEDA external scaler: {scaler.start(str(s.actuator.serve_keda))} (metric "
                           f"ebb-desired-replicas for {target})")
            closers.append(scaler.stop)
        closers.append(ctl.close)  # the compensation log it opened beside the ledger
        stop = _stop_on_signals()
        _console.print(f"ebb run: {loop.mode} mode, {s.source.source} → {pol.spec} → {actuator} ({target}), "
                       f"ledger {s.ledger.ledger}")
        ctl.run(stop, max_cycles=loop.cycles)
    finally:
        for close in reversed(closers):
            close()


def _hand_off(s: RunSettings, target: str, workload: Any) -> tuple[Any, Any]:
    """(board, KEDA scaler) in hand-off mode (:mod:`ebb.decide.handoff`), checked before anything starts;
    (None, None) when Ebb writes /scale itself."""
    a, sec = s.actuator, s.security
    if not (a.hand_off or a.serve_keda):
        return None, None
    from ebb.decide.handoff import HandoffBoard
    board = HandoffBoard(stale_after_s=max(30.0, 3 * s.loop.max_staleness_s))
    if not a.serve_keda:
        return board, None
    from ebb.actuate.keda_scaler import KedaScalerServer
    token = _secret(sec.keda_token_file, "EBB_KEDA_TOKEN", "--keda-token-file")
    cls = s.policy.workload_class or (workload.name if workload is not None else None)
    classes = {target: cls} if cls else {}
    scaler = KedaScalerServer(board, classes=classes, token=token,
                              cert_file=str(sec.keda_cert) if sec.keda_cert else None,
                              key_file=str(sec.keda_key) if sec.keda_key else None,
                              client_ca_file=str(sec.keda_client_ca) if sec.keda_client_ca else None)
    return board, scaler


def _tier(s: RunSettings) -> Any:
    """The ``--tier`` (act mode only: recommend mode changes nothing, so nothing sleeps); None without one."""
    if s.actuator.tier is None:
        return None
    if s.loop.mode != "act":
        raise ConfigError(f"--tier {s.actuator.tier!r}: only act mode puts replicas to sleep (fix: --mode act, or "
                          "leave --tier out)")
    from ebb.config.tiers import parse_tier
    return parse_tier(s.actuator.tier)


def _actuator(kind: str, s: RunSettings, closers: list[Any], tier: Any = None, board: Any = None) -> Any:
    """The Kubernetes actuator, the observed local fleet (recommend mode) or started local workers (act);
    with ``tier``, one that sleeps its victims (:class:`~ebb.actuate.base.SleepingActuator`); with
    ``board``, one that hands its numbers to an HPA (:mod:`ebb.decide.handoff`)."""
    a = s.actuator
    if kind == "kubernetes":
        from ebb.actuate.kubernetes import KubernetesActuator
        return KubernetesActuator(a.namespace, str(a.deployment), kubeconfig=a.kubeconfig, in_cluster=a.in_cluster,
                                  tier=tier, handoff=board)
    if s.loop.mode == "recommend":
        # Recommend mode changes nothing, so it starts nothing either: the local fleet is observed.
        from ebb.actuate.observed import ObservedFleet
        return ObservedFleet(a.workers)
    from ebb.actuate.local import LocalActuator
    from ebb.demo.router import Router
    router = Router()
    _console.print(f"router: {router.start()}")
    closers.append(router.stop)
    act = LocalActuator(router, initial=a.workers_at_start, max_batch=a.max_batch, speed=a.speed, tier=tier)
    closers.append(act.close)
    return act


def _workloads_file(path: Path | None) -> tuple[Any, Any]:
    """(fleet, classes) of the ``--workloads`` file, read and parsed once: a fleet file (``workloads:``)
    gives (its fleet, None), a classes file (``classes:``) (None, its classes); no file: (None, None)."""
    if path is None:
        return None, None
    from ebb.config.fleet import is_fleet_document, parse_fleet_document
    from ebb.config.workloads import parse_classes_document
    from ebb.config.yamlio import load_mapping, read_config_text
    doc = load_mapping(read_config_text(path, "workloads file"), str(path),
                       "write classes: [...] (L2 classes) or workloads: [...] (a fleet)")
    if is_fleet_document(doc):
        return parse_fleet_document(doc, str(path)), None
    return None, parse_classes_document(doc, str(path))


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


def _run_fleet_cmd(fleet: Any, s: RunSettings, *, run_id: str, loc: Any, ledger_auth: Any) -> None:
    """Start the ledger, election, metrics and tracing as a single-workload ``ebb run`` does, then the fleet."""
    from ebb.cli.run_fleet import run_fleet
    from ebb.telemetry.logs import configure_logging

    loop = s.loop
    handler = configure_logging(json=_json_logs(loop.log_json), stream=sys.stderr)
    closers: list[Any] = [lambda: logging.getLogger().removeHandler(handler)]
    try:
        elector, store, metrics, tracer = _services(closers, s, loc=loc, ledger_auth=ledger_auth,
                                                    election_key=run_id if s.ledger.elect else None)  # one lease
        stop = _stop_on_signals()
        run_fleet(fleet, mode=loop.mode, run_id=run_id, interval_s=loop.interval_s,
                  max_staleness_s=loop.max_staleness_s, react_s=s.react_s, kubeconfig=s.actuator.kubeconfig,
                  in_cluster=s.actuator.in_cluster, store=store, elector=elector, tracer=tracer, metrics=metrics,
                  stop=stop, cycles=loop.cycles, closers=closers, say=lambda text: _console.print(text, soft_wrap=True))
    finally:
        for close in reversed(closers):
            close()


def _services(closers: list[Any], s: RunSettings, *, loc: Any, ledger_auth: Any,
              election_key: str | None) -> tuple[Any, Any, Any, Any]:
    """(elector or None, ledger, metrics, tracer), started in that order; each one's close joins ``closers``."""
    from ebb.ledger import open_ledger
    from ebb.telemetry.metrics import EbbMetrics
    from ebb.telemetry.tracing import CycleTracer, configure_otlp, local_provider

    plan = None if election_key is None else plan_election(s, loc, key=election_key)
    elector = start_elector(plan, s, loc=loc, ledger_auth=ledger_auth, closers=closers)
    # SQLite: one controller per file, unless the replicas of a Lease election share it (fenced writes)
    store = open_ledger(s.ledger.ledger, writer=plan is None or not plan.shares_sqlite, etcd_auth=ledger_auth)
    closers.append(store.close)
    metrics = EbbMetrics()
    if s.loop.metrics_port is not None:
        _console.print(f"metrics: {metrics.serve(s.loop.metrics_port, bind=s.security.metrics_bind)}")
        closers.append(metrics.stop)
    tracer = CycleTracer(configure_otlp(s.loop.otlp) if s.loop.otlp else local_provider())
    return elector, store, metrics, tracer


def _stop_on_signals() -> threading.Event:
    """An event SIGINT and SIGTERM set (the loop stops at the end of its cycle)."""
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    return stop


def _workload(classes: Any, path: Path | None, name: str | None) -> Any:
    """The named class (default: the first) of a classes file's ``classes``; None without one (no file, or
    a fleet file, whose workloads name their own)."""
    if classes is None:
        return None
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
