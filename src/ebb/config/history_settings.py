"""``ebb simulate --from-prometheus``'s settings: which fleet's history to read, over which range, and how.

The ``history`` section of ``ebb simulate --config FILE`` (:mod:`ebb.config.simulate_settings`). The
group checks its own values when built (one-line ConfigError naming the flag and the fix): the URL's
scheme, the range's shape (``--since`` or ``--start``/``--end``, times as ISO-8601 or Unix seconds,
durations as ``90m``, ``24h``, ``7d``, ``2w``), that nothing else is given without
``--from-prometheus``, and a TLS or token file's presence. What needs the network (the server,
the series) is checked by ``ebb simulate`` before the simulation starts.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import ClassVar, Final

from ebb.errors import ConfigError

__all__ = ["DEFAULT_SINCE", "HistorySettings", "parse_duration_s", "parse_time_s"]

DEFAULT_SINCE: Final = "7d"
"""The range read when neither ``--since`` nor ``--start`` is given: the last week."""
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 604_800}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$")


def parse_duration_s(text: str, flag: str) -> float:
    """``7d`` → 604800.0 (units s, m, h, d, w; a bare number is seconds); ConfigError otherwise."""
    m = _DURATION.match(text)
    if m is None or not 0 < float(m.group(1)) < 1e9:
        raise ConfigError(f"{flag} {text!r}: not a duration (fix: a number and a unit s, m, h, d or w, e.g. "
                          f"{flag} 7d or {flag} 36h)")
    return float(m.group(1)) * _UNITS[m.group(2) or "s"]


def parse_time_s(text: str, flag: str) -> float:
    """ISO-8601 (``2024-03-04T00:00:00Z``; no zone = UTC) or Unix seconds → Unix seconds; ConfigError otherwise."""
    t = text.strip()
    try:
        value = float(t)
    except ValueError:
        try:
            stamp = datetime.fromisoformat(t.replace("Z", "+00:00") if t.endswith("Z") else t)
        except ValueError:
            raise ConfigError(f"{flag} {text[:60]!r}: not a time (fix: ISO-8601 such as 2024-03-04T00:00:00Z, or "
                              "Unix seconds)") from None
        if stamp.tzinfo is None:
            stamp = stamp.replace(tzinfo=timezone.utc)
        value = stamp.timestamp()
    if not (math.isfinite(value) and 0 <= value < 1e11):
        raise ConfigError(f"{flag} {text[:60]!r}: not a time after 1970 (fix: ISO-8601 or Unix seconds)")
    return value


@dataclass(frozen=True)
class HistorySettings:
    """Read the trace from a fleet's Prometheus history instead of a file (docs/from-prometheus.md)."""

    SECTION: ClassVar[str] = "history"

    from_prometheus: str | None = None
    """Rebuild the trace from this Prometheus' history of the fleet (http(s)://HOST:PORT), instead of --trace

    The engines' own counters and histograms over the range give the arrivals, token sizes and
    latencies; the Deployment's replica curve gives the scorecard's "as run" row. Unset: a trace file
    or a bundled trace."""
    engine: str = "vllm"
    """The fleet's engine: vllm or sglang

    Which series are read (docs/from-prometheus.md lists them). Default vllm."""
    selector: str | None = None
    """Label matchers that pick the fleet's engine series, e.g. namespace="serving",pod=~"vllm-.*" (required with --from-prometheus)

    Comma-separated ``name="v"``, ``!=``, ``=~``, ``!~`` matchers (as ``ebb run --prometheus-selector``);
    one Prometheus usually scrapes several fleets, so Ebb does not guess."""
    deployment: str | None = None
    """NAMESPACE/NAME of the Deployment whose replica count (kube-state-metrics) is the as-run fleet

    Read from ``kube_deployment_status_replicas``. Unset: the engine targets up (``up`` under
    --selector)."""
    since: str | None = None
    """Read this last stretch of history: 90m, 24h, 7d, 2w (default 7d; not with --start)

    Ends at --end, or now. A duration with a unit s, m, h, d or w; at most 31 days."""
    start: str | None = None
    """Start of the range: ISO-8601 (2024-03-04T00:00:00Z) or Unix seconds (not with --since)

    A time without a zone is UTC. Unset: --end minus --since."""
    end: str | None = None
    """End of the range: ISO-8601 or Unix seconds (default: now)

    A time without a zone is UTC."""
    step_s: float | None = None
    """Resolution of the rebuilt trace (s): at most the scrape interval (default: the interval detected from the series)

    Counters are read once per step; arrivals inside a step are spread uniformly. Seconds, > 0."""
    save_trace: Path | None = None
    """Write the rebuilt trace here (with its provenance and as-run record) to replay it without the server: ebb simulate --trace FILE

    A file path, checked writable before the read; ``.gz`` compresses it. Unset: not written."""
    prometheus_token_file: Path | None = None
    """File holding Prometheus' bearer token (default: $EBB_PROMETHEUS_TOKEN)

    One token, no spaces, as ``ebb run --prometheus-token-file``. Unset: ``$EBB_PROMETHEUS_TOKEN``, else
    no token."""
    prometheus_ca: Path | None = None
    """CA bundle that signs Prometheus' TLS certificate

    A PEM file; unset: the system's trust store."""
    prometheus_cert: Path | None = None
    """Client certificate for a Prometheus with mTLS

    A PEM file, with ``prometheus_key``; unset by default."""
    prometheus_key: Path | None = None
    """Key of --prometheus-cert

    A PEM file, with ``prometheus_cert``; unset by default."""

    def __post_init__(self) -> None:
        given = [f"--{k.replace('_', '-')}" for k in ("selector", "deployment", "since", "start", "end", "step_s",
                                                      "save_trace", "prometheus_token_file", "prometheus_ca",
                                                      "prometheus_cert", "prometheus_key")
                 if getattr(self, k) is not None]
        if self.from_prometheus is None:
            if given:
                raise ConfigError(f"{', '.join(given)} read a Prometheus history and need --from-prometheus URL "
                                  "(fix: add --from-prometheus http://prometheus:9090, or drop them)")
            return
        url = self.from_prometheus.strip()
        if not url.startswith(("http://", "https://")):
            raise ConfigError(f"--from-prometheus {url[:80]!r}: expected an http:// or https:// URL (fix: e.g. "
                              "--from-prometheus http://prometheus.monitoring:9090)")
        if not self.selector:
            raise ConfigError("--from-prometheus needs --selector: one Prometheus scrapes many fleets (fix: e.g. "
                              "--selector 'namespace=\"serving\",pod=~\"vllm-.*\"')")
        if self.since is not None and self.start is not None:
            raise ConfigError("--since and --start both set where the range starts (fix: give one of them)")
        if self.since is not None:
            parse_duration_s(self.since, "--since")
        for flag, value in (("--start", self.start), ("--end", self.end)):
            if value is not None:
                parse_time_s(value, flag)
        if self.step_s is not None and not (math.isfinite(self.step_s) and self.step_s > 0):
            raise ConfigError(f"--step-s {self.step_s!r}: must be > 0 seconds (fix: e.g. --step-s 15, the scrape "
                              "interval)")
        if (self.prometheus_cert is None) != (self.prometheus_key is None):
            raise ConfigError("--prometheus-cert and --prometheus-key go together (fix: give both, or neither)")
        for flag, path in (("--prometheus-token-file", self.prometheus_token_file),
                           ("--prometheus-ca", self.prometheus_ca), ("--prometheus-cert", self.prometheus_cert),
                           ("--prometheus-key", self.prometheus_key)):
            if path is not None and not path.is_file():
                raise ConfigError(f"{flag} {path}: not a readable file (fix: check the path)")

    def range_s(self, now_s: float) -> tuple[float, float]:
        """(start, end) in Unix seconds: ``--start``/``--end`` as given, ``--since`` back from the end,
        the end ``now_s`` when not given; checked by the reader for length."""
        end = parse_time_s(self.end, "--end") if self.end is not None else now_s
        if self.start is not None:
            start = parse_time_s(self.start, "--start")
        else:
            start = end - parse_duration_s(self.since or DEFAULT_SINCE, "--since")
        if not start < end:
            raise ConfigError(f"the range ends before it starts ({self.start or self.since} .. {self.end or 'now'}) "
                              "(fix: --end after --start)")
        return start, end
