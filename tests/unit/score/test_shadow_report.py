"""The shadow report's arithmetic: GPU-hours are the curves' integrals, agreement a share, risk only where
Ebb ran below the fleet near the SLO, the verdict by its stated rules, and disagreements explained."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ebb.errors import InputError
from ebb.model.decisions import DecisionRecord
from ebb.model.ids import CycleId, DecisionId, RunId
from ebb.model.shadow import SLOTS, ShadowMinute
from ebb.score.shadow import MIN_OBSERVED_S, TOP, merged_series, shadow_report

START = 1_767_607_200


def row(k: int, as_run: Any, ebb: Any, ttft: Any = None, minute_p99: float | None = None, **kw: Any) -> ShadowMinute:
    def sixty(v: Any) -> tuple[Any, ...]:
        return tuple(v) if isinstance(v, (list, tuple)) else (v,) * SLOTS
    return ShadowMinute(start_s=START + SLOTS * k, target="default/vllm", as_run=sixty(as_run), ebb=sixty(ebb),
                        ttft_p99_ms=sixty(ttft), minute_ttft_p99_ms=minute_p99, completions=10.0,
                        slo_ttft_ms=kw.get("slo", 2000.0), policy="ebb")


_counts = st.one_of(st.none(), st.integers(0, 12))
_minute = st.tuples(st.lists(_counts, min_size=SLOTS, max_size=SLOTS),
                    st.lists(_counts, min_size=SLOTS, max_size=SLOTS),
                    st.lists(st.one_of(st.none(), st.floats(0, 5000)), min_size=SLOTS, max_size=SLOTS),
                    st.one_of(st.none(), st.floats(0, 5000)))


@settings(max_examples=150, deadline=None)
@given(minutes=st.lists(_minute, min_size=1, max_size=4), gpus=st.sampled_from([1.0, 8.0]))
def test_the_figures_are_the_curves_integrals_and_shares(minutes: list[Any], gpus: float) -> None:
    rows = [row(2 * k, a, e, t, p) for k, (a, e, t, p) in enumerate(minutes)]  # every other minute: a gap
    pairs = [(x, y) for a, e, _, _ in minutes for x, y in zip(a, e, strict=True) if x is not None and y is not None]
    if not pairs:
        with pytest.raises(InputError, match="no second with both"):
            shadow_report(rows)
        return
    r = shadow_report(rows, gpus_per_replica=gpus)
    assert r.compared_s == len(pairs)
    assert math.isclose(r.as_run_gpu_h, sum(x for x, _ in pairs) * gpus / 3600, abs_tol=1e-12)
    assert math.isclose(r.ebb_gpu_h, sum(y for _, y in pairs) * gpus / 3600, abs_tol=1e-12)
    assert 0.0 <= r.agreement <= 1.0
    assert math.isclose(r.agreement + r.lower_share + r.higher_share, 1.0)
    assert math.isclose(r.agreement, sum(x == y for x, y in pairs) / len(pairs))
    assert 0 <= r.risk_minutes <= r.compared_minutes
    series = merged_series(rows)
    for start in r.risk_minute_starts:  # risk only where Ebb ran below the fleet, near the SLO
        k = (start - series.start_s) // SLOTS
        sl = slice(k * SLOTS, (k + 1) * SLOTS)
        assert (series.ebb[sl] < series.as_run[sl]).any()
        assert series.minute_ttft_p99_ms[k] >= r.near * r.slo_ttft_ms
    assert len(r.disagreements) <= TOP
    weights = [d.replica_s for d in r.disagreements]
    assert weights == sorted(weights, reverse=True) and all(w > 0 for w in weights)


@settings(max_examples=80, deadline=None)
@given(minutes=st.lists(_minute, min_size=1, max_size=3))
def test_ebb_never_below_the_fleet_takes_no_risk(minutes: list[Any]) -> None:
    rows = []
    for k, (a, _, t, _) in enumerate(minutes):
        rows.append(row(k, a, [None if x is None else x + 1 for x in a], t, 4000.0))
    if all(x is None for a, *_ in minutes for x in a):
        return
    r = shadow_report(rows)
    assert r.risk_minutes == 0 and r.risk_seconds == 0 and r.lower_share == 0.0


def test_a_minute_near_the_slo_with_ebb_below_the_fleet_is_a_risk_minute() -> None:
    hot = row(0, 6, [6] * 30 + [4] * 30, ttft=[1700.0] * 40 + [900.0] * 20, minute_p99=1650.0)
    calm = row(1, 6, 4, ttft=300.0, minute_p99=300.0)
    hot_agreeing = row(2, 6, 6, ttft=1900.0, minute_p99=1900.0)
    r = shadow_report([hot, calm, hot_agreeing])
    assert r.risk_minutes == 1 and r.risk_minute_starts == (START,) and r.compared_minutes == 3
    assert r.risk_seconds == 10  # seconds 30-39: Ebb below and that second's own p99 >= 1,600 ms
    assert shadow_report([hot, calm], near=0.9).risk_minutes == 0  # 1,650 ms < 0.9 x 2,000 ms
    assert shadow_report([hot, calm], slo_ttft_ms=1000.0).risk_minutes == 1


def test_two_rows_of_one_minute_merge_and_its_p99_is_the_larger() -> None:
    first = row(0, [6] * 30 + [None] * 30, [5] * 30 + [None] * 30, minute_p99=500.0)
    second = row(0, [None] * 31 + [7] * 29, [None] * 31 + [4] * 29, minute_p99=1800.0)
    s = merged_series([second, first])
    assert np.isnan(s.as_run[30]) and s.as_run[0] == 6 and s.as_run[59] == 7 and s.minute_ttft_p99_ms[0] == 1800
    assert shadow_report([first, second]).compared_s == 59


def days(n_minutes: int, as_run: int, ebb: int, minute_p99: float = 200.0) -> list[ShadowMinute]:
    return [row(k, as_run, ebb, 150.0, minute_p99) for k in range(n_minutes)]


@pytest.mark.parametrize(("rows", "kind", "words"), [
    (days(MIN_OBSERVED_S // SLOTS, 10, 7), "switch", "Switch: Ebb would have used 30% fewer GPU-hours"),
    (days(90, 10, 7), "keep watching", "but over only 90 min compared"),
    (days(90, 10, 10), "do not switch", "0% fewer GPU-hours than your fleet did"),
    (days(90, 10, 12), "do not switch", "20% more GPU-hours"),
    (days(90, 10, 7, minute_p99=1700.0), "do not switch", "in 90 risk minutes of 90"),
])
def test_the_verdict_follows_its_rules_and_comes_first(rows: list[ShadowMinute], kind: str, words: str) -> None:
    r = shadow_report(rows)
    assert r.kind == kind and words in r.verdict, r.verdict


def decision(n: int, ts_s: float, action: str, frm: int, to: int, reason: str) -> DecisionRecord:
    return DecisionRecord(DecisionId(f"live-{n}"), CycleId(f"live-c{n}"), RunId("live"), int(ts_s * 1e9),
                          "default/vllm", action, frm, to, reasons=(reason,))  # type: ignore[arg-type]


def test_the_largest_disagreements_come_with_the_decisions_and_fleet_changes_that_explain_them() -> None:
    ebb = [6] * 10 + [4] * 20 + [6] * 10 + [5] * 20
    fleet = [6] * 45 + [8] * 15
    ds = [decision(1, START + 10.4, "scale_down", 6, 4, "comeback: 4 replicas hold"),
          decision(2, START + 30.2, "scale_up", 4, 6, "burst"), decision(3, START + 40.6, "scale_down", 6, 5, "calm")]
    r = shadow_report([row(0, fleet, ebb)], ds)
    big, small = r.disagreements  # the larger first: 5 x 1 + 15 x 3 replica-seconds, then 20 x 2
    assert (big.start_s, big.seconds, big.as_run, big.ebb) == (START + 40, 20, (6, 8), (5, 5))
    assert big.replica_s == 5 + 15 * 3 and big.why[0].startswith("live-3 scale_down 6 → 5")
    assert (small.start_s, small.seconds, small.as_run, small.ebb, small.lower) == (START + 10, 20, (6, 6), (4, 4),
                                                                                     True)
    assert small.replica_s == 40 and "live-1 scale_down 6 → 4" in small.why[0] and "comeback" in small.why[0]
    lone = shadow_report([row(0, fleet, [6] * SLOTS)])  # the fleet moved, Ebb did not
    assert lone.disagreements[0].why == (f"your fleet went 6 → 8 at {_utc(START + 45)}",)
    assert lone.disagreements[0].lower  # Ebb at 6 below the fleet at 8


def _utc(s: int) -> str:
    from ebb.score.shadow import utc_stamp
    return utc_stamp(s)


@pytest.mark.parametrize(("kw", "flag"), [({"near": 0.0}, "--near"), ({"near": 1.5}, "--near"),
                                          ({"gpus_per_replica": 0.0}, "--gpus-per-replica"),
                                          ({"slo_ttft_ms": -1.0}, "--slo-ttft-ms")])
def test_bad_settings_are_refused_naming_the_flag(kw: dict[str, Any], flag: str) -> None:
    with pytest.raises(InputError, match=flag):
        shadow_report([row(0, 6, 6)], **kw)
    with pytest.raises(InputError, match="no shadow rows"):
        shadow_report([])
