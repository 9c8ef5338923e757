"""Fuzz the engine exposition readers (issue 14): :func:`parse_exposition`, :func:`read_engine_text` and
:func:`read_dcgm` on mutated real-looking scrapes.

Seeds are small expositions in the shapes the real captures show (vLLM V1 with ``engine``/``model_name``
labels and ``_created`` series, SGLang with ``_sum`` before ``_bucket`` and scientific values, llama.cpp
without labels, TGI with ``method``, Triton's TensorRT-LLM gauges, dcgm-exporter with spaces after
commas and blank sentinels), built here so the pass needs no outside files. Each gets one to six
mutations: hostile tokens (``...``, curl's ``* Connection`` line, braces and quotes, ``le="+Inf"``,
NaN/Inf, -1, 1e309, integers past float range, NUL, BOM, backslash escapes, ``# TYPE`` lines),
flipped bytes, deleted/duplicated runs, truncation, CRLF; plus raw random bytes and over-long lines.
The properties: the fast parser returns exactly what prometheus_client does; each reader returns a value whose invariants hold (finite samples, monotone
histograms with a final +inf bound, quantiles never below a bound of a lower bucket) or raises
:class:`~ebb.errors.InputError` — never anything else.

Folded in from the second review's ``fuzz3.py`` (targets ``expo`` and ``engines``): the agent's whole
path, a good scrape then a mutated one through :class:`~ebb.agent.engine_poll.EnginePoller` and
:class:`~ebb.agent.buckets.BucketAggregator`, must give a bucket the controller's wire decoder
(:func:`~ebb.sources.agent_wire.decode_page_json`) accepts (a refused bucket blinds the controller to
the whole agent: T3-H1/H2); and an engines file (``docs/examples/engines.yaml`` mutated as text and as
a document: ``ttft: []``, nulls, numbers as text) is read or refused with one ConfigError line naming
the file (T3-L1). Budgets are fixed (``max_examples``), inputs derandomized, and each input has a 2 s
deadline, so a hang fails instead of stalling CI.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ebb.agent.buckets import BucketAggregator
from ebb.agent.engine_poll import EnginePoller
from ebb.errors import ConfigError, InputError
from ebb.sources.agent_wire import decode_page_json, encode_bucket_json, page_json
from ebb.sources.engines import PROFILES, interval, load_engines_file, parse_exposition, read_dcgm, read_engine_text

from mutations import append, byte, delete_run, duplicate, insert, mutate, mutate_tree, overwrite, replace, truncate

FUZZ = settings(max_examples=400, deadline=timedelta(seconds=2), derandomize=True, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                       HealthCheck.data_too_large])


def _hist(family: str, labels: str, bounds: list[str], counts: list[int], sum_first: bool = False) -> str:
    rows = [f'{family}_bucket{{{labels},le="{b}"}} {c}' for b, c in zip(bounds, counts)]
    tail = [f"{family}_count{{{labels}}} {counts[-1]}", f"{family}_sum{{{labels}}} 1.25e+01"]
    body = tail[1:] + rows + tail[:1] if sum_first else rows + tail
    return f"# HELP {family} h\n# TYPE {family} histogram\n" + "\n".join(body) + "\n"


VLLM = ('# HELP vllm:num_requests_running r\n# TYPE vllm:num_requests_running gauge\n'
        'vllm:num_requests_running{engine="0",model_name="m"} 3.0\n'
        'vllm:num_requests_waiting{engine="0",model_name="m"} 1.0\n'
        'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.5\n'
        '# TYPE vllm:num_preemptions counter\nvllm:num_preemptions_total{engine="0",model_name="m"} 2.0\n'
        'vllm:num_preemptions_created{engine="0",model_name="m"} 1.7740114612872875e+09\n'
        'vllm:request_prefill_time_seconds_sum{engine="0",model_name="m"} 4.5\n'
        '# TYPE vllm:engine_sleep_state gauge\n'
        'vllm:engine_sleep_state{engine="0",model_name="m",sleep_state="awake"} 1.0\n'
        'vllm:engine_sleep_state{engine="0",model_name="m",sleep_state="weights_offloaded"} 0.0\n'
        'vllm:engine_sleep_state{engine="0",model_name="m",sleep_state="discard_all"} 0.0\n'
        + _hist("vllm:time_to_first_token_seconds", 'engine="0",model_name="m"', ["0.01", "0.1", "1.0", "+Inf"],
                [1, 4, 9, 10])
        + _hist("vllm:inter_token_latency_seconds", 'engine="0",model_name="m"', ["0.01", "0.1", "+Inf"], [5, 7, 7]))
SGLANG = ('sglang:num_running_reqs{model_name="m"} 162.0\nsglang:num_queue_reqs{model_name="m"} 2826.0\n'
          'sglang:token_usage{model_name="m"} 0.28\n'
          + _hist("sglang:time_to_first_token_seconds", 'model_name="m"', ["0.1", "1", "+Inf"], [0, 11008, 11008], True))
LLAMA = ("# HELP llamacpp:prompt_seconds_total t\n# TYPE llamacpp:prompt_seconds_total counter\n"
         "llamacpp:prompt_seconds_total 0.012631\nllamacpp:requests_processing 4\nllamacpp:requests_deferred 6\n"
         "llamacpp:tokens_predicted_total 1.26365e+06\n")
TGI = ('tgi_batch_current_size 3\ntgi_queue_size 2\ntgi_batch_inference_duration_sum{method="prefill"} 1.5\n'
       + _hist("tgi_request_duration", 'x="1"', ["0.00015", "0.5", "+Inf"], [0, 2, 3]))
TRITON = ('nv_trt_llm_request_metrics{model="t",request_type="active",version="1"} 2\n'
          'nv_trt_llm_request_metrics{model="t",request_type="waiting",version="1"} 1\n'
          'nv_trt_llm_request_metrics{model="t",request_type="max",version="1"} 512\n'
          'nv_inference_compute_infer_duration_us{model="t",version="1"} 1000\n'
          + _hist("nv_inference_first_response_histogram_ms", 'model="t", version="1"', ["100", "500", "+Inf"],
                  [8, 30, 37]))
DCGM = ("# HELP DCGM_FI_DEV_GPU_UTIL u\n# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n# TYPE DCGM_FI_DEV_FB_USED gauge\n"
        'DCGM_FI_DEV_GPU_UTIL{gpu="0", UUID="GPU-a",Hostname="h"} 91\n'
        'DCGM_FI_DEV_FB_USED{gpu="0", UUID="GPU-a",Hostname="h"} 5120\n'
        'DCGM_FI_PROF_GR_ENGINE_ACTIVE{gpu="0", UUID="GPU-a",Hostname="h"} 0.156205\n'
        'DCGM_FI_DEV_MEMORY_TEMP{gpu="0", UUID="GPU-a",Hostname="h"} 9223372036854775794\n')
SEEDS: list[tuple[str, str]] = [("vllm", VLLM), ("sglang", SGLANG), ("llamacpp", LLAMA), ("tgi", TGI),
                                ("triton", TRITON), ("dcgm", DCGM)]
TOKENS = ["...", "* Connection #0 to host 10.0.0.1 left intact\n", "{", "}", '"', ",", "=", " ", ", ", "\n", "\r\n",
          "\x00", "\ufeff", "\\", '\\"', "#", "# TYPE x counter\n", "# HELP\n", '# TYPE vllm:num_requests_running histogram\n',
          'le="+Inf"', 'le="NaN"', 'le="-1"', "NaN", "+Inf", "-Inf", "-1", "1e309", "9" * 400, "0x1F", "1_000",
          "_bucket", "_count", "_sum", "_total", "_created", 'engine="1"', "vllm:num_requests_running ",
          "sglang:num_running_reqs{model_name=\"m\"} ", "é", "\t", 'sleep_state="awake"',
          'sleep_state="discard_all"', "vllm:engine_sleep_state{sleep_state=\"weights_offloaded\"} 1\n", "0.5"]
OPS = [overwrite(chr, 0x2FF), insert(TOKENS), delete_run(), duplicate(), truncate(), replace("\n", "\r\n", 3),
       append(TOKENS)]


@st.composite
def mutated(draw: st.DrawFn) -> tuple[str, str | bytes]:
    engine, seed = draw(st.sampled_from(SEEDS))
    text = mutate(draw, seed, OPS)
    if draw(st.integers(0, 4)) == 0:
        return engine, text.encode("utf-8", "surrogatepass")
    return engine, text


hostile = st.one_of(
    st.tuples(st.sampled_from(["vllm", "dcgm", "llamacpp"]), st.binary(max_size=400)),
    st.tuples(st.sampled_from(["vllm", "sglang"]), st.text(max_size=300)),
    st.tuples(st.just("vllm"), st.sampled_from([9_000, 70_000]).map(
        lambda n: 'vllm:num_requests_running{a="' + '\\"' * n + '"} 1\nvllm:num_requests_waiting 0\n')),
    st.tuples(st.just("vllm"), st.integers(1, 3000).map(lambda n: "vllm:num_requests_running 1\n" * n)),
)


def _check_reading(engine: str, data: str | bytes) -> None:
    profile = PROFILES[engine]
    try:
        r = read_engine_text(data, profile, source="fuzz")
    except InputError as exc:
        assert "\n" not in str(exc)
        return
    assert math.isfinite(r.running) and math.isfinite(r.waiting)
    assert r.kv_usage_ratio is None or 0.0 <= r.kv_usage_ratio <= 1.0
    assert r.asleep is None if not profile.sleep_state else r.asleep in (None, True, False)
    for h in r.histograms.values():
        assert h.upper_s[-1] == math.inf and bool(np.all(h.upper_s[1:] > h.upper_s[:-1]))
        assert bool(np.all(h.cumulative[1:] >= h.cumulative[:-1])) and h.count == h.cumulative[-1] >= 0
    iv = interval(r, r, 1.0)
    assert iv.resets == () and (iv.busy_ratio is None or iv.busy_ratio == 0.0)
    for d in iv.latency.values():
        assert d.count == 0 and math.isnan(d.quantile_ms(0.99))


@FUZZ
@given(case=st.one_of(mutated(), hostile))
def test_engine_readers_return_valid_readings_or_raise_input_error(case: tuple[str, str | bytes],
                                                                   fuzz_tried: Callable[[str], None]) -> None:
    engine, data = case
    fuzz_tried("engine exposition")
    try:
        expo = parse_exposition(data, source="fuzz")
    except InputError as exc:
        assert "\n" not in str(exc)
        return
    for samples in expo.samples.values():
        assert all(math.isfinite(s.value) and list(s.labels) == sorted(s.labels) for s in samples)
    if engine == "dcgm":
        try:
            gpus = read_dcgm(expo, source="fuzz")
        except InputError:
            return
        for g in gpus:
            for v in (g.sm_active_ratio, g.gr_engine_active_ratio, g.gpu_util_ratio, g.busy_ratio):
                assert v is None or 0.0 <= v <= 1.0
            assert g.fb_used_bytes is None or 0 <= g.fb_used_bytes < 2.0**47 * 2**20
        return
    _check_reading(engine, data)


@FUZZ
@given(first=mutated(), second=mutated())
def test_interval_between_two_mutated_scrapes_never_raises_and_never_goes_negative(
        first: tuple[str, str | bytes], second: tuple[str, str | bytes], fuzz_tried: Callable[[str], None]) -> None:
    fuzz_tried("engine interval")
    engine = first[0] if first[0] != "dcgm" else "vllm"
    try:
        a = read_engine_text(first[1], PROFILES[engine], source="a")
        b = read_engine_text(second[1], PROFILES[engine], source="b")
    except InputError:
        return
    iv = interval(a, b, 0.5)
    assert iv.busy_ratio is None or 0.0 <= iv.busy_ratio <= 1.0
    for key, d in iv.latency.items():
        assert key not in iv.resets and bool(np.all(d.counts >= 0)) and d.count == float(np.sum(d.counts))
        if d.count > 0:
            q = d.quantile_ms(0.99)
            k = int(np.searchsorted(d.upper_ms, q))
            assert float(np.sum(d.counts[:k + 1])) >= 0.99 * d.count - 1e-9  # q's bucket holds the rank


def _outcome(data: str | bytes, parser: str) -> object:
    try:
        e = parse_exposition(data, source="fuzz", parser=parser)
    except InputError as exc:
        return str(exc)
    return dict(e.samples), dict(e.types), sorted(e.dropped)


@FUZZ
@given(case=st.one_of(mutated(), hostile))
def test_the_fast_parser_agrees_with_prometheus_client(case: tuple[str, str | bytes],
                                                       fuzz_tried: Callable[[str], None]) -> None:
    fuzz_tried("engine fast parser agreement")
    assert _outcome(case[1], "fast") == _outcome(case[1], "prometheus_client")


AGENT = settings(FUZZ, max_examples=150)
URL = "http://127.0.0.1:1/metrics"
T0_NS = 1_800_000_000_000_000_000


@AGENT
@given(case=st.one_of(mutated(), hostile))
def test_an_agent_bucket_from_a_mutated_scrape_is_one_the_controllers_decoder_accepts(
        case: tuple[str, str | bytes], fuzz_tried: Callable[[str], None]) -> None:
    engine, data = case
    fuzz_tried("engine agent bucket")
    raw = data if isinstance(data, bytes) else data.encode("utf-8", "surrogatepass")
    first = engine if engine != "dcgm" else "vllm"
    own = PROFILES[first].kv_usage or PROFILES[first].max_concurrency  # else the agent needs --max-concurrency
    for name, mc in ((first, None if own else 8), ("llamacpp", 4)):
        seed = dict(SEEDS)[name].encode()
        poller, agg = EnginePoller(PROFILES[name], mc), BucketAggregator()
        agg.add(URL)
        for k, page in enumerate((seed, raw)):  # a good scrape first, so the second one gives an interval
            end = T0_NS + k * 100_000_000
            try:
                agg.engine_ok(URL, poller.observe(URL, page, 1.0 + 0.1 * k), end)
            except InputError as exc:
                assert "\n" not in str(exc)
            bucket = agg.close(end)
        decoded = decode_page_json(page_json("a", 100, bucket.ts_ns, [encode_bucket_json(bucket)]), "http://agent")
        assert len(decoded.buckets) == 1
        for w in decoded.buckets[0].workers.values():
            assert not (w.asleep and w.ready)  # a sleeper is never ready capacity


ENGINES_SEED = (Path(__file__).resolve().parents[2] / "docs" / "examples" / "engines.yaml").read_text(encoding="utf-8")
YAML_TOKENS = ["&a ", "*a", "<<: *a\n", "{", "}", "[", "]", "[]", "{}", "\x00", "\n- ", ": ", "---\n", "'", '"', "NaN",
               ".inf", "1e309", "1e-3", "1.0e-320", "-1", "0x1F", str(2**64), "~", "null", "true", "\t", "#",
               "{le=\"+Inf\"}", 'x{a="",a="b"}', "/metrics?x#y"]
YAML_OPS = [overwrite(chr, 0x2FF), insert(YAML_TOKENS), delete_run(), duplicate(), truncate(), append(YAML_TOKENS)]
engine_values = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**64), 2**64), st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([[], {}, "", "1e-3", 1e-320, 1e308, 0, [None], ["a", 1], {"names": []}, {"names": ["x"], "unit_s": 0},
                     {"names": "x", "zz": 1}, ["vllm"], 'x{a="1",a="2"}', "/m?x", "vllm", "ttft", ["ttft", "itl"]]),
    st.text(max_size=12),
)
ENGINE_KEYS = st.sampled_from(["extends", "ttft", "itl", "queue", "required", "kv_usage", "busy_unit_s", "metrics_path",
                               "default_port", "version", "zz", "1"])


@st.composite
def engines_files(draw: st.DrawFn) -> bytes:
    kind = draw(st.integers(0, 2))
    if kind == 0:
        return mutate(draw, ENGINES_SEED, YAML_OPS).encode("utf-8", "surrogatepass")
    if kind == 1:
        return mutate(draw, ENGINES_SEED.encode(), [overwrite(byte, 255), insert([t.encode() for t in YAML_TOKENS]),
                                                    delete_run(), duplicate(), truncate(),
                                                    append([t.encode() for t in YAML_TOKENS])])
    doc = mutate_tree(draw, copy.deepcopy(yaml.safe_load(ENGINES_SEED)), engine_values, ENGINE_KEYS)
    try:
        return yaml.safe_dump(doc, sort_keys=False).encode()
    except yaml.representer.RepresenterError:
        return str(doc).encode()


@settings(FUZZ, max_examples=250)
@given(data=engines_files())
def test_engines_files_are_read_or_refused_with_one_config_error_line(
        data: bytes, tmp_path_factory: pytest.TempPathFactory, fuzz_tried: Callable[[str], None]) -> None:
    fuzz_tried("engines file")
    path = tmp_path_factory.getbasetemp() / "fuzz-engines.yaml"
    path.write_bytes(data)
    try:
        engines = load_engines_file(path)
    except ConfigError as exc:
        text = str(exc)
        assert "\n" not in text and text.startswith(f"{path}: ") and "(fix: " in text, text
        return
    assert engines and all(p.running and p.waiting for p in engines.values())


STATES = ("awake", "weights_offloaded", "discard_all")
sleep_series = st.lists(st.tuples(st.sampled_from(["0", "1"]), st.sampled_from(STATES + ("", "other")),
                                  st.sampled_from([0.0, 1.0, 1.0, 0.5, -1.0, 2.0, float("nan")])), max_size=9)


def _expected_asleep(rows: list[tuple[str, str, float]]) -> bool | None:
    """The reference: per engine, awake iff awake = 1 and no other state at 1; bad values dropped;
    a family with no usable series reads asleep; no family reads None. A NaN never leaves the
    exposition parser (not a finite number), so it is as if never written."""
    rows = [r for r in rows if not math.isnan(r[2])]
    if not rows:
        return None
    groups: dict[str, dict[str, float]] = {}
    seen: set[tuple[str, str]] = set()
    for engine, state, v in rows:
        if (engine, state) in seen:
            continue  # a repeated series: the first is read
        seen.add((engine, state))
        if v in (0.0, 1.0):
            groups.setdefault(engine, {})[state] = v
    if not groups:
        return True
    return any(g.get("awake") != 1.0 or any(v == 1.0 for k, v in g.items() if k != "awake") for g in groups.values())


@FUZZ
@given(rows=sleep_series)
def test_the_sleep_state_reads_asleep_unless_every_engine_is_fully_awake(
        rows: list[tuple[str, str, float]], fuzz_tried: Callable[[str], None]) -> None:
    fuzz_tried("engine sleep state")
    lines = [f'vllm:engine_sleep_state{{engine="{e}",model_name="m"{f",sleep_state={chr(34)}{s}{chr(34)}" if s else ""}}}'
             f" {v!r}".replace("nan", "NaN") for e, s, v in rows]
    text = VLLM.replace("vllm:engine_sleep_state", "x_unused") + "\n".join(lines) + "\n"
    r = read_engine_text(text, PROFILES["vllm"], source="fuzz")
    assert r.asleep is _expected_asleep(rows)
    poll = EnginePoller(PROFILES["vllm"]).observe(URL, text.encode(), 1.0)
    assert poll.gauges.asleep is bool(r.asleep) and poll.gauges.ready is not poll.gauges.asleep
