"""The --config file reader: sections and keys are checked by name, values by type, and the merge
puts the given flags over the file over the defaults."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from ebb.config.run_settings import RUN_GROUPS, LoopSettings, RunSettings, SourceSettings, run_settings
from ebb.config.settings_file import (
    field_docs,
    field_help,
    group_fields,
    key_sections,
    merge_settings,
    parse_settings,
    read_settings_file,
    settings_yaml,
)
from ebb.config.simulate_settings import SIMULATE_GROUPS, simulate_settings
from ebb.errors import ConfigError

ALL_GROUPS = (*RUN_GROUPS, *SIMULATE_GROUPS)


def _refused(text: str, groups: tuple[type, ...] = RUN_GROUPS) -> str:
    with pytest.raises(ConfigError) as exc:
        parse_settings(text, "ebb.yaml", groups)
    message = str(exc.value)
    assert "\n" not in message and message.startswith("ebb.yaml: ") and "(fix: " in message, message
    return message


def test_a_file_sets_the_keys_it_names_and_an_empty_file_sets_none() -> None:
    file = parse_settings("loop: {mode: act, interval_s: 2}\nsource:\n  agent: [http://a:1, http://b:1]\n",
                          "ebb.yaml", RUN_GROUPS)
    assert file.values("loop") == {"mode": "act", "interval_s": 2.0}
    assert file.values("source") == {"agent": ("http://a:1", "http://b:1")}
    assert file.values("ledger") == {}
    for empty in ("", "# nothing\n", "loop:\n"):
        assert parse_settings(empty, "ebb.yaml", RUN_GROUPS).sections == {}


def test_an_unknown_section_is_named_with_the_known_ones() -> None:
    msg = _refused("loops: {mode: act}\n")
    assert "loops: unknown section" in msg and "did you mean loop?" in msg
    msg = _refused("telemetry: {}\n")
    assert "the sections are loop, source, actuator, policy, ledger, security" in msg
    assert "mode is a key: write it under loop:" in _refused("mode: act\n")


def test_an_unknown_key_is_named_with_its_fix() -> None:
    assert "loop.prometheus_url: unknown key (fix: prometheus_url belongs in section source:)" in _refused(
        "loop: {prometheus_url: http://p:9090}\n")
    assert "write interval_s: keys are the flags' long names with underscores" in _refused(
        "loop: {interval-s: 2}\n")
    assert "did you mean max_staleness_s?" in _refused("loop: {max_stalenes_s: 2}\n")
    assert "the keys of loop: are mode, interval_s" in _refused("loop: {colour: blue}\n")


@pytest.mark.parametrize(("text", "said"), [
    ("loop: {interval_s: fast}\n", "loop.interval_s: expected a number, got 'fast' (fix: write a number, e.g. "
                                   "interval_s: 1.0)"),
    ("loop: {interval_s: true}\n", "loop.interval_s: expected a number, got True"),
    ("loop: {cycles: 2.5}\n", "loop.cycles: expected a whole number, got 2.5"),
    ("loop: {cycles: false}\n", "loop.cycles: expected a whole number, got False"),
    ("loop: {log_json: 'yes please'}\n", "loop.log_json: expected true or false"),
    ("loop: {mode: null}\n", "loop.mode: expected a string, got null"),
    ("loop: {mode: [act]}\n", "loop.mode: expected a string, got ['act']"),
    ("source: {agent: http://a:1}\n", "source.agent: expected a list of strings"),
    ("source: {agent: [1, 2]}\n", "source.agent: expected a list of strings"),
    ("policy: {workloads: 3}\n", "policy.workloads: expected a file path"),
    ("loop: [mode, act]\n", "loop: expected a mapping of settings, got list"),
    ("- loop\n", "<top>: expected a mapping of sections, got list"),
    ("loop: {mode: [\n", "line 2: broken YAML"),
])
def test_a_value_of_the_wrong_type_is_one_line_naming_the_key(text: str, said: str) -> None:
    assert said in _refused(text)


def test_numbers_may_be_integers_and_strings_may_be_integers() -> None:
    file = parse_settings("input: {time_col: 0, peak_replicas: 20, load_scale: 2}\nmodel: {slo_ttft_ms: 800}\n",
                          "sim.yaml", SIMULATE_GROUPS)
    assert file.values("input") == {"time_col": "0", "peak_replicas": "20", "load_scale": 2.0}
    assert file.values("model") == {"slo_ttft_ms": 800.0}
    assert isinstance(file.values("model")["slo_ttft_ms"], float)


@pytest.mark.parametrize("key", ["time_col", "count_col", "tokens_in_col", "tokens_out_col", "service_time_column",
                                 "peak_replicas", "servegen_client"])
def test_an_index_a_count_or_a_client_id_may_be_an_unquoted_integer(key: str) -> None:
    assert parse_settings(f"input: {{{key}: 3}}\n", "sim.yaml", SIMULATE_GROUPS).values("input") == {key: "3"}


@pytest.mark.parametrize(("text", "key"), [
    ("input: {window_s: 10:50}\n", "input.window_s"),  # YAML 1.1: base 60, the integer 650
    ("input: {trace: 2023}\n", "input.trace"),
    ("source: {prometheus_selector: 1_000}\n", "source.prometheus_selector"),
    ("ledger: {candidate_id: 0x1f}\n", "ledger.candidate_id"),
    ("loop: {mode: yes}\n", "loop.mode"),
    ("input: {time_col: 1.5}\n", "input.time_col"),
])
def test_a_number_yaml_read_from_unquoted_text_is_refused_where_a_string_is_meant(text: str, key: str) -> None:
    """Before, ``window_s: 10:50`` silently became the window '650', and any integer any string."""
    groups = SIMULATE_GROUPS if text.startswith("input") else RUN_GROUPS
    with pytest.raises(ConfigError) as exc:
        parse_settings(text, "f.yaml", groups)
    said = str(exc.value)
    assert said.startswith(f"f.yaml: {key}: expected a string, got ") and "(fix: quote it" in said and "\n" not in said


def test_an_alias_bomb_is_refused_by_the_bounded_loader() -> None:
    bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{c}: &{c} [{', '.join(['*' + p] * 10)}]\n" for p, c in zip("abcdefg", "bcdefgh", strict=True))
    assert "nodes" in _refused(bomb)


def test_an_unreadable_file_is_one_line_naming_it(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"missing.yaml: cannot read settings file \(--config\)"):
        read_settings_file(tmp_path / "missing.yaml", RUN_GROUPS)


def test_the_given_flags_win_over_the_file_which_wins_over_the_defaults() -> None:
    file = parse_settings("loop: {mode: act, interval_s: 2}\nsource: {source: prometheus, prometheus_url: "
                          "'http://p:9090'}\n", "ebb.yaml", RUN_GROUPS)
    s = run_settings({"interval_s": 3.0, "agent": ["http://a:1"]}, file)
    assert (s.loop.mode, s.loop.interval_s, s.loop.max_staleness_s) == ("act", 3.0, LoopSettings.max_staleness_s)
    assert s.source == SourceSettings(source="prometheus", prometheus_url="http://p:9090", agent=("http://a:1",))
    assert run_settings({}) == run_settings({}, parse_settings("", "empty.yaml", RUN_GROUPS))


def test_a_merged_group_is_checked_on_its_merged_values() -> None:
    file = parse_settings("policy: {react_ms: 1500}\n", "ebb.yaml", RUN_GROUPS)
    with pytest.raises(ConfigError, match="--react-ms must be within 0 and the cycle"):
        run_settings({}, file)
    assert run_settings({"interval_s": 2.0}, file).react_s == 1.5  # the flag makes room for it


def test_a_flag_that_is_no_key_is_a_wiring_error() -> None:
    with pytest.raises(ValueError, match="no settings key"):
        merge_settings(RUN_GROUPS, {"colour": "blue"}, None)


def test_keys_are_unique_within_each_command() -> None:
    assert len(key_sections(RUN_GROUPS)) == sum(len(dataclasses.fields(g)) for g in RUN_GROUPS)
    assert len(key_sections(SIMULATE_GROUPS)) == sum(len(dataclasses.fields(g)) for g in SIMULATE_GROUPS)


@pytest.mark.parametrize("group", ALL_GROUPS, ids=lambda g: g.__name__)
def test_every_field_documents_its_meaning_then_its_unit_default_and_why(group: type) -> None:
    docs = field_docs(group)
    for name in group_fields(group):
        assert name in docs, f"{group.__name__}.{name} has no docstring"
        first, _, rest = docs[name].partition("\n\n")
        assert first.strip() and rest.strip(), f"{group.__name__}.{name}: want the help line, then more"
        assert "\n" not in field_help(group, name)


def test_printed_settings_read_back_as_the_same_settings(tmp_path: Path) -> None:
    s = run_settings({"mode": "act", "agent": ["http://a:1"], "gates": Path("/etc/e.yaml"), "cycles": 3})
    path = tmp_path / "printed.yaml"
    path.write_text(settings_yaml(s.groups))
    assert run_settings({}, read_settings_file(path, RUN_GROUPS)) == s
    sim = simulate_settings({"window_s": "10:20", "peak_replicas": "off", "json": Path("-")})
    path.write_text(settings_yaml(sim.groups))
    assert simulate_settings({}, read_settings_file(path, SIMULATE_GROUPS)) == sim


@settings(max_examples=60, deadline=None)
@given(interval_s=st.floats(0.2, 60.0), staleness_s=st.floats(0.1, 600.0), workers=st.integers(1, 64),
       selector=st.none() | st.text(max_size=20), agents=st.lists(st.text(min_size=1, max_size=12), max_size=3),
       log_json=st.none() | st.booleans())
@example(interval_s=1.0, staleness_s=1.0, workers=1, selector=" a\u2028b ", agents=["\x85"], log_json=None)
def test_any_printed_run_settings_read_back_equal(interval_s: float, staleness_s: float, workers: int,
                                                  selector: str | None, agents: list[str],
                                                  log_json: bool | None) -> None:
    s = run_settings({"interval_s": interval_s, "max_staleness_s": staleness_s, "workers": workers,
                      "prometheus_selector": selector, "agent": agents, "log_json": log_json})
    back = run_settings({}, parse_settings(settings_yaml(s.groups), "printed.yaml", RUN_GROUPS))
    assert back == s and isinstance(back, RunSettings)
