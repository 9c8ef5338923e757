"""``ebb probe``: what Ebb reads from one inference server's metrics — the first command to run.

``ebb probe http://10.0.0.7:8000/metrics`` GETs the page twice, ``--interval-s`` (1 s) apart;
``ebb probe scrape.txt`` reads one saved page; ``ebb probe before.txt after.txt`` reads two, taken
``--interval-s`` apart. The engine is told by the metric names (:mod:`ebb.sources.engines.detect`:
``vllm:``, ``sglang:``, ``tgi_``, ``llamacpp:``, ``nv_inference_``/``nv_trt_llm_``) unless ``--engine``
names it (a custom engine of ``--engines-file`` always needs ``--engine``); a page that matches no
engine, or two alike, exits 2 asking for ``--engine``. It prints, for the pod: running and waiting
requests, the max concurrency (the engine's metric, else ``--max-concurrency``, else "unknown: give
--max-concurrency"), KV-cache usage, the slot share the agent would report, the busy share over the
interval (two scrapes), and per latency histogram (TTFT, inter-token, end-to-end, queue) the
observations and the P99 — over the interval with two scrapes, since the engine started with one — as
the **upper bound** of the bucket holding it (never understated; "> X ms" when it lies in the +Inf
bucket); then which metric each value came from, what is missing (with the profile's hint) and what
the parser dropped. ``--json`` prints the same as one JSON object (numbers or null; no NaN or
Infinity), with ``engine_from`` (``--engine`` or ``metric names``) and ``models``.

**Several models on one page** (a multi-model server, or a mock; the profile's ``model_labels``, vLLM's
``model_name``): a pod serving several models is several workloads, so their figures are never summed.
Without ``--model`` the probe prints each model's figures under its own heading and says how to pick one
(``--json``: ``by_model``, one report per model, and no pod-level figures); ``--model NAME`` reads that
model alone, as ``ebb agent --model NAME`` and a ``model_name="NAME"`` matcher in ``ebb run``'s
Prometheus selector do. What is derived from the scrapes is :func:`ebb.agent.probe.probe_report`'s; this
module fetches or reads them, calls it and prints.

Errors are one line and exit 2 (no traceback): a URL answering 404 or 501 (llama-server without
``--metrics`` answers 501 "This server does not support metrics endpoint") names the fix — for
llama.cpp "start llama-server with --metrics"; a page without the running/waiting gauges names the
metric, the engine, the engine the page looks like when it is another ("looks like vLLM") and the
hint; an unreachable URL or unreadable file says which. A GET is one bounded request
(:func:`ebb.sources.http_get.get`: 5 s, 16 MiB at most).
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
from ebb.sources.engines.detect import ENGINE_PREFIXES, detect_engine
from ebb.sources.engines.exposition import Exposition
from ebb.sources.engines.models import check_model, page_models
from ebb.sources.engines.profiles import LLAMACPP, PROFILES, EngineProfile, engine_profile
from ebb.sources.engines.reading import EngineReading, parse_engine_text, read_engine
from ebb.sources.http_get import HttpLimits, get

__all__ = ["probe_command"]

_TITLES = {"ttft": "time to first token", "itl": "inter-token latency", "e2e": "end-to-end latency",
           "queue": "queue time"}
_LIMITS = HttpLimits(deadline_s=5.0)


def _is_url(text: str) -> bool:
    return text.startswith(("http://", "https://"))


_LLAMA_NO_METRICS = "does not support metrics endpoint"
"""What llama-server without ``--metrics`` answers (HTTP 501), which names the engine without its metrics."""


def _fetch(url: str, profile: EngineProfile | None) -> bytes:
    reply = get(url, _LIMITS)
    if reply.status == 200:
        return reply.body
    said = reply.body[:120].decode("utf-8", "replace").strip()
    if profile is None and _LLAMA_NO_METRICS in said:
        profile = LLAMACPP
    fix = (profile.enable_hint or f"check that the URL is the {profile.title} metrics page") if profile else \
        "check that the URL is the engine's metrics page (llama-server: start it with --metrics)"
    title = profile.title if profile else "the server"
    if reply.status in (404, 501):
        raise InputError(f"answered HTTP {reply.status} {reply.reason}{': ' + repr(said) if said else ''}: "
                         f"{title} serves no metrics there", path=url, fix=fix)
    raise InputError(f"answered HTTP {reply.status} {reply.reason}", path=url, fix=fix)


def _detected(expo: Exposition, source: str) -> EngineProfile:
    """The built-in profile the page's metric names match; InputError asking for --engine otherwise."""
    found = detect_engine(expo)
    if found is None:
        prefixes = ", ".join(x for xs in ENGINE_PREFIXES.values() for x in xs)
        raise InputError(f"cannot tell the engine from the metric names (none, or two engines alike, start with "
                         f"{prefixes})", path=source, fix="name it: --engine vllm|sglang|tgi|llamacpp|triton, or a "
                                                          "custom engine with --engines-file")
    return PROFILES[found]


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
    how = "" if r.get("engine_from") != "metric names" else ", told by its metric names"
    model = f", model {r['model']}" if r.get("model") else ""
    lines = [f"pod {r['pod']} ({r['title']}, engine {r['engine']}{how}{model}, {r['source']})"]
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
    engine: str | None = typer.Option(None, "--engine", help="Engine profile: vllm, sglang, tgi, llamacpp, triton, "
                                      "or one of --engines-file. Default: told by the metric names."),
    interval_s: float = typer.Option(1.0, "--interval-s", help="Seconds between the two GETs of a URL, or between "
                                     "two scrape files."),
    as_json: bool = typer.Option(False, "--json", help="Same as -o json (one JSON object)."),
    output: OutputOpt = "table",
    engines_file: Path | None = typer.Option(None, "--engines-file", help="YAML file of custom engine profiles."),
    max_concurrency: int | None = typer.Option(None, "--max-concurrency", help="Concurrent requests per pod, when "
                                               "the engine does not report it."),
    model: str | None = typer.Option(None, "--model", help="Read this model's series alone, on a page serving "
                                     "several (its model_name). Default: each model's figures apart."),
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
    if engine is None and engines_file is not None:
        raise ConfigError("--engines-file needs --engine NAME (the metric names tell only the built-in engines)")
    named = engine_profile(engine, engines_file) if engine is not None else None
    if named is not None:
        check_model(named, model)
    first = sources[0]
    pages: list[tuple[bytes, str]] = []
    if _is_url(first):
        pages.append((_fetch(first, named), first))
        t0 = time.monotonic()
        time.sleep(interval_s)
        pages.append((_fetch(first, named), first))
        dt = time.monotonic() - t0
        pod = engine_name(first)
    else:
        dt = interval_s
        pages = [(_read_file(src), src) for src in sources]
        pod = Path(sources[-1]).name
    expos = [parse_engine_text(raw, named, source=src) for raw, src in pages]
    profile = named or _detected(expos[-1], pages[-1][1])
    check_model(profile, model)
    source = " -> ".join(sources) if len(sources) == 2 else first
    served = page_models(expos[-1], profile)
    head: dict[str, Any] = {"engine_from": "--engine" if named is not None else "metric names", "models": list(served)}
    models: list[str | None] = list(served) if model is None and len(served) > 1 else [model]

    def report(m: str | None) -> dict[str, Any]:
        readings: list[EngineReading] = [read_engine(x, profile, source=src, model=m)
                                         for x, (_, src) in zip(expos, pages, strict=True)]
        prev = readings[0] if len(readings) == 2 else None
        return probe_report(profile, readings[-1], prev, dt, source=source, pod=pod,
                            max_concurrency=max_concurrency) | head

    if len(models) == 1:
        out = report(models[0])
        typer.echo(json.dumps(out, sort_keys=True, allow_nan=False) if as_json else _text(out))
        return
    by_model = {m: report(m) for m in served}
    if as_json:
        whole = {"pod": pod, "engine": profile.name, "title": profile.title, "source": source, "model": None,
                 "by_model": by_model} | head
        typer.echo(json.dumps(whole, sort_keys=True, allow_nan=False))
        return
    label = profile.model_labels[0]
    typer.echo("\n\n".join(_text(r) for r in by_model.values()))
    typer.echo(f"\n{len(served)} models on this page ({label}: {', '.join(served)}): a pod serving several models "
               "is several workloads, so their figures are not summed. Read one with --model NAME; `ebb agent "
               f'--model NAME` and a {label}="NAME" matcher in `ebb run --prometheus-selector` read it alone too.')
