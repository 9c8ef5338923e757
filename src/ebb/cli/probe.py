"""``ebb probe``: what Ebb reads from one inference server's metrics — the first command to run.

``ebb probe --engine vllm http://10.0.0.7:8000/metrics`` GETs the page twice, ``--interval-s``
(1 s) apart; ``ebb probe --engine llamacpp scrape.txt`` reads one saved page; ``ebb probe --engine
sglang before.txt after.txt`` reads two, taken ``--interval-s`` apart. It prints, for the pod:
running and waiting requests, the max concurrency (the engine's metric, else ``--max-concurrency``,
else "unknown: give --max-concurrency"), KV-cache usage, the slot share the agent would report,
the busy share over the interval (two scrapes), and per latency histogram (TTFT, inter-token,
end-to-end, queue) the observations and the P99 — over the interval with two scrapes, since the
engine started with one — as the **upper bound** of the bucket holding it (never understated;
"> X ms" when it lies in the +Inf bucket); then which metric each value came from, what is
missing (with the profile's hint) and what the parser dropped. ``--json`` prints the same as one
JSON object (numbers or null; no NaN or Infinity). What is derived from the scrapes is
:func:`ebb.agent.probe.probe_report`'s; this module fetches or reads them, calls it and prints.

Errors are one line and exit 2 (no traceback): a URL answering 404 or 501 (llama-server without
``--metrics`` answers 501 "This server does not support metrics endpoint") names the fix — for
llama.cpp "start llama-server with --metrics"; a page without the running/waiting gauges names the
metric, the engine and the hint; an unreachable URL or unreadable file says which. A GET is one
bounded request (:func:`ebb.sources.http_get.get`: 5 s, 16 MiB at most).
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

import typer

from ebb.agent.engine_poll import engine_name
from ebb.agent.probe import PROBE_SIGNALS, probe_report
from ebb.cli.app import app
from ebb.cli.output_option import OutputOpt, wants_json
from ebb.errors import ConfigError, InputError
from ebb.sources.engines.profiles import EngineProfile, engine_profile
from ebb.sources.engines.reading import EngineReading, read_engine_text
from ebb.sources.http_get import HttpLimits, get

__all__ = ["probe_command"]

_TITLES = {"ttft": "time to first token", "itl": "inter-token latency", "e2e": "end-to-end latency",
           "queue": "queue time"}
_LIMITS = HttpLimits(deadline_s=5.0)


def _is_url(text: str) -> bool:
    return text.startswith(("http://", "https://"))


def _fetch(url: str, profile: EngineProfile) -> bytes:
    reply = get(url, _LIMITS)
    if reply.status == 200:
        return reply.body
    said = reply.body[:120].decode("utf-8", "replace").strip()
    fix = profile.enable_hint or f"check that the URL is the {profile.title} metrics page"
    if reply.status in (404, 501):
        raise InputError(f"answered HTTP {reply.status} {reply.reason}{': ' + repr(said) if said else ''}: "
                         f"{profile.title} serves no metrics there", path=url, fix=fix)
    raise InputError(f"answered HTTP {reply.status} {reply.reason}", path=url, fix=fix)


def _read_file(path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read the scrape file: {exc.strerror or exc}", path=path,
                         fix="give a saved /metrics page or an http(s) URL") from exc


def _fmt(x: float | None, pct: bool = False) -> str:
    if x is None:
        return "-"
    return f"{100 * x:.1f} %" if pct else f"{x:g}"


def _text(r: dict[str, Any]) -> str:
    rf = r["read_from"]
    lines = [f"pod {r['pod']} ({r['title']}, engine {r['engine']}, {r['source']})"]
    if r["scrapes"] == 2:
        lines.append(f"  two scrapes {r['interval_s']:g} s apart")
    else:
        lines.append("  one scrape (give a second one, or a URL, for the busy share and per-interval latencies)")

    def row(label: str, value: str, signal: str | None = None, src: str = "") -> None:
        src = src or (rf.get(signal, "") if signal else "")
        lines.append(f"  {label:<18} {value:<26} {src}".rstrip())

    row("running", _fmt(r["running"]), "running")
    row("waiting", _fmt(r["waiting"]), "waiting")
    mc = r["max_concurrency"]
    row("max concurrency", "unknown: give --max-concurrency" if mc is None else str(mc),
        "max_concurrency" if r["max_concurrency_from"] == "metric" else None,
        "from --max-concurrency" if r["max_concurrency_from"] == "--max-concurrency" else "")
    row("KV usage", "missing" if r["kv_usage_ratio"] is None else _fmt(r["kv_usage_ratio"], pct=True), "kv_usage")
    row("slot share", "unknown" if r["slot_ratio"] is None else _fmt(r["slot_ratio"], pct=True))
    busy = r["busy_ratio"]
    row("busy share", ("needs two scrapes" if r["scrapes"] == 1 else "unknown (no busy counter, or reset)")
        if busy is None else _fmt(busy, pct=True), "busy_seconds")
    for s in PROBE_SIGNALS:
        lat = r["latency"].get(s)
        if lat is None:
            row(s, "missing" if s in r["missing"] else "-", s, "" if s in r["missing"] or s not in r["no_histogram"]
                else f"({r['title']} exports no such histogram)")
            continue
        p99 = ("-" if lat["count"] == 0 else f"> {lat['p99_above_ms']:g} ms" if lat["p99_above_ms"] is not None
               else f"<= {lat['p99_ms']:g} ms" if lat["p99_ms"] is not None else "-")
        row(s, f"n={lat['count']:g} p99 {p99}", s)
        lines[-1] += f" ({_TITLES[s]}, {lat['window']})"
    if r["missing"]:
        lines.append(f"  missing: {', '.join(r['missing'])}")
    if r["notes"] or r["hint"]:
        lines.append(f"  note: {r['notes'] or r['hint']}")
    if r["resets"]:
        lines.append(f"  counters reset between the scrapes: {', '.join(r['resets'])} (left out)")
    for d in r["dropped"][:20]:
        lines.append(f"  dropped: {d}")
    if len(r["dropped"]) > 20:
        lines.append(f"  dropped: ... and {len(r['dropped']) - 20} more")
    return "\n".join(lines)


@app.command("probe")
def probe_command(
    sources: list[str] = typer.Argument(..., help="URL of a metrics page, or one or two saved scrape files."),
    engine: str = typer.Option(..., "--engine", help="Engine profile: vllm, sglang, tgi, llamacpp, triton, or one "
                               "of --engines-file."),
    interval_s: float = typer.Option(1.0, "--interval-s", help="Seconds between the two GETs of a URL, or between "
                                     "two scrape files."),
    as_json: bool = typer.Option(False, "--json", help="Same as -o json (one JSON object)."),
    output: OutputOpt = "table",
    engines_file: Path | None = typer.Option(None, "--engines-file", help="YAML file of custom engine profiles."),
    max_concurrency: int | None = typer.Option(None, "--max-concurrency", help="Concurrent requests per pod, when "
                                               "the engine does not report it."),
) -> None:
    """Read one or two scrapes of an inference server and print what Ebb derives from them."""
    as_json = wants_json(output, as_json)
    if not 1 <= len(sources) <= 2 or (len(sources) == 2 and any(map(_is_url, sources))):
        raise ConfigError("ebb probe takes one URL, one scrape file, or two scrape files "
                          f"(got {len(sources)} argument(s))")
    if not (math.isfinite(interval_s) and 0.0 < interval_s <= 3600.0):
        raise ConfigError(f"--interval-s must be in (0, 3600], got {interval_s}")
    if max_concurrency is not None and max_concurrency < 1:
        raise ConfigError(f"--max-concurrency must be >= 1, got {max_concurrency}")
    profile = engine_profile(engine, engines_file)
    first = sources[0]
    prev: EngineReading | None = None
    if _is_url(first):
        prev = read_engine_text(_fetch(first, profile), profile, source=first)
        t0 = time.monotonic()
        time.sleep(interval_s)
        raw = _fetch(first, profile)
        dt = time.monotonic() - t0
        cur = read_engine_text(raw, profile, source=first)
        pod = engine_name(first)
    else:
        dt = interval_s
        if len(sources) == 2:
            prev = read_engine_text(_read_file(first), profile, source=first)
        last = sources[-1]
        cur = read_engine_text(_read_file(last), profile, source=last)
        pod = Path(last).name
    report = probe_report(profile, cur, prev, dt, source=" -> ".join(sources) if len(sources) == 2 else first,
                          pod=pod, max_concurrency=max_concurrency)
    typer.echo(json.dumps(report, sort_keys=True, allow_nan=False) if as_json else _text(report))
