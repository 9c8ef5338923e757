"""The HPA frontier (ebb.score.frontier): lower hull, interpolation, and the SVG chart."""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from typing import Any

import pytest

from ebb.score.frontier import (best_peer_below, frontier_ratios, hpa_frontier_at, lower_hull,
                                peer_frontier_at, render_frontier_svg)

SVG = "{http://www.w3.org/2000/svg}"


def card(policy: str, pct: float, gpu_hours: float) -> dict[str, Any]:
    return {"policy": policy, "slo_violation_pct": pct, "gpu_hours": gpu_hours}


CARDS = [
    card("hpa:target=0.5", 0.0, 10.0),
    card("hpa:target=0.8", 1.0, 6.0),
    card("static", 3.0, 2.0),
    card("hpa:target=0.95", 4.0, 3.0),  # right of the cheapest point: costs more, violates more
    card("ebb", 0.5, 1.0),  # not an HPA setting: never on the frontier
    card("ebb:profile=lean", 2.0, 0.8),
    card("keda:threshold=40", 0.1, 0.1),
    card("oracle", 0.0, 0.5),
]


def test_lower_hull_drops_dominated_and_non_convex_points_and_the_rising_tail() -> None:
    pts = [(0.0, 10.0), (1.0, 6.0), (1.5, 9.0), (2.0, 5.0), (3.0, 2.0), (4.0, 3.0)]
    # (1.5, 9) lies above the hull, (2, 5) above the segment (1, 6)–(3, 2), (4, 3) right of the minimum.
    assert lower_hull(pts) == [(0.0, 10.0), (1.0, 6.0), (3.0, 2.0)]


def test_lower_hull_sorts_its_input_and_handles_tiny_inputs() -> None:
    assert lower_hull([(3.0, 2.0), (0.0, 10.0), (1.0, 6.0)]) == [(0.0, 10.0), (1.0, 6.0), (3.0, 2.0)]
    assert lower_hull([]) == []
    assert lower_hull([(1.0, 1.0)]) == [(1.0, 1.0)]
    assert lower_hull([(0.0, 1.0), (2.0, 5.0)]) == [(0.0, 1.0)]  # the second costs and violates more


def test_lower_hull_is_non_increasing_and_convex() -> None:
    pts = [(x / 2, 10.0 / (1 + x) + (x % 3)) for x in range(12)]
    hull = lower_hull(pts)
    ys = [y for _, y in hull]
    assert ys == sorted(ys, reverse=True)
    for (x1, y1), (x2, y2), (x3, y3) in zip(hull, hull[1:], hull[2:]):
        assert (x2 - x1) * (y3 - y1) - (y2 - y1) * (x3 - x1) > 0  # strictly turning left
    for x, y in pts:  # every point lies on or above the hull within its span
        if hull[0][0] <= x <= hull[-1][0]:
            assert y >= hpa_frontier_at([card("hpa", hx, hy) for hx, hy in hull], x) - 1e-9


def test_the_frontier_interpolates_between_hull_points() -> None:
    assert hpa_frontier_at(CARDS, 0.0) == 10.0
    assert hpa_frontier_at(CARDS, 0.5) == pytest.approx(8.0)
    assert hpa_frontier_at(CARDS, 1.0) == pytest.approx(6.0)
    assert hpa_frontier_at(CARDS, 2.0) == pytest.approx(4.0)


def test_the_frontier_is_flat_beyond_its_last_point() -> None:
    assert hpa_frontier_at(CARDS, 3.0) == pytest.approx(2.0)
    assert hpa_frontier_at(CARDS, 4.0) == pytest.approx(2.0)  # not the 3.0 GPU-h of the rising point
    assert hpa_frontier_at(CARDS, 50.0) == pytest.approx(2.0)


def test_the_frontier_uses_only_hpa_and_static_cards() -> None:
    assert math.isnan(hpa_frontier_at([c for c in CARDS if not c["policy"].startswith(("hpa", "static"))], 1.0))
    assert math.isnan(hpa_frontier_at([], 1.0))
    only_static = [card("static", 0.0, 5.0), card("ebb", 0.0, 1.0), card("oracle", 0.0, 0.5)]
    assert hpa_frontier_at(only_static, 0.0) == 5.0 and hpa_frontier_at(only_static, 7.0) == 5.0


def test_render_frontier_svg_is_one_well_formed_svg_with_a_panel_per_trace_and_every_label() -> None:
    other = [card("hpa:target=0.5", 0.2, 4.0), card("static", 0.0, 9.0), card("ebb", 40.0, 1.5)]
    svg = render_frontier_svg({"azure-code": CARDS, "azure <conv> & co": other})
    assert svg.count("<svg") == 1 and svg.endswith("</svg>\n")
    root = ET.fromstring(svg)
    assert root.tag == f"{SVG}svg"
    panels = [g for g in root if g.tag == f"{SVG}g"]
    assert len(panels) == 2
    assert [p.get("transform") for p in panels] == ["translate(0,0)", "translate(430,0)"]
    titles = [[t.text for t in p.findall(f"{SVG}text") if t.get("font-weight") == "bold"] for p in panels]
    assert titles == [["azure-code"], ["azure <conv> & co"]]
    labels = {t.text for t in panels[0].iter(f"{SVG}text")}
    assert {"hpa 0.5", "hpa 0.8", "hpa 0.95", "static", "ebb", "ebb lean", "keda:threshold=40", "oracle"} <= labels
    assert len(panels[0].findall(f"{SVG}circle")) == len(CARDS)
    assert len(panels[1].findall(f"{SVG}circle")) == len(other)
    # the HPA frontier dashed in each panel; the best-peer frontier solid where another peer (KEDA) ran
    dashes = [[line.get("stroke-dasharray") for line in p.findall(f"{SVG}polyline")] for p in panels]
    assert dashes == [["5 3", ""], ["5 3"]]
    tips = {(c.findtext(f"{SVG}title") or "").split(":")[0] for c in panels[0].iter(f"{SVG}circle")}
    assert "hpa" in tips and "ebb" in tips


def test_frontier_ratios_compare_each_non_hpa_policy_with_the_hull_at_its_own_violation_rate() -> None:
    ratios = frontier_ratios(CARDS)
    assert set(ratios) == {"ebb", "ebb:profile=lean", "keda:threshold=40", "oracle"}
    assert ratios["ebb"] == pytest.approx(1.0 / hpa_frontier_at(CARDS, 0.5))
    assert ratios["oracle"] == pytest.approx(0.5 / 10.0)  # at 0 % violations the hull starts at 10 GPU-h


def test_frontier_ratios_are_empty_without_an_hpa_or_static_point_and_nan_for_a_nan_rate() -> None:
    assert frontier_ratios([card("ebb", 0.1, 1.0), card("oracle", 0.0, 0.5)]) == {}
    ratios = frontier_ratios([card("static", 0.0, 4.0), card("ebb", float("nan"), 1.0)])
    assert math.isnan(ratios["ebb"])


def test_the_best_peer_frontier_takes_every_peer_but_never_ebb_or_the_oracle() -> None:
    cards = [card("hpa:target=0.5", 0.0, 10.0), card("kpa:target=8", 1.0, 5.0), card("ray", 2.0, 6.0),
             card("ebb", 0.5, 1.0), card("oracle", 0.0, 0.5)]
    assert hpa_frontier_at(cards, 1.0) == 10.0
    assert peer_frontier_at(cards, 0.0) == 10.0
    assert peer_frontier_at(cards, 0.5) == pytest.approx(7.5)
    assert peer_frontier_at(cards, 3.0) == 5.0  # flat past the cheapest point: ray's costlier point is off the hull


def test_the_best_single_peer_is_the_cheapest_setting_within_the_violation_level() -> None:
    cards = [card("hpa:target=0.5", 0.0, 10.0), card("kpa:target=8", 1.0, 5.0), card("ebb", 0.1, 1.0)]
    best = best_peer_below(cards, 0.5)
    assert best is not None and best["policy"] == "hpa:target=0.5"
    best = best_peer_below(cards, 1.0)
    assert best is not None and best["policy"] == "kpa:target=8"
    assert best_peer_below([card("ebb", 0.0, 1.0)], 5.0) is None
