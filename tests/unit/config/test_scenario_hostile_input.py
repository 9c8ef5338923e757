"""Hostile cluster scenarios (issue 32, item 9) are refused while parsing, in one line naming the key and the fix."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ebb.config.scenario import MAX_SERVICE_SECONDS, MAX_ZONES, load_scenario, parse_scenario
from ebb.config.workloads import DEFAULT_WORKLOADS_YAML
from ebb.errors import ConfigError

BASE = """name: tiny
duration_s: 600
zones: {a: 4}
services:
  - {name: web, namespace: shop, class: order-fulfilment, arrivals: {bundled: azure-code}, capacity_rps: 3}
"""


def _refusal(text: str, base: Path | None = None) -> str:
    with pytest.raises(ConfigError) as err:
        parse_scenario(text, source="s.yaml", base=base)
    msg = str(err.value)
    assert "\n" not in msg and "fix:" in msg
    return msg


@pytest.mark.parametrize("name", ["x{i:>900000000}", "x{client.__class__.__mro__}{0}", "x{client!r}", "{0}",
                                  "x{i", "x}"])
def test_a_generate_name_with_any_format_field_but_i_and_client_is_refused(name: str) -> None:
    text = BASE + f'generate:\n  - {{servegen: m, clients: 2, name: "{name}", class: order-fulfilment}}\n'
    assert "s.yaml: generate[0].name:" in _refusal(text)


def test_a_generate_name_with_i_client_and_escaped_braces_is_kept_for_expansion() -> None:
    text = BASE + 'generate:\n  - {servegen: m, clients: 2, name: "x-{i}-{client}-{{lit}}", class: order-fulfilment}\n'
    assert parse_scenario(text, source="s.yaml").generate[0]["name"] == "x-{i}-{client}-{{lit}}"


@pytest.mark.parametrize(("old", "new", "key"), [
    ("{bundled: azure-code}", "{servegen: m, client: 7, rate_scale: -5}", "services[0].arrivals.rate_scale"),
    ("{bundled: azure-code}", "{servegen: m, client: 7, rate_scale: .nan}", "services[0].arrivals.rate_scale"),
    ("{bundled: azure-code}", "{servegen: m, client: -1}", "services[0].arrivals.client"),
    ("{bundled: azure-code}", "{servegen: m}", "services[0].arrivals.client"),
    ("{bundled: azure-code}", "{bundled: azure-code, rate: 3}", "services[0].arrivals.rate"),
    ("{bundled: azure-code}", "{bundled: [1]}", "services[0].arrivals.bundled"),
    ("{bundled: azure-code}", "{azure: shop}", "services[0].arrivals.azure"),
    ("{bundled: azure-code}", "{trace: [a]}", "services[0].arrivals.trace"),
])
def test_bad_arrival_keys_and_values_name_their_key(old: str, new: str, key: str) -> None:
    assert f"s.yaml: {key}:" in _refusal(BASE.replace(old, new))


@pytest.mark.parametrize(("demand", "key"), [
    ("{alibaba_gpu: pods.csv, gpu_scale: -50}", "gpu_scale"),
    ("{alibaba_gpu: pods.csv, time_scale: 0}", "time_scale"),
    ("{alibaba_gpu: pods.csv, qos: 5}", "qos"),
    ("{alibaba_gpu: pods.csv, qos: [[BE]]}", "qos"),
    ("{alibaba_gpu: pods.csv, start_s: -1}", "start_s"),
    ("{gpus: 0}", "gpus"),
    ("{gpus: 2.5}", "gpus"),
])
def test_bad_demand_keys_and_values_name_their_key(demand: str, key: str) -> None:
    text = BASE + f"  - {{name: t, namespace: lab, class: offline-training, demand: {demand}}}\n"
    assert f"s.yaml: services[1].demand.{key}:" in _refusal(text)


def test_a_demand_naming_two_sources_is_refused() -> None:
    text = BASE + "  - {name: t, namespace: lab, class: offline-training, demand: {alibaba_gpu: pods.csv, gpus: 3}}\n"
    assert "s.yaml: services[1].demand: expected exactly one of" in _refusal(text)


def test_a_relative_trace_path_may_not_climb_out_of_data_root(tmp_path: Path) -> None:
    text = BASE.replace("{bundled: azure-code}", "{trace: ../../../../../../etc/shadow}")
    msg = _refusal(text + "data_root: data\n", base=tmp_path)
    assert "services[0].arrivals.trace:" in msg and "climbs out of" in msg


def test_an_absolute_trace_path_is_allowed_as_a_stated_intent(tmp_path: Path) -> None:
    trace = tmp_path / "t.txt"
    trace.write_text("1\n")
    sc = parse_scenario(BASE.replace("{bundled: azure-code}", f"{{trace: {trace}}}"), source="s.yaml")
    assert sc.services[0].arrivals is not None and sc.services[0].arrivals["path"] == str(trace)


@pytest.mark.parametrize("key", ["trace", "alibaba_gpu"])
def test_a_device_as_a_source_is_refused_before_it_is_opened(key: str) -> None:
    src = "{trace: /dev/zero}" if key == "trace" else None
    text = BASE.replace("{bundled: azure-code}", src) if src else \
        BASE + "  - {name: t, namespace: lab, class: offline-training, demand: {alibaba_gpu: /dev/zero}}\n"
    assert "is not a regular file" in _refusal(text)


def test_a_fifo_as_a_trace_is_refused_without_blocking(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe")
    text = BASE.replace("{bundled: azure-code}", "{trace: pipe}")
    assert "'pipe' is not a regular file" in _refusal(text, base=tmp_path)


def test_a_workloads_file_that_is_the_scenario_itself_or_a_device_is_refused(tmp_path: Path) -> None:
    me = tmp_path / "s.yaml"
    me.write_text(BASE + "workloads: s.yaml\n")
    with pytest.raises(ConfigError, match="workloads: points at this scenario file itself"):
        load_scenario(me)
    me.write_text(BASE + "workloads: /dev/zero\n")
    with pytest.raises(ConfigError, match="workloads: '/dev/zero' is not a regular file"):
        load_scenario(me)


def test_an_oversized_workloads_file_is_refused_from_its_size(tmp_path: Path) -> None:
    (tmp_path / "w.yaml").write_bytes(b"#" * (2 << 20))
    (tmp_path / "s.yaml").write_text(BASE + "workloads: w.yaml\n")
    with pytest.raises(ConfigError, match=r"2,097,152 bytes, over the 1,048,576-byte limit"):
        load_scenario(tmp_path / "s.yaml")


@pytest.mark.parametrize("name", ["s0\u202e[red]", "a\\x07b", "zero\u200bwidth", "x" * 254])
def test_names_with_control_or_invisible_characters_or_too_long_are_refused(name: str) -> None:
    assert "services[0].name:" in _refusal(BASE.replace("name: web", f'name: "{name}"'))


def test_a_quota_past_a_billion_gpus_is_refused() -> None:
    text = BASE + "quotas:\n  - {namespace: shop, min_gpus: 4611686018427387904, max_gpus: -1}\n"
    assert "quotas[0].min_gpus:" in _refusal(text)


def test_service_seconds_past_the_bound_are_refused_before_any_array_exists() -> None:
    services = "".join(f"  - {{name: s{i}, namespace: n, class: order-fulfilment, arrivals: {{bundled: azure-code}}}}\n"
                       for i in range(2000))
    text = BASE.replace("duration_s: 600", "duration_s: 7776000").split("services:")[0] + "services:\n" + services
    msg = _refusal(text)
    assert "2,000 services x 7,776,000 s = 15,552,000,000 service-seconds" in msg
    assert f"{MAX_SERVICE_SECONDS:,}" in msg


def test_generated_clients_count_towards_the_service_bound() -> None:
    text = BASE.replace("duration_s: 600", "duration_s: 86400") + \
        "generate:\n  - {servegen: m, clients: 3000, name: 'c{client}', class: order-fulfilment}\n"
    assert "3,001 services x 86,400 s" in _refusal(text)


def test_too_many_zones_or_a_huge_client_list_are_refused() -> None:
    zones = ", ".join(f"z{i}: 1" for i in range(MAX_ZONES + 1))
    assert f"{MAX_ZONES + 1} zones, over the limit of {MAX_ZONES}" in _refusal(BASE.replace("{a: 4}", f"{{{zones}}}"))
    ids = ", ".join(str(i) for i in range(20_001))
    text = BASE + f"generate:\n  - {{servegen: m, clients: [{ids}], name: 'c{{client}}', class: order-fulfilment}}\n"
    assert "generate[0].clients:" in _refusal(text)


def test_a_workloads_file_in_a_parent_folder_is_still_read(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "w.yaml").write_text(DEFAULT_WORKLOADS_YAML)
    (tmp_path / "sub" / "s.yaml").write_text(BASE + "workloads: ../w.yaml\n")
    sc = load_scenario(tmp_path / "sub" / "s.yaml")
    assert "order-fulfilment" in [c.name for c in sc.classes]


@pytest.mark.parametrize(("tier", "said"), [
    ('"snapshot:restore_s=15"', "asleep tier only"),
    ('"asleep:wake_s=-1"', "wake_s"),
    ('"asleep:wake_s=2,bogus=1"', "bogus"),
    ("[asleep]", "expected text"),
])
def test_a_bad_service_tier_is_one_line_naming_its_key(tier: str, said: str) -> None:
    msg = _refusal(BASE.replace("capacity_rps: 3}", f"capacity_rps: 3, tier: {tier}}}"))
    assert "s.yaml: services[0].tier:" in msg and said in msg


def test_a_batch_service_may_not_have_a_tier() -> None:
    text = BASE + '  - {name: t, namespace: lab, class: offline-training, demand: {gpus: 3}, tier: "asleep"}\n'
    assert "s.yaml: services[1].tier: a batch service" in _refusal(text)


@pytest.mark.parametrize(("lending", "key"), [
    ("{checkpoint_s: -1}", "lending.checkpoint_s"),
    ("{restart_gpu_s: .nan}", "lending.restart_gpu_s"),
    ("{checkpoint: 3}", "lending"),
])
def test_bad_lending_costs_are_one_line_naming_their_key(lending: str, key: str) -> None:
    assert f"s.yaml: {key}" in _refusal(BASE + f"lending: {lending}\n")


def test_tiers_and_lending_parse_into_their_settings() -> None:
    sc = parse_scenario(BASE.replace("capacity_rps: 3}", 'capacity_rps: 3, tier: "asleep:wake_s=1,max=3"}')
                        + "lending: {checkpoint_s: 30, restart_gpu_s: 120}\n", source="s.yaml")
    tier = sc.services[0].tier
    assert tier is not None and (tier.wake_s, tier.max_replicas) == (1.0, 3)
    assert (sc.lending.checkpoint_s, sc.lending.restart_gpu_s) == (30, 120.0)
    assert parse_scenario(BASE, source="s.yaml").lending.checkpoint_s == 0
