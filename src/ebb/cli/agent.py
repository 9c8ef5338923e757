"""``ebb agent``: run the node agent until SIGINT/SIGTERM (see :mod:`ebb.agent.server`).

``ebb agent --endpoint http://127.0.0.1:8001 --endpoint http://127.0.0.1:8000 --port 9100`` polls
the listed workers/router; ``--endpoints-from http://127.0.0.1:8000`` polls that router and the
workers its ``GET /workers`` lists (re-read every second). The agent's URL is printed on start.

NVML: ``--nvml`` requires it (exit 2 with the install command when ``nvidia-ml-py`` is missing or no
driver answers), ``--no-nvml`` skips it, and by default it is used when available. GPM metrics are
sampled where the GPU supports them (Hopper and later). ``--host-metrics`` adds psutil CPU, memory,
network and disk rates.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType

import typer

from ebb.agent.server import Agent
from ebb.cli.app import app
from ebb.errors import ConfigError, MissingExtraError, SourceUnavailable
from ebb.sources.base import MetricSource

__all__ = ["agent_command", "open_nvml"]


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


@app.command("agent")
def agent_command(
    endpoint: list[str] = typer.Option([], "--endpoint", help="A worker or router URL to poll (repeatable)."),
    endpoints_from: str | None = typer.Option(
        None, "--endpoints-from", help="Router URL: poll it and the workers its GET /workers lists."),
    port: int = typer.Option(0, "--port", help="Port to serve on (0: any free port)."),
    bind: str = typer.Option("127.0.0.1", "--bind", help="Address to listen on (0.0.0.0 for all)."),
    nvml: bool | None = typer.Option(None, "--nvml/--no-nvml", help="Sample the GPUs through NVML "
                                     "(default: when available)."),
    host_metrics: bool = typer.Option(False, "--host-metrics", help="Sample host CPU/memory/net/disk."),
    name: str | None = typer.Option(None, "--name", help="Agent name (default: agent-HOSTNAME)."),
    bucket_ms: int = typer.Option(100, "--bucket-ms", help="Bucket length in milliseconds."),
) -> None:
    """Run the node agent: 100 ms sketch buckets at /v1/buckets, Prometheus text at /metrics."""
    if not endpoint and endpoints_from is None:
        raise ConfigError("ebb agent needs --endpoint URL (repeatable) or --endpoints-from ROUTER_URL")
    if bucket_ms < 1 or not 0 <= port < 65536:
        raise ConfigError(f"--bucket-ms must be >= 1 and --port in [0, 65535], got {bucket_ms}, {port}")
    gpu = open_nvml(nvml)
    host = None
    if host_metrics:
        from ebb.sources.host import HostSampler

        host = HostSampler(per_core=False)
    stop = threading.Event()

    def _on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {s: signal.signal(s, _on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    agent = Agent(endpoint, port=port, bucket_ms=bucket_ms, nvml=gpu, host=host, name=name,
                  endpoints_from=endpoints_from, bind=bind)
    try:
        url = agent.start()
        typer.echo(url)
        while not stop.wait(0.5):
            pass
    finally:
        agent.stop()
        for s, h in previous.items():
            signal.signal(s, h)
        if gpu is not None:
            close = getattr(gpu, "close", None)
            if close is not None:
                close()
