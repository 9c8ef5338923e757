"""``ebb agent``: run the node agent until SIGINT/SIGTERM (see :mod:`ebb.agent.server`).

``ebb agent --endpoint http://127.0.0.1:8001 --endpoint http://127.0.0.1:8000 --port 9100`` polls
the listed workers/router; ``--endpoints-from http://127.0.0.1:8000`` polls that router and the
workers its ``GET /workers`` lists (re-read every second, at most ``--max-endpoints`` = 256). The
agent's URL is printed on start. Every URL must be http(s) with a host, a non-empty non-zero port
if one is written, and no user info, query or fragment: anything else exits 2 with one line.

Serving: ``--bind`` (default 127.0.0.1, a developer run; a DaemonSet passes 0.0.0.0 so probes and
scrapes on the pod IP reach it) and ``--port``. With a token — read from ``--token-file PATH`` (a
mounted Secret; surrounding whitespace stripped) or else the ``EBB_AGENT_TOKEN`` environment
variable — ``/v1/buckets`` answers 401 unless the request carries ``Authorization: Bearer <token>``;
``--protect-metrics`` puts ``/metrics`` behind it too; ``/healthz`` stays open for probes. Without a
token on an address other than loopback a warning says the data is open to anyone who can connect.
``--tls-cert``/``--tls-key`` serve https; ``--tls-client-ca`` also requires client certificates
signed by that CA (mutual TLS). ``--max-connections`` caps open connections (256).

Engines: ``--engine vllm --endpoint http://10.0.0.7:8000/metrics`` polls inference servers' own
metrics pages (profiles: :mod:`ebb.sources.engines.profiles`; ``--engines-file F`` adds custom
ones) — with ``--engine`` every ``--endpoint`` is such a full metrics URL, and the workers of
``--endpoints-from ROUTER`` are polled at ``{url}{metrics_path}`` while the router itself stays an
Ebb ``/stats`` endpoint. ``--max-concurrency N`` gives the slots per pod when the engine does not
report them (llama.cpp: its ``-np``); an engine that reports neither that nor KV usage exits 2 without
it. ``--model NAME`` reads one model's series from each page: a pod serving several models (several
``model_name`` values) is several workloads, so without it such a page is refused (the endpoint listed
missing, its failure logged once) rather than summed. ``--poll-ms`` (100-1000; the bucket length) sets the poll period. On Kubernetes, ``--pod-selector
app=vllm --node-name $NODE_NAME [--pod-port 8000] [--pod-namespace NS]`` discovers the Running, Ready
engine pods on this node every second (:mod:`ebb.agent.kube_pods`; ``pip install 'ebb[k8s]'``);
``--pod-service vllm`` instead reads them from that Service's EndpointSlices (RBAC ``endpointslices
list``, no access to pods or their env: what ``deploy/examples/vllm`` uses). ``--pod-port`` is a
number or a port name (resolved per pod, so hostNetwork pods sharing the node's IP on different
ports stay apart).
``--dcgm URL`` reads the GPUs from a DCGM exporter instead of NVML.

NVML: ``--nvml`` requires it (exit 2 with the install command when ``nvidia-ml-py`` is missing or no
driver answers), ``--no-nvml`` skips it, and by default it is used when available. GPM metrics are
sampled where the GPU supports them (Hopper and later). ``--host-metrics`` adds psutil CPU, memory,
network and disk rates.
"""

from __future__ import annotations

import ipaddress
import os
import signal
import threading
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

import typer

from ebb.agent.discovery import MAX_ENDPOINTS
from ebb.agent.server import Agent
from ebb.agent.serving import ServerLimits, server_tls_context
from ebb.cli.app import app
from ebb.errors import ConfigError, MissingExtraError, SourceUnavailable
from ebb.sources.base import MetricSource

if TYPE_CHECKING:
    from ebb.agent.kube_pods import EndpointSliceLister, PodLister

__all__ = ["TOKEN_ENV", "agent_command", "open_nvml", "read_token"]

TOKEN_ENV = "EBB_AGENT_TOKEN"
"""Environment variable holding the agent's bearer token when no ``--token-file`` is given."""
_MAX_TOKEN_FILE_BYTES = 64 * 1024


def open_nvml(required: bool | None) -> MetricSource | None:
    """An NVML sampler (GPM where supported), None when not required and unavailable."""
    if required is False:
        return None
    from ebb.sources.nvml import NvmlSampler, PynvmlApi

    try:
        return NvmlSampler(PynvmlApi())
    except (MissingExtraError, SourceUnavailable) as exc:
        if required:
            raise
        typer.echo(f"note: NVML not used ({exc})", err=True)
        return None


def read_token(token_file: Path | None, environ: dict[str, str] | None = None) -> str | None:
    """The bearer token: the file's content (stripped) when given, else ``$EBB_AGENT_TOKEN``, else None.

    ConfigError (one line, with the fix) for a file that cannot be read, is larger than 64 KiB or
    holds no token; an empty ``EBB_AGENT_TOKEN`` counts as unset."""
    if token_file is not None:
        try:
            with token_file.open("rb") as fh:
                raw = fh.read(_MAX_TOKEN_FILE_BYTES + 1)
        except OSError as exc:
            raise ConfigError(f"cannot read --token-file {str(token_file)!r}: {exc.strerror or exc} "
                              "(fix: mount the Secret there, or point --token-file at a readable file)") from exc
        if len(raw) > _MAX_TOKEN_FILE_BYTES:
            raise ConfigError(f"--token-file {str(token_file)!r} is larger than 64 KiB "
                              "(fix: the file must hold the token alone)")
        token = raw.decode("utf-8", "replace").strip()
        if not token:
            raise ConfigError(f"--token-file {str(token_file)!r} is empty (fix: write the token into it)")
        return token
    value = (os.environ if environ is None else environ).get(TOKEN_ENV, "").strip()
    return value or None


def _loopback(bind: str) -> bool:
    if bind == "localhost":
        return True
    try:
        return ipaddress.ip_address(bind).is_loopback
    except ValueError:
        return False


@app.command("agent")
def agent_command(
    endpoint: list[str] = typer.Option([], "--endpoint", help="A worker or router URL to poll (repeatable); with "
                                       "--engine, an engine metrics URL such as http://POD:8000/metrics."),
    endpoints_from: str | None = typer.Option(
        None, "--endpoints-from", help="Router URL: poll it and the workers its GET /workers lists."),
    port: int = typer.Option(0, "--port", help="Port to serve on (0: any free port)."),
    bind: str = typer.Option("127.0.0.1", "--bind", help="Address to listen on (default 127.0.0.1: this "
                             "host only; 0.0.0.0 for all IPv4 addresses, as a DaemonSet needs)."),
    token_file: Path | None = typer.Option(None, "--token-file", help="File holding the bearer token that "
                                           f"readers must send (default: ${TOKEN_ENV}; none: no auth)."),
    protect_metrics: bool = typer.Option(False, "--protect-metrics", help="Require the token on /metrics too."),
    tls_cert: Path | None = typer.Option(None, "--tls-cert", help="PEM certificate: serve https."),
    tls_key: Path | None = typer.Option(None, "--tls-key", help="PEM private key of --tls-cert."),
    tls_client_ca: Path | None = typer.Option(None, "--tls-client-ca", help="PEM CA bundle: require client "
                                              "certificates it signed (mutual TLS)."),
    max_endpoints: int = typer.Option(MAX_ENDPOINTS, "--max-endpoints", help="Endpoints polled at most."),
    max_connections: int = typer.Option(ServerLimits.max_connections, "--max-connections",
                                        help="Open connections served at most."),
    nvml: bool | None = typer.Option(None, "--nvml/--no-nvml", help="Sample the GPUs through NVML "
                                     "(default: when available)."),
    host_metrics: bool = typer.Option(False, "--host-metrics", help="Sample host CPU/memory/net/disk."),
    name: str | None = typer.Option(None, "--name", help="Agent name (default: agent-HOSTNAME)."),
    bucket_ms: int = typer.Option(100, "--bucket-ms", help="Bucket length in milliseconds."),
    engine: str | None = typer.Option(None, "--engine", help="Engine profile (vllm, sglang, tgi, llamacpp, triton, "
                                      "or one of --engines-file): --endpoint URLs are its metrics pages."),
    engines_file: Path | None = typer.Option(None, "--engines-file", help="YAML file of custom engine profiles."),
    max_concurrency: int | None = typer.Option(None, "--max-concurrency", help="Concurrent requests per engine pod "
                                               "when the engine does not report it."),
    poll_ms: int | None = typer.Option(None, "--poll-ms", help="Poll period in ms, 100-1000 (sets --bucket-ms)."),
    pod_selector: str | None = typer.Option(None, "--pod-selector", help="Kubernetes label selector of the engine "
                                            "pods on this node, e.g. app=vllm."),
    node_name: str | None = typer.Option(None, "--node-name", envvar="NODE_NAME", help="This node's name "
                                         "(default: $NODE_NAME)."),
    pod_service: str | None = typer.Option(None, "--pod-service", help="Discover the engine pods on this node "
                                           "from this Service's EndpointSlices (instead of --pod-selector)."),
    pod_port: str | None = typer.Option(None, "--pod-port", help="Engine port on the pods: a number or a port "
                                        "name (default: the engine's usual port)."),
    pod_namespace: str = typer.Option("default", "--pod-namespace", envvar="POD_NAMESPACE",
                                      help="Namespace of the engine pods."),
    dcgm: str | None = typer.Option(None, "--dcgm", help="DCGM exporter URL to read the GPUs from (instead of NVML)."),
    model: str | None = typer.Option(None, "--model", help="With --engine: read this model's series alone from "
                                     "each page (its model_name); a page serving several models needs it."),
    parse_budget_ms: float | None = typer.Option(None, "--parse-budget-ms", help="CPU time one engine page may take "
                                                 "to parse before its pod rests (default: a bucket, at least 100 ms; "
                                                 "a 52 KB vLLM page takes ~4 ms); past 4 budgets (at least 1 s) of "
                                                 "wall time its pod counts as missing for that bucket."),
) -> None:
    """Run the node agent: 100 ms sketch buckets at /v1/buckets, Prometheus text at /metrics."""
    if not endpoint and endpoints_from is None and pod_selector is None and pod_service is None:
        raise ConfigError("ebb agent needs --endpoint URL (repeatable), --endpoints-from ROUTER_URL, "
                          "--pod-service NAME or --pod-selector K=V with --engine")
    if pod_selector is not None and pod_service is not None:
        raise ConfigError("--pod-selector and --pod-service both discover engine pods: give one")
    if poll_ms is not None:
        if not 100 <= poll_ms <= 1000:
            raise ConfigError(f"--poll-ms must be in [100, 1000], got {poll_ms}")
        if bucket_ms not in (100, poll_ms):
            raise ConfigError(f"--poll-ms {poll_ms} and --bucket-ms {bucket_ms} disagree (fix: give one of them)")
        bucket_ms = poll_ms
    profile = None
    if engine is not None:
        from ebb.sources.engines.profiles import engine_profile

        profile = engine_profile(engine, engines_file)
    elif (pod_selector is not None or pod_service is not None or max_concurrency is not None
          or engines_file is not None or model is not None):
        raise ConfigError("--pod-selector, --pod-service, --max-concurrency, --engines-file and --model need "
                          "--engine NAME")
    if bucket_ms < 1 or not 0 <= port < 65536:
        raise ConfigError(f"--bucket-ms must be >= 1 and --port in [0, 65535], got {bucket_ms}, {port}")
    if max_endpoints < 1 or max_connections < 1:
        raise ConfigError(f"--max-endpoints and --max-connections must be >= 1, got {max_endpoints}, "
                          f"{max_connections}")
    if (tls_cert is None) != (tls_key is None) or (tls_client_ca is not None and tls_cert is None):
        raise ConfigError("TLS needs both --tls-cert and --tls-key (and --tls-client-ca only with them)")
    token = read_token(token_file)
    tls = (server_tls_context(str(tls_cert), str(tls_key), str(tls_client_ca) if tls_client_ca else None)
           if tls_cert is not None and tls_key is not None else None)
    limits = ServerLimits(max_connections=max_connections,
                          max_connections_per_peer=min(ServerLimits.max_connections_per_peer, max_connections))
    # built before NVML is opened, so a bad URL or token exits 2 without touching the GPUs
    pods: PodLister | EndpointSliceLister | None = None
    if (pod_selector is not None or pod_service is not None) and profile is not None:
        from ebb.agent.kube_pods import EndpointSliceLister, PodLister, parse_port_flag

        where = parse_port_flag(pod_port) if pod_port is not None else profile.default_port
        pods = (EndpointSliceLister(pod_service, node_name or "", where, namespace=pod_namespace,
                                    metrics_path=profile.metrics_path) if pod_service is not None
                else PodLister(pod_selector or "", node_name or "", where, namespace=pod_namespace,
                               metrics_path=profile.metrics_path))
    agent = Agent([] if profile else endpoint, port=port, bucket_ms=bucket_ms, name=name,
                  endpoints_from=endpoints_from, bind=bind, token=token, protect_metrics=protect_metrics,
                  ssl_context=tls, limits=limits, max_endpoints=max_endpoints, engine=profile,
                  engine_endpoints=endpoint if profile else (), max_concurrency=max_concurrency, engine_pods=pods,
                  parse_budget_s=None if parse_budget_ms is None else parse_budget_ms / 1000, engine_model=model)
    if token is None and not _loopback(bind):
        typer.echo(f"warning: serving /v1/buckets on {bind} without a token: anyone who can connect reads the "
                   f"fleet's data (fix: --token-file PATH or ${TOKEN_ENV})", err=True)
    if dcgm is not None:
        from ebb.sources.engines.dcgm import DcgmSource

        gpu: MetricSource | None = DcgmSource(dcgm)
    else:
        gpu = open_nvml(nvml)
    host = None
    if host_metrics:
        from ebb.sources.host import HostSampler

        host = HostSampler(per_core=False)
    agent.attach_samplers(nvml=gpu, host=host)
    stop = threading.Event()

    def _on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {s: signal.signal(s, _on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        url = agent.start()
        typer.echo(url)
        while not stop.wait(0.5):
            pass
    finally:
        agent.stop()
        for s, h in previous.items():
            signal.signal(s, h)
        for owned in (gpu, pods):
            close = getattr(owned, "close", None)
            if close is not None:
                close()
