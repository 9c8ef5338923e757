"""Every metric name of every built-in profile appears in the engine's own defining source, as saved in
../shared/data/engine-metrics/<engine>/source/ (so a typo in a profile fails here), and each profile's
``source`` cites a file that exists. Skipped with the reason when ../shared is absent; failed under CI=true."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from ebb.sources.engines import PROFILES
from ebb.sources.engines.profiles import parse_selector

SHARED = Path(__file__).resolve().parents[4] / ".." / "shared"
DATA = SHARED / "data" / "engine-metrics"

# engine -> the saved files that define its names (Triton's TensorRT-LLM gauges: only the backend README is saved)
DEFINING = {
    "vllm": ["vllm/source"],
    "sglang": ["sglang/source"],
    "tgi": ["tgi/source"],
    "llamacpp": ["llamacpp/source"],
    "triton": ["triton/source", "triton/triton-inference-server__tensorrtllm_backend__README.md"],
}
# the newest definition of each engine: the FIRST name of every signal must be there (current names first)
NEWEST = {
    "vllm": "vllm/source/vllm-project__vllm__vllm__v1__metrics__loggers.py",
    "sglang": "sglang/source/sgl-project__sglang__python__sglang__srt__metrics__collector.py",
    "tgi": "tgi/source",
    "llamacpp": "llamacpp/source/ggml-org__llama.cpp__tools__server__server-context.cpp",
    "triton": "triton",
}
# signals whose first name is knowingly absent from the newest file (removed upstream, kept for older builds)
REMOVED = {("llamacpp", "kv_usage")}  # llamacpp:kv_cache_usage_ratio, removed by #13660


@pytest.fixture(autouse=True)
def _shared_data() -> None:
    if not (DATA / "README.md").is_file():
        msg = f"shared engine-metrics data not present at {DATA}"
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI must provide ../shared: {msg}")
        pytest.skip(msg)


def text_of(rel: str) -> str:
    p = DATA / rel
    files = sorted(q for q in p.rglob("*") if q.is_file()) if p.is_dir() else [p]
    assert files, rel
    return "\n".join(f.read_text(encoding="utf-8") for f in files)


def defined_token(engine: str, name: str) -> str:
    """The string the engine's source writes for exposition name ``name`` (quoted)."""
    if engine == "llamacpp":
        name = name.removeprefix("llamacpp:")  # server-context.cpp prints "llamacpp:" << name
    if name.endswith("_sum"):
        name = name[: -len("_sum")]  # a histogram's sum (busy_seconds): the source names the family
    return f'"{name}"' if engine != "triton" or not name.startswith("nv_trt_llm") else name


@pytest.mark.parametrize("engine", sorted(PROFILES))
def test_every_profile_name_and_label_matcher_is_defined_in_the_engines_source(engine: str) -> None:
    profile = PROFILES[engine]
    text = "\n".join(text_of(rel) for rel in DEFINING[engine])
    names = [n for s in ("running", "waiting", "kv_usage", "max_concurrency", "busy_seconds",
                         "ttft", "itl", "e2e", "queue", "sleep_state") for n in profile.names_of(s)]
    assert names
    for n in names:
        sel = parse_selector(n)
        assert defined_token(engine, sel.name) in text, (engine, n)
        for key, value in sel.matchers:
            # TGI: "method" => "prefill"; TensorRT-LLM README: request_type="active"
            assert re.search(rf'"?{key}"?\s*(=|=>)\s*"{re.escape(value)}"', text), (engine, n, key, value)


@pytest.mark.parametrize("engine", sorted(PROFILES))
def test_the_first_name_of_each_signal_is_the_current_one(engine: str) -> None:
    profile = PROFILES[engine]
    newest = text_of(NEWEST[engine])
    for signal in ("running", "waiting", "kv_usage", "max_concurrency", "busy_seconds", "ttft", "itl", "e2e", "queue"):
        names = profile.names_of(signal)
        if not names or (engine, signal) in REMOVED:
            continue
        assert defined_token(engine, parse_selector(names[0]).name) in newest, (engine, signal, names[0])


def test_removed_and_deprecated_names_are_where_the_readme_says() -> None:
    v0110 = text_of("vllm/source/v0.11.0")
    assert '"vllm:gpu_cache_usage_perc"' in v0110 and '"vllm:time_per_output_token_seconds"' in v0110
    assert '"vllm:gpu_cache_usage_perc"' not in text_of(NEWEST["vllm"])
    older = text_of("sglang/source/older-5bc2508b8")
    assert '"sglang:num_requests_running"' in older and '"sglang:num_requests_waiting"' in older
    assert '"kv_cache_usage_ratio"' in text_of("llamacpp/source/before-kv-metrics-removal-b44890df2")
    assert '"kv_cache_usage_ratio"' not in text_of(NEWEST["llamacpp"])


@pytest.mark.parametrize("engine", sorted(PROFILES))
def test_each_profile_cites_saved_files_that_exist(engine: str) -> None:
    cited = re.findall(r"\.\./shared/data/engine-metrics/(\S+?\.(?:py|cpp|cc|rs|md))(?=[\s,;)]|$)", PROFILES[engine].source)
    assert cited, PROFILES[engine].source
    for rel in cited:
        assert (DATA / rel).is_file(), rel
