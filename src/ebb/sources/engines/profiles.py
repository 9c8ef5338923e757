"""Engine signal profiles: which metric of each inference server's ``/metrics`` gives which Ebb signal.

Every built-in :class:`EngineProfile` cites (``source``) the saved engine file and version its names
were read from, under ``../shared/data/engine-metrics/`` (see its README; the test suite checks that
each name appears in that file, so a typo fails a test). Within a signal, names are in preference
order: the first name with at least one sample in the scrape wins (the current name, then the
renamed or deprecated ones still in the field).

A metric name may carry label matchers, ``name{key="value",...}``: only the samples whose labels
include every pair count (TGI's ``tgi_batch_inference_duration_sum{method="prefill"}``).

Signals: ``running`` and ``waiting`` (requests; summed over all series: engines, models, ranks) are
always required, plus whatever ``required`` adds; the others are optional and listed as missing
when absent. ``kv_usage`` is a 0..1 fraction (max over series: the fullest pool bounds the pod);
``max_concurrency`` a gauge of the pod's concurrent-request limit (summed); ``busy_seconds`` a
cumulative counter whose rate, times ``busy_unit_s``, is the busy share; ``ttft``/``itl``/``e2e``/
``queue`` cumulative histograms whose bounds are in ``unit_s`` seconds.

Models: ``model_labels`` name the labels saying which model a series serves (vLLM ``model_name``; none
for TGI and llama.cpp); a page of several is read one model at a time (:mod:`ebb.sources.engines.models`).

Custom engines: :func:`load_engines_file` reads the YAML format documented in ``docs/engines.md``
(worked example: ``docs/examples/engines.yaml``); every key is checked and a bad one is a
:class:`~ebb.errors.ConfigError` naming the file and the key.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final

from ebb.config.yamlio import config_error, describe, load_mapping, read_config_text
from ebb.errors import ConfigError

__all__ = [
    "EngineProfile", "HistogramSpec", "MetricSelector", "PROFILES", "SIGNALS", "UNIT_S_RANGE", "engine_profile",
    "load_engines_file", "parse_selector", "path_problem",
]

SIGNALS: Final = ("running", "waiting", "kv_usage", "max_concurrency", "busy_seconds", "ttft", "itl", "e2e", "queue")
HISTOGRAM_SIGNALS: Final = ("ttft", "itl", "e2e", "queue")
_NAME = r"[A-Za-z_:][A-Za-z0-9_:]*"
_SELECTOR = re.compile(rf"^({_NAME})(?:\{{(.*)\}})?$")
_MATCHER = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*"([^"\\]*)"\s*(?:,|$)')
_ENGINE_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,39}$")
_LABEL = re.compile(r"^(?!__)[A-Za-z_][A-Za-z0-9_]{0,127}$")


@dataclass(frozen=True)
class MetricSelector:
    """A metric name and the label pairs a sample must carry to count (``()``: every sample)."""

    name: str
    matchers: tuple[tuple[str, str], ...] = ()

    def matches(self, labels: tuple[tuple[str, str], ...]) -> bool:
        """Every pair is among ``labels``; ``key=""`` matches a sample without ``key``, as in PromQL
        (an empty label value is no label)."""
        return all(pair in labels or (not pair[1] and all(k != pair[0] for k, _ in labels)) for pair in self.matchers)

    def __str__(self) -> str:
        if not self.matchers:
            return self.name
        return self.name + "{" + ",".join(f'{k}="{v}"' for k, v in self.matchers) + "}"


@functools.lru_cache(maxsize=1024)
def parse_selector(text: str) -> MetricSelector:
    """``name`` or ``name{k="v",...}`` as a :class:`MetricSelector`; ValueError quoting ``text`` otherwise."""
    m = _SELECTOR.match(text.strip()) if isinstance(text, str) else None
    if m is None:
        raise ValueError(f"not a metric name or name{{label=\"value\",...}}: {text!r}")
    name, inner = m.group(1), m.group(2)
    pairs: list[tuple[str, str]] = []
    if inner is not None and inner.strip():
        pos = 0
        while pos < len(inner):
            mm = _MATCHER.match(inner, pos)
            if mm is None or mm.end() == pos:
                raise ValueError(f"bad label matcher in {text!r} at {inner[pos:]!r} (write key=\"value\")")
            if any(k == mm.group(1) for k, _ in pairs):  # no sample carries a label twice: nothing would match
                raise ValueError(f"label {mm.group(1)!r} is matched twice in {text!r} (keep one {mm.group(1)}=\"...\")")
            pairs.append((mm.group(1), mm.group(2)))
            pos = mm.end()
    return MetricSelector(name, tuple(sorted(pairs)))


UNIT_S_RANGE: Final = (1e-9, 3600.0)
"""Seconds per unit a histogram bound or a busy counter may be in: nanoseconds to hours. Outside it a
bound or a busy total times the unit underflows to 0 or overflows past any engine's lifetime."""


def _unit_ok(x: object) -> bool:
    return (isinstance(x, (int, float)) and not isinstance(x, bool)
            and UNIT_S_RANGE[0] <= x <= UNIT_S_RANGE[1])  # NaN fails the comparison


def path_problem(path: object) -> str | None:
    """Why ``path`` cannot be an engine's metrics path, or None."""
    if not (isinstance(path, str) and path.startswith("/")):
        return f"metrics_path must start with '/', got {path!r:.80}"
    if any(c in path for c in "?#@ ") or len(path) > 256:
        # an endpoint URL never carries a query or fragment (ebb.agent's check_endpoint): a path
        # with one would make every discovered pod refused, an agent polling nothing
        return (f"metrics_path must be a plain path (no '?', '#', '@' or space, at most 256 "
                f"characters), got {path[:80]!r}")
    return None


def _check_names(what: str, names: tuple[str, ...]) -> None:
    if not isinstance(names, tuple) or not all(isinstance(n, str) for n in names):
        raise ValueError(f"{what} must be a tuple of metric names, got {names!r}")
    for n in names:
        parse_selector(n)


@dataclass(frozen=True)
class HistogramSpec:
    """A latency histogram: family names in preference order, and the seconds per unit of its bounds."""

    names: tuple[str, ...]
    """Histogram family names (without ``_bucket``), first present wins."""
    unit_s: float = 1.0
    """Seconds per unit of the ``le`` bounds: 1.0 for s, 1e-3 for ms, 1e-6 for µs."""

    def __post_init__(self) -> None:
        _check_names("histogram names", self.names)
        if not self.names:
            raise ValueError("a histogram needs at least one family name")
        if not _unit_ok(self.unit_s):
            raise ValueError(f"unit_s must be a number in [{UNIT_S_RANGE[0]:g}, {UNIT_S_RANGE[1]:g}], "
                             f"got {self.unit_s!r}")


@dataclass(frozen=True)
class EngineProfile:
    """How to read one engine's exposition (see the module docstring for the signal semantics)."""

    name: str
    title: str
    source: str
    """Citation: the files and versions the names come from."""
    running: tuple[str, ...]
    waiting: tuple[str, ...]
    kv_usage: tuple[str, ...] = ()
    max_concurrency: tuple[str, ...] = ()
    busy_seconds: tuple[str, ...] = ()
    busy_unit_s: float = 1.0
    ttft: HistogramSpec | None = None
    itl: HistogramSpec | None = None
    e2e: HistogramSpec | None = None
    queue: HistogramSpec | None = None
    enable_hint: str = ""
    """How to turn the metrics on (quoted in the error when a required metric is absent)."""
    metrics_path: str = "/metrics"
    default_port: int = 8000
    required: tuple[str, ...] = ("running", "waiting")
    """Signals a scrape must have (always including running and waiting)."""
    sleep_state: tuple[str, ...] = ()
    """The engine's sleep-state gauge (one 0/1 series per state, label ``sleep_state``; vLLM's
    ``vllm:engine_sleep_state``, PR #24176): read into :attr:`EngineReading.asleep`; () when the
    engine has none (it is then never read as asleep)."""
    notes: str = ""
    """What a signal means for this engine where it differs from the name (documented caveats)."""
    model_labels: tuple[str, ...] = ()
    """Labels naming the model a series belongs to, first present wins (vLLM ``model_name``); () when the
    engine labels no model (one model per process)."""

    def __post_init__(self) -> None:
        if not self.running or not self.waiting:
            raise ValueError(f"engine {self.name!r}: running and waiting need at least one metric name each")
        for f in ("running", "waiting", "kv_usage", "max_concurrency", "busy_seconds", "sleep_state"):
            _check_names(f, getattr(self, f))
        for f in HISTOGRAM_SIGNALS:
            spec = getattr(self, f)
            if spec is not None and not isinstance(spec, HistogramSpec):
                raise ValueError(f"{f} must be a HistogramSpec or None, got {spec!r}")
        if not _unit_ok(self.busy_unit_s):
            raise ValueError(f"busy_unit_s must be a number in [{UNIT_S_RANGE[0]:g}, {UNIT_S_RANGE[1]:g}], "
                             f"got {self.busy_unit_s!r}")
        if not isinstance(self.model_labels, tuple) or not all(isinstance(x, str) and _LABEL.match(x)
                                                               for x in self.model_labels):
            raise ValueError(f"model_labels must be a tuple of label names, got {self.model_labels!r}")
        why = path_problem(self.metrics_path)
        if why is not None:
            raise ValueError(why)
        if not (isinstance(self.default_port, int) and not isinstance(self.default_port, bool)
                and 1 <= self.default_port <= 65535):
            raise ValueError(f"default_port must be in 1..65535, got {self.default_port!r}")
        unknown = [s for s in self.required if s not in SIGNALS]
        if unknown or "running" not in self.required or "waiting" not in self.required:
            raise ValueError(f"required must name signals among {SIGNALS} and include running and waiting, "
                             f"got {self.required!r}")
        undefined = [s for s in self.required if not self.names_of(s)]
        if undefined:
            raise ValueError(f"required signal(s) {undefined} have no metric names")

    def names_of(self, signal: str) -> tuple[str, ...]:
        """The metric names tried for ``signal`` (histogram family names for histograms)."""
        value = getattr(self, signal)
        if value is None:
            return ()
        if isinstance(value, HistogramSpec):
            return value.names
        assert isinstance(value, tuple)
        return value


_DATA = "../shared/data/engine-metrics"

VLLM = EngineProfile(
    name="vllm", title="vLLM",
    source=(f"{_DATA}/vllm/source/vllm-project__vllm__vllm__v1__metrics__loggers.py (v0.20.1, 132765e3; V1 names); "
            f"{_DATA}/vllm/source/v0.11.0/vllm-project__vllm__vllm__v1__metrics__loggers.py (v0.11.0; deprecated "
            "vllm:gpu_cache_usage_perc, vllm:time_per_output_token_seconds); "
            f"{_DATA}/vllm/source/v0.11.0/vllm-project__vllm__vllm__engine__metrics.py and "
            f"{_DATA}/vllm/source/v0.5.4/vllm-project__vllm__vllm__engine__metrics.py (V0 engine)"),
    running=("vllm:num_requests_running",),
    waiting=("vllm:num_requests_waiting",),
    kv_usage=("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
    busy_seconds=("vllm:request_prefill_time_seconds_sum", "vllm:time_to_first_token_seconds_sum"),
    ttft=HistogramSpec(("vllm:time_to_first_token_seconds",)),
    itl=HistogramSpec(("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds")),
    e2e=HistogramSpec(("vllm:e2e_request_latency_seconds",)),
    queue=HistogramSpec(("vllm:request_queue_time_seconds",)),
    sleep_state=("vllm:engine_sleep_state",),
    enable_hint=("vLLM's OpenAI server serves /metrics on its API port (default 8000) with no flag; "
                 "point the endpoint at `vllm serve`, not at a router in front of it"),
    default_port=8000,
    notes=("busy_seconds is the sum of per-request prefill time, so requests prefilled in one batch each count "
           "the batch's time and the share can exceed the wall clock (clamped to 1); the V0 fallback, the TTFT "
           "histogram sum, also counts queueing. Both overstate busy time, the safe direction for scaling up. "
           "vLLM has no max-concurrency gauge: give --max-concurrency (its --max-num-seqs)."),
    model_labels=("model_name",),
)

SGLANG = EngineProfile(
    name="sglang", title="SGLang",
    source=(f"{_DATA}/sglang/source/sgl-project__sglang__python__sglang__srt__metrics__collector.py (v0.5.8, "
            f"0189f41c); {_DATA}/sglang/source/older-5bc2508b8/"
            "sgl-project__sglang__python__sglang__srt__metrics__metrics_collector.py (main 2024-11-07, first names)"),
    running=("sglang:num_running_reqs", "sglang:num_requests_running"),
    waiting=("sglang:num_queue_reqs", "sglang:num_requests_waiting"),
    kv_usage=("sglang:token_usage",),
    busy_seconds=("sglang:time_to_first_token_seconds_sum",),
    ttft=HistogramSpec(("sglang:time_to_first_token_seconds",)),
    itl=HistogramSpec(("sglang:inter_token_latency_seconds", "sglang:time_per_output_token_seconds")),
    e2e=HistogramSpec(("sglang:e2e_request_latency_seconds",)),
    queue=HistogramSpec(("sglang:queue_time_seconds", "sglang:waiting_request_latency_seconds")),
    enable_hint="start SGLang with --enable-metrics (python -m sglang.launch_server ... --enable-metrics)",
    default_port=30000,
    notes=("kv_usage is sglang:token_usage, the used fraction of the KV token pool. SGLang has no busy-time "
           "counter: busy_seconds is the TTFT histogram sum, which counts queueing and each request of a batch "
           "(clamped to 1), so it overstates busy time, the safe direction for scaling. No max-concurrency "
           "gauge: give --max-concurrency (its --max-running-requests)."),
    model_labels=("model_name", "name"),
)

TGI = EngineProfile(
    name="tgi", title="Hugging Face TGI",
    source=(f"{_DATA}/tgi/source/huggingface__text-generation-inference__router__src__server.rs, "
            "backends__v3__src__backend.rs, backends__v3__src__queue.rs (3.3.6-dev0, db931fcf)"),
    running=("tgi_batch_current_size",),
    waiting=("tgi_queue_size",),
    busy_seconds=('tgi_batch_inference_duration_sum{method="prefill"}',),
    itl=HistogramSpec(("tgi_request_mean_time_per_token_duration",)),
    e2e=HistogramSpec(("tgi_request_duration",)),
    queue=HistogramSpec(("tgi_request_queue_duration",)),
    enable_hint=("TGI serves /metrics on its API port and on --prometheus-port (default 9000) with no flag; "
                 "point the endpoint at the router, not a shard"),
    default_port=80,
    notes=("TGI exports no time-to-first-token histogram: TTFT must be measured where requests pass. itl is the "
           "per-request MEAN time per token (tgi_request_mean_time_per_token_duration), not per-token gaps. "
           "default_port 80 is the container image's; the launcher's own default is 3000."),
)

LLAMACPP = EngineProfile(
    name="llamacpp", title="llama.cpp server",
    source=(f"{_DATA}/llamacpp/source/ggml-org__llama.cpp__tools__server__server-context.cpp (main 2026-05-01, "
            f"~b8999, lines 3467-3537); {_DATA}/llamacpp/source/before-kv-metrics-removal-b44890df2/"
            "ggml-org__llama.cpp__tools__server__server.cpp (~b5440, kv_cache_usage_ratio)"),
    running=("llamacpp:requests_processing",),
    waiting=("llamacpp:requests_deferred",),
    kv_usage=("llamacpp:kv_cache_usage_ratio",),
    busy_seconds=("llamacpp:prompt_seconds_total",),
    enable_hint="start llama-server with --metrics (without it /metrics answers 501)",
    default_port=8080,
    notes=("llamacpp:kv_cache_usage_ratio exists only in builds before #13660 (2025-05-21) and in forks; no "
           "latency histograms at all (TTFT comes from the router or /slots); no slot-count gauge: give "
           "--max-concurrency (its -np)."),
)

TRITON = EngineProfile(
    name="triton", title="NVIDIA Triton (TensorRT-LLM backend)",
    source=(f"{_DATA}/triton/source/triton-inference-server__core__src__metrics.cc (core main 2026-06-09, "
            f"73aad7c3); {_DATA}/triton/triton-inference-server__tensorrtllm_backend__README.md (0b9d7d5a, "
            "lines 428-459: nv_trt_llm_* gauges)"),
    running=('nv_trt_llm_request_metrics{request_type="active"}',),
    waiting=('nv_trt_llm_request_metrics{request_type="waiting"}', "nv_inference_pending_request_count"),
    kv_usage=('nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="fraction"}',),
    max_concurrency=('nv_trt_llm_request_metrics{request_type="max"}',),
    busy_seconds=("nv_inference_compute_infer_duration_us",),
    busy_unit_s=1e-6,
    ttft=HistogramSpec(("nv_inference_first_response_histogram_ms",), unit_s=1e-3),
    enable_hint=("Triton serves metrics on --metrics-port (default 8002) unless --allow-metrics=false; running "
                 "requests come from the TensorRT-LLM backend's nv_trt_llm_request_metrics"),
    default_port=8002,
    notes=("running is the TensorRT-LLM backend's active-request gauge; plain Triton has no in-flight gauge, so a "
           "model without that backend fails with the names tried. waiting prefers the backend's queue, then "
           "Triton's own pending count. busy_seconds is the cumulative per-request compute time (µs), which "
           "counts batched requests once each (overstates; clamped to 1)."),
    model_labels=("model",),
)

PROFILES: Final[Mapping[str, EngineProfile]] = MappingProxyType(
    {p.name: p for p in (VLLM, SGLANG, TGI, LLAMACPP, TRITON)})

# --- custom engines (YAML) ---------------------------------------------------------------------------

_LIST_KEYS: Final = ("running", "waiting", "kv_usage", "max_concurrency", "busy_seconds", "sleep_state", "required")
_STR_KEYS: Final = ("title", "source", "enable_hint", "metrics_path", "notes")
_KEYS: Final = frozenset(_LIST_KEYS + _STR_KEYS + HISTOGRAM_SIGNALS + ("extends", "busy_unit_s", "default_port",
                                                                        "model_labels"))
_SHAPE = ("write engines: {NAME: {title: ..., source: ..., running: [metric], waiting: [metric]}} (one line: "
          "errors are one line; see docs/engines.md)")


def _names(src: str, key: str, value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise config_error(src, key, f"expected a list of metric names, got {describe(value)}",
                           'write e.g. [vllm:num_requests_running] or [\'name{label="value"}\']'
                           + ("; to keep the extended engine's names, leave the key out" if value is None else ""))
    for v in value:
        try:
            parse_selector(v)
        except ValueError as exc:
            raise config_error(src, key, str(exc), 'metric names match [A-Za-z_:][A-Za-z0-9_:]*, '
                               'optionally {label="value",...}') from None
    return tuple(value)


def _labels(src: str, key: str, value: Any) -> tuple[str, ...]:
    """A list of label names (``[model_name]``; ``[]`` for an engine that labels no model)."""
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) and _LABEL.match(v) for v in value):
        raise config_error(src, key, f"expected a list of label names, got {describe(value)}",
                           "write e.g. [model_name] (labels match [A-Za-z_][A-Za-z0-9_]*, not starting with __), "
                           "or [] for an engine that labels no model")
    return tuple(dict.fromkeys(value))


def _number(src: str, key: str, value: Any) -> float:
    """A seconds-per-unit value in :data:`UNIT_S_RANGE`; a number YAML 1.1 read as text (``1e-3``, no
    dot) is named as such, since the file looks right."""
    if _unit_ok(value):
        return float(value)
    fix = "seconds per unit: 1 for s, 0.001 for ms, 0.000001 for µs"
    if isinstance(value, str):
        try:
            float(value)
        except ValueError:
            pass
        else:
            raise config_error(src, key, f"{describe(value)} is text to YAML (a number in exponent form needs a "
                               "dot)", f"write it with a dot, e.g. 1.0e-3, or as a decimal: {fix}")
    lo, hi = UNIT_S_RANGE
    raise config_error(src, key, f"expected a number in [{lo:g}, {hi:g}], got {describe(value)}", fix)


def _histogram(src: str, key: str, value: Any) -> HistogramSpec | None:
    if value is None:
        return None
    if isinstance(value, (str, list)):
        names = _names(src, key, value)
        if not names:
            raise config_error(src, key, "empty list", "list at least one histogram family name, or write "
                               f"`{key.rsplit('.', 1)[-1]}: null` for none")
        return HistogramSpec(names)
    if not isinstance(value, dict):
        raise config_error(src, key, f"expected a mapping {{names: [...], unit_s: 1}}, got {describe(value)}",
                           "write names: [family] and optionally unit_s")
    extra = sorted(str(k) for k in value if k not in ("names", "unit_s"))
    if extra:
        raise config_error(src, f"{key}.{extra[0]}", "unknown key", "a histogram has only names and unit_s")
    if "names" not in value:
        raise config_error(src, f"{key}.names", "missing", "list the histogram family names (without _bucket)")
    names = _names(src, f"{key}.names", value["names"])
    if not names:
        raise config_error(src, f"{key}.names", "empty", "list at least one histogram family name, or write "
                           f"`{key.rsplit('.', 1)[-1]}: null` for none")
    unit = _number(src, f"{key}.unit_s", value.get("unit_s", 1.0))
    return HistogramSpec(names, unit)


def _engine(src: str, name: str, doc: Any, builtins: Mapping[str, EngineProfile]) -> EngineProfile:
    where = f"engines.{name}"
    if not isinstance(name, str) or not _ENGINE_NAME.match(name):
        raise config_error(src, f"engines.{describe(name)}", "bad engine name",
                           "use 1-40 lower-case letters, digits, '-' or '_', starting with a letter")
    if name in builtins:
        raise config_error(src, where, f"{name!r} is a built-in engine",
                           f"pick another name and write `extends: {name}` to start from the built-in")
    if not isinstance(doc, dict):
        raise config_error(src, where, f"expected a mapping, got {describe(doc)}", _SHAPE)
    unknown = sorted(str(k) for k in doc if k not in _KEYS)
    if unknown:
        raise config_error(src, f"{where}.{unknown[0]}", "unknown key", f"keys are {', '.join(sorted(_KEYS))}")
    base: dict[str, Any] = {}
    if "extends" in doc:
        parent = doc["extends"]
        if not isinstance(parent, str) or parent not in builtins:
            raise config_error(src, f"{where}.extends", f"not a built-in engine: {describe(parent)}",
                               f"extend one of {', '.join(sorted(builtins))}")
        base = {f.name: getattr(builtins[parent], f.name) for f in fields(EngineProfile)}
    kw: dict[str, Any] = dict(base)
    kw["name"] = name
    for key in _STR_KEYS:
        if key in doc:
            if not isinstance(doc[key], str):
                raise config_error(src, f"{where}.{key}", f"expected a string, got {describe(doc[key])}",
                                   "quote the value")
            kw[key] = doc[key]
    if "metrics_path" in doc and (why := path_problem(doc["metrics_path"])) is not None:
        raise config_error(src, f"{where}.metrics_path", why, "write the path alone, e.g. /metrics")
    for key in _LIST_KEYS:
        if key in doc:
            kw[key] = _names(src, f"{where}.{key}", doc[key]) if key != "required" else _required(src, where, doc[key])
    for key in HISTOGRAM_SIGNALS:
        if key in doc:
            kw[key] = _histogram(src, f"{where}.{key}", doc[key])
    if "busy_unit_s" in doc:
        kw["busy_unit_s"] = _number(src, f"{where}.busy_unit_s", doc["busy_unit_s"])
    if "model_labels" in doc:
        kw["model_labels"] = _labels(src, f"{where}.model_labels", doc["model_labels"])
    if "default_port" in doc:
        port = doc["default_port"]
        if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
            raise config_error(src, f"{where}.default_port", f"expected a port 1-65535, got {describe(port)}",
                               "write the engine's HTTP port, e.g. 8000")
        kw["default_port"] = port
    for key in ("title", "source", "running", "waiting"):
        if key not in kw:
            raise config_error(src, f"{where}.{key}", "missing",
                               "every engine needs title, source (where the names come from), running and waiting")
    if not kw["source"].strip():
        raise config_error(src, f"{where}.source", "empty", "cite where the metric names come from (file, version)")
    if base and "source" not in doc:
        kw["source"] = f"extends {doc['extends']}: {kw['source']}"
    if "required" in doc:
        undefined = [s for s in kw["required"] if not _defined(kw.get(s))]
        if undefined:
            raise config_error(src, f"{where}.required", f"{', '.join(undefined)} required but given no metric names",
                               f"add {undefined[0]} names to this engine, or drop it from required")
    try:
        return EngineProfile(**kw)
    except ValueError as exc:
        raise config_error(src, where, str(exc), "see docs/engines.md") from None


def _defined(value: Any) -> bool:
    """A signal's value in a profile's keywords names at least one metric."""
    return bool(value.names if isinstance(value, HistogramSpec) else value)


def _required(src: str, where: str, value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v in SIGNALS for v in value):
        raise config_error(src, f"{where}.required", f"expected a list of signals, got {describe(value)}",
                           f"choose among {', '.join(SIGNALS)}")
    return tuple(dict.fromkeys(["running", "waiting", *value]))


def load_engines_file(path: Path) -> dict[str, EngineProfile]:
    """The custom engines of YAML file ``path`` (format: docs/engines.md), each checked key by key.

    :class:`~ebb.errors.ConfigError` ``PATH: KEY: what (fix: ...)`` for an unreadable file, broken
    YAML, an unknown or mistyped key, a missing ``title``/``source``/``running``/``waiting``, a bad
    metric name, or a name that clashes with a built-in engine.
    """
    src = str(path)
    doc = load_mapping(read_config_text(Path(path), "engines file"), src, _SHAPE)
    extra = sorted(str(k) for k in doc if k not in ("version", "engines"))
    if extra:
        raise config_error(src, extra[0], "unknown top-level key", "the file has `version: 1` and `engines:`")
    version = doc.get("version", 1)
    if type(version) is not int or version != 1:  # not True, not 1.0: a version is a whole number
        raise config_error(src, "version", f"unsupported version {describe(version)}", "write version: 1")
    engines = doc.get("engines")
    if not isinstance(engines, dict) or not engines:
        raise config_error(src, "engines", f"expected a non-empty mapping, got {describe(engines)}", _SHAPE)
    return {str(name): _engine(src, name, body, PROFILES) for name, body in engines.items()}


def engine_profile(name: str, engines_file: Path | None = None) -> EngineProfile:
    """The built-in or custom (``engines_file``) profile ``name``; ConfigError listing the choices otherwise."""
    custom = load_engines_file(engines_file) if engines_file is not None else {}
    if name in custom:
        return custom[name]
    if name in PROFILES:
        return PROFILES[name]
    choices = sorted(PROFILES) + sorted(custom)
    where = f" (built-in, or from {engines_file})" if engines_file is not None else " (or pass --engines-file)"
    raise ConfigError(f"--engine: unknown engine {name!r}; choose one of {', '.join(choices)}{where}")

