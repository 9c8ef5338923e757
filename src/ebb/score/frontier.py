"""Frontiers and the cost–violation chart of a comparison.

A frontier is the lower convex hull of the (``slo_violation_pct``, ``gpu_hours``) points of a set
of policies: mixing two settings over time reaches any point on the segment between them, so the
hull is the fairest reading of what those policies can do. Beyond the hull's last point it stays
flat at that point's GPU-hours (more violations buy nothing).

* The **HPA frontier**: every ``hpa`` setting and ``static``.
* The **best-peer frontier**: every setting of every peer autoscaler (:data:`PEER_FAMILIES`: the
  HPA, KEDA, the LLM-serving autoscalers) and ``static`` — what a team could pick instead of Ebb.
  Ebb and the oracle are never members.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ebb.score.svgplot import PALETTE, LinearScale, fmt_num, nice_ticks


HPA_FAMILIES: tuple[str, ...] = ("hpa", "static")
PEER_FAMILIES: tuple[str, ...] = ("hpa", "keda", "static", "kpa", "ray", "keda-vllm", "wva", "dynamo", "aibrix")
"""Policy names whose settings form the best-peer frontier (Ebb and the oracle excluded)."""


def family(policy: str) -> str:
    """The policy name of a scorecard's ``policy`` text (``kpa:target=8`` → ``kpa``)."""
    return policy.split(":")[0]


def _points(cards: Sequence[Mapping[str, Any]],
            families: tuple[str, ...] = HPA_FAMILIES) -> list[tuple[float, float]]:
    pts = [(float(c["slo_violation_pct"]), float(c["gpu_hours"])) for c in cards
           if family(str(c["policy"])) in families and np.isfinite(float(c["slo_violation_pct"]))]
    return sorted(set(pts))


def lower_hull(points: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """Lower convex hull, left to right (Andrew's monotone chain, lower half)."""
    hull: list[tuple[float, float]] = []
    for p in sorted(points):
        while len(hull) >= 2:
            (x1, y1), (x2, y2) = hull[-2], hull[-1]
            if (x2 - x1) * (p[1] - y1) - (y2 - y1) * (p[0] - x1) <= 0:
                hull.pop()
            else:
                break
        hull.append(p)
    # Keep only the non-increasing part: a point right of the minimum costs more and violates more.
    k = int(np.argmin([y for _, y in hull])) if hull else 0
    return hull[:k + 1]


def hpa_frontier_at(cards: Sequence[Mapping[str, Any]], violation_pct: float) -> float:
    """GPU-hours of the HPA frontier at ``violation_pct`` (NaN without HPA/static points)."""
    return frontier_at(cards, violation_pct, HPA_FAMILIES)


def peer_frontier_at(cards: Sequence[Mapping[str, Any]], violation_pct: float) -> float:
    """GPU-hours of the best-peer frontier at ``violation_pct`` (NaN without peer points)."""
    return frontier_at(cards, violation_pct, PEER_FAMILIES)


def best_peer_below(cards: Sequence[Mapping[str, Any]], violation_pct: float) -> Mapping[str, Any] | None:
    """The cheapest single peer setting whose violations do not exceed ``violation_pct`` (None if
    no peer setting is that good): the one configuration a team would deploy instead."""
    ok = [c for c in cards if family(str(c["policy"])) in PEER_FAMILIES
          and float(c["slo_violation_pct"]) <= violation_pct + 1e-12]
    return min(ok, key=lambda c: float(c["gpu_hours"])) if ok else None


def frontier_at(cards: Sequence[Mapping[str, Any]], violation_pct: float, families: tuple[str, ...]) -> float:
    """GPU-hours of the lower hull of ``families``' points at ``violation_pct`` (NaN without points)."""
    hull = lower_hull(_points(cards, families))
    if not hull:
        return float("nan")
    xs = np.array([x for x, _ in hull])
    ys = np.array([y for _, y in hull])
    return float(np.interp(violation_pct, xs, ys))


def frontier_ratios(cards: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """For every policy that is neither ``hpa`` nor ``static``: its GPU-hours over the HPA frontier's at
    its own violation rate (< 1 = cheaper than any HPA mix at the same SLO). Empty without HPA/static
    points; NaN for a policy whose violation rate is not finite."""
    if not _points(cards):
        return {}
    out: dict[str, float] = {}
    for c in cards:
        pol = str(c["policy"])
        if pol.split(":")[0] in ("hpa", "static"):
            continue
        v, gh = float(c["slo_violation_pct"]), float(c["gpu_hours"])
        ref = hpa_frontier_at(cards, v) if np.isfinite(v) else float("nan")
        out[pol] = gh / ref if ref > 0 and np.isfinite(ref) else float("nan")
    return out


_COLORS = {"hpa": PALETTE[0], "keda": PALETTE[1], "static": "#555", "ebb": PALETTE[2], "oracle": "#000",
           "kpa": "#8e44ad", "ray": "#e67e22", "keda-vllm": "#16a085", "wva": "#c0392b", "dynamo": "#76b900",
           "aibrix": "#2c3e50"}


def _families(cards: Sequence[Mapping[str, Any]]) -> list[str]:
    """The policy families present, in first-seen order."""
    return list(dict.fromkeys(family(str(c["policy"])) for c in cards))


def render_frontier_svg(results: Mapping[str, Sequence[Mapping[str, Any]]]) -> str:
    """One panel per trace: every policy as a point (labelled, or coloured by family with a legend
    when a sweep has many), the HPA frontier dashed and — when other peers ran — the best-peer
    frontier solid."""
    w, h, pad = 420, 320, 48
    panels = []
    for i, (name, cards) in enumerate(results.items()):
        xs = [float(c["slo_violation_pct"]) for c in cards]
        ys = [float(c["gpu_hours"]) for c in cards]
        xmax = max(1.0, min(max(xs), 30.0)) * 1.05
        ymax = max(ys) * 1.1
        sx, sy = LinearScale(0.0, xmax, pad, w - 12), LinearScale(0.0, ymax, h - pad, 24)
        parts = [f'<g transform="translate({i * (w + 10)},0)">',
                 f'<text x="{w / 2}" y="16" text-anchor="middle" font-weight="bold">{html.escape(name)}</text>']
        for tx in nice_ticks(0.0, xmax):
            parts.append(f'<line x1="{sx.at(tx):.1f}" x2="{sx.at(tx):.1f}" y1="{h - pad}" y2="24" stroke="#eee"/>'
                         f'<text x="{sx.at(tx):.1f}" y="{h - pad + 14}" font-size="10" text-anchor="middle">'
                         f'{fmt_num(tx)}</text>')
        for ty in nice_ticks(0.0, ymax):
            parts.append(f'<line x1="{pad}" x2="{w - 12}" y1="{sy.at(ty):.1f}" y2="{sy.at(ty):.1f}" stroke="#eee"/>'
                         f'<text x="{pad - 4}" y="{sy.at(ty) + 3:.1f}" font-size="10" text-anchor="end">'
                         f'{fmt_num(ty)}</text>')
        parts.append(f'<text x="{w / 2}" y="{h - 12}" font-size="11" text-anchor="middle">SLO violations (%)</text>'
                     f'<text x="12" y="{h / 2}" font-size="11" transform="rotate(-90 12 {h / 2})" '
                     f'text-anchor="middle">GPU-hours</text>')
        for fams, dash in ((HPA_FAMILIES, "5 3"), (PEER_FAMILIES, "")):
            hull = lower_hull(_points(cards, fams))
            if hull and (fams == HPA_FAMILIES or set(_families(cards)) - set(HPA_FAMILIES) - {"ebb", "oracle"}):
                pts = " ".join(f"{sx.at(min(x, xmax)):.1f},{sy.at(y):.1f}" for x, y in hull)
                last = hull[-1]
                pts += f" {sx.at(xmax):.1f},{sy.at(last[1]):.1f}"
                parts.append(f'<polyline points="{pts}" fill="none" stroke="#888" stroke-dasharray="{dash}"/>')
        many = len(cards) > 16  # a sweep: label only Ebb, static and the oracle, colour the rest by family
        for c, x, y in zip(cards, xs, ys, strict=True):
            pol = str(c["policy"])
            kind = family(pol)
            color = _COLORS.get(kind, PALETTE[3])
            cx, cy = sx.at(min(x, xmax)), sy.at(y)
            label = pol.replace("hpa:target=", "hpa ").replace("ebb:profile=", "ebb ")
            text = "" if many and kind not in ("ebb", "static", "oracle") else (
                f'<text x="{cx + 5:.1f}" y="{cy - 4:.1f}" font-size="9" fill="{color}">{html.escape(label)}</text>')
            parts.append(f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="{3 if many else 4}" fill="{color}"><title>'
                         f'{html.escape(pol)}: {y:.2f} GPU-h, {x:.3f} %</title></circle>{text}')
        if many:
            for j, kind in enumerate(_families(cards)):
                parts.append(f'<circle cx="{w - 90}" cy="{30 + 11 * j}" r="3" fill="{_COLORS.get(kind, PALETTE[3])}"/>'
                             f'<text x="{w - 84}" y="{33 + 11 * j}" font-size="9">{html.escape(kind)}</text>')
        parts.append("</g>")
        panels.append("".join(parts))
    total_w = max(1, len(results)) * (w + 10)
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{total_w}" height="{h}" '
            f'font-family="sans-serif" viewBox="0 0 {total_w} {h}">' + "".join(panels) + "</svg>\n")
