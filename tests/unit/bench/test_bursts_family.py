"""``bench/bursts_family.py``: who dominates Ebb, on hand-made figures and on three short family traces run in-process."""

from __future__ import annotations

import dataclasses
import json
from types import ModuleType
from typing import Any

import pytest

from ebb.testing.traffic_family import family
from tests.unit.bench.bench_module import load_bench


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_bench("bursts_family")


def card(policy: str, viol: float, gpu_h: float) -> dict[str, Any]:
    return {"policy": policy, "slo_violation_pct": viol, "gpu_hours": gpu_h}


def test_a_policy_dominates_only_when_both_cheaper_and_better(bench: ModuleType) -> None:
    ebb = card("ebb", 1.0, 10.0)
    assert bench.dominates(card("static", 0.0, 9.0), ebb)
    assert not bench.dominates(card("static", 0.0, 11.0), ebb)  # better but dearer
    assert not bench.dominates(card("static", 1.0, 9.0), ebb)  # cheaper at the same violations: only weakly
    assert bench.dominates(card("static", 1.0, 9.0), ebb, weak=True)
    assert not bench.dominates(card("static", 1.0, 10.0), ebb, weak=True)  # equal is not better
    assert not bench.dominates(card("static", None, 1.0), ebb)  # type: ignore[arg-type]


def test_ebb_s_dominators_are_peers_and_static_never_the_oracle(bench: ModuleType) -> None:
    cards = [card("ebb", 2.0, 10.0), card("static", 0.0, 12.0), card("hpa", 0.5, 8.0), card("oracle", 0.0, 5.0),
             card("kpa", 3.0, 4.0)]
    assert bench.dominators(cards) == ["hpa"]
    assert bench.dominators(cards, among=("static",)) == []
    verdict = bench.trace_verdict(cards)
    assert verdict["dominated_by"] == ["hpa"] and not verdict["dominated_by_static"]
    assert verdict["ebb_over_static"] == pytest.approx(10 / 12) and verdict["ebb_over_oracle"] == pytest.approx(2.0)
    assert not verdict["ebb_meets_slo"] and verdict["static_meets_slo"]


def test_the_summary_counts_dominated_traces_and_takes_medians(bench: ModuleType) -> None:
    def rec(name: str, tags: list[str], cards: list[dict[str, Any]]) -> dict[str, Any]:
        return {"name": name, "group": "family", "tags": tags, "error": None, "cards": cards,
                "verdict": bench.trace_verdict(cards)}

    records = [rec("a", ["one-off"], [card("ebb", 1.0, 10.0), card("static", 0.0, 8.0), card("oracle", 0.0, 5.0)]),
               rec("b", ["periodic"], [card("ebb", 0.0, 6.0), card("static", 0.0, 8.0), card("oracle", 0.0, 5.0)]),
               {"name": "c", "group": "family", "tags": ["none"], "error": "InputError: empty", "verdict": None}]
    s = bench.summarise(records)
    assert s["all"]["traces"] == 2 and s["all"]["dominated_by_static"] == 1 and s["all"]["dominated_by_peer"] == 1
    assert s["all"]["median_ebb_over_static"] == pytest.approx((10 / 8 + 6 / 8) / 2)
    assert s["by_tag"]["periodic"]["dominated_by_static"] == 0 and s["errors"] == ["c: InputError: empty"]
    assert s["dominated"] == [{"trace": "a", "by": ["static"]}]
    # The recurring-burst figure: periodic or irregular traces of 6 h or more with a burst judged.
    long_periodic = {"burst_kind": "periodic", "duration_s": 7 * 3600.0}
    seen = [{**rec("p", ["periodic"], [card("ebb", 0.5, 6.0), card("static", 0.0, 10.0), card("oracle", 0.0, 5.0)]),
             "shape": long_periodic, "warmup_s": 7200.0, "judged_bursts": 3},
            {**rec("q", ["periodic"], [card("ebb", 9.0, 1.0), card("static", 0.0, 10.0), card("oracle", 0.0, 5.0)]),
             "shape": {**long_periodic, "duration_s": 3600.0}, "warmup_s": 900.0, "judged_bursts": 2}]
    r = bench.summarise(seen)["recurring"]
    assert r["traces"] == 1 and r["median_ebb_over_static"] == pytest.approx(0.6) and r["seen"]
    assert r["median_ebb_violation_pct"] == pytest.approx(0.5) and r["ebb_meets_slo"] == 0
    assert "1 traces, median Ebb GPU-h / static 0.600 at a median 0.500 %" in "\n".join(
        bench.summary_lines(bench.summarise(seen)))


def test_three_short_family_traces_run_through_every_policy_with_a_verdict_each(bench: ModuleType,
                                                                               tmp_path: Path) -> None:
    shapes = family(12, 0)
    picked = [dataclasses.replace(s, duration_s=600) for s in (shapes[2], shapes[6], shapes[10])]
    records = bench.run_all([bench.Case(s.name, "family", shape=s) for s in picked], 1, str(tmp_path))
    policies = bench.POLICIES.split(",")
    for r in records:
        assert r["error"] is None, r["error"]
        assert [c["policy"] for c in r["cards"]] == policies
        assert r["command"].startswith("ebb simulate --trace ") and "--peak-replicas 20" in r["command"]
        assert r["verdict"]["dominated_by"] == bench.dominators(r["cards"])
    assert records[2]["fidelity"] == "request" and "--concurrency 1" in records[2]["command"]  # long service
    summary = bench.summarise(records)
    assert summary["all"]["traces"] == 3
    text = bench.render(records, summary, "test")
    assert all(s.name in text for s in picked)
    json.dumps({"summary": summary, "traces": records})  # the JSON file's content serialises


def test_seen_judges_a_recurring_trace_after_its_second_burst_and_others_whole(bench: ModuleType) -> None:
    from ebb.testing.traffic_family import burst_onsets_s

    shapes = family(24, 0)
    recurring = next(s for s in shapes if s.burst_kind == "periodic")
    onsets = burst_onsets_s(recurring)
    warm = bench.seen_warmup_s(recurring)
    assert warm == pytest.approx(min(onsets[1] + recurring.burst_len_s + 120.0, 0.9 * recurring.duration_s))
    assert warm > onsets[1] or warm == pytest.approx(0.9 * recurring.duration_s)  # the second burst is warm-up
    assert bench.judged_bursts(recurring, warm) == int((onsets >= warm).sum())
    assert all(bench.seen_warmup_s(s) == 0.0 for s in shapes if s.burst_kind not in ("periodic", "irregular"))


def test_with_a_tier_the_summary_gives_ebb_s_running_hours_and_the_slo_where_static_meets_it(bench: ModuleType) -> None:
    def rec(name: str, cards: list[dict[str, Any]]) -> dict[str, Any]:
        return {"name": name, "group": "family", "tags": ["none"], "error": None, "cards": cards,
                "verdict": bench.trace_verdict(cards)}

    asleep = {**card("ebb", 0.05, 10.0), "asleep_gpu_hours": 4.0}  # 6 running of 10 held
    records = [rec("a", [asleep, card("static", 0.0, 12.0), card("oracle", 0.0, 5.0)]),
               rec("b", [card("ebb", 0.5, 8.0), card("static", 0.0, 10.0), card("oracle", 0.0, 5.0)]),
               rec("c", [card("ebb", 0.0, 8.0), card("static", 0.4, 10.0), card("oracle", 0.0, 5.0)])]
    a = bench.summarise(records)["all"]
    assert a["static_meets_slo"] == 2 and a["ebb_meets_slo_where_static_does"] == 1
    assert a["median_ebb_running_over_static"] == pytest.approx(0.8)  # of 0.5, 0.8, 0.8
    assert "Ebb meets the SLO on 1 of the 2 traces where static does" in "\n".join(
        bench.summary_lines(bench.summarise(records)))


def test_a_bad_tier_is_one_line_and_exit_2(bench: ModuleType, capsys: pytest.CaptureFixture[str]) -> None:
    assert bench.main(["--tier", "asleep:wake=2", "--n", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "wake=2" in err


def test_the_reactor_frontier_counts_where_static_meets_and_takes_medians_over_static(bench: ModuleType) -> None:
    def rec(name: str, static: dict[str, Any], reactors: list[tuple[float, int, float, float]],
            reactive: dict[str, Any] | None = None) -> dict[str, Any]:
        cards = [card("ebb", 0.0, 9.0), static, card("oracle", 0.0, 5.0)]
        return {"name": name, "group": "family", "tags": ["none"], "error": None, "cards": cards,
                "reactors": [{"headroom": h, "hold_s": hold, "slo_violation_pct": v, "gpu_hours": g}
                             for h, hold, v, g in reactors],
                "reactive": reactive, "verdict": bench.trace_verdict(cards, reactive)}

    records = [rec("a", card("static", 0.0, 10.0), [(2.0, 30, 0.05, 6.0), (8.0, 600, 0.0, 10.0)],
                   {"slo_violation_pct": 0.08, "gpu_hours": 5.0}),
               rec("b", card("static", 0.0, 20.0), [(2.0, 30, 0.9, 8.0), (8.0, 600, 0.0, 20.0)],
                   {"slo_violation_pct": 0.02, "gpu_hours": 16.0}),
               rec("c", card("static", 0.5, 10.0), [(2.0, 30, 0.0, 1.0), (8.0, 600, 0.0, 2.0)])]  # static misses
    s = bench.summarise(records)
    two, eight = s["reactors"]
    assert (two["headroom"], two["hold_s"], two["traces"], two["meets_slo"]) == (2.0, 30, 2, 1)
    assert two["median_over_static"] == pytest.approx((0.6 + 0.4) / 2)
    assert (eight["meets_slo"], eight["median_over_static"]) == (2, pytest.approx(1.0))
    a = s["all"]
    assert a["median_reactive_over_static"] == pytest.approx(0.65)  # 0.5, 0.8 (c has no perfect reactor)
    assert a["reactive_meets_within_0_7_where_static_does"] == 1
    text = "\n".join(bench.summary_lines(s))
    assert "memoryless reactor, headroom 2, rises held 30 s: meets the SLO on 1 of the 2 traces" in text
