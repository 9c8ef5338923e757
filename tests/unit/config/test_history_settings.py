"""``ebb simulate --from-prometheus``'s settings check themselves: the URL, the selector, the range, the files."""

from __future__ import annotations

from pathlib import Path

import pytest

from ebb.config.history_settings import HistorySettings, parse_duration_s, parse_time_s
from ebb.config.simulate_settings import SIMULATE_GROUPS
from ebb.errors import ConfigError

URL = "http://prometheus:9090"
SEL = 'job="vllm"'


def test_history_is_a_section_of_simulate_s_config() -> None:
    assert "history" in [g.SECTION for g in SIMULATE_GROUPS]


def test_history_flags_without_from_prometheus_are_refused_by_name() -> None:
    with pytest.raises(ConfigError, match=r"--save-trace read a Prometheus history and need --from-prometheus"):
        HistorySettings(save_trace=Path("t.ebbh"))
    HistorySettings()  # nothing given: a file trace


def test_from_prometheus_needs_an_http_url_and_a_selector() -> None:
    with pytest.raises(ConfigError, match="expected an http:// or https:// URL"):
        HistorySettings(from_prometheus="prometheus:9090", selector=SEL)
    with pytest.raises(ConfigError, match="needs --selector"):
        HistorySettings(from_prometheus=URL)


def test_since_and_start_are_exclusive_and_each_is_checked() -> None:
    with pytest.raises(ConfigError, match="--since and --start both"):
        HistorySettings(from_prometheus=URL, selector=SEL, since="7d", start="2024-03-04T00:00:00Z")
    with pytest.raises(ConfigError, match=r"--since '7 days': not a duration"):
        HistorySettings(from_prometheus=URL, selector=SEL, since="7 days")
    with pytest.raises(ConfigError, match=r"--end 'yesterday': not a time"):
        HistorySettings(from_prometheus=URL, selector=SEL, end="yesterday")


def test_the_range_defaults_to_the_last_week_and_takes_iso_or_unix_times() -> None:
    assert HistorySettings(from_prometheus=URL, selector=SEL).range_s(1_000_000.0) == (395_200.0, 1_000_000.0)
    s = HistorySettings(from_prometheus=URL, selector=SEL, start="2024-03-04T00:00:00Z", end="1709596800")
    assert s.range_s(0.0) == (1_709_510_400.0, 1_709_596_800.0)
    assert HistorySettings(from_prometheus=URL, selector=SEL, since="36h", end="1709596800").range_s(0.0)[0] == \
        1_709_596_800.0 - 36 * 3600
    with pytest.raises(ConfigError, match="ends before it starts"):
        HistorySettings(from_prometheus=URL, selector=SEL, start="1709596800", end="1709510400").range_s(0.0)


def test_durations_and_times_parse_as_documented() -> None:
    assert parse_duration_s("90m", "--since") == 5400.0 and parse_duration_s("2w", "--since") == 1_209_600.0
    assert parse_duration_s("45", "--since") == 45.0
    assert parse_time_s("2024-03-04T01:00:00", "--start") == 1_709_514_000.0  # no zone: UTC


def test_tls_files_must_exist_and_cert_and_key_go_together(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="--prometheus-ca .*not a readable file"):
        HistorySettings(from_prometheus=URL, selector=SEL, prometheus_ca=tmp_path / "missing.pem")
    pem = tmp_path / "c.pem"
    pem.write_text("x")
    with pytest.raises(ConfigError, match="go together"):
        HistorySettings(from_prometheus=URL, selector=SEL, prometheus_cert=pem)
