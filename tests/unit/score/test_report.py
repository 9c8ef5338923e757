"""Tests for the self-contained HTML report of ``ebb simulate`` and its SVG helpers."""

from __future__ import annotations

import dataclasses
import re
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from ebb.errors import InputError
from ebb.score.report import render_report, write_report
from ebb.score.results import PolicyRun, Scorecard, Timeline
from ebb.score.svgplot import downsample_max, downsample_minmax, line_path, step_path

_VOID = {"meta", "br", "hr", "img", "input", "link", "col", "area", "base", "wbr", "source"}


def _card(policy: str, *, gpu_hours: float, pct: float, trace: str = "synthetic") -> Scorecard:
    return Scorecard(
        policy=policy, trace=trace, fidelity="fluid", requests=10_000, gpu_hours=gpu_hours,
        cost_usd=gpu_hours * 2.5, slo_violations=int(pct * 100), slo_violation_pct=pct,
        ttft_p50_ms=120.0, ttft_p99_ms=480.0, e2e_p50_ms=900.0, e2e_p99_ms=2500.0, scale_ups=4,
        scale_downs=3, dropped_requests=0, peak_replicas=8, mean_replicas=4.2, slo_ttft_ms=500.0,
        slo_e2e_ms=3000.0, wall_s=0.4,
    )


def _timeline(n: int, seed: int, *, nan_every: int = 37) -> Timeline:
    rng = np.random.default_rng(seed)
    t = np.arange(n, dtype=np.float64)
    demand = 50 + 30 * np.sin(t / max(n / 6, 1)) + rng.normal(0, 2, n)
    replicas = (np.ceil(demand / 12) + rng.integers(0, 2, n)).astype(np.float64)
    ttft = rng.lognormal(5, 0.5, n)
    e2e = ttft * 5
    ttft[::nan_every] = np.nan  # bins without completed requests
    e2e[::nan_every] = np.nan
    return Timeline(
        t_s=t, bin_s=1.0, demand_rps=demand, replicas=replicas, ready_replicas=np.maximum(replicas - 0.5, 0.0),
        ttft_p50_ms=ttft / 2, ttft_p99_ms=ttft, e2e_p50_ms=e2e / 2, e2e_p99_ms=e2e,
        violations=np.zeros(n, dtype=np.int64),
    )


def _runs(n: int = 400) -> list[PolicyRun]:
    return [
        PolicyRun(_card("hpa:target=0.5", gpu_hours=3.0, pct=0.05), _timeline(n, 1)),
        PolicyRun(_card("ebb:safe", gpu_hours=2.0, pct=0.08), _timeline(n, 2)),
        PolicyRun(_card("<script>alert(1)</script>", gpu_hours=1.0, pct=4.0), _timeline(n, 3)),
    ]


def _render(runs: list[PolicyRun]) -> str:
    return render_report(runs, title="Simulate <report>", trace_desc="synthetic & diurnal",
                         settings={"fidelity": "fluid", "price": "$2.50/GPU-h"})


class _TagBalance(HTMLParser):
    """Records start/end tags to check that every non-void element is closed in order."""

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[str] = []
        self.errors: list[str] = []
        self.doctypes = 0
        self.html_opens = 0

    def handle_decl(self, decl: str) -> None:
        self.doctypes += decl.lower().startswith("doctype")

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.html_opens += tag == "html"
        if tag not in _VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"unexpected </{tag}> with open {self.stack[-3:]}")
        else:
            self.stack.pop()


def test_report_is_one_balanced_html_document() -> None:
    doc = _render(_runs())
    parser = _TagBalance()
    parser.feed(doc)
    parser.close()
    assert parser.doctypes == 1
    assert parser.html_opens == 1
    assert parser.errors == []
    assert parser.stack == []


def test_report_references_no_external_resources() -> None:
    doc = _render(_runs())
    assert "http://" not in doc and "https://" not in doc
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", doc)
    assert "<link" not in doc


def test_report_has_at_least_three_svg_charts_that_parse_as_xml() -> None:
    doc = _render(_runs())
    svgs = re.findall(r"<svg\b.*?</svg>", doc, flags=re.S)
    assert len(svgs) >= 3
    for fragment in svgs:
        ET.fromstring(fragment)  # raises on malformed markup or unescaped text


def test_report_names_every_policy_with_text_escaped() -> None:
    doc = _render(_runs())
    assert "hpa:target=0.5" in doc
    assert "ebb:safe" in doc
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in doc
    assert "<script>alert" not in doc
    assert "Simulate &lt;report&gt;" in doc
    assert "synthetic &amp; diurnal" in doc


def test_report_highlights_cheapest_policy_that_meets_the_slo() -> None:
    doc = _render(_runs())
    best_rows = re.findall(r'<tr class="best">(.*?)</tr>', doc, flags=re.S)
    # ebb:safe is cheapest among the two under 0.1 %; the cheaper <script> policy violates the SLO.
    # Its row is highlighted in each of the grouped tables.
    assert len(best_rows) == doc.count("<table><thead>")
    assert all("ebb:safe" in row for row in best_rows)


def test_report_shows_slo_lines_and_units_on_the_axes() -> None:
    doc = _render(_runs())
    assert "TTFT SLO 500 ms" in doc and "e2e SLO 3000 ms" in doc
    assert "time (s)" in doc or "time (min)" in doc
    assert "TTFT p99 (ms, log scale)" in doc and "e2e p99 (ms, log scale)" in doc
    assert "demand (req/s)" in doc and "cost (USD)" in doc and "SLO violations (%)" in doc


def test_report_breaks_lines_at_nan_gaps() -> None:
    doc = _render(_runs(200))
    latency_paths = re.findall(r'<path class="s" d="([^"]*)"[^>]*stroke-width="1.5"', doc)
    assert latency_paths
    # Every 37th bin is NaN, so each latency line is several subpaths.
    assert all(d.count("M") > 3 for d in latency_paths)


def test_report_with_no_runs_is_still_a_document() -> None:
    doc = render_report([], title="empty", trace_desc="none", settings={})
    assert doc.startswith("<!DOCTYPE html>") and doc.endswith("</html>")
    assert "No policy runs" in doc


def test_long_timeline_is_downsampled_small_and_keeps_the_peak_p99() -> None:
    """How long the render takes is ``bench/limits.py``'s (``report-2m-bins``: under 5 s)."""
    n = 2_000_000
    big = _timeline(n, 7, nan_every=1000)
    spike = 987_654.5
    big.ttft_p99_ms[1_234_567] = spike
    other = _timeline(n, 8, nan_every=999)
    runs = [PolicyRun(_card("hpa:target=0.5", gpu_hours=3.0, pct=0.0), big),
            PolicyRun(_card("ebb:safe", gpu_hours=2.0, pct=0.0), other)]
    doc = _render(runs)
    assert len(doc.encode("utf-8")) < 3_000_000
    assert f"max {spike:,.1f} ms" in doc
    assert "downsampled" in doc


def test_write_report_writes_utf8_file(tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    write_report(out, _runs(50), title="t ✓", trace_desc="d", settings={})
    assert "t ✓" in out.read_text(encoding="utf-8")


def test_write_report_names_the_path_when_it_cannot_write(tmp_path: Path) -> None:
    bad = tmp_path / "missing-dir" / "report.html"
    with pytest.raises(InputError, match=re.escape(str(bad))):
        write_report(bad, _runs(50), title="t", trace_desc="d", settings={})


def test_step_path_holds_each_value_until_the_next_sample_and_skips_nan() -> None:
    d = step_path(np.array([0.0, 10.0, 20.0, 30.0]), np.array([1.0, 2.0, np.nan, 4.0]), 40.0)
    assert d == "M0.0,1.0H10.0V2.0H20.0M30.0,4.0H40.0"


def test_line_path_draws_a_lone_point_between_gaps_as_a_dot() -> None:
    d = line_path(np.array([0.0, 1.0, 2.0, 3.0]), np.array([np.nan, 5.0, np.nan, np.nan]))
    assert d == "M1.0,5.0h0"


# --------------------------------------------------------------------------- downsampling properties

_series = hnp.arrays(
    np.float64, st.integers(1, 3000),
    elements=st.one_of(st.floats(-1e6, 1e6, allow_nan=False), st.just(np.nan)),
)


def _input_pairs(t: np.ndarray, y: np.ndarray) -> set[tuple[float, float]]:
    return {(float(a), float(b)) for a, b in zip(t, y, strict=True) if not np.isnan(b)}


@settings(max_examples=200, deadline=None)
@given(y=_series, max_points=st.integers(2, 500))
def test_minmax_downsampling_keeps_extremes_order_and_real_samples(y: np.ndarray, max_points: int) -> None:
    t = np.arange(len(y), dtype=np.float64) * 0.5
    dt, dy = downsample_minmax(t, y, max_points)
    assert len(dy) <= max_points
    assert np.all(np.diff(dt) >= 0)
    finite = ~np.isnan(y)
    if finite.any():
        assert np.nanmax(dy) == y[finite].max()
        assert np.nanmin(dy) == y[finite].min()
    else:
        assert np.isnan(dy).all()
    assert _input_pairs(dt, dy) <= _input_pairs(t, y)


@settings(max_examples=200, deadline=None)
@given(y=_series, max_points=st.integers(1, 500))
def test_max_downsampling_keeps_the_maximum_and_never_invents_values(y: np.ndarray, max_points: int) -> None:
    t = np.arange(len(y), dtype=np.float64)
    dt, dy = downsample_max(t, y, max_points)
    assert len(dy) <= max_points
    assert np.all(np.diff(dt) >= 0)
    finite = ~np.isnan(y)
    if finite.any():
        assert np.nanmax(dy) == y[finite].max()
    else:
        assert np.isnan(dy).all()
    assert _input_pairs(dt, dy) <= _input_pairs(t, y)


def test_downsampling_rejects_mismatched_lengths() -> None:
    with pytest.raises(ValueError, match="equal length"):
        downsample_minmax(np.arange(3.0), np.arange(4.0), 10)


# --------------------------------------------------------------------------- verdict-first layout


def _with_oracle_and_long_spec() -> list[PolicyRun]:
    long_spec = "ebb:profile=balanced,canary=on,min=1,max=40,budget=0.001,slack_fraction=0.5"
    return [*_runs(100), PolicyRun(_card("oracle", gpu_hours=0.5, pct=0.0), _timeline(100, 4)),
            PolicyRun(_card(long_spec, gpu_hours=1.8, pct=0.02), _timeline(100, 5))]


def test_the_verdict_comes_before_any_table_and_names_the_pick_and_the_best_peer() -> None:
    doc = _render(_with_oracle_and_long_spec())
    assert doc.index('id="verdict"') < doc.index("<table")
    verdict = re.search(r'<section class="verdict" id="verdict">(.*?)</section>', doc, flags=re.S)
    assert verdict is not None
    assert "Deploy ebb:profile=balanced" in verdict.group(1)
    assert "best peer (hpa:target=0.5)" in verdict.group(1)
    assert "40.0 % fewer GPU-h" in verdict.group(1)


def test_the_oracle_is_never_highlighted_even_when_cheapest() -> None:
    doc = _render(_with_oracle_and_long_spec())
    best_rows = re.findall(r'<tr class="best">(.*?)</tr>', doc, flags=re.S)
    assert best_rows and all(">P2<" in row and "oracle" not in row for row in best_rows)


def test_long_specs_are_abbreviated_in_tables_and_spelled_out_once_in_a_legend() -> None:
    doc = _render(_with_oracle_and_long_spec())
    legend = re.search(r'<dl class="abbr" id="abbreviations">(.*?)</dl>', doc, flags=re.S)
    assert legend is not None
    assert "<dt>P1</dt><dd>&lt;script&gt;alert(1)&lt;/script&gt;</dd>" in legend.group(1)
    assert "<dt>P2</dt><dd>ebb:profile=balanced,canary=on,min=1,max=40,budget=0.001,slack_fraction=0.5</dd>" in (
        legend.group(1))
    tables = "".join(re.findall(r"<table><thead>.*?</table>", doc, flags=re.S))
    assert "slack_fraction" not in tables


def test_each_latency_chart_draws_one_metric_with_one_line_per_policy() -> None:
    runs = _runs(100)
    doc = _render(runs)
    charts = {label: svg for label, svg in re.findall(r'<svg viewBox="[^"]*" role="img" aria-label="([^"]*)">(.*?)</svg>',
                                                        doc, flags=re.S)}
    for metric in ("TTFT p99", "e2e p99"):
        svg = charts[f"{metric} over time per policy"]
        assert len(re.findall(r'<path class="s"', svg)) == len(runs)


def test_the_slo_legend_swatch_uses_exactly_the_dash_of_the_slo_line() -> None:
    doc = _render(_runs(100))
    line_dashes = set(re.findall(r'<line class="slo"[^>]*stroke-dasharray="([^"]+)"', doc))
    swatches = re.findall(r'<span><svg class="swl"[^>]*><line[^>]*stroke-dasharray="([^"]+)"/></svg>([^<]*SLO[^<]*)'
                          r"</span>", doc)
    assert len(line_dashes) == 1 and swatches
    assert {dash for dash, _ in swatches} == line_dashes


def test_the_cost_violation_chart_marks_the_pareto_set_and_draws_the_peers_frontier() -> None:
    runs = _with_oracle_and_long_spec()
    doc = _render(runs)
    svg = re.search(r'aria-label="GPU-hours against SLO violations per policy">(.*?)</svg>', doc, flags=re.S)
    assert svg is not None
    assert len(re.findall(r'<circle class="pt"', svg.group(1))) == len(runs)
    # (pct, GPU-h): oracle (0, 0.5) dominates every other point, so it alone is the Pareto set.
    assert len(re.findall(r'<circle class="pareto"', svg.group(1))) == 1
    assert "peers' frontier" in svg.group(1) and "P2 — deploy" in svg.group(1)
    ET.fromstring(f"<svg>{svg.group(1)}</svg>")


def test_the_chart_labels_deploy_the_policy_the_verdict_box_names_and_stacks_coinciding_labels() -> None:
    # #35: WVA never scaled and cost what static cost; the box said "Deploy wva", the chart mislabelled static.
    wva = dataclasses.replace(_card("wva", gpu_hours=2.0, pct=0.0), scale_ups=0, scale_downs=0)
    static = dataclasses.replace(_card("static", gpu_hours=2.0, pct=0.0), scale_ups=0, scale_downs=0)
    doc = _render([PolicyRun(wva, _timeline(50, 1)), PolicyRun(static, _timeline(50, 2)),
                   PolicyRun(_card("hpa", gpu_hours=3.0, pct=0.0), _timeline(50, 3))])
    box = re.search(r'<section class="verdict" id="verdict">(.*?)</section>', doc, flags=re.S)
    assert box is not None and "Deploy static:" in box.group(1)
    svg = re.search(r'aria-label="GPU-hours against SLO violations per policy">(.*?)</svg>', doc, flags=re.S)
    assert svg is not None
    labels = re.findall(r'<text class="halo" x="([^"]+)" y="([^"]+)"[^>]*>([^<]*)</text>', svg.group(1))
    deploy = [text for _, _, text in labels if "deploy" in text]
    assert deploy == ["static — deploy"]
    at = {text: (x, float(y)) for x, y, text in labels}
    assert at["wva"][0] == at["static — deploy"][0] and at["wva"][1] > at["static — deploy"][1]


def test_twenty_policies_get_twenty_distinct_styles_in_every_chart_and_legend() -> None:
    # #35: the report's colours repeated past 8 policies.
    runs = [PolicyRun(_card(f"hpa:target=0.{i:02d}", gpu_hours=1.0 + i, pct=0.01 * i), _timeline(40, i))
            for i in range(20)]
    doc = _render(runs)
    charts = dict(re.findall(r'<svg viewBox="[^"]*" role="img" aria-label="([^"]*)">(.*?)</svg>', doc, flags=re.S))
    lines = re.findall(r'<path class="s"[^>]*stroke="([^"]+)"[^>]*?(?:stroke-dasharray="([^"]+)")?>',
                       charts["replicas over time per policy against demand"])
    assert len(lines) == 20 and len(set(lines)) == 20
    points = re.findall(r'<(circle|rect|polygon) class="pt"[^>]*fill="([^"]+)"',
                        charts["GPU-hours against SLO violations per policy"])
    assert len(points) == 20 and len(set(points)) == 20
    legend = re.search(r'<div class="legend">(.*?)</div>', doc, flags=re.S)
    assert legend is not None
    swatches = re.findall(r'<span>(<svg class="swl".*?</svg>)hpa', legend.group(1))
    assert len(swatches) == 20 and len(set(swatches)) == 20
