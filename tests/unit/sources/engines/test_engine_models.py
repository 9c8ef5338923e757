"""A page of several models is read one model at a time, never summed; the engine is told by the metric names.

Real pages: the saved captures of ../shared/data/engine-metrics (skipped with the reason when absent, failed
under CI=true), cut by the README's line ranges; synthetic ones are built here.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ebb.errors import ConfigError, InputError
from ebb.sources.engines import PROFILES, load_engines_file, parse_exposition, read_engine, read_engine_text
from ebb.sources.engines.detect import detect_engine, engine_names, looks_like
from ebb.sources.engines.models import check_model, only_model, page_models

DATA = Path(__file__).resolve().parents[4] / ".." / "shared" / "data" / "engine-metrics"
VLLM, SGLANG, TGI = PROFILES["vllm"], PROFILES["sglang"], PROFILES["tgi"]

# (engine, saved file, first line, last line) of every real exposition: README §1 "emb a–b"
CAPTURES = [
    ("vllm", "vllm/cncf__k8s-ai-conformance__v1.35__kops__tests__Test_SchedulingOrchestration_PodAutoscaling__output.md",
     115, 675),
    ("sglang", "sglang/sgl-project__sglang__docs__references__production_metrics.md", 11, 125),
    ("sglang", "sglang/older-5bc2508b8/sgl-project__sglang__docs__references__production_metrics.md", 10, 186),
    ("triton", "triton/triton-inference-server__tensorrtllm_backend__README.md", 428, 459),
    ("llamacpp", "llamacpp/captured-here/metrics_busy_4slots_6deferred.txt", 1, 10_000),
    ("llamacpp", "llamacpp/captured-here/metrics_idle.txt", 1, 10_000),
]


def capture(rel: str, first: int, last: int) -> str:
    if not (DATA / "README.md").is_file():
        msg = f"shared engine-metrics data not present at {DATA}"
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI must provide ../shared: {msg}")
        pytest.skip(msg)
    return "\n".join((DATA / rel).read_text(encoding="utf-8").split("\n")[first - 1:last]) + "\n"


def two_models(running: tuple[float, float] = (3, 5), waiting: tuple[float, float] = (1, 4)) -> str:
    return "".join(f'vllm:num_requests_running{{engine="0",model_name="{m}"}} {r}\n'
                   f'vllm:num_requests_waiting{{engine="0",model_name="{m}"}} {w}\n'
                   f'vllm:kv_cache_usage_perc{{engine="0",model_name="{m}"}} {0.25 * (i + 1)}\n'
                   for i, (m, r, w) in enumerate(zip(("llama-8b", "qwen-7b"), running, waiting))) \
        + "process_start_time_seconds 1.7e9\n"


# -- which engine ----------------------------------------------------------------------------------
@pytest.mark.parametrize("engine, rel, first, last", CAPTURES, ids=[f"{e}:{Path(r).name[:40]}" for e, r, _, _ in CAPTURES])
def test_every_real_capture_is_told_by_its_metric_names(engine: str, rel: str, first: int, last: int) -> None:
    expo = parse_exposition(capture(rel, first, last), source=rel)
    assert detect_engine(expo) == engine
    assert looks_like(expo, PROFILES[engine]) == ""


def test_a_page_of_no_engine_or_of_two_alike_is_not_guessed() -> None:
    assert detect_engine(parse_exposition("process_cpu_seconds_total 1\n", source="s")) is None
    mixed = parse_exposition("vllm:num_requests_running 1\nsglang:num_running_reqs 2\n", source="s")
    assert engine_names(mixed) == {"vllm": 1, "sglang": 1} and detect_engine(mixed) is None
    # a histogram's _bucket/_sum/_count are one family
    hist = parse_exposition('tgi_request_duration_bucket{le="+Inf"} 1\ntgi_request_duration_sum 1\n'
                            'tgi_request_duration_count 1\nvllm:num_requests_running 1\nvllm:num_requests_waiting 1\n',
                            source="s")
    assert engine_names(hist) == {"tgi": 1, "vllm": 2} and detect_engine(hist) == "vllm"


def test_a_real_vllm_page_read_as_sglang_says_it_looks_like_vllm_and_names_the_engine_to_use() -> None:
    text = capture(*CAPTURES[0][1:])
    with pytest.raises(InputError) as e:
        read_engine_text(text, SGLANG, source="pod:8000")
    msg = str(e.value)
    assert "SGLang (sglang) scrape has no running metric" in msg and "looks like vLLM" in msg
    assert "use --engine vllm" in msg and "\n" not in msg


def test_a_custom_engine_reading_vllm_names_is_not_told_it_looks_like_vllm(tmp_path: Path) -> None:
    f = tmp_path / "e.yaml"
    f.write_text("engines:\n  myvllm:\n    extends: vllm\n    title: vLLM behind our gateway\n")
    mine = load_engines_file(f)["myvllm"]
    assert looks_like(parse_exposition("vllm:num_requests_waiting 1\n", source="s"), mine) == ""


# -- models ----------------------------------------------------------------------------------------
def test_a_two_model_page_is_refused_whole_and_read_one_model_at_a_time() -> None:
    text = two_models()
    with pytest.raises(InputError) as e:
        read_engine_text(text, VLLM, source="pod:8000")
    assert "serves 2 models (model_name: 'llama-8b', 'qwen-7b')" in str(e.value) and "--model NAME" in str(e.value)
    llama = read_engine_text(text, VLLM, source="pod:8000", model="llama-8b")
    qwen = read_engine_text(text, VLLM, source="pod:8000", model="qwen-7b")
    assert (llama.running, llama.waiting, llama.kv_usage_ratio, llama.model) == (3.0, 1.0, 0.25, "llama-8b")
    assert (qwen.running, qwen.waiting, qwen.kv_usage_ratio, qwen.model) == (5.0, 4.0, 0.5, "qwen-7b")
    assert llama.started_s == qwen.started_s == 1.7e9  # the pod-wide series (no model label) stays
    with pytest.raises(InputError, match="no running series of model 'gpt'.*'llama-8b', 'qwen-7b'"):
        read_engine_text(text, VLLM, source="s", model="gpt")


def test_a_model_for_an_engine_without_model_labels_or_an_empty_one_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="labels no model"):
        check_model(TGI, "m")
    with pytest.raises(ConfigError, match="must name a model"):
        check_model(VLLM, "")
    check_model(VLLM, None)
    check_model(TGI, None)


def test_old_sglang_names_its_model_with_the_name_label() -> None:
    page = ('sglang:num_requests_running{name="gemma"} 2\nsglang:num_requests_waiting{name="gemma"} 1\n'
            'sglang:num_requests_running{name="llama"} 7\nsglang:num_requests_waiting{name="llama"} 0\n')
    expo = parse_exposition(page, source="s")
    assert page_models(expo, SGLANG) == ("gemma", "llama")
    assert read_engine(expo, SGLANG, source="s", model="llama").running == 7.0


@pytest.mark.parametrize("engine, rel, first, last", CAPTURES, ids=[f"{e}:{Path(r).name[:40]}" for e, r, _, _ in CAPTURES])
def test_a_real_capture_serves_at_most_one_model_and_reads_as_before(engine: str, rel: str, first: int,
                                                                    last: int) -> None:
    text = capture(rel, first, last)
    profile = PROFILES[engine]
    expo = parse_exposition(text, source=rel)
    models = page_models(expo, profile)
    assert len(models) <= 1
    whole = read_engine(expo, profile, source=rel)
    if models:
        one = read_engine(expo, profile, source=rel, model=models[0])
        assert (one.running, one.waiting, one.kv_usage_ratio) == (whole.running, whole.waiting, whole.kv_usage_ratio)


def test_a_real_vllm_page_served_twice_under_two_models_reads_each_as_the_original() -> None:
    text = capture(*CAPTURES[0][1:])
    name = re.search(r'model_name="([^"]+)"', text)
    assert name is not None
    doubled = text + "\n".join(line.replace(f'model_name="{name.group(1)}"', 'model_name="second"')
                               for line in text.splitlines() if line.startswith("vllm:")) + "\n"
    with pytest.raises(InputError, match="serves 2 models"):
        read_engine_text(doubled, VLLM, source="s")
    original = read_engine_text(text, VLLM, source="s")
    for model in (name.group(1), "second"):
        r = read_engine_text(doubled, VLLM, source="s", model=model)
        assert (r.running, r.waiting, r.kv_usage_ratio, r.busy_s_total) == (
            original.running, original.waiting, original.kv_usage_ratio, original.busy_s_total)
        assert {k: h.count for k, h in r.histograms.items()} == {k: h.count for k, h in original.histograms.items()}


def test_an_engines_file_names_its_model_labels_and_a_bad_one_is_one_line(tmp_path: Path) -> None:
    f = tmp_path / "e.yaml"
    f.write_text("engines:\n  mine:\n    title: M\n    source: s\n    running: [r]\n    waiting: [w]\n"
                 "    model_labels: [served_model]\n  child:\n    extends: vllm\n")
    got = load_engines_file(f)
    assert got["mine"].model_labels == ("served_model",) and got["child"].model_labels == ("model_name",)
    r = read_engine_text('r{served_model="a"} 1\nw{served_model="a"} 0\nr{served_model="b"} 2\nw{served_model="b"} 0\n',
                         got["mine"], source="s", model="b")
    assert r.running == 2.0
    f.write_text("engines:\n  mine:\n    title: M\n    source: s\n    running: [r]\n    waiting: [w]\n"
                 "    model_labels: [__name__]\n")
    with pytest.raises(ConfigError) as e:
        load_engines_file(f)
    assert "engines.mine.model_labels" in str(e.value) and "\n" not in str(e.value)


@settings(max_examples=150, derandomize=True, database=None, deadline=None)
@given(st.dictionaries(st.text(alphabet="abcxyz-.", min_size=1, max_size=6),
                       st.lists(st.tuples(st.integers(0, 50), st.integers(0, 50)), min_size=1, max_size=3),
                       min_size=1, max_size=4))
def test_each_model_reads_its_own_sums_and_several_are_never_summed(pods: dict[str, list[tuple[int, int]]]) -> None:
    # each model has 1-3 engine ranks of (running, waiting)
    page = "".join(f'vllm:num_requests_running{{engine="{k}",model_name="{m}"}} {r}\n'
                   f'vllm:num_requests_waiting{{engine="{k}",model_name="{m}"}} {w}\n'
                   for m, ranks in pods.items() for k, (r, w) in enumerate(ranks))
    expo = parse_exposition(page, source="s")
    assert page_models(expo, VLLM) == tuple(sorted(pods))
    for m, ranks in pods.items():
        r = read_engine(expo, VLLM, source="s", model=m)
        assert (r.running, r.waiting) == (sum(x for x, _ in ranks), sum(y for _, y in ranks))
        assert sum(len(v) for v in only_model(expo, VLLM, m).samples.values()) == 2 * len(ranks)
    if len(pods) > 1:
        with pytest.raises(InputError, match=f"serves {len(pods)} models"):
            read_engine(expo, VLLM, source="s")
    else:
        assert read_engine(expo, VLLM, source="s").running == sum(x for x, _ in next(iter(pods.values())))


def test_a_negative_running_series_of_another_model_is_a_bad_series_not_a_second_model() -> None:
    """The red team's evil engine ("neg" mode) adds vllm:num_requests_running{model_name="x"} -50 to a good
    page: that series is dropped alone, and the pod is still read (one bad series, never the page)."""
    from ebb.sources.engines.exposition import parse_exposition
    from ebb.sources.engines.models import page_models
    from ebb.sources.engines.profiles import PROFILES
    page = ('vllm:num_requests_running{model_name="m"} 3\nvllm:num_requests_waiting{model_name="m"} 1\n'
            'vllm:num_requests_running{model_name="x"} -50\n')
    assert page_models(parse_exposition(page, source="p"), PROFILES["vllm"]) == ("m",)
