"""`ebb probe` without --engine tells the engine by its metric names; a wrong --engine says what the page looks
like; a page of several models shows each model's figures apart (never summed) and --model reads one.

Real captures from ../shared/data/engine-metrics (skipped with the reason when absent, failed under CI=true).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from ebb.cli.main import app

DATA = Path(__file__).resolve().parents[3] / ".." / "shared" / "data" / "engine-metrics"
RUN = "import ebb.cli.main as m; m.main()"
CAPTURES = {  # engine -> (saved file, first line, last line): README §1 "emb a–b"
    "vllm": ("vllm/cncf__k8s-ai-conformance__v1.35__kops__tests__Test_SchedulingOrchestration_PodAutoscaling__output.md",
             115, 675),
    "sglang": ("sglang/sgl-project__sglang__docs__references__production_metrics.md", 11, 125),
    "triton": ("triton/triton-inference-server__tensorrtllm_backend__README.md", 428, 459),
    "llamacpp": ("llamacpp/captured-here/metrics_busy_4slots_6deferred.txt", 1, 10_000),
}
TWO_MODELS = "".join(f'vllm:num_requests_running{{engine="0",model_name="{m}"}} {r}\n'
                     f'vllm:num_requests_waiting{{engine="0",model_name="{m}"}} {w}\n'
                     f'vllm:kv_cache_usage_perc{{engine="0",model_name="{m}"}} {kv}\n'
                     for m, r, w, kv in (("llama-8b", 3, 1, 0.25), ("qwen-7b", 5, 4, 0.75)))


def page(tmp_path: Path, engine: str) -> Path:
    if not (DATA / "README.md").is_file():
        msg = f"shared engine-metrics data not present at {DATA}"
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI must provide ../shared: {msg}")
        pytest.skip(msg)
    rel, first, last = CAPTURES[engine]
    out = tmp_path / f"{engine}.txt"
    out.write_text("\n".join((DATA / rel).read_text(encoding="utf-8").split("\n")[first - 1:last]) + "\n")
    return out


def probe(*args: str) -> dict[str, Any]:
    res = CliRunner().invoke(app, ["probe", *args, "--json"])
    assert res.exit_code == 0, (res.output, res.exception)
    out: dict[str, Any] = json.loads(res.stdout)
    return out


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", RUN, "probe", *args], capture_output=True, text=True, timeout=60,
                          env=os.environ | {"COLUMNS": "400"}, check=False)


@pytest.mark.parametrize("engine", sorted(CAPTURES))
def test_a_real_capture_needs_no_engine_flag_and_reads_as_with_it(tmp_path: Path, engine: str) -> None:
    f = page(tmp_path, engine)
    told = probe(str(f), "--max-concurrency", "8")
    named = probe("--engine", engine, str(f), "--max-concurrency", "8")
    assert told["engine"] == engine and told["engine_from"] == "metric names" and named["engine_from"] == "--engine"
    for key in ("running", "waiting", "kv_usage_ratio", "slot_ratio", "latency", "read_from"):
        assert told[key] == named[key], key
    assert len(told["models"]) <= 1


def test_a_real_vllm_capture_probed_as_sglang_says_it_looks_like_vllm_in_one_line(tmp_path: Path) -> None:
    res = cli("--engine", "sglang", str(page(tmp_path, "vllm")))
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2 and res.stdout == "" and len(lines) == 1 and "Traceback" not in res.stderr
    assert "looks like vLLM" in lines[0] and "use --engine vllm" in lines[0]


def test_a_page_of_no_known_engine_asks_for_the_engine_in_one_line(tmp_path: Path) -> None:
    f = tmp_path / "other.txt"
    f.write_text("# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total 12.5\n")
    res = cli(str(f))
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1
    assert "cannot tell the engine from the metric names" in res.stderr and "--engine" in res.stderr
    assert cli(str(f), "--engines-file", str(f)).returncode == 2  # a custom engine is always named


def test_a_two_model_page_shows_each_model_apart_and_never_their_sum(tmp_path: Path) -> None:
    f = tmp_path / "two.txt"
    f.write_text(TWO_MODELS)
    res = cli(str(f))
    assert res.returncode == 0, res.stderr
    assert "model llama-8b" in res.stdout and "model qwen-7b" in res.stdout
    running = [line.split()[1] for line in res.stdout.splitlines() if line.strip().startswith("running")]
    assert running == ["3", "5"]  # never 8
    assert "2 models on this page (model_name: llama-8b, qwen-7b)" in res.stdout and "--model NAME" in res.stdout
    j = probe(str(f))
    assert j["models"] == ["llama-8b", "qwen-7b"] and j["model"] is None and "running" not in j
    assert {m: (r["running"], r["waiting"], r["kv_usage_ratio"]) for m, r in j["by_model"].items()} == {
        "llama-8b": (3.0, 1.0, 0.25), "qwen-7b": (5.0, 4.0, 0.75)}


def test_model_reads_one_model_and_an_unknown_or_unlabelled_one_exits_2(tmp_path: Path) -> None:
    f = tmp_path / "two.txt"
    f.write_text(TWO_MODELS)
    j = probe(str(f), "--model", "qwen-7b", "--max-concurrency", "10")
    assert (j["model"], j["running"], j["waiting"], j["slot_ratio"]) == ("qwen-7b", 5.0, 4.0, 0.75)
    assert j["models"] == ["llama-8b", "qwen-7b"]
    unknown = cli(str(f), "--model", "gpt")
    assert unknown.returncode == 2 and "no running series of model 'gpt'" in unknown.stderr
    unlabelled = cli("--engine", "tgi", str(f), "--model", "m")
    assert unlabelled.returncode == 2 and "labels no model" in unlabelled.stderr


def test_two_scrapes_of_a_two_model_page_give_each_model_its_own_interval(tmp_path: Path) -> None:
    def scrape(busy_a: float, busy_b: float) -> str:
        return TWO_MODELS + (f'vllm:request_prefill_time_seconds_sum{{engine="0",model_name="llama-8b"}} {busy_a}\n'
                             f'vllm:request_prefill_time_seconds_sum{{engine="0",model_name="qwen-7b"}} {busy_b}\n')
    before, after = tmp_path / "a.txt", tmp_path / "b.txt"
    before.write_text(scrape(10.0, 20.0))
    after.write_text(scrape(11.0, 24.0))
    j = probe(str(before), str(after), "--interval-s", "10")
    assert j["by_model"]["llama-8b"]["busy_ratio"] == pytest.approx(0.1)
    assert j["by_model"]["qwen-7b"]["busy_ratio"] == pytest.approx(0.4)
