"""Every exposition file in ../shared/data/engine-metrics/ (one test per file), read with the matching profile.

The exposition blocks are cut out of the saved files by the line ranges given in
``../shared/data/engine-metrics/README.md`` §1 ("emb a–b"), hard-coded below with that README as
the citation. The expected running / waiting / KV values, histogram counts and DCGM fields are read
INDEPENDENTLY from the raw lines with a small regex (``raw``), never with the parser under test.
Files whose block is not parseable as it stands still get a test that states what is dropped and why.
Skipped with the reason when ../shared is absent; failed under CI=true.
"""

from __future__ import annotations

import math
import os
import re
from pathlib import Path

import pytest

from ebb.errors import InputError
from ebb.sources.engines import PROFILES, parse_exposition, read_dcgm, read_engine, read_engine_text
from ebb.sources.engines.reading import assemble_histogram

SHARED = Path(__file__).resolve().parents[4] / ".." / "shared"
DATA = SHARED / "data" / "engine-metrics"


@pytest.fixture(autouse=True)
def _shared_data() -> None:
    if not (DATA / "README.md").is_file():
        msg = f"shared engine-metrics data not present at {DATA}"
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI must provide ../shared: {msg}")
        pytest.skip(msg)


def block(rel: str, first: int, last: int, dedent: int = 0) -> str:
    """Lines ``first``..``last`` (1-based, inclusive) of a saved file, with ``dedent`` leading characters cut."""
    lines = (DATA / rel).read_text(encoding="utf-8").split("\n")[first - 1:last]
    return "\n".join(line[dedent:] for line in lines)


def raw(text: str, name: str) -> list[tuple[str, float]]:
    """(label text, value) of each line ``name{...} value`` / ``name value``: a regex, not the parser under test."""
    pat = re.compile(rf"^[ \t]*{re.escape(name)}(?:\{{([^}}]*)\}})?[ \t]+(\S+)", re.MULTILINE)
    return [(m.group(1) or "", float(m.group(2))) for m in pat.finditer(text)]


def raw_sum(text: str, name: str, must: str = "") -> float:
    return math.fsum(v for labels, v in raw(text, name) if must in labels)


def raw_inf(text: str, family: str) -> float:
    """Sum of the ``le="+Inf"`` bucket lines of a histogram family."""
    return raw_sum(text, family + "_bucket", 'le="+Inf"')


def noise_lines(text: str) -> list[int]:
    """1-based numbers of the lines that are not blank, not a comment and not ``name[{...}] value``."""
    sample = re.compile(r'^[A-Za-z_:][A-Za-z0-9_:]*(\{([A-Za-z_][A-Za-z0-9_]*="[^"]*",? ?)*\})?[ \t]+\S+$')
    return [i for i, line in enumerate(text.split("\n"), 1)
            if line.strip() and not line.strip().startswith("#") and not sample.match(line.strip())]


def dropped_lines(reasons: tuple[str, ...]) -> list[int]:
    return [int(m.group(1)) for r in reasons if (m := re.match(r"line (\d+): ", r))]


# --- vLLM ---------------------------------------------------------------------------------------------------

KOPS_VLLM = "vllm/cncf__k8s-ai-conformance__v1.35__kops__tests__Test_SchedulingOrchestration_PodAutoscaling__output.md"


def test_vllm_kops_full_capture_reads_every_v1_signal_equal_to_the_raw_lines() -> None:
    text = block(KOPS_VLLM, 115, 675)  # README: emb 115–675
    r = read_engine_text(text, PROFILES["vllm"], source=KOPS_VLLM)
    assert r.dropped == ()
    assert r.running == raw_sum(text, "vllm:num_requests_running")
    assert r.waiting == raw_sum(text, "vllm:num_requests_waiting")
    assert r.kv_usage_ratio == max(v for _, v in raw(text, "vllm:kv_cache_usage_perc"))
    assert raw(text, "vllm:engine_sleep_state")  # lines 175-179: awake 1, weights_offloaded 0, discard_all 0
    assert r.asleep is False
    assert r.busy_s_total == raw_sum(text, "vllm:request_prefill_time_seconds_sum")
    assert r.read_from["kv_usage"] == "vllm:kv_cache_usage_perc"  # V1 name first
    for key, family in [("ttft", "vllm:time_to_first_token_seconds"), ("itl", "vllm:inter_token_latency_seconds"),
                        ("e2e", "vllm:e2e_request_latency_seconds"), ("queue", "vllm:request_queue_time_seconds")]:
        h = r.histograms[key]
        assert r.read_from[key] == family
        assert h.count == raw_inf(text, family) == raw_sum(text, family + "_count")
        assert len(h.upper_s) == len(raw(text, family + "_bucket"))
        assert h.upper_s[-1] == math.inf
    # the V1 TTFT bounds of loggers.py line 755 (README §2), +Inf implied
    assert list(r.histograms["ttft"].upper_s[:4]) == [0.001, 0.005, 0.01, 0.02]
    assert r.missing == ()  # every signal the vLLM profile defines is in this capture
    # `_created` series and the engine="0" label are kept as they are
    expo = parse_exposition(text, source=KOPS_VLLM)
    assert expo.series("vllm:estimated_flops_per_gpu_created")[0].value == pytest.approx(1.7740114612872875e9)
    assert expo.series("vllm:num_requests_running")[0].label("engine") == "0"


def test_vllm_kops_whole_transcript_drops_the_json_and_klog_lines_and_reads_the_same() -> None:
    text = (DATA / KOPS_VLLM).read_text(encoding="utf-8")
    whole = read_engine_text(text, PROFILES["vllm"], source=KOPS_VLLM)
    cut = read_engine_text(block(KOPS_VLLM, 115, 675), PROFILES["vllm"], source=KOPS_VLLM)
    assert (whole.running, whole.waiting, whole.kv_usage_ratio) == (cut.running, cut.waiting, cut.kv_usage_ratio)
    assert any(r.startswith("line 768: longer than") for r in whole.dropped)  # the 817 KB JSON line, unread
    assert set(range(908, 928)) <= set(dropped_lines(whole.dropped))  # README: lines 908–927 are klog lines


def test_vllm_aibrix_v0_excerpt_falls_back_to_gpu_cache_usage_and_refuses_the_cut_histogram() -> None:
    rel = "vllm/vllm-project__aibrix__docs__source__features__runtime.rst"
    text = block(rel, 162, 217, dedent=4)  # README: emb 162–217, indented 4 spaces
    r = read_engine_text(text, PROFILES["vllm"], source=rel)
    assert r.dropped == ()
    assert r.running == raw_sum(text, "vllm:num_requests_running") == 0.0
    assert r.waiting == raw_sum(text, "vllm:num_requests_waiting") == 0.0
    assert r.read_from["kv_usage"] == "vllm:gpu_cache_usage_perc"  # V0 name, the fallback
    assert r.kv_usage_ratio == raw_sum(text, "vllm:gpu_cache_usage_perc")
    # the excerpt ends inside iteration_tokens_total: no TTFT/ITL/e2e/queue, no prefill counter
    assert set(r.missing) == {"busy_seconds", "ttft", "itl", "e2e", "queue"}
    hist, why = assemble_histogram(parse_exposition(text, source=rel), "vllm:iteration_tokens_total", 1.0)
    assert hist is None and why is not None and 'no le="+Inf" bucket' in why


def test_vllm_design_doc_blocks_state_what_is_dropped_and_why() -> None:
    rel = "vllm/vllm-project__vllm__docs__design__metrics.md"
    # 74–78: http_* series only (a grep of the scrape): parses, but is not a vLLM engine scrape
    http = block(rel, 74, 78)
    expo = parse_exposition(http, source=rel)
    assert expo.series("http_requests_total")[0].value == raw_sum(http, "http_requests_total") == 201.0
    with pytest.raises(InputError, match="tried vllm:num_requests_running"):
        read_engine(expo, PROFILES["vllm"], source=rel)
    # 323–347: `...` elision lines are dropped (each named by its line); running is read; waiting is not there
    text = block(rel, 323, 347)
    expo = parse_exposition(text, source=rel)
    assert dropped_lines(expo.dropped) == noise_lines(text) == [i for i, ln in enumerate(text.split("\n"), 1)
                                                                 if ln.strip() == "..."]
    assert sum(len(v) for v in expo.samples.values()) == len(raw(text, "vllm:num_requests_running")) + len(
        raw(text, "vllm:generation_tokens_total")) + len(raw(text, "vllm:request_success_total")) + len(
        raw(text, "vllm:time_to_first_token_seconds_bucket")) + len(raw(text, "vllm:time_to_first_token_seconds_count"))
    with pytest.raises(InputError, match="no waiting metric: tried vllm:num_requests_waiting"):
        read_engine(expo, PROFILES["vllm"], source=rel)
    hist, why = assemble_histogram(expo, "vllm:time_to_first_token_seconds", 1.0)
    assert hist is None and why is not None and "+Inf" in why  # the excerpt stops at le="0.1"
    # 368–370: `...` inside the label set cannot be parsed as it stands: the one sample line is dropped
    info = block(rel, 368, 370)
    with pytest.raises(InputError, match=r"no Prometheus exposition sample.*line 3: not exposition"):
        parse_exposition(info, source=rel)


def test_vllm_usage_doc_block_keeps_sum_before_bucket_and_drops_the_prompt_and_elision() -> None:
    rel = "vllm/vllm-project__vllm__docs__usage__metrics.md"
    assert parse_exposition(block(rel, 20, 30, dedent=4), source=rel).dropped == ()  # README: emb 20–30, indent 4
    text = block(rel, 18, 31, dedent=4)  # with the `$ curl` line before it and the trailing `...` after it
    expo = parse_exposition(text, source=rel)
    lines = text.split("\n")
    assert dropped_lines(expo.dropped) == noise_lines(text) == [1, 14]
    assert lines[0].startswith("$ curl") and lines[13] == "..."
    buckets = expo.series("vllm:iteration_tokens_total_bucket")
    assert [b.value for b in buckets] == [v for _, v in raw(text, "vllm:iteration_tokens_total_bucket")]
    assert expo.series("vllm:iteration_tokens_total_sum")[0].value == raw_sum(text, "vllm:iteration_tokens_total_sum")
    assert expo.types["vllm:iteration_tokens_total"] == "histogram"
    with pytest.raises(InputError, match="no running metric"):  # an excerpt of one histogram, no gauges
        read_engine(expo, PROFILES["vllm"], source=rel)


# --- SGLang -------------------------------------------------------------------------------------------------

def test_sglang_v058_docs_capture_reads_current_names_and_the_older_itl_histogram() -> None:
    rel = "sglang/sgl-project__sglang__docs__references__production_metrics.md"
    text = block(rel, 11, 125)  # README: emb 11–125 (line 10 is the curl command)
    r = read_engine_text(text, PROFILES["sglang"], source=rel)
    assert r.dropped == ()
    assert (r.running, r.waiting) == (raw_sum(text, "sglang:num_running_reqs"), raw_sum(text, "sglang:num_queue_reqs"))
    assert (r.running, r.waiting) == (162.0, 2826.0)
    assert r.kv_usage_ratio == raw_sum(text, "sglang:token_usage") == 0.28
    assert r.read_from["itl"] == "sglang:time_per_output_token_seconds"  # the sample predates inter_token_latency
    for key, family in [("ttft", "sglang:time_to_first_token_seconds"), ("e2e", "sglang:e2e_request_latency_seconds"),
                        ("itl", "sglang:time_per_output_token_seconds")]:
        assert r.histograms[key].count == raw_inf(text, family) == raw_sum(text, family + "_count")
    assert r.histograms["itl"].count == 7.400757e6  # scientific notation
    assert "queue" in r.missing


def test_sglang_nov_2024_capture_reads_the_first_names_with_the_name_label() -> None:
    rel = "sglang/older-5bc2508b8/sgl-project__sglang__docs__references__production_metrics.md"
    text = block(rel, 10, 186)  # README: emb 10–186
    r = read_engine_text(text, PROFILES["sglang"], source=rel)
    assert r.dropped == ()
    assert r.read_from["running"] == "sglang:num_requests_running"
    assert r.read_from["waiting"] == "sglang:num_requests_waiting"
    assert r.running == raw_sum(text, "sglang:num_requests_running")
    assert r.waiting == raw_sum(text, "sglang:num_requests_waiting")
    assert r.kv_usage_ratio == raw_sum(text, "sglang:token_usage") == 0.01
    assert r.read_from["queue"] == "sglang:waiting_request_latency_seconds"
    for key, family in [("ttft", "sglang:time_to_first_token_seconds"), ("itl", "sglang:time_per_output_token_seconds"),
                        ("e2e", "sglang:e2e_request_latency_seconds"), ("queue", "sglang:waiting_request_latency_seconds")]:
        assert r.histograms[key].count == raw_inf(text, family) == raw_sum(text, family + "_count")


# --- Triton -------------------------------------------------------------------------------------------------

def test_triton_server_doc_examples_parse_and_the_malformed_histogram_is_not_guessed() -> None:
    rel = "triton/triton-inference-server__server__docs__user_guide__metrics.md"
    # 231–239: TYPE names nv_first_response_histogram_ms, samples lack `_bucket`, and `version="1", le="100"`
    hist_text = block(rel, 231, 239)
    expo = parse_exposition(hist_text, source=rel)
    assert expo.dropped == ()
    family = "nv_inference_first_response_histogram_ms"
    assert [s.value for s in expo.series(family)] == [v for _, v in raw(hist_text, family)]
    assert [s.label("le") for s in expo.series(family)] == ["100", "500", "2000", "5000", "+Inf"]
    assert expo.series(family + "_count")[0].value == raw_sum(hist_text, family + "_count") == 37.0
    assert assemble_histogram(expo, family, 1e-3) == (None, None)  # no `_bucket` samples: not a histogram we read
    # 302–310: a summary with quantiles; 318–319: two counters with no HELP/TYPE at all
    summary = block(rel, 302, 310)
    sexpo = parse_exposition(summary, source=rel)
    assert [s.label("quantile") for s in sexpo.series("nv_inference_queue_summary_us")] == [
        "0.5", "0.9", "0.95", "0.99", "0.999"]
    counters = block(rel, 318, 319)
    cexpo = parse_exposition(counters, source=rel)
    assert cexpo.series("nv_inference_request_success")[0].value == raw_sum(counters, "nv_inference_request_success")
    assert cexpo.series("nv_inference_queue_duration_us")[0].value == 11110.0
    # none of the blocks has a running-requests gauge: plain Triton has none (the profile says so)
    with pytest.raises(InputError, match=r"triton.*tried nv_trt_llm_request_metrics\{request_type=\"active\"\}"):
        read_engine(expo, PROFILES["triton"], source=rel)


def test_triton_tensorrtllm_capture_reads_running_waiting_kv_and_max_from_the_backend_gauges() -> None:
    rel = "triton/triton-inference-server__tensorrtllm_backend__README.md"
    text = block(rel, 428, 459) + "\n" + block(rel, 478, 507)  # README: inflight batcher + base nv_inference_*
    r = read_engine_text(text, PROFILES["triton"], source=rel)
    assert r.dropped == ()
    req = "nv_trt_llm_request_metrics"
    assert r.running == raw_sum(text, req, 'request_type="active"') == 0.0
    assert r.waiting == raw_sum(text, req, 'request_type="waiting"') == 1.0
    assert r.max_concurrency == raw_sum(text, req, 'request_type="max"') == 512
    assert r.kv_usage_ratio == raw_sum(text, "nv_trt_llm_kv_cache_block_metrics", '"fraction"') == 0.4875
    assert r.busy_s_total == raw_sum(text, "nv_inference_compute_infer_duration_us") * 1e-6
    assert "ttft" in r.missing  # no first-response histogram in this capture
    v1 = block(rel, 467, 471)  # the V1-model variant: parses, 3 samples
    assert [s.value for s in parse_exposition(v1, source=rel).series("nv_trt_llm_v1_metrics")] == [20.0, 0.0, 5.0]


# --- llama.cpp (captured here) -------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["metrics_busy_4slots_6deferred.txt", "metrics_idle.txt"])
def test_llamacpp_captures_read_processing_and_deferred(name: str) -> None:
    rel = f"llamacpp/captured-here/{name}"
    text = (DATA / rel).read_text(encoding="utf-8")
    r = read_engine_text(text, PROFILES["llamacpp"], source=rel)
    assert r.dropped == ()
    assert r.running == raw_sum(text, "llamacpp:requests_processing")
    assert r.waiting == raw_sum(text, "llamacpp:requests_deferred")
    assert r.busy_s_total == raw_sum(text, "llamacpp:prompt_seconds_total")
    assert r.histograms == {} and "kv_usage" in r.missing  # removed by #13660; no histograms at all
    if "busy" in name:
        assert (r.running, r.waiting) == (4.0, 6.0)  # captured-here/README.md


# --- DCGM exporter ------------------------------------------------------------------------------------------

DCGM_FIELDS = {  # GpuReading field -> (DCGM field, scale)
    "gr_engine_active_ratio": ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", 1.0),
    "tensor_active_ratio": ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", 1.0),
    "dram_active_ratio": ("DCGM_FI_PROF_DRAM_ACTIVE", 1.0),
    "pcie_tx_bytes_per_s": ("DCGM_FI_PROF_PCIE_TX_BYTES", 1.0),
    "pcie_rx_bytes_per_s": ("DCGM_FI_PROF_PCIE_RX_BYTES", 1.0),
    "fb_used_bytes": ("DCGM_FI_DEV_FB_USED", 2.0**20),
    "gpu_util_ratio": ("DCGM_FI_DEV_GPU_UTIL", 0.01),
}


def check_dcgm(text: str, rel: str) -> list[int]:
    """Read ``text`` and compare every GPU's fields with the raw lines; returns the GPU indices found."""
    gpus = read_dcgm(parse_exposition(text, source=rel), source=rel)
    for g in gpus:
        assert g.sm_active_ratio is None and g.sm_occupancy_ratio is None  # off in the default CSV (README §2)
        for field, (dcgm, scale) in DCGM_FIELDS.items():
            want = [v for labels, v in raw(text, dcgm) if f'gpu="{g.gpu}"' in labels]
            got = getattr(g, field)
            if want:
                assert got == pytest.approx(want[0] * scale, rel=1e-12), (rel, g.gpu, field)
            else:
                assert got is None, (rel, g.gpu, field)
        if g.gr_engine_active_ratio is not None:
            assert g.busy_ratio == g.gr_engine_active_ratio and not g.util_fallback
        elif g.gpu_util_ratio is not None:
            assert g.busy_ratio == g.gpu_util_ratio and g.util_fallback
    return [int(g.gpu) for g in gpus]


def test_dcgm_kops_l4_capture_and_its_repeat() -> None:
    rel = "dcgm/cncf__k8s-ai-conformance__v1.35__kops__tests__TestObservability_AcceleratorMetrics_ViaDCGM__output.md"
    first, again = block(rel, 52, 120), block(rel, 130, 198)  # README: emb 52–120; 130–198 repeat it
    assert check_dcgm(first, rel) == [0]
    a = read_dcgm(parse_exposition(first, source=rel), source=rel)
    assert a == read_dcgm(parse_exposition(again, source=rel), source=rel)
    assert a[0].model == "NVIDIA L4" and a[0].hostname == "i-030791dc5a37cd257"


def test_dcgm_upcloud_l40s_capture() -> None:
    rel = "dcgm/cncf__k8s-ai-conformance__v1.35__upcloud__accelerator-metrics.md"
    text = block(rel, 38, 106)  # README: emb 38–106
    assert check_dcgm(text, rel) == [0]
    assert parse_exposition(text, source=rel).dropped == ()


def test_dcgm_ericsson_t4_capture_without_help_or_type_lines() -> None:
    rel = "dcgm/cncf__k8s-ai-conformance__v1.35__ericsson-ccd__accelerator_metrics.md"
    text = block(rel, 16, 35)  # README: emb 16–35, samples only
    expo = parse_exposition(text, source=rel)
    assert expo.types == {} and expo.dropped == ()
    assert check_dcgm(text, rel) == [0]
    g = read_dcgm(expo, source=rel)[0]
    assert (g.gr_engine_active_ratio, g.busy_ratio, g.gpu_util_ratio) == (0.156205, 0.156205, 0.91)


def test_dcgm_viettel_capture_drops_every_line_with_an_elided_label_set() -> None:
    rel = "dcgm/cncf__k8s-ai-conformance__v1.35__viettel-ai-platform__accelerator_metrics.md"
    text = block(rel, 49, 68)  # README: emb 49–68 (grep-filtered)
    expo = parse_exposition(text, source=rel)
    elided = [i for i, line in enumerate(text.split("\n"), 1) if ",...," in line]
    assert len(elided) == 18 and dropped_lines(expo.dropped) == elided  # `{gpu="0",...,modelName=...,...}`
    # only the two SM_CLOCK lines survive: both GPUs are seen, and none of the fields Ebb reads is invented
    # although the raw lines hold values for them (GPU_UTIL 0, FB_USED 0 ...): they are not attributed by guess
    assert [v for _, v in raw(text, "DCGM_FI_DEV_GPU_UTIL")] == [0.0, 0.0]
    gpus = read_dcgm(expo, source=rel)
    assert [g.gpu for g in gpus] == ["0", "1"]
    assert all(g.gpu_util_ratio is None and g.gr_engine_active_ratio is None and g.busy_ratio is None for g in gpus)


def test_dcgm_rafay_per_metric_snippets_drop_the_markdown_between_them() -> None:
    rel = "dcgm/cncf__k8s-ai-conformance__v1.35__rafay__accelator_metrics.md"
    text = block(rel, 49, 154)  # README: fenced snippets at 49–154, Markdown between them
    expo = parse_exposition(text, source=rel)
    assert dropped_lines(expo.dropped) == noise_lines(text)
    assert check_dcgm(text, rel) == [0]


def test_dcgm_vks_vgpu_capture_drops_the_curl_connection_line() -> None:
    rel = "dcgm/cncf__k8s-ai-conformance__v1.35__vks__accelerator_metrics.md"
    text = block(rel, 45, 78)  # README: emb 45–77, and line 78 is curl's `* Connection #0 ... left intact`
    expo = parse_exposition(text, source=rel)
    assert dropped_lines(expo.dropped) == [34]  # file line 78
    assert check_dcgm(text, rel) == [0]
    assert read_dcgm(expo, source=rel)[0].model == "GRID A100-40C"


def test_dcgm_exporter_readme_blocks_keep_the_blank_sentinel_out_of_the_readings() -> None:
    rel = "dcgm/NVIDIA__dcgm-exporter__README.md"
    for first, last in [(16, 25), (68, 77), (155, 164)]:  # README: emb 16–25, 68–77, 155–164
        text = block(rel, first, last)
        expo = parse_exposition(text, source=rel)
        assert dropped_lines(expo.dropped) == noise_lines(text)  # the `...` abridgements
        assert expo.series("DCGM_FI_DEV_SM_CLOCK")[0].value == raw_sum(text, "DCGM_FI_DEV_SM_CLOCK") == 139.0
        assert expo.series("DCGM_FI_DEV_MEMORY_TEMP")[0].value == 9223372036854775794.0  # kept as parsed
        assert expo.types["DCGM_FI_DEV_MEMORY_TEMP"] == "gauge"  # all HELP/TYPE first, samples later
        (g,) = read_dcgm(expo, source=rel)
        assert g.uuid == "GPU-604ac76c-d9cf-fef3-62e9-d92044ab6e52"  # `gpu="0", UUID=...`: space after the comma
        assert g.busy_ratio is None and g.fb_used_bytes is None  # the abridged blocks carry none of our fields


# --- the fast path agrees with prometheus_client on every saved file ----------------------------------------

def outcome(text: str, parser: str) -> object:
    try:
        e = parse_exposition(text, source="agree", parser=parser)
    except InputError as exc:
        return ("InputError", str(exc))
    return dict(e.samples), dict(e.types), sorted(e.dropped)


EXPOSITION_FILES = sorted(str(p.relative_to(DATA)) for p in DATA.rglob("*")
                          if p.is_file() and "/source/" not in f"/{p.relative_to(DATA)}" and p.suffix in (".md", ".rst", ".txt")
                          and p.name != "README.md") if DATA.is_dir() else ["(no shared data)"]


@pytest.mark.parametrize("rel", EXPOSITION_FILES)
def test_fast_parser_agrees_with_prometheus_client_on_the_whole_file(rel: str) -> None:
    text = (DATA / rel).read_text(encoding="utf-8")
    fast = outcome(text, "fast")
    assert fast == outcome(text, "prometheus_client")
    assert isinstance(fast, tuple) and len(fast) == 3 and fast[0]  # every saved file holds samples


@pytest.mark.parametrize("rel, first, last, dedent", [
    (KOPS_VLLM, 115, 675, 0), ("vllm/vllm-project__aibrix__docs__source__features__runtime.rst", 162, 217, 4),
    ("vllm/vllm-project__vllm__docs__design__metrics.md", 323, 347, 0),
    ("vllm/vllm-project__vllm__docs__usage__metrics.md", 18, 31, 4),
    ("sglang/sgl-project__sglang__docs__references__production_metrics.md", 11, 125, 0),
    ("sglang/older-5bc2508b8/sgl-project__sglang__docs__references__production_metrics.md", 10, 186, 0),
    ("triton/triton-inference-server__server__docs__user_guide__metrics.md", 231, 239, 0),
    ("triton/triton-inference-server__tensorrtllm_backend__README.md", 428, 507, 0),
    ("dcgm/NVIDIA__dcgm-exporter__README.md", 16, 25, 0),
    ("dcgm/cncf__k8s-ai-conformance__v1.35__vks__accelerator_metrics.md", 45, 78, 0),
    ("dcgm/cncf__k8s-ai-conformance__v1.35__viettel-ai-platform__accelerator_metrics.md", 49, 68, 0),
])
def test_fast_parser_agrees_with_prometheus_client_on_each_block(rel: str, first: int, last: int, dedent: int) -> None:
    text = block(rel, first, last, dedent)
    assert outcome(text, "fast") == outcome(text, "prometheus_client")


@pytest.mark.parametrize(("level", "state"), [(1, "weights_offloaded"), (2, "discard_all")])
def test_the_kops_capture_put_to_sleep_reads_asleep(level: int, state: str) -> None:
    """The real page with vLLM's record_sleep_state(sleep=1, level) applied (loggers.py 1218-1235:
    awake 0, the level's state 1) reads asleep; a half wake (awake 0, no level) too."""
    text = block(KOPS_VLLM, 115, 675)
    awake = 'sleep_state="awake"} 1.0'
    assert awake in text
    slept = text.replace(awake, 'sleep_state="awake"} 0.0').replace(f'sleep_state="{state}"}} 0.0',
                                                                     f'sleep_state="{state}"}} 1.0')
    assert read_engine_text(slept, PROFILES["vllm"], source=KOPS_VLLM).asleep is True
    half = text.replace(awake, 'sleep_state="awake"} 0.0')
    assert read_engine_text(half, PROFILES["vllm"], source=KOPS_VLLM).asleep is True
