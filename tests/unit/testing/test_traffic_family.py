"""The bursty-trace family: seeded, inside its stated ranges, covering every kind, and read back by ``ebb simulate``."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ebb.cli.trace_options import check_trace_flags
from ebb.model.trace import CountSeries, RequestTrace
from ebb.sources.traces import bundled_trace, open_trace
from ebb.testing.traffic_family import (
    BURST_KINDS,
    CATEGORIES,
    RANGES,
    TrafficShape,
    burst_onsets_s,
    family,
    issue_counts_burst,
    issue_poisson_burst,
    per_second_counts,
    rate_curve,
    requests,
    simulate_argv,
    simulate_input,
    slo,
    tags,
    write_csv,
)

FAMILY = family(60, 0)


def _inside(x: float, key: str) -> bool:
    lo, hi = RANGES[key]
    return lo <= x <= hi


def test_the_same_seed_gives_the_same_family_and_a_longer_one_extends_it() -> None:
    assert family(60, 0) == FAMILY
    assert family(12, 0) == FAMILY[:12]
    assert family(60, 1) != FAMILY


def test_the_same_shape_gives_the_same_counts_and_requests() -> None:
    shape = FAMILY[3]
    assert np.array_equal(per_second_counts(shape), per_second_counts(shape))
    a, b = requests(shape), requests(shape)
    assert np.array_equal(a.arrival_s, b.arrival_s) and np.array_equal(a.tokens_in, b.tokens_in)


def test_every_drawn_number_lies_in_the_family_s_stated_range() -> None:
    for s in FAMILY:
        assert _inside(s.base_rate_rps, "long_service_rate_rps" if s.long_service else "base_rate_rps"), s
        recurring = s.burst_kind in ("periodic", "irregular")
        assert _inside(s.duration_s, "recurring_duration_s" if recurring else "duration_s"), s
        if s.burst_kind != "none":
            assert _inside(s.burst_mult, "burst_mult") and _inside(s.burst_len_s, "burst_len_s"), s
        if s.burst_kind == "random":
            assert _inside(s.bursts_per_h, "bursts_per_h"), s
        if s.burst_kind == "periodic":
            assert _inside(s.period_s, "recurrence_s"), s
        if s.long_service:
            assert _inside(s.service_min_s, "service_s") and _inside(s.service_max_s, "service_s"), s


def test_the_family_covers_every_burst_kind_and_every_feature() -> None:
    assert {s.burst_kind for s in FAMILY} == set(BURST_KINDS)
    seen = {t for s in FAMILY for t in tags(s)}
    assert {"diurnal", "step", "lulls", "long-service"} <= seen
    assert any(s.diurnal_amplitude == 0 for s in FAMILY) and any(not s.per_second for s in FAMILY)
    assert sum(s.burst_kind in ("periodic", "irregular") and s.duration_s >= 21_600 for s in FAMILY) >= 10
    assert len({s.name.split("-", 1)[1] for s in FAMILY}) == len(CATEGORIES)


def test_irregular_bursts_recur_every_20_to_240_minutes_and_periodic_ones_on_the_period() -> None:
    irregular = [s for s in FAMILY if s.burst_kind == "irregular"]
    gaps = np.concatenate([np.diff(burst_onsets_s(s)) for s in irregular])
    assert len(gaps) > 10 and gaps.min() >= 1_200 - 1e-6 and gaps.max() <= 14_400 + 1e-6
    assert len(np.unique(np.round(gaps))) > len(gaps) // 2  # irregular: not one period
    for s in (s for s in FAMILY if s.burst_kind == "periodic"):
        assert np.allclose(np.diff(burst_onsets_s(s)), s.period_s)


@given(seed=st.integers(0, 2**20), index=st.integers(0, 11))
def test_a_rate_curve_is_non_negative_and_one_value_per_second(seed: int, index: int) -> None:
    shape = family(12, seed)[index]
    rate = rate_curve(shape)
    assert rate.shape == (shape.duration_s,) and bool(np.all(rate >= 0))


def test_counts_follow_the_rate_curve_within_four_poisson_deviations() -> None:
    for s in FAMILY[:24]:
        rate, counts = rate_curve(s), per_second_counts(s)
        assert abs(counts.sum() - rate.sum()) <= 4 * np.sqrt(rate.sum()) + 1, s.name


def test_a_one_off_burst_adds_its_multiple_of_the_base_for_its_length_and_no_longer() -> None:
    s = issue_counts_burst()
    rate = rate_curve(s)
    assert np.allclose(rate[1_800:1_830], 50.0) and np.allclose(np.delete(rate, np.s_[1_800:1_830]), 5.0)


def test_the_issue_s_poisson_trace_is_3_to_5_per_second_with_15_more_at_minute_10() -> None:
    s = issue_poisson_burst()
    rate = rate_curve(s)
    calm = np.delete(rate, np.s_[600:660])
    assert s.duration_s == 1_800 and calm.min() >= 3.0 - 1e-9 and calm.max() <= 5.0 + 1e-9
    assert np.allclose(rate[600:660] - rate_curve(dataclasses.replace(s, burst_kind="none"))[600:660], 15.0)
    assert isinstance(requests(s), RequestTrace)


def test_lulls_are_zero_and_a_step_multiplies_the_base() -> None:
    base = TrafficShape(name="x", seed=1, duration_s=3_600, base_rate_rps=10.0)
    lulled = rate_curve(dataclasses.replace(base, lull_count=2, lull_len_s=300))
    assert 300 <= int((lulled == 0).sum()) <= 600 and set(np.unique(lulled)) <= {0.0, 10.0}
    stepped = rate_curve(dataclasses.replace(base, step_at_s=1_000.0, step_mult=3.0))
    assert np.allclose(stepped[:1_000], 10.0) and np.allclose(stepped[1_000:], 30.0)


def test_requests_keep_the_counts_and_draw_real_token_pairs_from_the_bundled_slice() -> None:
    s = dataclasses.replace(FAMILY[3], duration_s=600, tokens="azure-code")
    tr = requests(s)
    per_second = np.bincount(np.floor(tr.arrival_s).astype(int), minlength=s.duration_s)
    assert np.array_equal(per_second, per_second_counts(s))
    pool = bundled_trace("azure-code")
    pairs = set(zip(pool.tokens_in.tolist(), pool.tokens_out.tolist()))
    assert set(zip(tr.tokens_in.tolist(), tr.tokens_out.tolist())) <= pairs


def test_long_service_requests_carry_service_times_inside_their_range_and_an_slo_they_can_meet() -> None:
    s = next(s for s in FAMILY if s.long_service)
    tr = requests(s)
    assert tr.service_s is not None and tr.requests > 0
    assert tr.service_s.min() >= s.service_min_s and tr.service_s.max() <= s.service_max_s
    assert slo(s).e2e_ms >= 1000 * s.service_max_s and slo(FAMILY[0]).e2e_ms == 60_000


def _read_back(shape: TrafficShape, path: Path) -> RequestTrace | CountSeries:
    """What ``ebb simulate`` reads from the file with the helper's settings (the same checks and reader)."""
    inp = simulate_input(shape, write_csv(shape, path))
    flags = check_trace_flags(inp)
    return flags.after_load(open_trace(inp.trace, inp.format, time_col=inp.time_col, count_col=inp.count_col,
                                       tokens_in_col=inp.tokens_in_col, tokens_out_col=inp.tokens_out_col,
                                       service_col=inp.service_time_column))


def test_a_per_second_csv_reads_back_as_the_same_counts(tmp_path: Path) -> None:
    s = dataclasses.replace(next(s for s in FAMILY if s.lull_count), duration_s=1_200)
    got = _read_back(s, tmp_path / "c.csv")
    assert isinstance(got, CountSeries) and np.array_equal(got.counts, per_second_counts(s))


@pytest.mark.parametrize("kind", ["requests", "long-service"])
def test_a_request_csv_reads_back_as_the_same_requests(tmp_path: Path, kind: str) -> None:
    s = next(s for s in FAMILY if not s.per_second and s.long_service == (kind == "long-service"))
    s = dataclasses.replace(s, duration_s=600 if kind == "requests" else s.duration_s)
    got, want = _read_back(s, tmp_path / "r.csv"), requests(s)
    assert isinstance(got, RequestTrace) and got.requests == want.requests
    assert np.allclose(got.arrival_s, want.arrival_s - want.arrival_s[0], atol=2e-6)
    assert np.array_equal(got.tokens_in, want.tokens_in) and np.array_equal(got.tokens_out, want.tokens_out)
    if kind == "long-service":
        assert got.service_s is not None and want.service_s is not None
        assert np.allclose(got.service_s, want.service_s, atol=6e-4)


def test_ebb_simulate_accepts_the_helper_s_flags_and_reads_the_file(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from ebb.cli.main import app

    s = dataclasses.replace(next(s for s in FAMILY if s.long_service), duration_s=900)
    argv = simulate_argv(simulate_input(s, write_csv(s, tmp_path / "l.csv")), slo(s))
    assert "--service-time-column" in argv and "--concurrency" in argv and "--slo-e2e-ms" in argv
    res = CliRunner().invoke(app, ["simulate", *argv, "--policy", "static", "--quiet", "--ledger", "",
                                       "--json", str(tmp_path / "cards.json")])
    assert res.exit_code == 0, res.output
    (card,) = json.loads((tmp_path / "cards.json").read_text())
    assert card["policy"] == "static" and card["gpu_hours"] > 0 and card["fidelity"] == "request"
