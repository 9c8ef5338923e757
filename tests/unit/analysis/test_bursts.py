"""Bursts and triggers in a recorded series, found by replaying it through the L1 window; limits refused first."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ebb.analysis.bursts import (
    MAX_STEPS,
    MAX_WINDOW_BUCKETS,
    burst_window,
    check_burst_settings,
    evaluate_trigger_series,
    find_bursts,
    trigger_columns,
)
from ebb.analysis.csv_series import read_series
from ebb.config.triggers import Trigger, parse_triggers
from ebb.decide.triggers import TriggerResult
from ebb.errors import ConfigError, InputError


def _spiky() -> tuple[np.ndarray, np.ndarray]:
    t = np.arange(120) * 0.05
    return t, np.where((t >= 2.0) & (t < 2.5), 99.0, 10.0)


def test_one_burst_is_found_with_its_start_peak_and_detection_delay() -> None:
    (b,) = find_bursts(*_spiky(), threshold=95, min_duration_ms=200)
    assert b.start_s == pytest.approx(2.1) and b.detect_delay_ms == 200.0 and b.peak == pytest.approx(99, rel=0.01)
    # the windowed P99 stays over 95 for 1.4 s (the 0.5 s spike plus the 1 s window): not 2 s
    assert find_bursts(*_spiky(), threshold=95, min_duration_ms=2000) == []


def test_the_window_is_a_whole_number_of_at_most_ten_thousand_buckets() -> None:
    assert burst_window(1000, 100).buckets == 10
    with pytest.raises(ConfigError, match="positive multiple of --bucket-ms"):
        burst_window(250, 100)
    with pytest.raises(ConfigError, match=f"more than the {MAX_WINDOW_BUCKETS:,} a window holds"):
        burst_window(1000, 0.01)
    for window_ms, bucket_ms, flag in ((1000, 0, "--bucket-ms 0"), (float("nan"), 100, "--window-ms nan")):
        with pytest.raises(ConfigError, match=f"{flag}: must be a finite number > 0"):
            burst_window(window_ms, bucket_ms)


def test_a_replay_longer_than_the_step_cap_is_refused_before_it_starts_naming_the_bucket_that_fits() -> None:
    t = np.array([0.0, MAX_STEPS * 0.1])  # one step more than the cap at 100 ms buckets
    with pytest.raises(ConfigError, match="evaluation steps") as exc:
        find_bursts(t, np.zeros(2), threshold=1, min_duration_ms=0)
    assert "--bucket-ms of at least" in str(exc.value)
    assert find_bursts(t, np.zeros(2), threshold=1, min_duration_ms=0, bucket_ms=200, window_ms=1000) == []


@pytest.mark.parametrize("kw, flag", [({"quantile": 1.5}, "--quantile"), ({"min_duration_ms": -1}, "--min-duration-ms"),
                                      ({"threshold": float("inf")}, "--threshold")])
def test_bad_settings_are_config_errors_naming_the_flag(kw: dict[str, float], flag: str) -> None:
    settings = {"threshold": 95.0, "min_duration_ms": 200.0, **kw}
    with pytest.raises(ConfigError, match=flag):
        find_bursts(*_spiky(), **settings)  # type: ignore[arg-type]


TRIGGER = """\
name: hot
all:
  - {signal: sm, op: ">=", threshold: 75, quantile: 0.99, sustain_s: 2}
"""


def _csv(tmp_path: Path, sm: float) -> Path:
    f = tmp_path / "m.csv"
    f.write_text("t,sm\n" + "".join(f"{i * 0.1:.1f},{sm}\n" for i in range(60)))
    return f


def evaluate_trigger_csv(path: Path, trigger: Trigger) -> TriggerResult:
    """The trigger over the columns its rules read, as ``ebb bursts --triggers`` reads them."""
    columns = trigger_columns(trigger)
    t_s, values = read_series(path, "t", columns)
    return evaluate_trigger_series(t_s, values, trigger)


def test_a_trigger_fires_when_its_rule_held_for_its_sustain_at_the_last_sample(tmp_path: Path) -> None:
    trigger = parse_triggers(TRIGGER, source="t.yaml")
    assert evaluate_trigger_csv(_csv(tmp_path, 90), trigger).fired
    assert not evaluate_trigger_csv(_csv(tmp_path, 50), trigger).fired


def test_a_trigger_on_a_missing_column_or_two_quantiles_of_one_signal_is_refused(tmp_path: Path) -> None:
    missing = parse_triggers(TRIGGER.replace("signal: sm", "signal: pcie"), source="t.yaml")
    with pytest.raises(InputError, match="no column 'pcie'"):
        evaluate_trigger_csv(_csv(tmp_path, 90), missing)
    two = TRIGGER + "  - {signal: sm, op: \">=\", threshold: 70, quantile: 0.5, sustain_s: 2}\n"
    both = parse_triggers(two, source="t.yaml")
    with pytest.raises(ConfigError, match="different quantiles"):
        evaluate_trigger_csv(_csv(tmp_path, 90), both)


@pytest.mark.parametrize("kw, said", [
    ({"quantile": 1.5}, "--quantile 1.5: must be a number from 0 to 1 (fix: "),
    ({"min_duration_ms": -1.0}, "--min-duration-ms -1.0: must be a finite number >= 0 (fix: "),
    ({"threshold": float("nan")}, "--threshold nan: must be a finite number (fix: "),
    ({"bucket_ms": float("inf")}, "--bucket-ms inf: must be a finite number > 0 (fix: "),
])
def test_every_setting_is_refused_in_one_format_before_any_data(kw: dict[str, float], said: str) -> None:
    """One check (settings_checks' format, "--flag VALUE: must be ..."), the one ebb bursts runs before reading."""
    settings = {"window_ms": 1000.0, "bucket_ms": 100.0, "quantile": 0.99, "threshold": 95.0,
                "min_duration_ms": 200.0, **kw}
    with pytest.raises(ConfigError) as exc:
        check_burst_settings(**settings)
    assert said in str(exc.value)
    with pytest.raises(ConfigError) as again:
        find_bursts(*_spiky(), **settings)  # type: ignore[arg-type]
    assert str(again.value) == str(exc.value)
