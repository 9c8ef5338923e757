"""Custom engine profiles from YAML (docs/examples/engines.yaml), engine_profile's choices, and profile validation."""

from __future__ import annotations

from pathlib import Path

import pytest

from ebb.errors import ConfigError
from ebb.sources.engines import PROFILES, EngineProfile, HistogramSpec, engine_profile, load_engines_file
from ebb.sources.engines import read_engine_text
from ebb.sources.engines.profiles import parse_selector

EXAMPLE = Path(__file__).resolve().parents[4] / "docs" / "examples" / "engines.yaml"


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "engines.yaml"
    p.write_text(text, encoding="utf-8")
    return p


def test_the_documented_example_loads_and_reads_a_relabelled_vllm_scrape() -> None:
    profiles = load_engines_file(EXAMPLE)
    p = profiles["vllm-relabelled"]
    assert p.running == ("vllm_num_requests_running",) and p.required == ("running", "waiting", "ttft")
    assert p.enable_hint == PROFILES["vllm"].enable_hint  # inherited through `extends: vllm`
    text = ("vllm_num_requests_running{engine=\"0\"} 3\nvllm_num_requests_waiting{engine=\"0\"} 1\n"
            'vllm_time_to_first_token_seconds_bucket{le="0.1"} 2\nvllm_time_to_first_token_seconds_bucket{le="+Inf"} 3\n')
    r = read_engine_text(text, p, source="s")
    assert (r.running, r.waiting, r.histograms["ttft"].count) == (3.0, 1.0, 3.0)
    assert engine_profile("vllm-relabelled", EXAMPLE) == p


def test_a_full_custom_engine_without_extends(tmp_path: Path) -> None:
    path = write(tmp_path, """
version: 1
engines:
  myserve:
    title: My server
    source: our server's metrics.go at v1.2
    running: [my_running]
    waiting: my_waiting
    busy_seconds: ['my_busy_ms_total{phase="prefill"}']
    busy_unit_s: 0.001
    ttft: {names: [my_ttft_ms], unit_s: 0.001}
    default_port: 9100
    metrics_path: /internal/metrics
""")
    p = load_engines_file(path)["myserve"]
    assert p.waiting == ("my_waiting",) and p.busy_unit_s == 0.001 and p.ttft == HistogramSpec(("my_ttft_ms",), 0.001)
    assert (p.default_port, p.metrics_path, p.kv_usage) == (9100, "/internal/metrics", ())
    assert parse_selector(p.busy_seconds[0]).matchers == (("phase", "prefill"),)


@pytest.mark.parametrize("body, key", [
    ("engines:\n  x:\n    title: X\n    source: s\n    running: [r]\n", "engines.x.waiting"),
    ("engines:\n  x:\n    title: X\n    source: s\n    running: [r]\n    waiting: [w]\n    colour: red\n", "engines.x.colour"),
    ("engines:\n  x:\n    title: X\n    source: s\n    running: [bad name]\n    waiting: [w]\n", "engines.x.running"),
    ("engines:\n  x:\n    title: X\n    source: s\n    running: [r]\n    waiting: [w]\n    ttft: {names: [t], unit_s: 0}\n",
     "engines.x.ttft.unit_s"),
    ("engines:\n  x:\n    title: X\n    source: s\n    running: [r]\n    waiting: [w]\n    ttft: {unit_s: 1}\n",
     "engines.x.ttft.names"),
    ("engines:\n  x:\n    title: X\n    source: s\n    running: [r]\n    waiting: [w]\n    default_port: 70000\n",
     "engines.x.default_port"),
    ("engines:\n  x:\n    title: X\n    source: s\n    running: [r]\n    waiting: [w]\n    required: [ttft]\n",
     "engines.x.required"),
    ("engines:\n  x:\n    title: X\n    source: s\n    running: [r]\n    waiting: [w]\n    required: [colour]\n",
     "engines.x.required"),
    ("engines:\n  vllm:\n    title: X\n    source: s\n    running: [r]\n    waiting: [w]\n", "engines.vllm"),
    ("engines:\n  x:\n    extends: vlm\n", "engines.x.extends"),
    ("engines:\n  Bad Name:\n    title: X\n", "engines.'Bad Name'"),
    ("engines: {}\n", "engines"),
    ("version: 2\nengines:\n  x: {}\n", "version"),
    ("enignes:\n  x: {}\n", "enignes"),
    ("engines:\n  x: [1, 2]\n", "engines.x"),
    ("engines:\n  x:\n    title: X\n    source: '  '\n    running: [r]\n    waiting: [w]\n", "engines.x.source"),
])
def test_each_bad_key_is_a_config_error_naming_the_file_and_the_key(tmp_path: Path, body: str, key: str) -> None:
    path = write(tmp_path, body)
    with pytest.raises(ConfigError) as e:
        load_engines_file(path)
    assert str(e.value).startswith(f"{path}: {key}: "), str(e.value)
    assert "(fix: " in str(e.value)


# The review's engines-file fuzz class (T3-L1): each hostile file is one ConfigError naming the key and the fix.
@pytest.mark.parametrize("body, key, says", [
    ("engines:\n  x:\n    extends: vllm\n    ttft: []\n", "engines.x.ttft", "write `ttft: null` for none"),
    ("engines:\n  x:\n    extends: vllm\n    queue: []\n", "engines.x.queue", "empty list"),
    ("engines:\n  x:\n    extends: vllm\n    ttft: {names: [], unit_s: 1}\n", "engines.x.ttft.names", "empty"),
    ("engines:\n  x: {extends: vllm, running: null}\n", "engines.x.running", "leave the key out"),
    ("engines:\n  x:\n    extends: vllm\n    running: ['r{m=\"a\",m=\"b\"}']\n", "engines.x.running",
     "'m' is matched twice"),
    ("engines:\n  x:\n    extends: vllm\n    metrics_path: \"/metrics?x=1#frag\"\n", "engines.x.metrics_path",
     "write the path alone"),
    ("engines:\n  x:\n    extends: vllm\n    ttft: {names: [t], unit_s: 1e-3}\n", "engines.x.ttft.unit_s",
     "'1e-3' is text to YAML"),
    ("engines:\n  x:\n    extends: vllm\n    ttft: {names: [t], unit_s: 1.0e-320}\n", "engines.x.ttft.unit_s",
     "expected a number in [1e-09, 3600]"),
    ("engines:\n  x:\n    extends: vllm\n    busy_unit_s: 1.0e+308\n", "engines.x.busy_unit_s", "in [1e-09, 3600]"),
    ("engines:\n  x:\n    extends: llamacpp\n    required: [ttft, ttft, kv_usage]\n", "engines.x.required",
     "ttft required but given no metric names"),
    ("version: 1.0\nengines:\n  x: {extends: vllm}\n", "version", "write version: 1"),
    ("version: true\nengines:\n  x: {extends: vllm}\n", "version", "write version: 1"),
])
def test_hostile_engines_files_are_one_config_error_naming_key_and_fix(tmp_path: Path, body: str, key: str,
                                                                         says: str) -> None:
    path = write(tmp_path, body)
    with pytest.raises(ConfigError) as e:
        load_engines_file(path)
    assert str(e.value).startswith(f"{path}: {key}: ") and "(fix: " in str(e.value), str(e.value)
    assert says in str(e.value) and "\n" not in str(e.value)


def test_an_empty_label_matcher_matches_samples_without_that_label_as_promql_does() -> None:
    sel = parse_selector('x{a="",b="1"}')
    assert sel.matches((("b", "1"),)) and sel.matches((("a", ""), ("b", "1")))
    assert not sel.matches((("a", "2"), ("b", "1"))) and not sel.matches((("a", ""),))


def test_unreadable_and_broken_files_are_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read engines file"):
        load_engines_file(tmp_path / "absent.yaml")
    with pytest.raises(ConfigError, match="broken YAML"):
        load_engines_file(write(tmp_path, "engines: [\n"))


def test_engine_profile_lists_the_choices() -> None:
    assert engine_profile("vllm") is PROFILES["vllm"]
    with pytest.raises(ConfigError, match=r"unknown engine 'vlm'; choose one of llamacpp, sglang, tgi, triton, vllm"):
        engine_profile("vlm")
    with pytest.raises(ConfigError, match=r"choose one of llamacpp, sglang, tgi, triton, vllm, vllm-relabelled"):
        engine_profile("nope", EXAMPLE)


def test_profiles_validate_their_fields() -> None:
    with pytest.raises(ValueError, match="running and waiting"):
        EngineProfile(name="x", title="X", source="s", running=(), waiting=("w",))
    with pytest.raises(ValueError, match="bad label matcher"):
        EngineProfile(name="x", title="X", source="s", running=("r{bad}",), waiting=("w",))
    with pytest.raises(ValueError, match="not a metric name"):
        EngineProfile(name="x", title="X", source="s", running=("r",), waiting=("1w",))
    with pytest.raises(ValueError, match="unit_s"):
        HistogramSpec(("t",), unit_s=-1.0)
    assert {p.name for p in PROFILES.values()} == {"vllm", "sglang", "tgi", "llamacpp", "triton"}
    assert all(p.required[:2] == ("running", "waiting") and p.source for p in PROFILES.values())
    assert PROFILES["tgi"].ttft is None and "no time-to-first-token histogram" in PROFILES["tgi"].notes
